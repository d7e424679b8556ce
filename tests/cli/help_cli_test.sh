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

for cmd in submit jobs describe cancel logs nodes node queues top token status up server agent store plan sim; do
  "$rota" "$cmd" --help > "$tmp/help.txt" 2>&1 || fail "rota $cmd --help exited $?: $(cat "$tmp/help.txt")"
  grep -q "^usage: rota $cmd" "$tmp/help.txt" || fail "rota $cmd --help: $(head -2 "$tmp/help.txt")"
  "$rota" help "$cmd" > "$tmp/help2.txt" 2>&1 || fail "rota help $cmd exited $?"
  cmp -s "$tmp/help.txt" "$tmp/help2.txt" || fail "rota help $cmd differs from rota $cmd --help"
done
"$rota" describe -h | grep -q "^usage: rota describe JOB_ID" || fail "describe -h"
"$rota" version | grep -q "^server: none answers at http://127.0.0.1:9" || fail "version without a server: $("$rota" version)"

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
echo "help_cli_test: ok"
