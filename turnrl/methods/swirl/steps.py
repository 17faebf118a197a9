"""SWiRL's step-wise decomposition (docs/algorithms.md §1): a trajectory of K steps → K rows (s_i, a_i).

Row i is a Trajectory holding the state s_i — the token prefix before step i, exactly as the model saw it (the
prompt, earlier steps and their tool results, the chat template's tokens) — followed by the step's own tokens, the
only ones with loss mask 1. Its turns are the source's turns 0..i; the earlier ones are context (no token spans,
their rewards kept in ``info["reward"]``).
Prefixes strictly grow along a trajectory, and every row is token-for-token a prefix of its source — of its
source's context segment, for an episode whose history was rewritten (``Trajectory.segments``): a step's state is
what the model saw then, the prompt tokens of the segment it was generated in and what followed them there.
"""

from __future__ import annotations

from collections.abc import Iterable

from turnrl.methods.swirl.reading import question_text
from turnrl.types import Trajectory, Turn


def context_turn(turn: Turn) -> Turn:
    """An earlier turn as a row's context: no token spans, and its reward moved to ``info["reward"]`` (a reward
    belongs on generated tokens, and a row has none for its context: a rewarded context turn would make the row
    untrainable, :func:`turnrl.rl.core.batch.untrainable`)."""
    info = {**turn.info, "reward": turn.reward} if turn.reward else turn.info
    return turn.model_copy(update={"token_span": None, "obs_span": None, "reward": 0.0, "info": info})


def decompose(traj: Trajectory) -> list[Trajectory]:
    """One row per agent turn of a token-exact trajectory (see the module docstring).

    Raises:
        ValueError: the trajectory has no token fields, or a turn without a token span.
    """
    if traj.token_ids is None or traj.loss_mask is None or traj.logprobs is None:
        raise ValueError(
            f"trajectory {traj.id} has no token fields; SWiRL rows need token-exact rollouts (turnrl swirl generate)"
        )
    question = question_text(traj)
    segments = traj.segments or [0]
    meta = {k: v for k, v in traj.metadata.items() if k != "segment_reasons"}  # a row is one segment
    rows = []
    for i, turn in enumerate(traj.turns):
        if turn.token_span is None:
            raise ValueError(f"trajectory {traj.id}: turn {i} has no token span")
        start, end = turn.token_span
        base = max(s for s in segments if s <= start)  # where the turn's context segment begins
        n = start - base
        context = [context_turn(t) for t in traj.turns[:i]]
        rows.append(
            Trajectory(
                id=f"{traj.id}/step-{i}",
                env_id=traj.env_id,
                task_id=traj.task_id,
                seed=traj.seed,
                group_id=traj.id,
                prompt=traj.prompt,
                turns=[*context, turn.model_copy(update={"obs_span": None, "token_span": (n, end - base)})],
                terminated=bool(turn.terminated),
                truncated=bool(turn.truncated),
                token_ids=traj.token_ids[base:end],
                loss_mask=[0] * n + [1] * (end - start),
                logprobs=[0.0] * n + list(traj.logprobs[start:end]),
                metadata={
                    **meta,
                    "prompt_length": n,
                    "swirl": {
                        "source": traj.id,
                        "step": i,
                        "steps": len(traj.turns),
                        "prefix_len": n,
                        "task_id": traj.task_id,
                        "gold": traj.metadata.get("gold"),
                        "question": question,
                        "source_correct": traj.correct,
                        **({"segment": segments.index(base)} if base else {}),
                    },
                },
            )
        )
    return rows


def decompose_all(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """The rows of every trajectory, in order."""
    return [row for t in trajectories for row in decompose(t)]
