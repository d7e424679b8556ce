#!/usr/bin/env bash
# Cancelling a long queue at once, as an operator clearing it would: a
# `rota server` (SQLite store in a temporary directory, 4 declared 8-GPU
# nodes and no agents: 32 jobs are bound to the declared GPUs, the rest stay
# pending) on a free loopback port takes ARRAYS arrays of 100,000 1-GPU
# jobs, then `rota cancel --state pending` cancels the pending ones (10,000
# to a request, one journal write each). Prints the
# time the cancel took and the server's RSS before it, at its peak from the
# cancel on (VmHWM, reset just before), and SETTLE_S seconds after, with the
# same figures for the same server cancelling one job a request
# (BASELINE=1: each id through POST /v1/jobs/ID/cancel, as `rota cancel`
# did before bulk cancels; slow: about 870 a second here).
#
# With RETENTION (a duration, e.g. 5s: the server's --job-retention), the
# cancelled jobs are forgotten within SETTLE_S (make it longer than the
# retention plus a minute's pass at most), and it prints how many jobs the
# server still holds (rota_jobs_held) beside the RSS.
#
# usage: bench/mass_cancel.sh [ARRAYS]        (default 2: 200,000 jobs)
# env:   SETTLE_S (default 20), BASELINE (default 0), RETENTION (default: the server's, 14d)
# Prints RESULT lines. Everything it starts it stops by PID.
set -u
ARRAYS=${1:-2}
SETTLE_S=${SETTLE_S:-20}
. "$(dirname "$0")/lib.sh" cancel
cat > "$R/cluster.yaml" <<'YAML'
node_groups: [{name: n, count: 4, gpus: 8, gpu_model: H100, gpu_memory: 80Gi, cpu: 64, memory: 512Gi}]
limits: {max_pending_per_user: 10000000, max_pending_per_queue: 10000000, submit_rate: 10000000}
YAML
RETAIN=()
[ -n "${RETENTION:-}" ] && RETAIN=(--job-retention "$RETENTION")
"$ROTA" server --data-dir "$R/data" --listen 127.0.0.1:0 --config "$R/cluster.yaml" --rate-limit 0 "${RETAIN[@]}" >> "$R/server.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
wait_for_server "$R/server.log"
URL=$ROTA_SERVER
export ROTA_TOKEN=$(cat "$R/data/admin.token")
JOB='{"name": "j", "tasks": [{"gpus": 1, "command": ["true"]}]}'
for _ in $(seq "$ARRAYS"); do
  curl -s -o /dev/null -H "Authorization: Bearer $ROTA_TOKEN" -H 'Content-Type: application/json' -d "$JOB" \
    "$URL/v1/jobs?count=100000"
done
rss() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$SERVER/status"; }
hwm() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$SERVER/status"; }
now() { date +%s.%N; }
sleep 3
before=$(rss)
echo 5 > "/proc/$SERVER/clear_refs" 2>/dev/null || echo "RESULT (the peak cannot be reset here: it includes the arrays)"
t0=$(now)
if [ "${BASELINE:-0}" = 1 ]; then
  # As the CLI did before: list the pending jobs a page at a time, then one
  # POST per job on one keep-alive connection.
  python3 - "$URL" "$ROTA_TOKEN" <<'PY'
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(url.hostname, url.port)
h = {"Authorization": "Bearer " + sys.argv[2]}
ids, after = [], 0
while True:
    c.request("GET", "/v1/jobs?state=pending&limit=10000&after=%d" % after, headers=h)
    page = json.loads(c.getresponse().read())
    ids += [j["id"] for j in page["jobs"]]
    if "next_after" not in page:
        break
    after = page["next_after"]
for i in ids:
    c.request("POST", "/v1/jobs/%d/cancel" % i, body="", headers=h)
    c.getresponse().read()
PY
  how="one job a request"
else
  "$ROTA" cancel --state pending > /dev/null
  how="rota cancel --state pending"
fi
t1=$(now)
after=$(rss)
sleep "$SETTLE_S"
left=$(curl -s -H "Authorization: Bearer $ROTA_TOKEN" "$URL/v1/jobs?state=pending&limit=1" |
  python3 -c 'import json, sys; print(len(json.load(sys.stdin)["jobs"]))')
echo "RESULT $((ARRAYS * 100000)) pending jobs cancelled ($how) in $(echo "$t1 - $t0" | bc)s; pending left: $left"
echo "RESULT server rss before ${before} MiB, right after ${after} MiB, peak from the cancel on $(hwm) MiB, ${SETTLE_S}s later $(rss) MiB"
held=$(curl -s -H "Authorization: Bearer $ROTA_TOKEN" "$URL/metrics" | awk '$1 == "rota_jobs_held" {print $2}')
echo "RESULT jobs the server holds ${SETTLE_S}s later: ${held} (job retention: ${RETENTION:-14d, the default})"
