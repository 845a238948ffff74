#!/bin/sh
# Builds the .deb and the .rpm from the static musl binary and checks them:
#
#   - lintian on the .deb (fails on any error; warnings are printed),
#   - dpkg -i of the .deb, then `mur --version` and `man -w mur` from the installed files,
#     and the installed file list,
#   - `rpm -qlp` on the .rpm, which must hold the same content as the .deb.
#
#   scripts/package.sh     # -> target/x86_64-unknown-linux-musl/debian/*.deb
#                          #    target/x86_64-unknown-linux-musl/generate-rpm/*.rpm
#
# On a fresh Debian machine it installs what it needs (lintian, rpm, man-db, musl-tools,
# cargo-deb, cargo-generate-rpm). It installs the .deb system-wide and removes it again
# at the end unless MUR_KEEP_INSTALLED=1. Needs root for apt-get and dpkg.
set -eu

cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl

# --- tools ---------------------------------------------------------------------------
need=""
command -v lintian >/dev/null || need="$need lintian"
command -v rpm >/dev/null || need="$need rpm"
command -v man >/dev/null || need="$need man-db"
command -v musl-gcc >/dev/null || need="$need musl-tools"
if [ -n "$need" ]; then
    apt-get update
    # shellcheck disable=SC2086 # a list of package names
    apt-get install -y --no-install-recommends $need
fi
cargo deb --version >/dev/null 2>&1 || cargo install --locked cargo-deb
cargo generate-rpm --version >/dev/null 2>&1 || cargo install --locked cargo-generate-rpm

if [ ! -d examples/hello ]; then
    echo "error: examples/hello is missing; the packages ship it as the example capsule" >&2
    exit 1
fi

# --- build ---------------------------------------------------------------------------
scripts/build-static.sh
deb=$(cargo deb --locked --no-build --target "$target" --output "target/$target/debian/" |
    tail -n 1)
cargo generate-rpm --target "$target"
rpm_file=$(ls -t "target/$target/generate-rpm/"*.rpm | head -n 1)
echo "deb: $deb"
echo "rpm: $rpm_file"

# --- lintian -------------------------------------------------------------------------
echo "+ lintian $deb"
lintian --fail-on error --info --display-level ">=warning" "$deb"
echo "lintian: no errors"

# --- install and run from the installed files ----------------------------------------
if grep -rqs 'path-exclude=/usr/share/man' /etc/dpkg/dpkg.cfg.d/; then
    echo "warning: dpkg excludes /usr/share/man here (a minimized image); man -w will fail" >&2
fi
dpkg -i "$deb"
cleanup() {
    if [ "${MUR_KEEP_INSTALLED:-0}" != 1 ]; then
        dpkg --purge mur >/dev/null
    fi
}
trap cleanup EXIT

echo "+ /usr/bin/mur --version"
/usr/bin/mur --version
for page in mur mur-run murmur.yaml.5 roster.yaml.5 mur-tools.7; do
    case $page in
    *.5) set -- 5 "${page%.5}" ;;
    *.7) set -- 7 "${page%.7}" ;;
    *) set -- 1 "$page" ;;
    esac
    printf '+ man -w %s %s: ' "$1" "$2"
    man -w "$1" "$2"
done
echo "installed files:"
dpkg -L mur | sort | while read -r f; do [ -d "$f" ] || echo "  $f"; done

# --- rpm content ---------------------------------------------------------------------
echo "+ rpm -qlp $rpm_file"
# The licence texts: /usr/share/licenses/mur/ in the .rpm, the copyright file in the .deb.
rpm -qlp "$rpm_file" | grep -q '^/usr/share/licenses/mur/LICENSE-MIT$' || { echo "error: the .rpm lacks its licence" >&2; exit 1; }
rpm -qlp "$rpm_file" | grep -v '^/usr/share/licenses/mur/' | sort >"target/$target/generate-rpm/files.txt"
cat "target/$target/generate-rpm/files.txt"
# The same content as the .deb, with the distributions' own paths mapped.
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./|/|' |
    grep -v '^/usr/share/lintian/' |
    grep -v '^/usr/share/doc/mur/changelog' |
    grep -v '^/usr/share/doc/mur/copyright$' |
    sed -e 's|^/lib/systemd/|/usr/lib/systemd/|' \
        -e 's|^/usr/share/zsh/vendor-completions/|/usr/share/zsh/site-functions/|' \
        -e 's|\.gz$||' |
    sort >"target/$target/debian/files.txt"
# rpm keeps man pages uncompressed (rpm itself does not gzip them).
if ! diff -u "target/$target/debian/files.txt" "target/$target/generate-rpm/files.txt"; then
    echo "error: the .rpm and the .deb do not hold the same files" >&2
    exit 1
fi
echo "packages: ok"
