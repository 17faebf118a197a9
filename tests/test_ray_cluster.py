"""A Ray cluster the trainer did not start (docs/cluster.md): a head and two worker nodes of Ray's own
``cluster_utils.Cluster`` — separate raylets, each on its own loopback address and in its own temporary folder, one
node with a ``rollout`` resource and one with a ``learner`` resource, Ray's token authentication on — which runs join
through ``ray.address`` as a user's would. Workers and ranks go to the nodes their resources name, a request no node
can hold is refused at once, a user's module that lives only in a project folder is shipped to the nodes, and a
module a node lacks is named with the node before the first step. ``scripts/ray_cluster_demo.sh`` does the same with
real ``ray start`` processes."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.placement.learner_group import LearnerGroupError
from turnrl.rl.placement.ray import RayPlacementError
from turnrl.rl.run.trainer import TrainConfig, Trainer

ray = pytest.importorskip("ray")
REPO = Path(__file__).resolve().parents[1]
AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@pytest.fixture(scope="module")
def cluster():
    """Head (127.0.0.2, 1 CPU), node A (127.0.0.3, 2 CPUs, {rollout: 2}), node B (127.0.0.4, 1 CPU, {learner: 1}).

    Loopback addresses other than 127.0.0.1, which Ray on Linux replaces by the machine's own interface address.
    The token is this module's own (RAY_AUTH_TOKEN in this process, inherited by the nodes it starts); the cluster's
    address is kept out of /tmp/ray/ray_current_cluster, so that no other process's ``ray.init()`` joins it."""
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
        c = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "node_ip_address": "127.0.0.2", "temp_dir": str(temp / "head"), "include_dashboard": False})
        try:
            nodes["a"] = c.add_node(num_cpus=2, resources={"rollout": 2}, node_ip_address="127.0.0.3",
                                    temp_dir=str(temp / "a"))
            nodes["b"] = c.add_node(num_cpus=1, resources={"learner": 1}, node_ip_address="127.0.0.4",
                                    temp_dir=str(temp / "b"))
            c.wait_for_nodes(timeout=120)
            c.ids = {k: n.node_id for k, n in nodes.items()}
            c.temp = temp
            yield c
        finally:
            if ray.is_initialized():
                ray.shutdown()
            c.shutdown()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            reset_auth_token_state()
            shutil.rmtree(temp, ignore_errors=True)


def config(cluster, tmp_path, env="turnrl/Arithmetic-v0", steps=1, ray_opts=None, **extra):
    kwargs = {"level": 1} if env == "turnrl/Arithmetic-v0" else {}
    return TrainConfig.model_validate({
        "model": "tiny", "env": {"id": env, "kwargs": kwargs}, "placement": "ray",
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4, "seed_per_episode": True},
        "optim": {"lr": 1e-2, "minibatch_size": 8}, "steps": steps, "eval_tasks": 2, "out_dir": str(tmp_path),
        "ray": {"address": cluster.address, "rollout_workers": 2, "worker_resources": {"rollout": 1},
                "start_timeout": 120, "placement_timeout": 2, **(ray_opts or {})}, **extra})


def trainer(cfg):
    tok = tiny_tokenizer("chatml")
    return Trainer(cfg, model=tiny_model(tok), tokenizer=tok)


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


def test_workers_and_ranks_go_to_the_nodes_their_resources_name(cluster, tmp_path):
    pytest.importorskip("deepspeed")
    cfg = config(cluster, tmp_path, learner={"backend": "deepspeed", "ranks": 1, "rank_resources": {"learner": 1}})
    t = trainer(cfg)
    try:
        history = t.train()
    finally:
        t.close()
    assert len(history) == 2 and "loss" in history[1] and history[1]["rollout_episodes"] == 8
    placed = json.loads((tmp_path / "placement.json").read_text())
    assert {n["node_id"] for n in placed["nodes"]} == {cluster.head_node.node_id, *cluster.ids.values()}
    workers, ranks = placed["rollout_workers"], placed["learner_ranks"]
    assert [w["node_id"] for w in workers] == [cluster.ids["a"]] * 2
    assert [w["node_ip"] for w in workers] == ["127.0.0.3"] * 2 and len({w["pid"] for w in workers}) == 2
    assert workers[0]["asks"] == {"CPU": 0.5, "rollout": 1}
    assert [r["node_id"] for r in ranks] == [cluster.ids["b"]] and ranks[0]["node_ip"] == "127.0.0.4"
    assert ranks[0]["asks"] == {"CPU": 0.5, "learner": 1}
    assert not ray.is_initialized()  # the run left the cluster it joined


