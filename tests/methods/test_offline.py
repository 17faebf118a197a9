"""Offline training (docs/algorithms.md §9, docs/concepts.md §8): `turnrl rollout` datasets, DPO and RFT baselines, the
offline source and its bad-input answers, and dqo/dpo/rft trained end to end from one file."""

import json
import math

import pytest
import torch
import toy_envs  # noqa: F401 — registers tests/Upper-v0
import yaml
from pydantic import ValidationError
from tiny_trainer import tiny_trainer as trainer
from typer.testing import CliRunner

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.cli import app
from turnrl.methods.offline.algorithms import DPO, dpo_pairs
from turnrl.methods.offline.preference import dpo_loss, sequence_logp
from turnrl.methods.offline.source import OfflineSource
from turnrl.rl.algorithms import get_algorithm
from turnrl.rl.config import TrainConfig
from turnrl.rl.run.trainer import learner_of
from turnrl.rl.sources.collect import rollout_dataset
from turnrl.rl.sources.replay import OfflineDataError, check_tokenizer, tokenizer_fingerprint
from turnrl.storage import load, save

runner = CliRunner()
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=4)
SEED = 3  # the data's sampling seed: 5 of its 8 tasks have both outcomes (seed 0: 3)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """8 tasks x 4 samples of tests/Upper-v0 by the tiny random model, as `turnrl rollout` writes them."""
    out = tmp_path_factory.mktemp("data") / "upper.parquet"
    tok = tiny_tokenizer("chatml")
    summary = rollout_dataset(
        HFAgent(tiny_model(tok), tok),
        "tiny:chatml",
        "tests/Upper-v0",
        out=out,
        tasks=8,
        samples=4,
        params=PARAMS,
        seed=SEED,
    )
    assert summary["groups_both_outcomes"] >= 4, summary  # the tests below need pairs
    return out


def run_config(path, algo, tmp_path, **extra):
    return TrainConfig.model_validate(
        {
            "model": "tiny:chatml",
            "env": {"id": "tests/Upper-v0"},
            "algorithm": algo,
            "data": {"path": str(path), "batch_size": 8, **extra.pop("data", {})},
            "rollout": {"max_new_tokens": 4},
            "optim": {"lr": 1e-2, "minibatch_size": 4},
            "eval_tasks": 2,
            "out_dir": str(tmp_path / "run"),
            **extra,
        }
    )


# ---- turnrl rollout ----


def test_rollout_records_rewards_behaviour_logprobs_and_identity(data):
    trajs = load(data)
    tok = tiny_tokenizer("chatml")
    assert len(trajs) == 32 and {t.group_id for t in trajs} == {f"task-{i}" for i in range(8)}
    for t in trajs:
        assert t.metadata["agent"] == "tiny:chatml" and t.metadata["tokenizer"] == tokenizer_fingerprint(tok)
        gen = [lp for lp, m in zip(t.logprobs, t.loss_mask) if m]
        assert gen and all(lp < 0 for lp in gen)  # the sampler's own log-probabilities
        assert t.turns[-1].reward == float(t.correct)


