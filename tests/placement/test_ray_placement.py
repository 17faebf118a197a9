"""The Ray placement on a real local Ray cluster (started by the module fixture, 2 CPUs) with a tiny model."""

import time
from types import SimpleNamespace

import pytest
import torch
from tiny_trainer import tiny_trainer as trainer
from toy_envs import assert_learns  # (importing it registers the toy environments)

from turnrl.rl.placement.ledger import Ledger
from turnrl.rl.placement.ray import RayPlacementError
from turnrl.rl.run.trainer import TrainConfig
from turnrl.rl.sources.base import Job
from turnrl.types import Trajectory

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def cluster(ray_cluster):
    """Every test of this module runs on the module's local Ray cluster (conftest's ray_cluster)."""
    return ray_cluster


def config(tmp_path, placement="ray", env="tests/Upper-v0", steps=3, **extra):
    data = {
        "model": "tiny",
        "env": {"id": env},
        "placement": placement,
        "rollout": {
            "prompts_per_step": 4,
            "group_size": 8,
            "max_new_tokens": 4,
            "seed_per_episode": True,
            **extra.pop("rollout", {}),
        },
        "optim": {"lr": 1e-2, "minibatch_size": 16},
        "steps": steps,
        "eval_tasks": 8,
        "out_dir": str(tmp_path),
        **extra,
    }
    if placement == "ray":
        data["ray"] = {"rollout_workers": 2, "start_timeout": 60, **data.get("ray", {})}
    return TrainConfig.model_validate(data)


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory):
    """One 30-step run on 2 rollout workers, which two tests below check: its history, and the weights it held after
    step 4 (the uninterrupted run that a resumed driver must reproduce)."""
    t = trainer(config(tmp_path_factory.mktemp("ray"), steps=30))
    at_step_4 = []

    def keep_weights(info):
        if info["step"] == 4:
            at_step_4.extend(p.detach().clone() for p in t.model.parameters())

    try:
        history = t.train(on_step=keep_weights)
    finally:
        t.close()
    assert len(at_step_4) == len(list(t.model.parameters()))
    return SimpleNamespace(history=history, params_at_step_4=at_step_4)


def test_two_workers_train_like_the_local_placement(ray_run, tmp_path):
    # the same config on the local placement, stopped after its first step (only that step is compared)
    local = trainer(config(tmp_path / "local", "local", steps=30)).train(stop_after=1)
    remote = ray_run.history
    for key in ("reward_mean", "success", "generated_tokens", "rollout_episodes", "zero_variance_groups"):
        assert remote[1][key] == local[1][key], key  # the first step: the same episodes, token for token
    for key in ("loss", "clip_frac", "entropy"):
        assert remote[1][key] == pytest.approx(local[1][key], rel=1e-4, abs=1e-6), key
    assert_learns(remote)
    assert remote[-1]["eval_success"] > remote[0]["eval_success"]
    assert all(h["logp_diff"] < 1e-4 for h in remote[1:])  # workers sample with the learner's current weights
    assert [h["policy_version"] for h in remote[1:]] == [float(s) for s in range(1, 31)]
    # rollout.max_staleness = 0 (the default) starts nothing ahead: no worker is handed the next step's episodes
    assert all(h["prefetched_episodes"] == 0 and h["staleness_max"] == 0 for h in remote[1:])


def test_a_worker_killed_mid_step_loses_and_repeats_nothing(tmp_path):
    t = trainer(config(tmp_path, env="tests/Slow-v0", steps=1))
    committed, killed = [], []

    def on_commit(traj, ledger):
        committed.append(traj.id)
        if len(committed) == 2:  # worker 1 plays tasks 2 and 3, which grade in 1 s and 1.5 s: still in flight
            killed.append(ledger.summary())
            ray.kill(t.runner.workers[1], no_restart=False)

    t.runner.on_commit = on_commit
    pid = ray.get(t.runner.workers[1].ready.remote())["pid"]
    try:
        trajs, info = t.source.collect(0)
        t.runner._await_ready([1], "checking")  # Ray may still be restarting it when the step is already done
        restarted = ray.get(t.runner.workers[1].ready.remote(), timeout=30)
    finally:
        t.close()
    assert killed and killed[0]["done"] == 2
    keys = [tr.metadata["job"] for tr in trajs]
    assert sorted(keys) == sorted(
        Job(0, 0, task, s).key
        for task in range(t.cfg.rollout.prompts_per_step)
        for s in range(t.cfg.rollout.group_size)
    )  # every job exactly once
    assert {tr.id for tr in trajs} >= set(committed[:2])  # what was committed before the kill is kept
    assert len(committed) == len(trajs) == 32 and info["worker_restarts"] >= 1
    assert all(tr.error is None and tr.token_ids for tr in trajs)
    assert restarted["pid"] != pid and restarted["version"] == 0  # a new process; weights come with its next lease


