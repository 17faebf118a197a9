"""PAG episodes: the policy answers, verifies its own answer, and revises only after "wrong".

docs/algorithms.md §7 (Jiang et al., 2025, arXiv 2506.10406). ``SelfVerify(env)`` turns any single-answer
environment — one that can grade a response with ``env.score(text) -> Verdict`` — into the episode

    answer (role "policy") → verify (role "verifier") → [revise (role "policy"), only after "wrong"]

with one reward per turn, each meant for the last token of its turn:

* answer: R_y = 1 if the answer is correct, else 0;
* verify: R_v = 1 if the verdict matches the truth of the answer, else 0 (0 when unparseable);
* revise: acc₂ + α·(acc₂ − acc₁), α = 1.

``mode="eval"`` revises whenever the verdict is not "correct" (also when unparseable), as the paper evaluates.

``verify_tools=True`` (default off: the paper's setting) lets the verify turn *check*: before its verdict the verifier
may call the inner environment's tools (the calculator of a math environment built with ``calculator=True``) up to
``max_verify_calls`` times; each tool turn is a verifier turn whose observation is the tool's result (errors
included, as observations), its own reward 0 — the trainer gives it the verdict's reward (§7: every verifier turn of
an episode is rewarded with its verdict). After the last allowed call the next reply is read as the verdict, tool
call or not. The verdict turn's info says how many tool turns preceded it (``verify_tool_calls``), whether the last
tool result matched the first answer (``check_says_right``; None where no result could be compared) and whether
the verdict agreed with that check (``tool_agreed``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Literal

from turnrl.envs.core import Obs, StepResult, TextEnv
from turnrl.envs.formats.self_verify_metrics import pag_episode, pag_summary, self_verification_lines
from turnrl.envs.tool_env import tool_observation
from turnrl.types import Message, Trajectory
from turnrl.verifiers.base import Verdict
from turnrl.verifiers.pag import VERDICT_CORRECT, VERDICT_WRONG, parse_verdict, revision_reward, verdict_reward

VERIFY_PROMPT = (
    "Check the solution step by step. If you find a mistake, state the wrong step, explain why, and end with "
    f"'{VERDICT_WRONG}'. If all steps are correct, end with '{VERDICT_CORRECT}'."
)
VERIFY_TOOLS_CHECK = (  # what the verify turn may check with tools; an environment may ask its own (verify_tools_check)
    "Check the solution. You may recompute it with a tool first and compare the tool's result with your answer."
)
VERDICT_REQUEST = f"If it is wrong, end with '{VERDICT_WRONG}'. If it is right, end with '{VERDICT_CORRECT}'."
VERIFY_TOOLS_PROMPT = f"{VERIFY_TOOLS_CHECK} {VERDICT_REQUEST}"
REVISE_PROMPT = "You indicated that your previous answer was wrong. Please provide the correct solution."

Phase = Literal["answer", "verify", "revise", "done"]


class SelfVerify(TextEnv):
    """Wrap a single-answer environment into a PAG self-verification episode (see the module docstring).

    Args:
        env: the inner environment; it must provide ``score(response) -> Verdict`` for its current task (every
            :class:`~turnrl.envs.tool_env.ToolEnv`, hence every math environment, does). Only its ``reset`` and
            ``score`` are used; its own turn limit does not apply.
        alpha: the revision bonus α.
        mode: ``"train"`` revises only after "wrong"; ``"eval"`` whenever the verdict is not "correct".
        verify_prompt: the user message that asks for the verification.
        revise_prompt: the user message that asks for a revision.
        verdict_parser: reads the verifier turn's verdict — ``"correct"``, ``"wrong"`` or None (unparseable);
            default :func:`~turnrl.verifiers.pag.parse_verdict` (one end-anchored "The answer is correct/wrong").
        verdict_texts: a short reply for each verdict, ``{"correct": ..., "wrong": ...}``, that ``verdict_parser``
            reads as that verdict (default "The answer is correct." / "The answer is wrong."); what a trainer writes
            when it needs a verdict the policy did not sample (``pag``'s ``verdict_explore``).
        verify_tools: let the verify turn call the inner environment's tools before its verdict (the module
            docstring); the inner environment must have tools. ``verify_prompt`` then defaults to
            ``VERIFY_TOOLS_PROMPT`` (its first sentences replaced by the inner environment's own
            ``verify_tools_check`` where it has one, e.g. the code environments': run the code on the examples;
            the verdict request stays) followed by the tools' description and call format, and
            the inner environment's system prompt no longer describes them (the first answer is written without
            tools, as in the paper).
        max_verify_calls: the most tool turns before the verdict (with ``verify_tools``).
        recall_answer: after the verifier's first tool turn, restate the first answer beside the tool's result
            ("Your answer was 25."): the verdict compares two numbers next to each other instead of finding the
            answer turns back (with ``verify_tools``; default off). It tells nothing about the answer's truth.

    ``turnrl eval`` and the trainer's held-out evaluations build it with ``mode="eval"`` unless told otherwise
    (``evaluation_options``).

    ``info`` of every step carries ``role`` (who acted: "policy" or "verifier"), ``phase`` ("answer", "verify",
    "revise"), ``next_role`` (who acts next, or None at the end) and ``correct`` (of the answer turns).
    """

    evaluation_options: dict[str, Any] = {"mode": "eval"}  # noqa: RUF012 — read-only

    def summarize_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """PAG's figures (:func:`turnrl.envs.formats.self_verify_metrics.pag_summary`): Acc@turn1, Acc@final, verifier
        accuracy (also on right and on wrong first answers, and balanced), verdict shares, revisions."""
        return pag_summary(pag_episode(t) for t in trajectories)

    def report_lines(self, metrics: dict[str, Any]) -> list[str]:
        """The verifier's balanced accuracy first, then what self-revision did
        (:func:`turnrl.envs.formats.self_verify_metrics.self_verification_lines`)."""
        return self_verification_lines(metrics)

    def __init__(
        self,
        env: TextEnv,
        *,
        alpha: float = 1.0,
        mode: Literal["train", "eval"] = "train",
        verify_prompt: str | None = None,
        revise_prompt: str = REVISE_PROMPT,
        verdict_parser: Callable[[str], Literal["correct", "wrong"] | None] = parse_verdict,
        verdict_texts: dict[str, str] | None = None,
        verify_tools: bool = False,
        max_verify_calls: int = 2,
        recall_answer: bool = False,
        render_mode: str | None = None,
    ) -> None:
        # a single-answer environment, read by duck typing: score, toolbox, parser, format_answer, verifier…
        inner: Any = getattr(env, "unwrapped", env)
        if not callable(getattr(inner, "score", None)):
            raise TypeError(
                f"SelfVerify needs a single-answer environment with a score(response) -> Verdict method; "
                f"{type(inner).__name__} has none"
            )
        if verify_tools and not len(getattr(inner, "toolbox", ()) or ()):
            raise ValueError(
                f"verify_tools needs an environment with tools; {type(inner).__name__} has none here "
                "(math environments: calculator=True; code: python=True; or verify_tools=False, the "
                "paper's setting)"
            )
        if max_verify_calls < 1:
            raise ValueError(f"max_verify_calls must be at least 1, got {max_verify_calls}")
        if recall_answer and not verify_tools:
            raise ValueError(
                "recall_answer restates the first answer beside the verifier's first tool result: it "
                "needs verify_tools=True (and an environment with tools)"
            )
        if verify_prompt is None:
            verify_prompt = VERIFY_PROMPT
            if verify_tools:  # the tools are offered where they may be used: in the verify turn, not the answer's
                check = getattr(inner, "verify_tools_check", VERIFY_TOOLS_CHECK)  # the check this env's tools make
                verify_prompt = f"{check} {VERDICT_REQUEST}\n\n{inner.parser.instructions(inner.tools)}"
                inner.describe_tools = False
        for name, prompt in (("verify_prompt", verify_prompt), ("revise_prompt", revise_prompt)):
            if not isinstance(prompt, str):
                raise TypeError(
                    f"{name} must be a string, got {type(prompt).__name__} ({prompt!r:.60}); on the command "
                    "line a value is read as YAML: quote it if it holds ': '"
                )
        if mode not in ("train", "eval"):
            raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
        self.verify_tools, self.max_verify_calls = bool(verify_tools), int(max_verify_calls)
        self.recall_answer = bool(recall_answer)
        super().__init__(max_turns=3 + (self.max_verify_calls if verify_tools else 0), render_mode=render_mode)
        self.env = inner
        self.split, self.held_out_split = getattr(inner, "split", None), getattr(inner, "held_out_split", None)
        self.validation_split = getattr(inner, "validation_split", None)
        self.train_split = getattr(inner, "train_split", None)
        self.alpha = float(alpha)
        self.mode = mode
        self.verify_prompt = verify_prompt
        self.revise_prompt = revise_prompt
        self.verdict_parser = verdict_parser
        texts = dict(verdict_texts or {"correct": f"{VERDICT_CORRECT}.", "wrong": f"{VERDICT_WRONG}."})
        misread = [v for v in ("correct", "wrong") if verdict_parser(texts.get(v, "")) != v]
        if misread and verdict_texts is not None:
            v = misread[0]
            raise ValueError(
                f"verdict_texts[{v!r}] = {texts.get(v)!r} is not read as {v!r} by the verdict parser: "
                "give a reply for each verdict that the parser reads as that verdict"
            )
        self.verdict_texts: dict[str, str] | None = None if misread else texts  # None: a parser of its own, no texts
        self.phase: Phase = "answer"
        self.first: Verdict | None = None
        self.verify_calls = 0  # tool turns in this episode's verify phase
        self.tool_results: list[str] = []  # their successful results, in order

    @property
    def task(self) -> Any:
        """The inner environment's current task."""
        return getattr(self.env, "task", None)

    def __len__(self) -> int:
        """The inner environment's number of tasks (``reset(options={"index": i})`` poses task ``i``)."""
        if not hasattr(self.env, "__len__"):
            raise TypeError(f"{type(self.env).__name__} does not say how many tasks it has")
        return len(self.env)

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        seed = int(self.np_random.integers(2**31))  # the inner env draws from a seed derived from ours
        obs, info = self.env.reset(seed=seed, options=options)
        self.phase, self.first = "answer", None
        self.verify_calls, self.tool_results = 0, []
        return obs, {**info, "role": "policy", "next_role": "policy", "phase": "answer"}

    def _step(self, action: str) -> StepResult:
        if self.phase == "answer":
            self.first = self.env.score(action)
            self.phase = "verify"
            info = self._info(
                "answer", "policy", "verifier", correct=self.first.correct, extracted=self.first.extracted
            )
            return (Message(role="user", content=self.verify_prompt),), self.first.score, False, False, info
        assert self.first is not None
        if self.phase == "verify":
            calls = self.verify_tool_calls(action)
            if calls is not None:
                return self._tool_turn(calls, [self.env.toolbox.invoke(c) for c in calls.calls])
            verdict = self.verdict_parser(action)
            reward = verdict_reward(verdict, self.first.correct)
            revise = verdict == "wrong" or (self.mode == "eval" and verdict != "correct")
            check = self._check_says_right()
            info = self._info(
                "verify",
                "verifier",
                "policy" if revise else None,
                verdict=verdict,
                verdict_correct=reward == 1.0,
                correct=self.first.correct,
                **(
                    {
                        "verify_tool_calls": self.verify_calls,
                        "check_says_right": check,
                        "tool_agreed": None if check is None or verdict is None else (verdict == "correct") == check,
                    }
                    if self.verify_tools
                    else {}
                ),
            )
            if revise:
                self.phase = "revise"
                return (Message(role="user", content=self.revise_prompt),), reward, False, False, info
            self.phase = "done"
            return (), reward, True, False, info
        second = self.env.score(action)
        self.phase = "done"
        reward = revision_reward(self.first.correct, second.correct, self.alpha)
        info = self._info(
            "revise",
            "policy",
            None,
            correct=second.correct,
            extracted=second.extracted,
            first_correct=self.first.correct,
        )
        return (), reward, True, False, info

    async def _astep(self, action: str) -> StepResult:
        calls = self.verify_tool_calls(action) if self.phase == "verify" else None
        if calls is None:
            return await super()._astep(action)
        return self._tool_turn(calls, await asyncio.gather(*(self.env.toolbox.ainvoke(c) for c in calls.calls)))

    def verify_tool_calls(self, action: str) -> Any:
        """The tool calls of a verify-phase reply, when tools are on and calls remain; else None (the reply is the
        verdict turn)."""
        if not self.verify_tools or self.verify_calls >= self.max_verify_calls:
            return None
        parsed = self.env._parse(action)
        return parsed if parsed.found else None

    def _tool_turn(self, parsed: Any, outputs: Sequence[Any]) -> StepResult:
        """A verifier tool turn: the results (or errors) as observations, reward 0, the verifier acts next."""
        assert self.first is not None  # the verify phase follows the answer
        self.verify_calls += 1
        self.tool_results += [out.content for out in outputs if out.ok]
        messages, error = tool_observation(parsed, outputs)
        if self.recall_answer and self.verify_calls == 1:  # the two numbers to compare, side by side
            said = "stated no result" if self.first.extracted is None else f"was {self.first.extracted}"
            messages.append(Message(role="user", content=f"Your answer {said}."))
        info = self._info("verify", "verifier", "verifier", verify_tool=True, correct=self.first.correct)
        info.update(tool_calls=[c.model_dump() for c in parsed.calls], error=error)
        return tuple(messages), 0.0, False, False, info

    def _check_says_right(self) -> bool | None:
        """Whether the check — the first tool result (a later call may compare it with the answer) — equals the
        first answer, judged by the inner verifier (the result as the reference); False for a first answer that
        states nothing the verifier could extract; None without a result or a way to state the answer."""
        if not self.tool_results or self.first is None:
            return None
        if self.first.extracted is None:
            return False
        stated = self.env.format_answer(str(self.first.extracted))
        if stated is None:
            return None
        try:
            return bool(self.env.verifier(stated, self.tool_results[0]).correct)
        except Exception:  # a figure only: a result the verifier cannot read compares as unknown
            return None

    @staticmethod
    def _info(phase: str, role: str, next_role: str | None, **extra: Any) -> dict[str, Any]:
        return {"phase": phase, "role": role, "next_role": next_role, "tool_calls": [], "error": None, **extra}

    def oracle_action(self) -> str | None:
        """The reference answer as the inner environment states answers (its own oracle where it states none: an
        oracle that would call a tool first cannot here, the answer turn takes no tools), then "The answer is
        correct"."""
        if self.phase == "verify":
            return f"I checked every step. {VERDICT_CORRECT}."
        task, state = self.env.task, getattr(self.env, "format_answer", None)
        stated = state(str(task.answer)) if task is not None and state is not None else None
        return stated if stated is not None else self.env.oracle_action()

    def wrong_action(self) -> str:
        """A wrong answer in the answer/revise turns, an unparseable verdict in the verify turn."""
        return self.env.wrong_action() if self.phase != "verify" else "I am not sure."


