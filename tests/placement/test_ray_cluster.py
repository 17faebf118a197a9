"""A Ray cluster the trainer did not start (docs/cluster.md): a head and two worker nodes of Ray's own
``cluster_utils.Cluster`` — separate raylets, each on its own loopback address and in its own temporary folder, one
node with a ``rollout`` resource and one with a ``learner`` resource, Ray's token authentication on — which runs join
through ``ray.address`` as a user's would. Workers and ranks go to the nodes their resources name, a request no node
can hold is refused at once, a user's module that lives only in a project folder is shipped to the nodes, and a
module a node lacks is named with the node before the first step. Nodes lost mid-run — a rollout node (its leases
replayed, every episode trained once, a worker coming back on a node that joins later with the current weights), a
learner rank's node (a clear error, then a resume equal to the uninterrupted run) and the head (the driver exits with
a clear error, within seconds) — are added to the module's cluster and removed with ``allow_graceful=False`` (their
raylet and every worker on them killed); the head's loss comes last, as it ends the cluster.
``scripts/ray_cluster_demo.sh`` does the same with real ``ray start`` processes."""

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from tiny_trainer import tiny_trainer as trainer

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.placement.cluster import LOCAL_SYSTEM_CONFIG
from turnrl.rl.placement.learner_group import LearnerGroupError
from turnrl.rl.placement.nodes import summary
from turnrl.rl.placement.ray import RayPlacementError
from turnrl.rl.run.trainer import TrainConfig
from turnrl.rl.sources.base import Job
from turnrl.storage import read_jsonl

ray = pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[2]
AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@pytest.fixture(scope="module")
def cluster():
    """Head (127.0.0.2, 1 CPU), node A (127.0.0.3, 2 CPUs, {rollout: 2}), node B (127.0.0.4, 1 CPU, {learner: 1}).

    Loopback addresses other than 127.0.0.1, which Ray on Linux replaces by the machine's own interface address.
    The token is this module's own (RAY_AUTH_TOKEN in this process, inherited by the nodes it starts); the cluster's
    address is kept out of /tmp/ray/ray_current_cluster, so that no other process's ``ray.init()`` joins it. Ray's
    health checks run every second (3 missed: a node is dead), so that a node killed by a test is known lost within
    seconds rather than Ray's default half minute."""
    from ray._private.authentication_test_utils import reset_auth_token_state
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # an earlier module's local cluster
        ray.shutdown()
    saved = {k: os.environ.get(k) for k in AUTH}
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    reset_auth_token_state()
    temp = Path(tempfile.mkdtemp(prefix="trc", dir="/tmp"))  # short: Ray's socket paths live under it
    nodes = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ray._private.utils, "write_ray_address", lambda *a, **k: None)
        c = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "node_ip_address": "127.0.0.2",
                "temp_dir": str(temp / "head"),
                "include_dashboard": False,
                "_system_config": {
                    "health_check_period_ms": 1000,
                    "health_check_timeout_ms": 1500,
                    "health_check_failure_threshold": 3,
                    **LOCAL_SYSTEM_CONFIG,  # as turnrl's own local cluster (cluster.connect)
                },
            },
        )
        try:
            nodes["a"] = c.add_node(
                num_cpus=2, resources={"rollout": 2}, node_ip_address="127.0.0.3", temp_dir=str(temp / "a")
            )
            nodes["b"] = c.add_node(
                num_cpus=1, resources={"learner": 1}, node_ip_address="127.0.0.4", temp_dir=str(temp / "b")
            )
            c.wait_for_nodes(timeout=120)
            c.ids = {k: n.node_id for k, n in nodes.items()}
            c.temp = temp
            yield c
        finally:
            if ray.is_initialized():
                ray.shutdown()
            c.shutdown()  # (the nodes left: the head's loss, tested last, leaves the worker nodes)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            reset_auth_token_state()
            shutil.rmtree(temp, ignore_errors=True)


