//! Benchmark for the door (prints figures; not a timed test).
//!
//! `GetTask` requests per second and latency percentiles against a `mur` door and
//! against the official a2a-sdk 1.3 server (tests/support/a2a_sdk_server.py: Starlette
//! on uvicorn) on the same machine, loopback only, the same completed task each time,
//! and the ratio (goal >= 10x). Two loads, each a bounded number of requests:
//!
//! 1. one client, one keep-alive connection, requests back to back (latency-bound);
//! 2. `MUR_BENCH_CLIENTS` clients (default 4) in parallel, each on its own connection.
//!
//! Each load runs twice: with a raw keep-alive client (a prepared request written to
//! the socket, the answer read by `Content-Length`: measures the servers) and with
//! [`mur::a2a::A2aClient`] (ureq plus parsing the Task: what a caller sees). The same
//! client is used for both servers, so its cost is the same on both sides.
//! Needs `MUR_TEST_VENV` (a venv with a2a-sdk[http-server] and uvicorn; see
//! scripts/test.sh). Run: `cargo bench --bench door` (or scripts/bench.sh).
//! `MUR_BENCH_N` sets the requests per load and server (default 2000).
//!
//! With `MUR_BENCH_DOOR_BINS=label=path,label=path…` it then serves
//! `examples/hello` with each `mur` binary (`mur door`, its own process: the
//! allocator and libc of that build, such as the static musl one of
//! scripts/build-static.sh) and loads each with raw clients at 1 and 16 connections,
//! beside the a2a-sdk server, printing each one's ratio to the SDK and to the first
//! binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mur::a2a::types::{AgentCard, Message, Task, TaskState};
use mur::a2a::A2aClient;
use mur::door::{CancelError, Door, DoorLimits, TaskBook, TaskHandler};

const TOKEN: &str = "bench-token-of-32-bytes-for-door";

/// Completes every task at once with `echo: <text>`.
struct Immediate {
    book: TaskBook,
}

impl TaskHandler for Immediate {
    fn submit(&self, message: Message) -> Task {
        let text = message.text_content();
        let t = self.book.create(message, TaskState::Working, None);
        self.book
            .complete(&t.id, &format!("echo: {text}"))
            .unwrap_or(t)
    }
    fn get(&self, id: &str) -> Option<Task> {
        self.book.get(id)
    }
    fn cancel(&self, id: &str) -> Result<Task, CancelError> {
        self.book.cancel(id, "canceled")
    }
    fn wait_terminal(&self, id: &str, timeout: Duration) -> Option<Task> {
        self.book.wait_terminal(id, timeout)
    }
    fn card(&self) -> AgentCard {
        AgentCard::new("bench", "completes every task at once")
    }
}

struct Figures {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

/// A keep-alive connection sending one prepared GetTask request again and again.
struct RawClient {
    stream: TcpStream,
    request: Vec<u8>,
    buf: Vec<u8>,
}

impl RawClient {
    fn new(url: &str, task_id: &str) -> RawClient {
        let rest = url.trim_start_matches("http://");
        let (hostport, path) = match rest.find('/') {
            Some(i) => (rest[..i].to_string(), &rest[i..]),
            None => (rest.to_string(), "/"),
        };
        let stream = TcpStream::connect(&hostport).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{{"id":"{task_id}"}}}}"#
        );
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nAuthorization: Bearer {TOKEN}\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
        RawClient {
            stream,
            request,
            buf: Vec::with_capacity(8192),
        }
    }

    /// One request; panics unless the answer is a 200 carrying the completed task.
    fn get(&mut self) {
        self.stream.write_all(&self.request).expect("write");
        self.buf.clear();
        let mut chunk = [0u8; 8192];
        loop {
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "{head}");
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("content-length");
            if self.buf.len() >= end + 4 + len {
                assert!(
                    self.buf[end + 4..]
                        .windows(20)
                        .any(|w| w == b"TASK_STATE_COMPLETED"),
                    "not the completed task"
                );
                return;
            }
        }
    }
}

/// `n` GetTask calls with raw clients spread over `clients` threads.
fn load_raw(url: &str, task_id: &str, n: usize, clients: usize) -> Figures {
    run(n, clients, |per| {
        let mut c = RawClient::new(url, task_id);
        for _ in 0..20 {
            c.get();
        }
        (0..per)
            .map(|_| {
                let t = Instant::now();
                c.get();
                t.elapsed()
            })
            .collect()
    })
}

/// Runs `clients` threads of `per = n / clients` timed requests each.
fn run(n: usize, clients: usize, f: impl Fn(usize) -> Vec<Duration> + Sync) -> Figures {
    let per = n / clients;
    let start = Instant::now();
    let mut lat: Vec<Duration> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients).map(|_| s.spawn(|| f(per))).collect();
        hs.into_iter()
            .flat_map(|h| h.join().expect("bench client thread"))
            .collect()
    });
    let wall = start.elapsed();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    Figures {
        rps: lat.len() as f64 / wall.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
    }
}

/// `n` GetTask calls spread over `clients` threads, each with its own [`A2aClient`].
fn load(url: &str, task_id: &str, n: usize, clients: usize) -> Figures {
    run(n, clients, |per| {
        let c = A2aClient::new(url, TOKEN);
        for _ in 0..20 {
            c.get_task(task_id).expect("warm-up GetTask");
        }
        (0..per)
            .map(|_| {
                let t = Instant::now();
                let task = c.get_task(task_id).expect("GetTask");
                let took = t.elapsed();
                assert_eq!(task.status.state, TaskState::Completed);
                took
            })
            .collect()
    })
}

