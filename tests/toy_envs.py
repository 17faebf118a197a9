"""Toy environments shared by the trainer tests (importable by Ray workers through the tests folder on sys.path)."""

import turnrl
from turnrl.envs import Task, ToolEnv
from turnrl.envs.core import TextEnv, pick_index
from turnrl.types import Message
from turnrl.verifiers.base import Verdict


def upper(text: str, ref: str) -> Verdict:
    """Correct when the reply starts with a capital letter."""
    ok = text.strip()[:1].isupper()
    return Verdict(correct=ok, score=float(ok))


class UpperEnv(ToolEnv):
    """Toy env: one kind of answer is rewarded (a reply that starts with a capital letter)."""

    def __init__(self, **kw):
        super().__init__(
            [Task(id=f"t{i}", prompt=f"Say something {i}.", answer="") for i in range(8)], verifier=upper, **kw
        )


turnrl.register("tests/Upper-v0", "toy_envs:UpperEnv")


def assert_learns(history, margin=0.3):
    """The learning check of a run on tests/Upper-v0: mean success over its first five steps below 0.5, over its last
    five more than ``margin`` above that (a run that does not learn stays within about 0.1 of its start)."""
    early, late = (sum(h["success"] for h in history[a:b]) / 5 for a, b in ((1, 6), (-5, None)))
    assert early < 0.5 and late > early + margin, (early, late)


class SlowEnv(UpperEnv):
    """UpperEnv whose task i takes 0.5·i seconds to grade: episodes of one batch finish one after another."""

    def _step(self, action):
        import time

        time.sleep(0.5 * int(self.task.id[1:]))
        return super()._step(action)

    async def _astep(self, action):
        import asyncio

        return await asyncio.to_thread(self._step, action)  # the blocking step in a thread, as a plain env's


class HangingEnv(UpperEnv):
    """UpperEnv whose task 0 never finishes grading (an environment that hangs)."""

    def _step(self, action):
        import time

        if self.task.id == "t0":
            time.sleep(10**6)
        return super()._step(action)

    async def _astep(self, action):
        import asyncio

        return await asyncio.to_thread(self._step, action)  # a thread that never returns: cut by the step timeout


class WorkerHostileEnv(UpperEnv):
    """Builds in the test's own process only (TURNRL_TEST_PID): a rollout worker that builds it dies at start."""

    def __init__(self, **kw):
        import os

        if os.getpid() != int(os.environ.get("TURNRL_TEST_PID", os.getpid())):
            raise RuntimeError("this environment's data is not available on the worker")
        super().__init__(**kw)


turnrl.register("tests/Slow-v0", "toy_envs:SlowEnv")
turnrl.register("tests/Hanging-v0", "toy_envs:HangingEnv")
turnrl.register("tests/WorkerHostile-v0", "toy_envs:WorkerHostileEnv")


class ScriptedTruthEnv(UpperEnv):
    """The answer's truth is scripted, whatever is said: task i's answer is correct unless i % 4 == 0."""

    def score(self, response):
        ok = int(self.task.id[1:]) % 4 != 0
        return Verdict(correct=ok, score=float(ok))


def case_verdict(text):
    """A verdict a tiny model can say: a reply that starts with a capital letter means "correct", lowercase "wrong"."""
    first = text.strip()[:1]
    return "correct" if first.isupper() else "wrong" if first.islower() else None


def toy_pag(**kw):
    """A PAG episode (answer → verify → revise after "wrong") over ScriptedTruthEnv with case verdicts."""
    from turnrl.envs.formats.self_verify import SelfVerify

    return SelfVerify(
        ScriptedTruthEnv(), verdict_parser=case_verdict, verdict_texts={"correct": "Yes", "wrong": "no"}, **kw
    )


turnrl.register("tests/ToyPAG-v0", "toy_envs:toy_pag")


CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Peru", "Lima"), ("Kenya", "Nairobi")]


def same_words(text: str, ref: str) -> Verdict:
    """Correct when the reply, lowercased and stripped of a final period, is the reference."""
    ok = text.strip().rstrip(".").lower() == ref.lower()
    return Verdict(correct=ok, score=float(ok), extracted=text.strip())


class CapitalsEnv(ToolEnv):
    """Toy env with text references (no number: the hybrid reward's `auto` sends it to the judge)."""

    def __init__(self, **kw):
        super().__init__(
            [Task(id=f"c{i}", prompt=f"What is the capital of {c}?", answer=a) for i, (c, a) in enumerate(CAPITALS)],
            verifier=same_words,
            **kw,
        )


turnrl.register("tests/Capitals-v0", "toy_envs:CapitalsEnv")


class ResearchEnv(TextEnv):
    """Toy env with long observations (context budgets): every turn but the last is answered by a 118-character search
    result (about 100 tokens of the tiny tokenizer); the last reply is rewarded when it starts with a capital letter.
    Four tasks. (tests/rollout/test_context.py's ``Research`` is its rollout-level sibling: six turns, always correct.)"""

    def __init__(self, max_turns: int = 3, **kw):
        super().__init__(max_turns=max_turns, **kw)

    def __len__(self) -> int:
        return 4

    def _reset(self, options):
        i = pick_index(self, len(self), options)
        prompt = (Message(role="system", content="Search, then answer."), Message(role="user", content=f"Topic {i}."))
        return prompt, {"task_id": f"r{i}"}

    def _step(self, action):
        if self.turn + 1 < self.max_turns:
            result = Message(role="tool", name="search", content=f"Result {self.turn}: " + "facts and figures " * 6)
            return (result,), 0.0, False, False, {}
        ok = action.strip()[:1].isupper()
        return (), float(ok), True, False, {"correct": ok}


turnrl.register("tests/Research-v0", "toy_envs:ResearchEnv")


def straddling_stop(tok, turn: list[int], *, visible: bool = False) -> tuple[int, str]:
    """A window length that ends inside ``turn`` (token ids a model sampled) and a stop string across that boundary:
    the first cut with at least two characters of text on each side, the stop string those four characters (issue
    66, bug 3: a stop string begun in one window and ended in the next). ``visible``: both halves hold more than
    whitespace (a tokenizer that strips spaces from a stop string's ends would otherwise move it)."""

    def text(ids):
        return tok.decode(ids, skip_special_tokens=False)

    def fits(b):
        head, both = text(turn[:b]), text(turn[: b + 1])
        ok = len(head) >= 2 and len(both) - len(head) >= 2
        return ok and (not visible or (head[-2:].strip() and both[len(head) :][:2].strip()))

    cut = next(b for b in range(1, len(turn) - 1) if fits(b))
    head = text(turn[:cut])
    return cut, head[-2:] + text(turn[: cut + 1])[len(head) : len(head) + 2]