def test_a_hanging_environment_times_out_and_the_run_goes_on(tmp_path):
    t = trainer(config(tmp_path, env="tests/Hanging-v0", steps=2, rollout={"env_timeout": 1.0}))
    start = time.monotonic()
    try:
        history = t.train()
    finally:
        t.close()
    assert time.monotonic() - start < 60
    step = history[1]
    assert step["error_episodes"] == 8 and step["dropped_episodes"] == 8 and step["rollout_episodes"] == 32
    assert "loss" in step and len(history) == 3


def test_ray_workers_play_a_remote_environment_whose_hanging_step_the_server_cuts(tmp_path):
    """remote: ids on the Ray placement: the worker opens its own sessions; the server's step timeout ends the
    hanging episodes (task t0) with an error, and the run goes on. (One worker: the server, not the worker, cuts.)"""
    from turnrl.envs.remote.server import EnvServer

    with EnvServer(["tests/Hanging-v0"], port=0, step_timeout=1.0) as server:
        env = f"remote:http://127.0.0.1:{server.port}/tests/Hanging-v0"
        t = trainer(config(tmp_path, env=env, steps=2, ray={"rollout_workers": 1}))
        try:
            history = t.train()
        finally:
            t.close()
        assert server.served_sessions >= 2  # the worker's and the held-out evaluation's
    step = history[1]
    assert step["error_episodes"] == 8 and step["dropped_episodes"] == 8 and step["rollout_episodes"] == 32
    assert "loss" in step and len(history) == 3


