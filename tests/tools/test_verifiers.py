import json
import threading
import time

import pytest

from turnrl.verifiers.math import extract_boxed, gsm8k_reference, verify
from turnrl.verifiers.math import verify as math_verify
from turnrl.verifiers.pag import parse_verdict, revision_reward, verdict_reward
from turnrl.verifiers.qa import verify as qa_verify


@pytest.mark.parametrize(
    "prediction, reference",
    [
        ("So the total is \\boxed{18}.", "18"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{0.5}", "\\frac12"),
        ("\\boxed{1,234}", "1234"),
        ("\\boxed{\\$18}", "18"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("\\boxed{50\\%}", "50"),
        ("\\boxed{x = 5}", "5"),
        ("\\boxed{3\\sqrt{2}}", "\\sqrt{18}"),
        ("\\boxed{1, -2}", "-2, 1"),
        ("\\boxed{18} and again \\boxed{18.0}", "18"),
        ("Work... #### 72", "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"),
        ("<answer>$1,000</answer>", "1000"),
        ("The answer is 42.", "42"),
        ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}"),
    ],
)
def test_equivalent_answers_are_correct(prediction, reference):
    v = verify(prediction, reference)
    assert v.correct and v.score == 1.0 and v.extracted is not None


@pytest.mark.parametrize(
    "prediction, reference, reason",
    [
        ("\\boxed{17}", "18", "mismatch"),
        ("\\boxed{18} or maybe \\boxed{19}", "18", "hedged"),
        ("The answer is 18 or 19.", "18", "hedged"),
        ("\\boxed{18 \\text{ or } 19}", "18", "hedged"),
        ("\\boxed{18, 19}", "18", "hedged"),
        ("either \\boxed{18} or \\boxed{18}... no, \\boxed{20}", "18", "hedged"),
        ("I cannot solve this.", "18", "no_answer"),
        ("\\boxed{" + "1" * 400 + "}", "1", "too_long"),
    ],
)
def test_wrong_hedged_or_missing_answers_are_not_correct(prediction, reference, reason):
    v = verify(prediction, reference)
    assert not v.correct and v.score == 0.0 and v.details["reason"] == reason


def test_answer_format_is_enforced():
    assert not verify("The answer is 18.", "18", answer_format="boxed").correct
    assert verify("#### 18", "18", answer_format="hash").correct
    assert not verify("\\boxed{18}", "18", answer_format="tag").correct
    with pytest.raises(ValueError, match="unknown answer_format"):
        verify("18", "18", answer_format="latex")
    with pytest.raises(TypeError):
        verify(18, "18")


def test_extract_boxed_handles_nested_braces():
    assert extract_boxed("x \\boxed{\\frac{1}{\\sqrt{2}}} y \\fbox{3} \\boxed{unclosed") == [
        "\\frac{1}{\\sqrt{2}}",
        "3",
    ]


def test_gsm8k_reference():
    assert gsm8k_reference("step\n#### 1,234") == "1234"
    assert gsm8k_reference("57") == "57"


def test_verify_works_off_the_main_thread():
    results = []
    t = threading.Thread(target=lambda: results.append(verify("\\boxed{\\frac{2}{4}}", "0.5").correct))
    t.start()
    t.join()
    assert results == [True]


def test_every_gsm8k_reference_verifies_against_itself(data_dir):
    lines = (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()
    failures = []
    for line in lines:
        ref = gsm8k_reference(json.loads(line)["answer"])
        if not verify(f"\\boxed{{{ref}}}", ref).correct or verify(f"\\boxed{{{ref}1}}", ref).correct:
            failures.append(ref)
    assert len(lines) == 1319 and failures == []


def test_every_math500_answer_verifies_against_itself(data_dir):
    rows = [json.loads(x) for x in (data_dir / "math500" / "test.jsonl").read_text().splitlines()]
    failures = [
        r["answer"] for r in rows if not verify(f"The answer is \\boxed{{{r['answer']}}}.", r["answer"]).correct
    ]
    assert len(rows) == 500 and failures == []


# ---- PAG verdicts and rewards (docs/algorithms.md §7) ----


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("Step 2 is right. The answer is correct", "correct"),
        ("Step 2 is wrong: 3*4 is 12. The answer is wrong.", "wrong"),
        ("**The answer is wrong**", "wrong"),
        ("The answer is correct.\n", "correct"),
        ("The answer is correct. The answer is wrong", None),  # two verdicts
        ("The answer is correct. Actually let me re-check.", None),  # not at the end
        ("the answer is correct", None),  # not the exact phrase
        ("The answer is right", None),
        ("", None),
    ],
)
def test_parse_verdict_accepts_one_end_anchored_verdict(text, verdict):
    assert parse_verdict(text) == verdict


def test_verdict_reward():
    assert verdict_reward("correct", True) == 1.0 and verdict_reward("wrong", False) == 1.0
    assert verdict_reward("correct", False) == 0.0 and verdict_reward("wrong", True) == 0.0
    assert verdict_reward(None, True) == 0.0 and verdict_reward(None, False) == 0.0


def test_revision_bonus_table():
    assert revision_reward(False, True) == 2.0
    assert revision_reward(True, False) == -1.0
    assert revision_reward(True, True) == 1.0
    assert revision_reward(False, False) == 0.0
    assert revision_reward(False, True, alpha=0.5) == 1.5


# ---- gaming the math and QA verifiers (docs/REWARD_HACKING.md) ----


