"""Rollout hooks that replace turns (``Rollout(rewrite=hook)``): PAG's verdict exploration, a checking teacher.

A hook is called after each generation round with every live episode's env, role, token prompt and completion and
returns a replacement per completion, or None to keep it; a replaced turn is marked ``info["rewritten"] = True``.

A hook that writes some turns whatever was sampled (a teacher) may say so beforehand with an optional method
``writes(env, role) -> bool``: those turns are not sampled at all (no generation is spent on them). The hook then sees
an empty completion for each of them (no tokens, ``finish_reason="stop"``) and must return a replacement for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turnrl.agents.base import Completion
from turnrl.envs.core import TextEnv

# (envs, roles, token prompts, completions) of one generation round → a replacement per completion, or None to keep it
Rewrite = Callable[
    [Sequence[TextEnv], Sequence[str], Sequence[list[int]], Sequence[Completion]], Sequence[Completion | None]
]


def unsampled(hook: Rewrite | None, envs: Sequence[TextEnv], roles: Sequence[str]) -> set[int]:
    """The turns of a round that ``hook`` writes itself (its ``writes(env, role)``), which are not to be sampled."""
    writes = getattr(hook, "writes", None)
    if writes is None:
        return set()
    return {i for i, (env, role) in enumerate(zip(envs, roles)) if writes(env, role)}


def rewrite_round(
    hook: Rewrite,
    envs: Sequence[TextEnv],
    roles: Sequence[str],
    prompts: Sequence[list[int]],
    completions: Sequence[Completion | None],
    skipped: set[int],
) -> list[Completion | None]:
    """The hook's replacements for one round, the ``skipped`` turns (not sampled) given to it as empty completions.

    Raises:
        ValueError: the hook returned no replacement for a turn it said it writes, or a wrong number of them.
    """
    shown = [
        Completion(text="", token_ids=[], logprobs=[], finish_reason="stop", prompt_index=i) if i in skipped else c
        for i, c in enumerate(completions)
    ]
    new = list(hook(envs, roles, prompts, shown))  # type: ignore[arg-type]  # None only where skipped: filled
    if len(new) != len(shown):
        raise ValueError(f"the rollout hook returned {len(new)} completions for {len(shown)} turns")
    missing = sorted(i for i in skipped if new[i] is None)
    if missing:
        raise ValueError(
            f"the rollout hook's writes() claimed turns {missing} of this round (so they were not "
            "sampled) but it returned no completion for them"
        )
    return new
