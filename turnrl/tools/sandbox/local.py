"""LocalSandbox: untrusted Python under bubblewrap, with resource limits and a wall-clock timeout.

Each run gets:

* a fresh, size-limited tmpfs as its working directory ``/sandbox`` (``main.py`` and the given files are copied
  in; nothing on the host is writable), a private ``/tmp``, a read-only view of ``/usr`` only (no ``/etc``, no
  home directories, no project checkout), a fresh ``/proc`` and ``/dev``;
* new namespaces for everything (no network, its own PID namespace: when the program ends, every process it
  started dies with it), a new session (no terminal, no signals to the parent's group), no inherited environment;
* rlimits: CPU seconds, address space, file size, open files and, when running as root, a dedicated unprivileged
  user per concurrent run so the process limit counts only that run's processes;
* a wall-clock timeout that kills the whole process group, and stdout/stderr capped (truncation is marked).

Without bubblewrap it refuses to run, unless ``allow_weak=True`` opts into an rlimit-only mode with no
filesystem or network isolation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from turnrl.tools.sandbox.base import ExecResult, SandboxUnavailable, check_files
from turnrl.utils import Shared, run_sync

BWRAP_INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


def _default_python() -> str:
    # The system interpreter lives under /usr, which the sandbox can see; a pyenv/venv interpreter under a home
    # directory would need that directory exposed.
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate):
            return candidate
    return os.path.realpath(sys.executable)


def _count_processes(uid: int) -> int:
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    n += 1
    return n


class _Capped:
    """Collects up to ``limit`` bytes of a stream, then counts (and discards) the rest."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.total = limit, bytearray(), 0

    async def drain(self, stream: asyncio.StreamReader, on_flood: Callable[[], None], flood: int) -> None:
        while chunk := await stream.read(65536):
            self.total += len(chunk)
            room = self.limit - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if self.total > flood:
                on_flood()

    def text(self) -> tuple[str, bool]:
        text = self.data.decode("utf-8", errors="replace")
        truncated = self.total > self.limit
        if truncated:
            text += f"\n[... output truncated: {self.total - self.limit} more bytes ...]"
        return text, truncated


