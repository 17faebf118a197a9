"""Warm-up data for verifiers that check (ours, issue "verification that can check"; docs/algorithms.md §7).

A verifier that only reads its own answer has to *feel* whether it is right, which a small model cannot (SmolLM2's
verdicts did not depend on the answer's truth). One that recomputes with a tool only has to compare two numbers.
The data is built the way SWiRL builds tool-use data: from the environment, with a teacher for the steps the
policy cannot yet take.

* :class:`CheckingTeacher` is a rollout hook (``Rollout(rewrite=...)``) for PAG environments with
  ``verify_tools`` on: the policy writes the first answer as it would; each verifier turn is written by the teacher —
  first the oracle's tool call (the environment's own ``oracle_calls``: the calculation that solves the task, in the
  environment's tool format), then, with the tool's result in context, a short comparison and the *true* verdict of
  the first answer. With ``compare`` the comparison is a tool call too: the calculator on ``check − answer``, so
  that the verdict only has to read whether the tool said 0 (a verdict that copies a tool result, rather than one
  that compares two numbers itself). With ``revisions`` it also writes the revision after a "wrong" verdict: the
  check's result, stated the way the environment grades answers (a policy warmed up on checks alone answers the
  revise turn with another tool call, which the revise turn does not run). The environment runs the tool and
  grades everything as in training, so the episodes are token-exact and their infos say what the check found.
* :func:`checking_rows` cuts the verifier turns out as SWiRL step rows (the state exactly as the policy saw it, the
  loss on the step's action only), filtered step by step — a tool step is kept only when its call ran and its
  result told the truth about the first answer (``check_says_right`` equal to the answer's grade), a verdict step
  only when its verdict is the true one, a teacher's revision only when it is right — and balanced between right
  and wrong first answers (``down``: as many episodes of the majority truth as the minority has).

``turnrl pag checks`` does both; train the rows with ``algorithm.name: sft``, then PAG with ``init_from``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

from turnrl.agents.base import Completion
from turnrl.envs.core import TextEnv
from turnrl.methods.swirl.steps import decompose
from turnrl.types import Trajectory
from turnrl.verifiers.pag import VERDICT_CORRECT, VERDICT_WRONG


def check_call(env: Any) -> str | None:
    """The tool call a checking verifier writes for the current task: the first of the inner environment's
    ``oracle_calls``, in its tool format; None where it knows none or cannot write one."""
    inner = env.env
    calls = inner.oracle_calls(inner.task)
    write = getattr(inner.parser, "format_call", None)
    return write(calls[0]) if calls and write is not None else None


def compare_call(env: Any) -> str | None:
    """The second tool call of a comparing check: the calculator on ``check result − first answer`` (0: they
    agree), in the inner environment's tool format; None where the check gave no result, the answer states none, or
    the environment has no calculator."""
    inner = env.env
    write = getattr(inner.parser, "format_call", None)
    calls = inner.oracle_calls(inner.task)
    if not env.tool_results or env.first.extracted is None or write is None or not calls:
        return None
    from turnrl.types import ToolCall

    expression = f"{env.tool_results[0]} - ({env.first.extracted})"
    return write(ToolCall(name=calls[0].name, arguments={"expression": expression}))


def check_verdict(env: Any) -> str:
    """The verdict turn after a check: the tool's result, the first answer, whether they agree (with a comparing
    check: the difference the tool computed), the true verdict."""
    first = env.first
    truth = bool(first.correct)
    verdict = f"{VERDICT_CORRECT if truth else VERDICT_WRONG}."
    if not env.tool_results:
        return verdict
    if first.extracted is None:
        return f"The check gives {env.tool_results[0]} and the answer states no result. {verdict}"
    if len(env.tool_results) > 1:  # the comparison: check − answer
        gap = env.tool_results[-1]
        return f"The difference is {gap}{'' if truth else ', not 0'}. {verdict}"
    agree = "they agree" if truth else "they differ"
    return f"The check gives {env.tool_results[0]} and the answer was {first.extracted}: {agree}. {verdict}"


def check_revision(env: Any) -> str | None:
    """The revision a checking teacher writes after "wrong": the check's result (the first tool result) stated the
    way the inner environment grades answers; None without a result or a way to state it."""
    if not env.tool_results:
        return None
    return env.env.format_answer(str(env.tool_results[0]))


class CheckingTeacher:
    """Writes the verifier turns of ``verify_tools`` PAG episodes as checks (module docstring).

    Args:
        tokenizer: the policy's tokenizer (the teacher's turns are encoded with it and end with its end-of-sequence
            token, as a sampled turn that stopped would).
    """

    def __init__(self, tokenizer: Any, compare: bool = False, revisions: bool = False) -> None:
        self.tokenizer, self.compare, self.revisions = tokenizer, compare, revisions
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos = [int(eos)] if eos is not None else []

    def __call__(
        self,
        envs: Sequence[TextEnv],
        roles: Sequence[str],
        prompts: Sequence[list[int]],
        completions: Sequence[Completion],
    ) -> list[Completion | None]:
        """The teacher's reply for every verifier turn (and, with ``revisions``, every revision), None for the
        policy's other turns (kept as sampled)."""
        out: list[Completion | None] = [None] * len(completions)
        for i, (env, role, c) in enumerate(zip(envs, roles, completions)):
            inner: Any = env.unwrapped  # a SelfVerify environment, read by duck typing
            if role != "verifier":
                text = self._revision(inner)
                if text is not None:
                    out[i] = self._completion(text, c)
                continue
            if not getattr(inner, "verify_tools", False):
                raise ValueError(
                    f"the checking teacher writes tool calls in verify turns: {type(inner).__name__} "
                    "needs verify_tools=True (and an environment with tools, e.g. calculator=True)"
                )
            call = check_call(inner) if inner.verify_calls == 0 else None
            if self.compare and inner.verify_calls == 1 and inner.max_verify_calls >= 2:
                call = compare_call(inner)
            out[i] = self._completion(call if call is not None else check_verdict(inner), c)
        return out

    def writes(self, env: TextEnv, role: str) -> bool:
        """Whether the teacher writes this turn whatever the policy would sample (the rollout then does not sample
        it): every verifier turn, and with ``revisions`` every revision the check gives a result for."""
        return role == "verifier" or self._revision(env.unwrapped) is not None

    def _revision(self, inner: Any) -> str | None:
        """The teacher's revision of this turn: with ``revisions``, in the revise phase, where the check stated one."""
        return check_revision(inner) if self.revisions and getattr(inner, "phase", None) == "revise" else None

    def _completion(self, text: str, sampled: Completion) -> Completion:
        ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + self.eos
        return Completion(
            text=text, token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop", prompt_index=sampled.prompt_index
        )