struct SdkServer(Child, String);

impl Drop for SdkServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sdk_server() -> SdkServer {
    let venv = std::env::var_os("MUR_TEST_VENV").unwrap_or_else(|| {
        eprintln!("MUR_TEST_VENV is not set: the door benchmark compares against the a2a-sdk server in that venv (see scripts/test.sh)");
        std::process::exit(2);
    });
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/a2a_sdk_server.py");
    let mut child = Command::new(PathBuf::from(venv).join("bin/python"))
        .arg(script)
        .args(["--port", "0", "--token", TOKEN, "--delay", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a2a_sdk_server.py");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read LISTENING line");
    // `LISTENING <base address> <JSON-RPC endpoint>`: the endpoint is called.
    let url = line
        .trim()
        .strip_prefix("LISTENING ")
        .and_then(|r| r.split_whitespace().last())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    SdkServer(child, url)
}

fn completed_task(url: &str) -> String {
    let c = A2aClient::new(url, TOKEN);
    let t = c.send_message("bench", None, false).expect("SendMessage");
    assert_eq!(t.status.state, TaskState::Completed, "{t:?}");
    t.id
}

fn main() {
    let env_n = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|n: &usize| *n > 0)
            .unwrap_or(d)
    };
    let n = env_n("MUR_BENCH_N", 2000);
    let clients = env_n("MUR_BENCH_CLIENTS", 4);

    let handler = Arc::new(Immediate {
        book: TaskBook::new(),
    });
    let door = Door::start(
        "127.0.0.1:0".parse().expect("addr"),
        TOKEN.to_string(),
        handler,
        DoorLimits::default(),
    )
    .expect("door starts");
    let sdk = sdk_server();
    let mur_task = completed_task(&door.url());
    let sdk_task = completed_task(&sdk.1);

    println!("GetTask on loopback, {n} requests per load (after 20 warm-up per client)");
    type Load = fn(&str, &str, usize, usize) -> Figures;
    let loads: [(&str, usize, Load); 4] = [
        ("raw, 1 client", 1, load_raw),
        ("raw, parallel", clients, load_raw),
        ("A2aClient, 1 client", 1, load),
        ("A2aClient, parallel", clients, load),
    ];
    for (label, c, f) in loads {
        let m = f(&door.url(), &mur_task, n, c);
        let s = f(&sdk.1, &sdk_task, n, c);
        println!(
            "{label:>20} ({c} conn): mur door {:>8.0} req/s p50 {:>7.3} ms p99 {:>7.3} ms | a2a-sdk {:>7.0} req/s p50 {:>7.3} ms p99 {:>7.3} ms | ratio {:.1}x req/s, {:.1}x p99",
            m.rps,
            m.p50.as_secs_f64() * 1e3,
            m.p99.as_secs_f64() * 1e3,
            s.rps,
            s.p50.as_secs_f64() * 1e3,
            s.p99.as_secs_f64() * 1e3,
            m.rps / s.rps,
            s.p99.as_secs_f64() / m.p99.as_secs_f64(),
        );
    }
    println!("goal: >= 10x req/s");
    door.shutdown();
    if let Ok(bins) = std::env::var("MUR_BENCH_DOOR_BINS") {
        binaries(&bins, &sdk, &sdk_task, n);
    }
}

/// A `mur door` process, its URL, and the directory holding its home and records
/// (kept until the door is dropped).
struct MurDoor(Child, String, #[allow(dead_code)] tempfile::TempDir);

impl Drop for MurDoor {
    fn drop(&mut self) {
        // SIGTERM: the door stops its session and exits.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

fn mur_door(bin: &str) -> MurDoor {
    let tmp = tempfile::tempdir().expect("tempdir");
    let capsule = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    let mut child = Command::new(bin)
        .arg("door")
        .arg(&capsule)
        .args(["--listen", "127.0.0.1:0", "--records-dir"])
        .arg(tmp.path().join("records"))
        .env("MURMUR_HOME", tmp.path().join("home"))
        .env("MURMUR_DOOR_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin} door: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the door line");
    let url = line
        .trim()
        .strip_prefix("door: ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    MurDoor(child, url, tmp)
}

/// The door of each binary in `bins` (`label=path,…`) at 1 and 16 connections.
fn binaries(bins: &str, sdk: &SdkServer, sdk_task: &str, n: usize) {
    println!("mur door binaries serving examples/hello, raw GetTask, {n} requests per load");
    let mut first: Vec<f64> = Vec::new();
    for (i, spec) in bins.split(',').filter(|s| !s.is_empty()).enumerate() {
        let (label, path) = spec.split_once('=').unwrap_or((spec, spec));
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let d = mur_door(path);
        let task = completed_task(&d.1);
        for (j, conns) in [1usize, 16].into_iter().enumerate() {
            let m = load_raw(&d.1, &task, n, conns);
            let s = load_raw(&sdk.1, sdk_task, n, conns);
            if i == 0 {
                first.push(m.rps);
            }
            println!(
                "{label:>14} ({size} bytes), {conns:>2} conn: {:>8.0} req/s p99 {:>7.3} ms | a2a-sdk {:>7.0} req/s | ratio to the SDK {:>5.1}x, to the first binary {:>5.2}",
                m.rps,
                m.p99.as_secs_f64() * 1e3,
                s.rps,
                m.rps / s.rps,
                m.rps / first[j],
            );
        }
    }
}