def config(cluster, tmp_path, env="turnrl/Arithmetic-v0", steps=1, ray_opts=None, **extra):
    kwargs = {"level": 1} if env == "turnrl/Arithmetic-v0" else {}
    return TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": env, "kwargs": kwargs},
            "placement": "ray",
            "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4, "seed_per_episode": True},
            "optim": {"lr": 1e-2, "minibatch_size": 8},
            "steps": steps,
            "eval_tasks": 2,
            "out_dir": str(tmp_path),
            "ray": {
                "address": cluster.address,
                "rollout_workers": 2,
                "worker_resources": {"rollout": 1},
                "start_timeout": 120,
                "placement_timeout": 2,
                **(ray_opts or {}),
            },
            **extra,
        }
    )


def add_node(cluster, name, ip, **resources):
    """A worker node of 1 CPU on ``ip`` offering ``resources``, once the cluster lists it."""
    node = cluster.add_node(num_cpus=1, resources=resources, node_ip_address=ip, temp_dir=str(cluster.temp / name))
    cluster.wait_for_nodes(timeout=60)
    return node


def node_of(cluster, node_id):
    return next(n for n in cluster.worker_nodes if n.node_id == node_id)


def kill_node(cluster, node):
    """Kill a worker node as a machine dies: its raylet (with the node's other Ray processes) and, at once, every
    worker process it started — left alone, a worker outlives its raylet by a second or so and may finish a lease."""
    import psutil

    workers = psutil.Process(node.all_processes["raylet"][0].process.pid).children(recursive=True)
    assert workers, "no worker process on the node"
    cluster.remove_node(node, allow_graceful=False)
    for p in workers:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def ds_config(cluster, out, rank_resources, workers=2):
    """Two steps of GRPO with one DeepSpeed rank on the node ``rank_resources`` names, checkpointed every step."""
    return config(
        cluster,
        out,
        steps=2,
        checkpoint_every=1,
        save_trajectories=True,
        ray_opts={"rollout_workers": workers},
        learner={"backend": "deepspeed", "ranks": 1, "rank_resources": rank_resources, "timeout": 120},
    )


@pytest.fixture(scope="module")
def ds_run(cluster, tmp_path_factory):
    """The uninterrupted run: rollout workers on node A, the rank on node B (the learner-node loss resumes to it)."""
    pytest.importorskip("deepspeed")
    out = tmp_path_factory.mktemp("ds")
    t = trainer(ds_config(cluster, out, {"learner": 1}))
    try:
        history = t.train()
    finally:
        t.close()
    return SimpleNamespace(history=history, out=out)


