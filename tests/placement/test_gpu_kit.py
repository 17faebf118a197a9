"""scripts/gpu_kit.py, up to the package index: which dependencies it packs, and Ray stripped of what turnrl never
starts (the download itself and the GPU machine are outside this test)."""

import importlib.util
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_kit.py"


@pytest.fixture(scope="module")
def kit():
    spec = importlib.util.spec_from_file_location("gpu_kit", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ left in scripts/
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = dont_write
    return module


def test_the_kit_packs_what_the_gpu_machine_lacks_and_nothing_it_has(kit):
    need = kit.closure(["turnrl"], {"torch", "ray", "deepspeed", "transformers", "numpy"})
    assert {"pydantic", "pydantic-core", "gymnasium", "math-verify"} <= set(need)  # turnrl's and their own
    assert not {"torch", "ray", "transformers", "numpy"} & set(need)
    assert all(v and v[0].isdigit() for v in need.values())  # each at the version this Python holds
    fewer = kit.closure(["turnrl"], {"torch", "ray", "deepspeed", "transformers", "numpy", "pydantic"})
    assert "pydantic" not in fewer and "pydantic-core" not in fewer  # what only a held package needs stays out
    assert kit.norm("Typing_Inspection") == kit.norm("typing.inspection") == "typing-inspection"


def test_ray_is_stripped_of_what_turnrl_never_starts_and_keeps_its_binaries_runnable(kit, tmp_path):
    wheel = tmp_path / "ray-9.9.9-cp312-cp312-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in [
            "ray/__init__.py",
            "ray/jars/ray_dist.jar",
            "ray/rllib/algo.py",
            "ray/dashboard/client/x.js",
            "ray/dashboard/agent.py",
            "ray/data/read.py",
            "ray-9.9.9.dist-info/METADATA",
        ]:
            z.writestr(name, f"# {name}")
        binary = zipfile.ZipInfo("ray/core/src/ray/raylet/raylet")
        binary.external_attr = 0o755 << 16
        z.writestr(binary, b"\x7fELF")
    kit.strip_ray(wheel, tmp_path / "ray.tar.xz")
    with tarfile.open(tmp_path / "ray.tar.xz") as tar:
        kept = {m.name: m for m in tar.getmembers()}
        assert set(kept) == {
            "ray/__init__.py",
            "ray/dashboard/agent.py",
            "ray-9.9.9.dist-info/METADATA",
            "ray/core/src/ray/raylet/raylet",
        }
        assert kept["ray/core/src/ray/raylet/raylet"].mode == 0o755  # the raylet must stay executable
        assert tar.extractfile("ray/__init__.py").read() == b"# ray/__init__.py"


def test_a_gpu_machine_package_outside_turnrls_pins_is_named(kit):
    assert kit.outside_pins({"transformers": "4.0.0", "gymnasium": "1.4.0"}) == [
        "the GPU machine's transformers 4.0.0 is outside turnrl's <5.20,>=5.16"
    ]
    assert kit.outside_pins({"transformers": "5.17.0+local", "torch": "2.11.0+cu130"}) == []  # torch: the machine's
