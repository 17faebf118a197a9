"""DeepSpeed's CPU op (turnrl/rl/placement/extensions.py): a process killed while building it leaves torch's `lock`
file behind, and every later loader used to wait for it forever; two virtual environments shared one folder."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from turnrl.rl.placement.extensions import CPU_OP, build_guard, environment_tag, extensions_dir

REPO = Path(__file__).resolve().parents[2]

# Takes the guard, then creates torch's lock exactly as torch's JIT loader does at the start of a build, and hangs.
BUILDER = """
import sys, time
from pathlib import Path
from torch.utils.file_baton import FileBaton
from turnrl.rl.placement.extensions import build_guard

build_dir = Path(sys.argv[1])
with build_guard(build_dir):
    assert FileBaton(str(build_dir / "lock")).try_acquire()
    print("building", flush=True)
    time.sleep(600)
"""


def _start_builder(build_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", BUILDER, str(build_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "building"
    assert (build_dir / "lock").exists()
    return proc


@pytest.fixture(scope="module")
def built_op() -> Path:
    """This environment's built op (built here once, about a minute, where setup.sh did not already)."""
    folder = extensions_dir() / CPU_OP
    if not (folder / f"{CPU_OP}.so").is_file():
        code = "from turnrl.rl.placement.extensions import load_cpu_op; load_cpu_op()"
        subprocess.run(
            [sys.executable, "-c", code], check=True, timeout=900, env={**os.environ, "DS_ACCELERATOR": "cpu"}
        )
    return folder


def test_a_build_killed_midway_does_not_block_the_next_load(tmp_path, built_op):
    folder = tmp_path / environment_tag()
    shutil.copytree(built_op, folder / CPU_OP, ignore=shutil.ignore_patterns("lock"))  # mtimes kept: up to date
    proc = _start_builder(folder / CPU_OP)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert (folder / CPU_OP / "lock").exists()  # what the killed build left
    # A learner rank's load, in a new process: before, torch's loader waited on that lock for ever.
    code = (
        "import logging; logging.basicConfig(level=logging.INFO)\nimport sys\n"
        "from turnrl.rl.placement.extensions import load_cpu_op\nprint(load_cpu_op(sys.argv[1]))\n"
        "import deepspeed.ops.op_builder.builder as b\nprint(b.OpBuilder._loaded_ops['deepspeed_shm_comm'].__file__)"
    )
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "DS_ACCELERATOR": "cpu"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert time.monotonic() - start < 120  # imports only: the copied op is up to date, so nothing compiles
    assert out.stdout.splitlines() == [str(folder / CPU_OP), str(folder / CPU_OP / f"{CPU_OP}.so")]
    assert f"removed {folder / CPU_OP / 'lock'}: left by a process that died while compiling {CPU_OP}" in out.stderr
    assert not (folder / CPU_OP / "lock").exists()


def test_a_living_builder_is_waited_for_never_robbed(tmp_path):
    build_dir = tmp_path / CPU_OP
    proc = _start_builder(build_dir)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=rf"process {proc.pid} has been building {CPU_OP} .* for over 1 s"):
            with build_guard(build_dir, timeout=1):
                pass
        assert time.monotonic() - start < 10
        assert (build_dir / "lock").exists()  # its build goes on
    finally:
        proc.kill()
        proc.wait(timeout=30)
    with build_guard(build_dir, timeout=5):  # dead now: the guard is free at once and the lock is gone
        assert not (build_dir / "lock").exists()


def test_two_virtual_environments_get_two_folders(tmp_path):
    """A second venv (its own sys.prefix) running the same turnrl and torch: a folder of its own, so neither
    rebuilds the other's op (torch rebuilds when the build file, which names the venv's torch headers, changes)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv2")], check=True, timeout=120)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    code = "from turnrl.rl.placement.extensions import extensions_dir; print(extensions_dir())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), site])}
    env.pop("TORCH_EXTENSIONS_DIR", None)
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    there = subprocess.run(
        [str(tmp_path / "venv2" / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert here.returncode == 0 and there.returncode == 0, here.stderr + there.stderr
    a, b = Path(here.stdout.strip()), Path(there.stdout.strip())
    assert a.parent == b.parent == Path.home() / ".cache" / "turnrl" / "torch_extensions"
    assert a != b and a.name.startswith(f"py{sys.version_info.major}{sys.version_info.minor}-torch")
    # this venv reached through a link (a second checkout's .venv pointing at this one): its own folder too, as
    # torch's build file names the headers by the linked path (one folder: each rebuilds after the other)
    (tmp_path / "link").symlink_to(sys.prefix, target_is_directory=True)
    linked = subprocess.run(
        [str(tmp_path / "link" / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert linked.returncode == 0, linked.stderr
    assert Path(linked.stdout.strip()) not in (a, b)
    # a rank is given the folder itself as TORCH_EXTENSIONS_DIR: it is kept, not nested
    nested = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "TORCH_EXTENSIONS_DIR": str(a)},
    )
    assert nested.stdout.strip() == str(a)
