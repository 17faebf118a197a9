"""bench/evidence_report.py on run folders as `turnrl train` leaves them (no model is run): a PAG run read at the step
its validation chose, its first and final answers and its verifier's balanced accuracy from the episodes (played by
the real environment with scripted replies) agreeing with the environment's own figures; a run whose validation chose
step 0 reported as no gain instead of refused; a comparison at a step fixed in advance; the gateway's gain on the
problems no earlier run saw; the SDK examples held to the bar fixed for them."""

import gzip
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import evidence_report as report  # noqa: E402 — bench/ on the path first

VERDICT = {"correct": "The answer is correct.", "wrong": "The answer is wrong."}


def pag_episode(env, index: int, first_right: bool, verdict: str, revise_right: bool) -> dict:
    """One episode of turnrl/Arithmetic-PAG-v0 played with scripted replies, as trajectories.jsonl holds it (the
    fields the report reads: task id and the turns' infos)."""
    env.reset(options={"index": index})
    turns = [env.step(env.oracle_action() if first_right else env.wrong_action())[4]]
    _, _, terminated, truncated, info = env.step(VERDICT.get(verdict, "I am not sure."))
    turns.append(info)
    if not terminated and not truncated:  # revised
        turns.append(env.step(env.oracle_action() if revise_right else env.wrong_action())[4])
    return {
        "task_id": env.task.id,
        "item": env.task.metadata["canonical"],
        "turns": [{"info": i} for i in turns],
        "correct": bool(turns[-1]["correct"]),
    }


def write_eval(folder: Path, episodes: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "items.jsonl").write_text(
        "".join(
            json.dumps({"index": i, "sample": 0, "task_id": e["task_id"], "item": e["item"], "correct": e["correct"]})
            + "\n"
            for i, e in enumerate(episodes)
        )
    )
    (folder / "trajectories.jsonl").write_text(
        "".join(json.dumps({"task_id": e["task_id"], "turns": e["turns"]}) + "\n" for e in reversed(episodes))
    )
    (folder / "run.json").write_text(json.dumps({"settings": {"env_id": "turnrl/Arithmetic-PAG-v0", "samples": 1}}))


def write_run(run: Path, steps: int, evals: dict[int, list[dict]], validation: dict[int, float] | None = None) -> Path:
    """A run folder: config.yaml (its steps), metrics.jsonl (eval_success, and val_success where it validated) and
    eval/step-N for each evaluation."""
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"steps: {steps}\n")
    rows = []
    for step in range(steps + 1):
        row = {"step": step, "logp_diff": 1e-6}
        if step in evals:
            row["eval_success"] = sum(e["correct"] for e in evals[step]) / len(evals[step])
            write_eval(run / "eval" / f"step-{step}", evals[step])
        if validation is not None and step in validation:
            row["val_success"] = validation[step]
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if validation is not None:
        (run / "validation").mkdir()
    return run


@pytest.fixture(scope="module")
def env():
    from turnrl.envs.registry import make

    return make("turnrl/Arithmetic-PAG-v0", level=1, split="test")


