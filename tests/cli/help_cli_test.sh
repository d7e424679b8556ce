#!/usr/bin/env bash
# Help and bad flags through the real binary, with no server running: every
# subcommand answers --help locally; `rota help CMD`; did-you-mean for
# commands and flags; -o other than table or json is bad input.
set -euo pipefail
rota="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export ROTA_SERVER=http://127.0.0.1:9  # nothing listens: a command that called it would fail

for cmd in submit jobs describe cancel logs nodes node queues top token status up server agent store plan sim explain \
           completion; do
  "$rota" "$cmd" --help > "$tmp/help.txt" 2>&1 || fail "rota $cmd --help exited $?: $(cat "$tmp/help.txt")"
  grep -q "^usage: rota $cmd" "$tmp/help.txt" || fail "rota $cmd --help: $(head -2 "$tmp/help.txt")"
  "$rota" help "$cmd" > "$tmp/help2.txt" 2>&1 || fail "rota help $cmd exited $?"
  cmp -s "$tmp/help.txt" "$tmp/help2.txt" || fail "rota help $cmd differs from rota $cmd --help"
done
"$rota" describe -h | grep "^usage: rota describe JOB_ID" > /dev/null || fail "describe -h"
"$rota" version | grep "^server: none answers at http://127.0.0.1:9" > /dev/null || fail "version without a server: $("$rota" version)"

expect_bad() {  # expect_bad "message" args...
  local want="$1"; shift
  set +e
  "$rota" "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "rota $* exited $rc, want 2"
  grep -qF -- "$want" "$tmp/err.txt" || fail "rota $*: $(cat "$tmp/err.txt")"
}
expect_bad "unknown command 'sumbit'; did you mean 'submit'?" sumbit job.yaml
expect_bad "rota jobs: unknown flag '--stat'; did you mean '--state'?" jobs --stat running
expect_bad "rota submit: unknown flag '--cout'; did you mean '--count'?" submit job.yaml --cout 3
expect_bad "rota jobs: -o: must be table, wide or json, got 'yaml'" jobs -o yaml
expect_bad "rota help: unknown command 'nodez'; did you mean 'nodes'?" help nodez
# A bad --gpus changes nothing: no data directory, no token, nothing served.
expect_bad "--gpus: expected COUNTxMODEL" up --data-dir "$tmp/up" --listen 127.0.0.1:0 --gpus bogus
[ ! -e "$tmp/up" ] || fail "rota up with a bad --gpus made $tmp/up: $(ls "$tmp/up")"
expect_bad "rota: --disk-reserve must be a size of at least 1Mi (e.g. 64Mi, 1Gi) or 0, got 'lots'" up --data-dir "$tmp/up" --disk-reserve lots
[ ! -e "$tmp/up" ] || fail "rota up with a bad --disk-reserve made $tmp/up"
expect_bad "rota agent: --disk-reserve must be a size of at least 1Mi (e.g. 64Mi, 1Gi) or 0, got '-5Mi'" agent --disk-reserve -5Mi
expect_bad "rota: --task-pids-max must be 0 (no limit) or 16..4194304, got '8'" up --data-dir "$tmp/up" --task-pids-max 8
[ ! -e "$tmp/up" ] || fail "rota up with a bad --task-pids-max made $tmp/up"
expect_bad "rota agent: --task-pids-max must be 0 (no limit) or 16..4194304, got 'many'" agent --task-pids-max many
# rota explain: a field from the reference docs built into the binary.
"$rota" explain tasks.gpu.fraction > "$tmp/explain.txt" || fail "explain tasks.gpu.fraction exited $?"
grep -q "^job.tasks.gpu.fraction  (docs/job-spec.md, Task group fields)" "$tmp/explain.txt" || fail "explain: $(cat "$tmp/explain.txt")"
grep -q "^TYPE: " "$tmp/explain.txt" || fail "explain: no TYPE: $(cat "$tmp/explain.txt")"
grep -q "share of one GPU" "$tmp/explain.txt" || fail "explain: no meaning: $(cat "$tmp/explain.txt")"
"$rota" explain 'job.tasks[0]' | grep "^  gpus  *integer" > /dev/null || fail "explain job.tasks[0]: $("$rota" explain 'job.tasks[0]')"
"$rota" explain checkpoint | grep "^  grace " > /dev/null || fail "explain checkpoint: $("$rota" explain checkpoint)"
"$rota" explain service.readiness | grep "^  timeout " > /dev/null || fail "explain service.readiness: relative names"
"$rota" explain config.node_groups | grep "gpu_hour_price" > /dev/null || fail "explain config.node_groups"
"$rota" explain queues.quota | grep "^config.queues.quota" > /dev/null || fail "explain queues.quota: $("$rota" explain queues.quota)"
expect_bad "rota explain: no field 'tasks.gpuz' in the job spec or the cluster config; did you mean 'tasks.gpus'?" \
  explain tasks.gpuz
