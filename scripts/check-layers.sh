#!/usr/bin/env bash
# Fails when a lower floor of ARCHITECTURE.md's "Layers" imports a higher one:
#   main/cli -> formation -> session -> staging -> tools -> ground floor
#   (inference, exec, door, a2a, records, manifest and the small shared modules).
# A lower floor gets what it needs from above as a trait object or a channel.
# Comment lines (doc links included) are not imports and are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

ground="inference exec door a2a records manifest"
status=0
check() { # check FLOOR-PATHS... -- FORBIDDEN-MODULES...
    local paths=() forbidden=() seen=0
    for a in "$@"; do
        if [ "$a" = "--" ]; then seen=1; continue; fi
        if [ $seen = 0 ]; then paths+=("$a"); else forbidden+=("$a"); fi
    done
    local alt
    alt=$(IFS='|'; echo "${forbidden[*]}")
    local hits
    hits=$(grep -rnE "(crate|mur)::($alt)\b" "${paths[@]}" --include='*.rs' \
        | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
    if [ -n "$hits" ]; then
        echo "layer violation: ${paths[*]} must not import ${forbidden[*]}:" >&2
        echo "$hits" >&2
        status=1
    fi
}

check src/formation -- cli main
check src/session -- formation cli main
check src/staging -- formation session cli main
check src/tools -- formation session staging cli main
for m in $ground; do
    if [ -d "src/$m" ]; then
        check "src/$m" -- formation session staging tools cli main
    else
        check "src/$m.rs" -- formation session staging tools cli main
    fi
done
if [ $status = 0 ]; then echo "layers: ok"; fi
exit $status
