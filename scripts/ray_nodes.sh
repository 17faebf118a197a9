# Ray nodes on this machine for the demo scripts (sourced, not run: scripts/ray_cluster_demo.sh,
# scripts/ray_node_loss_demo.sh). Each node is a `ray start --block` of its own — its own --temp-dir under $T and its
# own loopback address (Ray on Linux replaces 127.0.0.1 by the machine's own interface address, which these scripts
# never use) — started in a process group of its own (setsid), so that one node can be killed as a machine dies: its
# raylet and every worker on it at once. Nodes are stopped by their process ids, never with `ray stop` (which would
# stop every Ray on the machine). Expects T (a temporary folder), PY and RAY; every wait has a timeout.

declare -A NODE_PID=()   # node name -> the pid of its `ray start --block` (and its process group's id)
NODE_ORDER=()            # node names in start order (stopped in reverse)

new_token() {  # a fresh token in $T/token, handed to every node and driver through RAY_AUTH_TOKEN_PATH
  "$PY" -c "import secrets; print(secrets.token_hex(32), end='')" > "$T/token"
  chmod 600 "$T/token"
  export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$T/token" RAY_USAGE_STATS_ENABLED=0
  unset RAY_AUTH_TOKEN RAY_ADDRESS
}

free_port() { "$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.2', 0)); print(s.getsockname()[1])"; }

start_head() {  # NAME IP PORT [ray start options...]: the head node (no dashboard), HEAD=IP:PORT
  local name=$1 ip=$2 port=$3; shift 3
  HEAD=$ip:$port
  setsid "$RAY" start --head --block --node-ip-address="$ip" --port="$port" --ray-client-server-port="$(free_port)" \
    --temp-dir="$T/$name" --include-dashboard=false --disable-usage-stats "$@" > "$T/$name.log" 2>&1 &
  NODE_PID[$name]=$!
  disown  # (no "Killed" line from bash when the node is killed)
  NODE_ORDER+=("$name")
}

start_node() {  # NAME IP [ray start options...]: a worker node joining HEAD
  local name=$1 ip=$2; shift 2
  setsid "$RAY" start --address="$HEAD" --block --node-ip-address="$ip" --temp-dir="$T/$name" "$@" \
    > "$T/$name.log" 2>&1 &
  NODE_PID[$name]=$!
  disown
  NODE_ORDER+=("$name")
}

wait_started() {  # NAME...: each node's `ray start` says it started, or the script stops (60 s each)
  local name
  for name in "$@"; do
    for _ in $(seq 120); do
      grep -qs "Ray runtime started" "$T/$name.log" && continue 2
      kill -0 "${NODE_PID[$name]}" 2>/dev/null || { tail -n 20 "$T/$name.log"; echo "node $name exited"; return 1; }
      sleep 0.5
    done
    tail -n 20 "$T/$name.log"; echo "node $name did not start within 60 s"; return 1
  done
}

wait_nodes() {  # N: until the head lists N live nodes (90 s), then print them
  timeout 120 "$PY" - "$HEAD" "$1" <<'EOF'
import sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
deadline = time.monotonic() + 90
while sum(n["Alive"] for n in ray.nodes()) < int(sys.argv[2]):
    if time.monotonic() > deadline:
        sys.exit(f"the cluster did not reach {sys.argv[2]} live nodes within 90 s")
    time.sleep(0.5)
for n in sorted(ray.nodes(), key=lambda n: n["NodeManagerAddress"]):
    if n["Alive"]:
        own = {k: v for k, v in n["Resources"].items() if not k.startswith(("memory", "object_store", "node:"))}
        print(f"   node {n['NodeManagerAddress']} ({n['NodeID'][:8]}) {own}")
EOF
}

seen_dead() {  # IP SINCE: in the background, print how long after SINCE (epoch seconds) the head marked the node
  # at IP dead (Ray's health checks; 150 s at most)
  timeout 180 "$PY" - "$HEAD" "$1" "$2" <<'EOF' &
import sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
since = float(sys.argv[3])
while time.time() - since < 150:
    at_ip = [n for n in ray.nodes() if n["NodeManagerAddress"] == sys.argv[2]]
    if at_ip and not any(n["Alive"] for n in at_ip):
        print(f"   Ray marked node {sys.argv[2]} dead {time.time() - since:.1f} s after it was killed", flush=True)
        break
    time.sleep(0.2)
else:
    print(f"   Ray had not marked node {sys.argv[2]} dead 150 s after it was killed", flush=True)
EOF
}

kill_node() {  # NAME: kill the node as a machine dies — SIGKILL to its process group (its raylet and Ray's other
  # processes there) and, at once, to every worker process its raylet started: Ray starts each worker in a process
  # group of its own, and a worker left alone outlives its raylet by a few seconds (it may even finish a lease)
  local pgid=${NODE_PID[$1]} raylet groups=()
  for raylet in $(pgrep -g "$pgid" -f "raylet/raylet" || true); do
    for worker in $(pgrep -P "$raylet" || true); do groups+=("-$worker"); done
  done
  kill -KILL -- "-$pgid" "${groups[@]}" 2>/dev/null || true
  unset "NODE_PID[$1]"
}

stop_nodes() {  # every node still up, the last started first: SIGTERM (15 s), then SIGKILL to its process group
  local i name pid
  for ((i=${#NODE_ORDER[@]}-1; i>=0; i--)); do
    name=${NODE_ORDER[i]}
    pid=${NODE_PID[$name]:-}
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    unset "NODE_PID[$name]"
  done
  NODE_ORDER=()
}
