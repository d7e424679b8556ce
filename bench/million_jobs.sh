#!/usr/bin/env bash
# A million jobs in the store: a `rota server` (SQLite store in a temporary
# directory, 4 declared 8-GPU nodes, no agents: everything stays pending) on
# a free loopback port takes ARRAYS arrays of 100,000 1-GPU jobs, and prints
# per array the time to accept it, then: the server's RSS, its CPU while
# nothing changes and while one job a second arrives (with the mean cycle
# time), the time for the first page of `rota jobs`, a restart
# after kill -9 (until the jobs are served again), and one more array after
# the restart.
#
# usage: bench/million_jobs.sh [ARRAYS]        (default 10: a million jobs)
# env:   IDLE_S (default 60): how long the idle CPU is measured (idle cycles
#        over an unchanged state come every ~40x their cost, up to 30 s);
#        CHANGE_S (default 20): how long one job a second is submitted
# Prints RESULT lines. Everything it starts it stops by PID.
set -u
ARRAYS=${1:-10}
. "$(dirname "$0")/lib.sh" million
cat > "$R/cluster.yaml" <<'YAML'
node_groups: [{name: n, count: 4, gpus: 8, gpu_model: H100, gpu_memory: 80Gi, cpu: 64, memory: 512Gi}]
limits: {max_pending_per_user: 10000000, max_pending_per_queue: 10000000, submit_rate: 10000000}
YAML
start() {
  "$ROTA" server --data-dir "$R/data" --listen "$1" --config "$R/cluster.yaml" --rate-limit 0 >> "$R/server.log" 2>&1 &
  SERVER=$!
  PIDS+=("$SERVER")
}
now() { date +%s.%N; }
start 127.0.0.1:0
wait_for_server "$R/server.log"
URL=$ROTA_SERVER
export ROTA_TOKEN=$(cat "$R/data/admin.token")
JOB='{"name": "j", "tasks": [{"gpus": 1, "command": ["true"]}]}'
submit() {
  local t0 t1 code
  t0=$(now)
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 600 -H "Authorization: Bearer $ROTA_TOKEN" \
    -H 'Content-Type: application/json' -d "$JOB" "$URL/v1/jobs?count=100000")
  t1=$(now)
  echo "$code $(echo "$t1 - $t0" | bc)"
}
rss() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$SERVER/status"; }
hwm() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$SERVER/status"; }  # the peak RSS, as the kernel saw it
cpu() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
peak=0
for i in $(seq "$ARRAYS"); do
  read -r code secs < <(submit)
  r=$(rss)
  [ "$r" -gt "$peak" ] && peak=$r
  echo "RESULT array $i of 100000: http $code accepted in ${secs}s; server rss ${r} MiB"
done
IDLE_S=${IDLE_S:-60}
sleep 5
c0=$(cpu)
sleep "$IDLE_S"
c1=$(cpu)
echo "RESULT idle with $((ARRAYS * 100000)) pending over ${IDLE_S}s: server cpu $(echo "scale=1; ($c1 - $c0) * 100 / $IDLE_S / $(getconf CLK_TCK)" | bc)% rss $(rss) MiB (peak seen ${peak} MiB)"
# While something changes: one more job a second (each wakes a cycle over
# the million pending), the server's CPU and its mean cycle time.
CHANGE_S=${CHANGE_S:-20}
cycles() {
  curl -s -H "Authorization: Bearer $ROTA_TOKEN" "$URL/metrics" |
    awk '/^rota_scheduling_cycle_seconds_sum/ {s = $2} /^rota_scheduling_cycle_seconds_count/ {n = $2} END {print s, n}'
}
read -r s0 n0 < <(cycles)
c0=$(cpu)
for _ in $(seq "$CHANGE_S"); do
  curl -s -o /dev/null -H "Authorization: Bearer $ROTA_TOKEN" -H 'Content-Type: application/json' -d "$JOB" "$URL/v1/jobs"
  sleep 1
done
c1=$(cpu)
read -r s1 n1 < <(cycles)
echo "RESULT one job a second for ${CHANGE_S}s with $((ARRAYS * 100000)) pending: server cpu $(echo "scale=1; ($c1 - $c0) * 100 / $CHANGE_S / $(getconf CLK_TCK)" | bc)%, $((n1 - n0)) cycles of $(echo "scale=1; ($s1 - $s0) * 1000 / ($n1 - $n0)" | bc) ms on average"
t0=$(now)
"$ROTA" jobs --limit 500 > /dev/null
t1=$(now)
echo "RESULT first page of rota jobs (500): $(echo "$t1 - $t0" | bc)s"
t0=$(now)
curl -s -o /dev/null -H "Authorization: Bearer $ROTA_TOKEN" "$URL/v1/jobs?limit=500&after=500000"
t1=$(now)
echo "RESULT GET /v1/jobs?limit=500&after=500000: $(echo "$t1 - $t0" | bc)s"
echo "RESULT peak rss of the server so far (VmHWM: the arrays, their snapshots, the cycles): $(hwm) MiB"
kill -9 "$SERVER"
wait "$SERVER" 2>/dev/null
PIDS=()  # (reaped: its PID may be reused)
t0=$(now)
start "${URL#http://}"
until curl -s -o /dev/null -m 1 -H "Authorization: Bearer $ROTA_TOKEN" "$URL/v1/jobs?limit=1" 2>/dev/null; do sleep 0.05; done
t1=$(now)
echo "RESULT restart after kill -9 with $((ARRAYS * 100000)) jobs: serving jobs again in $(echo "$t1 - $t0" | bc)s; rss $(rss) MiB"
read -r code secs < <(submit)
echo "RESULT one more array after the restart: http $code accepted in ${secs}s; rss $(rss) MiB; peak since the restart $(hwm) MiB"
