"""Games with several agents on Ray rollout workers (a real local Ray cluster of 2 CPUs, a tiny model): the same games
as on the local placement, each game's trained views committed together exactly once, a killed worker's games played
again and none twice."""

import pytest
from tiny_trainer import tiny_trainer as trainer

from turnrl.rl.placement.ledger import Ledger
from turnrl.rl.run.trainer import TrainConfig
from turnrl.rl.sources.base import Job
from turnrl.types import Trajectory

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", autouse=True)
def cluster(ray_cluster):
    return ray_cluster


def config(out, placement="ray", **over):
    data = {
        "model": "tiny",
        "env": {"id": "turnrl/TicTacToe-v0"},
        "placement": placement,
        "rollout": {
            "prompts_per_step": 4,
            "group_size": 2,
            "max_new_tokens": 6,
            "max_context": 1024,
            "temperature": 1.5,
            "seed_per_episode": True,
        },
        "steps": 1,
        "eval_tasks": 2,
        "out_dir": str(out),
        "seed": 1,
        **over,
    }
    if placement == "ray":
        data.setdefault("ray", {"rollout_workers": 2, "start_timeout": 180})
    return TrainConfig.model_validate(data)


def by_view(trajs):
    return {(t.metadata["job"], t.metadata["seat"]): t for t in trajs}


def test_ray_workers_play_the_games_the_local_placement_plays_and_a_killed_worker_loses_and_repeats_none(tmp_path):
    """Step 0's games collected on both placements: the same games, token for token, from both workers. Then the run
    trains that step with worker 1 killed as soon as it holds its lease: its games are played again, every game once
    and whole (both seats), and the step trains with the guard silent (one run of 2 workers for both checks). Killed
    at the first game committed instead, the other worker had once played out its lease already, in a suite run (a
    tiny model's games end within milliseconds of each other), so worker 1 now dies before it commits anything: a
    lease cut after some of its episodes were committed, and those kept, is test_ray_placement's worker-kill test
    (single-agent; a game's seats committed together once: test_a_games_views_are_committed_together_once)."""
    local = trainer(config(tmp_path / "local", "local"))
    here, _ = local.source.collect(0)
    remote = trainer(config(tmp_path / "ray"))
    commits, killed, trained = [], [], []

    def on_commit(traj, ledger):
        commits.append((traj.metadata["job"], traj.metadata["seat"]))

    dispatch = remote.runner._dispatch

    def dispatch_then_kill(step=None):  # the step's leases handed out: worker 1 dies holding its own
        dispatch(step)
        if not killed and any(w == 1 for w, _lease in remote.runner.streams.values()):
            killed.append(1)
            ray.kill(remote.runner.workers[1], no_restart=False)

    collect = remote.source.collect

    def collect_and_keep(step):  # the trained step's collection, its worker 1 killed
        remote.runner._dispatch = dispatch_then_kill
        try:
            trained.append(collect(step))
        finally:
            remote.runner._dispatch = dispatch
        return trained[-1]

    try:
        there, _info = remote.source.collect(0)
        remote.runner.on_commit = on_commit
        remote.source.collect = collect_and_keep
        history = remote.train()
    finally:
        remote.close()
    a, b = by_view(here), by_view(there)
    assert len(a) == 16 and set(a) == set(b)  # 8 games × both seats
    for key, t in a.items():  # the same game, token for token, from either placement
        assert b[key].token_ids == t.token_ids and b[key].metadata["outcome"] == t.metadata["outcome"], key
    assert {t.metadata["worker"] for t in there} and len({t.metadata["worker"] for t in there}) == 2
    assert killed and len(trained) == 1
    trajs, info = trained[0]
    views = [(tr.metadata["job"], tr.metadata["seat"]) for tr in trajs]
    tasks = {Job.parse(j).task for j, _ in views}  # the source's next 4 tasks (the first collect took 0-3): each game
    # once and whole (both seats)
    jobs = {Job(0, 0, task, s).key for task in tasks for s in range(2)}
    assert tasks == set(range(4, 8)) and len(views) == len(set(views)) == 16 and {j for j, _ in views} == jobs
    assert len(commits) == len(set(commits)) == 16  # nothing committed twice
    assert all(tr.error is None for tr in trajs) and info["worker_restarts"] >= 1
    assert history[1]["episodes_replayed"] >= 1 and history[1]["ledger_lost"] == history[1]["ledger_duplicated"] == 0
    assert history[1]["guard_violations"] == 0 and history[1]["logp_diff_max"] < 1e-4
    assert {"seat_x_win", "seat_o_loss", "win_rate"} <= set(history[1])


