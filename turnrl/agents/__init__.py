"""Agents: policies that act (docs/concepts.md §4).

``make_agent(spec)`` builds one from a string:

* ``smollm2-135m-instruct`` or ``hf:PATH_OR_NAME`` — Hugging Face transformers (the CPU default);
* ``vllm:PATH_OR_NAME`` — a vLLM engine (GPU; ``pip install 'turnrl[gpu]'``);
* ``openai:URL#MODEL`` — any OpenAI-compatible server (needs ``tokenizer=`` for token-level rollouts);
* ``tiny:TEMPLATE`` — a tiny random model with a small tokenizer (tests, smoke runs);
* ``run:OUT_DIR`` — the policy a ``turnrl train`` run saved: its ``model`` with the weights of its ``checkpoint.pt``
  (``run:OUT_DIR#POLICY`` for one policy of a run with several);
* ``NAME:REST`` — a backend an installed package declares under the ``turnrl.agents`` entry-point group, or a module
  registers with ``AGENT_BACKENDS.register(NAME, build)`` (:mod:`turnrl.agents.backends` shows the signature).
"""

from __future__ import annotations

from typing import Any

from turnrl.agents.base import Agent, Completion, SamplingParams
from turnrl.agents.models import load_model
from turnrl.agents.spec import AGENT_BACKENDS, AgentSpec

__all__ = ["AGENT_BACKENDS", "Agent", "AgentSpec", "Completion", "SamplingParams", "load_model", "make_agent"]


#: the backends that hold weights in this process, whose ``device`` is resolved before they load
LOCAL_BACKENDS = ("hf", "tiny", "run")


def make_agent(
    spec: str | AgentSpec, *, batch_size: int = 32, tokenizer: str | None = None, device: str = "cpu"
) -> Any:
    """Build an agent from a spec string (see the module docstring). ``device`` places the weights of the agents
    that run in this process (hf:, tiny:, run:): ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (a GPU when torch sees
    one).

    Raises:
        ValueError: an unknown prefix or a malformed spec (:class:`~turnrl.agents.spec.AgentSpec`; the message
            lists the valid forms).
        ModelNotFoundError: (an ``OSError``) a model that is no built-in, no path, and no hub id the hub or the local
            hub cache can serve now — at once, with a 'did you mean' for a near-miss of a built-in name.
    """
    read = AgentSpec(spec)  # (an AgentSpec already read at load passes as it is)
    kind, rest = read.kind, read.target
    if kind in LOCAL_BACKENDS and device != "cpu":  # a GPU that is not there fails before anything loads
        from turnrl.agents.models import pick_device

        device = pick_device(device)
    return AGENT_BACKENDS.get(kind)(rest, batch_size=batch_size, tokenizer=tokenizer, device=device)
