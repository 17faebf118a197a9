"""Sandboxes for untrusted code: ``LocalSandbox`` (bubblewrap) and ``E2BSandbox`` (E2B's cloud)."""

from turnrl.tools.sandbox.base import ExecResult, Sandbox, SandboxUnavailable
from turnrl.tools.sandbox.e2b import E2BSandbox
from turnrl.tools.sandbox.local import LocalSandbox

__all__ = ["E2BSandbox", "ExecResult", "LocalSandbox", "Sandbox", "SandboxUnavailable"]