def test_a_pag_run_is_read_at_its_validation_step_with_the_environments_own_figures(env, tmp_path):
    from types import SimpleNamespace

    from turnrl.envs.formats.self_verify_metrics import pag_episode as env_episode
    from turnrl.envs.formats.self_verify_metrics import pag_summary

    # step 0: first answers right on 0-9, wrong on 10-29, verdict "correct" everywhere (no revision)
    start = [pag_episode(env, i, i < 10, "correct", False) for i in range(30)]
    # step 2: right first answers on 0-11; the verifier says "correct" on 0-8 and "wrong" on 9-11 (revised right),
    # "wrong" on 12-25 (revised right on 12-20, wrong on 21-25), "correct" on 26-27, unparseable on 28-29
    chosen = (
        [pag_episode(env, i, True, "correct", False) for i in range(9)]
        + [pag_episode(env, i, True, "wrong", True) for i in range(9, 12)]
        + [pag_episode(env, i, False, "wrong", i <= 20) for i in range(12, 26)]
        + [pag_episode(env, i, False, "correct", False) for i in range(26, 28)]
        + [pag_episode(env, i, False, "none", False) for i in range(28, 30)]
    )
    late = [pag_episode(env, i, False, "wrong", True) for i in range(30)]  # step 4: test best, validation worse
    for seed in (0, 1):
        write_run(tmp_path / f"pag-s{seed}", 4, {0: start, 2: chosen, 4: late}, validation={0: 0.3, 2: 0.6, 4: 0.5})
    items = report.pag_items(tmp_path / "pag-s0" / "eval" / "step-2")
    assert len(items) == 30 and sum(c["episodes"] for c in items) == 30
    kept = tmp_path / "pag-s1" / "eval" / "step-2" / "trajectories.jsonl"  # as bench/evidence keeps them: gzipped
    kept.with_suffix(".jsonl.gz").write_bytes(gzip.compress(kept.read_bytes()))
    kept.unlink()
    assert report.pag_items(kept.parent) == items
    own = pag_summary(
        env_episode(SimpleNamespace(turns=[SimpleNamespace(info=t["info"]) for t in e["turns"]])) for e in chosen
    )  # the environment's own figures of the same episodes
    v = report.balanced(items)
    assert v["value"] == pytest.approx(own["pag_verifier_balanced_acc"]) == pytest.approx((9 / 12 + 14 / 18) / 2)
    assert v["on_right"] == pytest.approx(9 / 12) and v["on_wrong"] == pytest.approx(14 / 18)
    assert v["low"] < v["value"] < v["high"] and v["right"] == 12 and v["wrong"] == 18
    # a verifier that says "correct" to everything is at 0.5 in every resample, whatever the share of right answers
    blind = report.balanced(report.pag_items(tmp_path / "pag-s0" / "eval" / "step-0"))
    assert blind["value"] == blind["low"] == blind["high"] == 0.5 and blind["se"] == 0.0
    table = "\n".join(report.pag_table(tmp_path, "pag"))
    assert "| 0 | step 2 (validation) | 30 | 40.0 % | 70.0 % | +30.0 |" in table  # Acc@turn1 12/30, Acc@final 21/30
    assert f"| {report.pct(own['pag_verifier_balanced_acc'])} |" in table
    assert "| mean of 2 |" in table and "2 of 30" in table  # the unparseable verdicts
    assert "step 2: 60.0 %" in table  # the validation that chose it
    gain = "\n".join(report.gain_table(tmp_path, "pag"))
    assert "| 0 | 30 | 33.3 % | step 2 (validation) | 70.0 % | +36.7 |" in gain  # not step 4's 100 %


def test_a_run_whose_validation_chose_step_0_gains_nothing_and_is_reported(env, tmp_path):
    start = [pag_episode(env, i, i < 10, "correct", False) for i in range(20)]
    worse = [pag_episode(env, i, False, "correct", False) for i in range(20)]
    for seed in (0, 1):
        write_run(tmp_path / f"pag-s{seed}", 2, {0: start, 2: worse}, validation={0: 0.5, 2: 0.4})
    gain = "\n".join(report.gain_table(tmp_path, "pag"))
    assert "| 0 | 20 | 50.0 % | step 0 (validation) | 50.0 % | +0.0 | [+0.0, +0.0] | 1 (0 / 0) |" in gain
    assert "| mean of 2 | | | | | +0.0 |" in gain


def test_arms_at_a_fixed_step_and_the_gateways_unseen_problems(env, tmp_path):
    def arith(i: int, right: bool) -> dict:  # one level-1 test problem, answered right or wrong
        return pag_episode(env, i, right, "correct", False)

    for seed in (0, 1):
        write_run(tmp_path / f"uniform-s{seed}", 8, {s: [arith(i, i < 2 * s) for i in range(20)] for s in (0, 6, 8)})
        write_run(tmp_path / f"difficulty-s{seed}", 8, {s: [arith(i, i < 3 * s) for i in range(20)] for s in (0, 6, 8)})
    at6 = "\n".join(report.arms_table(tmp_path, "difficulty", "uniform", 6))
    assert "at step 6 (fixed in advance)" in at6 and "| 0 | 20 | 60.0 % | 90.0 % | +30.0 |" in at6
    end = "\n".join(report.arms_table(tmp_path, "difficulty", "uniform"))
    assert "at the end" in end and "| 0 | 20 | 80.0 % | 100.0 % | +20.0 |" in end
    # the gateway: problems 0-19 of the test split; gained every problem except those seen before
    keys = [arith(i, True)["item"] for i in range(20)]
    seen = frozenset(k for k in keys if k in report.GATEWAY_SEEN)
    assert seen  # today's test problems 6, 9 and 10 were among the old ones
    for seed in (0, 1):
        write_run(
            tmp_path / f"gateway-s{seed}",
            20,
            {0: [arith(i, False) for i in range(20)], 20: [arith(i, keys[i] not in seen) for i in range(20)]},
        )
    table = "\n".join(report.subset_table(tmp_path, "gateway", report.GATEWAY_SEEN, "unseen"))
    unseen = 20 - len(seen)
    assert f"| 0, not seen | {unseen} | 0.0 % | 100.0 % | +100.0 |" in table
    assert f"| 0, seen | {len(seen)} | 0.0 % | 0.0 % | +0.0 |" in table


