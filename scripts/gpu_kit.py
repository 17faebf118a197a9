"""Pack what ``scripts/test_gpu.sh`` needs on a GPU machine that has no package index (an offline GPU box, a
cluster node without internet, a lent machine), into ``.gpu-kit`` beside the repository; copy that folder there.

Run it here, with turnrl's ``.venv`` (the kit takes its versions from it) and access to the package index::

    .venv/bin/python scripts/gpu_kit.py --have have.txt            # have.txt: `python3 -m pip list --format=freeze`
    .venv/bin/python scripts/gpu_kit.py --have have.txt --ray --deepspeed   # also Ray (stripped) and DeepSpeed

``--have`` lists the packages the GPU machine's Python already holds (one per line, ``name`` or ``name==version``;
run ``python3 -m pip list --format=freeze`` there); the kit holds the rest of turnrl's dependencies (and theirs,
without torch), at the versions of ``.venv``, as wheels for the GPU machine's Python (``--python 3.12``) in
``.gpu-kit/wheels``; a package the machine holds at a version outside turnrl's pins (torch aside) is named in a
warning. ``--ray`` adds Ray without what turnrl never starts (its Java jars, the dashboard's web client,
RLlib, Data, Serve, Tune, Train, LLM) as an xz archive ``.gpu-kit/ray.tar.xz`` (a full Ray wheel is about 80 MB);
``--deepspeed`` builds DeepSpeed's pure-Python wheel (its CUDA ops are compiled on the GPU machine when first used,
with the nvcc and ninja there). The built-in model's tokenizer goes to ``.gpu-kit/tokenizer`` (for
``bench/gpu_costs.py``; the GPU checks build their models from shapes, so the 93 MB of GGUF weights stay here).
vLLM is not packed: its wheel is several hundred MB and pins its own torch.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as norm  # a distribution name as the index compares them (PEP 503)
from packaging.version import InvalidVersion

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64", "any"]
RAY_UNUSED = ("jars/", "dashboard/client/", "rllib/", "data/", "serve/", "tune/", "train/", "llm/")


def for_extra(req: Requirement) -> bool:
    """Whether ``req`` is needed only with an extra (``; extra == "..."``), which the kit leaves out."""
    return req.marker is not None and "extra" in str(req.marker)


def closure(roots: list[str], have: set[str]) -> dict[str, str]:
    """``{name: version in this Python}`` of the distributions ``roots`` need (run-time requirements, no extras),
    transitively, leaving out ``have`` and what they need."""
    need: dict[str, str] = {}
    seen = set(have)
    todo = list(roots)
    while todo:
        try:
            reqs = requires(todo.pop()) or []
        except PackageNotFoundError:
            continue
        for req in map(Requirement, reqs):
            name = norm(req.name)
            if for_extra(req) or name in seen:
                continue
            seen.add(name)
            try:
                need[name] = version(name)
            except PackageNotFoundError:  # a requirement this Python's markers left out (e.g. a backport)
                continue
            todo.append(name)
    return need


def outside_pins(have: dict[str, str]) -> list[str]:
    """turnrl's own requirements that the GPU machine's versions (``have``: name → version, where known) miss, as
    sentences: those packages are used as they are there, so a mismatch is worth knowing before the run."""
    out = []
    for text in requires("turnrl") or []:
        req = Requirement(text)
        name = norm(req.name)
        held = have.get(name)
        # torch: the machine's CUDA torch is the point, whatever its version
        if for_extra(req) or not held or not req.specifier or name == "torch":
            continue
        try:
            if not req.specifier.contains(held.split("+")[0], prereleases=True):
                out.append(f"the GPU machine's {req.name} {held} is outside turnrl's {req.specifier}")
        except InvalidVersion:
            continue
    return out


def download(pins: list[str], dest: Path, python: str) -> None:
    """Binary wheels of ``pins`` (no dependencies) for ``python`` on x86-64 Linux, into ``dest``."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--dest",
        str(dest),
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
    ]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + pins, check=True)


def strip_ray(wheel: Path, out: Path) -> None:
    """Ray's wheel as an xz tar of its files, without ``RAY_UNUSED`` (unpacked into a folder on ``PYTHONPATH``)."""
    with zipfile.ZipFile(wheel) as z, tarfile.open(out, "w:xz") as tar:
        for info in z.infolist():
            if info.is_dir() or any(info.filename.startswith("ray/" + part) for part in RAY_UNUSED):
                continue
            item = tarfile.TarInfo(info.filename)
            data = z.read(info)
            item.size, item.mode = len(data), ((info.external_attr >> 16) & 0o7777) or 0o644
            tar.addfile(item, io.BytesIO(data))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--have",
        required=True,
        type=Path,
        help="the GPU machine's packages: `python3 -m pip list --format=freeze` run there",
    )
    ap.add_argument("--python", default="3.12", help="the GPU machine's Python version (default 3.12)")
    ap.add_argument("--ray", action="store_true", help="also pack Ray, stripped (.gpu-kit/ray.tar.xz)")
    ap.add_argument("--deepspeed", action="store_true", help="also build DeepSpeed's pure-Python wheel")
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu-kit")
    args = ap.parse_args()
    held: dict[str, str] = {}  # name → version ("" where the line gives none)
    for line in args.have.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, ver = line.strip().partition("==")
            held[norm(re.split(r"[ <>@]", name, maxsplit=1)[0])] = ver
    have = set(held)
    for warning in outside_pins({n: v for n, v in held.items() if v}):
        print(f"warning: {warning}", file=sys.stderr)
    if "torch" not in have:
        ap.error(f"{args.have} lists no torch: the kit expects a GPU machine whose Python has CUDA torch")
    have |= {"torch", "ray", "deepspeed"}  # torch is the machine's; Ray and DeepSpeed only on request, below
    need = closure(["turnrl"], have)
    extra = [("ray", args.ray), ("deepspeed", args.deepspeed)]
    for name, wanted in extra:
        if wanted:
            need.update(closure([name], have | set(need)))
    shutil.rmtree(args.out, ignore_errors=True)
    wheels = args.out / "wheels"
    wheels.mkdir(parents=True)
    download(sorted(f"{n}=={v}" for n, v in need.items()), wheels, args.python)
    if args.ray:
        raw = args.out / "ray-wheel"
        download([f"ray=={version('ray')}"], raw, args.python)
        strip_ray(next(raw.glob("ray-*.whl")), args.out / "ray.tar.xz")
        shutil.rmtree(raw)
    if args.deepspeed:  # DS_BUILD_OPS=0: no op built now; the GPU machine compiles the ones it uses. The build
        # runs on this CPU machine (DS_ACCELERATOR=cpu); at run time DeepSpeed detects the GPU itself.
        env = {**os.environ, "DS_BUILD_OPS": "0", "DS_ACCELERATOR": "cpu"}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "--wheel-dir",
                str(wheels),
                f"deepspeed=={version('deepspeed')}",
            ],
            check=True,
            env=env,
        )
    from transformers import AutoTokenizer

    from turnrl.agents.models import resolve_model_path

    AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct")).save_pretrained(args.out / "tokenizer")
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(
        f"{len(list(wheels.iterdir()))} wheels for Python {args.python}"
        + (", Ray stripped" if args.ray else "")
        + f": {size / 2**20:.1f} MiB in {args.out}"
    )
    for p in sorted(wheels.iterdir()):
        print(f"  {p.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