def test_resumed_driver_reuses_committed_episodes_and_ends_with_the_same_weights(ray_run, tmp_path):
    # the same config as ray_run's uninterrupted run, checkpointed every 2 steps; compared after step 4. One rollout
    # worker: the same episodes as ray_run's two (rollout.seed_per_episode), two worker starts fewer per trainer
    one = {"checkpoint_every": 2, "ray": {"rollout_workers": 1}}
    part = trainer(config(tmp_path / "part", steps=30, **one))

    class DriverDied(Exception):
        pass

    def die(traj, ledger):
        if len(ledger.done) == 5:
            raise DriverDied

    try:
        part.train(stop_after=2)
        part.runner.on_commit = die  # the driver dies in step 3, five episodes into it
        with pytest.raises(DriverDied):
            part.train()
    finally:
        part.close()
    assert len((tmp_path / "part" / "ray" / "step-2.jsonl").read_text().splitlines()) == 5
    resumed = trainer(config(tmp_path / "part", steps=30, **one))
    try:
        resumed.load(tmp_path / "part" / "checkpoint.pt")
        assert resumed.step == 2
        history = resumed.train(stop_after=2)
    finally:
        resumed.close()
    assert len(history) == 5 and history[-1]["step"] == 4
    assert history[3]["reused_episodes"] == 5 and history[3]["rollout_episodes"] == 32
    for a, b in zip(ray_run.params_at_step_4, resumed.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_bad_placements_fail_fast_with_what_to_change(tmp_path):
    start = time.monotonic()
    with pytest.raises(RayPlacementError, match="cannot reach a Ray cluster at ray.address='127.0.0.1:1'"):
        trainer(config(tmp_path, ray={"address": "127.0.0.1:1"}))
    assert time.monotonic() - start < 10
    with pytest.raises(RayPlacementError, match="lower ray.rollout_workers"):
        trainer(config(tmp_path, ray={"rollout_workers": 5, "worker_cpus": 1.0}))
    start = time.monotonic()
    with pytest.raises(RayPlacementError, match="died while starting.*not available on the worker"):
        trainer(config(tmp_path, env="tests/WorkerHostile-v0", ray={"rollout_workers": 1}))
    assert time.monotonic() - start < 60
    with pytest.raises(ValueError, match="workers"):
        config(tmp_path, ray={"workers": 2})
    with pytest.raises(ValueError, match="placement is 'local'"):
        TrainConfig.model_validate({"env": {"id": "tests/Upper-v0"}, "ray": {"rollout_workers": 2}})


def test_ledger_commits_each_job_once_and_refuses_stale_leases():
    jobs = [Job(0, 0, t, s) for t in range(2) for s in range(2)]
    ledger = Ledger(jobs)
    a, mine = ledger.lease(3)
    b, theirs = ledger.lease(3)
    assert len(mine) == 3 and len(theirs) == 1
    traj = Trajectory()
    assert ledger.commit(mine[0].key, a, traj)
    assert not ledger.commit(mine[0].key, a, traj)  # twice
    assert ledger.release(a) == mine[1:]  # the dead worker's unfinished jobs go back
    c, again = ledger.lease(4)
    assert again == mine[1:]
    assert not ledger.commit(mine[1].key, a, traj)  # a commit under the released lease is refused
    assert ledger.commit(mine[1].key, c, traj) and ledger.commit(mine[2].key, c, traj)
    keys = [j.key for j in jobs]
    assert not ledger.settled(keys) and ledger.commit(theirs[0].key, b, traj) and ledger.settled(keys)
    assert ledger.refused == 2 and ledger.take(keys) == [traj] * 4
    assert not ledger.commit(theirs[0].key, b, traj) and ledger.refused == 3  # taken: a late commit is refused


def test_the_ledgers_books_count_replays_and_would_show_a_job_lost_or_trained_twice():
    """The books a node-loss run's metrics report (episodes_replayed, ledger_lost, ledger_duplicated): a lost lease's
    unfinished jobs count as replayed; a job handed to training a second time (played again after it was taken) is
    refused and counted; a job asked for but never done is counted lost."""
    jobs = [Job(0, 0, 0, s) for s in range(3)]
    ledger = Ledger(jobs)
    a, mine = ledger.lease(3)
    assert ledger.commit(mine[0].key, a, Trajectory())
    assert ledger.release(a, lost=True) == mine[1:]  # its worker's node died: 2 jobs play again
    b, again = ledger.lease(3)
    assert all(ledger.commit(j.key, b, Trajectory()) for j in again)
    assert len(ledger.take([j.key for j in jobs])) == 3
    ledger.add(jobs[:1])  # the same job once more (a bug upstream): played and committed again
    c, _ = ledger.lease(1)
    assert ledger.commit(jobs[0].key, c, Trajectory())
    assert ledger.take([jobs[0].key]) == [] and ledger.take([Job(0, 0, 1, 0).key]) == []
    assert ledger.book() == {"collected": 4, "replayed": 2, "handed": 3, "lost": 1, "duplicated": 1, "refused": 0}


PROBE = [[1, 5, 9, 13, 2, 7], [3, 4, 4, 8]]


def test_lora_workers_receive_only_the_adapter_and_sample_with_each_new_one(tmp_path):
    """The stale-adapter failure users report (the rollout engine keeps sampling with an old adapter): after every
    update each worker scores a fixed sequence exactly as the learner does, and what it was sent is the adapter
    alone, with its version."""
    from test_lora import LEARNING_TARGETS, untied_tiny

    from turnrl.rl.core.forward import sequence_logprobs

    # one worker: what each worker holds is checked alone, and its restart below
    lora = {"lora": {"r": 8, "target_modules": LEARNING_TARGETS}}
    cfg = config(tmp_path, steps=4, learner=lora, ray={"rollout_workers": 1})
    t = trainer(cfg, model=untied_tiny())
    seen = []

    def check(info):
        version = t.runner.sync()
        sent = ray.get(t.runner.pushed[1], timeout=30)
        held = [ray.get(w.score.remote(PROBE), timeout=30) for w in t.runner.workers]
        seen.append((info["step"], version, sequence_logprobs(t.model, PROBE), held, sent))

    try:
        history = t.train(on_step=check)
        # a worker that restarts starts over from the first adapters (version 0) and must take the current ones
        worker = t.runner.workers[0]
        old = ray.get(worker.ready.remote(), timeout=30)["pid"]
        ray.kill(worker, no_restart=False)
        deadline = time.monotonic() + 60
        while True:  # until Ray has restarted it (calls meanwhile find it unavailable)
            try:
                if ray.get(worker.ready.remote(), timeout=30)["pid"] != old:
                    break
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError):
                pass
            assert time.monotonic() < deadline, "the worker was not restarted"
            time.sleep(0.2)
        t.runner._await_ready([0], "restarting")  # what the runner does for a worker back: hand it the policy
        assert ray.get(worker.ready.remote(), timeout=60)["version"] == 0
        assert t.runner.sync() == 4
        restarted = ray.get(t.runner.workers[0].score.remote(PROBE), timeout=30)
    finally:
        t.close()
    assert restarted[0] == 4
    for a, b in zip(restarted[1], seen[-1][2]):
        assert a == pytest.approx(b, abs=1e-5)
    full = sum(p.numel() for n, p in t.model.named_parameters() if "lora_" not in n)
    assert [s[:2] for s in seen] == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
    for _, version, want, held, sent in seen:
        assert sent and all(".lora_A." in k or ".lora_B." in k for k in sent)  # adapters only
        assert sum(array.size for array, _ in sent.values()) < full / 4
        for worker_version, got in held:
            assert worker_version == version
            for a, b in zip(got, want):
                assert a == pytest.approx(b, abs=1e-5)
    moved = max(abs(a - b) for a, b in zip(seen[0][2][0], seen[-1][2][0]))
    assert moved > 1e-2  # the adapters moved: matching them was not trivial
    assert all(h["logp_diff"] < 1e-4 for h in history[1:])  # every episode was sampled with the current adapter