def test_an_sdk_examples_gain_is_held_to_its_preregistered_bar(env, tmp_path):
    """Issue 81's SDK examples claim at least +10 points over three seeds: the pooled interval's lower end decides,
    and only once all three seeds are finished."""

    def arith(i: int, right: bool) -> dict:
        return pag_episode(env, i, right, "correct", False)

    def runs(arm: str, gained: int, seeds=(0, 1, 2)) -> None:  # problems 0-19: none right at step 0, `gained` at 20
        for seed in seeds:
            write_run(
                tmp_path / f"{arm}-s{seed}",
                20,
                {0: [arith(i, False) for i in range(20)], 20: [arith(i, i < gained) for i in range(20)]},
            )

    runs("anthropic-sdk", 12)  # +60 points on every seed
    runs("agents-sdk-responses", 3)  # +15 points: above the bar on average, not with its interval
    holds = "\n".join(report.gain_table(tmp_path, "anthropic-sdk"))
    assert "| mean of 3 | | | | | +60.0 |" in holds
    assert "seeds 0, 1, 2 at or above +10.0 points: **holds** (lower end +" in holds
    short = "\n".join(report.gain_table(tmp_path, "agents-sdk-responses"))
    assert "| mean of 3 | | | | | +15.0 |" in short and "**does not hold** (lower end -1.7)" in short
    runs("agents-sdk-responses", 20, seeds=(3, 4))  # seeds added later move the mean, never the claim
    short = "\n".join(report.gain_table(tmp_path, "agents-sdk-responses"))
    assert "| mean of 5 | | | | | +49.0 |" in short and "**does not hold** (lower end -1.7)" in short
    (tmp_path / "anthropic-sdk-s2" / "eval" / "step-20" / "items.jsonl").unlink()  # a seed not finished yet
    assert "points: not decided, 2 of 3 finished." in "\n".join(report.gain_table(tmp_path, "anthropic-sdk"))
    assert "gateway" not in report.BARS and set(report.BARS) - {"vf-v1"} <= set(report.GATEWAY_CONFIG)
    # the verifiers v1 task set's claim is a gain strictly above 0: no change on any item is a lower end of exactly 0
    runs("vf-v1", 0)
    flat = "\n".join(report.gain_table(tmp_path, "vf-v1"))
    assert "seeds 0, 1, 2 above +0.0 points: **does not hold** (lower end +0.0)" in flat, flat
    import shutil

    for seed in (0, 1, 2):
        shutil.rmtree(tmp_path / f"vf-v1-s{seed}")
    runs("vf-v1", 8)
    assert "above +0.0 points: **holds** (lower end +" in "\n".join(report.gain_table(tmp_path, "vf-v1"))


def test_the_sdk_examples_script_runs_the_preregistered_seeds_arms_and_items():
    """bench/evidence_sdk_agents.sh runs what bench/preregistered.md fixed and the report's bar reads: the arms and
    seeds of BARS, each arm's example config, and every level-1 test problem (eval_tasks = the split's size)."""
    import re

    import turnrl

    script = (REPO / "bench" / "evidence_sdk_agents.sh").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    seeds = tuple(int(s) for s in re.search(r"^for S in ([\d ]+); do$", code, re.MULTILINE).group(1).split())
    arms = dict(a.split(":") for a in re.search(r"^\s*for ARM in ([^;]+); do$", code, re.MULTILINE).group(1).split())
    assert set(arms) == set(report.BARS) - {"vf-v1"} and all(report.BARS[arm] == (0.10, seeds, False) for arm in arms)
    assert all((REPO / "examples" / f"{example}.yaml").is_file() for example in arms.values())
    train = re.search(r'^\s*\$T train "examples/\$EXAMPLE\.yaml" (.*)$', code, re.MULTILINE).group(1)
    held = turnrl.make("turnrl/Arithmetic-v0", level=1, split="test")
    assert f"eval_tasks={len(held)} seed=$S " in train and "--no-resume" in train
    section = (REPO / "bench" / "preregistered.md").read_text().split("the two SDK example agents")[1]
    assert f"seeds **{', '.join(map(str, seeds))}**" in section and f"all **{len(held)}**" in section
    said = " ".join(section.split())  # the arm each config was preregistered as
    assert all(f"`examples/{example}.yaml` (arm `{arm}`)" in said for arm, example in arms.items()), arms