def test_a_games_views_are_committed_together_once():
    jobs = [Job(0, 0, 0, s) for s in range(2)]
    ledger = Ledger(jobs)
    lease, mine = ledger.lease(2)
    game = [Trajectory(metadata={"job": mine[0].key, "seat": s}) for s in ("x", "o")]
    assert ledger.commit(mine[0].key, lease, game) and not ledger.commit(mine[0].key, lease, game[:1])
    assert not ledger.settled([j.key for j in jobs])
    assert ledger.restore([Trajectory(metadata={"job": mine[1].key, "seat": s}) for s in ("x", "o")]) == 1
    out = ledger.take([j.key for j in jobs])
    assert [(t.metadata["job"], t.metadata["seat"]) for t in out] == [(j.key, s) for j in jobs for s in ("x", "o")]


def test_a_league_on_ray_workers_plays_the_version_the_driver_drew(tmp_path):
    from turnrl.rl.config import LeagueConfig

    league = {"size": 4, "every": 1, "latest": 0.0}
    seed = next(k for k in range(50) if _draws_first(LeagueConfig(**league), k))  # step 1 plays v0, not the current
    # weights: a worker that played its own weights instead of the snapshot would show
    over = {"seed": seed, "steps": 2, "multi_agent": {"opponent": "league", "league": league}}
    local = trainer(config(tmp_path / "local", "local", **over))
    local.train(stop_after=1)
    here, _ = local.source.collect(1)
    remote = trainer(config(tmp_path / "ray", ray={"rollout_workers": 1, "start_timeout": 180}, **over))
    try:
        remote.train(stop_after=1)
        there, info = remote.source.collect(1)
        state = remote.source.state_dict()
    finally:
        remote.close()
    assert {t.metadata["opponent"] for t in there} == {"league:v0"} and info["league_size"] == 2.0
    a, b = by_view(here), by_view(there)
    assert len(a) == 8 and set(a) == set(b)  # one trained seat per game against a past version
    for key, t in a.items():  # the workers played the snapshot the driver drew, as this process does
        assert b[key].token_ids == t.token_ids, key
    assert [v for v, _ in state["opponents"]["league"]["pool"]] == [0, 1]  # the driver's league, checkpointed


def _draws_first(cfg, seed):
    from turnrl.rl.sources.league import League

    league = League(cfg, seed)
    league.pool = [(0, {}), (1, {})]
    return league.draw(1) == 0


def test_separate_lora_policies_train_on_ray_workers_each_with_its_own_adapters(tmp_path):
    """Two LoRA policies (x and o) on two Ray workers: every seat's tokens scored by its own policy's learner match
    what the worker sampled, also after the first update has made the adapters differ (a worker that sampled a seat
    with the other policy's adapters would show a gap of ~1e-1, not ~1e-6), and each policy keeps its own version."""
    ma = {"policies": {"X": {"seats": ["x"]}, "O": {"seats": ["o"]}}}
    t = trainer(
        config(
            tmp_path,
            steps=2,
            multi_agent=ma,
            optim={"lr": 0.05},
            learner={"lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]}},
        )
    )
    try:
        history = t.train()
        workers = {w["pid"] for w in ray.get([w.ready.remote() for w in t.runner.workers], timeout=60)}
        adapters = [
            {n: p.detach().clone() for n, p in t.policies[name].model.named_parameters() if "lora_B" in n}
            for name in ("X", "O")
        ]
    finally:
        t.close()
    assert len(workers) == 2
    for step in history[1:]:
        assert step["guard_violations"] == 0
        assert step["X/logp_diff_max"] < 1e-4 and step["O/logp_diff_max"] < 1e-4, step
    assert history[-1]["X/policy_version"] == history[-1]["O/policy_version"] == 2
    assert any((adapters[0][n] - adapters[1][n]).abs().max() > 1e-3 for n in adapters[0])  # a swap would show
