#!/usr/bin/env bash
# Training throughput of one small GRPO run under three placements, side by side in one run of this script
# (docs/cluster.md#throughput; issue 82):
#   * local: `placement: local` (rollouts and the update in one process, on all of this machine's cores);
#   * 1-node: a Ray cluster of one node started with `ray start --head` (127.0.0.2, every core, {"rollout": 2});
#   * 3-node: a head (127.0.0.2, 1 CPU, no rollout resource) and two worker nodes (127.0.0.3 and .4, {"rollout": 1}
#     each) started with `ray start`, each with its own --temp-dir; the 2 rollout workers ask
#     ray.worker_resources={rollout: 1}, so one lands on each worker node (checked in placement.json).
# Token authentication is on for both clusters (a fresh token of this run; scripts/ray_nodes.sh, as
# scripts/ray_cluster_demo.sh starts its nodes). The config is the same for all three: MODEL (default tiny:chatml),
# turnrl/Arithmetic-v0 level 1, GRPO, 4 prompts x 4 samples, 32 new tokens, per-episode seeds (the same episodes in
# every arm until the updates part them), STEPS steps (default 10), 2 rollout workers of CORES/2 CPUs each on Ray, the
# learner (torch) in the driver. Held-out evaluation is outside the steps' `seconds` and is kept small.
# Per arm it prints, over steps 2..STEPS (step 1 pays the workers' first leases and the object store's first pages):
# the median step seconds, episodes/s and generated tokens/s (the steps' totals over their summed seconds), the ratios
# 3-node/1-node, 3-node/local and 1-node/local, and per node the weight pushes (scripts/ray_run_report.py); it writes
# them to OUT/throughput.json and keeps each arm's run folder (OUT/local, OUT/one_node, OUT/three_nodes) and log.
# Nodes are stopped by their process ids, never with `ray stop` (which would stop every Ray on the machine); every
# wait has a timeout; the nodes are stopped and the temporary folder removed on exit (KEEP=1 keeps it).
# Run it alone on the machine: timings taken while anything else runs are void.
#   bash bench/ray_cluster_throughput.sh [OUT]     (default runs/ray_throughput; STEPS=10, MODEL=tiny:chatml)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-$REPO/.venv/bin/python}
RAY=${RAY:-$REPO/.venv/bin/ray}
TURNRL=$REPO/.venv/bin/turnrl
OUT=${1:-runs/ray_throughput}
STEPS=${STEPS:-10}
MODEL=${MODEL:-tiny:chatml}
CORES=$("$PY" -c "import os; print(len(os.sched_getaffinity(0)))")   # (nproc obeys OMP_NUM_THREADS)
WORKER_CPUS=$("$PY" -c "print(max(1, $CORES // 2))")   # each of the 2 rollout workers: half the cores, as threads
TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-1800}
[ "$STEPS" -ge 2 ] || { echo "STEPS must be at least 2 (step 1 is left out of the figures)"; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
T=$(mktemp -d /tmp/trtput.XXXXXX)   # short: Ray's socket paths live under the nodes' temp dirs
START=$(date +%s)
source scripts/ray_nodes.sh

finish() {
  local rc=$?
  stop_nodes
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
  echo "== wall time $(( $(date +%s) - START )) s (rc=$rc)"
}
trap finish EXIT

cat > "$T/bench.yaml" <<EOF
model: $MODEL
env:
  id: turnrl/Arithmetic-v0
  kwargs: {level: 1, split: train}
  eval_kwargs: {split: test}
algorithm: {name: grpo}
rollout: {prompts_per_step: 4, group_size: 4, max_new_tokens: 32, temperature: 0.8, seed_per_episode: true}
optim: {lr: 1.0e-4, minibatch_size: 8}
steps: $STEPS
eval_tasks: 4
save_trajectories: false
seed: 0
learner: {backend: torch}
EOF
# what the Ray arms add (a config with `ray` options and placement local is refused)
RAY_ARGS=(placement=ray ray.rollout_workers=2 "ray.worker_cpus=$WORKER_CPUS" 'ray.worker_resources={rollout: 1}'
  ray.start_timeout=300)
echo "== $STEPS steps of $MODEL on turnrl/Arithmetic-v0 (4 x 4 episodes, 32 new tokens); $CORES cores;" \
  "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}; load $(cut -d' ' -f1-3 /proc/loadavg); out $OUT; temp $T"
LOAD_BEFORE=$(cut -d' ' -f1 /proc/loadavg)

train() {  # ARM [overrides...]: one `turnrl train` of the config into OUT/ARM, its log in OUT/ARM.log; its wall time
  local arm=$1 t0 rc=0; shift
  t0=$(date +%s.%N)
  timeout "$TRAIN_TIMEOUT" "$TURNRL" train "$T/bench.yaml" "out_dir=$OUT/$arm" --no-resume "$@" > "$OUT/$arm.log" 2>&1 \
    || rc=$?
  echo "$arm $("$PY" -c "import time; print(round(time.time() - $t0, 1))")" >> "$T/walls"
  if [ "$rc" != 0 ]; then tail -n 30 "$OUT/$arm.log"; echo "the $arm run failed (rc=$rc)"; return 1; fi
  grep -v "^\[" "$OUT/$arm.log" | grep -E "rollout worker [0-9]+:" | cut -c1-120 || true
}

workers_on() {  # ARM IP...: the run's rollout workers sit on these node addresses, one each in order (placement.json)
  "$PY" - "$OUT/$1/placement.json" "${@:2}" <<'EOF'
import json, sys
got = sorted(w["node_ip"] for w in json.load(open(sys.argv[1]))["rollout_workers"])
if got != sorted(sys.argv[2:]):
    sys.exit(f"rollout workers on {got}, not on {sorted(sys.argv[2:])} as this benchmark places them")
EOF
}

echo "== arm 1/3: placement local"
train local placement=local

new_token
echo "== arm 2/3: one node (ray start --head: $CORES CPUs, {rollout: 2})"
T0=$(date +%s)
start_head one 127.0.0.2 "$(free_port)" --num-cpus="$CORES" --resources='{"rollout": 2}'
wait_started one
wait_nodes 1
echo "   1 live node after $(( $(date +%s) - T0 )) s"
train one_node "${RAY_ARGS[@]}" "ray.address=$HEAD"
workers_on one_node 127.0.0.2 127.0.0.2
"$PY" scripts/ray_run_report.py "$OUT/one_node" | tee "$OUT/one_node.report.txt"
stop_nodes

echo "== arm 3/3: three nodes (head 127.0.0.2 1 CPU; 127.0.0.3 and .4 {CPU: $WORKER_CPUS, rollout: 1} each)"
T0=$(date +%s)
start_head head 127.0.0.2 "$(free_port)" --num-cpus=1
wait_started head
start_node a 127.0.0.3 --num-cpus="$WORKER_CPUS" --resources='{"rollout": 1}'
start_node b 127.0.0.4 --num-cpus="$WORKER_CPUS" --resources='{"rollout": 1}'
wait_started a b
wait_nodes 3
echo "   3 live nodes after $(( $(date +%s) - T0 )) s"
train three_nodes "${RAY_ARGS[@]}" "ray.address=$HEAD"
workers_on three_nodes 127.0.0.3 127.0.0.4
"$PY" scripts/ray_run_report.py "$OUT/three_nodes" | tee "$OUT/three_nodes.report.txt"
stop_nodes

LOAD_AFTER=$(cut -d' ' -f1 /proc/loadavg)
"$PY" - "$OUT" "$T/walls" "$STEPS" "$MODEL" "$CORES" "$WORKER_CPUS" "$LOAD_BEFORE" "$LOAD_AFTER" <<'EOF'
import json, os, statistics, sys
from collections import defaultdict
from pathlib import Path

out, walls, steps, model, cores, worker_cpus, load0, load1 = sys.argv[1:]
out = Path(out)
wall = dict(line.split() for line in Path(walls).read_text().splitlines())
ARMS = {"local": "local", "one_node": "1-node", "three_nodes": "3-node"}


def rows(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


figures = {}
for arm in ARMS:
    steps_ = [h for h in rows(out / arm / "metrics.jsonl") if h.get("step", 0) >= 1 and "seconds" in h]
    later = [h for h in steps_ if h["step"] >= 2]
    secs = sum(h["seconds"] for h in later)
    episodes = sum(h.get("rollout_episodes", h.get("collected_episodes", 0.0)) for h in later)
    tokens = sum(h.get("generated_tokens", 0.0) for h in later)
    nodes = defaultdict(list)
    for p in rows(out / arm / "weight_pushes.jsonl"):
        nodes[p["node_ip"]].append(p)
    pushes = {ip: {"loads": len(ps), "bytes": max(p["bytes"] for p in ps),
                   "fetch_s_median": statistics.median(p["fetch_s"] for p in ps),
                   "fetch_s_max": max(p["fetch_s"] for p in ps),
                   "load_s_median": statistics.median(p["load_s"] for p in ps)} for ip, ps in sorted(nodes.items())}
    figures[arm] = {
        "steps_measured": len(later), "first_step_s": steps_[0]["seconds"] if steps_ else None,
        "median_step_s": statistics.median(h["seconds"] for h in later),
        "step_s": [round(h["seconds"], 4) for h in later],
        "episodes_per_s": episodes / secs, "tokens_per_s": tokens / secs,
        "episodes": episodes, "generated_tokens": tokens,
        "weight_push_s_median": statistics.median(h.get("weight_push_s", 0.0) for h in later),
        "weight_pushes_per_node": pushes, "train_wall_s": float(wall[arm])}


def ratios(a, b):
    return {k: figures[a][k] / figures[b][k] for k in ("median_step_s", "episodes_per_s", "tokens_per_s")}


result = {"model": model, "steps": int(steps), "measured_steps": f"2..{steps}", "cores": int(cores),
          "worker_cpus": float(worker_cpus), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
          "load_average_before": float(load0), "load_average_after": float(load1), "arms": figures,
          "ratios": {"3-node/1-node": ratios("three_nodes", "one_node"), "3-node/local": ratios("three_nodes", "local"),
                     "1-node/local": ratios("one_node", "local")}}
(out / "throughput.json").write_text(json.dumps(result, indent=2) + "\n")

print(f"== throughput over steps 2..{steps} ({model}; load average {load0} before, {load1} after)")
head = f"   {'':22}" + "".join(f"{v:>11}" for v in ARMS.values()) + "".join(f"{r:>14}" for r in result["ratios"])
print(head)
for key, label, fmt in (("median_step_s", "median step s", "{:.3f}"), ("episodes_per_s", "episodes/s", "{:.2f}"),
                        ("tokens_per_s", "generated tokens/s", "{:.1f}")):
    line = f"   {label:22}" + "".join(f"{fmt.format(figures[a][key]):>11}" for a in ARMS)
    print(line + "".join(f"{r[key]:>14.3f}" for r in result["ratios"].values()))
print(f"   {'first step s':22}" + "".join(f"{figures[a]['first_step_s']:>11.3f}" for a in ARMS))
pushed = {a: f"{figures[a]['weight_push_s_median']:.4f}" if figures[a]["weight_pushes_per_node"] else "-" for a in ARMS}
print(f"   {'weight push s (median)':22}" + "".join(f"{pushed[a]:>11}" for a in ARMS)
      + "   (per step: the slowest worker's fetch and load)")
print(f"   {'train wall s':22}" + "".join(f"{figures[a]['train_wall_s']:>11.1f}" for a in ARMS)
      + "   (with imports, model, workers' start, held-out evaluations)")
for arm in ("one_node", "three_nodes"):
    for ip, p in figures[arm]["weight_pushes_per_node"].items():
        print(f"   {ARMS[arm]} weight pushes to {ip}: {p['loads']} loads of {p['bytes'] / 1e6:.3f} MB; fetch median "
              f"{p['fetch_s_median']:.4f} s (max {p['fetch_s_max']:.4f}), load median {p['load_s_median']:.4f} s")
print("   (a ratio A/B of step seconds above 1, or of a rate below 1: A is slower than B)")
print(f"== written {out / 'throughput.json'}")
EOF
