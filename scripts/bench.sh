#!/usr/bin/env bash
# Prints mur's benchmark figures (ratios side by side in one run): shell tool vs raw
# spawn and cold start; background commands; call-member round trip; door vs the A2A
# SDK server (needs the venv of scripts/venv.sh); mur trace over 100 000 records (time,
# peak RSS); the static build's size and its door beside the glibc build's; 50 shell
# calls with and without an allow-all on_tool_call hook; confined vs unconfined spawn;
# a 256 MiB peer-file handoff over a door vs cp (ratio, peak RSS).
set -euo pipefail
cd "$(dirname "$0")/.."
MUR_TEST_VENV="$(scripts/venv.sh)"
export MUR_TEST_VENV
cargo bench --locked --bench run
cargo bench --locked --bench background
cargo bench --locked --bench formation
# The door as shipped: the static musl build (its allocator, scripts/build-static.sh,
# which prints its size) beside the glibc build, each as its own `mur door`.
scripts/build-static.sh
cargo build --locked --release --bin mur
MUR_BENCH_DOOR_BINS="glibc=target/release/mur,static=target/x86_64-unknown-linux-musl/release/mur" \
    cargo bench --locked --bench door
cargo bench --locked --bench door_hostile
cargo bench --locked --bench trace
cargo bench --locked --bench hooks
cargo bench --locked --bench peer_files
cargo bench --locked --bench confine
