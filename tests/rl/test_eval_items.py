"""Issue 77: each row of items.jsonl names its item (the problem's canonical form), and the figures count distinct
items with a standard error and a 95% interval (``summarize``, report.md's headline)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from sums_env import ENV, agent

from turnrl.envs import Task
from turnrl.rl.run.eval_report import item_accuracy, summarize, write_report
from turnrl.rl.run.evaluate import evaluate, item_key


def test_each_row_names_its_item_and_two_presentations_of_one_problem_are_one_item(tmp_path):
    m = evaluate(agent(lambda x: x % 2 == 0), ENV, env_kwargs={"n": 4, "twin": True}, limit=5, out=tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert [r["item"] for r in rows] == ["sum:0+1", "sum:1+2", "sum:2+3", "sum:3+4", "sum:0+1"]
    assert [r["task_id"] for r in rows] == ["s0", "s1", "s2", "s3", "twin"]
    # right on s0 and s2 (even first operand), wrong on the twin "1 + 0": item sum:0+1 scores 0.5
    assert m["tasks"] == 5 and m["accuracy"] == pytest.approx(2 / 5)  # the episodes' figure, unchanged
    assert m["distinct_items"] == 4 and m["accuracy_items"] == pytest.approx((0.5 + 0 + 1 + 0) / 4)
    values = [0.5, 0.0, 1.0, 0.0]  # not all 0/1: the normal interval over items
    se = math.sqrt(sum((v - 0.375) ** 2 for v in values) / 3) / 2
    assert m["accuracy_se"] == pytest.approx(se)
    assert (m["accuracy_low"], m["accuracy_high"]) == pytest.approx((0.375 - 1.959964 * se, 0.375 + 1.959964 * se))
    report = (tmp_path / "report.md").read_text()
    assert "**Accuracy 0.375 over 4 distinct item(s), 95% interval [" in report


def test_item_key_falls_back_to_the_task_id_without_a_task():
    task = Task(id="x", prompt="  What is  TWO? ", answer="2")
    env = lambda fn: SimpleNamespace(unwrapped=SimpleNamespace(task_at=fn))
    assert item_key(env(lambda i: task), 0, "x") == "text:what is two => 2"
    assert item_key(env(lambda i: None), 0, "x") == "x"

    def broken(i):
        raise IndexError(i)

    assert item_key(env(broken), 0, "x") == "x"
    assert item_key(SimpleNamespace(unwrapped=object()), 0, "x") == "x"


def row(item, correct, task_id=None):
    return {
        "index": 0,
        "task_id": task_id or item,
        "item": item,
        "correct": correct,
        "reward": 0.0,
        "turns": 1,
        "tool_calls": 0,
        "generated_tokens": 1,
        "total_tokens": 2,
        "truncated": False,
        "error": None,
        "metrics": {},
        "outcome": "correct" if correct else "wrong",
    }


def test_summarize_counts_distinct_items_with_a_wilson_interval_and_keeps_its_keys():
    rows = [row("a", True), row("b", False), row("c", True), row("d", True)]
    m = summarize(rows, 1)
    assert {"accuracy", "tasks", "episodes", "pass@1"} <= set(m) and m["accuracy"] == 0.75
    assert m["distinct_items"] == 4 and m["accuracy_items"] == 0.75
    assert m["accuracy_se"] == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert (m["accuracy_low"], m["accuracy_high"]) == pytest.approx((0.300642, 0.954413), abs=1e-6)  # Wilson


def test_rows_written_before_items_were_named_count_by_task_id():
    rows = [row("a", True), row("a", True), row("b", False)]
    for r in rows:
        del r["item"]
    assert item_accuracy(rows)["distinct_items"] == 2 and item_accuracy(rows)["accuracy_items"] == 0.5
    assert item_accuracy([]) == {
        "distinct_items": 0,
        "accuracy_items": 0.0,
        "accuracy_se": None,
        "accuracy_low": None,
        "accuracy_high": None,
    }


def test_report_headline_shows_the_interval_and_the_distinct_items(tmp_path):
    rows = [row("a", True), row("a", False), row("b", True)]
    m = summarize(rows, 1)
    text = write_report(tmp_path, "t", m, rows, {})
    assert "**Accuracy 0.750 over 2 distinct item(s), 95% interval" in text and "(3 episode(s);" in text
