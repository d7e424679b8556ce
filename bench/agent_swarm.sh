#!/usr/bin/env bash
# Runs bench/agent_swarm against a fresh `rota server` (SQLite store in a
# temporary directory, a free loopback port) for each node count given.
#
# usage: bench/agent_swarm.sh [NODES...]      e.g. bench/agent_swarm.sh 1250 12500
# env:   JOBS (default 2000), RUN_MS (1000), HEARTBEAT_MS (1000), IDLE_S (10), NODE_TIMEOUT (30s)
# Prints the swarm's RESULT lines per node count. Everything it starts it stops by PID.
set -u
BUILD=${BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
ROTA=${ROTA:-$BUILD/src/cli/rota}
SWARM=${SWARM:-$BUILD/bench/agent_swarm}
JOBS=${JOBS:-2000}
RUN_MS=${RUN_MS:-1000}
HEARTBEAT_MS=${HEARTBEAT_MS:-1000}
IDLE_S=${IDLE_S:-10}
NODE_TIMEOUT=${NODE_TIMEOUT:-30s}
status=0
for NODES in "${@:-1250}"; do
  R=$(mktemp -d /tmp/rota-swarm-XXXXXX)
  "$ROTA" server --data-dir "$R/data" --listen 127.0.0.1:0 --rate-limit 0 --node-timeout "$NODE_TIMEOUT" \
    > "$R/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 100); do grep -q "serving http" "$R/server.log" && break; sleep 0.1; done
  URL=$(grep -o "http://127.0.0.1:[0-9]*" "$R/server.log" | head -1)
  echo "== $NODES nodes x 8 GPUs, $JOBS jobs of ${RUN_MS} ms, heartbeat ${HEARTBEAT_MS} ms"
  "$SWARM" --server "$URL" --token "$(cat "$R/data/admin.token")" --server-pid "$SERVER" --nodes "$NODES" \
    --jobs "$JOBS" --run-ms "$RUN_MS" --heartbeat-ms "$HEARTBEAT_MS" --idle-s "$IDLE_S" || status=1
  kill -TERM "$SERVER" 2>/dev/null
  wait "$SERVER" 2>/dev/null
  rm -rf "$R"
done
exit $status