def test_trees_against_chains_at_two_steps_and_the_goal_in_tokens(env, tmp_path):
    """Issue 79's preregistered tables: the tree at step 16 against the chain at step 8 (about equal tokens), and the
    goal — the tree, read where its validation chose, reaching the chain's final figure in ≤ 0.7× its generated
    tokens — judged on the means over seeds, from the runs' own metrics."""

    def arith(i: int, right: bool) -> dict:
        return pag_episode(env, i, right, "correct", False)

    def runs(arm: str, right: dict[int, int], per_step: int, validation: dict[int, float]) -> None:
        for seed in (0, 1, 2):
            run = write_run(
                tmp_path / f"{arm}-s{seed}",
                16,
                {s: [arith(i, i < n) for i in range(20)] for s, n in right.items()},
                validation,
            )
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            rows = [{**r, "generated_tokens": float(per_step) if r["step"] else 0.0} for r in rows]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    steps = (0, 4, 8, 12, 16)
    runs("chain", {0: 4, 4: 6, 8: 8, 12: 10, 16: 12}, 100, {s: 0.1 * i for i, s in enumerate(steps)})
    # the tree: half the tokens a step, its validation best at step 8 where it already has the chain's final figure
    runs("tree", {0: 4, 4: 10, 8: 12, 12: 12, 16: 14}, 50, {0: 0.1, 4: 0.2, 8: 0.5, 12: 0.4, 16: 0.3})
    both = "\n".join(report.arms_table(tmp_path, "tree", "chain", 16, 8))
    assert "tree at step 16, chain at step 8 (fixed in advance)" in both
    assert "| 0 | 20 | 40.0 % | 70.0 % | +30.0 |" in both
    goal = "\n".join(report.token_goal_table(tmp_path, "tree", "chain", 0.7))
    # chain: 1,600 tokens to step 16 and 60 %; tree: read at step 8, 400 tokens and 60 %: ratio 0.25
    assert "| 0 | 60.0 % | 1,600 | step 8 | 60.0 % | 400 | 0.25 |" in goal
    assert "Goal (mean ratio ≤ 0.7 and mean tree ≥ mean chain): **holds**" in goal
    # one seed's tree spends 8x the tokens: means 1,333 against 1,600 tokens, a ratio of 0.83
    runs_dir = tmp_path / "tree-s1" / "metrics.jsonl"
    rows = [json.loads(x) for x in runs_dir.read_text().splitlines()]
    runs_dir.write_text("".join(json.dumps({**r, "generated_tokens": 8 * r["generated_tokens"]}) + "\n" for r in rows))
    goal = "\n".join(report.token_goal_table(tmp_path, "tree", "chain", 0.7))
    assert "| mean of 3 | 60.0 % | | | 60.0 % | | 0.83 |" in goal and "**does not hold**" in goal