def test_rollout_resumes_an_interrupted_file_and_samples_what_an_uninterrupted_run_would(data, tmp_path):
    full = load(data)
    out = tmp_path / "d.parquet"
    save([t for t in full if t.metadata["task_index"] < 4], out)  # tasks 0-3 finished and written
    partial = out.with_name(out.name + ".partial.jsonl")  # two episodes of task 4 streamed, then the run died
    partial.write_text(
        "".join(
            json.dumps(t.model_dump(mode="json")) + "\n"
            for t in full
            if t.metadata["task_index"] == 4 and t.metadata["sample"] < 2
        )
        + '{"cut mid-li'
    )
    tok = tiny_tokenizer("chatml")
    summary = rollout_dataset(
        HFAgent(tiny_model(tok), tok),
        "tiny:chatml",
        "tests/Upper-v0",
        out=out,
        tasks=8,
        samples=4,
        params=PARAMS,
        seed=SEED,
        batch_episodes=8,
    )
    assert summary["skipped_tasks"] == 4 and summary["new_episodes"] == 16 and not partial.exists()
    resumed = load(out)
    key = lambda t: (t.metadata["task_index"], t.metadata["sample"])
    assert sorted(map(key, resumed)) == sorted(map(key, full))
    assert {key(t): t.token_ids for t in resumed} == {key(t): t.token_ids for t in full}
    again = rollout_dataset(
        HFAgent(tiny_model(tok), tok),
        "tiny:chatml",
        "tests/Upper-v0",
        out=out,
        tasks=8,
        samples=4,
        params=PARAMS,
        seed=SEED,
    )
    assert again["new_episodes"] == 0 and again["skipped_tasks"] == 8
    with pytest.raises(ValueError, match="samples: 4 there, 3 now"):
        rollout_dataset(
            HFAgent(tiny_model(tok), tok),
            "tiny:chatml",
            "tests/Upper-v0",
            out=out,
            tasks=8,
            samples=3,
            params=PARAMS,
            seed=SEED,
        )


# ---- DPO ----


def test_dpo_loss_is_log_2_at_the_reference_and_its_gradient_raises_y_w_and_lowers_y_l():
    logp_w, logp_l = torch.tensor([-3.0, -7.0], requires_grad=True), torch.tensor([-2.0, -9.0], requires_grad=True)
    losses, _ = dpo_loss(logp_w, logp_w.detach(), logp_l, logp_l.detach(), beta=0.1)
    assert torch.allclose(losses, torch.full((2,), math.log(2)))
    losses.sum().backward()
    assert (logp_w.grad < 0).all() and (logp_l.grad > 0).all()  # descent raises log π(y_w), lowers log π(y_l)
    assert torch.allclose(logp_w.grad, torch.full((2,), -0.05)) and torch.allclose(logp_l.grad, torch.full((2,), 0.05))


def test_dpo_on_a_tiny_model_starts_at_log_2_and_a_step_separates_the_pair(data, tmp_path):
    tok = tiny_tokenizer("chatml")
    cfg = run_config(data, {"name": "dpo", "pairs": "one"}, tmp_path)
    source = OfflineSource(data, get_algorithm(cfg.algorithm), 8)
    pair = source.groups[0]
    assert pair[0].correct is True and pair[1].correct is False and pair[0].group_id == pair[1].group_id
    lrn = learner_of(cfg, tiny_model(tok), tok)
    exp, _ = lrn.prepare(pair)
    loss, metrics, _ = lrn.micro_loss(exp, lrn.counts(exp))
    assert float(loss.detach()) == pytest.approx(math.log(2), abs=1e-6) and float(metrics["dpo_margin"]) == 0.0

    def seq():
        with torch.no_grad():
            return sequence_logp(lrn.micro_loss(exp, lrn.counts(exp))[2].logp, exp.batch.loss_mask)

    before = seq()
    cfg.optim.lr = 1e-3
    lrn.update(pair)
    after = seq()
    assert after[0] > before[0] and after[1] < before[1], (before, after)
    with pytest.raises(ValueError, match="whole .correct, incorrect. pairs"):
        lrn.micro_loss(exp.select([1, 0]), lrn.counts(exp))


