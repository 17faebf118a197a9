"""Issue 77: ``turnrl compare`` pairs two runs item by item and refuses unlike comparisons. The folders compared
are written by real ``evaluate(...)`` runs of scripted agents on a small environment (tests/sums_env.py)."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from sums_env import ENV, A, B
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.rl.run.evaluate import evaluate


def run_eval(who, out, **kw):
    kw.setdefault("limit", 12)
    return evaluate(who, ENV, out=out, batch_episodes=64, **kw)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    run_eval(A, root / "a")
    run_eval(B, root / "b")
    run_eval(A, root / "a10", limit=10)
    run_eval(B, root / "b_turns", env_kwargs={"max_turns": 2})
    run_eval(A, root / "a_s2", samples=2)
    run_eval(B, root / "b_s2", samples=2)
    run_eval(A, root / "run" / "eval" / "step-0")  # a training run's evaluations
    run_eval(B, root / "run" / "eval" / "step-5")
    return root


def compare(*args):
    return CliRunner().invoke(app, ["compare", *map(str, args)])


def compare_json(tmp_path, *args):
    out = tmp_path / "figures.json"
    result = compare(*args, "--json", out)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.output


def test_compare_pairs_items_and_reports_the_difference_and_mcnemar(folders, tmp_path):
    figures, output = compare_json(tmp_path, folders / "a", folders / "b")
    (p,) = figures["pairs"]
    assert p["items"] == 12 and p["accuracy_a"] == pytest.approx(4 / 12) and p["accuracy_b"] == pytest.approx(8 / 12)
    assert p["diff"] == pytest.approx(4 / 12) and p["low"] <= p["diff"] <= p["high"] and p["low"] > 0
    assert p["mcnemar"] == {"only_a": 0, "only_b": 4, "p_value": 0.125}  # 2 * 0.5**4
    assert p["notes"] == []
    assert figures["over_seeds"]["seeds"] == 1 and figures["over_seeds"]["low"] == p["low"]
    assert "B − A" in output and "0 / 4   0.125" in output and "+0.333" in output


def test_compare_is_b_minus_a(folders, tmp_path):
    figures, _ = compare_json(tmp_path, folders / "b", folders / "a")
    (p,) = figures["pairs"]
    assert p["diff"] == pytest.approx(-4 / 12) and p["high"] < 0
    assert (p["mcnemar"]["only_a"], p["mcnemar"]["only_b"]) == (4, 0)


def test_compare_refuses_different_items_and_names_them(folders, tmp_path):
    result = compare(folders / "a10", folders / "b")
    assert result.exit_code == 2
    assert "different items: 0 only in A (), 2 only in B ('sum:10+11', 'sum:11+12')" in result.output
    assert "--allow-different-items" in result.output and "\n" not in result.output.strip()
    figures, output = compare_json(tmp_path, folders / "a10", folders / "b", "--allow-different-items")
    (p,) = figures["pairs"]
    assert p["items"] == 10 and p["only_in_b"] == 2 and p["accuracy_b"] == pytest.approx(7 / 10)
    assert "compared the 10 items both share" in output


def test_compare_refuses_different_protocols_naming_the_field(folders, tmp_path):
    result = compare(folders / "a", folders / "b_turns")
    assert result.exit_code == 2
    assert "different protocols: env_kwargs.max_turns (unset in A, 2 in B)" in " ".join(result.output.split())
    figures, output = compare_json(tmp_path, folders / "a", folders / "b_turns", "--allow-different-protocol")
    assert figures["pairs"][0]["items"] == 12 and "protocols differ" in output
    result = compare(folders / "a", folders / "b_s2")
    assert result.exit_code == 2 and "samples (1 in A, 2 in B)" in result.output
    assert "params.temperature (0.0 in A, 1.0 in B)" in result.output


def test_compare_collapses_repeats_and_skips_mcnemar(folders, tmp_path):
    figures, output = compare_json(tmp_path, folders / "a_s2", folders / "b_s2")
    (p,) = figures["pairs"]
    assert p["items"] == 12 and p["diff"] == pytest.approx(4 / 12) and p["mcnemar"] is None
    assert "repeats collapsed" in output and "McNemar skipped" in output


def test_compare_reads_training_runs_at_their_last_or_named_step(folders, tmp_path):
    run = folders / "run"
    figures, _ = compare_json(tmp_path, f"{run}@0", run)
    assert figures["pairs"][0]["b"].endswith("step-5") and figures["pairs"][0]["diff"] == pytest.approx(4 / 12)
    figures, _ = compare_json(tmp_path, run, folders / "a", "--step", "0")
    assert figures["pairs"][0]["a"].endswith("step-0") and figures["pairs"][0]["diff"] == 0.0
    result = compare(f"{run}@7", run)
    assert result.exit_code == 2 and "no evaluation at step 7; its evaluated steps are 0, 5" in result.output
    result = compare(tmp_path, run)
    assert result.exit_code == 2 and "neither an evaluation folder" in result.output
    result = compare(f"{folders / 'a'}@3", run)
    assert result.exit_code == 2 and "is an evaluation folder, not a training run" in result.output


def test_compare_pools_pairs_as_seeds_with_a_t_interval(folders, tmp_path):
    figures, output = compare_json(tmp_path, folders / "a", folders / "b", folders / "b", folders / "a")
    o = figures["over_seeds"]
    assert o["seeds"] == 2 and o["diff"] == pytest.approx(0.0) and o["method"].startswith("t over 2 seeds")
    # differences +1/3 and -1/3: sd (ddof=1) 1/3·√2, over √2 seeds; plus each pair's own (bootstrap) variance
    a, b = ((4 / 12) * math.sqrt(2)) ** 2 / 2, sum(p["se"] ** 2 for p in figures["pairs"]) / 2
    se = math.sqrt(a + b)
    df = int((a + b) ** 2 / (a**2 / 1 + b**2 / 11))  # Welch–Satterthwaite over 2 seeds of 12 items
    assert o["se"] == pytest.approx(se) and f"(df {(a + b) ** 2 / (a**2 + b**2 / 11):.1f})" in o["method"]
    from turnrl.stats import t_value

    assert o["high"] == pytest.approx(t_value(0.95, max(1, df)) * se)
    assert "over 2 seed(s)" in output


def test_compare_joins_old_folders_by_task_id_and_says_so(folders, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(folders / "a", old)
    rows = [json.loads(x) for x in (old / "items.jsonl").read_text().splitlines()]
    (old / "items.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "item"}) + "\n" for r in rows)
    )
    old_b = tmp_path / "old_b"
    shutil.copytree(old, old_b)
    figures, output = compare_json(tmp_path, old, old_b)  # two old folders: joined by task id, and said
    assert figures["pairs"][0]["items"] == 12 and "joined by task_id" in output
    for pair in ((old, folders / "b"), (folders / "b", old)):  # old against new: the ids may name other problems
        result = compare(*pair)
        assert result.exit_code == 2 and "before items were named" in result.output


def test_compare_refuses_an_evaluation_against_itself(folders, tmp_path):
    """The review's case: a training run whose last evaluation is still being written is read at step 0 twice."""
    result = compare(folders / "a", folders / "a")
    assert result.exit_code == 2 and "are the same evaluation" in result.output


