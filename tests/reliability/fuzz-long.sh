#!/usr/bin/env bash
# Runs every cargo-fuzz target for FUZZ_SECONDS (default 600) with libFuzzer on nightly,
# all targets at once, and prints each target's executions. A crash stops that target,
# leaves its input in fuzz/artifacts/<target>/, and fails the script: fix the bug, then
# copy the input into fuzz/regressions/<target>/ so `cargo test` replays it.
#   tests/reliability/fuzz-long.sh            # 10 minutes per target
#   FUZZ_SECONDS=60 tests/reliability/fuzz-long.sh
set -euo pipefail
cd "$(dirname "$0")/../../fuzz"
secs=${FUZZ_SECONDS:-600}
targets=(open_store inflate ops)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo +nightly fuzz build -O
mkdir -p logs
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  cp -n regressions/"$t"/* "corpus/$t/" 2>/dev/null || true
  nice cargo +nightly fuzz run -O "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
    >"logs/$t.log" 2>&1 &
done
status=0
for t in "${targets[@]}"; do wait -n || status=1; done
for t in "${targets[@]}"; do
  echo "$t: $(grep -E '^Done [0-9]+ runs' "logs/$t.log" || echo 'no summary (crashed?)') corpus=$(ls "corpus/$t" | wc -l)"
  grep -E 'SUMMARY|panicked|crash-' "logs/$t.log" && status=1 || true
done
exit $status
