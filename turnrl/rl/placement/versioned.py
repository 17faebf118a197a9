"""The weights a rollout worker plays with: :func:`adopt_weights` makes the object store's arrays the policy's weights
without a copy, and :class:`VersionedAgent` puts the worker's agent behind the lock that weight loads share, so
that every generation call runs under one version of the weights and stamps it on its completions.
:class:`~turnrl.rl.placement.worker.RolloutWorker` uses both; neither imports Ray.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from turnrl.agents.base import Capabilities, capabilities_of
from turnrl.lora import is_lora, load_adapter
from turnrl.weights import mark_weights_changed


def adopt_weights(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Make ``state``'s tensors the model's weights without copying them (a rollout worker only reads its weights:
    the object store's arrays serve as they are, saving a 0.65 GB copy per update for SmolLM2-135M); a state that
    does not match the model name for name, shape and dtype is copied in with ``load_state_dict`` instead. A LoRA
    policy takes adapters only (:func:`turnrl.lora.adapter_state`; copied in: they are small)."""
    if is_lora(model):
        load_adapter(model, state)  # marks the weights changed
        return
    mark_weights_changed(model)  # session KV caches computed with the old weights are stale
    own = model.state_dict(keep_vars=True)
    if set(own) != set(state) or any(own[k].shape != v.shape or own[k].dtype != v.dtype for k, v in state.items()):
        model.load_state_dict(state)
        return
    with torch.no_grad():
        for name, tensor in own.items():
            tensor.data = state[name]


class VersionedAgent:
    """The worker's agent behind a lock that weight loads share: every ``generate`` call runs under one version of
    the weights, stamped on its completions (``Completion.policy_version``), so a weight update that lands while an
    episode is in play (between two generation calls — never inside one) shows at the right token.

    An agent that takes weights in flight (``inflight_updates``: :class:`~turnrl.agents.vllm_async.AsyncVLLMAgent`)
    generates outside the lock and labels its tokens itself (``Completion.token_versions``): a load then lands
    inside a generation call, between two decoding steps."""

    agenerate = None  # every call goes through the lock (the rollout falls back to ``generate``)
    agenerate_one = None  # no continuous batching across turns: a weight load must fall between two calls

    def __init__(self, agent: Any, lock: threading.Lock, version: Any) -> None:
        self.agent, self.lock, self.version = agent, lock, version

    def __getattr__(self, name: str) -> Any:  # tokenizer, model, …
        return getattr(self.agent, name)

    @property
    def capabilities(self) -> Capabilities:
        """The agent's, less what would bypass the lock: per-prompt seeds and its sessions, in-flight weights and
        end-of-turn ids; no joining a running batch and no non-blocking batch call (a weight load must fall between
        two calls)."""
        inner = capabilities_of(self.agent)
        return Capabilities(
            seeds=True,
            sessions=inner.sessions,
            inflight_updates=inner.inflight_updates,
            eos_ids=inner.eos_ids,
            local_model=inner.local_model,
        )

    def generate(
        self,
        prompts: list[list[int]],
        params: Any,
        *,
        seeds: list[int] | None = None,
        sessions: list[str | None] | None = None,
    ) -> list[Any]:
        """The agent's completions, each stamped with the version that sampled it."""
        kwargs: dict[str, Any] = {"seeds": seeds} if seeds is not None else {}
        if sessions is not None:
            kwargs["sessions"] = sessions
        if capabilities_of(self.agent).inflight_updates:
            return self.agent.generate(prompts, params, **kwargs)  # the engine labels every token's version
        with self.lock:
            out = self.agent.generate(prompts, params, **kwargs)
            version = self.version()
        for c in out:
            c.policy_version = version
        return out

    def release(self, sessions: list[str]) -> None:
        """Free finished episodes' KV caches (under the lock: a weight load may be dropping them)."""
        with self.lock:
            self.agent.release(sessions)
