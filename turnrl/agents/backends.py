"""The agent backends ``make_agent`` builds from a spec's prefix (``PREFIX:REST``), one function each, registered in
:data:`turnrl.agents.AGENT_BACKENDS` (a :class:`turnrl.plugins.Registry`; installed packages add theirs under the
``turnrl.agents`` entry-point group, ``name = "module:function"``).

A backend is ``build(rest, *, batch_size, tokenizer, device) -> Agent``: ``rest`` is the spec after the prefix;
``tokenizer`` names a tokenizer for backends that need one (``openai:``); ``device`` is already resolved to a device
that exists (``cpu``, ``cuda``, ``cuda:N``) for the backends that hold weights in this process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from turnrl.agents.models import resolve_model_path


def hf(rest: str, *, batch_size: int, tokenizer: str | None = None, device: str = "cpu") -> Any:
    """``hf:PATH_OR_NAME`` (or a bare name or path): Hugging Face transformers. Where the model is, or why not, is
    found before the seconds of importing torch and transformers."""
    path = resolve_model_path(rest)
    from turnrl.agents.hf import HFAgent

    return HFAgent.from_pretrained(path, batch_size=batch_size, device=device)


def tiny(rest: str, *, batch_size: int, tokenizer: str | None = None, device: str = "cpu") -> Any:
    """``tiny:TEMPLATE``: a tiny random model with a small tokenizer (tests, smoke runs)."""
    from turnrl.agents.hf import HFAgent
    from turnrl.agents.tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer(rest or "chatml")
    return HFAgent(tiny_model(tok).to(device), tok, batch_size=batch_size)


def vllm(rest: str, *, batch_size: int, tokenizer: str | None = None, device: str = "cpu") -> Any:
    """``vllm:PATH_OR_NAME``: a vLLM engine (GPU; ``pip install 'turnrl[gpu]'``); the model found before vLLM is
    imported."""
    path = resolve_model_path(rest)
    from turnrl.agents.vllm import VLLMAgent

    return VLLMAgent(path)


def openai(rest: str, *, batch_size: int, tokenizer: str | None = None, device: str = "cpu") -> Any:
    """``openai:URL#MODEL``: any OpenAI-compatible server (``tokenizer`` for token-level rollouts)."""
    url, hash_, model = rest.partition("#")
    if not hash_ or not model:
        raise ValueError(f"an openai agent spec is openai:URL#MODEL, got 'openai:{rest}'")
    from turnrl.agents.openai import OpenAIAgent

    tok = None
    if tokenizer is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(resolve_model_path(tokenizer))
    return OpenAIAgent(url, model, tokenizer=tok)


def run(rest: str, *, batch_size: int, tokenizer: str | None = None, device: str = "cpu") -> Any:
    """``run:OUT_DIR`` (``run:OUT_DIR#POLICY`` for one policy of a run with several): the policy a training run saved,
    its config's ``model`` with its checkpoint's weights.

    Raises:
        FileNotFoundError: ``OUT_DIR`` is not a run's output folder, or holds no checkpoint yet.
    """
    import yaml

    from turnrl.agents import make_agent
    from turnrl.checkpoint import load_policy

    folder = rest.partition("#")[0]
    config = Path(folder) / "config.yaml"
    if not config.is_file():
        raise FileNotFoundError(
            f"run:{folder}: no config.yaml there (run:OUT_DIR takes the out_dir of a `turnrl train` run)"
        )
    name = (yaml.safe_load(config.read_text()) or {}).get("model")
    if not name:
        raise ValueError(f"run:{folder}: its config.yaml names no model")
    agent = make_agent(str(name), batch_size=batch_size)
    load_policy(agent.model, rest)  # (which reads the #POLICY)
    agent.model.to(device)
    return agent
