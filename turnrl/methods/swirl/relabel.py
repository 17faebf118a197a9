"""Hindsight answers for SWiRL data (ours; docs/algorithms.md §1 is the pipeline this feeds).

A weak teacher often finds the evidence and then answers badly: SmolLM2-135M on HotPotQA retrieves a passage
that holds the gold answer in about a quarter of its trajectories, and then copies the whole passage into
``<answer>`` — a BAD step for the process judge (not a short answer), so SWiRL has no GOOD answer to learn from.
``ground_answers`` keeps the teacher's own tool steps and rewrites the answer in hindsight:

* for each trajectory, the earliest tool step after which ``<answer>GOLD</answer>`` would be a GOOD step for the
  step judge (the gold answer is grounded in what the trajectory itself retrieved or computed; a title or the
  question's words do not count — :class:`~turnrl.methods.swirl.judges.RuleStepJudge`);
* the trajectory is cut there and the next step, at the very token where the teacher's next step began (the same
  state, token for token), becomes ``<answer>GOLD</answer>`` and the end-of-turn token (log-probabilities 0: the
  teacher did not sample it; SWiRL's ``data_action`` scores them with the current policy);
* trajectories whose gold answer never appears in their results, that have no gold label or no token fields, or
  whose own answer is already correct, are left as they are.

It uses the gold answer, like the outcome filter: run it on training questions only. Like STaR's
rationalization, the answer is given and the search is the teacher's; unlike it, nothing is generated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnrl.methods.swirl.judges import RuleStepJudge
from turnrl.methods.swirl.reading import parse_step, question_text
from turnrl.tokens import end_of_turn
from turnrl.types import Message, Trajectory, Turn

ANSWER_FORMAT = "<answer>{}</answer>"


def grounded_at(traj: Trajectory, answer: str, judge: RuleStepJudge) -> int | None:
    """The index of the earliest step that ``<answer>answer</answer>`` can replace as a GOOD step (a step after at
    least one tool step, whose start token is known); None if there is none."""
    question = question_text(traj)
    turn = Turn(index=0, action=Message(role="assistant", content=ANSWER_FORMAT.format(answer)))
    for i in range(1, len(traj.turns)):
        if traj.turns[i].token_span is None:
            return None
        if judge.label_step(question, traj.turns[:i], turn, None).good:
            return i
    return None


def _left_alone(traj: Trajectory) -> str | None:
    """Why ``traj`` is not a candidate for a hindsight answer (``"already_correct"``, ``"no_gold"``: no gold label,
    no token fields or an error), or None."""
    if traj.correct is True:
        return "already_correct"
    gold = traj.metadata.get("gold")
    if not isinstance(gold, str) or not gold.strip() or traj.token_ids is None or traj.error is not None:
        return "no_gold"
    return None


def ground_answer(traj: Trajectory, tokenizer: Any, judge: RuleStepJudge | None = None) -> Trajectory | None:
    """``traj`` cut at its earliest grounded step with the gold answer written there (see the module docstring);
    None when it cannot be relabelled (no gold, no tokens, already correct, gold never grounded)."""
    if _left_alone(traj) is not None:
        return None
    gold = traj.metadata["gold"]
    at = grounded_at(traj, gold.strip(), judge or RuleStepJudge())
    if at is None:
        return None
    old = traj.turns[at]
    assert old.token_span is not None and traj.token_ids is not None  # _left_alone passed an episode with tokens
    start, end = old.token_span
    text = ANSWER_FORMAT.format(gold.strip())
    ids = list(tokenizer.encode(text, add_special_tokens=False)) + end_of_turn(tokenizer, traj.token_ids[start:end])
    original = [parse_step(t.action.content).text for t in traj.turns[at:]]
    turn = Turn(
        index=old.index,
        role=old.role,
        action=Message(role="assistant", content=text),
        observation=[],
        reward=1.0,
        terminated=True,
        truncated=False,
        token_span=(start, start + len(ids)),
        info={
            **{k: v for k, v in old.info.items() if k in ("role", "turn")},
            "correct": True,
            "relabelled": True,
            "extracted": gold.strip(),
            "tool_calls": [],
        },
    )
    assert traj.loss_mask is not None and traj.logprobs is not None
    segments = [s for s in traj.segments or [0] if s < start]  # the context segments before the cut
    meta = {k: v for k, v in traj.metadata.items() if k != "sampled_crc"}  # edited tokens: not what was sampled
    if isinstance(meta.get("segment_reasons"), list):
        meta["segment_reasons"] = meta["segment_reasons"][: len(segments) - 1]
    return traj.model_copy(
        update={
            "id": f"{traj.id}/grounded",
            "turns": [*traj.turns[:at], turn],
            "terminated": True,
            "truncated": False,
            "token_ids": traj.token_ids[:start] + ids,
            "loss_mask": traj.loss_mask[:start] + [1] * len(ids),
            "logprobs": traj.logprobs[:start] + [0.0] * len(ids),
            "token_versions": None,  # edited tokens: no sampler
            "segments": segments if traj.segments else None,
            "metadata": {**meta, "relabel": {"step": at, "replaced_steps": original, "source_correct": traj.correct}},
        }
    )


def ground_answers(
    trajectories: Sequence[Trajectory],
    tokenizer: Any,
    judge: RuleStepJudge | None = None,
) -> tuple[list[Trajectory], dict[str, int]]:
    """Every trajectory, relabelled where :func:`ground_answer` can (in the data's order), and a report:
    ``trajectories``, ``relabelled``, ``already_correct``, ``no_gold``, ``not_grounded`` (the gold answer is in
    none of its results) and ``steps_dropped`` (teacher steps after the new answer)."""
    judge = judge or RuleStepJudge()
    out: list[Trajectory] = []
    report = {
        "trajectories": len(trajectories),
        "relabelled": 0,
        "already_correct": 0,
        "no_gold": 0,
        "not_grounded": 0,
        "steps_dropped": 0,
    }
    for t in trajectories:
        new = ground_answer(t, tokenizer, judge)
        if new is not None:
            report["relabelled"] += 1
            report["steps_dropped"] += t.num_turns - new.num_turns
            out.append(new)
            continue
        out.append(t)
        report[_left_alone(t) or "not_grounded"] += 1
    return out, report