def test_dpo_pairs_skip_and_count_tasks_with_a_single_outcome(data):
    groups = {}
    for t in load(data):
        groups.setdefault(t.group_id, []).append(t)
    groups = list(groups.values())
    n_c = [sum(bool(t.correct) for t in g) for g in groups]
    mixed = [g for g, c in zip(groups, n_c) if 0 < c < len(g)]
    right = [[t for t in g if t.correct] for g in mixed[:1]]  # a task whose episodes are all correct
    wrong = [[t for t in g if not t.correct] for g in mixed[1:3]]  # two all incorrect
    pairs, info = dpo_pairs(mixed[3:] + right + wrong, "all")
    want = sum(sum(bool(t.correct) for t in g) * sum(not t.correct for t in g) for g in mixed[3:])
    assert info["dpo_pairs"] == len(pairs) == want and info["dpo_tasks"] == len(mixed[3:])
    assert info["dpo_skipped_tasks"] == 3
    assert info["dpo_all_correct_tasks"] == 1 and info["dpo_all_incorrect_tasks"] == 2
    assert all(w.correct and not lose.correct and w.group_id == lose.group_id for w, lose in pairs)
    one, _ = dpo_pairs(mixed, "one")
    assert len(one) == len(mixed)
    with pytest.raises(OfflineDataError, match="no task in the data has both"):
        DPO(DPO.Config()).units(right + wrong)


# ---- RFT ----


def test_rft_trains_only_the_correct_episodes(data, tmp_path):
    tok = tiny_tokenizer("chatml")
    cfg = run_config(data, "rft", tmp_path)
    source = OfflineSource(data, get_algorithm(cfg.algorithm), 8)
    assert all(t.correct for u in source.groups for t in u)
    assert source.data_metrics["rft_correct_episodes"] == sum(bool(t.correct) for t in load(data))
    trajs = load(data)[:12]
    good = [t for t in trajs if t.correct]
    assert 0 < len(good) < len(trajs)
    lrn = learner_of(cfg, tiny_model(tok), tok)

    def grad(batch):
        lrn.model.zero_grad()
        exp, _ = lrn.prepare(batch)
        lrn.micro_loss(exp, lrn.counts(exp))[0].backward()
        return torch.cat([p.grad.flatten() for p in lrn.model.parameters() if p.grad is not None])

    assert torch.allclose(grad(trajs), grad(good), atol=1e-6)  # the incorrect episodes add nothing

    def nll():
        with torch.no_grad():
            exp, _ = lrn.prepare(good)
            return float(lrn.micro_loss(exp, lrn.counts(exp))[0])

    before = nll()
    lrn.update(trajs)
    assert nll() < before


# ---- the offline source and bad input ----


def test_dqo_refuses_a_dataset_without_behaviour_logprobs_and_trains_when_told_it_is_on_policy(tmp_path):
    tok = tiny_tokenizer("chatml")
    agent = ScriptedAgent(tok, lambda p: "Yes" if "2" in p or "5" in p else "no")
    out = tmp_path / "scripted.parquet"
    rollout_dataset(agent, "scripted", "tests/Upper-v0", out=out, tasks=8, samples=2, params=PARAMS)
    with pytest.raises(OfflineDataError, match="no behaviour log-prob.*turnrl rollout.*importance_weights=none"):
        trainer(run_config(out, "dqo", tmp_path))
    cfg = run_config(out, {"name": "dqo", "importance_weights": "none"}, tmp_path, steps=2)
    history = trainer(cfg).train()
    assert math.isfinite(history[-1]["loss"]) and history[-1]["is_weight_mean"] == 1.0
    config = tmp_path / "c.yaml"  # the CLI: one line, exit 2
    dumped = run_config(out, "dqo", tmp_path, steps=2).model_dump(mode="json", exclude={"ray"})
    config.write_text(yaml.safe_dump(dumped))
    result = runner.invoke(app, ["train", str(config)])
    last = result.output.strip().splitlines()[-1]  # (after the note that the toy env has no held-out split)
    assert result.exit_code == 2 and last.startswith("error:") and "turnrl rollout" in last


def test_a_dataset_from_another_tokenizer_is_refused(data, tmp_path):
    other = tiny_tokenizer("chatml", vocab_size=400)
    with pytest.raises(OfflineDataError, match="another tokenizer"):
        trainer(run_config(data, "rft", tmp_path), tok=other)
    bare = [
        t.model_copy(update={"metadata": {k: v for k, v in t.metadata.items() if k != "tokenizer"}}) for t in load(data)
    ]  # no fingerprint stored: the prompt must decode to its own text
    check_tokenizer(bare, tiny_tokenizer("chatml"))
    with pytest.raises(OfflineDataError, match="another tokenizer"):
        check_tokenizer(bare, other)