def test_train_command_runs_a_config_on_ray_workers(tmp_path):
    """`turnrl train CONFIG placement=ray ray.rollout_workers=2`, as the README says (a tiny model for speed)."""
    from typer.testing import CliRunner

    from turnrl.cli import app

    cfg = tmp_path / "toy.yaml"
    cfg.write_text(
        f"model: 'tiny:chatml'\nenv: {{id: tests/Upper-v0}}\nrollout: {{prompts_per_step: 2, "
        f"group_size: 4, max_new_tokens: 4}}\nsteps: 2\neval_tasks: 4\nout_dir: {tmp_path / 'run'}\n"
    )
    result = CliRunner().invoke(app, ["train", str(cfg), "placement=ray", "ray.rollout_workers=2"])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 and '"worker_restarts": 0.0' in lines[1] and '"policy_version": 1.0' in lines[1]
    assert (
        list((tmp_path / "run" / "ray").iterdir()) == []
    )  # the journals of trained steps are pruned at the checkpoint
    result = CliRunner().invoke(app, ["train", str(cfg), "placement=ray", "ray.rollout_wokers=2"])
    assert result.exit_code == 2 and "rollout_wokers" in result.output


def test_every_turn_of_an_episode_runs_on_its_worker_which_keeps_its_kv_cache(tmp_path):
    """Sticky sessions: a worker plays whole episodes, so each turn after the first finds the episode's KV cache on
    the worker that served the turn before (one `new`, then only `hit`s)."""
    cfg = config(tmp_path, env="turnrl/Arithmetic-v0", steps=1, rollout={"max_new_tokens": 6})
    cfg.env.kwargs.update(calculator=True, retry=True, max_turns=3)
    t = trainer(cfg)
    try:
        pids = {ray.get(w.ready.remote())["pid"] for w in t.runner.workers}
        trajs, info = t.source.collect(0)
    finally:
        t.close()
    assert {tr.metadata["worker"] for tr in trajs} <= pids
    assert all(tr.num_turns == 3 for tr in trajs)
    for tr in trajs:
        assert tr.metadata["kv_events"] == {"new": 1, "hit": 2}
    assert info["cache_hit_share"] > 0.5 and info["kv_evicted"] == 0


def test_tppo_on_ray_continues_each_unfinished_episode_on_its_own_worker(tmp_path):
    cfg = config(
        tmp_path, steps=4, algorithm={"name": "tppo", "window": 2, "value_warmup_steps": 1}, save_trajectories=True
    )
    t = trainer(cfg)
    try:
        history = t.train()
    finally:
        t.close()
    assert sum(h["carried_episodes"] for h in history[1:]) > 0 and all(h["lost_episodes"] == 0 for h in history[1:])
    assert all(h.get("staleness_max", 0) == 0 for h in history[1:])  # every window under the current weights
    from turnrl.storage import read_jsonl

    workers: dict[str, set[int]] = {}
    trained: dict[str, list[int]] = {}
    for step in range(1, 5):
        for tr in read_jsonl(tmp_path / "train" / f"step-{step}" / "trajectories.jsonl"):
            job = tr.metadata["job"]
            workers.setdefault(job, set()).add(tr.metadata["worker"])
            start = tr.metadata.get("window_start", 0)
            trained.setdefault(job, []).extend(i for i, m in enumerate(tr.loss_mask) if m and i >= start)
    assert any(len(p) > 2 for p in trained.values())  # episodes that spanned windows
    assert all(len(w) == 1 for w in workers.values())  # one worker per episode, window after window
    assert all(p == sorted(set(p)) for p in trained.values())  # every generated token trained once, in order


