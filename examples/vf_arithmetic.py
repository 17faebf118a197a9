"""An environment written for Prime Intellect's `verifiers` the way its documentation shows — a module with a
`load_environment()` that returns a `vf.SingleTurnEnv` with a dataset, an eval dataset and a rubric; nothing of
turnrl in it — played and trained by turnrl as it is: `verifiers:vf_arithmetic` (see "verifiers" in
docs/bring-your-environment.md).

Sums and differences of numbers from 1 to 30: the reward is 1 when the last number of the reply is the result (the
question's own expression, restated, passed over). The eval dataset holds problems the training dataset does not.

`python examples/vf_arithmetic.py` plays two episodes with scripted replies; `turnrl train vf-arithmetic.yaml` (from
this folder) trains SmolLM2 on it (`pip install 'turnrl[verifiers]'`).
"""

from __future__ import annotations

import random
import re

import verifiers as vf
from datasets import Dataset

SYSTEM = "Solve the problem. End your reply with the result as a number."


def problems(n: int, seed: int, exclude: set[str] = frozenset()) -> list[dict[str, str]]:
    """``n`` distinct problems ``What is a + b?`` / ``What is a - b?`` (numbers from 1 to 30, results not
    negative). Problems are told apart by their canonical form (:func:`same_problem`), so ``7 + 12`` is not "new" when
    ``12 + 7`` is in ``exclude``."""
    rng, rows, seen = random.Random(seed), [], set(exclude)
    while len(rows) < n:
        a, b = rng.randint(1, 30), rng.randint(1, 30)
        if rng.random() < 0.5:
            question, answer = f"What is {a} + {b}?", a + b
        else:
            a, b = max(a, b), min(a, b)
            question, answer = f"What is {a} - {b}?", a - b
        if same_problem(question) not in seen:
            seen.add(same_problem(question))
            rows.append({"question": question, "answer": str(answer)})
    return rows


def same_problem(question: str) -> str:
    """What makes two questions one problem: the operands of a sum in order (``7 + 12`` is ``12 + 7``)."""
    a, op, b = question.removeprefix("What is ").removesuffix("?").split()
    return f"{min(int(a), int(b))} + {max(int(a), int(b))}" if op == "+" else f"{a} - {b}"


def restated(question: str) -> re.Pattern[str]:
    """The question's expression as a reply may write it: a sum's operands in either order, any spacing."""
    a, op, b = question.removeprefix("What is ").removesuffix("?").split()
    orders = [(a, b), (b, a)] if op == "+" else [(a, b)]
    return re.compile("|".join(rf"(?<![\d-]){x}\s*{re.escape(op)}\s*{y}(?!\d)" for x, y in orders))


def correct_answer(completion, answer, parser, prompt=None, **kwargs) -> float:
    """1 when the last number in the reply is the result. The question's own expression, restated, is not an answer
    (``What is 14 - 7?`` ends on 7, the result), and a number of more than 12 characters is wrong."""
    reply = parser.parse_answer(completion) or ""
    question = next((m["content"] for m in reversed(prompt or []) if m.get("role") == "user"), "")
    if question.startswith("What is "):
        reply = restated(question).sub(" ", reply)
    numbers = re.findall(r"-?\d+", reply)
    return 1.0 if numbers and len(numbers[-1]) <= 12 and numbers[-1] == answer else 0.0


def load_environment(num_train: int = 600, num_eval: int = 200, seed: int = 0) -> vf.Environment:
    """The environment: ``num_train`` training problems and ``num_eval`` held-out ones (none in both, in any order of a
    sum's operands; of the 930 distinct problems, 800 are used by default)."""
    if num_train + num_eval > 930:
        raise ValueError(f"num_train + num_eval = {num_train + num_eval}, but there are only 930 distinct problems")
    train = problems(num_train, seed)
    test = problems(num_eval, seed + 1, exclude={same_problem(row["question"]) for row in train})
    parser = vf.Parser()
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(test),
        system_prompt=SYSTEM,
        parser=parser,
        rubric=vf.Rubric(funcs=[correct_answer], parser=parser),
    )


if __name__ == "__main__":
    import turnrl

    env = turnrl.make("verifiers:vf_arithmetic")
    try:
        for reply in ("Let me add them.", "The result is {answer}."):
            obs, info = env.reset(options={"index": 0})
            answer = env.task_at(0).answer
            _, reward, terminated, _, step = env.step(reply.format(answer=answer))
            print(f"{obs[-1].content!r} -> {reply.format(answer=answer)!r}: reward {reward}, correct {step['correct']}")
    finally:
        env.close()
