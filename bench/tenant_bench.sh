#!/usr/bin/env bash
# Tenant isolation: how much one user's big job array delays another user's
# single submission. Starts a `rota server` (SQLite store, 4 declared 8-GPU
# nodes, no agents) on a free loopback port, measures user B's submit latency
# alone (the baseline), then again while user A submits a COUNT-job array
# (default 100,000), and prints both distributions and their ratio.
#
# usage: bench/tenant_bench.sh [COUNT] [SAMPLES]     e.g. bench/tenant_bench.sh 100000 200
# env:   PREFILL=N  jobs put in the store first (by a third user, in arrays of 100,000)
# Prints RESULT lines. Everything it starts it stops by PID.
set -u
COUNT=${1:-100000}
SAMPLES=${2:-200}
. "$(dirname "$0")/lib.sh" tenant
cat > "$R/cluster.yaml" <<'YAML'
node_groups: [{name: n, count: 4, gpus: 8, gpu_model: H100, gpu_memory: 80Gi, cpu: 64, memory: 512Gi}]
limits: {max_pending_per_user: 1000000, submit_rate: 1000000}
YAML
"$ROTA" server --data-dir "$R/data" --listen 127.0.0.1:0 --config "$R/cluster.yaml" --rate-limit 0 > "$R/server.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q "serving http" "$R/server.log" && break; sleep 0.1; done
URL=$(grep -o "http://127.0.0.1:[0-9]*" "$R/server.log" | head -1)
ADMIN=$(cat "$R/data/admin.token")
token() { curl -s -H "Authorization: Bearer $ADMIN" -d "{\"user\": \"$1\"}" "$URL/v1/tokens" | grep -o '"token": *"[^"]*"' | sed 's/.*"\(rota_[^"]*\)"/\1/'; }
A=$(token tenant-a)
B=$(token tenant-b)
JOB='{"name": "j", "tasks": [{"gpus": 1, "command": ["true"]}]}'
PREFILL=${PREFILL:-0}
if [ "$PREFILL" -gt 0 ]; then
  C=$(token tenant-c)
  left=$PREFILL
  while [ "$left" -gt 0 ]; do
    n=$(( left < 100000 ? left : 100000 ))
    curl -s -o /dev/null -H "Authorization: Bearer $C" -d "$JOB" "$URL/v1/jobs?count=$n"
    left=$(( left - n ))
  done
  sleep 3  # its snapshot
  echo "RESULT prefill jobs=$PREFILL"
fi
# One submission by B: prints its latency in ms.
submit_b() {
  curl -s -o "$R/b.out" -w "%{time_total}\n" -H "Authorization: Bearer $B" -H 'Content-Type: application/json' \
    -d "$JOB" "$URL/v1/jobs" | awk '{printf "%.2f\n", $1 * 1000}'
}
stats() {  # p50 p99 max of the numbers in file $1
  sort -n "$1" | awk '{a[NR]=$1} END {p50=a[int(NR*0.5)+1]; i=int(NR*0.99); if (i<1) i=1; printf "n=%d p50=%.1fms p99=%.1fms max=%.1fms", NR, p50, a[i], a[NR]}'
}
for _ in $(seq "$SAMPLES"); do submit_b; sleep 0.01; done > "$R/alone.txt"
# A's array in the background; B keeps submitting until it is acknowledged.
start=$(date +%s.%N)
curl -s -o "$R/array.out" -w "%{http_code} %{time_total}\n" -H "Authorization: Bearer $A" -H 'Content-Type: application/json' \
  -d "$JOB" "$URL/v1/jobs?count=$COUNT" > "$R/array.status" &
ARRAY=$!
: > "$R/during.txt"
while kill -0 "$ARRAY" 2>/dev/null; do submit_b >> "$R/during.txt"; sleep 0.01; done
wait "$ARRAY"
echo "RESULT array count=$COUNT status_and_seconds=$(cat "$R/array.status")"
echo "RESULT tenant-b alone      $(stats "$R/alone.txt")"
echo "RESULT tenant-b during     $(stats "$R/during.txt")"
p99() { sort -n "$1" | awk '{x[NR]=$1} END {i=int(NR*0.99); if (i<1) i=1; print x[i]}'; }
awk -v a="$(p99 "$R/alone.txt")" -v d="$(p99 "$R/during.txt")" \
    'BEGIN {printf "RESULT p99 ratio during/alone = %.2f (p99 added %.1f ms)\n", d / a, d - a}'
