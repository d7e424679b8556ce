#!/usr/bin/env bash
# Start latency of one 1-GPU job on an idle cluster of real agents, phase by
# phase: a `rota server` (SQLite store in a temporary directory, a free
# loopback port) and NODES `rota agent` processes with declared 8-GPU
# inventories; SAMPLES jobs submitted one at a time, each waited for before
# the next, as a process and (if crun and a static busybox are there) as an
# OCI container. Per job, from clocks on this one machine:
#   commit  the client's POST until its answer (the job is durable), as
#           curl times it: not curl's own start, 25-30 ms on this machine
#   cycle   the server's submitted_at until its started_at (the cycle bound it)
#   push    started_at until the agent had the assignment (journal, watch)
#   start   the agent had it until the task's first write (its log's
#           modification time: the task writes `echo started` and exits)
#   launch  of which the agent's own launch returned (cgroup, records,
#           identity, fork/exec: a process may already be running by then)
#   total   commit, plus the server's submitted_at until the task's write
#           (the two overlap by the journal's write and the answer: an
#           upper bound)
# (File times come from the kernel's coarse clock: a few ms of error in
# `start` and `total`.) While a sample waits for its task, this script
# forks nothing (shell builtins only): a process started every few ms
# would take a core from the agents being measured.
# (submitted_at and started_at are the server's, to the millisecond.)
#
# usage: bench/start_latency.sh [SAMPLES] [NODES]      (default 200 64)
# Prints RESULT lines (p50 and p99 per phase). Everything it starts it stops by PID.
set -u
SAMPLES=${1:-200}
NODES=${2:-64}
. "$(dirname "$0")/lib.sh" start
chmod 755 "$R"
"$ROTA" server --data-dir "$R/data" --listen 127.0.0.1:0 --rate-limit 0 > "$R/server.log" 2>&1 &
PIDS+=($!)
wait_for_server "$R/server.log"
export ROTA_TOKEN=$(cat "$R/data/admin.token")
start_agents s "$NODES"

# A pipe nobody writes: `read -t` on it is a sleep without a fork.
exec {tick}<> <(:)
# Whether task log $1 has the task's line yet (builtins only).
started() {
  local line
  [ -f "$1" ] || return 1
  while IFS= read -r line; do [ "$line" = started ] && return 0; done < "$1"
  return 1
}
# One sample: submit, wait for the task's line in its log, collect the clocks.
measure() {  # $1: label, $2: job spec file
  local label=$1 spec=$2 out="$R/$1.samples"
  : > "$out"
  for _ in $(seq "$SAMPLES"); do
    local ans commit id log f exec_at
    ans=$(curl -s -w '\n%{time_total}' -H "Authorization: Bearer $ROTA_TOKEN" -H 'Content-Type: application/yaml' \
      --data-binary @"$spec" "$ROTA_SERVER/v1/jobs")
    commit=${ans##*$'\n'}
    id=$(grep -o '"id": *[0-9]*' <<< "$ans" | head -1 | grep -o '[0-9]*$')
    [ -n "$id" ] || { echo "submit failed: $ans"; return 1; }
    log= exec_at=
    for _ in {1..5000}; do
      for f in "$R"/logs/"$id"/*.log; do log=$f; break; done
      started "$log" && break
      read -t 0.001 -u "$tick" _ || true
    done
    [ -n "$log" ] && started "$log" && exec_at=$(stat -c %.9Y "$log")
    local job agent
    job=$(curl -s -H "Authorization: Bearer $ROTA_TOKEN" "$ROTA_SERVER/v1/jobs/$id")
    agent=$(grep -h "started job $id " "$R"/agent-*.log | head -1)
    echo "0 $commit $(grep -o '"submitted_at": *"[^"]*"' <<< "$job" | cut -d'"' -f4) \
$(grep -o '"started_at": *"[^"]*"' <<< "$job" | cut -d'"' -f4) \
$(grep -o 'received_at=[0-9.]*' <<< "$agent" | cut -d= -f2) $(grep -o 'launched_at=[0-9.]*' <<< "$agent" | cut -d= -f2) \
$exec_at" >> "$out"
    # Wait for it to end (an idle cluster for the next sample).
    for _ in $(seq 400); do
      grep -q '"state": *"succeeded"' <<< "$(curl -s -H "Authorization: Bearer $ROTA_TOKEN" "$ROTA_SERVER/v1/jobs/$id")" && break
      sleep 0.005
    done
  done
  python3 - "$label" "$out" <<'PY'
import sys, datetime
label, path = sys.argv[1], sys.argv[2]
def iso(s): return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
phases = {k: [] for k in ("commit", "cycle", "push", "start", "launch", "total")}
for line in open(path):
    f = line.split()
    if len(f) != 7: continue
    t0, t1, sub, start, recv, launched, ex = float(f[0]), float(f[1]), iso(f[2]), iso(f[3]), float(f[4]), float(f[5]), float(f[6])
    for k, v in (("commit", t1 - t0), ("cycle", start - sub), ("push", recv - start), ("start", ex - recv),
                 ("launch", launched - recv), ("total", t1 - t0 + ex - sub)):
        phases[k].append(v * 1000)
n = len(phases["total"])
def pct(v, p): v = sorted(v); return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")
print("RESULT start_latency %s n=%d " % (label, n) +
      " ".join("%s_p50/p99=%.1f/%.1fms" % (k, pct(v, 0.5), pct(v, 0.99)) for k, v in phases.items()))
PY
}
printf 'name: start\ntasks: [{gpus: 1, command: [sh, -c, "echo started"]}]\n' > "$R/process.yaml"
measure process "$R/process.yaml"
BUSYBOX=$(command -v busybox || true)
if command -v crun > /dev/null && [ -n "$BUSYBOX" ] && file -L "$BUSYBOX" | grep -q static; then
  mkdir -p "$R/image/rootfs/bin"
  cp "$BUSYBOX" "$R/image/rootfs/bin/busybox"
  ln -s busybox "$R/image/rootfs/bin/sh"
  chmod -R a+rX "$R/image"
  printf 'name: start\ntasks: [{gpus: 1, rootfs: %s, command: [/bin/sh, -c, "echo started"]}]\n' "$R/image" > "$R/oci.yaml"
  measure oci "$R/oci.yaml"
else
  echo "RESULT start_latency oci skipped (needs crun and a static busybox)"
fi