def test_the_trees_script_runs_the_preregistered_seeds_and_every_held_out_question():
    """bench/evidence_trees.sh runs what bench/preregistered.md fixed for each testbed: seeds 0 1 2, 16 steps read
    every 4, the same settings for both arms but the tree; on MultiHop all of the test and validation questions, on
    Arithmetic the first 200 and 100 distinct level-5 problems (of more)."""
    import re

    import turnrl

    script = (REPO / "bench" / "evidence_trees.sh").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert re.search(r"^for S in 0 1 2; do$", code, re.MULTILINE)
    assert "steps=16 validate_every=4 validation_tasks=$VAL eval_every=4 eval_tasks=$TEST seed=$S" in code
    found = {
        bed: (int(v), int(t)) for bed, v, t in re.findall(r"(multihop|arithmetic)\) OUT=\S+ VAL=(\d+) TEST=(\d+)", code)
    }
    kw = {"tool_style": "swirl", "demos": "none", "kinds": ["bridge"], "hops": [2]}
    test = turnrl.make("turnrl/MultiHop-v0", split="test", **kw)
    val = turnrl.make("turnrl/MultiHop-v0", split="validation", **kw)
    assert found["multihop"] == (len(val), len(test))
    text = (REPO / "bench" / "preregistered.md").read_text()
    said = " ".join(text.split("trees against chains on MultiHop")[1].split())
    assert f"all **{len(test)}** test questions" in said and f"all **{len(val)}** validation questions" in said
    assert "seeds **0, 1, 2**" in said and "**16**" in said
    arith = " ".join(text.split("(fifth session): trees against chains on Arithmetic (issue 79)")[1].split())
    a_val, a_test = found["arithmetic"]
    assert f"the first **{a_test}** distinct level-5 test problems" in arith and "seeds **0, 1, 2**" in arith
    assert f"the first **{a_val}** distinct level-5 validation problems" in arith
    for split, n in (("test", a_test), ("validation", a_val)):  # fewer than the split holds, as said
        assert n < len(turnrl.make("turnrl/Arithmetic-v0", level=[5], split=split, tool_style="swirl"))
    wrapper = (REPO / "bench" / "evidence_trees_arith.sh").read_text()
    assert "TESTBED=arithmetic" in wrapper and "evidence_trees.sh" in wrapper
    assert report.TOKEN_GOALS == (("tree", "chain", 0.7),) and ("tree", "chain") in report.PAIRS


def test_the_verifiers_v1_script_runs_the_preregistered_seeds_and_items():
    """bench/evidence_vf_v1.sh runs what bench/preregistered.md fixed: seeds 0 1 2 of the committed config, every
    test problem of the task set (its size: examples/vf_arithmetic_v1.py's num_eval, read from the file since
    verifiers 0.4 is not in this environment)."""
    import re

    script = (REPO / "bench" / "evidence_vf_v1.sh").read_text()
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert re.search(r"^for S in 0 1 2; do$", code, re.MULTILINE)
    num_eval = int(re.search(r"num_eval: int = (\d+)", (REPO / "examples" / "vf_arithmetic_v1.py").read_text())[1])
    assert f"train vf-arithmetic-v1.yaml eval_tasks={num_eval} seed=$S " in code and "--no-resume" in code
    section = (REPO / "bench" / "preregistered.md").read_text().split("a verifiers v1 task set learning")[1]
    said = " ".join(section.split())
    assert f"**{num_eval}** distinct test problems" in said and "seeds **0, 1, 2**" in said


def turnrl_stand_in(path):
    """An executable at ``path`` that a bench script can run as ``turnrl`` (``TURNRL=path``): it prints its arguments
    as one JSON list a line, and nothing trains."""
    path.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"\n")
    path.chmod(0o755)
    return path


