#!/usr/bin/env bash
# End-to-end throughput of rota on one machine, shaped like ../shared/peers/slurm/bench.sh so the
# two can be run in the same hour and compared: NODES emulated nodes with 8 simulated GPUs each
# (one `rota agent` process per node, like one slurmd per node), N short jobs submitted one after
# another with the CLI (like sbatch), measured until all have started and all have finished.
# Workloads array1 and arraygang submit them with one `rota submit --count N` (a job array, like the
# peer's `sbatch --array`); gpu1, gpu8 and gang with one CLI call per job (like sbatch in a loop).
#
# usage: bench/e2e_bench.sh N NODES [GANG_N]      e.g. bench/e2e_bench.sh 2000 64 200
# env:   WORKLOADS (default "gpu1 gpu8 gang"), JOB_CMD (default true), HEARTBEAT_MS (default 1000)
# Prints one RESULT line per workload. Everything it starts it stops by PID.
set -u
N=${1:-2000}
NODES=${2:-16}
GANG_N=${3:-$(( N / 10 ))}
WORKLOADS=${WORKLOADS:-"gpu1 gpu8 gang"}
JOB_CMD=${JOB_CMD:-true}
HEARTBEAT_MS=${HEARTBEAT_MS:-1000}
. "$(dirname "$0")/lib.sh" e2e
now() { date +%s.%N; }
el() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }

cat > "$R/cluster.yaml" <<YAML
node_groups: [{name: g, count: $NODES, gpus: 8, gpu_model: H100, gpu_memory: 80Gi, cpu: 64, memory: 500Gi, nodes_per_rack: 8}]
YAML
"$ROTA" server --data-dir "$R/data" --listen 127.0.0.1:0 --config "$R/cluster.yaml" --rate-limit 0 > "$R/server.log" 2>&1 &
PIDS+=($!)
wait_for_server "$R/server.log"
export ROTA_TOKEN=$(cat "$R/data/admin.token")
for i in $(seq 0 $((NODES - 1))); do
  "$ROTA" token create --user "g-$i" --role agent --node "g-$i" > "$R/agent-$i.token"
  "$ROTA" agent --server "$ROTA_SERVER" --token-file "$R/agent-$i.token" --name "g-$i" --address 127.0.0.1 --gpus 8xH100:80Gi \
    --logs-dir "$R/logs" --heartbeat-ms "$HEARTBEAT_MS" > "$R/agent-$i.log" 2>&1 &
  PIDS+=($!)
done
for _ in $(seq 100); do
  ready=$("$ROTA" nodes | grep -c " ready ")
  [ "$ready" -ge "$NODES" ] && break
  sleep 0.2
done

count_state() { "$ROTA" jobs --all --limit 0 -o json | grep -o "\"state\": \"$1\"" | wc -l; }
run_workload() {
  local name=$1 count=$2 spec=$3
  local first=$(( $("$ROTA" jobs --all --limit 0 -o json | grep -c '"id"') ))
  printf '%s\n' "$spec" > "$R/$name.yaml"
  local t0=$(now)
  if [ "${name#array}" != "$name" ]; then
    "$ROTA" submit "$R/$name.yaml" --count "$count" > /dev/null || echo "submit failed"
  else
    for i in $(seq "$count"); do "$ROTA" submit "$R/$name.yaml" > /dev/null || echo "submit failed"; done
  fi
  local t_sub=$(now)
  local started="" done_t=""
  while true; do
    local json=$("$ROTA" jobs --all --limit 0 -o json)
    local pending=$(grep -o '"state": "pending"' <<< "$json" | wc -l)
    local running=$(grep -o '"state": "running"' <<< "$json" | wc -l)
    [ -z "$started" ] && [ "$pending" -eq 0 ] && started=$(now)
    if [ "$pending" -eq 0 ] && [ "$running" -eq 0 ]; then done_t=$(now); break; fi
    sleep 0.2
  done
  # Per-job wait = started_at - submitted_at, from the server's own timestamps.
  local waits=$("$ROTA" jobs --all --limit 0 -o json | python3 -c '
import json, sys, datetime
def t(s): return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
jobs = [j for j in json.load(sys.stdin)["jobs"] if j["id"] > '"$first"' and j["started_at"]]
w = sorted(t(j["started_at"]) - t(j["submitted_at"]) for j in jobs)
print("%.2f %.2f" % (w[len(w)//2], w[min(len(w)-1, int(len(w)*0.99))]))')
  echo "RESULT rota workload=$name jobs=$count nodes=$NODES submit_s=$(el "$t0" "$t_sub") all_started_s=$(el "$t0" "$started") all_done_s=$(el "$t0" "$done_t") jobs_per_s=$(awk -v n="$count" -v a="$t0" -v b="$done_t" 'BEGIN{printf "%.1f", n/(b-a)}') wait_p50_p99_s=$waits"
}
for w in $WORKLOADS; do
  case $w in
    gpu1) run_workload gpu1 "$N" "{name: gpu1, tasks: [{gpus: 1, command: [$JOB_CMD]}]}" ;;
    array1) run_workload array1 "$N" "{name: array1, tasks: [{gpus: 1, command: [$JOB_CMD]}]}" ;;
    gpu8) run_workload gpu8 "$N" "{name: gpu8, tasks: [{gpus: 8, command: [$JOB_CMD]}]}" ;;
    gang) run_workload gang "$GANG_N" "{name: gang, tasks: [{replicas: 4, gpus: 8, command: [$JOB_CMD]}]}" ;;
    arraygang) run_workload arraygang "$GANG_N" "{name: arraygang, tasks: [{replicas: 4, gpus: 8, command: [$JOB_CMD]}]}" ;;
  esac
done
