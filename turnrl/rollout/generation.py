"""How a rollout asks its agent for tokens, by what the agent declares it can do (its ``capabilities``).

Two calls, both given an episode's current context as the prompt (its tokens since the last context segment
began) and counting each prompt's prefill in the rollout's figures (:meth:`RolloutStats.count_prefill`):

* :func:`generate_round` — one generation round of many episodes: grouped by token budget and stop strings, one
  ``generate`` call per group, naming each episode's KV session where the agent keeps sessions and passing each
  episode's seed where it has its own stream; an HTTP backend (``async_batch``) with neither is awaited instead, so
  the event loop is not blocked;
* :func:`generate_one` — one episode's next generation: joined to the batch the agent is decoding (``join_batch``:
  continuous batching), else a batch of one, awaited where the agent is an HTTP backend.

Its siblings use them: :mod:`turnrl.rollout.engine` for the turns of its rounds and of continuous batching,
:mod:`turnrl.rollout.context` for the summaries the policy writes of a long history. What is asked (each episode's
budget, stop strings and seed) is the episode's own :meth:`~turnrl.rollout.episode.Episode.request`.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from turnrl.agents.base import Capabilities, Completion, SamplingParams

if TYPE_CHECKING:
    from turnrl.agents.base import AsyncBatchAgent, JoinBatchAgent
    from turnrl.rollout.episode import Episode, RolloutStats

# what one episode asks of a round: its token budget, its stop strings and its seed (None: the round's stream)
Request = tuple[int, tuple[str, ...], int | None]


class Generating(Protocol):
    """What the calls need of the rollout (:class:`turnrl.rollout.engine.Rollout` is one; its docstring says what
    each member is): its agent, what the agent can do, and the rollout's figures."""

    agent: Any
    capabilities: Capabilities
    uses_sessions: bool
    passes_seeds: bool
    stats: RolloutStats


async def generate_round(
    rollout: Generating,
    episodes: Sequence[Episode],
    params: SamplingParams,
    requests: Sequence[Request],
    skipped: Container[int] = (),
) -> list[Completion | None]:
    """A completion for each of ``episodes`` under ``params``, with each one's budget, stop strings and seed from
    ``requests`` (one per episode); None for the ``skipped`` ones (not sampled). See the module docstring."""
    groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for i, (budget, stop, _) in enumerate(requests):
        if i not in skipped:
            groups.setdefault((budget, stop), []).append(i)
    completions: list[Completion | None] = [None] * len(episodes)
    for (budget, stop), idx in groups.items():
        group_params = params.model_copy(update={"max_new_tokens": budget, "stop": stop})
        prompts = [list(episodes[i].tokens[episodes[i].context_start :]) for i in idx]
        kwargs: dict[str, Any] = {}
        if rollout.uses_sessions:  # the agent keeps each episode's KV cache between its turns
            kwargs["sessions"] = [episodes[i].session for i in idx]
        if requests[idx[0]][2] is not None:  # batch-invariant: each episode's own stream per turn
            kwargs["seeds"] = [requests[i][2] for i in idx]
        if kwargs or not rollout.capabilities.async_batch:
            outs = rollout.agent.generate(prompts, group_params, **kwargs)
        else:  # HTTP backends: don't block the event loop
            outs = await cast("AsyncBatchAgent", rollout.agent).agenerate(prompts, group_params)
        for i, prompt, c in zip(idx, prompts, outs):
            completions[i] = c
            rollout.stats.count_prefill(episodes[i], len(prompt), c)
    return completions


async def generate_one(rollout: Generating, ep: Episode, params: SamplingParams, seed: int | None) -> Completion:
    """``ep``'s next generation under ``params`` (its budget and stop strings set), sampled with ``seed`` where the
    agent takes one (None: the agent's own stream). See the module docstring."""
    prompt = list(ep.tokens[ep.context_start :])
    if rollout.capabilities.join_batch:  # joins whatever batch is running in this loop
        session = ep.session if rollout.uses_sessions else None
        c = await cast("JoinBatchAgent", rollout.agent).agenerate_one(prompt, params, seed=seed, session=session)
    elif rollout.capabilities.async_batch:  # an HTTP backend: do not block the loop
        c = (await cast("AsyncBatchAgent", rollout.agent).agenerate([prompt], params))[0]
    else:
        kwargs = {"seeds": [seed]} if seed is not None and rollout.passes_seeds else {}
        c = rollout.agent.generate([prompt], params, **kwargs)[0]
    rollout.stats.count_prefill(ep, len(prompt), c)
    return c


__all__ = ["Generating", "Request", "generate_one", "generate_round"]
