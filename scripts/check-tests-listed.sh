#!/bin/sh
# Fails when a file in tests/ is not a module of the one test binary (tests/main.rs):
# with autotests = false such a file would silently never be compiled or run.
set -eu
cd "$(dirname "$0")/.."
status=0
for f in tests/*.rs; do
    name=$(basename "$f" .rs)
    [ "$name" = main ] && continue
    if ! grep -qx "mod $name;" tests/main.rs; then
        echo "tests/$name.rs is not listed in tests/main.rs: add \`mod $name;\`" >&2
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "tests: every file is a module of tests/main.rs"
exit "$status"
