#!/usr/bin/env bash
# `rota sim` through the real binary: JSON keys, reports, determinism, exit codes.
set -euo pipefail
rota="$1"
src="$2"
traces="$src/../shared/traces"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Wall-clock figures differ between runs; everything else must not.
stable() { grep -v -e '"wall_s"' -e '"sim_days_per_wall_s"' -e '"cycle_p50_ms"' -e '"cycle_p99_ms"' "$1"; }

# A rota-format trace on the example cluster, through the engine.
"$rota" sim --cluster "$src/examples/cluster.yaml" --trace "$src/examples/trace.csv" --format rota \
  --compare fifo,tiresias,rota -o json --out "$tmp/out" > "$tmp/a.json"
"$rota" sim --cluster "$src/examples/cluster.yaml" --trace "$src/examples/trace.csv" --format rota \
  --compare fifo,tiresias,rota -o json > "$tmp/b.json"
cmp -s <(stable "$tmp/a.json") <(stable "$tmp/b.json") || fail "two runs differ"
for key in '"fifo"' '"tiresias"' '"rota"' '"jobs": 12' '"avg_jct_s"' '"p50_jct_s"' '"p99_jct_s"' '"avg_queue_s"' \
           '"makespan_s"' '"gpu_alloc_pct_mean"' '"jain"' '"preemptions"' '"lost_gpu_hours"' '"wall_s"' \
           '"sim_days_per_wall_s"' '"unfinished": 0'; do
  grep -q "$key" "$tmp/a.json" || fail "json lacks $key"
done
for f in summary.json report.html jobs-rota.csv timeline-fifo.csv; do
  [ -s "$tmp/out/$f" ] || fail "--out lacks $f"
done
grep -q "<svg" "$tmp/out/report.html" || fail "report has no chart"
grep -q "JCT CDF" "$tmp/out/report.html" || fail "report lacks the JCT CDF"
if grep -q -e "<script" -e "http://" -e "https://" <(grep -v 'xmlns="http://www.w3.org/2000/svg"' "$tmp/out/report.html"); then
  fail "report is not self-contained"
fi
grep -q "^pretrain-a,research/nlp,64," "$tmp/out/jobs-rota.csv" || fail "jobs csv: $(head -2 "$tmp/out/jobs-rota.csv")"

# The production profile: the example cluster's queues, quotas and profile, and with a
# preemptive order (tiresias) in its plugins; deterministic too.
"$rota" sim --cluster "$src/examples/cluster.yaml" --trace "$src/examples/trace.csv" --format rota \
  --policy profile --grace 60s -o json > "$tmp/p1.json"
"$rota" sim --cluster "$src/examples/cluster.yaml" --trace "$src/examples/trace.csv" --format rota \
  --policy profile --grace 60s -o json > "$tmp/p2.json"
cmp -s <(stable "$tmp/p1.json") <(stable "$tmp/p2.json") || fail "two profile runs differ"
grep -q '"jobs": 12' "$tmp/p1.json" || fail "profile: $(cat "$tmp/p1.json")"
grep -q '"unfinished": 0' "$tmp/p1.json" || fail "profile left jobs unfinished: $(cat "$tmp/p1.json")"
sed 's/plugins: \[priority, fifo,/plugins: [priority, tiresias, fifo,/' "$src/examples/cluster.yaml" > "$tmp/tiresias.yaml"
grep -q 'tiresias, fifo' "$tmp/tiresias.yaml" || fail "could not add tiresias to the example profile"
"$rota" sim --cluster "$tmp/tiresias.yaml" --trace "$src/examples/trace.csv" --format rota --policy profile --grace 60s -o json \
  > "$tmp/p3.json"
grep -q '"unfinished": 0' "$tmp/p3.json" || fail "profile with tiresias: $(cat "$tmp/p3.json")"
cmp -s <(stable "$tmp/p1.json") <(stable "$tmp/p3.json") && fail "the job order made no difference"
set +e
"$rota" sim --cluster "$src/examples/cluster.yaml" --trace "$src/examples/trace.csv" --format rota --policy profile \
  --placement count > /dev/null 2> "$tmp/err.txt"
set -e
grep -qF "the production profile places with its own plugins" "$tmp/err.txt" || fail "profile + count: $(cat "$tmp/err.txt")"

# Table output with failures injected.
"$rota" sim --cluster "$src/examples/cluster.yaml" --trace "$src/examples/trace.csv" --format rota \
  --policy tiresias --failures 0.001 > "$tmp/table.txt"
grep -q "^POLICY" "$tmp/table.txt" || fail "table: $(cat "$tmp/table.txt")"

# A Tiresias cluster spec and trace, GPU counting.
if [ -d "$traces/tiresias-sample" ]; then
  "$rota" sim --cluster "$traces/tiresias-sample/n1g4.csv" --trace "$traces/tiresias-sample/60_job.csv" \
    --format tiresias --placement count --policy srtf -o json > "$tmp/t.json"
  grep -q '"jobs": 60' "$tmp/t.json" || fail "tiresias sample: $(cat "$tmp/t.json")"
  grep -q '"unfinished": 10' "$tmp/t.json" || fail "8-GPU jobs on a 4-GPU cluster should never run"