def test_offline_configs_say_what_is_missing_or_in_conflict(data, tmp_path):
    base = {"model": "tiny", "env": {"id": "tests/Upper-v0"}}
    with pytest.raises(ValidationError, match="trains offline from a dataset.*turnrl rollout"):
        TrainConfig.model_validate({**base, "algorithm": "dqo"})
    with pytest.raises(ValidationError, match="on-policy.*drop `data`"):
        TrainConfig.model_validate({**base, "algorithm": "grpo", "data": {"path": str(data)}})
    with pytest.raises(ValidationError, match="must be even"):
        TrainConfig.model_validate(
            {**base, "algorithm": "dpo", "data": {"path": str(data)}, "optim": {"minibatch_size": 3}}
        )
    with pytest.raises(ValidationError, match="either `steps` or data.epochs"):
        TrainConfig.model_validate({**base, "algorithm": "rft", "steps": 3, "data": {"path": str(data), "epochs": 1}})
    with pytest.raises(ValidationError, match="dpo on a DeepSpeed learner group is not supported yet"):
        TrainConfig.model_validate(
            {
                **base,
                "algorithm": "dpo",
                "data": {"path": str(data)},
                "placement": "ray",
                "learner": {"backend": "deepspeed", "ranks": 2},
            }
        )
    with pytest.raises(ValidationError, match="has no option 'lam' .an option of dqo"):
        TrainConfig.model_validate({**base, "algorithm": {"name": "dpo", "lam": 1.0}, "data": {"path": str(data)}})
    with pytest.raises(OfflineDataError, match="does not exist.*turnrl rollout"):
        trainer(run_config(tmp_path / "missing.parquet", "rft", tmp_path))


def test_epochs_resolve_to_steps_over_whole_units(data, tmp_path):
    t = trainer(run_config(data, "dqo", tmp_path, data={"epochs": 2}))
    assert t.cfg.steps == 8 and t.cfg.data.epochs is None  # 32 episodes in groups of 4, 8 per step, twice
    history = t.train()
    assert history[-1]["epoch"] == 2.0 and all(h["rollout_episodes"] == 8 for h in history[1:])
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["steps"] == 8 and saved["data"]["epochs"] is None


def test_the_offline_sources_probe_environment_is_closed_with_the_run(data, tmp_path):
    """The environment an offline source opens for its figures (a remote: one holds a server session) is closed when
    the run is."""
    t = trainer(run_config(data, "dqo", tmp_path))
    probe, closed = t.source.env, []
    real_close = probe.close
    probe.close = lambda: (closed.append(True), real_close())
    t.close()
    assert closed == [True] and t.source.env is None


