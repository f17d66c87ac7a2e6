#!/usr/bin/env bash
# ThreadSanitizer over the concurrent tests (readers beside an appender, cross-process
# locks, parallel gathers): nightly, with std rebuilt instrumented (-Zbuild-std, needs the
# rust-src component). Exits non-zero on any race report.
#   tests/reliability/tsan.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rustup component list --toolchain nightly --installed | grep -q rust-src \
  || rustup component add rust-src --toolchain nightly
target=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
cargo +nightly test -Zbuild-std --target "$target" --target-dir target/tsan -p zrecord \
  --test concurrency --test native -- --test-threads=1