def test_a_request_no_node_can_hold_is_refused_at_once_naming_the_resource(cluster, tmp_path):
    start = time.monotonic()
    with pytest.raises(RayPlacementError, match=r"no node of the cluster has the resource 'gpu_box'.*127\.0\.0\.3 "
                       r"\([0-9a-f]{8}\) \{CPU: 2, rollout: 2\}.*change ray\.worker_cpus, ray\.worker_gpus or "
                       r"ray\.worker_resources \(waited 2s"):
        trainer(config(cluster, tmp_path, ray_opts={"worker_resources": {"gpu_box": 1}}))
    with pytest.raises(RayPlacementError, match=r"the cluster's nodes have room for 2 of the 3 rollout workers "
                       r"asking \{CPU: 0.5, rollout: 1\} each \(its 'rollout' is too little for all\)"):
        trainer(config(cluster, tmp_path, ray_opts={"rollout_workers": 3}))
    if _importable("deepspeed"):  # (the group refuses to start without it, before any placement)
        with pytest.raises(LearnerGroupError, match=r"room for 0 of the 1 learner rank asking \{CPU: 0.5, "
                           r"learner: 2\} each.*lower learner\.ranks or learner\.rank_cpus"):
            trainer(config(cluster, tmp_path, learner={"backend": "deepspeed", "rank_resources": {"learner": 2}}))
    assert time.monotonic() - start < 90 and not ray.is_initialized()
    with pytest.raises(ValueError, match=r"ray.worker_resources: 'CPU' is not a custom resource: set "
                       r"ray.worker_cpus instead"):
        config(cluster, tmp_path, ray_opts={"worker_resources": {"CPU": 1}})
    with pytest.raises(ValueError, match=r"learner.rank_resources: learner=1.5: Ray grants amounts above 1 in whole"):
        config(cluster, tmp_path, learner={"rank_resources": {"learner": 1.5}})


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_a_module_only_in_the_project_folder_is_shipped_to_the_nodes_and_trains(cluster, tmp_path, monkeypatch):
    project = write_module(tmp_path / "project", "shipped_upper", USER_ENV.format(imports="", name="shipped_upper"))
    monkeypatch.syspath_prepend(str(project))  # the driver imports it from the project folder, as `turnrl train` does
    cfg = config(cluster, tmp_path / "run", env="shipped_upper:shipped_upper/Upper-v0",
                 ray_opts={"runtime_env": {"working_dir": str(project), "excludes": ["*.log"]}})
    t = trainer(cfg)
    try:
        history = t.train()
    finally:
        t.close()
    assert len(history) == 2 and "loss" in history[1] and history[1]["rollout_episodes"] == 8
    assert history[1].get("error_episodes", 0) == 0
    workers = json.loads((tmp_path / "run" / "placement.json").read_text())["rollout_workers"]
    for w in workers:  # imported from the node's own copy, in node A's temporary folder, not the project folder
        where = Path(w["imports"]["shipped_upper"])
        assert where.is_relative_to(cluster.temp / "a") and "working_dir_files" in where.parts, where
        assert not where.is_relative_to(project)


def test_a_module_a_node_lacks_is_named_with_the_node_before_the_first_step(cluster, tmp_path, monkeypatch):
    # needy_env imports vendor_helper, which the driver finds in a folder of its own that the run does not ship
    vendor = write_module(tmp_path / "vendor", "vendor_helper", "VALUE = 1\n")
    project = write_module(tmp_path / "project", "needy_env",
                           USER_ENV.format(imports="import vendor_helper", name="needy_env"))
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.syspath_prepend(str(vendor))
    cfg = config(cluster, tmp_path / "run", env="needy_env:needy_env/Upper-v0",
                 ray_opts={"runtime_env": {"working_dir": str(project)}})
    start = time.monotonic()
    with pytest.raises(RayPlacementError, match=r"rollout worker 0 on node 127\.0\.0\.3 \([0-9a-f]{8}, host .*\) "
                       r"cannot import 'needy_env' \(it imports 'vendor_helper', which is not there\): "
                       r"ModuleNotFoundError: No module named 'vendor_helper'\. Ship your project's code"):
        trainer(cfg)
    assert time.monotonic() - start < 120 and not ray.is_initialized()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before any step


def test_turnrl_train_joins_only_with_the_clusters_token(cluster, tmp_path):
    """The command line, as docs/cluster.md tells users: RAY_AUTH_MODE=token and the head's token join and train,
    and print which node holds each worker; without them the run is refused with what to set."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        model: tiny:chatml
        env: {{id: turnrl/Arithmetic-v0, kwargs: {{level: 1}}}}
        rollout: {{prompts_per_step: 2, group_size: 4, max_new_tokens: 4}}
        optim: {{minibatch_size: 8}}
        steps: 1
        eval_tasks: 2
        placement: ray
        ray: {{address: "{cluster.address}", rollout_workers: 2, worker_resources: {{rollout: 1}}, start_timeout: 120}}
        """))
    turnrl = [sys.executable, "-m", "turnrl", "train", str(cfg), "--no-resume"]
    env = {k: v for k, v in os.environ.items() if k not in AUTH}
    token = tmp_path / "token"
    token.write_text(os.environ["RAY_AUTH_TOKEN"])
    joined = subprocess.run([*turnrl, f"out_dir={tmp_path / 'a'}"], capture_output=True, text=True, timeout=400,
                            cwd=REPO, env={**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    assert joined.returncode == 0, joined.stdout[-3000:] + joined.stderr[-3000:]
    assert "rollout worker 0: node 127.0.0.3" in joined.stdout and "rollout worker 1: node 127.0.0.3" in joined.stdout
    refused = subprocess.run([*turnrl, f"out_dir={tmp_path / 'b'}"], capture_output=True, text=True, timeout=400,
                             cwd=REPO, env=env)
    assert refused.returncode == 2
    assert "RAY_AUTH_MODE is unset here, so no token is sent" in refused.stdout, refused.stdout[-3000:]