@pytest.mark.parametrize(
    "response",
    [
        r"\boxed{17} or \boxed{19}",
        r"\boxed{17 \text{ or } 19}",
        r"\boxed{x = 17 \vee x = 19}",
        r"\boxed{17 \lor 19}",
        r"\boxed{17 \cup 19}",
        r"\boxed{17 \;|\; 19}",
        r"\boxed{17 \mid 19}",
        r"\boxed{17 \\ 19}",
        r"\boxed{17 \sim 19}",
        r"\boxed{18 \pm 1}",
        r"\boxed{17, 19}",
        r"\boxed{\{17, 19\}}",
        r"\boxed{19 \text{ (or 17)}}",
        "The answer is 17 or 19.",
        r"\boxed{17}" + "\n" + r"\boxed{19}",
    ],
)
def test_math_hedges_earn_nothing(response):
    v = math_verify(response, "19")
    assert not v.correct and v.score == 0.0 and v.details["reason"] == "hedged", v


@pytest.mark.parametrize(
    "response",
    [
        r"\boxed{9^{9^{9^{9}}}}",
        r"\boxed{10^{10^{10}}}",
        r"\boxed{9^9^9}",
        r"\boxed{2^{100000}}",
        r"\boxed{100000!}",
        "\\boxed{" + "9" * 500 + "}",
    ],
)
def test_math_answers_that_would_hang_the_verifier_are_refused_fast(response):
    start = time.perf_counter()
    v = math_verify(response, "19")
    assert not v.correct and v.details["reason"] in ("too_complex", "too_long") and time.perf_counter() - start < 1


@pytest.mark.parametrize(
    "response",
    [r"\boxed{|-19|}", r"\boxed{\sqrt{361}}", r"\boxed{19.0}", r"\boxed{19 \text{ apples}}", r"\boxed{19}\boxed{19}"],
)
def test_math_honest_answers_still_pass(response):
    assert math_verify(response, "19").correct


QUESTION = "Which was released first, Blue Velvet or The Elephant Man?"


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("<answer>The Elephant Man or Blue Velvet</answer>", "hedged"),
        ("<answer>The Elephant Man; Blue Velvet</answer>", "hedged"),
        ("<answer>The Elephant Man / Blue Velvet</answer>", "hedged"),
        ("<answer>The Elephant Man, Blue Velvet</answer>", "hedged"),
        ("<answer>The Elephant Man\nBlue Velvet</answer>", "hedged"),
        ("<answer>Blue Velvet</answer> <answer>The Elephant Man</answer>", "hedged"),
        ("<answer>Elephant Man Blue Velvet</answer>", "padded"),  # both names of a comparison
        ("<answer>" + " ".join(["man elephant film 1980 lynch"] * 20) + "</answer>", "padded"),  # a long F1 farm
        ("<answer>The Elephant Man which was released first of the two films</answer>", "padded"),
        ("<answer>Elephant Man and Elephant Man</answer>", "padded"),  # the answer twice: F1 0.57 (issue 79)
        ("<answer>Elephant Man Elephant Man Elephant Man</answer>", "padded"),
        (f"<answer>{QUESTION} The Elephant Man</answer>", "repeats_question"),
        ("<answer>Blue Velvet vs The Elephant Man: which was released first</answer>", "repeats_question"),
    ],
)
def test_qa_gaming_earns_nothing(response, reason):
    v = qa_verify(response, "The Elephant Man", question=QUESTION)
    assert not v.correct and v.score == 0.0 and v.details["reason"] == reason and v.details["tampering"] == 1, v
    assert v.details["f1"] > 0  # the official F1 would have paid


@pytest.mark.parametrize(
    ("response", "reference", "score"),
    [
        ("<answer>The Elephant Man</answer>", "The Elephant Man", 1.0),
        ("<answer>Elephant Man</answer>", "The Elephant Man", 1.0),
        ("<answer>Washington, D.C.</answer>", "Washington, D.C.", 1.0),
        ("<answer>1,000 people</answer>", "1,000 people", 1.0),
        ("<answer>Either/Or</answer>", "Either/Or", 1.0),
        ("<answer>Lynch</answer> <answer>Lynch</answer>", "Lynch", 1.0),
        ("<answer>David K. Lynch</answer>", "David Lynch", 0.8),  # partial credit stays
        ("<answer>Chief</answer>", "Chief of Protocol", 0.5),
    ],
)
def test_qa_committed_answers_keep_their_credit(response, reference, score):
    v = qa_verify(response, reference, question=QUESTION)
    assert v.score == pytest.approx(score) and v.details["tampering"] == 0, v


@pytest.mark.parametrize(
    "response, reference",
    [
        ("The answer is 41 * 7 - 56", "231"),  # what Pre-PPO on Arithmetic level 4 taught SmolLM2 (2026-11-26)
        ("The answer is 558 / 6", "93"),
        ("The answer is (21 - 10) * 3.", "33"),
        ("\\boxed{\\frac{558}{6}}", "93"),
        ("\\boxed{97 \\times 4}", "388"),
        ("#### 30 \\cdot 8", "240"),
        ("\\boxed{\\frac{38}{2}}", "19"),  # an integer's unreduced fraction: the division was never done
        ("\\boxed{2^{4} + 3}", "19"),
    ],
)
def test_restating_the_calculation_instead_of_its_result_earns_nothing(response, reference):
    v = verify(response, reference)
    assert not v.correct and v.details["reason"] == "unevaluated"


def test_results_stay_right_next_to_their_working():
    assert verify("(21 - 10) * 3 = 33. The answer is 33.", "33").correct
    assert verify("The answer is -5.", "-5").correct and verify("\\boxed{1,000}", "1000").correct
    assert verify("\\boxed{\\frac{3}{4}}", "\\frac{3}{4}").correct  # a fraction where the reference is one