def test_tppo_on_ray_plays_the_episodes_of_a_killed_worker_again_and_trains_none_twice(tmp_path):
    cfg = config(tmp_path, steps=4, algorithm={"name": "tppo", "window": 1, "train_on": "finished"})
    t = trainer(cfg)
    try:
        first, _ = t.source.collect(0)
        held = {j.key for j in t.source.carry if t.source.player.owner[j.key] == 1}
        assert held  # worker 1 holds unfinished episodes
        ray.kill(t.runner.workers[1], no_restart=False)
        second, info = t.source.collect(1)
        lost = {j.key for j in t.source.replay}
        third, again = t.source.collect(2)
        waiting = {j.key for j in t.source.carry + t.source.replay}
        waiting |= {tr.metadata["job"] for group in t.source.waiting.values() for tr in group}
    finally:
        t.close()
    # its episodes in play are lost (and, had the call reached the dead process, the new jobs it was given)
    assert held <= lost and info["lost_episodes"] == len(lost) and info["worker_restarts"] >= 1
    assert again["regenerated_episodes"] > 0
    keys = [tr.metadata["job"] for tr in first + second + third]
    assert len(keys) == len(set(keys))  # no finished episode twice
    assert not lost & {tr.metadata["job"] for tr in second}  # nothing of a lost episode is trained
    assert lost <= waiting | {tr.metadata["job"] for tr in third}  # each plays again from the start (or finished)
    assert all(not tr.metadata.get("partial") for tr in first + second + third)


def test_tppo_on_ray_with_refill_prompts_and_min_groups_trains_whole_groups_once(tmp_path):
    """``refill: prompts`` on Ray: every step hands the worker a full set of new groups beside the carried episodes,
    and ``min_groups`` holds finished groups until enough are ready; each episode still trains once, whole. (One
    worker: which worker continues an episode is the test above's.)"""
    cfg = config(
        tmp_path,
        steps=4,
        save_trajectories=True,
        ray={"rollout_workers": 1},
        algorithm={
            "name": "tppo",
            "window": 1,
            "value_warmup_steps": 0,
            "train_on": "finished",
            "min_groups": 2,
            "refill": "prompts",
        },
    )
    t = trainer(cfg)
    try:
        history = t.train()
    finally:
        t.close()
    steps = [h for h in history if "new_episodes" in h]
    assert len(steps) == 4 and all(h["new_episodes"] == 32 for h in steps)  # 4 prompts × 8, whatever carries
    assert sum(h["carried_episodes"] for h in steps[:-1]) > 0 and all(h["lost_episodes"] == 0 for h in steps)
    from turnrl.storage import read_jsonl

    seen: list[str] = []
    trained = 0
    for step in range(1, 5):
        path = tmp_path / "train" / f"step-{step}" / "trajectories.jsonl"
        groups: dict[str, int] = {}
        for tr in read_jsonl(path) if path.exists() else []:
            assert not tr.metadata.get("partial")
            groups[tr.group_id] = groups.get(tr.group_id, 0) + 1
            seen.append(tr.metadata["job"])
        # a step that held its few finished groups trained nothing; an update holds min_groups whole groups or more,
        # but the first policy update takes whatever is ready
        assert not groups or ((len(groups) >= 2 or trained == 0) and all(n == 8 for n in groups.values()))
        trained += bool(groups)
    assert seen and len(seen) == len(set(seen))  # no episode trained twice