def _verify_steps(traj: Trajectory) -> list[int]:
    return [i for i, t in enumerate(traj.turns) if t.info.get("phase") == "verify"]


def checking_rows(
    trajectories: Sequence[Trajectory], *, balance: Literal["down", "none"] = "down", seed: int = 0
) -> tuple[list[Trajectory], dict[str, float]]:
    """The filtered, balanced verifier step rows of checked PAG episodes (module docstring) and a report.

    Raises:
        ValueError: no episode has a graded first answer and a verify phase, or an unknown ``balance``.
    """
    if balance not in ("down", "none"):
        raise ValueError(f"balance must be 'down' or 'none', got {balance!r}")
    usable = [
        t
        for t in trajectories
        if t.error is None
        and t.token_ids is not None
        and _verify_steps(t)
        and t.turns[0].info.get("correct") is not None
    ]
    if not usable:
        raise ValueError(
            f"none of the {len(trajectories)} episodes has a graded first answer and a verify phase: "
            "the data must be whole, token-exact PAG episodes with verify_tools (turnrl pag checks)"
        )
    by = {truth: [t for t in usable if bool(t.turns[0].info["correct"]) == truth] for truth in (True, False)}
    kept = list(usable)
    report: dict[str, float] = {
        "episodes": float(len(trajectories)),
        "right_first": float(len(by[True])),
        "wrong_first": float(len(by[False])),
    }
    if balance == "down" and by[True] and by[False]:
        small, large = sorted(by.values(), key=len)
        chosen = {t.id for t in small} | {t.id for t in random.Random(seed).sample(large, len(small))}
        kept = [t for t in usable if t.id in chosen]
        report["dropped_episodes"] = float(len(large) - len(small))
    rows: list[Trajectory] = []
    tool_rows = verdict_rows = revision_rows = dropped_steps = 0
    for traj in kept:
        steps = decompose(traj)
        verdict_turn = traj.turns[_verify_steps(traj)[-1]]
        check_right = verdict_turn.info.get("check_says_right") == traj.turns[0].info["correct"]
        for i in _verify_steps(traj):
            turn = traj.turns[i]
            is_tool = bool(turn.info.get("verify_tool"))
            good = (
                (turn.info.get("error") is None and check_right) if is_tool else bool(turn.info.get("verdict_correct"))
            )
            if not good:
                dropped_steps += 1
                continue
            row = steps[i]
            row.metadata = {
                **row.metadata,
                "pag_rows": {
                    "kind": "check_call" if is_tool else "check_verdict",
                    "truth": "correct" if traj.turns[0].info["correct"] else "wrong",
                },
            }
            rows.append(row)
            tool_rows += is_tool
            verdict_rows += not is_tool
        for i, turn in enumerate(traj.turns):  # the teacher's revisions (revisions=True), where right
            if turn.info.get("phase") != "revise" or not turn.info.get("rewritten"):
                continue
            if not turn.info.get("correct"):
                dropped_steps += 1
                continue
            row = steps[i]
            row.metadata = {**row.metadata, "pag_rows": {"kind": "check_revision", "truth": "wrong"}}
            rows.append(row)
            revision_rows += 1
    report.update(
        rows=float(len(rows)),
        tool_rows=float(tool_rows),
        verdict_rows=float(verdict_rows),
        revision_rows=float(revision_rows),
        dropped_steps=float(dropped_steps),
    )
    return rows, report


