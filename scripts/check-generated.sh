#!/bin/sh
# Regenerates the man pages and shell completions from the binary's own clap
# definition into a temporary directory and fails when the committed ones in man/ and
# completions/ differ. Fix a failure with: scripts/check-generated.sh --update
#
# MUR: the mur binary to use (default: build and run the debug binary with cargo).
set -eu

cd "$(dirname "$0")/.."

if [ -z "${MUR:-}" ]; then
    cargo build --locked --quiet --bin mur
    MUR=target/debug/mur
fi

update=false
[ "${1:-}" = "--update" ] && update=true

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/man" "$tmp/completions"
"$MUR" generate man "$tmp/man"
"$MUR" generate completions bash >"$tmp/completions/mur.bash"
"$MUR" generate completions zsh >"$tmp/completions/_mur"
"$MUR" generate completions fish >"$tmp/completions/mur.fish"

if $update; then
    # Generated pages only: the hand-written ones (*.5, *.7) are left alone.
    rm -f man/*.1
    cp "$tmp/man/"*.1 man/
    cp "$tmp/completions/"* completions/
    echo "updated man/*.1 and completions/"
    exit 0
fi

status=0
# Every generated page must be committed, and every committed *.1 must be generated.
for f in "$tmp/man/"*.1; do
    name=$(basename "$f")
    if ! diff -u "man/$name" "$f"; then
        echo "drift: man/$name differs from the generated page" >&2
        status=1
    fi
done
for f in man/*.1; do
    name=$(basename "$f")
    if [ ! -e "$tmp/man/$name" ]; then
        echo "drift: man/$name is committed but no longer generated" >&2
        status=1
    fi
done
for name in mur.bash _mur mur.fish; do
    if ! diff -u "completions/$name" "$tmp/completions/$name"; then
        echo "drift: completions/$name differs from the generated script" >&2
        status=1
    fi
done
if [ "$status" -ne 0 ]; then
    echo "run scripts/check-generated.sh --update and commit the result" >&2
fi
exit "$status"
