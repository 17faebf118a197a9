"""Agents: policies that act (DESIGN.md §The flow, point 4).

``make_agent(spec)`` builds one from a string:

* ``smollm2-135m-instruct`` or ``hf:PATH_OR_NAME`` — Hugging Face transformers (the CPU default);
* ``vllm:PATH_OR_NAME`` — a vLLM engine (GPU; ``pip install 'turnrl[gpu]'``);
* ``openai:URL#MODEL`` — any OpenAI-compatible server (needs ``tokenizer=`` for token-level rollouts);
* ``tiny:TEMPLATE`` — a tiny random model with a small tokenizer (tests, smoke runs).
"""

from __future__ import annotations

from typing import Any

from turnrl.agents.base import Agent, Completion, SamplingParams
from turnrl.agents.models import BUILTIN_MODELS, load_model

__all__ = ["Agent", "Completion", "SamplingParams", "load_model", "make_agent"]


def make_agent(spec: str, *, batch_size: int = 32, tokenizer: str | None = None) -> Any:
    """Build an agent from a spec string (see the module docstring).

    Raises:
        ValueError: an unknown prefix or a malformed spec (the message lists the valid forms).
    """
    kind, sep, rest = spec.partition(":")
    if not sep:
        kind, rest = "hf", spec
    elif kind not in ("hf", "vllm", "openai", "tiny"):
        raise ValueError(
            f"unknown agent spec {spec!r}; use a built-in name ({', '.join(BUILTIN_MODELS)}), a path, "
            "or hf:PATH, vllm:PATH, openai:URL#MODEL, tiny:TEMPLATE"
        )
    if kind == "hf":
        from turnrl.agents.hf import HFAgent

        return HFAgent.from_pretrained(rest, batch_size=batch_size)
    if kind == "tiny":
        from turnrl.agents.hf import HFAgent
        from turnrl.agents.tiny import tiny_model, tiny_tokenizer

        tok = tiny_tokenizer(rest or "chatml")
        return HFAgent(tiny_model(tok), tok, batch_size=batch_size)
    if kind == "vllm":
        from turnrl.agents.vllm import VLLMAgent

        return VLLMAgent(rest)
    url, hash_, model = rest.partition("#")
    if not hash_ or not model:
        raise ValueError(f"an openai agent spec is openai:URL#MODEL, got {spec!r}")
    from turnrl.agents.openai import OpenAIAgent

    tok = None
    if tokenizer is not None:
        from transformers import AutoTokenizer

        from turnrl.agents.models import resolve_model_path

        tok = AutoTokenizer.from_pretrained(resolve_model_path(tokenizer))
    return OpenAIAgent(url, model, tokenizer=tok)