def bench_commands(script, out):
    """The turnrl commands a bench script runs, each as its argument list (a stand-in for turnrl prints them:
    nothing trains), and the base configuration it writes in ``out``."""
    import os
    import subprocess

    import yaml

    stand_in = turnrl_stand_in(out.parent / f"{out.name}-turnrl")
    ran = subprocess.run(
        ["bash", str(REPO / "bench" / script), str(out)],
        env={**os.environ, "TURNRL": str(stand_in)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    return [json.loads(line) for line in ran.stdout.splitlines()], yaml.safe_load((out / "base.yaml").read_text())


def test_the_hotpotqa_pilot_reads_what_its_preregistration_fixed(tmp_path):
    """bench/pilot_hotpotqa.sh poses what bench/preregistered.md fixed for HotPotQA's pilot: one passage a search, at
    most 3 searches, no demonstrations, the teacher on every dev-train question, validation on all of dev-validation,
    the test split never read beyond the one-question evaluation nobody looks at."""
    import turnrl

    commands, base = bench_commands("pilot_hotpotqa.sh", tmp_path / "pilot")
    task = {"split": "dev-train", "tool_style": "swirl", "demos": "none", "max_searches": 3}
    assert base["env"]["kwargs"] == task and base["env"]["eval_kwargs"] == {"split": "dev-test"}
    train = turnrl.make("turnrl/HotPotQA-v0", split="dev-train")
    val = turnrl.make("turnrl/HotPotQA-v0", split="dev-validation")
    assert base["eval_tasks"] == 1 and base["validation_tasks"] == len(val)
    teacher = " ".join(commands[0])
    assert f"--tasks {len(train)} " in teacher and "--agent gold --kw split=dev-train" in teacher
    assert "--kw tool_style=swirl --kw demos=none --kw max_searches=3" in teacher
    runs = [" ".join(c) for c in commands if c[0] == "train"]
    assert [c.rsplit("/", 1)[1] for c in runs] == ["sft", "chain", "tree"]
    assert "steps=30 validate_every=10 eval_every=30" in runs[0]
    assert all("steps=16 validate_every=4 eval_every=16 seed=0" in c for c in runs[1:])  # one evaluation at the end
    assert "advantage: tree" in runs[2] and "advantage" not in runs[1]
    said = " ".join((REPO / "bench" / "preregistered.md").read_text().split("HotPotQA's recipe — the pilot")[1].split())
    assert "at most **3 searches**" in said and f"(100–149, all {len(val)})" in said
    assert f"the {len(train)} dev-train questions" in said and "seed 0" in said


def hotpotqa_choice(records):
    """The preregistered rule on the pilot's kept records: the highest validation mean F1 among SFT@10/20/30 and
    chain@4–16 and tree@4–16 (GRPO from SFT@30); of the candidates within 0.01 of it, the fewest training steps, SFT
    before GRPO and chains before trees at equal steps. Returns (recipe, step)."""
    candidates = []  # (F1, training steps, order, recipe, step)
    for order, (recipe, steps, before) in enumerate(
        (("sft", (10, 20, 30), 0), ("chain", (4, 8, 12, 16), 30), ("tree", (4, 8, 12, 16), 30))
    ):
        for step in steps:
            f1 = json.loads((records / recipe / "validation" / f"step-{step}" / "metrics.json").read_text())["mean_f1"]
            candidates.append((f1, before + step, order, recipe, step))
    best = max(c[0] for c in candidates)
    return min((c[1], c[2], c[3], c[4]) for c in candidates if c[0] >= best - 0.01)[2:]


def test_the_hotpotqa_test_runs_repeat_the_recipe_the_pilot_chose(tmp_path):
    """bench/evidence_hotpotqa.sh runs the recipe the preregistered rule picks from the pilot's kept records, with the
    settings the pilot's runs recorded (only the folder, the steps, the seed, what is evaluated and where they start
    differ), the GRPO run of each seed from that seed's warm-up, seeds 0, 1 and 2, each evaluated on all of dev-test
    and nothing validated."""
    import re

    import yaml

    import turnrl
    from turnrl.rl.config.loading import load_config

    records = REPO / "bench" / "evidence" / "pilot79h"
    pilot, _ = bench_commands("pilot_hotpotqa.sh", tmp_path / "pilot")
    runs, base = bench_commands("evidence_hotpotqa.sh", tmp_path / "test")
    script = (REPO / "bench" / "evidence_hotpotqa.sh").read_text()
    recipe, step = re.search(r"^RECIPE=(sft|chain|tree) STEP=(\d+) ", script, re.MULTILINE).groups()
    assert (recipe, int(step)) == hotpotqa_choice(records)
    assert base["eval_tasks"] == len(turnrl.make("turnrl/HotPotQA-v0", split="dev-test")) == 100
    test = str(tmp_path / "test")
    assert runs[:3] == [[a.replace(str(tmp_path / "pilot"), test) for a in c] for c in pilot[:3]]  # the rows
    trains = [c for c in runs if c[0] == "train"]
    want = [f"{name}-s{seed}" for seed in (0, 1, 2) for name in ("sft", recipe)[: 1 if recipe == "sft" else 2]]
    assert [c[-1].rsplit("/", 1)[1] for c in trains] == want
    differ = {"out_dir", "seed", "steps", "init_from", "eval_tasks", "validate_every", "eval_every", "path"}

    def same(recorded, now, where=""):  # every setting the pilot's run recorded, but those allowed to differ
        for key, value in recorded.items():
            if key in differ:
                continue
            if isinstance(value, dict):
                same(value, now[key], f"{where}{key}.")
            else:
                assert now[key] == value, f"{where}{key}: {now[key]!r} here, {value!r} in the pilot"

    for argv in trains:
        name, seed = argv[-1].rsplit("/", 1)[1].split("-s")
        config = load_config(argv[1], [a for a in argv[2:] if a != "--no-resume"])
        same(yaml.safe_load((records / name / "config.yaml").read_text()), config.model_dump())
        assert config.seed == int(seed) and config.validate_every == 0 and config.eval_every == 0
        assert config.steps == (int(step) if name == recipe else 30)
        if name != "sft":
            assert config.init_from == f"{test}/sft-s{seed}"
        assert config.data is None or config.data.path == f"{test}/gold-steps.parquet"
    said = " ".join((REPO / "bench" / "preregistered.md").read_text().split("HotPotQA's test runs")[1].split())
    assert f"`RECIPE={recipe} STEP={step}`" in said and "seeds **0, 1, 2**" in said


def textarena_choice(records):
    """The pilot's preregistered rule on its kept records: the learning rate whose validation win rate at step 20 is
    higher, 2e-5 on a tie. Returns (rate, {rate: wins of 40 at steps 0, 5, 10, 15, 20})."""
    import yaml

    curves = {}
    for rate in ("2e-5", "1e-4"):
        pilot = yaml.safe_load((records / f"lr{rate}" / "config.yaml").read_text())  # the arm is what it says
        assert pilot["optim"]["lr"] == float(rate) and pilot["seed"] == 100 and pilot["validation_tasks"] == 40
        rows = [json.loads(line) for line in (records / f"lr{rate}" / "metrics.jsonl").read_text().splitlines()]
        curves[rate] = [round(40 * r["val_success"]) for r in rows if "val_success" in r]
        assert [r["step"] for r in rows if "val_success" in r] == [0, 5, 10, 15, 20]
    return ("1e-4" if curves["1e-4"][-1] > curves["2e-5"][-1] else "2e-5"), curves


def test_the_textarena_figure_runs_the_rate_its_pilot_chose_on_the_preregistered_schedule(tmp_path):
    """configs/textarena-tictactoe.yaml (which bench/evidence_textarena.sh runs as shipped) carries the learning rate
    the pilot's rule picks from its kept validation records and the schedule bench/preregistered.md fixed for the
    figure; the script runs seeds 0, 1 and 2 once each, checkpointing every step, resumes a cut seed and skips only a
    seed whose step 20 is recorded whole."""
    import os
    import subprocess

    import yaml

    rate, curves = textarena_choice(REPO / "bench" / "evidence" / "pilot78")
    shipped = yaml.safe_load((REPO / "configs" / "textarena-tictactoe.yaml").read_text())
    assert shipped["optim"]["lr"] == float(rate) and shipped["steps"] == 20
    schedule = (shipped["eval_every"], shipped["eval_tasks"], shipped["validate_every"], shipped["validation_tasks"])
    assert schedule == (5, 96, 5, 40)
    assert shipped["multi_agent"]["opponent"] == "self" and shipped["multi_agent"]["eval_temperature"] == 1.0
    text = (REPO / "bench" / "preregistered.md").read_text()
    section = text.split("## 2026-12-07: TextArena tic-tac-toe's learning figure (issue 78)")[1].split("\n## ")[0]
    said = " ".join(section.split())
    assert f"so the learning rate is **{rate}**" in said and "**Seeds**: **0, 1, 2**" in said
    assert "test win rate on **96** games" in said and "**20 steps**" in said
    for arm, wins in curves.items():
        assert f"{arm} {', '.join(map(str, wins))}" in said

    stand_in = turnrl_stand_in(tmp_path / "turnrl")
    out = tmp_path / "e78t"

    def run():
        ran = subprocess.run(
            ["bash", str(REPO / "bench" / "evidence_textarena.sh"), str(out)],
            env={**os.environ, "TURNRL": str(stand_in), "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0, ran.stderr
        return {s: [" ".join(json.loads(c)) for c in (out / f"s{s}.log").read_text().splitlines()] for s in range(3)}

    first = run()
    for s in range(3):
        assert first[s] == [
            f"train configs/textarena-tictactoe.yaml seed={s} checkpoint_every=1 out_dir={out}/s{s} --no-resume"
        ]
    (out / "s0").mkdir()
    step_20 = {"step": 20.0, "eval_success": 0.5, "val_success": 0.5}
    (out / "s0" / "metrics.jsonl").write_text(json.dumps({"step": 19.0}) + "\n" + json.dumps(step_20) + "\n")
    for s in (1, 2):  # cut: seed 1 before its step-20 evaluation, seed 2 between that evaluation and its validation
        (out / f"s{s}").mkdir()
        (out / f"s{s}" / "checkpoint.pt").write_text("")
    (out / "s2" / "eval" / "step-20").mkdir(parents=True)
    (out / "s2" / "eval" / "step-20" / "items.jsonl").write_text("")
    (out / "s2" / "metrics.jsonl").write_text(json.dumps({"step": 19.0, "eval_success": 0.5}) + "\n")
    second = run()
    assert second[0] == first[0]  # a finished seed is never run again
    assert second[1][1].endswith(f"out_dir={out}/s1 --resume") and second[2][1].endswith(f"out_dir={out}/s2 --resume")
    starts = (out / "runs.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in starts[-4:]] == [
        "seed 1: turnrl train --resume",
        "seed 1: exit 0",
        "seed 2: turnrl train --resume",
        "seed 2: exit 0",
    ]


def test_the_games_table_reads_the_kept_self_play_records_as_the_docs_report_them():
    """bench/games_report.py on the kept league figure (bench/evidence/e78): the rows docs/results/agents.md prints for
    seed 0 — wins with their Wilson intervals at steps 0, 10 and 20, draws, invalid moves a game, the floor — and the
    run's health; a run without validation says that no step was chosen."""
    import games_report

    lines = "\n".join(games_report.seed_rows(REPO / "bench/evidence/e78/ttt-s0"))
    assert "| 0 | 1.9 % (0.3–10.1) | 1.9 % | 96.2 % | 1.92 | 52 of 52 | — |" in lines
    assert "| 10 | 28.8 % (18.3–42.3) |" in lines
    assert "| 20 | 50.0 % (36.9–63.1) | 5.8 % | 44.2 % | 0.48 | 52 of 52 | — |" in lines
    assert (
        "floor (a random legal player, step 0): wins 32.7 % (21.5–46.2), draws 21.2 %, losses 46.2 %, 52 distinct"
        in lines
    )
    assert (
        "no validation figure chose a step; guard 0, logp gap 4.0e-06 (worst step, 15), largest single token" in lines
    )
    textarena = "\n".join(games_report.seed_rows(REPO / "bench/evidence/e78t/s0"))
    assert (  # the other health checks: warnings, steps without a signal, views of seats that never moved
        "20 steps; warned on 15 of them, every group without reward variance on 1, 37 of 640 episodes left out; "
        "a reply 14.7–16.0 tokens a move (the steps' means; limit 16)" in textarena
    )
    pilot = "\n".join(games_report.seed_rows(REPO / "bench/evidence/pilot78/lr1e-4"))
    assert "| 20 | " in pilot and "30 of 40 (38 distinct)" in pilot and "validation chose step 20;" in pilot


def test_suite_cpu_counts_a_commands_processes_by_kind(tmp_path):
    """bench/suite_cpu.py on a command that starts a Python child burning about 0.6 CPU-seconds: the child is seen
    under its kind with most of that time, the command's own exit status comes back, and the figures are written."""
    import subprocess

    burn = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    out = tmp_path / "cpu.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench/suite_cpu.py"),
            "--every",
            "0.1",
            "--json",
            str(out),
            "--",
            "bash",
            "-c",
            f"{sys.executable} -c '{burn}'; exit 3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    figures = json.loads(out.read_text())
    assert figures["exit"] == 3 and figures["wall_s"] >= 0.6
    assert 0.4 <= figures["kinds"]["python"]["cpu_s"] <= 1.5  # the child (not the sampler itself)
    assert figures["busy_cpu_s"] >= figures["kinds"]["python"]["cpu_s"] - 0.2
    assert "python" in done.stderr and "busy" in done.stderr


def test_suite_cpu_names_a_compiler_a_compiler_though_its_arguments_name_python():
    """DeepSpeed's op build: the compiler's arguments name Python's headers, and it is still a compiler (session 20's
    profile counted a 47 s build as Python's)."""
    import suite_cpu

    build = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet -I /w/.venv/lib/python3.11/site-packages shm.cpp"
    assert suite_cpu.kind(build) == "compiler"
    assert suite_cpu.kind("c++ -MMD -isystem /root/.pyenv/versions/3.11.7/include/python3.11 -c shm.cpp") == "compiler"
    assert suite_cpu.kind("/w/.venv/bin/python -m turnrl train c.yaml") == "python"
    assert suite_cpu.kind("/w/.venv/bin/python -m pytest -q") == "pytest"