def test_compare_refuses_odd_arguments_and_folders_without_run_json(folders, tmp_path):
    result = compare(folders / "a")
    assert result.exit_code == 2 and "in pairs" in result.output
    bare = tmp_path / "bare"
    shutil.copytree(folders / "a", bare)
    (bare / "run.json").unlink()
    result = compare(bare, folders / "b")
    assert result.exit_code == 2 and "has no run.json" in result.output
    assert compare(bare, folders / "b", "--allow-different-protocol").exit_code == 0


def test_turnrl_train_prints_each_evaluation_with_its_interval_and_the_gain_paired(tmp_path):
    """A real `turnrl train` (tiny model, one step): each held-out line carries the 95 % interval and the number of
    distinct items, metrics.jsonl records them, and the last line is the gain paired item by item, as compare says."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: tiny:chatml\nenv: {id: turnrl/Arithmetic-v0, kwargs: {level: 1}}\n"
        "rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 4}\noptim: {minibatch_size: 4}\n"
        f"steps: 1\neval_tasks: 5\nout_dir: {tmp_path / 'run'}\n"
    )
    result = CliRunner().invoke(app, ["train", str(config)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["eval_items"] == 5 and first["eval_success_low"] <= first["eval_success"] <= first["eval_success_high"]
    assert f"[{first['eval_success_low']:.3f}, {first['eval_success_high']:.3f}] of 5" in result.output
    pair = CliRunner().invoke(
        app, ["compare", f"{tmp_path / 'run'}@0", str(tmp_path / "run"), "--json", str(tmp_path / "c.json")]
    )
    assert pair.exit_code == 0, pair.output
    figures = json.loads((tmp_path / "c.json").read_text())["pairs"][0]
    assert (
        f"gain {100 * figures['diff']:+.1f} points, 95 % interval [{100 * figures['low']:+.1f}, "
        f"{100 * figures['high']:+.1f}] over 5 distinct items"
    ) in result.output


def test_a_training_run_at_best_is_read_at_the_step_its_validation_figure_chose(folders, tmp_path):
    """OUT_DIR@best: the highest val_success (the earliest on ties); the test split plays no part in the choice."""
    run = tmp_path / "run"
    for step in (0, 2, 4):
        shutil.copytree(folders / ("b" if step == 2 else "a"), run / "eval" / f"step-{step}")
    rows = [
        {"step": 0, "val_success": 0.2, "eval_success": 0.9},
        {"step": 2, "val_success": 0.6, "eval_success": 0.1},
        {"step": 4, "val_success": 0.6, "eval_success": 0.95},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    figures, _ = compare_json(tmp_path, f"{run}@0", f"{run}@best")
    assert figures["pairs"][0]["b"].endswith("step-2")  # validation's choice, not test's best (step 4)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval_success": 0.5}) + "\n")
    result = compare(f"{run}@0", f"{run}@best")
    assert result.exit_code == 2 and "no validation figure" in result.output


def test_compare_takes_one_value_and_a_list_of_it_as_the_same_setting():
    from turnrl.cli.compare import protocol_differences, same_setting

    assert same_setting(1, [1]) and same_setting([1], 1) and same_setting([1, 2], [1, 2])
    assert not same_setting(1, [1, 2]) and not same_setting(1, 2) and not same_setting([1], [2])
    assert protocol_differences({"env_kwargs.level": 1}, {"env_kwargs.level": [1]}) == []
    assert protocol_differences({"env_kwargs.level": 1}, {"env_kwargs.level": [1, 2]}) == [
        "env_kwargs.level (1 in A, [1, 2] in B)"
    ]


def test_compare_notes_evaluations_by_different_code(folders, tmp_path):
    written = json.loads((folders / "a" / "run.json").read_text())
    assert written["code"]["turnrl"] and "commit" in written["code"]  # every evaluation says which code wrote it
    other = tmp_path / "other"
    shutil.copytree(folders / "b", other)
    changed = json.loads((other / "run.json").read_text())
    changed["code"] = {"turnrl": "0.0.9", "commit": "0123456789abcdef", "dirty": True}
    (other / "run.json").write_text(json.dumps(changed))
    figures, _ = compare_json(tmp_path, folders / "a", other)
    (note,) = figures["pairs"][0]["notes"]
    assert note.startswith("evaluated by different code:") and "turnrl 0.0.9 at 0123456789 with uncommitted" in note
    del changed["code"]
    (other / "run.json").write_text(json.dumps(changed))
    figures, _ = compare_json(tmp_path, folders / "a", other)
    assert figures["pairs"][0]["notes"] == [f"code not checked: {other}/run.json does not say which turnrl wrote it"]


def test_compare_reads_a_number_the_environment_records_and_skips_mcnemar(tmp_path):
    """HotPotQA records each episode's F1 and supporting-article recall in its rows' ``metrics``: ``--score f1``
    compares their means item by item (paired bootstrap, no McNemar: F1 is not right-or-wrong); a 0/1 number keeps
    McNemar; a name no row holds is refused naming the numbers they hold."""
    from turnrl.agents.scripted import FixedAgent
    from turnrl.agents.tiny import tiny_tokenizer

    search = '<tool_call>{"name": "search", "arguments": {"query": "film"}}</tool_call>'
    for name, answer in (("full", "Chief of Protocol"), ("part", "Protocol")):
        agent = FixedAgent(tiny_tokenizer("chatml"), [search, f"<answer>{answer}</answer>"])
        evaluate(agent, "turnrl/HotPotQA-v0", limit=4, out=tmp_path / name, agent_name=name)
    f1 = {
        name: [json.loads(x)["metrics"]["f1"] for x in (tmp_path / name / "items.jsonl").read_text().splitlines()]
        for name in ("full", "part")
    }
    assert any(0 < v < 1 for v in f1["full"] + f1["part"]) and f1["full"] != f1["part"]  # not right-or-wrong
    figures, output = compare_json(tmp_path, tmp_path / "full", tmp_path / "part", "--score", "f1")
    (p,) = figures["pairs"]
    assert figures["score"] == "f1" and p["items"] == 4 and p["mcnemar"] is None
    assert p["accuracy_a"] == pytest.approx(sum(f1["full"]) / 4) and p["accuracy_b"] == pytest.approx(
        sum(f1["part"]) / 4
    )
    assert p["diff"] == pytest.approx((sum(f1["part"]) - sum(f1["full"])) / 4)
    assert "McNemar skipped: the score 'f1' is a number" in " ".join(output.split())
    em, _ = compare_json(tmp_path, tmp_path / "full", tmp_path / "part", "--score", "em")
    assert em["pairs"][0]["mcnemar"] is not None  # exact match is 0 or 1: McNemar applies
    recall, _ = compare_json(tmp_path, tmp_path / "full", tmp_path / "part", "--score", "support_recall")
    assert recall["pairs"][0]["diff"] == 0.0  # the same search in both
    bad = compare("--score", "f2", tmp_path / "full", tmp_path / "part")
    assert bad.exit_code == 2 and "hold no score 'f2'" in bad.output
    assert "correct, em, f1, searches, support_recall" in " ".join(bad.output.split())
    # a row without the number (an episode whose environment failed records none) refuses the evaluation, and a
    # name held both as a game's score and as a number is not guessed at
    for name, change in (
        ("lacking", lambda r: r["metrics"].pop("f1")),
        ("both", lambda r: r.update(scores={"f1": True})),
    ):
        shutil.copytree(tmp_path / "part", tmp_path / name)
        rows = [json.loads(x) for x in (tmp_path / name / "items.jsonl").read_text().splitlines()]
        change(rows[1])
        (tmp_path / name / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lacking = compare("--score", "f1", tmp_path / "full", tmp_path / "lacking")
    assert lacking.exit_code == 2 and "1 of 4 rows hold no score 'f1'" in " ".join(lacking.output.split())
    both = compare("--score", "f1", tmp_path / "full", tmp_path / "both")
    assert both.exit_code == 2 and "row 2 holds 'f1' both in its `scores` and in its `metrics`" in " ".join(
        both.output.split()
    )
