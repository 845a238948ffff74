//! Measurement of a door under hostile load from one address (prints figures; not a
//! timed test).
//!
//! One address (loopback, as for every member of a formation, or a reverse proxy) runs
//! two attacks at once against a `mur` door with the default limits:
//!
//! - the *hog*: `MUR_HOG_CONNS` keep-alive connections (default 300) without a token
//!   that keep sending complete requests, agent-card GETs and POSTs answered 401,
//!   reopening any connection the door closes;
//! - *slowloris*: `MUR_SLOW_CONNS` connections (default 80) that each send the start of
//!   a request head and then one more byte a second, reopened when closed.
//!
//! Meanwhile another client on the same address, holding the token, sends
//! `MUR_BENCH_N` (default 200) `GetTask` requests, each on a fresh connection, and the
//! figures are: how many were answered 200, how many refused (503 or a closed
//! connection), and the latency percentiles of the answered ones, first without the
//! attack (baseline), then under it. Run: `cargo bench --bench door_hostile`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mur::a2a::types::{AgentCard, Message, Task, TaskState};
use mur::door::{CancelError, Door, DoorLimits, TaskBook, TaskHandler};

const TOKEN: &str = "bench-token-0123456789abcdef";

/// Completes every task at once.
struct Immediate {
    book: TaskBook,
}

impl TaskHandler for Immediate {
    fn submit(&self, message: Message) -> Task {
        let t = self.book.create(message, TaskState::Working, None);
        self.book.complete(&t.id, "done").unwrap_or(t)
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

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One request on a fresh connection: the status, or `None` when the connection was
/// closed or reset without an answer.
fn exchange(addr: SocketAddr, request: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    s.write_all(request).ok()?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.split(' ').nth(1)?.parse().ok()
}

fn post(body: &str, token: Option<&str>) -> Vec<u8> {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    format!(
        "POST / HTTP/1.1\r\nHost: x\r\n{auth}A2A-Version: 1.0\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

struct Figures {
    ok: usize,
    refused: usize,
    p50: Option<Duration>,
    p99: Option<Duration>,
}

fn victim(addr: SocketAddr, task_id: &str, n: usize) -> Figures {
    let body =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{{"id":"{task_id}"}}}}"#);
    let request = post(&body, Some(TOKEN));
    let mut lat = Vec::new();
    let mut refused = 0;
    for _ in 0..n {
        let t = Instant::now();
        match exchange(addr, &request) {
            Some(200) => lat.push(t.elapsed()),
            _ => refused += 1,
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    lat.sort();
    let pick = |q: f64| lat.get(((lat.len() as f64 - 1.0) * q) as usize).copied();
    Figures {
        ok: lat.len(),
        refused,
        p50: pick(0.5),
        p99: pick(0.99),
    }
}

/// The hog: `conns` keep-alive connections sending complete unauthenticated requests
/// round-robin, reopened when closed. Returns the threads and a count of requests.
fn hog(
    addr: SocketAddr,
    conns: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
) -> Vec<std::thread::JoinHandle<()>> {
    let per = 50;
    (0..conns.div_ceil(per))
        .map(|k| {
            let stop = stop.clone();
            let sent = sent.clone();
            let n = per.min(conns - k * per);
            std::thread::spawn(move || {
                let card = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
                let body = "{}";
                let unauth = format!(
                    "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes();
                let open = || {
                    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
                    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
                    Some(s)
                };
                let mut socks: Vec<Option<TcpStream>> = (0..n).map(|_| open()).collect();
                let mut chunk = [0u8; 16384];
                let mut i = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    for (j, slot) in socks.iter_mut().enumerate() {
                        if slot.is_none() {
                            *slot = open();
                        }
                        let Some(s) = slot else { continue };
                        let req = if (i + j) % 2 == 0 { &card } else { &unauth };
                        let alive = s.write_all(req).is_ok()
                            && matches!(s.read(&mut chunk), Ok(m) if m > 0);
                        sent.fetch_add(1, Ordering::Relaxed);
                        if !alive {
                            *slot = None;
                        }
                    }
                    i += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        })
        .collect()
}

/// Slowloris: `conns` connections trickling a head a byte a second, reopened when the
/// door closes them.
fn slowloris(addr: SocketAddr, conns: usize, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let open = || {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
            s.write_all(b"POST / HTTP/1.1\r\nX-Slow: ").ok()?;
            s.set_nonblocking(true).ok()?;
            Some(s)
        };
        let mut socks: Vec<Option<TcpStream>> = (0..conns).map(|_| open()).collect();
        while !stop.load(Ordering::SeqCst) {
            for slot in &mut socks {
                let closed = match slot {
                    None => true,
                    Some(s) => {
                        let mut b = [0u8; 512];
                        let answered = s.read(&mut b).is_ok();
                        answered || s.write_all(b"a").is_err()
                    }
                };
                if closed {
                    *slot = open();
                }
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    })
}

fn show(label: &str, f: &Figures) {
    let ms =
        |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3));
    println!(
        "{label:<34} answered {:>4}  refused {:>4}  p50 {:>10}  p99 {:>10}",
        f.ok,
        f.refused,
        ms(f.p50),
        ms(f.p99)
    );
}

fn main() {
    let n = env_usize("MUR_BENCH_N", 200);
    let hog_conns = env_usize("MUR_HOG_CONNS", 300);
    let slow_conns = env_usize("MUR_SLOW_CONNS", 80);
    let handler = Arc::new(Immediate {
        book: TaskBook::new(),
    });
    let task = handler.submit(Message::user("hi"));
    let door = Door::start(
        "127.0.0.1:0".parse().expect("addr"),
        TOKEN.into(),
        handler,
        DoorLimits::default(),
    )
    .expect("door starts");
    let addr = door.local_addr();
    println!("door under hostile load from its clients' own address ({addr}), default limits");
    let base = victim(addr, &task.id, n);
    show("GetTask, no attack", &base);

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let hogs = hog(addr, hog_conns, stop.clone(), sent.clone());
    let slow = slowloris(addr, slow_conns, stop.clone());
    std::thread::sleep(Duration::from_secs(2));
    let under = victim(addr, &task.id, n);
    show(
        &format!("GetTask, hog {hog_conns} + slowloris {slow_conns}"),
        &under,
    );
    stop.store(true, Ordering::SeqCst);
    for h in hogs {
        let _ = h.join();
    }
    let _ = slow.join();
    println!(
        "hog requests sent meanwhile: {}",
        sent.load(Ordering::Relaxed)
    );
    if let (Some(a), Some(b)) = (base.p50, under.p50) {
        println!(
            "p50 under attack / without: {:.1}x",
            b.as_secs_f64() / a.as_secs_f64()
        );
    }
    door.shutdown();
}
