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
