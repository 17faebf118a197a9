#!/usr/bin/env bash
# A Ray cluster started as users start one, and a 2-step `turnrl train` that joins it (docs/cluster.md):
#   * a head and two worker nodes with `ray start` (--head / --address, --num-cpus, --resources), each a raylet of
#     its own with its own --temp-dir and its own loopback address (127.0.0.2, .3, .4: Ray on Linux replaces
#     127.0.0.1 by the machine's own interface address, which this script never uses);
#   * Ray's token authentication on: a fresh token in a file of this run, handed to every node and to the trainer
#     with RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH (~/.ray/auth_token is left alone);
#   * node A offers {"rollout": 2}, node B {"learner": 1}; the run asks ray.worker_resources={rollout: 1} and (where
#     DeepSpeed is installed) learner.rank_resources={learner: 1};
#   * the environment is a module in a project folder of its own, installed nowhere: ray.runtime_env.working_dir
#     ships it to the nodes.
# It prints where every worker and rank ran, the weight pushes per node and the wall time, and stops its own nodes on
# exit (their `ray start --block` processes, by pid: never `ray stop`, which would stop every Ray on the machine;
# scripts/ray_nodes.sh). Every wait has a timeout. Losing nodes mid-run: scripts/ray_node_loss_demo.sh.
#   bash scripts/ray_cluster_demo.sh            (KEEP=1 keeps the temporary folder with the nodes' logs)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-$REPO/.venv/bin/python}
RAY=${RAY:-$REPO/.venv/bin/ray}
T=$(mktemp -d /tmp/trdemo.XXXXXX)   # short: Ray's socket paths live under the nodes' temp dirs
START=$(date +%s)
source scripts/ray_nodes.sh

finish() {
  local rc=$?
  stop_nodes
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
  echo "== wall time $(( $(date +%s) - START )) s (rc=$rc)"
}
trap finish EXIT

new_token
PORT=$(free_port)
echo "== head 127.0.0.2:$PORT, worker nodes 127.0.0.3 {rollout: 2} and 127.0.0.4 {learner: 1}; temp $T"
start_head head 127.0.0.2 "$PORT" --num-cpus=1
wait_started head
start_node a 127.0.0.3 --num-cpus=2 --resources='{"rollout": 2}'
start_node b 127.0.0.4 --num-cpus=1 --resources='{"learner": 1}'
wait_started a b
wait_nodes 3
echo "== 3 live nodes after $(( $(date +%s) - START )) s"

# the user's project: an environment module that is on no node's sys.path, and the run's config beside it
mkdir -p "$T/project"
cat > "$T/project/demo_env.py" <<'EOF'
"""A user's environment: a reply that starts with a capital letter is right."""
import turnrl
from turnrl.envs import Task, ToolEnv
from turnrl.verifiers.base import Verdict


def starts_upper(text, ref):
    ok = text.strip()[:1].isupper()
    return Verdict(correct=ok, score=float(ok))


class UpperEnv(ToolEnv):
    def __init__(self, **kw):
        super().__init__([Task(id=f"t{i}", prompt=f"Say something {i}.", answer="") for i in range(8)],
                         verifier=starts_upper, **kw)


turnrl.register("demo/Upper-v0", "demo_env:UpperEnv")
EOF
LEARNER="learner: {backend: torch}"
if "$PY" -c "import deepspeed" > /dev/null 2>&1; then
  LEARNER="learner: {backend: deepspeed, ranks: 1, rank_resources: {learner: 1}}"
fi
cat > "$T/project/demo.yaml" <<EOF
model: tiny:chatml
env: {id: "demo_env:demo/Upper-v0"}
algorithm: {name: grpo}
rollout: {prompts_per_step: 2, group_size: 4, max_new_tokens: 8}
optim: {lr: 1.0e-2, minibatch_size: 8}
steps: 2
eval_tasks: 4
placement: ray
ray:
  rollout_workers: 2
  worker_resources: {rollout: 1}
  start_timeout: 180
  runtime_env: {working_dir: $T/project}
$LEARNER
EOF

echo "== turnrl train (from $REPO: the project folder is not the driver's, nor any node's, current folder)"
T0=$(date +%s)
timeout 900 "$REPO/.venv/bin/turnrl" train "$T/project/demo.yaml" "ray.address=$HEAD" "out_dir=$T/run" --no-resume \
  2>&1 | grep -v "^\[" | grep -E "rollout worker|learner rank|^step|held-out|success|error" || true
echo "== train took $(( $(date +%s) - T0 )) s"
test -f "$T/run/placement.json" || { echo "no placement.json: the run did not start"; exit 1; }
"$PY" - "$T/run/placement.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
print(f"== where everything ran (placement.json); driver on {p['driver']['node_ip']}")
for role in ("rollout_workers", "learner_ranks"):
    for e in p.get(role, []):
        imports = "; ".join(f"{m} from {f}" for m, f in e.get("imports", {}).items()) or "-"
        print(f"   {role[:-1]} {e['index']}: node {e['node_ip']} ({e['node_id'][:8]}) pid {e['pid']} asks {e['asks']}"
              f" imports {imports}")
EOF
"$PY" scripts/ray_run_report.py "$T/run"
