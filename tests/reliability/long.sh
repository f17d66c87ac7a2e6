#!/usr/bin/env bash
# The long reliability runs (the fast versions run in `make test`):
#   - 500 kill -9 trials per mode (append, delete, compact)
#   - power-loss images for 2000 random workloads
#   - I/O fault injection over every operation of the scripted workload
#   - the byte-flip sweeps (every byte, with and without checksums) and hostile stores
#   - the checksum tests (damage, foreign writers, seal)
# Prints each test's own figures (kills, records, cut points, images, faults).
#   tests/reliability/long.sh                 # ZR_KILL_TRIALS=500 ZR_POWER_RUNS=2000
set -euo pipefail
cd "$(dirname "$0")/../.."
export ZR_KILL_TRIALS=${ZR_KILL_TRIALS:-500}
export ZR_POWER_RUNS=${ZR_POWER_RUNS:-2000}
export ZR_FLIP_STRIDE=${ZR_FLIP_STRIDE:-1}
start=$(date +%s)
cargo test --release -p zrecord --test crash -- --nocapture 2>&1 | grep -E "kills|trial|test result|panicked"
cargo test --release -p zrecord-core --test power_loss --test faults --test hostile --test checksums -- --nocapture 2>&1 \
  | grep -E "images checked|injected|sealed|test result|panicked"
cargo test --release -p zrecord --test byte_flip --test full_disk --test concurrency -- --nocapture 2>&1 \
  | grep -E "byte-flip|full-disk|SKIPPED|test result|panicked"
echo "long reliability run: $(( $(date +%s) - start )) s"