expect_bad "usage: rota explain PATH" explain

# rota completion: commands, their flags and subcommands, in a real bash.
"$rota" completion bash > "$tmp/rota.bash"
complete_words() {  # complete_words WORD...: what <TAB> after them offers
  bash -c 'source "$1"; shift; COMP_WORDS=(rota "$@"); COMP_CWORD=$#; _rota; printf "%s\n" "${COMPREPLY[@]}"' _ \
    "$tmp/rota.bash" "$@"
}
complete_words sub | grep -x submit > /dev/null || fail "completion: rota sub -> $(complete_words sub)"
complete_words submit --co | grep -x -- --count > /dev/null || fail "completion: submit --co -> $(complete_words submit --co)"
complete_words node "" | grep -x history > /dev/null || fail "completion: node -> $(complete_words node "")"
complete_words jobs -o "" | grep -x wide > /dev/null || fail "completion: jobs -o -> $(complete_words jobs -o "")"
complete_words up --gpu-history | grep -x -- --gpu-history-hours > /dev/null || fail "completion: up --gpu-history"
complete_words --server http://x job | grep -x jobs > /dev/null || fail "completion: after --server"
"$rota" completion zsh | grep "bashcompinit" > /dev/null || fail "completion zsh"
if command -v zsh > /dev/null; then
  zsh -c "source <('$rota' completion zsh)" || fail "completion zsh does not load"
fi
expect_bad "usage: rota completion bash|zsh" completion fish

# A lease too long for the fence: the warning gives the bounds it checks
# (a lease of 1s needs a fence of 13s; an 8s fence takes no lease), before
# the store is reached (none listens on port 1: the server waits for it,
# until the timeout).
out=$(timeout 5 "$rota" server --data-dir "$tmp/lease" --listen 127.0.0.1:17998 --store postgres://rota@127.0.0.1:1/rota \
        --lease 1s --node-timeout 8s 2>&1 || true)
echo "$out" | grep -F "raise --node-timeout (or --fence-after) to 13s or more" > /dev/null || fail "lease warning: $out"
echo "$out" | grep -F "keep --lease at most" > /dev/null && fail "lease warning offers a lease below the least: $out"
out=$(timeout 5 "$rota" server --data-dir "$tmp/lease" --listen 127.0.0.1:17998 --store postgres://rota@127.0.0.1:1/rota \
        --lease 4s --node-timeout 30s 2>&1 || true)
echo "$out" | grep -F "keep --lease at most 3400ms, or raise --node-timeout (or --fence-after) to 34s or more" > /dev/null ||
  fail "lease warning: $out"

# Cancelling many jobs at a server that cannot be reached: said once, with
# how many were not sent (not one line per id).
out=$("$rota" --server http://127.0.0.1:1 --token t cancel 1 2 3 4 5 x 2>&1 || true)
[ "$(echo "$out" | grep -c "cannot reach")" = 1 ] || fail "cancel, unreachable: $out"
echo "$out" | grep -F "6 job(s) not cancelled (not sent)" > /dev/null || fail "cancel, unreachable: $out"

# rota help --man: a man page with every command's help.
"$rota" help --man > "$tmp/rota.1"
head -1 "$tmp/rota.1" | grep '^\.TH ROTA 1 ' > /dev/null || fail "man page: $(head -1 "$tmp/rota.1")"
for cmd in submit jobs node report up agent plan sim explain; do
  grep -qx "\.SS $cmd" "$tmp/rota.1" || fail "man page: no section for $cmd"
done
grep -qF 'rota submit JOB.yaml|\- [\-\-count N]' "$tmp/rota.1" || fail "man page: submit's usage: $(grep -m1 'rota submit' "$tmp/rota.1")"
if command -v groff > /dev/null; then
  groff -man -Tutf8 -ww -z "$tmp/rota.1" 2> "$tmp/groff.txt" || fail "groff: $(cat "$tmp/groff.txt")"
  [ ! -s "$tmp/groff.txt" ] || fail "groff warns: $(head -5 "$tmp/groff.txt")"
fi
echo "help_cli_test: ok"
