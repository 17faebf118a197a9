"""The consistency guard (issue 66): every training step checks that it trains what the policy sampled. Each of the
three wrong-results bugs of the windowed path is put back in a real run of the tiny model, and the guard fires
within one step, naming what it saw; the same runs without the bug stay silent."""

import logging

import pytest
import torch
from pydantic import ValidationError
from tiny_trainer import opened, tiny_trainer
from toy_envs import UpperEnv, straddling_stop

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.run.guard import ConsistencyError, ConsistencyGuard, rollout_backend
from turnrl.rl.run.trainer import TrainConfig
from turnrl.rollout.engine import Rollout


class StopProbeEnv(UpperEnv):
    """UpperEnv whose stop strings a test sets (class attribute, read by the rollout)."""

    stop: tuple[str, ...] = ()


turnrl.register("tests/StopProbe-v0", StopProbeEnv)


def config(tmp_path, steps, algorithm, *, env="tests/Upper-v0", env_kwargs=None, rollout=None, optim=None, **extra):
    return TrainConfig(
        model="tiny",
        env={"id": env, "kwargs": env_kwargs or {}},
        algorithm=algorithm,
        rollout={"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 6, **(rollout or {})},
        optim={"lr": 1e-2, "minibatch_size": 8, **(optim or {})},
        steps=steps,
        eval_tasks=2,
        out_dir=str(tmp_path),
        save_trajectories=False,
        **extra,
    )


def train(cfg, model=None):
    with opened(tiny_trainer(cfg, model=model)) as trainer:
        return trainer.train()


def fired(history, check):
    """The steps (1-based) whose guard figure for ``check`` is non-zero."""
    return [int(h["step"]) for h in history[1:] if h.get(check, 0) > 0]


# ---- bug 2: KV caches that survive the learner's optimizer step ----

TPPO_WINDOWS = {"name": "tppo", "window": 3, "value_warmup_steps": 0}


def test_a_kv_cache_that_outlives_an_update_fires_the_logp_check(tmp_path, monkeypatch, caplog):
    clean = train(config(tmp_path / "clean", 3, TPPO_WINDOWS))
    assert not fired(clean, "guard_violations") and all(h["guard_logp_gap_max"] < 1e-3 for h in clean[1:])
    monkeypatch.setattr("turnrl.rl.core.learner.mark_weights_changed", lambda model: None)  # the bug, back
    with caplog.at_level(logging.WARNING, logger="turnrl.rl.run.guard"):
        broken = train(config(tmp_path / "broken", 3, TPPO_WINDOWS))
    # the first update that moved the weights (the first with a gradient: step 1's snapshots carry no advantage
    # yet); the next step's carried episodes resume on keys and values of the weights before it
    moved = next(int(h["step"]) for h in broken[1:] if h["grad_norm"] > 0)
    assert fired(broken, "guard_violations")[0] == moved + 1
    assert broken[moved + 1]["guard_logp_gap_max"] > 0.05
    warned = [r.getMessage() for r in caplog.records if "consistency check 'logp'" in r.getMessage()]
    assert len(warned) == 1 and "KV cache" in warned[0]  # once, with the likely causes


def test_a_strict_guard_stops_the_run_at_the_step_that_failed(tmp_path, monkeypatch):
    monkeypatch.setattr("turnrl.rl.core.learner.mark_weights_changed", lambda model: None)
    with pytest.raises(ConsistencyError, match="step 3: consistency check 'logp' failed"):
        train(config(tmp_path, 5, TPPO_WINDOWS, guard={"strict": True}))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4  # step 0 (evaluation), 1, 2 and 3 recorded; the run stopped after the step that failed


# ---- bug 1: quick finishers dropped as stale while they wait for their group ----

TPPO_FINISHED = {"name": "tppo", "window": 3, "value_warmup_steps": 0, "train_on": "finished"}
RETRY = {"retry": True, "max_turns": 3}  # a group's episodes finish windows apart
SHORT = {"max_new_tokens": 4}


def test_held_episodes_dropped_as_stale_fire_the_stale_and_group_checks(tmp_path, monkeypatch):
    from turnrl.rl.sources.base import ExperienceSource, oldest_version
    from turnrl.rl.sources.windowed import WindowedSource

    clean = train(config(tmp_path / "clean", 6, TPPO_FINISHED, env_kwargs=RETRY, rollout=SHORT))
    assert max(h.get("held_versions_max", 0) for h in clean[1:]) >= 1  # quick answers did wait across updates
    assert not fired(clean, "guard_violations")
    # the source's own measure of lag taken away: its held episodes look stale to the driver
    monkeypatch.setattr(WindowedSource, "lag", ExperienceSource.lag)
    broken = train(config(tmp_path / "whole", 6, TPPO_FINISHED, env_kwargs=RETRY, rollout=SHORT))
    first = fired(broken, "guard_stale_synchronous")
    assert first and first[0] == fired(broken, "stale_episodes")[0]  # the step it happened

    def per_episode(trajs, version, k, lag=None):  # the driver's old rule: episodes dropped one by one
        kept = [t for t in trajs if (v := oldest_version(t)) is None or version - v <= k]
        return kept, {"stale_episodes": float(len(trajs) - len(kept))}

    monkeypatch.setattr("turnrl.rl.run.driver.within_staleness", per_episode)
    old = train(config(tmp_path / "old", 6, TPPO_FINISHED, env_kwargs=RETRY, rollout=SHORT))
    assert (
        fired(old, "guard_partial_groups") and fired(old, "guard_partial_groups")[0] == fired(old, "stale_episodes")[0]
    )


# ---- bug 3: a stop string that straddles a window boundary ----


def probe_stop(model, tok):
    """The first turn the model plays greedily on task 0, a window length that ends inside it and a stop string
    across that boundary (two characters each side)."""
    rollout = Rollout(HFAgent(model, tok), SamplingParams(temperature=0.0, max_new_tokens=10))
    env = turnrl.make("tests/StopProbe-v0")
    traj = rollout.run([env], seeds=[0], options=[{"index": 0}])[0]
    s, e = traj.turns[0].token_span
    return straddling_stop(tok, traj.token_ids[s:e])


def test_a_stop_string_missed_across_windows_fires_the_stop_check(tmp_path, monkeypatch):
    tok = tiny_tokenizer("chatml")

    def model():
        m = tiny_model(tok, seed=1)
        with torch.no_grad():  # large random weights: varied greedy text
            for p in m.parameters():
                p.mul_(8)
        return m

    cut, stop = probe_stop(model(), tok)
    monkeypatch.setattr(StopProbeEnv, "stop", (stop,))
    # near-greedy sampling and a learning rate that leaves the weights as they were: the run replays that turn
    cfg = config(
        tmp_path / "clean",
        5,
        {"name": "tppo", "window": cut, "value_warmup_steps": 0},
        env="tests/StopProbe-v0",
        rollout={"prompts_per_step": 1, "group_size": 2, "max_new_tokens": 10, "temperature": 1e-4},
        optim={"lr": 1e-12},
    )
    clean = train(cfg, model())
    assert not fired(clean, "guard_violations")
    monkeypatch.setattr("turnrl.rollout.engine.stopped_across_pieces", lambda tok, before, c, stop: c)
    broken = train(cfg.model_copy(update={"out_dir": str(tmp_path / "broken")}), model())
    steps = fired(broken, "guard_past_stop_turns")
    assert steps and not fired(broken, "guard_token_mismatch")  # the turn's tokens were sampled; it ran on


# ---- the other checks, and bad input ----


def test_tokens_changed_after_sampling_and_tokens_without_versions_fire(tmp_path):
    cfg = config(tmp_path, 1, {"name": "grpo"})
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok)
    rollout = Rollout(agent, SamplingParams(max_new_tokens=4, seed=0), policy_version=0)
    trajs = rollout.run([turnrl.make("tests/Upper-v0") for _ in range(4)], group_ids=["g"] * 4)
    guard = ConsistencyGuard(cfg.guard, cfg.rollout, backend="hf", sampled=True, group_size=4)
    assert guard.check(1, trajs, trajs, {})[0]["guard_violations"] == 0
    edited = trajs[0].model_copy(deep=True)
    i = edited.loss_mask.index(1)
    edited.token_ids[i] = (edited.token_ids[i] + 1) % 50  # a token re-tokenized, say
    edited.token_versions[i] = -1
    figures, failed = guard.check(2, trajs, [edited, *trajs[1:]], {})
    assert figures["guard_token_mismatch"] == 1 and figures["guard_unversioned_tokens"] == 1
    assert any("'tokens'" in m for m in failed) and any("'versions'" in m for m in failed)
    figures, failed = guard.check(3, trajs, trajs[:3], {})  # a group trained without one of its episodes
    assert figures["guard_partial_groups"] == 1 and "g (3 of 4 collected)" in failed[0]


