#!/bin/sh
# Lints every page in man/: groff must print no warning (-ww) and mandoc -T lint must
# report nothing at level WARNING or above. STYLE-level messages are printed but not
# fatal: clap_mangen's output has long input lines, a trailing space after the
# synopsis and a lower-case title (mur-run), none of which changes the rendering.
#
# Needs groff and mandoc; installs them with apt-get when missing (a fresh CI machine).
set -eu

cd "$(dirname "$0")/.."

if ! command -v groff >/dev/null || ! command -v mandoc >/dev/null; then
    apt-get update
    apt-get install -y --no-install-recommends groff mandoc man-db
fi

status=0
for page in man/*.[1-9]; do
    out=$(groff -man -ww -z "$page" 2>&1) || status=1
    if [ -n "$out" ]; then
        printf 'groff: %s\n%s\n' "$page" "$out" >&2
        status=1
    fi
    # mandoc exits non-zero at the -W level; print styles separately, for information.
    if ! mandoc -T lint -W warning "$page"; then
        status=1
    fi
    mandoc -T lint -W style "$page" || true
    # lexgrog: whatis/apropos must be able to read the NAME section.
    if command -v lexgrog >/dev/null && ! lexgrog "$page" >/dev/null; then
        echo "lexgrog: cannot parse the NAME section of $page" >&2
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "man pages: no groff or mandoc warnings"
exit "$status"
