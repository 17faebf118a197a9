#!/usr/bin/env bash
# Nodes lost mid-run on a Ray cluster started with `ray start` (docs/cluster.md#node-loss), on this machine: a head
# (127.0.0.2), two rollout nodes A and C (127.0.0.3, .5: {"rollout": 2} each) and, where DeepSpeed is installed, a
# learner node B (127.0.0.4: {"learner": 1}); token authentication on; the environment shipped with working_dir.
#   * node: a 30-step run with 2 rollout workers; in step 3 (episodes still playing: each grade takes 0.3 s) the node
#     holding rollout worker 0 is killed — SIGKILL to its `ray start` process group and its raylet's workers
#     (scripts/ray_nodes.sh). The run goes on; the script prints when Ray marked the node dead (its default health
#     checks), the ledger (collected, trained, replayed, lost 0, duplicated 0), where the workers ended up and each
#     node's weight pushes.
#   * head: a 6-step run checkpointed every step; after step 2 the head's process group is killed. The driver says so
#     and exits (the script times it); the nodes are started again and the same command resumes from the checkpoint.
#   * push (not in "both"): 3 steps of MODEL (default tiny:chatml; e.g. smollm2-135m-instruct) with one rollout worker
#     on each of A and C and the learner in the driver, LORA=1 for adapters only: each node's weight pushes.
#   bash scripts/ray_node_loss_demo.sh [node|head|both|push]   (default both; KEEP=1 keeps the temporary folder)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-$REPO/.venv/bin/python}
RAY=${RAY:-$REPO/.venv/bin/ray}
TURNRL=$REPO/.venv/bin/turnrl
WHAT=${1:-both}
T=$(mktemp -d /tmp/trloss.XXXXXX)
START=$(date +%s)
source scripts/ray_nodes.sh

finish() {
  local rc=$?
  stop_nodes
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
  echo "== wall time $(( $(date +%s) - START )) s (rc=$rc)"
}
trap finish EXIT

LEARNER="learner: {backend: torch}"
if "$PY" -c "import deepspeed" > /dev/null 2>&1; then
  LEARNER="learner: {backend: deepspeed, ranks: 1, rank_resources: {learner: 1}}"
fi
new_token
PORT=$(free_port)
start_cluster() {  # the head, A, C and (DeepSpeed) B
  start_head head 127.0.0.2 "$PORT" --num-cpus=1
  wait_started head
  start_node a 127.0.0.3 --num-cpus=2 --resources='{"rollout": 2}'
  start_node c 127.0.0.5 --num-cpus=2 --resources='{"rollout": 2}'
  local n=3
  if [[ $LEARNER == *deepspeed* ]]; then start_node b 127.0.0.4 --num-cpus=1 --resources='{"learner": 1}'; n=4; fi
  wait_started a c ${NODE_PID[b]:+b}
  wait_nodes "$n"
}
echo "== head 127.0.0.2:$PORT; rollout nodes 127.0.0.3, 127.0.0.5 {rollout: 2}; $LEARNER; temp $T"
start_cluster

mkdir -p "$T/project"
cat > "$T/project/slow_env.py" <<'EOF'
"""A user's environment whose grading takes 0.3 s an episode: a lease of 4 episodes is still playing when its node
dies. A reply that starts with a capital letter is right."""
import time

import turnrl
from turnrl.envs import Task, ToolEnv
from turnrl.verifiers.base import Verdict


def slow_upper(text, ref):
    time.sleep(0.3)
    ok = text.strip()[:1].isupper()
    return Verdict(correct=ok, score=float(ok))


class SlowUpperEnv(ToolEnv):
    def __init__(self, **kw):
        super().__init__([Task(id=f"t{i}", prompt=f"Say something {i}.", answer="") for i in range(8)],
                         verifier=slow_upper, **kw)


turnrl.register("demo/SlowUpper-v0", "slow_env:SlowUpperEnv")
EOF
cat > "$T/project/loss.yaml" <<EOF
model: tiny:chatml
env: {id: "slow_env:demo/SlowUpper-v0"}
rollout: {prompts_per_step: 2, group_size: 4, max_new_tokens: 8}
optim: {lr: 1.0e-2, minibatch_size: 8}
steps: 6
eval_tasks: 2
checkpoint_every: 1
save_trajectories: true
placement: ray
ray:
  rollout_workers: 2
  worker_cpus: 1
  worker_resources: {rollout: 1}
  start_timeout: 180
  head_timeout: 10
  runtime_env: {working_dir: $T/project}
$LEARNER
EOF

