#!/usr/bin/env bash
# Runs mur's whole test suite on a bare machine: sets up what the tests need (the
# Python venv of scripts/venv.sh: llama.cpp's server with a 135M model, the A2A SDK),
# then `cargo test --locked --no-fail-fast`, so one failing test binary never hides
# the others.
set -euo pipefail
cd "$(dirname "$0")/.."
MUR_TEST_VENV="$(scripts/venv.sh)"
export MUR_TEST_VENV
cargo test --locked --no-fail-fast "$@"
