import json

import pytest
import torch
from pydantic import ValidationError
from tiny_trainer import tiny_trainer as new_trainer
from toy_envs import assert_learns, upper

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.scripted import FixedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.envs import Task, ToolEnv
from turnrl.rl.core.batch import collate
from turnrl.rl.core.forward import token_logprobs
from turnrl.rl.run.trainer import TrainConfig, Trainer, load_config
from turnrl.rollout.engine import Rollout
from turnrl.verifiers.base import Verdict


def config(tmp_path, algo="grpo", steps=30, **extra):
    return TrainConfig(
        model="tiny",
        env={"id": "tests/Upper-v0"},
        algorithm={"name": algo, **extra.pop("algorithm", {})},
        rollout={"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 4},
        optim={"lr": 1e-2, "minibatch_size": 16, **extra.pop("optim", {})},
        steps=steps,
        eval_tasks=8,
        out_dir=str(tmp_path),
        **extra,
    )


@pytest.mark.parametrize("algo", ["grpo", "dapo", "ppo", "vapo", "rloo", "reinforce++"])
def test_each_algorithm_raises_the_success_rate(tmp_path, algo):
    extra = {"algorithm": {"value_warmup_steps": 3}} if algo == "vapo" else {}
    trainer = new_trainer(config(tmp_path, algo, **extra))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    history = trainer.train()
    assert_learns(history)
    assert history[-1]["eval_success"] > history[0]["eval_success"]
    updated = [h for h in history[1:] if "loss" in h]  # DAPO skips steps whose groups all lack reward variance
    assert len(updated) >= 20 and all(torch.isfinite(torch.tensor(h["loss"])) for h in updated)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 31 and "eval_success" in json.loads(lines[0])
    assert {
        "reward_mean",
        "reward_std",
        "entropy",
        "clip_frac",
        "tokens_per_s",
        "train_tokens_per_s",
        "rewarded_incorrect",
        "warnings",
        "logp_diff",
        "policy_version",
    } <= set().union(*map(json.loads, lines))
    assert all(h["rewarded_incorrect"] == 0.0 for h in history[1:])  # the toy env rewards only correct answers


def test_kl_to_reference_is_reported(tmp_path):
    history = new_trainer(config(tmp_path, steps=3, algorithm={"kl_coef": 0.1})).train()
    assert all(h["kl"] >= 0 for h in history[1:]) and history[-1]["kl"] > 0


@pytest.mark.parametrize("algo", ["grpo", "vapo", "ppo-critic-model"])
def test_killed_and_resumed_run_continues_bit_exactly(tmp_path, algo):
    extra = {"algorithm": {"value_warmup_steps": 2}} if algo == "vapo" else {}
    if algo == "ppo-critic-model":
        algo, extra = "ppo", {"algorithm": {"critic_model": "tiny:chatml"}}
    full = new_trainer(config(tmp_path / "a", algo, steps=6, **extra))
    full.train()
    part = new_trainer(config(tmp_path / "b", algo, steps=6, checkpoint_every=3, **extra))
    part.train(stop_after=3)
    resumed = new_trainer(config(tmp_path / "b", algo, steps=6, checkpoint_every=3, **extra))
    resumed.load(tmp_path / "b" / "checkpoint.pt")
    assert resumed.step == 3
    resumed.train()
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    critics = (full.critic or full.value_head, resumed.critic or resumed.value_head)
    if algo != "grpo":
        assert all(torch.equal(a, b) for a, b in zip(critics[0].parameters(), critics[1].parameters()))
    drop = lambda h: {
        k: v for k, v in h.items() if k not in ("seconds", "tokens_per_s", "train_tokens_per_s", "generate_s")
    }
    assert [drop(h) for h in full.history] == [drop(h) for h in resumed.history]


def test_config_rejects_unknown_keys_and_takes_dotted_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env: {id: tests/Upper-v0}\nalgorithm: {name: dapo}\n")
    cfg = load_config(path, ["optim.lr=0.5", "rollout.group_size=4", "steps=2"])
    assert cfg.optim.lr == 0.5 and cfg.rollout.group_size == 4 and cfg.algorithm.eps_high == 0.28
    assert cfg.algorithm.agg == "token-mean" and cfg.algorithm.dynamic_sampling
    with pytest.raises(ValidationError, match="lerning_rate"):
        load_config(path, ["optim.lerning_rate=1"])
    with pytest.raises(ValidationError):
        load_config(path, ["algorithm.name=reinforce"])


def test_collate_keeps_turns_roles_and_rewards():
    tok = tiny_tokenizer("chatml")
    agent = FixedAgent(tok, ["\\boxed{5}", "The answer is wrong", "\\boxed{4}"])
    trajs = Rollout(agent, SamplingParams()).run(
        [turnrl.make("turnrl/Arithmetic-PAG-v0") for _ in range(2)],
        options=[{"task": {"id": "t", "prompt": "2+2?", "answer": "4"}}] * 2,
        group_ids=["g", "g"],
    )
    b = collate(trajs, tok.pad_token_id)
    assert b.group_ids.tolist() == [0, 0] and b.scores.tolist() == [3.0, 3.0]
    for k, (role, reward) in enumerate([(0, 0.0), (1, 1.0), (0, 2.0)]):
        sel = b.turn_ids[0] == k
        assert sel.any() and (b.roles[0][sel] == role).all() and b.token_rewards[0][sel][-1] == reward
    assert torch.equal(b.loss_mask[0] > 0, b.turn_ids[0] >= 0)
    model = tiny_model(tok)
    logp, ent = token_logprobs(model, b.input_ids, b.attention_mask)
    assert logp.shape == b.input_ids.shape and (ent >= 0).all()
    with pytest.raises(ValueError, match="no token fields"):
        collate([turnrl.Trajectory()], 0)


def test_train_and_plot_commands(tmp_path):
    from typer.testing import CliRunner

    from turnrl.cli import app

    cfg = tmp_path / "toy.yaml"
    cfg.write_text(
        f"model: 'tiny:chatml'\nenv: {{id: tests/Upper-v0}}\nrollout: {{prompts_per_step: 2, group_size: 4, "
        f"max_new_tokens: 4}}\noptim: {{lr: 0.01}}\nsteps: 2\neval_tasks: 4\nout_dir: {tmp_path / 'run'}\n"
    )
    runner = CliRunner()
    result = runner.invoke(app, ["train", str(cfg), "steps=3"])
    assert result.exit_code == 0, result.output
    assert "held-out success" in result.output and (tmp_path / "run" / "checkpoint.pt").exists()
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 4  # the step-0 eval + 3 steps
    assert "step 0 held-out" in result.output and "step 3 reward" in result.output  # a line per step in a log
    result = runner.invoke(app, ["train", str(cfg), "steps=4"])  # resumes from the checkpoint at step 3
    assert "resumed" in result.output and len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 5
    result = runner.invoke(app, ["plot", str(tmp_path / "run")])
    assert result.exit_code == 0 and (tmp_path / "run" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    result = runner.invoke(app, ["train", str(cfg), "optim.lerning=3"])
    assert result.exit_code == 2 and "lerning" in result.output


def test_ppo_with_a_separate_critic_model(tmp_path):
    trainer = new_trainer(config(tmp_path, "ppo", steps=20, algorithm={"critic_model": "tiny:chatml"}))
    assert trainer.value_head is None and trainer.critic is not None
    backbone = [p.detach().clone() for p in trainer.critic.backbone.parameters()]
    history = trainer.train()
    assert sum(h["success"] for h in history[-5:]) / 5 > sum(h["success"] for h in history[1:6]) / 5 + 0.3
    assert any(not torch.equal(a, b) for a, b in zip(backbone, trainer.critic.backbone.parameters()))
    # the critic fits the returns better than it did at first, relative to their spread (which grows as the policy
    # starts to succeed: each batch's reward variance is what predicting its mean would lose)
    fit = [h["value_loss"] / max(h["reward_std"] ** 2, 1e-6) for h in history[1:]]
    assert sum(fit[-5:]) < sum(fit[:5])
    with pytest.raises(ValueError, match="must share the policy's tokenizer"):
        from turnrl.agents.tiny import tiny_model as tm
        from turnrl.rl.core.critic import SeparateCritic

        SeparateCritic(tm(tiny_tokenizer("chatml", vocab_size=300)), vocab_size=600)


def test_vapo_value_pretraining_moves_only_the_critic(tmp_path):
    trainer = new_trainer(config(tmp_path, "vapo", steps=2, algorithm={"value_warmup_steps": 5}))
    policy = [p.detach().clone() for p in trainer.model.parameters()]
    critic = [p.detach().clone() for p in trainer.value_head.parameters()]
    history = trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(policy, trainer.model.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(critic, trainer.value_head.parameters()))
    assert "explained_variance" in history[-1] and "value_loss" in history[-1]
    cfg = trainer.cfg.algorithm
    assert (cfg.eps_high, cfg.agg, cfg.lam_critic, cfg.nll_coef) == (0.28, "token-mean", 1.0, 0.1)


def test_critic_targets_with_lambda_one_are_returns_to_go():
    from turnrl.rl.algorithms import get_algorithm
    from turnrl.rl.core.batch import Batch

    T = 5
    mask = torch.tensor([[0.0, 1, 1, 0, 1]])
    rewards = torch.tensor([[0.0, 0, 0.5, 0, 1.0]])
    b = Batch(
        input_ids=torch.zeros(1, T, dtype=torch.long),
        attention_mask=torch.ones(1, T, dtype=torch.long),
        loss_mask=mask,
        old_logp=torch.zeros(1, T),
        token_rewards=rewards,
        turn_ids=torch.zeros(1, T, dtype=torch.long),
        roles=torch.zeros(1, T, dtype=torch.long),
        response_lengths=torch.tensor([3.0]),
        scores=torch.tensor([1.5]),
        correct=torch.ones(1),
        group_ids=torch.zeros(1, dtype=torch.long),
        truncated=torch.zeros(1),
    )
    _adv, ret = get_algorithm({"name": "vapo"}).advantages(b, 4, torch.zeros(1, T))
    assert torch.allclose(ret[0, [1, 2, 4]], torch.tensor([1.5, 1.5, 1.0]))
    _, cut = get_algorithm({"name": "vapo", "turn_independent": True}).advantages(b, 4, torch.zeros(1, T))
    assert torch.allclose(cut[0, [1, 2, 4]], torch.tensor([0.5, 0.5, 1.0]))  # PAG: no flow across turns


def test_wandb_offline_run_records_the_metrics_and_a_resumed_run_continues_it(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = config(tmp_path, steps=2, wandb={"mode": "offline", "project": "turnrl-tests"})
    first = new_trainer(cfg)
    first.train(stop_after=1)
    first.save(tmp_path / "checkpoint.pt")
    run_id = (tmp_path / "wandb_id.txt").read_text()
    resumed = new_trainer(cfg)
    resumed.load(tmp_path / "checkpoint.pt")
    resumed.train()
    assert (tmp_path / "wandb_id.txt").read_text() == run_id
    logs = sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 2 and all(p.name == f"run-{run_id}.wandb" for p in logs)
    data = b"".join(p.read_bytes() for p in logs)
    for key in (b"eval_success", b"reward_mean", b"grad_norm", b"train_tokens_per_s", b"tests/Upper-v0"):
        assert key in data, key


def test_wandb_configured_but_missing_is_a_clear_error(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` sees when it is not installed
    with pytest.raises(ImportError, match=r"pip install 'turnrl\[wandb\]'"):
        new_trainer(config(tmp_path, steps=1, wandb={"mode": "offline"})).train()


def upper_or_half(text: str, ref: str) -> Verdict:
    ok = upper(text, ref).correct
    return Verdict(correct=ok, score=1.0 if ok else 0.5)


class PartialCreditEnv(ToolEnv):
    """Half the reward for a reply that is not correct: the share of rewarded-but-wrong episodes is 1 - success."""

    def __init__(self, **kw):
        super().__init__(
            [Task(id=f"t{i}", prompt=f"Say something {i}.", answer="") for i in range(8)], verifier=upper_or_half, **kw
        )


turnrl.register("tests/PartialCredit-v0", PartialCreditEnv)


def test_rewarded_incorrect_share_is_recorded(tmp_path):
    cfg = config(tmp_path, steps=2)
    cfg.env.id = "tests/PartialCredit-v0"
    history = new_trainer(cfg).train()
    for h in history[1:]:
        assert h["rewarded_incorrect"] == pytest.approx(1 - h["success"]) and 0 < h["rewarded_incorrect"] < 1


def test_a_run_keeps_its_config_and_each_steps_episodes_with_advantages_and_learner_logprobs(tmp_path):
    import yaml

    from turnrl.storage import read_jsonl
    from turnrl.view.index import EpisodeIndex, discover

    cfg = config(tmp_path, "grpo", steps=2, optim={"minibatch_size": 8})  # 4 windows: 3 after an optimizer step
    new_trainer(cfg).train()
    assert TrainConfig.model_validate(yaml.safe_load((tmp_path / "config.yaml").read_text())) == cfg
    for step in (1, 2):
        trajs = read_jsonl(tmp_path / "train" / f"step-{step}" / "trajectories.jsonl")
        assert len(trajs) == 32
        for t in trajs:
            adv, learner = t.metadata["advantages"], t.metadata["learner_logprobs"]
            assert len(adv) == len(learner) == len(t.token_ids)
            trained = [i for i, m in enumerate(t.loss_mask) if m]
            assert trained and all(adv[i] is None and learner[i] is None for i, m in enumerate(t.loss_mask) if not m)
            assert len({adv[i] for i in trained}) == 1  # GRPO: one advantage per episode, on every generated token
            if t.metadata["learner_logprobs_after"] == 0:  # scored before any step: the rollout's own weights
                assert max(abs(learner[i] - t.logprobs[i]) for i in trained) < 1e-4
        after = sorted({t.metadata["learner_logprobs_after"] for t in trajs})
        assert after == [0, 1, 2, 3]
        group = [t for t in trajs if t.group_id == trajs[0].group_id]
        rewards = torch.tensor([t.total_reward for t in group])
        if rewards.std() > 0:  # advantages are the group-normalized rewards
            assert sorted(g.metadata["advantages"][g.loss_mask.index(1)] > 0 for g in group) == sorted(
                (rewards > rewards.mean()).tolist()
            )
    sources = discover(tmp_path)
    assert {(s.kind, s.step) for s in sources if s.kind == "train"} == {("train", 1), ("train", 2)}
    index = EpisodeIndex.open(tmp_path, background=False)
    assert index.facets()["has_advantages"] and index.facets()["has_learner_logprobs"]


def test_a_run_starts_from_another_runs_policy_and_it_is_the_reference(tmp_path):
    first = new_trainer(config(tmp_path / "a", steps=2))
    history = first.train()
    trained = {k: v.clone() for k, v in first.model.state_dict().items()}
    second = new_trainer(config(tmp_path / "b", steps=1, init_from=str(tmp_path / "a"), algorithm={"kl_coef": 0.1}))
    assert all(torch.equal(trained[k], v) for k, v in second.model.state_dict().items())
    assert all(torch.equal(trained[k], v) for k, v in second.learner.ref_model.state_dict().items())
    assert second.train()[0]["eval_success"] == history[-1]["eval_success"]  # step 0 is the first run's end
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        new_trainer(config(tmp_path / "c", init_from=str(tmp_path / "nowhere")))
    other = TrainConfig(
        model="tiny", env={"id": "tests/Upper-v0"}, init_from=str(tmp_path / "a"), out_dir=str(tmp_path / "d")
    )
    tok = tiny_tokenizer("chatml")
    with pytest.raises(ValueError, match="do not fit this model"):
        Trainer(other, model=tiny_model(tok, hidden=48), tokenizer=tok)