def test_with_top_p_only_the_learners_excess_counts():
    cfg = TrainConfig(
        model="tiny", env={"id": "tests/Upper-v0"}, rollout={"top_p": 0.9}, optim={"recompute_logprobs": True}
    )
    nucleus = ConsistencyGuard(cfg.guard, cfg.rollout, backend="hf", sampled=True)
    figures, failed = nucleus.check(
        1, [], [], {"lag0_tokens": 10, "logp_diff_lag0": 0.3, "lag0_gap_max": 1.2, "lag0_excess_max": 1e-6}
    )
    assert not failed and figures["guard_logp_gap"] == 0.3  # the nucleus's μ is above π: expected
    _, failed = nucleus.check(
        2, [], [], {"lag0_tokens": 10, "logp_diff_lag0": 0.3, "lag0_gap_max": 1.2, "lag0_excess_max": 0.5}
    )
    assert failed and "exceeds the rollout's by up to 0.5" in failed[0]


def test_bad_guard_settings_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        config(tmp_path, 1, {"name": "grpo"}, guard={"logp_tolerance": -1})
    with pytest.raises(ValidationError, match="guard.strict compares the policy's own samples.*drop guard.strict"):
        TrainConfig(
            model="tiny",
            env={"id": "tests/Upper-v0"},
            algorithm={"name": "sft"},
            data={"path": "x.jsonl"},
            guard={"strict": True},
        )
    with pytest.raises(ValidationError, match="guard.enabled is false"):
        config(tmp_path, 1, {"name": "grpo"}, guard={"strict": True, "enabled": False})
    vllm = TrainConfig(model="tiny", env={"id": "tests/Upper-v0"}, placement="ray", ray={"rollout_backend": "vllm"})
    cfg = config(tmp_path, 1, {"name": "grpo"})
    hf = ConsistencyGuard(cfg.guard, cfg.rollout, backend=rollout_backend(cfg.placement, cfg.ray), sampled=True)
    assert (hf.mean_tol, hf.max_tol) == (1e-3, 5e-2)
    on_vllm = ConsistencyGuard(
        vllm.guard, vllm.rollout, backend=rollout_backend(vllm.placement, vllm.ray), sampled=True
    )
    assert rollout_backend(vllm.placement, vllm.ray) == "vllm" and (on_vllm.mean_tol, on_vllm.max_tol) == (5e-2, None)


def test_the_train_command_says_a_strict_guards_failure_in_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from turnrl.cli import app

    monkeypatch.setattr("turnrl.rl.core.learner.mark_weights_changed", lambda model: None)
    path = tmp_path / "c.yaml"
    path.write_text(
        "model: tiny:chatml\nenv: {id: tests/Upper-v0}\n"
        "algorithm: {name: tppo, window: 3, value_warmup_steps: 0}\n"
        "rollout: {prompts_per_step: 4, group_size: 4, max_new_tokens: 6}\n"
        "optim: {lr: 0.01, minibatch_size: 8}\nsteps: 5\neval_tasks: 2\nsave_trajectories: false\n"
        f"out_dir: {tmp_path / 'run'}\nguard: {{strict: true}}\n"
    )
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code == 2, result.output
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "consistency check 'logp' failed" in error[0]