def test_a_killed_and_resumed_offline_run_continues_bit_exactly(data, tmp_path):
    full = trainer(run_config(data, "dqo", tmp_path / "a", steps=6))
    full.train()
    part = trainer(run_config(data, "dqo", tmp_path / "b", steps=6, checkpoint_every=3))
    part.train(stop_after=3)
    resumed = trainer(run_config(data, "dqo", tmp_path / "b", steps=6, checkpoint_every=3))
    resumed.load(tmp_path / "b" / "run" / "checkpoint.pt")
    resumed.train()
    assert all(torch.equal(a, b) for a, b in zip(full.model.parameters(), resumed.model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(full.value_head.parameters(), resumed.value_head.parameters()))
    start = tiny_model(tiny_tokenizer()).parameters()
    assert any(not torch.equal(a, b) for a, b in zip(full.model.parameters(), start))


# ---- end to end: one dataset, three algorithms, one config change each ----


def test_rollout_then_dqo_dpo_and_rft_from_the_file_through_the_cli(tmp_path):
    out = tmp_path / "upper.parquet"
    args = [
        "rollout",
        "--env",
        "tests/Upper-v0",
        "--agent",
        "tiny:chatml",
        "--tasks",
        "8",
        "--samples",
        "4",
        "--max-new-tokens",
        "4",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "32 episodes of 8 tasks" in result.output and "success rate" in result.output
    assert "groups with both outcomes" in result.output
    config = tmp_path / "offline.yaml"
    config.write_text(
        f"model: 'tiny:chatml'\nenv: {{id: tests/Upper-v0}}\nalgorithm: {{name: dqo}}\n"
        f"data: {{path: {out}, batch_size: 8, epochs: 1}}\nrollout: {{max_new_tokens: 4}}\n"
        f"optim: {{lr: 0.01, minibatch_size: 4}}\neval_tasks: 2\nout_dir: {tmp_path / 'dqo'}\n"
    )
    own = {"dqo": "value_loss", "dpo": "dpo_margin", "rft": "nll"}  # each objective's own term was trained
    for algo in ("dqo", "dpo", "rft"):
        run = tmp_path / algo
        result = runner.invoke(app, ["train", str(config), f"algorithm.name={algo}", f"out_dir={run}"])
        assert result.exit_code == 0, result.output
        history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert len(history) > 1 and "eval_success" in history[0] and "eval_success" in history[-1]
        assert all(math.isfinite(h["loss"]) and own[algo] in h for h in history[1:])
        assert all(h["generated_tokens"] == 0 for h in history[1:])  # no rollouts while training
    dpo = json.loads((tmp_path / "dpo" / "metrics.jsonl").read_text().splitlines()[-1])
    assert dpo["dpo_pairs"] > 0 and "dpo_skipped_tasks" in dpo


def test_a_dataset_that_poses_held_out_problems_is_refused_before_training(tmp_path):
    """Issue 77's review: offline data was never checked against the run's held-out problems. `turnrl rollout`
    records each task's canonical form; an offline run refuses rows that pose its held-out (or validation) problems,
    and warns about rows without one (older datasets)."""
    from turnrl.rl.run.held_out import check_dataset

    tok = tiny_tokenizer("chatml")

    def solve(prompt: str) -> str:  # right on every sum (rft needs right episodes to imitate)
        import re

        a, b = re.findall(r"What is (\d+) \+ (\d+)", prompt)[-1]
        return f"\\boxed{{{int(a) + int(b)}}}"

    agent = ScriptedAgent(tok, solve)
    for split in ("test", "train"):
        rollout_dataset(
            agent,
            "scripted",
            "turnrl/Arithmetic-v0",
            out=tmp_path / f"{split}.jsonl",
            tasks=4,
            samples=1,
            params=PARAMS.model_copy(update={"max_new_tokens": 16}),
            env_kwargs={"split": split},
        )
    rows = load(tmp_path / "test.jsonl")
    assert all(t.metadata["item"].startswith("arithmetic:(") for t in rows)
    cfg = TrainConfig.model_validate(
        {
            "model": "tiny:chatml",
            "env": {"id": "turnrl/Arithmetic-v0"},
            "algorithm": {"name": "rft"},
            "data": {"path": str(tmp_path / "test.jsonl"), "batch_size": 2},
            "rollout": {"max_new_tokens": 4},
            "eval_tasks": 4,
            "out_dir": str(tmp_path / "run"),
        }
    )
    with pytest.raises(OfflineDataError, match="holds 4 of this run's held-out problems"):
        trainer(cfg)
    assert check_dataset("turnrl/Arithmetic-v0", {}, None, 102, load(tmp_path / "train.jsonl")) is None
    old = [t.model_copy(update={"metadata": {k: v for k, v in t.metadata.items() if k != "item"}}) for t in rows]
    assert "carry no item" in check_dataset("turnrl/Arithmetic-v0", {}, None, 102, old)
