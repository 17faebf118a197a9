"""E2BSandbox: the same interface on E2B's cloud sandboxes (``pip install 'turnrl[e2b]'``, ``E2B_API_KEY``).

Each run creates a fresh E2B sandbox, writes ``main.py`` and the files, runs ``python3 main.py`` with the
timeout, and kills the sandbox. Failures to reach E2B (bad key, no network, quota) come back as an
:class:`ExecResult` with ``error`` set, never as an exception in the middle of a rollout.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from typing import Any

from turnrl.tools.sandbox.base import ExecResult, SandboxUnavailable, check_files
from turnrl.utils import Shared

_WORKDIR = "/home/user/turnrl"


def _cap(text: str | None, limit: int) -> tuple[str, bool]:
    text = text or ""
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n[... output truncated: {len(text) - limit} more characters ...]", True


class E2BSandbox(Shared):
    """Run code in E2B cloud sandboxes.

    Args:
        api_key: default ``$E2B_API_KEY``; without one, construction fails with a message saying so.
        template: an E2B template id (default: E2B's code-interpreter image).
        output_limit: characters kept of stdout and of stderr each.
        api_url: override E2B's API address (self-hosted E2B, tests).
        request_timeout: seconds for each API request.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        template: str | None = None,
        output_limit: int = 64 * 1024,
        api_url: str | None = None,
        request_timeout: float = 30.0,
    ) -> None:
        key = api_key or os.environ.get("E2B_API_KEY")
        if not key:
            raise SandboxUnavailable("E2BSandbox needs an E2B API key: set E2B_API_KEY or pass api_key=...")
        try:
            import e2b_code_interpreter
        except ImportError as e:
            raise SandboxUnavailable(
                "E2BSandbox needs the e2b-code-interpreter package: pip install 'turnrl[e2b]'"
            ) from e
        self._sdk: Any = e2b_code_interpreter
        self.api_key, self.template, self.output_limit = key, template, output_limit
        self.api_url, self.request_timeout = api_url, request_timeout

    def _create(self, timeout: float) -> Any:
        opts: dict[str, Any] = {"api_key": self.api_key, "request_timeout": self.request_timeout}
        if self.api_url:
            opts["api_url"] = self.api_url
        if self.template:
            opts["template"] = self.template
        return self._sdk.Sandbox.create(timeout=int(timeout) + 60, allow_internet_access=False, **opts)

    def run(
        self, code: str, *, timeout: float = 10.0, stdin: str = "", files: dict[str, str] | None = None
    ) -> ExecResult:
        """Run ``code`` as ``main.py`` in a fresh E2B sandbox that also holds ``files``."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        extra = check_files(files)
        start = time.perf_counter()
        try:
            sbx = self._create(timeout)
        except Exception as e:  # auth, network, quota: an answer, not a crash
            return ExecResult(
                error=f"E2B: could not create a sandbox: {type(e).__name__}: {str(e)[:300]}",
                duration=time.perf_counter() - start,
            )
        try:
            for name, text in {"main.py": code, "stdin.txt": stdin, **extra}.items():
                sbx.files.write(f"{_WORKDIR}/{name}", text)
            # stdin.txt is removed once open, so the program can read its input only once, from stdin (the code-test
            # harness receives its secret that way)
            cmd = f"cd {shlex.quote(_WORKDIR)} && {{ rm -f stdin.txt; python3 main.py; }} < stdin.txt"
            try:
                res = sbx.commands.run(cmd, timeout=timeout)
                stdout, stderr, exit_code, error, timed_out = res.stdout, res.stderr, res.exit_code, None, False
            except self._sdk.CommandExitException as e:
                stdout, stderr, exit_code, error, timed_out = e.stdout, e.stderr, e.exit_code, None, False
            except self._sdk.TimeoutException:
                stdout, stderr, exit_code, timed_out = "", "", None, True
                error = f"wall-clock timeout: still running after {timeout:g} s"
        except Exception as e:
            return ExecResult(error=f"E2B: {type(e).__name__}: {str(e)[:300]}", duration=time.perf_counter() - start)
        finally:
            try:
                sbx.kill()
            except Exception:  # best effort; E2B also expires sandboxes by itself
                pass
        out, out_cut = _cap(stdout, self.output_limit)
        err, err_cut = _cap(stderr, self.output_limit)
        return ExecResult(
            stdout=out,
            stderr=err,
            exit_code=exit_code,
            timed_out=timed_out,
            error=error,
            duration=time.perf_counter() - start,
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
        )

    async def arun(
        self, code: str, *, timeout: float = 10.0, stdin: str = "", files: dict[str, str] | None = None
    ) -> ExecResult:
        """Async :meth:`run` (in a worker thread)."""
        return await asyncio.to_thread(self.run, code, timeout=timeout, stdin=stdin, files=files)
