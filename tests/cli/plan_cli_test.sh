#!/usr/bin/env bash
# `rota plan` through the real binary: deterministic bytes, JSON shape, exit codes.
set -euo pipefail
rota="$1"
src="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$rota" plan --cluster "$src/examples/cluster.yaml" --jobs "$src/examples/jobs.yaml" -o json > "$tmp/a.json"
"$rota" plan --cluster "$src/examples/cluster.yaml" --jobs "$src/examples/jobs.yaml" -o json > "$tmp/b.json"
cmp -s "$tmp/a.json" "$tmp/b.json" || fail "two runs differ"
for key in '"placements"' '"pending"' '"rejected"' '"llama-8b-pretrain"' '"ExceedsDomainCapacity"'; do
  grep -q "$key" "$tmp/a.json" || fail "json lacks $key"
done
"$rota" plan --cluster "$src/examples/cluster.yaml" --jobs "$src/examples/jobs.yaml" > "$tmp/table.txt"
grep -q "^Placements (11)" "$tmp/table.txt" || fail "table output: $(head -1 "$tmp/table.txt")"

printf 'jobs:\n  - name: x\n    tasks: [{gpus: two}]\n' > "$tmp/bad.yaml"
set +e
"$rota" plan --cluster "$src/examples/cluster.yaml" --jobs "$tmp/bad.yaml" 2> "$tmp/err.txt"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "malformed jobs file exited $rc, want 2"
grep -q "bad.yaml:3:20: jobs\[0\].tasks\[0\].gpus: must be a whole number, got 'two'" "$tmp/err.txt" || fail "error text: $(cat "$tmp/err.txt")"
set +e
"$rota" plan --cluster "$tmp/missing.yaml" --jobs "$tmp/bad.yaml" 2>/dev/null
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "missing file exited $rc, want 2"
# Without `now:`, a plan preempts (running jobs without started_at have run
# the minimum runtime) and names jobs by their names, not their file order.
printf 'node_groups:\n  - {name: n, count: 1, gpus: 8, gpu_model: H100}\n' > "$tmp/one.yaml"
cat > "$tmp/busy.yaml" <<'JOBS'
jobs:
  - {name: low-a, priority: low, tasks: [{gpus: 8}], state: running, placement: [{node: n-0, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}]}
  - {name: urgent, priority: high, tasks: [{gpus: 8}]}
JOBS
"$rota" plan --cluster "$tmp/one.yaml" --jobs "$tmp/busy.yaml" > "$tmp/busy.txt"
grep -q "preempting job low-a to make room" "$tmp/busy.txt" || fail "no-clock plan: $(cat "$tmp/busy.txt")"
grep -q "preempted for job urgent (priority 1000 > 100)" "$tmp/busy.txt" || fail "preemption reason: $(cat "$tmp/busy.txt")"
echo "plan_cli_test: ok"