def write_module(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    return folder


USER_ENV = """
    import turnrl
    from turnrl.envs import Task, ToolEnv
    from turnrl.verifiers.base import Verdict
    {imports}

    def starts_upper(text, ref):
        ok = text.strip()[:1].isupper()
        return Verdict(correct=ok, score=float(ok))

    class UpperEnv(ToolEnv):
        def __init__(self, **kw):
            super().__init__([Task(id=f"t{{i}}", prompt=f"Say something {{i}}.", answer="") for i in range(8)],
                             verifier=starts_upper, **kw)

    turnrl.register("{name}/Upper-v0", "{name}:UpperEnv")
"""


def test_workers_and_ranks_go_to_the_nodes_their_resources_name(cluster, ds_run):
    history = ds_run.history
    assert len(history) == 3 and "loss" in history[1] and history[1]["rollout_episodes"] == 8
    placed = json.loads((ds_run.out / "placement.json").read_text())
    assert {n["node_id"] for n in placed["nodes"]} == {cluster.head_node.node_id, *cluster.ids.values()}
    workers, ranks = placed["rollout_workers"], placed["learner_ranks"]
    assert [w["node_id"] for w in workers] == [cluster.ids["a"]] * 2
    assert [w["node_ip"] for w in workers] == ["127.0.0.3"] * 2 and len({w["pid"] for w in workers}) == 2
    assert workers[0]["asks"] == {"CPU": 0.5, "rollout": 1}
    assert [r["node_id"] for r in ranks] == [cluster.ids["b"]] and ranks[0]["node_ip"] == "127.0.0.4"
    assert ranks[0]["asks"] == {"CPU": 0.5, "learner": 1}
    # the lines `turnrl train` prints from it: every worker and rank, each with its node
    lines = summary(ds_run.out)
    assert [line.split(", pid")[0] for line in lines] == [
        f"rollout worker 0: node 127.0.0.3 ({cluster.ids['a'][:8]})",
        f"rollout worker 1: node 127.0.0.3 ({cluster.ids['a'][:8]})",
        f"learner rank 0: node 127.0.0.4 ({cluster.ids['b'][:8]})",
    ], lines
    assert not ray.is_initialized()  # the run left the cluster it joined
    # the full weights of version 1, exported by the rank on node B, reached both workers on node A through the
    # object store before step 2: every token of step 2 was sampled with them
    state = tiny_model(tiny_tokenizer("chatml")).state_dict()  # (the rank's export holds each tied name's copy)
    full = sum(t.numel() * t.element_size() for t in state.values())
    pushes = [r for r in read_jsonl_rows(ds_run.out / "weight_pushes.jsonl") if r["version"] == 1]
    assert sorted(r["worker"] for r in pushes) == [0, 1] and {r["node_ip"] for r in pushes} == {"127.0.0.3"}
    assert all(r["bytes"] == full and r["fetch_s"] >= 0 for r in pushes)
    assert history[2]["weight_push_bytes"] == full and history[2]["weight_push_nodes"] == 1
    assert history[2]["weight_push_s"] > 0 and history[1]["weight_push_bytes"] == 0  # version 0 came with setup
    step2 = read_jsonl(ds_run.out / "train" / "step-2" / "trajectories.jsonl")
    assert len(step2) == 8 and all(set(t.metadata["policy_version"]) == {1} for t in step2)


def read_jsonl_rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_a_request_no_node_can_hold_is_refused_at_once_naming_the_resource(cluster, tmp_path):
    start = time.monotonic()
    with pytest.raises(
        RayPlacementError,
        match=r"no node of the cluster has the resource 'gpu_box'.*127\.0\.0\.3 "
        r"\([0-9a-f]{8}\) \{CPU: 2, rollout: 2\}.*change ray\.worker_cpus, ray\.worker_gpus or "
        r"ray\.worker_resources \(waited 2s",
    ):
        trainer(config(cluster, tmp_path, ray_opts={"worker_resources": {"gpu_box": 1}}))
    with pytest.raises(
        RayPlacementError,
        match=r"the cluster's nodes have room for 2 of the 3 rollout workers "
        r"asking \{CPU: 0.5, rollout: 1\} each \(its 'rollout' is too little for all\)",
    ):
        trainer(config(cluster, tmp_path, ray_opts={"rollout_workers": 3}))
    if _importable("deepspeed"):  # (the group refuses to start without it, before any placement)
        with pytest.raises(
            LearnerGroupError,
            match=r"room for 0 of the 1 learner rank asking \{CPU: 0.5, "
            r"learner: 2\} each.*lower learner\.ranks or learner\.rank_cpus",
        ):
            trainer(config(cluster, tmp_path, learner={"backend": "deepspeed", "rank_resources": {"learner": 2}}))
    assert time.monotonic() - start < 90 and not ray.is_initialized()
    with pytest.raises(
        ValueError,
        match=r"ray.worker_resources: 'CPU' is not a custom resource: set "
        r"ray.worker_cpus instead",
    ):
        config(cluster, tmp_path, ray_opts={"worker_resources": {"CPU": 1}})
    with pytest.raises(ValueError, match=r"learner.rank_resources: learner=1.5: Ray grants amounts above 1 in whole"):
        config(cluster, tmp_path, learner={"rank_resources": {"learner": 1.5}})


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_a_module_only_in_the_project_folder_is_shipped_to_the_nodes_and_trains(cluster, tmp_path, monkeypatch):
    project = write_module(tmp_path / "project", "shipped_upper", USER_ENV.format(imports="", name="shipped_upper"))
    monkeypatch.syspath_prepend(str(project))  # the driver imports it from the project folder, as `turnrl train` does
    cfg = config(
        cluster,
        tmp_path / "run",
        env="shipped_upper:shipped_upper/Upper-v0",
        # one rollout worker: shipping is per job and node, the same for any number of workers
        ray_opts={"rollout_workers": 1, "runtime_env": {"working_dir": str(project), "excludes": ["*.log"]}},
    )
    t = trainer(cfg)
    try:
        history = t.train()
    finally:
        t.close()
    assert len(history) == 2 and "loss" in history[1] and history[1]["rollout_episodes"] == 8
    assert history[1].get("error_episodes", 0) == 0
    workers = json.loads((tmp_path / "run" / "placement.json").read_text())["rollout_workers"]
    assert len(workers) == 1
    for w in workers:  # imported from the node's own copy, in node A's temporary folder, not the project folder
        where = Path(w["imports"]["shipped_upper"])
        assert where.is_relative_to(cluster.temp / "a") and "working_dir_files" in where.parts, where
        assert not where.is_relative_to(project)


def test_a_module_a_node_lacks_is_named_with_the_node_before_the_first_step(cluster, tmp_path, monkeypatch):
    # needy_env imports vendor_helper, which the driver finds in a folder of its own that the run does not ship
    vendor = write_module(tmp_path / "vendor", "vendor_helper", "VALUE = 1\n")
    project = write_module(
        tmp_path / "project", "needy_env", USER_ENV.format(imports="import vendor_helper", name="needy_env")
    )
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.syspath_prepend(str(vendor))
    cfg = config(
        cluster,
        tmp_path / "run",
        env="needy_env:needy_env/Upper-v0",
        ray_opts={"rollout_workers": 1, "runtime_env": {"working_dir": str(project)}},
    )
    start = time.monotonic()
    with pytest.raises(
        RayPlacementError,
        match=r"rollout worker 0 on node 127\.0\.0\.3 \([0-9a-f]{8}, host .*\) "
        r"cannot import 'needy_env' \(it imports 'vendor_helper', which is not there\): "
        r"ModuleNotFoundError: No module named 'vendor_helper'\. Ship your project's code",
    ):
        trainer(cfg)
    assert time.monotonic() - start < 120 and not ray.is_initialized()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before any step


GATED_ENV = """
    import os
    import time

    import turnrl
    from turnrl.envs import Task, ToolEnv
    from turnrl.verifiers.base import Verdict

    def gated_upper(text, ref):  # an episode ends only while the test's gate file exists (30 s at most)
        gate, deadline = os.environ.get("TURNRL_TEST_GATE"), time.monotonic() + 30
        while gate and not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        ok = text.strip()[:1].isupper()
        return Verdict(correct=ok, score=float(ok))

    class GatedUpperEnv(ToolEnv):
        def __init__(self, **kw):
            super().__init__([Task(id=f"t{i}", prompt=f"Say something {i}.", answer="") for i in range(8)],
                             verifier=gated_upper, **kw)

    turnrl.register("gated_upper/Upper-v0", "gated_upper:GatedUpperEnv")
"""


def answers(actor, timeout):
    """The actor's ``ready`` answer once Ray has (re)started it, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get(actor.ready.remote(), timeout=max(deadline - time.monotonic(), 0.1))
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            assert time.monotonic() < deadline, f"the actor did not answer within {timeout}s"
            time.sleep(0.2)


#: what a step did to get its episodes rather than what it trained: faults, episodes reused from the journal, and
#: weight loads (a resumed step that reuses every journaled episode loads no weights)
FAULTS = {
    "reused_episodes",
    "worker_restarts",
    "nodes_lost",
    "episodes_replayed",
    "workers_waiting",
    "refused_commits",
    "prefetched_episodes",
    "weight_push_bytes",
    "weight_push_nodes",
}


def outcome(h):
    """A step's metrics less its timings and how its episodes were got (what a resumed run must reproduce)."""
    return {k: v for k, v in h.items() if not k.endswith(("_s", "seconds", "per_s")) and k not in FAULTS}


def test_a_rollout_node_lost_mid_run_is_replayed_and_its_worker_returns_on_a_node_that_joins(
    cluster, tmp_path, monkeypatch
):
    """Nodes C and D hold one rollout worker each (their only 'spare'). In step 2, while every episode waits at a
    gate, worker 0's node is killed — raylet and worker. Its lease's jobs are replayed on the other worker, the step
    and the run go on, and the ledger shows every episode trained once. The lost worker waits (no live node has a
    free 'spare'); node E joins after step 2, Ray restarts the worker there, and it plays step 3 with the LoRA
    adapters of version 2, fetched to E through the object store before its first episode. Then the other nodes are
    killed too: with no node for any worker, the run stops within ray.placement_timeout naming the resource."""
    from test_lora import LEARNING_TARGETS, untied_tiny

    project = write_module(tmp_path / "project", "gated_upper", GATED_ENV)
    monkeypatch.syspath_prepend(str(project))
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setenv("TURNRL_TEST_GATE", str(gate))  # (the driver's held-out evaluations pass it)
    nodes = {"c": add_node(cluster, "c", "127.0.0.5", spare=1), "d": add_node(cluster, "d", "127.0.0.6", spare=1)}
    cfg = config(
        cluster,
        tmp_path / "run",
        env="gated_upper:gated_upper/Upper-v0",
        steps=3,
        save_trajectories=True,
        learner={"lora": {"r": 8, "target_modules": LEARNING_TARGETS}},
        ray_opts={
            "worker_resources": {"spare": 1},
            "start_timeout": 60,
            "placement_timeout": 2,
            "max_restarts": 4,
            "runtime_env": {"working_dir": str(project), "env_vars": {"TURNRL_TEST_GATE": str(gate)}},
        },
    )
    t = trainer(cfg, model=untied_tiny())
    killed, came_back, threads = [], [], []

    def kill_in_step_2():
        time.sleep(0.5)  # step 2's leases are out, and their episodes wait at the closed gate
        victim = node_of(cluster, t.runner.placed[0]["node_id"])
        killed.append(victim.node_ip_address)
        kill_node(cluster, victim)
        gate.touch()

    def on_step(info):
        if info["step"] == 1:
            gate.unlink()
            threads.append(threading.Thread(target=kill_in_step_2))
            threads[0].start()
        if info["step"] == 2:  # a node that can hold the lost worker joins; Ray restarts it there
            nodes["e"] = add_node(cluster, "e", "127.0.0.7", spare=1)
            came_back.append(answers(t.runner.workers[0], 60))

    start = time.monotonic()
    try:
        history = t.train(on_step=on_step)
        end_of_run = time.monotonic() - start
        for node in nodes.values():  # now every node with 'spare' is gone
            if node in cluster.worker_nodes:
                kill_node(cluster, node)
        with pytest.raises(
            RayPlacementError,
            match=r"no rollout worker left at step 4: rollout workers 0, 1 \(last "
            r"on 127\.0\.0\.[56] \(\w+\), 127\.0\.0\.7 \(\w+\)\) did not come back — no node of the "
            r"cluster has the resource 'spare' .*\(waited 2s: ray.placement_timeout\); lost nodes: .*"
            r"Collected so far",
        ):
            t.source.collect(3)
    finally:
        gate.touch()
        for thread in threads:
            thread.join(timeout=60)
        t.close()
    assert end_of_run < 120
    lost_ip = killed[0]
    steps = history[1:]
    # the ledger's books: 8 collected and trained per step, the lost lease's jobs replayed, none lost or duplicated
    assert [h["collected_episodes"] for h in steps] == [8] * 3 and [h["trained_episodes"] for h in steps] == [8] * 3
    assert all(h["ledger_lost"] == 0 and h["ledger_duplicated"] == 0 for h in steps)
    assert steps[1]["episodes_replayed"] >= 1 and steps[0]["episodes_replayed"] == 0
    assert sum(h["nodes_lost"] for h in steps) == 1 and steps[1]["worker_restarts"] >= 1
    assert steps[1]["workers_waiting"] == 1 and steps[2]["workers_waiting"] == 0
    keys = [
        tr.metadata["job"]
        for s in (1, 2, 3)
        for tr in read_jsonl(tmp_path / "run" / "train" / f"step-{s}" / "trajectories.jsonl")
    ]
    jobs = [Job.parse(k) for k in keys]  # each step: 2 tasks × 4 samples, every job exactly once
    assert len(set(keys)) == len(keys) == 24
    want = [(s, n) for s in range(3) for _ in range(2) for n in range(4)]
    assert sorted((j.step, j.sample) for j in jobs) == sorted(want)
    # where it all ran: worker 0 lost with its node, back on E; the lost node recorded with the step
    placed = json.loads((tmp_path / "run" / "placement.json").read_text())
    assert placed["lost_nodes"][0]["node_ip"] == lost_ip and placed["lost_nodes"][0]["rollout_workers"] == [0]
    assert placed["lost_nodes"][0]["step"] == 2
    back = placed["rollout_workers"][0]
    assert back["node_ip"] == "127.0.0.7" and back["restarts"] >= 1 and back["pid"] == came_back[0]["pid"]
    # the late worker fetched version 2's adapters to E before it played, and every token of step 3 is version 2's
    step3 = read_jsonl(tmp_path / "run" / "train" / "step-3" / "trajectories.jsonl")
    assert any(tr.metadata["worker"] == back["pid"] for tr in step3)
    assert all(set(tr.metadata["policy_version"]) == {2} for tr in step3)
    pushes = read_jsonl_rows(tmp_path / "run" / "weight_pushes.jsonl")
    late = [r for r in pushes if r["pid"] == back["pid"]]
    assert [(r["version"], r["node_ip"]) for r in late] == [(2, "127.0.0.7")]
    full = sum(p.numel() * p.element_size() for n, p in t.model.named_parameters() if "lora_" not in n)
    assert 0 < late[0]["bytes"] < full / 4  # the adapters alone
    assert steps[2]["weight_push_bytes"] == late[0]["bytes"] and steps[2]["weight_push_nodes"] == 2


def test_a_learner_ranks_node_lost_stops_the_run_naming_both_and_resume_ends_as_the_uninterrupted_run(
    cluster, tmp_path, ds_run
):
    """The rank runs on node F ({ds: 1}), which is killed in step 2 (after step 1's checkpoint): the run stops with
    an error naming the rank, its node and that Ray found the node lost. With node G ({ds: 1}) joined, the same
    config resumes from the checkpoint and its step 2 is the uninterrupted run's (timings aside)."""
    f = add_node(cluster, "f", "127.0.0.8", ds=1)
    cfg = ds_config(cluster, tmp_path, {"ds": 1}, workers=1)  # (each episode's own seed: the same with 1 or 2)
    t = trainer(cfg)
    killed = []

    def on_commit(traj, ledger):
        if Job.parse(traj.metadata["job"]).step == 1 and not killed:
            killed.append(time.monotonic())
            kill_node(cluster, f)

    t.runner.on_commit = on_commit
    try:
        with pytest.raises(
            LearnerGroupError,
            match=r"learner rank 0 on node 127\.0\.0\.8 \([0-9a-f]{8}\), which Ray "
            r"found lost \(its raylet and every worker on it\), died during update 2: .*run the same "
            r"command again to resume from the last checkpoint",
        ):
            t.train()
        assert time.monotonic() - killed[0] < 60
    finally:
        t.close()
    g = add_node(cluster, "g", "127.0.0.9", ds=1)
    resumed = trainer(cfg)
    try:
        resumed.load(tmp_path / "checkpoint.pt")
        assert resumed.step == 1
        history = resumed.train()
    finally:
        resumed.close()
        cluster.remove_node(g)
    ranks = json.loads((tmp_path / "placement.json").read_text())["learner_ranks"]
    assert ranks[0]["node_ip"] == "127.0.0.9"
    want, got = outcome(ds_run.history[2]), outcome(history[-1])
    assert history[-1]["step"] == 2 and set(got) == set(want)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key


def test_turnrl_train_joins_only_with_the_clusters_token_and_says_so_when_the_head_is_lost(cluster, tmp_path):
    """Last in the module: it ends the module's cluster. The command line, as docs/cluster.md tells users: without
    RAY_AUTH_MODE=token and the head's token the run is refused with what to set; with them it joins, prints which
    node holds each worker and trains. Then the head (its GCS, raylet and object store) is killed: Ray would end the
    driver without a word — at once on its next object-store write, or after a minute — but the run says what
    happened and where its checkpoint is, and exits (2) within seconds."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        textwrap.dedent(f"""\
        model: tiny:chatml
        env: {{id: turnrl/Arithmetic-v0, kwargs: {{level: 1}}}}
        rollout: {{prompts_per_step: 2, group_size: 4, max_new_tokens: 4}}
        optim: {{minibatch_size: 8}}
        steps: 50
        eval_tasks: 2
        checkpoint_every: 1
        placement: ray
        ray: {{address: "{cluster.address}", rollout_workers: 1, worker_resources: {{rollout: 1}}, start_timeout: 120,
              head_timeout: 3}}
        """)
    )
    turnrl = [sys.executable, "-m", "turnrl", "train", str(cfg), "--no-resume"]
    env = {k: v for k, v in os.environ.items() if k not in AUTH}
    # (Ray asks a GCS that refuses the driver again every second, 20 times by default: 2 are as telling)
    refused = subprocess.run(
        [*turnrl, f"out_dir={tmp_path / 'b'}"],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=REPO,
        env={**env, "RAY_gcs_server_port_wait_time_s": "2"},
    )
    assert refused.returncode == 2
    assert "RAY_AUTH_MODE is unset here, so no token is sent" in refused.stdout, refused.stdout[-3000:]
    token = tmp_path / "token"
    token.write_text(os.environ["RAY_AUTH_TOKEN"])
    out = tmp_path / "out.log"
    with out.open("w") as log:
        run = subprocess.Popen(
            [*turnrl, f"out_dir={tmp_path / 'a'}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)},
        )
        try:
            metrics, deadline = tmp_path / "a" / "metrics.jsonl", time.monotonic() + 300
            while not (
                metrics.exists()
                and len(metrics.read_text().splitlines()) >= 2  # step 1 trained
                and (tmp_path / "a" / "checkpoint.pt").exists()
            ):  # and its checkpoint written
                assert run.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
                time.sleep(0.2)
            cluster.remove_node(cluster.head_node, allow_graceful=False)
            killed = time.monotonic()
            rc = run.wait(timeout=60)
            took = time.monotonic() - killed
        finally:
            if run.poll() is None:
                run.kill()
    text = out.read_text()
    ours = "\n".join(line for line in text.splitlines() if "(raylet)" not in line)  # the driver's own lines
    assert "rollout worker 0: node 127.0.0.3" in text  # (several workers' lines: ds_run's, from placement.json)
    text = " ".join(text.split())
    assert took < 30, (rc, took, ours[-4000:])
    if rc == 1 and "error: lost the Ray cluster's head" not in text:
        # the race docs/cluster.md#node-loss names: the head died while the driver wrote to the object store (after
        # the check before the write), and Ray ended the driver at once; the checkpoint is there to resume from
        assert (tmp_path / "a" / "checkpoint.pt").exists(), ours[-4000:]
        return
    assert rc == 2, (rc, took, ours[-4000:])
    assert re.search(
        r"error: lost the Ray cluster's head: nothing has answered at 127\.0\.0\.2:\d+ \(its GCS\) "
        r"for 3s \(ray\.head_timeout\).*resumes from the last checkpoint.*\(last checkpoint: \S+"
        r"checkpoint\.pt, step \d+\)",
        text,
    ), text[-3000:]
