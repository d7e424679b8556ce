#!/usr/bin/env bash
# What a gang's restart costs, and whether two attempts' ranks ever run at once. A 2-rank gang
# (8 GPUs a rank, so one rank a node) on 3 nodes of real `rota agent`s, `restart: on-failure`:
# rank 0 fails 1 s into each attempt, RESTARTS times; rank 1 takes STOP_S seconds to stop on its
# checkpoint signal (SIGTERM), as a program that saves a checkpoint does. For each restart it
# measures, from the ranks' own clock readings: rank 0's exit to the next attempt's first rank
# start (the restart), and how long that rank ran beside the previous attempt's rank 1 (overlap;
# 0 = never). A third node is free, so nothing but the server keeps the two attempts apart.
#
# usage: bench/gang_restart.sh [RESTARTS] [STOP_S]      e.g. bench/gang_restart.sh 5 2
# env:   ROTA (the binary; default build/src/cli/rota), HEARTBEAT_MS (default 1000)
# Prints one line per restart and a RESULT line.
set -u
RESTARTS=${1:-5}
STOP_S=${2:-0}
HEARTBEAT_MS=${HEARTBEAT_MS:-1000}
. "$(dirname "$0")/lib.sh" gang-restart

cat > "$R/cluster.yaml" <<YAML
node_groups: [{name: g, count: 3, gpus: 8, gpu_model: H100, gpu_memory: 80Gi, cpu: 64, memory: 500Gi}]
YAML
"$ROTA" server --data-dir "$R/data" --listen 127.0.0.1:0 --config "$R/cluster.yaml" > "$R/server.log" 2>&1 &
PIDS+=($!)
wait_for_server "$R/server.log"
export ROTA_TOKEN=$(cat "$R/data/admin.token")
start_agents g 3 --heartbeat-ms "$HEARTBEAT_MS"

T="$R/trace"
# The attempt a rank is in: how many times rank 0 has failed so far (written as it fails).
cat > "$R/rank.sh" <<SH
n=\$(cat "$R/count" 2>/dev/null || echo 0)
echo "start \$n \$RANK \$(date +%s%N)" >> "$T"
if [ "\$RANK" = 0 ] && [ "\$n" -lt $RESTARTS ]; then
  sleep 1
  echo \$((n + 1)) > "$R/count"
  echo "fail \$n 0 \$(date +%s%N)" >> "$T"
  exit 1
fi
trap 'sleep $STOP_S; echo "end \$n \$RANK \$(date +%s%N)" >> "$T"; exit 0' TERM
while true; do sleep 0.05; done
SH
cat > "$R/gang.yaml" <<YAML
name: gang
restart: {policy: on-failure, max_restarts: $((RESTARTS + 1))}
checkpoint: {signal: SIGTERM, grace: 60s}
tasks: [{name: w, replicas: 2, gpus: 8, command: [sh, "$R/rank.sh"]}]
YAML
"$ROTA" submit "$R/gang.yaml" > /dev/null || { echo "submit failed"; exit 1; }
for _ in $(seq 600); do
  [ "$(cat "$T" 2>/dev/null | grep -c "^start $RESTARTS ")" -ge 2 ] && break
  sleep 0.1
done
"$ROTA" cancel 1 > /dev/null
for _ in $(seq 100); do
  "$ROTA" describe 1 | grep -q "cancelled" && break
  sleep 0.1
done
sleep $((STOP_S + 1))  # (the last attempt's ranks end after their handler)

awk -v restarts="$RESTARTS" '
  $1 == "fail" { fail[$2] = $4 }
  $1 == "end" && $3 == 1 { end1[$2] = $4 }
  $1 == "start" { if (!($2 in first) || $4 < first[$2]) first[$2] = $4 }
  END {
    worst = 0; n = 0
    for (i = 0; i < restarts; i++) {
      if (!(i in fail) || !((i + 1) in first)) { printf "restart %d: not seen\n", i + 1; continue }
      lat = (first[i + 1] - fail[i]) / 1e6
      ov = (i in end1) && end1[i] > first[i + 1] ? (end1[i] - first[i + 1]) / 1e6 : 0
      printf "restart %d: rank 0 exit to next start %.0f ms; overlap with the old rank 1 %.0f ms\n", i + 1, lat, ov
      lats[++n] = lat
      if (ov > worst) worst = ov
    }
    # median
    for (a = 1; a <= n; a++) for (b = a + 1; b <= n; b++) if (lats[b] < lats[a]) { t = lats[a]; lats[a] = lats[b]; lats[b] = t }
    med = n ? (n % 2 ? lats[(n + 1) / 2] : (lats[n / 2] + lats[n / 2 + 1]) / 2) : -1
    printf "RESULT restarts=%d stop_s=%s restart_p50_ms=%.0f max_overlap_ms=%.0f\n", n, "'"$STOP_S"'", med, worst
  }' "$T"
