//! The official a2a-sdk, for the interop tests: the test venv's python, the Python
//! scripts beside this file, and `a2a_sdk_server.py` run as a peer.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The python of the venv `MUR_TEST_VENV` names (a2a-sdk[http-server] and uvicorn).
pub fn venv_python() -> PathBuf {
    let venv = std::env::var_os("MUR_TEST_VENV").unwrap_or_else(|| {
        panic!(
            "MUR_TEST_VENV is not set: the A2A interop tests need a venv with \
             a2a-sdk[http-server] and uvicorn; run scripts/test.sh, which creates it"
        )
    });
    let py = PathBuf::from(venv).join("bin/python");
    assert!(
        py.exists(),
        "{} does not exist: MUR_TEST_VENV must name a venv directory (see scripts/test.sh)",
        py.display()
    );
    py
}

/// `tests/support/NAME`.
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(name)
}

/// `tests/support/a2a_sdk_server.py` on an ephemeral port, killed on drop.
pub struct Server {
    child: Child,
    /// The agent's base address, `http://127.0.0.1:PORT`, as A2A agents are published.
    pub url: String,
    /// Its JSON-RPC endpoint, `http://127.0.0.1:PORT/a2a/jsonrpc`, which its card names.
    pub endpoint: String,
}

impl Server {
    /// Starts the server with bearer token `token` and `args`, its stderr going to
    /// `stderr`, and waits (60 s at most) for the `LISTENING BASE ENDPOINT` line it
    /// prints.
    pub fn start(token: &str, args: &[&str], stderr: Stdio) -> Server {
        let mut child = Command::new(venv_python())
            .arg(script("a2a_sdk_server.py"))
            .args(["--port", "0", "--token", token])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start a2a_sdk_server.py");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a2a_sdk_server.py prints LISTENING within 60 s");
        let (url, endpoint) = line
            .trim()
            .strip_prefix("LISTENING ")
            .and_then(|r| r.split_once(' '))
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Server {
            child,
            url: url.to_string(),
            endpoint: endpoint.to_string(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