wait_for_step() {  # OUT STEP PID: until OUT/metrics.jsonl records STEP (300 s), or the run ended
  for _ in $(seq 1500); do
    [ -f "$1/metrics.jsonl" ] && [ "$(wc -l < "$1/metrics.jsonl")" -gt "$2" ] && return 0
    kill -0 "$3" 2>/dev/null || { echo "the run ended before step $2"; return 1; }
    sleep 0.2
  done
  echo "step $2 not reached within 300 s"; return 1
}

node_of_worker() {  # OUT INDEX: the node name (a or c) holding rollout worker INDEX, from placement.json
  "$PY" - "$1/placement.json" "$2" <<'EOF'
import json, sys
ip = json.load(open(sys.argv[1]))["rollout_workers"][int(sys.argv[2])]["node_ip"]
print({"127.0.0.3": "a", "127.0.0.5": "c"}[ip])
EOF
}

if [[ $WHAT == node || $WHAT == both ]]; then
  echo "== node loss: 30 steps; the node of rollout worker 0 is killed in step 3"
  T0=$(date +%s)
  timeout 900 "$TURNRL" train "$T/project/loss.yaml" "ray.address=$HEAD" "out_dir=$T/node" steps=30 --no-resume \
    > "$T/node.log" 2>&1 &
  RUN=$!
  wait_for_step "$T/node" 1 "$RUN"
  VICTIM=$(node_of_worker "$T/node" 0)
  wait_for_step "$T/node" 2 "$RUN"
  declare -A IP=([a]=127.0.0.3 [c]=127.0.0.5)
  echo "   $(( $(date +%s) - T0 )) s: killing node $VICTIM (${IP[$VICTIM]}: its ray start process group)"
  KILLED=$(date +%s.%N)
  kill_node "$VICTIM"
  seen_dead "${IP[$VICTIM]}" "$KILLED"
  rc=0; wait "$RUN" || rc=$?
  wait  # (the watcher)
  grep -v "^\[" "$T/node.log" | grep -E "^step|lost|rollout worker|error" | tail -n 12 || true
  echo "== the run ended with rc=$rc after $(( $(date +%s) - T0 )) s"
  "$PY" scripts/ray_run_report.py "$T/node"
  [ "$rc" = 0 ]
fi

if [[ $WHAT == push ]]; then
  MODEL=${MODEL:-tiny:chatml}
  ADAPTERS=""
  if [ "${LORA:-0}" = 1 ]; then ADAPTERS="learner.lora.r=8"; fi
  echo "== weight pushes: 3 steps of $MODEL ${ADAPTERS:+(LoRA adapters only)}, one rollout worker on each of A and C"
  timeout 1500 "$TURNRL" train "$T/project/loss.yaml" "ray.address=$HEAD" "out_dir=$T/push" "model=$MODEL" steps=3 \
    'ray.worker_resources={rollout: 2}' learner.backend=torch 'learner.rank_resources={}' \
    rollout.max_new_tokens=4 ${ADAPTERS} --no-resume > "$T/push.log" 2>&1 || { tail -n 30 "$T/push.log"; exit 1; }
  grep -v "^\[" "$T/push.log" | grep -E "rollout worker [01]:|^step [0-9]" | cut -c1-160 || true
  "$PY" scripts/ray_run_report.py "$T/push"
fi

if [[ $WHAT == head || $WHAT == both ]]; then
  if [[ $WHAT == both ]]; then  # a fresh cluster: all four nodes again
    stop_nodes
    start_cluster
  fi
  echo "== head loss: 6 steps, checkpointed every step; the head is killed after step 2"
  T0=$(date +%s)
  timeout 900 "$TURNRL" train "$T/project/loss.yaml" "ray.address=$HEAD" "out_dir=$T/headloss" --no-resume \
    > "$T/head1.log" 2>&1 &
  RUN=$!
  wait_for_step "$T/headloss" 2 "$RUN"
  kill_node head
  KILLED=$(date +%s.%N)
  rc=0; wait "$RUN" || rc=$?
  echo "   the driver exited with rc=$rc $("$PY" -c "import time; print(f'{time.time() - $KILLED:.1f}')") s after the kill:"
  grep -v "^\[" "$T/head1.log" | grep "error" | tail -n 3 | cut -c1-400 || true
  echo "== the cluster started again; the same command resumes"
  stop_nodes
  start_cluster
  T1=$(date +%s)
  timeout 900 "$TURNRL" train "$T/project/loss.yaml" "ray.address=$HEAD" "out_dir=$T/headloss" \
    > "$T/head2.log" 2>&1 || { tail -n 30 "$T/head2.log"; exit 1; }
  grep -v "^\[" "$T/head2.log" | grep -E "^resumed|^step 6|held-out" | cut -c1-300 || true
  echo "== resumed and finished in $(( $(date +%s) - T1 )) s"
  "$PY" scripts/ray_run_report.py "$T/headloss"
fi
