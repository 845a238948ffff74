#!/bin/sh
# Builds mur as one static executable for x86_64-unknown-linux-musl (TLS through
# rustls, no OpenSSL) and prints its stripped size.
#
#   scripts/build-static.sh            # -> target/x86_64-unknown-linux-musl/release/mur
#
# Needs the musl target (rustup) and Debian's musl-tools: ring's C code is compiled
# with musl-gcc. Both are installed when missing.
set -eu

cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl

if ! command -v musl-gcc >/dev/null; then
    apt-get update
    apt-get install -y --no-install-recommends musl-tools
fi
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi

CC_x86_64_unknown_linux_musl=musl-gcc \
    cargo build --locked --release --target "$target" --bin mur

bin="target/$target/release/mur"
# The release profile strips already (strip = true); this proves the file is static.
if command -v file >/dev/null; then
    file "$bin"
    case "$(file -b "$bin")" in
    *"dynamically linked"*) echo "error: $bin is dynamically linked" >&2; exit 1 ;;
    esac
fi
if command -v readelf >/dev/null && readelf -d "$bin" 2>/dev/null | grep -q NEEDED; then
    echo "error: $bin needs shared libraries:" >&2
    readelf -d "$bin" | grep NEEDED >&2
    exit 1
fi
size=$(wc -c <"$bin")
echo "static binary: $bin, $size bytes ($(( (size + 1023) / 1024 )) KiB), stripped"
