#!/usr/bin/env bash
# One user flooding the server with large job listings, as a careless script
# or a hostile tenant would: a `rota server` (SQLite store in a temporary
# directory, no agents, no rate limit) on a loopback port takes a
# 100,000-job array, then 400 `GET /v1/jobs?limit=10000&all=true` from the
# admin, 200 at a time. Meanwhile another user lists 10 jobs and /healthz is
# asked once. Prints the flood's wall time, the other user's and /healthz's
# answer times, the server's peak RSS (VmHWM) and the status codes.
# Run it with the binary before a change (ROTA=/path/to/old/rota) and after,
# in the same hour: the figures are this machine's.
#
# usage: bench/listing_flood.sh [PORT]    (default 17601)
# env:   ROTA (default build/src/cli/rota)
set -euo pipefail
B=${ROTA:-build/src/cli/rota}
P=${1:-17601}
D=$(mktemp -d)
trap 'kill $SP 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$D"' EXIT
"$B" server --data-dir "$D/data" --listen 127.0.0.1:$P --rate-limit 0 > "$D/server.log" 2>&1 &
SP=$!
for _ in $(seq 50); do [ -s "$D/data/admin.token" ] && curl -sf -o /dev/null http://127.0.0.1:$P/healthz && break; sleep 0.1; done
T=$(cat "$D/data/admin.token"); S=http://127.0.0.1:$P
curl -sf -o /dev/null -X POST "$S/v1/jobs?count=100000" -H "Authorization: Bearer $T" -H 'Content-Type: application/yaml' \
  --data-binary $'name: many\ntasks: [{gpus: 0, cpu: 1, command: ["true"]}]\n'
BT=$(curl -sf -X POST $S/v1/tokens -H "Authorization: Bearer $T" -d '{"user":"bob"}' | python3 -c 'import json,sys;print(json.load(sys.stdin)["token"])')
start=$(date +%s.%N)
( seq 1 400 | xargs -P 200 -I{} curl -s -o /dev/null -w '%{http_code}\n' "$S/v1/jobs?limit=10000&all=true" \
    -H "Authorization: Bearer $T" > "$D/codes.txt" ) &
FP=$!
sleep 1
bob=$( { /usr/bin/time -f %e curl -s -o /dev/null "$S/v1/jobs?limit=10" -H "Authorization: Bearer $BT"; } 2>&1 )
hz=$( { /usr/bin/time -f %e curl -s -o /dev/null "$S/healthz"; } 2>&1 )
wait $FP
end=$(date +%s.%N)
echo "binary=$B flood_s=$(echo "$end - $start" | bc) other_user_list_s=$bob healthz_s=$hz" \
     "$(grep VmHWM /proc/$SP/status | tr -s ' \t' ' ') codes: $(sort "$D/codes.txt" | uniq -c | tr -s ' \n' ' ')"