fi

# openb: the FGD experiment.
if [ -d "$traces/alibaba-v2023" ]; then
  "$rota" sim --nodes "$traces/alibaba-v2023/openb_node_list_gpu_node.csv" \
    --trace "$traces/alibaba-v2023/openb_pod_list_gpushare40.csv" --format openb --compare rota,fgd,bestfit \
    -o json --out "$tmp/openb" > "$tmp/o.json"
  grep -q '"alloc_pct_by_arrived"' "$tmp/o.json" || fail "openb json lacks alloc_pct_by_arrived"
  n=$(tr -d ' \n' < "$tmp/openb/summary.json" | grep -o '"alloc_pct_by_arrived":\[[^]]*\]' | head -1 | tr ',' '\n' | wc -l)
  [ "$n" -eq 131 ] || fail "alloc_pct_by_arrived has $n numbers, want 131"
  [ -s "$tmp/openb/steps-fgd.csv" ] || fail "openb --out lacks steps-fgd.csv"
fi

# Services: the example service under two hours of rising traffic, alone (no trace) and beside
# the example trace; deterministic for a seed. (`job:` is relative to the file, or absolute.)
cat > "$tmp/svc.yaml" <<EOF
services:
  - job: $src/examples/services/chat.yaml
    requests: {rate: [[0s, 0], [1m, 20], [30m, 120], [1h, 240], [2h, 0]], work: 150ms, concurrency: 6, startup: 45s}
EOF
"$rota" sim --cluster "$src/examples/cluster.yaml" --policy profile --services "$tmp/svc.yaml" --out "$tmp/svc1" > "$tmp/svc.txt"
grep -q '^profile  *chat ' "$tmp/svc.txt" || fail "no service row: $(cat "$tmp/svc.txt")"
grep -q 'trace: none (services only)' "$tmp/svc.txt" || fail "services alone: $(cat "$tmp/svc.txt")"
grep -q ',decided,' "$tmp/svc1/scaling-profile.csv" || fail "no scaling decision: $(cat "$tmp/svc1/scaling-profile.csv")"
grep -q '"services"' "$tmp/svc1/summary.json" || fail "summary.json lacks services"
"$rota" sim --cluster "$src/examples/cluster.yaml" --policy profile --services "$tmp/svc.yaml" --out "$tmp/svc2" > /dev/null
cmp -s "$tmp/svc1/scaling-profile.csv" "$tmp/svc2/scaling-profile.csv" || fail "two runs scaled differently"
"$rota" sim --cluster "$src/examples/cluster.yaml" --policy profile --services "$tmp/svc.yaml" \
  --trace "$src/examples/trace.csv" --format rota > "$tmp/svc3.txt"
grep -q '^profile  *chat ' "$tmp/svc3.txt" || fail "no service row beside a trace: $(cat "$tmp/svc3.txt")"

# Bad input: a precise error, exit 2.
expect_error() {
  local want="$1"; shift
  set +e
  "$rota" sim "$@" > /dev/null 2> "$tmp/err.txt"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "'$*' exited $rc, want 2"
  grep -qF -- "$want" "$tmp/err.txt" || fail "'$*': error text: $(cat "$tmp/err.txt")"
}
printf 'name,submit_s,duration_s,gpus\na,0,10,1\nb,5,ten,1\n' > "$tmp/bad.csv"
expect_error "bad.csv:3: duration_s: not a number of seconds: 'ten'" \
  --cluster "$src/examples/cluster.yaml" --trace "$tmp/bad.csv" --format rota
expect_error "--format: required with --trace" --cluster "$src/examples/cluster.yaml" --trace "$tmp/bad.csv"
expect_error "--format: unknown trace format 'slurm'" --cluster "$src/examples/cluster.yaml" --trace "$tmp/bad.csv" --format slurm
expect_error "--policy: unknown policy 'lottery'" --cluster "$src/examples/cluster.yaml" --trace "$src/examples/trace.csv" \
  --format rota --policy lottery
expect_error "--failures: must be a rate per GPU-hour in [0, 1], got 'often'" --cluster "$src/examples/cluster.yaml" \
  --trace "$src/examples/trace.csv" --format rota --failures often
expect_error "give one of --cluster or --nodes" --trace "$src/examples/trace.csv" --format rota
expect_error "unknown argument '--bogus'" --bogus
expect_error "--services: simulated with --policy profile only" --cluster "$src/examples/cluster.yaml" \
  --services "$tmp/svc.yaml" --policy fifo
printf 'services:\n  - job: %s/examples/services/chat.yaml\n    requests: {rate: [[0, 5]]}\n' "$src" > "$tmp/svcbad.yaml"
expect_error "services[0].requests.rate: must list at least two" --cluster "$src/examples/cluster.yaml" \
  --services "$tmp/svcbad.yaml" --policy profile
echo "sim_cli_test: ok"