class LocalSandbox(Shared):
    """Run untrusted Python code locally under bubblewrap (see the module docstring).

    Args:
        python: the interpreter to run inside (must live under ``/usr`` unless ``extra_ro_binds`` exposes it);
            default the system ``python3``.
        cpu_seconds: CPU-time limit per process.
        memory_mb: address-space limit per process.
        file_size_mb: largest file a program may write.
        disk_mb: size of the working-directory tmpfs (and of the private ``/tmp``).
        max_processes: processes (and threads) one run may have at once.
        output_limit: bytes kept of stdout and of stderr each; a run printing 64 times more is killed.
        max_concurrency: runs at once (more wait their turn).
        allow_weak: without bubblewrap, run with rlimits only (no filesystem/network isolation) instead of refusing.
        extra_ro_binds: more host paths to expose read-only at the same place (e.g. a virtualenv).
        uid_base: first of the unprivileged user ids used for runs when turnrl runs as root.
        proc: mount a ``/proc`` for the program. Without one it cannot read its own memory through
            ``/proc/self/mem`` (what the code-test sandbox wants: see :func:`default_test_sandbox`).
    """

    def __init__(
        self,
        *,
        python: str | None = None,
        cpu_seconds: int = 10,
        memory_mb: int = 1024,
        file_size_mb: int = 16,
        disk_mb: int = 64,
        max_processes: int = 32,
        output_limit: int = 64 * 1024,
        max_concurrency: int = 8,
        allow_weak: bool = False,
        extra_ro_binds: tuple[str, ...] = (),
        uid_base: int = 61000,
        proc: bool = True,
    ) -> None:
        self.bwrap = shutil.which("bwrap")
        if self.bwrap is None and not allow_weak:
            raise SandboxUnavailable(
                f"LocalSandbox needs bubblewrap ('bwrap' not found on PATH): {BWRAP_INSTALL_HINT}. "
                "To run anyway with resource limits only (no filesystem or network isolation), pass allow_weak=True."
            )
        self.python = python or _default_python()
        self.cpu_seconds, self.memory_mb, self.file_size_mb = cpu_seconds, memory_mb, file_size_mb
        self.disk_mb, self.max_processes, self.output_limit = disk_mb, max_processes, output_limit
        self.extra_ro_binds = tuple(extra_ro_binds)
        self.proc = proc
        self.weak = self.bwrap is None
        self.as_root = os.geteuid() == 0
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(max_concurrency):
            self._slots.put(uid_base + i)

    # ---- the command ----

    def _command(self, files: dict[str, str], fds: dict[str, int]) -> list[str]:
        if self.weak:
            return [self.python, "-I", "main.py"]
        assert self.bwrap is not None  # weak: without bwrap
        size = str(self.disk_mb * 1024 * 1024)
        cmd = [
            self.bwrap,
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--symlink",
            "usr/sbin",
            "/sbin",
            "--dev",
            "/dev",
            *(["--proc", "/proc"] if self.proc else []),
            "--size",
            size,
            "--tmpfs",
            "/tmp",
            "--size",
            size,
            "--tmpfs",
            "/sandbox",
        ]
        for path in self.extra_ro_binds:
            cmd += ["--ro-bind", path, path]
        for name in sorted({str(Path(n).parent) for n in fds if str(Path(n).parent) != "."}):
            cmd += ["--dir", f"/sandbox/{name}"]
        for name, fd in fds.items():
            cmd += ["--file", str(fd), f"/sandbox/{name}"]
        cmd += [
            "--chdir",
            "/sandbox",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "HOME",
            "/sandbox",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "PYTHONDONTWRITEBYTECODE",
            "1",
            self.python,
            "-I",
            "main.py",
        ]
        return cmd

    def _preexec(self, uid: int | None) -> Callable[[], None]:
        cpu, mem = self.cpu_seconds, self.memory_mb * 1024 * 1024
        fsize, nproc = self.file_size_mb * 1024 * 1024, self.max_processes

        def limit() -> None:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                procs = nproc
            else:  # not root: the process limit counts all of this user's processes
                procs = _count_processes(os.getuid()) + nproc
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
            resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        return limit

    # ---- running ----

    def run(
        self, code: str, *, timeout: float = 10.0, stdin: str = "", files: dict[str, str] | None = None
    ) -> ExecResult:
        """Run ``code`` as ``main.py`` in a fresh sandbox directory that also holds ``files``."""
        return run_sync(self.arun(code, timeout=timeout, stdin=stdin, files=files))

    async def arun(
        self, code: str, *, timeout: float = 10.0, stdin: str = "", files: dict[str, str] | None = None
    ) -> ExecResult:
        """Async :meth:`run`; many can run at once (up to ``max_concurrency``, the rest wait)."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        extra = check_files(files)
        slot = await asyncio.to_thread(self._slots.get)
        try:
            return await self._run(code, extra, timeout, stdin, slot)
        finally:
            self._slots.put(slot)

    async def _run(self, code: str, files: dict[str, str], timeout: float, stdin: str, slot: int) -> ExecResult:
        scratch = Path(tempfile.mkdtemp(prefix="turnrl-sbx-"))
        handles = []
        try:
            contents = {"main.py": code, **files}
            for name, text in contents.items():
                path = scratch / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            if self.weak:
                fds: dict[str, int] = {}
                cwd = str(scratch)
                if self.as_root:
                    for p in [scratch, *scratch.rglob("*")]:  # noqa: ASYNC240 — a few scratch files, microseconds
                        os.chown(p, slot, slot)
            else:
                # closed in `finally`; opening a few local files does not hold the loop up
                handles = [(name, open(scratch / name, "rb")) for name in contents]  # noqa: ASYNC230, SIM115 — closed in finally
                fds = {name: h.fileno() for name, h in handles}
                cwd = "/"
            return await self._execute(
                self._command(files, fds), cwd, list(fds.values()), timeout, stdin, slot if self.as_root else None
            )
        finally:
            for _, h in handles:
                h.close()
            shutil.rmtree(scratch, ignore_errors=True)

    async def _execute(
        self, cmd: list[str], cwd: str, pass_fds: list[int], timeout: float, stdin: str, uid: int | None
    ) -> ExecResult:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": cwd} if self.weak else {}
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=self._preexec(uid),
            pass_fds=pass_fds,
        )
        pipe_in, pipe_out, pipe_err = proc.stdin, proc.stdout, proc.stderr
        assert pipe_in is not None and pipe_out is not None and pipe_err is not None  # all three opened as pipes
        flooded = False

        def kill() -> None:
            nonlocal flooded
            flooded = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

        out, err = _Capped(self.output_limit), _Capped(self.output_limit)
        flood = self.output_limit * 64

        async def feed() -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if stdin:
                    pipe_in.write(stdin.encode())
                    await pipe_in.drain()
                pipe_in.close()

        work = asyncio.gather(feed(), out.drain(pipe_out, kill, flood), err.drain(pipe_err, kill, flood), proc.wait())
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(work), timeout)
        except TimeoutError:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(work, 5)
        duration = time.perf_counter() - start
        stdout, out_cut = out.text()
        stderr, err_cut = err.text()
        code = proc.returncode
        return ExecResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=None if timed_out or code is None or code < 0 else code,
            timed_out=timed_out,
            error=self._diagnose(code, stderr, timed_out, flooded, timeout),
            duration=duration,
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
        )

    def _diagnose(self, code: int | None, stderr: str, timed_out: bool, flooded: bool, timeout: float) -> str | None:
        if timed_out:
            return f"wall-clock timeout: still running after {timeout:g} s"
        if flooded:
            return f"output limit: more than {self.output_limit * 64} bytes of output; killed"
        sig = -code if code is not None and code < 0 else code - 128 if code is not None and code > 128 else None
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return f"CPU time limit: more than {self.cpu_seconds} s of CPU"
        if sig == signal.SIGXFSZ or "File too large" in stderr:
            return f"file size limit: a file grew past {self.file_size_mb} MB"
        if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
            return f"memory limit: more than {self.memory_mb} MB"
        if "Resource temporarily unavailable" in stderr and ("fork" in stderr or "BlockingIOError" in stderr):
            return f"process limit: more than {self.max_processes} processes"
        if "No space left on device" in stderr:
            return f"disk limit: the sandbox's {self.disk_mb} MB filled up"
        if sig is not None and sig > 0:
            with contextlib.suppress(ValueError):
                return f"killed by signal {signal.Signals(sig).name}"
        return None


_default: LocalSandbox | None = None
_default_tests: LocalSandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> LocalSandbox:
    """A shared :class:`LocalSandbox` with default limits, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = LocalSandbox()
        return _default


def default_test_sandbox() -> LocalSandbox:
    """The shared sandbox of ``run_tests``: default limits, no ``/proc`` (its own user ids, from 61100)."""
    global _default_tests
    with _default_lock:
        if _default_tests is None:
            _default_tests = LocalSandbox(proc=False, uid_base=61100)
        return _default_tests
