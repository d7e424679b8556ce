# Shared by the benchmark scripts: `. "$(dirname "$0")/lib.sh" NAME` sets
# ROTA (the binary, unless given), R (a fresh scratch directory) and PIDS;
# everything appended to PIDS is stopped, and R removed, when the script exits.
ROTA=${ROTA:-$(cd "$(dirname "$0")/.." && pwd)/build/src/cli/rota}
R=$(mktemp -d "/tmp/rota-$1-XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$R"
}
trap cleanup EXIT

# Waits for the server logging to $1 to say where it serves; exports ROTA_SERVER.
wait_for_server() {
  for _ in $(seq 100); do grep -q "serving http" "$1" && break; sleep 0.1; done
  export ROTA_SERVER=$(grep -o "http://127.0.0.1:[0-9]*" "$1" | head -1)
}

# Starts $2 agents named $1-0 .. $1-(N-1) (8 simulated H100s each, their logs
# under $R/logs, their state in $R/state-I), each with its own agent token and
# the agent flags after $2; waits until the server counts them all ready.
start_agents() {
  local prefix=$1 count=$2
  shift 2
  mkdir -p "$R/logs"
  for i in $(seq 0 $((count - 1))); do
    "$ROTA" token create --user "$prefix-$i" --role agent --node "$prefix-$i" > "$R/agent-$i.token"
    "$ROTA" agent --server "$ROTA_SERVER" --token-file "$R/agent-$i.token" --name "$prefix-$i" --address 127.0.0.1 \
      --gpus 8xH100:80Gi --logs-dir "$R/logs" --state-dir "$R/state-$i" "$@" > "$R/agent-$i.log" 2>&1 &
    PIDS+=($!)
  done
  for _ in $(seq 200); do
    [ "$("$ROTA" nodes | grep -c " ready ")" -ge "$count" ] && break
    sleep 0.1
  done
}