def generate_checks(
    agent: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    *,
    tasks: int,
    samples: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int = 128,
    seed: int = 0,
    batch_episodes: int = 64,
    on_batch: Any = None,
    compare: bool = False,
    revisions: bool = False,
) -> list[Trajectory]:
    """Play ``samples`` checked PAG episodes of each of the first ``tasks`` tasks: the policy ``agent`` answers, the
    :class:`CheckingTeacher` verifies (``compare``: with a comparing check; ``revisions``: and revises after
    "wrong"); returns the whole episodes.
    ``on_batch(done, total)`` after each batch.

    The turns the teacher writes are not sampled (:meth:`CheckingTeacher.writes`): a batch costs the first answers
    (and, without ``revisions``, the revisions) only."""
    from turnrl.agents.base import SamplingParams
    from turnrl.envs.registry import make
    from turnrl.rollout.engine import Rollout

    teacher = CheckingTeacher(agent.tokenizer, compare=compare, revisions=revisions)
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    jobs = [(task, k) for task in range(tasks) for k in range(samples)]
    items = _items(env_id, env_kwargs, tasks)
    out: list[Trajectory] = []
    for start in range(0, len(jobs), batch_episodes):
        chunk = jobs[start : start + batch_episodes]
        envs = [make(env_id, **env_kwargs) for _ in chunk]
        try:
            rollout = Rollout(agent, params, rewrite=teacher)
            played = rollout.run(
                envs,
                seeds=[seed * 1_000_003 + task * 101 + k for task, k in chunk],
                options=[{"index": task} for task, _ in chunk],
            )
        finally:
            for env in envs:
                env.close()
        for (task, _), traj in zip(chunk, played):  # each task's canonical form, as turnrl rollout records it
            if task in items:
                traj.metadata = {**traj.metadata, "item": items[task]}
        out += played
        if on_batch is not None:
            on_batch(len(out), len(jobs))
    return out


def _items(env_id: str, env_kwargs: dict[str, Any], tasks: int) -> dict[int, str]:
    """The canonical form of each of the first ``tasks`` tasks (a run that trains on the rows refuses its held-out
    and validation problems by them); none where the environment has no list of tasks."""
    from turnrl.envs.conformance.split_check import task_items
    from turnrl.envs.registry import make

    probe = make(env_id, **env_kwargs)
    try:
        return task_items(probe, tasks)
    finally:
        probe.close()
