"""The ``python`` tool: run code in a sandbox and show the model its output."""

from __future__ import annotations

from turnrl.tools.base import Tool, tool
from turnrl.tools.sandbox.base import ExecResult, Sandbox
from turnrl.tools.sandbox.local import default_sandbox


def format_result(result: ExecResult) -> str:
    """What the model sees: stdout, then stderr and the sandbox's reason if any."""
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("[stderr]\n" + result.stderr.rstrip("\n"))
    if result.error:
        parts.append(f"[stopped: {result.error}]")
    elif result.exit_code not in (0, None):
        parts.append(f"[exit status {result.exit_code}]")
    return "\n".join(parts) or "[no output]"


def python_tool(sandbox: Sandbox | None = None, *, timeout: float = 10.0, name: str = "python") -> Tool:
    """A tool that runs Python code in ``sandbox`` (default: a shared LocalSandbox) with ``timeout`` seconds."""

    def run_python(code: str) -> str:
        """Run Python code in an isolated sandbox and return what it printed (stdout and stderr).

        Args:
            code: the Python program to run; use print() to show results.
        """
        return format_result((sandbox or default_sandbox()).run(code, timeout=timeout))

    return tool(run_python, name=name)
