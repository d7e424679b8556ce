#!/usr/bin/env bash
# Issue 18's what-if target through the real binary: `rota whatif` on a live
# server with 1,250 nodes and 10,000 pending jobs answers in at most 2 s.
# A `rota server` (SQLite store in a temporary directory, a free loopback
# port) declares 1,250 8-GPU nodes (no agents); 2,500 4-GPU jobs with time
# limits fill them (bound to the declared GPUs), then 10,000 jobs wait
# (1, 1, 2, 4 or 8 GPUs; 7 in 10 with a time limit). Times, RUNS times each:
#   rota whatif                         the projection of every pending job
#   rota whatif --add-nodes n=125       the same beside 125 more nodes
#   rota jobs --state pending --start   (the first page) with expected starts
# end to end (the CLI's process, HTTP, the server's snapshot and projection),
# and prints the server's own figures (steps, wall) from the JSON answer.
#
# usage: bench/whatif_live.sh [RUNS]          (default 3)
# env:   LEARNED=1: the server's profile orders by the learned order
#        (plugins: [priority, learned, fifo, resource-fit, gang, topology, binpack])
# Prints RESULT lines. Everything it starts it stops by PID.
set -u
RUNS=${1:-3}
. "$(dirname "$0")/lib.sh" whatif
cat > "$R/cluster.yaml" <<'YAML'
topology: [nvlink, node, rack, spine]
node_groups: [{name: n, count: 1250, gpus: 8, gpu_model: H100, gpu_memory: 80Gi, cpu: 128, memory: 1024Gi, nodes_per_rack: 32}]
limits: {max_pending_per_user: 10000000, max_pending_per_queue: 10000000, submit_rate: 10000000}
YAML
if [ "${LEARNED:-0}" = 1 ]; then
  printf 'profile:\n  plugins: [priority, learned, fifo, resource-fit, gang, topology, binpack]\n' >> "$R/cluster.yaml"
fi
"$ROTA" server --data-dir "$R/data" --listen 127.0.0.1:0 --config "$R/cluster.yaml" --rate-limit 0 >> "$R/server.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
wait_for_server "$R/server.log"
export ROTA_TOKEN=$(cat "$R/data/admin.token")
post() {  # $1: job JSON, $2: count
  curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ROTA_TOKEN" -H 'Content-Type: application/json' \
    -d "$1" "$ROTA_SERVER/v1/jobs?count=$2"
}
# The running: 2,500 4-GPU jobs with time limits of 1 to 24 hours.
for i in $(seq 0 24); do
  code=$(post "{\"name\": \"run$i\", \"time_limit\": \"$((1 + i % 24))h\", \"tasks\": [{\"gpus\": 4, \"command\": [\"sleep\", \"1d\"]}]}" 100)
  [ "$code" = 201 ] || { echo "RESULT submit failed: $code"; tail -5 "$R/server.log"; exit 1; }
done
for _ in $(seq 300); do
  running=$("$ROTA" jobs --state running --limit 0 -o json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))' 2>/dev/null)
  [ "${running:-0}" -ge 2500 ] && break
  sleep 0.2
done
echo "RESULT bound=${running:-0} of 2500"
[ "${running:-0}" -ge 2500 ] || { tail -5 "$R/server.log"; exit 1; }
# The waiting: 10,000 jobs, 400 arrays of 25 (GPUs 1, 1, 2, 4, 8 in turn; 7 in 10 arrays of
# each size with a limit).
for i in $(seq 0 399); do
  g=(1 1 2 4 8); gpus=${g[$((i % 5))]}
  limit=""
  [ $((i / 5 % 10)) -lt 7 ] && limit="\"time_limit\": \"$((1 + i % 12))h\", "
  code=$(post "{\"name\": \"w$i\", $limit\"tasks\": [{\"gpus\": $gpus, \"command\": [\"true\"]}]}" 25)
  [ "$code" = 201 ] || { echo "RESULT submit failed: $code"; exit 1; }
done
sleep 2
pending=$("$ROTA" jobs --state pending --limit 0 -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))')
echo "RESULT pending=$pending rss=$(awk '/VmRSS/ {printf "%.0f", $2 / 1024}' /proc/$SERVER/status)MiB"
now() { date +%s.%N; }
timed() {  # $1: label, then the command
  local label=$1; shift
  for run in $(seq "$RUNS"); do
    t0=$(now)
    "$@" > "$R/out" 2> "$R/err" || { echo "RESULT $label failed: $(cat "$R/err")"; continue; }
    t1=$(now)
    extra=$(python3 - "$R/out" <<'PY' 2>/dev/null
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    sys.exit()
parts = []
for name in ("baseline", "with_changes"):
    p = d.get(name)
    if isinstance(p, dict):
        started = sum(1 for j in p["jobs"] if j["expected_start"] is not None)
        parts.append(f"{name}: jobs={len(p['jobs'])} started={started} steps={p['steps']} server_ms={p['wall_ms']:.0f}"
                     f" complete={str(p['complete']).lower()}")
print(" ".join(parts))
PY
)
    echo "RESULT $label run=$run wall_s=$(echo "$t1 - $t0" | bc) $extra"
  done
}
timed whatif "$ROTA" whatif -o json
timed whatif_add_nodes "$ROTA" whatif --add-nodes n=125 -o json
timed jobs_start "$ROTA" jobs --state pending --start
