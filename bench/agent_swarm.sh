#!/usr/bin/env bash
# Runs bench/agent_swarm against a fresh `rota server` (SQLite store in a
# temporary directory, a free loopback port) for each node count given.
#
# usage: bench/agent_swarm.sh [NODES...]      e.g. bench/agent_swarm.sh 1250 12500
# env:   TRANSPORT (watch, or poll: the older long poll), JOBS (2000), RUN_MS (1000),
#        HEARTBEAT_MS (the server's interval, NODE_TIMEOUT / 3), IDLE_S (10), NODE_TIMEOUT (30s),
#        RESTART (1: kill -9 and restart the server under the swarm, then check nothing was lost),
#        IDLE_SOCKETS, SLOW_SOCKETS (hostile clients held open throughout; default 0),
#        REPORTS (keep: reports on a kept-alive connection per node, as `rota agent` sends
#        them; fresh: a new connection each. Default keep where the open-file limit holds
#        two sockets a node in the swarm and in the server, else fresh, said in the header),
#        SWARM_NICE (0: the swarm's nice value; it stands for other machines, and at
#        10 takes less of the cores the server is measured on), KEEP_LOG (the server's
#        log is copied to KEEP_LOG.NODES)
# Prints the swarm's RESULT lines per node count. Everything it starts it stops by PID.
set -u
BUILD=${BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
ROTA=${ROTA:-$BUILD/src/cli/rota}
SWARM=${SWARM:-$BUILD/bench/agent_swarm}
TRANSPORT=${TRANSPORT:-watch}
JOBS=${JOBS:-2000}
RUN_MS=${RUN_MS:-1000}
IDLE_S=${IDLE_S:-10}
NODE_TIMEOUT=${NODE_TIMEOUT:-30s}
NODE_TIMEOUT_S=${NODE_TIMEOUT%s}
HEARTBEAT_MS=${HEARTBEAT_MS:-$((NODE_TIMEOUT_S * 1000 / 3))}
RESTART=${RESTART:-0}
TIMEOUT_S=${TIMEOUT_S:-300}
IDLE_SOCKETS=${IDLE_SOCKETS:-0}
SLOW_SOCKETS=${SLOW_SOCKETS:-0}
ulimit -n 262144 2>/dev/null || ulimit -n "$(ulimit -Hn)"  # the swarm holds a watch per node
status=0
for NODES in "${@:-1250}"; do
  R=$(mktemp -d /tmp/rota-swarm-XXXXXX)
  # Starts a server on address $1 in the background, writes its PID to
  # $R/pid and, once it exits, its exit status to $R/rc.PID (a server
  # restarted by restart.sh is not this shell's child: its status comes back
  # the same way).
  cat > "$R/launch.sh" <<EOS
#!/usr/bin/env bash
"$ROTA" server --data-dir "$R/data" --listen "\$1" --rate-limit 0 --node-timeout "$NODE_TIMEOUT" \
  >> "$R/server.log" 2>&1 < /dev/null &
pid=\$!
echo \$pid > "$R/pid.new" && mv "$R/pid.new" "$R/pid"
wait \$pid 2> /dev/null
echo \$? > "$R/rc.\$pid"
EOS
  chmod +x "$R/launch.sh"
  "$R/launch.sh" 127.0.0.1:0 &
  for _ in $(seq 100); do [ -s "$R/pid" ] && break; sleep 0.05; done
  for _ in $(seq 100); do grep -q "serving http" "$R/server.log" && break; sleep 0.1; done
  URL=$(grep -o "http://127.0.0.1:[0-9]*" "$R/server.log" | head -1)
  # The restart: kill -9, start again on the same port and data, print the new PID.
  cat > "$R/restart.sh" <<EOS
#!/usr/bin/env bash
kill -9 \$(cat "$R/pid"); while kill -0 \$(cat "$R/pid") 2>/dev/null; do sleep 0.01; done
n=\$(grep -c "serving http" "$R/server.log")
old=\$(cat "$R/pid")
"$R/launch.sh" "${URL#http://}" > /dev/null 2>&1 &
for _ in \$(seq 500); do [ "\$(cat "$R/pid")" != "\$old" ] && break; sleep 0.01; done
for _ in \$(seq 500); do [ "\$(grep -c "serving http" "$R/server.log")" -gt "\$n" ] && break; sleep 0.02; done
cat "$R/pid"
EOS
  chmod +x "$R/restart.sh"
  restart=()
  [ "$RESTART" = 1 ] && restart=(--restart-cmd "$R/restart.sh" --grace-s $((NODE_TIMEOUT_S + 5)))
  reports=${REPORTS:-}
  if [ -z "$reports" ]; then
    reports=keep
    [ "$(ulimit -n)" -lt $((2 * NODES + IDLE_SOCKETS + SLOW_SOCKETS + 2000)) ] && reports=fresh
  fi
  echo "== $NODES nodes x 8 GPUs, transport $TRANSPORT, $JOBS jobs of ${RUN_MS} ms, heartbeat ${HEARTBEAT_MS} ms, reports $reports (open files $(ulimit -n))"
  nice -n "${SWARM_NICE:-0}" "$SWARM" --server "$URL" --token "$(cat "$R/data/admin.token")" --server-pid "$(cat "$R/pid")" --nodes "$NODES" \
    --transport "$TRANSPORT" --reports "$reports" --jobs "$JOBS" --run-ms "$RUN_MS" --heartbeat-ms "$HEARTBEAT_MS" --idle-s "$IDLE_S" \
    --timeout-s "$TIMEOUT_S" --idle-sockets "$IDLE_SOCKETS" --slow-sockets "$SLOW_SOCKETS" "${restart[@]}" || status=1
  pid=$(cat "$R/pid")
  kill -TERM "$pid" 2>/dev/null
  # A server that died under the swarm (or on its way out) fails the run.
  for _ in $(seq 600); do [ -s "$R/rc.$pid" ] && break; sleep 0.1; done
  if [ ! -s "$R/rc.$pid" ]; then  # hung on its way out: nothing is left running
    kill -9 "$pid" 2>/dev/null
    for _ in $(seq 50); do [ -s "$R/rc.$pid" ] && break; sleep 0.1; done
    echo "RESULT server still running 60 s after SIGTERM: killed"
  fi
  rc=$(cat "$R/rc.$pid" 2>/dev/null || echo unknown)
  if [ "$rc" != 0 ]; then
    echo "RESULT server exited with status $rc"
    status=1
  fi
  [ "$status" = 0 ] || tail -20 "$R/server.log"
  [ -n "${KEEP_LOG:-}" ] && cp "$R/server.log" "$KEEP_LOG.$NODES"
  rm -rf "$R"
done
exit $status
