#!/usr/bin/env bash
# Prints mur's benchmark figures (ratios side by side in one run).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --locked --bench run "$@"
cargo bench --locked --bench door "$@"
