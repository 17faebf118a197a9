"""Verdict rows for a PAG verifier warm-up (ours; docs/algorithms.md §7 names the collapse this answers).

PAG's verifier learns only from the verdicts it samples. A small policy that (almost) never writes one of the two
verdicts — SmolLM2-135M writes "The answer is correct" in ~5 % of its verifications of Arithmetic, half of them
unparseable — collapses onto the other, with or without ``verifier_balance``: an exploration failure, not a reward
problem. The warm-up gives both verdicts a start by supervised learning on the truth the environment already
knows, the way a generative verifier is trained from labels:

* from PAG episodes of any policy (``turnrl rollout`` on a ``*-PAG-v0`` environment), one row per episode with a
  verify turn: the *state* is the token prefix before that turn, exactly as the policy saw it (its own first answer
  and the verify prompt); the *action* is the true verdict of that first answer (its ``correct`` grade), written as
  one of two fixed sentences — relabelled in hindsight, not sampled;
* ``balance``: ``"down"`` keeps as many rows of the majority verdict as the minority has (a seeded choice),
  ``"up"`` repeats the minority's rows until both have as many, ``"none"`` keeps the truth's own shares. ``"down"``
  is the default: repeated rows add no new states for the minority verdict. (A first measurement, "up" teaching
  "wrong" everywhere, was a bug: every "correct" row kept its first answer's reward on a context turn and was left
  out of training as untrainable — only "wrong" rows were trained on. Rows now keep context rewards in ``info``.);
* ``revisions``: also the revision turns that turned a wrong first answer right (after a "wrong" verdict, so they
  agree with the relabelled state), as they were sampled;
* ``sibling_revisions``: a revision for every wrong first answer whose question the policy also answered right in
  another episode (``task_id``): the state is the wrong episode's own, continued with the true verdict "wrong" and
  the environment's revise prompt (the chat template's tokens, as a rollout appends them); the action is that
  right sibling answer's tokens, as sampled. Revisions that fix what they revise are what PAG's revision bonus
  rewards, and a small policy almost never samples one (none in 20 steps on SmolLM2); pairing a worse output with
  a better one of the same policy is how Welleck et al. (2022, "Generating Sequences by Learning to
  Self-Correct") train a corrector;
* ``rationales``: each verdict row re-solves before it judges — its action is the shortest right first answer to
  the same question from another episode (the policy's own words), a blank line, then the true verdict. A verdict
  alone asks a small model to tell a right sum from a wrong one in a single token (SmolLM2's warm-up verdicts did
  not depend on the answer's truth: "correct" on 73 % of right and 75 % of wrong answers); a verifier that re-solves
  only has to compare two answers in its context, as generative verifiers write a check before the verdict.
  Episodes whose question the data never answers right give no verdict row.

The rows have the layout of SWiRL's step rows (loss mask on the action only), so ``algorithm.name: sft`` trains
on them; then ``pag`` starts from that run (``init_from``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

from turnrl.envs.formats.self_verify import REVISE_PROMPT
from turnrl.methods.swirl.steps import context_turn, decompose
from turnrl.tokens import ChatRenderer, end_of_turn
from turnrl.types import Message, Trajectory, Turn
from turnrl.verifiers.pag import VERDICT_CORRECT, VERDICT_WRONG

VERDICT_TEXT = {"correct": f"{VERDICT_CORRECT}.", "wrong": f"{VERDICT_WRONG}."}


def _whole(traj: Trajectory) -> bool:
    """A token-exact whole episode (not a step row, whose earlier turns have no token spans)."""
    return traj.error is None and traj.token_ids is not None and all(t.token_span is not None for t in traj.turns)


def _phase_index(traj: Trajectory, phase: str) -> int | None:
    return next((i for i, t in enumerate(traj.turns) if t.info.get("phase") == phase), None)


def _answer_turn(traj: Trajectory) -> Turn:
    """The answer turn of an episode that has one (a right answer's, from :func:`right_answers`)."""
    i = _phase_index(traj, "answer")
    assert i is not None
    return traj.turns[i]


def verdict_row(traj: Trajectory, tokenizer: Any, rationale: str | None = None) -> Trajectory | None:
    """The episode's verify state with the true verdict of its first answer as the action; None if the episode has
    no verify turn (it ended at the answer, failed, or is not a PAG episode) or its first answer is ungraded.

    With ``rationale`` the action is that text, a blank line and the verdict (tokenized as one text)."""
    answer, verify = _phase_index(traj, "answer"), _phase_index(traj, "verify")
    if answer is None or verify is None or not _whole(traj):
        return None
    correct = traj.turns[answer].info.get("correct")
    if correct is None:
        return None
    truth = "correct" if correct else "wrong"
    text = f"{rationale.strip()}\n\n{VERDICT_TEXT[truth]}" if rationale and rationale.strip() else VERDICT_TEXT[truth]
    row = decompose(traj)[verify]
    span, tokens = row.turns[-1].token_span, row.token_ids
    assert span is not None and tokens is not None  # a whole episode's rows have their tokens
    start, end = span
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    ids += end_of_turn(tokenizer, tokens[start:end])
    turn = row.turns[-1]
    sampled = turn.info.get("verdict")
    row.turns[-1] = turn.model_copy(
        update={
            "action": Message(role="assistant", content=text),
            "token_span": (start, start + len(ids)),
            "reward": 1.0,
            "terminated": truth == "correct",
            "info": {**turn.info, "verdict": truth, "verdict_correct": True, "sampled_verdict": sampled},
        }
    )
    row.token_ids = tokens[:start] + ids
    row.loss_mask = [0] * start + [1] * len(ids)
    row.logprobs = [0.0] * (start + len(ids))
    row.id = f"{traj.id}/verdict"
    row.metadata = {**row.metadata, "pag_rows": {"kind": "verdict", "truth": truth, "sampled_verdict": sampled}}
    return row


def revision_row(traj: Trajectory) -> Trajectory | None:
    """The episode's revision as sampled, when it turned a wrong first answer right; else None."""
    revise = _phase_index(traj, "revise")
    if revise is None or not _whole(traj):
        return None
    info = traj.turns[revise].info
    if not (info.get("correct") and info.get("first_correct") is False):
        return None
    row = decompose(traj)[revise]
    row.metadata = {**row.metadata, "pag_rows": {"kind": "revision"}}
    return row


def _revise_prompt(trajectories: Sequence[Trajectory]) -> str:
    """The environment's revise prompt, as an episode that revised shows it (else the default)."""
    for traj in trajectories:
        verify = _phase_index(traj, "verify")
        if verify is not None and _phase_index(traj, "revise") is not None:
            users = [m.content for m in traj.turns[verify].observation if m.role == "user"]
            if users:
                return users[-1]
    return REVISE_PROMPT


def right_answers(trajectories: Sequence[Trajectory]) -> dict[str | None, list[Trajectory]]:
    """The whole episodes whose first answer is right, by question (``task_id``), in the data's order."""
    right: dict[str | None, list[Trajectory]] = {}
    for traj in trajectories:
        answer = _phase_index(traj, "answer")
        if answer is not None and _whole(traj) and traj.turns[answer].info.get("correct") is True:
            right.setdefault(traj.task_id, []).append(traj)
    return right


def sibling_rationale(traj: Trajectory, right: dict[str | None, list[Trajectory]]) -> str | None:
    """The verification text a re-solving verifier would write for ``traj``'s first answer: the shortest right first
    answer to the same question from another episode (the episode's own when it is the only right one), or None."""
    others = [t for t in right.get(traj.task_id, []) if t.id != traj.id] or right.get(traj.task_id, [])
    texts = [_answer_turn(t).action.content for t in others]
    return min(texts, key=len) if texts else None


def sibling_revision_rows(
    trajectories: Sequence[Trajectory], tokenizer: Any, rationales: bool = False
) -> list[Trajectory]:
    """For each wrong first answer whose question has a right first answer in another episode: the wrong episode's
    revision state after the true verdict (with ``rationales``, the verdict row's re-solving text before it), with
    that right answer's tokens as the action (module docstring)."""
    found = right_answers(trajectories)
    right = {task: episodes[0] for task, episodes in found.items()}
    renderer = ChatRenderer(tokenizer)
    ends = set(getattr(tokenizer, "all_special_ids", []) or []) | {getattr(tokenizer, "eos_token_id", None)}
    prompt = Message(role="user", content=_revise_prompt(trajectories))
    rows = []
    for traj in trajectories:
        answer = _phase_index(traj, "answer")
        sibling = right.get(traj.task_id)
        if answer is None or sibling is None or traj.turns[answer].info.get("correct") is not False:
            continue
        verdict = verdict_row(traj, tokenizer, sibling_rationale(traj, found) if rationales else None)
        if verdict is None:
            continue
        assert verdict.token_ids is not None
        # the verdict ends with its end-of-turn token (end_of_turn: the sampled one's own, else eos), as a rollout
        # sees a turn that ended at a stop token
        ended = verdict.token_ids[-1] in ends
        state = verdict.token_ids + renderer.observation_tokens([prompt], ended_with_eos=ended)
        source = _answer_turn(sibling)
        # a right answer's episode is whole: its tokens and log-probabilities (all token fields or none)
        assert source.token_span is not None and sibling.token_ids is not None and sibling.logprobs is not None
        s, e = source.token_span
        action = sibling.token_ids[s:e]
        context = [*verdict.turns[:-1], context_turn(verdict.turns[-1]).model_copy(update={"observation": [prompt]})]
        revise = source.model_copy(
            update={
                "index": len(context),
                "token_span": (len(state), len(state) + len(action)),
                "observation": [],
                "reward": 1.0,
                "terminated": True,
                "info": {
                    **source.info,
                    "phase": "revise",
                    "correct": True,
                    "first_correct": False,
                    "sibling": sibling.id,
                },
            }
        )
        rows.append(
            verdict.model_copy(
                update={
                    "id": f"{traj.id}/sibling-revision",
                    "turns": [*context, revise],
                    "terminated": True,
                    "token_ids": state + action,
                    "loss_mask": [0] * len(state) + [1] * len(action),
                    "logprobs": [0.0] * len(state) + list(sibling.logprobs[s:e]),
                    "token_versions": None,
                    "metadata": {**verdict.metadata, "pag_rows": {"kind": "sibling_revision", "sibling": sibling.id}},
                }
            )
        )
    return rows


def pag_rows(
    trajectories: Sequence[Trajectory],
    tokenizer: Any,
    *,
    balance: Literal["down", "up", "none"] = "down",
    revisions: bool = False,
    sibling_revisions: bool = False,
    rationales: bool = False,
    seed: int = 0,
) -> tuple[list[Trajectory], dict[str, float]]:
    """The warm-up rows of ``trajectories`` (see the module docstring) and a report of what was kept.

    With ``rationales`` each verdict row re-solves before its verdict (:func:`sibling_rationale`); an episode whose
    question has no right answer in the data has no rationale and gives no verdict row (counted: ``no_rationale``).

    Raises:
        ValueError: no episode has a graded verify turn (the data is not PAG episodes, or every episode failed), or
            an unknown ``balance``.
    """
    if balance not in ("down", "up", "none"):
        raise ValueError(f"balance must be 'down', 'up' or 'none', got {balance!r}")
    right = right_answers(trajectories) if rationales else {}
    texts = {t.id: sibling_rationale(t, right) for t in trajectories} if rationales else {}
    graded = [(t, r) for t in trajectories if (r := verdict_row(t, tokenizer, texts.get(t.id))) is not None]
    if not graded:
        raise ValueError(
            f"none of the {len(trajectories)} episodes has a graded verify turn: the data must be whole, "
            "token-exact PAG episodes (turnrl rollout --env turnrl/Arithmetic-PAG-v0 ...), not rows"
        )
    verdicts = [r for t, r in graded if not rationales or texts[t.id]]
    if not verdicts:
        raise ValueError(
            f"rationales: none of the {len(graded)} graded verify turns has a right answer to its "
            "question in the data to re-solve with (no episode answered right)"
        )
    by = {v: [r for r in verdicts if r.metadata["pag_rows"]["truth"] == v] for v in ("correct", "wrong")}
    sampled = [r.metadata["pag_rows"]["sampled_verdict"] for r in verdicts]
    report: dict[str, float] = {
        "episodes": float(len(trajectories)),
        "verdict_rows": float(len(verdicts)),
        "truth_correct": float(len(by["correct"])),
        "truth_wrong": float(len(by["wrong"])),
        "sampled_verdict_agreed": sum(s == r.metadata["pag_rows"]["truth"] for s, r in zip(sampled, verdicts))
        / len(verdicts),
        "sampled_verdict_unparseable": sum(s is None for s in sampled) / len(verdicts),
    }
    if rationales:
        report["no_rationale"] = float(len(graded) - len(verdicts))
    rows = list(verdicts)
    if balance != "none" and by["correct"] and by["wrong"]:
        small, large = sorted(by.values(), key=len)
        if balance == "down":
            keep = {id(r) for r in small} | {id(r) for r in random.Random(seed).sample(large, len(small))}
            rows = [r for r in verdicts if id(r) in keep]  # in the data's order
            report["dropped_rows"] = float(len(large) - len(small))
        else:
            n = len(small)
            rows += [
                small[i % n].model_copy(update={"id": f"{small[i % n].id}/repeat-{i // n}"})
                for i in range(len(large) - n)
            ]
            report["repeated_rows"] = float(len(large) - len(small))
    if revisions:
        fixed = [r for r in (revision_row(t) for t in trajectories) if r is not None]
        rows += fixed
        report["revision_rows"] = float(len(fixed))
    if sibling_revisions:
        paired = sibling_revision_rows(trajectories, tokenizer, rationales)
        rows += paired
        report["sibling_revision_rows"] = float(len(paired))
    report["rows"] = float(len(rows))
    return rows, report
