#!/usr/bin/env bash
# The agent's own CPU with its GPU meter (issue 21: under 1% of a core for
# 8 GPUs): a `rota server` and two `rota agent` processes with declared
# 8-GPU inventories, idle, in the same run: one metering at 1 Hz (the
# default), the baseline with the meter off (--meter-ms 0). Each one's user
# and system CPU over SECONDS (from /proc/PID/stat), as a share of a core.
#
# Declared GPUs: the meter's readings are synthetic, so this is the cost of
# rota's sampling, folding and reporting, not of the NVML calls themselves
# (scripts/gpu-check.sh's probe reads a real driver).
#
# usage: bench/agent_meter_cost.sh [SECONDS]      (default 60)
set -u
SECONDS_=${1:-60}
. "$(dirname "$0")/lib.sh" meter
"$ROTA" server --data-dir "$R/data" --listen 127.0.0.1:0 --rate-limit 0 > "$R/server.log" 2>&1 &
PIDS+=($!)
wait_for_server "$R/server.log"
export ROTA_TOKEN=$(cat "$R/data/admin.token")
declare -A AGENT
for kind in meter baseline; do
  "$ROTA" token create --user "$kind" --role agent --node "$kind" > "$R/$kind.token"
  flags=()
  [ "$kind" = baseline ] && flags=(--meter-ms 0)
  "$ROTA" agent --server "$ROTA_SERVER" --token-file "$R/$kind.token" --name "$kind" --address 127.0.0.1 \
    --gpus 8xH100:80Gi --logs-dir "$R/logs-$kind" --state-dir "$R/state-$kind" "${flags[@]}" > "$R/$kind.log" 2>&1 &
  PIDS+=($!)
  AGENT[$kind]=$!
done
for _ in $(seq 200); do [ "$("$ROTA" nodes | grep -c " ready ")" -ge 2 ] && break; sleep 0.1; done
sleep 5
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
declare -A T0
for kind in meter baseline; do T0[$kind]=$(ticks "${AGENT[$kind]}"); done
sleep "$SECONDS_"
for kind in meter baseline; do
  used=$(( $(ticks "${AGENT[$kind]}") - ${T0[$kind]} ))
  echo "RESULT agent_cpu_${kind}_pct $(awk -v u="$used" -v hz="$hz" -v s="$SECONDS_" 'BEGIN { printf "%.3f", 100 * u / hz / s }')"
done
echo "(ticks at $hz Hz over ${SECONDS_} s; the meter's own share is the difference)"
