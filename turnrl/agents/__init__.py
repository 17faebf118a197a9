"""Agents: policies that act (docs/concepts.md §4).

``make_agent(spec)`` builds one from a string:

* ``smollm2-135m-instruct`` or ``hf:PATH_OR_NAME`` — Hugging Face transformers (the CPU default);
* ``vllm:PATH_OR_NAME`` — a vLLM engine (GPU; ``pip install 'turnrl[gpu]'``);
* ``openai:URL#MODEL`` — any OpenAI-compatible server (needs ``tokenizer=`` for token-level rollouts);
* ``tiny:TEMPLATE`` — a tiny random model with a small tokenizer (tests, smoke runs);
* ``run:OUT_DIR`` — the policy a ``turnrl train`` run saved: its ``model`` with the weights of its ``checkpoint.pt``
  (``run:OUT_DIR#POLICY`` for one policy of a run with several).
"""

from __future__ import annotations

from typing import Any

from turnrl.agents.base import Agent, Completion, SamplingParams
from turnrl.agents.models import BUILTIN_MODELS, load_model, resolve_model_path

__all__ = ["Agent", "Completion", "SamplingParams", "load_model", "make_agent"]


def make_agent(spec: str, *, batch_size: int = 32, tokenizer: str | None = None, device: str = "cpu") -> Any:
    """Build an agent from a spec string (see the module docstring). ``device`` places the weights of the agents
    that run in this process (hf:, tiny:, run:): ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (a GPU when torch sees
    one).

    Raises:
        ValueError: an unknown prefix or a malformed spec (the message lists the valid forms).
        ModelNotFoundError: (an ``OSError``) a model that is no built-in, no path, and no hub id the hub or the local
            hub cache can serve now — at once, with a 'did you mean' for a near-miss of a built-in name.
    """
    kind, sep, rest = spec.partition(":")
    if not sep:
        kind, rest = "hf", spec
    elif kind not in ("hf", "vllm", "openai", "tiny", "run"):
        raise ValueError(
            f"unknown agent spec {spec!r}; use a built-in name ({', '.join(BUILTIN_MODELS)}), a path, "
            "or hf:PATH, vllm:PATH, openai:URL#MODEL, tiny:TEMPLATE, run:OUT_DIR"
        )
    if kind in ("run", "hf", "tiny") and device != "cpu":  # a GPU that is not there fails before anything loads
        from turnrl.agents.models import pick_device

        device = pick_device(device)
    if kind == "run":
        return _run_agent(rest, batch_size, device)
    if kind in ("hf", "vllm"):  # where the model is, or why not, before the seconds of importing torch or vLLM
        rest = resolve_model_path(rest)
    if kind == "hf":
        from turnrl.agents.hf import HFAgent

        return HFAgent.from_pretrained(rest, batch_size=batch_size, device=device)
    if kind == "tiny":
        from turnrl.agents.hf import HFAgent
        from turnrl.agents.tiny import tiny_model, tiny_tokenizer

        tok = tiny_tokenizer(rest or "chatml")
        return HFAgent(tiny_model(tok).to(device), tok, batch_size=batch_size)
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

        tok = AutoTokenizer.from_pretrained(resolve_model_path(tokenizer))
    return OpenAIAgent(url, model, tokenizer=tok)


def _run_agent(folder: str, batch_size: int, device: str = "cpu") -> Any:
    """The policy a training run saved: the run's ``model`` (its ``config.yaml``) with its checkpoint's weights.

    Raises:
        FileNotFoundError: ``folder`` is not a run's output folder, or holds no checkpoint yet.
    """
    from pathlib import Path

    import yaml

    spec, folder = folder, folder.partition("#")[0]  # a run of several policies: run:OUT_DIR#POLICY
    config = Path(folder) / "config.yaml"
    if not config.is_file():
        raise FileNotFoundError(f"run:{folder}: no config.yaml there (run:OUT_DIR takes the out_dir of a `turnrl "
                                "train` run)")
    name = (yaml.safe_load(config.read_text()) or {}).get("model")
    if not name:
        raise ValueError(f"run:{folder}: its config.yaml names no model")
    agent = make_agent(str(name), batch_size=batch_size)
    from turnrl.checkpoint import load_policy

    load_policy(agent.model, spec)  # (which reads the #POLICY)
    agent.model.to(device)
    return agent