def _pag(cls_path: str, **kwargs: Any) -> SelfVerify:
    pag_keys = {
        "alpha",
        "mode",
        "verify_prompt",
        "revise_prompt",
        "verdict_parser",
        "verdict_texts",
        "verify_tools",
        "max_verify_calls",
        "recall_answer",
        "render_mode",
    }
    pag = {k: kwargs.pop(k) for k in list(kwargs) if k in pag_keys}
    module, name = cls_path.split(":")
    import importlib

    inner_cls = getattr(importlib.import_module(module), name)
    return SelfVerify(inner_cls(**kwargs), **pag)


def gsm8k_pag(**kwargs: Any) -> SelfVerify:
    """``turnrl/GSM8K-PAG-v0``: GSM8K as a PAG episode; kwargs go to SelfVerify or to GSM8KEnv."""
    return _pag("turnrl.envs.builtin.math:GSM8KEnv", **kwargs)


def math500_pag(**kwargs: Any) -> SelfVerify:
    """``turnrl/MATH500-PAG-v0``: MATH-500 as a PAG episode; kwargs go to SelfVerify or to MATH500Env."""
    return _pag("turnrl.envs.builtin.math:MATH500Env", **kwargs)


def humaneval_pag(**kwargs: Any) -> SelfVerify:
    """``turnrl/HumanEval-PAG-v0``: HumanEval as a PAG episode; kwargs go to SelfVerify or to HumanEvalEnv
    (``python=True, verify_tools=True``: the verifier may run the candidate on the problem's examples)."""
    return _pag("turnrl.envs.builtin.code:HumanEvalEnv", **kwargs)


def hotpotqa_pag(**kwargs: Any) -> SelfVerify:
    """``turnrl/HotPotQA-PAG-v0``: HotPotQA as a PAG episode; kwargs go to SelfVerify or to HotPotQAEnv
    (``verify_tools=True``: the verifier may search and look articles up before its verdict)."""
    return _pag("turnrl.envs.builtin.hotpotqa:HotPotQAEnv", **kwargs)


def arithmetic_pag(**kwargs: Any) -> SelfVerify:
    """``turnrl/Arithmetic-PAG-v0``: Arithmetic as a PAG episode; kwargs go to SelfVerify or to ArithmeticEnv."""
    return _pag("turnrl.envs.builtin.arithmetic:ArithmeticEnv", **kwargs)
