"""DeepSpeed's compiled CPU op: one cache folder per Python environment, and a build that a killed process cannot
block.

On CPU, DeepSpeed compiles its shared-memory collectives op (``deepspeed_shm_comm``) with torch's JIT extension
loader the first time a learner group starts (about a minute), into ``TORCH_EXTENSIONS_DIR/deepspeed_shm_comm``.

* **One folder per environment.** torch rebuilds an op whose build file changed, and the build file names the
  environment's own torch headers: two virtual environments sharing one folder would rebuild each other's op (and
  could load a library built against the other's torch). :func:`extensions_dir` is therefore
  ``ROOT/py311-torch2.13.0-deepspeed0.19.8-<hash of sys.prefix>``, ROOT being ``TORCH_EXTENSIONS_DIR`` or
  ``~/.cache/turnrl/torch_extensions``. The prefix as Python reached it, links not resolved: the build file names
  torch's headers by that path, so a link to a venv (a second checkout's ``.venv`` pointing at the first's) is a
  folder of its own too — sharing one, each would rebuild the op after the other (about a minute, in the middle of
  the first learner group's start).
* **No stale lock.** torch marks a build in progress with a ``lock`` file that records no owner, and every later
  loader waits for it to disappear — forever when its process was killed mid-build (a learner group then fails
  with "did not finish setup within learner.timeout"). :func:`build_guard` holds an ``flock`` of its own
  (``<op>.owner``, beside the build folder) around the load; the operating system releases it when its process
  dies. Whoever holds it is the only turnrl process that can be building, so a torch ``lock`` found then was left
  by a dead process: it is removed (or, where it cannot be, the error names the file to remove).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

logger = logging.getLogger(__name__)

CPU_OP = "deepspeed_shm_comm"  # DeepSpeed's ShareMemCommBuilder.NAME


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "none"


def environment_tag(prefix: str | None = None) -> str:
    """``py311-torch2.13.0-deepspeed0.19.8-1a2b3c4d``: the Python, torch and DeepSpeed versions of this environment
    and a hash of its ``sys.prefix`` as reached, links not resolved (two virtual environments, or two paths to one,
    never share a tag: torch's build file names the headers by that path)."""
    prefix = sys.prefix if prefix is None else prefix
    digest = hashlib.sha256(os.path.abspath(prefix).encode()).hexdigest()[:8]
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return f"{py}-torch{_version('torch')}-deepspeed{_version('deepspeed')}-{digest}".replace("+", "_")


def extensions_dir() -> Path:
    """Where this environment's compiled DeepSpeed ops are kept: ``ROOT/environment_tag()``, ROOT being
    ``TORCH_EXTENSIONS_DIR`` or ``~/.cache/turnrl/torch_extensions`` (a ``TORCH_EXTENSIONS_DIR`` that already ends
    in the tag, as in a learner rank, is kept)."""
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "turnrl" / "torch_extensions")
    tag = environment_tag()
    return root if root.name == tag else root / tag


def _holder(owner: Path) -> str:
    try:
        pid = owner.read_text().strip()
    except OSError:
        pid = ""
    return f"process {pid}" if pid else "another process"


@contextmanager
def build_guard(build_dir: Path, timeout: float | None = None, report_every: float = 30.0) -> Iterator[None]:
    """Hold this machine's one right to build (or load) the op of ``build_dir``; clear the torch ``lock`` file a
    dead builder left there.

    Args:
        build_dir: the op's build folder (``TORCH_EXTENSIONS_DIR/NAME``); created if missing.
        timeout: seconds to wait for a living builder (None: as long as it takes; it logs who it waits for).
        report_every: seconds between those log lines.

    Raises:
        TimeoutError: a living process held the right for ``timeout`` seconds (the message names it).
        RuntimeError: a stale ``lock`` could not be removed (the message names the file to remove).
    """
    build_dir.mkdir(parents=True, exist_ok=True)
    owner = build_dir.with_name(build_dir.name + ".owner")
    fd = os.open(owner, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        start = last = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            waited = time.monotonic() - start
            if timeout is not None and waited >= timeout:
                raise TimeoutError(
                    f"{_holder(owner)} has been building {build_dir.name} in {build_dir} for over "
                    f"{timeout:g} s (it holds {owner}); wait for it, or stop it"
                )
            if time.monotonic() - last >= report_every:
                last = time.monotonic()
                logger.info("waiting %.0f s for %s, which is building %s", waited, _holder(owner), build_dir)
            time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        clear_stale_lock(build_dir)
        yield
    finally:
        os.close(fd)  # releases the flock


def clear_stale_lock(build_dir: Path) -> bool:
    """Remove torch's ``lock`` in ``build_dir``; call it only under :func:`build_guard` (then its writer is dead).
    Returns whether there was one.

    Raises:
        RuntimeError: it could not be removed; the message names the file.
    """
    lock = build_dir / "lock"
    if not lock.exists():
        return False
    try:
        lock.unlink()
    except FileNotFoundError:
        return False
    except OSError as e:
        raise RuntimeError(
            f"{lock} was left by a process that died while compiling {build_dir.name}, and every "
            f"later build waits for it; it could not be removed ({e}): remove it by hand "
            f"(rm {lock})"
        ) from e
    logger.warning(
        "removed %s: left by a process that died while compiling %s (no living process held %s)",
        lock,
        build_dir.name,
        build_dir.with_name(build_dir.name + ".owner"),
    )
    return True


def load_cpu_op(folder: Path | None = None, timeout: float | None = None) -> Path | None:
    """Build or load DeepSpeed's shared-memory CPU op under :func:`build_guard`, in ``folder`` (default
    :func:`extensions_dir`), which becomes this process's ``TORCH_EXTENSIONS_DIR``. DeepSpeed's own load later finds
    the op loaded. Returns the op's build folder, or None where DeepSpeed does not use the op here."""
    folder = extensions_dir() if folder is None else Path(folder)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return None
    with build_guard(folder / builder.NAME, timeout):
        builder.load(verbose=False)
    return folder / builder.NAME


if __name__ == "__main__":  # scripts/setup.sh: build the op once, where this environment's learner groups look
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    built = load_cpu_op()
    print(f"DeepSpeed's CPU op is in {built}" if built else "DeepSpeed's CPU op is not used here", file=sys.stderr)