def test_trees_grow_on_ray_workers_as_they_grow_locally(tmp_path):
    """Issue 79: a tree stays on one worker and its leaves are committed together; with each episode's own sampling
    stream, the first step's leaves are the local placement's, token for token. On LoRA (the full-weight case on Ray
    is tests/rl/test_async.py's stale-trees test): the second step's trees grow on the workers from the adapters the
    first update sent them, which the guard checks token by token."""
    from turnrl.storage import read_jsonl

    runs = {}
    for placement in ("ray", "local"):
        data = {
            "model": "tiny",
            "env": {"id": "tests/Upper-v0", "kwargs": {"retry": True, "max_turns": 3}},  # rewards that differ
            "placement": placement,
            "algorithm": {"name": "grpo", "advantage": "tree"},
            "rollout": {
                "prompts_per_step": 2,
                "group_size": 4,
                "max_new_tokens": 4,
                "seed_per_episode": True,
                "tree": {"branches": [{"turn": 1, "children": 2}]},
            },
            "optim": {"lr": 1e-2, "minibatch_size": 8},
            "learner": {"lora": {"r": 4, "target_modules": ["q_proj", "v_proj", "up_proj"]}},
            "steps": 2,
            "eval_every": 0,
            "eval_tasks": 2,
            "out_dir": str(tmp_path / placement),
        }
        if placement == "ray":
            data["ray"] = {"rollout_workers": 2, "start_timeout": 60}
        t = trainer(TrainConfig.model_validate(data))
        try:
            runs[placement] = [h for h in t.train() if "trained_episodes" in h]
        finally:
            t.close()
    leaves = {p: read_jsonl(tmp_path / p / "train" / "step-1" / "trajectories.jsonl") for p in runs}
    assert runs["ray"][0]["trained_episodes"] == runs["local"][0]["trained_episodes"] == len(leaves["ray"])
    assert [t.token_ids for t in leaves["ray"]] == [t.token_ids for t in leaves["local"]]
    assert [t.metadata["tree"]["path"] for t in leaves["ray"]] == [t.metadata["tree"]["path"] for t in leaves["local"]]
    assert runs["ray"][0]["loss"] == pytest.approx(runs["local"][0]["loss"], rel=1e-4, abs=1e-6)
    by_root: dict[str, set] = {}
    for t in leaves["ray"]:
        by_root.setdefault(t.metadata["tree"]["root"], set()).add(t.metadata["worker"])
    assert len(by_root) == 4 and all(len(w) == 1 for w in by_root.values())  # each tree grew on one worker
    assert len(leaves["ray"]) > 4  # (a tree whose episode ended at turn 1 is one leaf; most branched)
    # the first update moved the adapters, and the second step's trees grew from them on the workers
    assert runs["ray"][0]["grad_norm"] > 0
    second = read_jsonl(tmp_path / "ray" / "train" / "step-2" / "trajectories.jsonl")
    assert second and all(t.metadata["policy_version"] == [1, 1] for t in second)
    for step in runs["ray"]:
        assert step["guard_violations"] == 0 and step["logp_diff"] < 1e-4


def test_a_journaled_episode_that_ended_in_an_error_is_played_again_not_reused(tmp_path):
    """A restarted driver reuses the episodes its journal committed, except those that ended in an error: a run stopped
    because every episode failed, then resumed once the cause is fixed, must not train on the old failures."""
    from turnrl.rl.placement.ray import RayRunner
    from turnrl.storage import write_jsonl

    jobs = [Job(1, 0, 0, 0), Job(1, 0, 0, 1)]
    ok = Trajectory(metadata={"job": jobs[0].key, "policy_version": [3, 3]})
    failed = Trajectory(metadata={"job": jobs[1].key, "policy_version": [3, None]}, error="env step failed: down")
    write_jsonl([ok, failed], tmp_path / "step-1.jsonl")
    runner = SimpleNamespace(
        journal=tmp_path, learner=SimpleNamespace(version=3), cfg=config(tmp_path, placement="local")
    )
    reused = RayRunner._journaled(runner, jobs)
    assert [t.metadata["job"] for t in reused] == [jobs[0].key]


def test_a_run_without_ray_address_starts_a_cluster_of_its_own_whatever_ray_address_says(monkeypatch):
    """Ray's ``ray.init()`` without an address joins what RAY_ADDRESS or the last ``ray start`` on the machine
    names: a run that should start its own cluster then trains on someone else's (on CI, a test saw another cluster's
    CPUs and did not refuse 5 workers). Last in the module: it replaces the module's cluster with one of 1 CPU."""
    from turnrl.rl.placement.cluster import connect, stop

    ray.shutdown()
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing answers there: joining it would fail
    try:
        assert connect(None, 1, 5.0)
        assert ray.cluster_resources()["CPU"] == 1
    finally:
        stop([], True)
    assert not ray.is_initialized()
