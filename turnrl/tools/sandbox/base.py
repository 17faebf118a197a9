"""What every sandbox returns, and the checks shared by all backends."""

from __future__ import annotations

import posixpath
from typing import Protocol

from pydantic import BaseModel, ConfigDict


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run here (a missing program, credential or package); the message says how to fix it."""


class ExecResult(BaseModel):
    """The outcome of one sandboxed run.

    Attributes:
        stdout, stderr: the program's output, capped; a capped stream ends with a truncation marker.
        exit_code: the program's exit status (None if it was killed before reporting one).
        timed_out: whether the wall-clock timeout stopped it.
        error: a short reason when the run was stopped or failed for a sandbox reason (time, CPU, memory,
            processes, file size, output size); None for a normal exit, whatever its status.
        duration: wall-clock seconds.
        stdout_truncated, stderr_truncated: whether a stream was capped.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = None
    duration: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """Exit status 0 and no sandbox error."""
        return self.exit_code == 0 and self.error is None


class Sandbox(Protocol):
    """Runs untrusted Python code in isolation."""

    def run(
        self, code: str, *, timeout: float = 10.0, stdin: str = "", files: dict[str, str] | None = None
    ) -> ExecResult:
        """Run ``code`` as ``main.py`` in a fresh directory holding ``files``."""
        ...

    async def arun(
        self, code: str, *, timeout: float = 10.0, stdin: str = "", files: dict[str, str] | None = None
    ) -> ExecResult:
        """Async :meth:`run`."""
        ...


def check_files(files: dict[str, str] | None) -> dict[str, str]:
    """Validate the extra files: relative paths inside the scratch directory, text contents.

    Raises:
        ValueError: an absolute path, a path leaving the directory, or a non-text content.
    """
    out: dict[str, str] = {}
    for name, content in (files or {}).items():
        norm = posixpath.normpath(name)
        if not isinstance(name, str) or not name or name.startswith("/") or norm.startswith("..") or norm == ".":
            raise ValueError(f"file names must be relative paths inside the sandbox directory, got {name!r}")
        if norm == "main.py":
            raise ValueError("'main.py' is reserved for the code being run")
        if not isinstance(content, str):
            raise ValueError(f"file {name!r}: content must be a str, got {type(content).__name__}")
        out[norm] = content
    return out
