#!/usr/bin/env bash
# Runs the native host's lock, concurrency, loader, warming and CLI tests RUNS times (default 20), two suites
# at a time so each runs under the other's load: a lock or timing test that fails one run in
# twenty fails here, not later in CI. Part of `make test`.
set -euo pipefail
runs="${1:-20}"
cd "$(dirname "$0")/../.."
suites=(native locks concurrency loader warm)
args=()
for s in "${suites[@]}"; do args+=(--test "$s"); done
# The workspace's default members, as `make test`'s `cargo test` builds them: with `-p zrecord`
# cargo resolves features for that package alone and builds the suites a second time.
mapfile -t bins < <(cargo test -q --no-run --message-format=json "${args[@]}" | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["executable"])')
if [ "${#bins[@]}" -ne "${#suites[@]}" ]; then
  echo "stress-locks: expected ${#suites[@]} test binaries, found ${#bins[@]}" >&2
  exit 1
fi
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

stream() { # stream NAME COUNT: runs the suite COUNT times; stops at the first failure
  local name="$1" count="$2" i b
  for ((i = 1; i <= count; i++)); do
    for b in "${bins[@]}"; do
      if ! "$b" -q >"$logs/$name.log" 2>&1; then
        echo "stress-locks: run $i of stream $name failed in $(basename "$b"):" >&2
        cat "$logs/$name.log" >&2
        return 1
      fi
    done
    echo "$i" >"$logs/$name.done"
  done
}

half=$(((runs + 1) / 2))
start=$SECONDS
stream a "$half" & a=$!
stream b "$((runs - half))" & b=$!
status=0
wait "$a" || status=1
wait "$b" || status=1
done_runs=$(( $(cat "$logs/a.done" 2>/dev/null || echo 0) + $(cat "$logs/b.done" 2>/dev/null || echo 0) ))
echo "stress-locks: $done_runs of $runs runs of (${suites[*]}) passed, two at a time, in $((SECONDS - start)) s"
exit "$status"
