"""Stop strings across the pieces of a turn that windows paused (T-PPO, docs/algorithms.md §6).

When a window ends inside a turn, the next window resumes it: the tokens the turn generated so far become part of
the prompt, and an agent checks its stop strings only against the tokens it generates in the new call. A stop string
whose first characters came in the earlier piece and its last in the new one is then never seen, and the turn runs
on past it. :func:`stop_cut` finds where such a turn should have stopped, by the rule the HF agent applies inside
one call (a stop string in the decoded last tokens of the turn, the tokens just sampled included), so that a turn
played in pieces stops exactly where the same turn stops in one call, on every backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from turnrl.agents.base import Completion


def stop_cut(
    decode: Callable[[list[int]], str], before: Sequence[int], new: Sequence[int], stop: Sequence[str]
) -> int | None:
    """How many of ``new`` tokens a turn keeps when a stop string ends among them but began in ``before`` (the
    turn's tokens from its earlier pieces); None when no stop string straddles the boundary (the agent's own check
    covers a stop string wholly inside ``new``).

    The check at each new token is the one an agent makes inside one call: does the decoded text of the turn's last
    ``max(len(s)) + 2`` tokens contain a stop string? Only checks whose window reaches back into ``before`` are made
    here, and only stop strings not wholly inside the new tokens count; the first one that hits is where the turn
    ends (that token kept).

    Args:
        decode: token ids to text, special tokens kept (as the agent's stop check decodes).
        before: the turn's tokens generated before this call (its earlier pieces).
        new: the tokens this call generated.
        stop: the turn's stop strings.
    """
    if not stop or not before or not new:
        return None
    span = max(map(len, stop)) + 2
    turn = list(before) + list(new)
    for k in range(1, min(len(new), span) + 1):  # past ``span`` new tokens no window reaches back into ``before``
        end = len(before) + k
        text, own = decode(turn[max(0, end - span) : end]), decode(list(new[:k]))
        if any(s in text and s not in own for s in stop):
            return k
    return None


def past_stop(decode: Callable[[list[int]], str], tokens: Sequence[int], stop: Sequence[str]) -> int:
    """How many of a finished turn's ``tokens`` come after the token that completed its first stop string (0: none
    contains a stop string, or the first one ends on the turn's last token, as it should). A turn that ran on past
    its stop string trains tokens no policy should have produced there; the consistency guard counts such turns
    (``guard_past_stop_turns``). One decode of the turn, and a binary search over its prefixes where a stop string
    is found."""
    if not stop or not tokens or not any(s in decode(list(tokens)) for s in stop):
        return 0
    lo, hi = 0, len(tokens)  # decode(tokens[:lo]) holds no stop string, decode(tokens[:hi]) does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if any(s in decode(list(tokens[:mid])) for s in stop):
            hi = mid
        else:
            lo = mid
    return len(tokens) - hi


def stopped_across_pieces(
    tokenizer: Any, before: Sequence[int], completion: Completion, stop: Sequence[str]
) -> Completion:
    """``completion`` (the next piece of a turn that began with ``before``) cut where the turn would have stopped in
    one call, when a stop string began in the earlier pieces and ends in this one (:func:`stop_cut`); as it is
    otherwise. The tokens kept are the ones sampled, with their log-probabilities and versions."""
    k = stop_cut(lambda ids: tokenizer.decode(ids, skip_special_tokens=False), before, completion.token_ids, stop)
    if k is None:
        return completion
    ids = completion.token_ids[:k]
    return dataclasses.replace(
        completion,
        token_ids=ids,
        logprobs=completion.logprobs[:k],
        finish_reason="stop",
        text=tokenizer.decode(ids, skip_special_tokens=True),
        token_versions=completion.token_versions[:k] if completion.token_versions else None,
        top_logprobs=completion.top_logprobs[:k] if completion.top_logprobs else None,
    )
