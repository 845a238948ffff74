#!/bin/sh
# Proves the static binary runs in an empty root, twice:
#
#   1. bare root: only the binary (and the example capsule, when examples/hello exists)
#      in a fresh directory, run with chroot, so nothing of the host (libc, /etc, /tmp,
#      CA files, /proc) is visible;
#   2. image root: the layout packaging/Containerfile builds FROM scratch (the binary
#      as /mur, /tmp 1777, a CA bundle, MURMUR_HOME=/murmur), run the way the image's
#      ENTRYPOINT runs it. No container engine is needed.
#
#   scripts/test-empty-root.sh [BINARY]   # default: the build-static.sh output
#
# Needs root (chroot). Exits non-zero on the first failure.
set -eu

cd "$(dirname "$0")/.."
bin=${1:-target/x86_64-unknown-linux-musl/release/mur}
[ -x "$bin" ] || { echo "error: no binary at $bin (run scripts/build-static.sh)" >&2; exit 1; }
task="How many files are there?"
# env -i clears PATH, so chroot is named by its full path.
chroot=$(command -v chroot || echo /usr/sbin/chroot)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT


echo "== bare root: the binary alone"
bare="$tmp/bare"
mkdir "$bare"
cp "$bin" "$bare/mur"
echo "+ chroot ROOT /mur --version"
env -i "$chroot" "$bare" /mur --version
if [ -d examples/hello ]; then
    cp -R examples/hello "$bare/hello"
    mkdir "$bare/records"
    echo "+ chroot ROOT /mur run /hello --task '$task' --records-dir /records"
    env -i HOME=/ MURMUR_HOME=/murmur \
        "$chroot" "$bare" /mur run /hello --task "$task" --records-dir /records
    trace=$(find "$bare/records" -name trace.jsonl | head -n 1)
    [ -s "$trace" ] || { echo "error: the run wrote no trace.jsonl" >&2; exit 1; }
    echo "records: $(cd "$bare/records" && find . -type f | sort | tr '\n' ' ')"
else
    echo "examples/hello is absent: skipped the capsule run"
fi
echo "bare root contents: $(cd "$bare" && find . -maxdepth 1 | sort | tr '\n' ' ')"

echo "== image root: the FROM scratch layout of packaging/Containerfile"
image="$tmp/image"
mkdir -p "$image/etc/ssl/certs" "$image/murmur"
mkdir -m 1777 "$image/tmp"
cp "$bin" "$image/mur"
for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
    if [ -f "$ca" ]; then
        cp "$ca" "$image/etc/ssl/certs/ca-certificates.crt"
        break
    fi
done
image_env="MURMUR_HOME=/murmur SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt HOME=/murmur"
# shellcheck disable=SC2086 # word splitting of image_env is intended
env -i $image_env "$chroot" "$image" /mur --version
if [ -d examples/hello ]; then
    cp -R examples/hello "$image/capsule"
    # shellcheck disable=SC2086
    env -i $image_env "$chroot" "$image" /mur run /capsule --task "$task"
    trace=$(find "$image/murmur" -name trace.jsonl | head -n 1)
    [ -s "$trace" ] || { echo "error: no trace.jsonl under MURMUR_HOME" >&2; exit 1; }
    echo "records under MURMUR_HOME: $(cd "$image/murmur" && find . -type f | sort | tr '\n' ' ')"
fi
echo "empty root: ok"
