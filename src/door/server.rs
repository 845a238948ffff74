//! A small blocking HTTP/1.1 server on `std::net`, with the limits a door needs and
//! tiny_http lacks: a deadline for a request head and for a whole request, one
//! small-stack thread per connection under a global cap, caps per peer address on its
//! connections (whatever their state) and on those that have not sent a whole request
//! head yet, a rate limit per address on requests without the token, a header and a
//! body size cap.
//!
//! The reserve: a connection past a cap is not refused at once, because one address
//! (loopback for a whole formation, a reverse proxy, a NAT) can carry a hostile client
//! and a legitimate one, which only their requests tell apart. Up to
//! [`DoorLimits::reserve_connections`] such connections are *on probation*: the door
//! reads their first head, serves it if it carries the door's token (then closes the
//! connection) and answers anything else 503. A new probation connection when the
//! reserve is full evicts the oldest one still sending its head (503, closed), so
//! trickled heads cannot hold the reserve against a client that sends its head at
//! once.
//!
//! What it serves is a [`Service`]; the door's is the A2A JSON-RPC app. Supported:
//! `Content-Length` bodies (no chunked requests: 501), keep-alive and pipelining on
//! HTTP/1.1, `Expect: 100-continue`, CRLF or bare LF line endings in the head (RFC
//! 9112 §2.2). A bare CR inside a head line is answered 400.
//!
//! Why a thread per connection: a client that trickles its head a byte at a time
//! holds only its own thread, never one another client needs, so a well-behaved client
//! is served at once while slow ones wait out their deadline (the slowloris case).

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::DoorLimits;

/// How many headers a request may carry.
const MAX_HEADERS: usize = 100;

/// How long a blocking read sleeps at most between looks at the stop flag (and, while
/// idle, at the connection count).
const IDLE_SLICE: Duration = Duration::from_millis(200);

/// How long, and how many bytes, a connection closed early is drained, so the client
/// reads the answer instead of a reset.
const DRAIN_TIME: Duration = Duration::from_secs(2);
const DRAIN_BYTES: usize = 8 * 1024 * 1024;

/// The stack of one connection thread, in bytes: 512 KiB. A JSON body nested to
/// serde_json's recursion limit (128) needs about 300 KiB in a debug build (parsed,
/// cloned, stored and serialized back); 256 KiB overflowed, which aborts the
/// process. Only the pages a thread touches are resident.
pub const CONNECTION_STACK_BYTES: usize = 512 * 1024;

/// How long the accept thread pauses after a failed `accept` (e.g. out of file
/// descriptors), so an error that repeats does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(20);

/// A parsed request line and headers.
#[derive(Debug, Clone)]
pub struct Head {
    /// `GET`, `POST`, … as sent.
    pub method: String,
    /// The path without the query string; an absolute-form target is reduced to its
    /// path.
    pub path: String,
    /// `true` for HTTP/1.1 (keep-alive by default).
    pub http11: bool,
    /// Headers in order, names lowercased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The peer's address, for log lines; `None` when the socket could not tell.
    pub peer: Option<SocketAddr>,
}

impl Head {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// Extra headers (`Content-Length` and `Connection` are added by the server).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Close the connection after this answer.
    pub close: bool,
}

impl Response {
    /// An answer with a JSON body.
    pub fn json(status: u16, body: &serde_json::Value) -> Response {
        Response {
            status,
            headers: vec![("Content-Type", "application/json".to_string())],
            body: body.to_string().into_bytes(),
            close: false,
        }
    }

    /// An answer with an empty body.
    pub fn empty(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            close: false,
        }
    }
}

/// What the server serves.
pub trait Service: Send + Sync + 'static {
    /// Looks at a request before its body is read: `Some` answers at once (the body is
    /// then not read and the connection is closed when there is one), `None` reads the
    /// body and calls [`Service::call`].
    fn check_head(&self, head: &Head) -> Option<Response>;

    /// The answer to a request whose declared body exceeds the limit.
    fn too_large(&self, limit: usize) -> Response;

    /// `true` when the request carries the credentials the service wants (the door's
    /// bearer token). Requests that do not are rate-limited per address
    /// ([`DoorLimits::unauthenticated_per_sec`]), and are the only ones a connection on
    /// probation (past a cap, in the reserve) is refused.
    fn authorized(&self, head: &Head) -> bool;

    /// Serves one request. `stop` turns true when the server shuts down; a call that
    /// waits must watch it.
    fn call(&self, head: &Head, body: Vec<u8>, stop: &AtomicBool) -> Response;
}

/// What the accept thread and every connection thread share.
struct Shared {
    service: Arc<dyn Service>,
    limits: DoorLimits,
    stop: AtomicBool,
    /// Connection threads running now.
    conns: AtomicUsize,
    /// Per peer address: its connections, those without a whole request head yet, and
    /// its bucket of unauthenticated requests.
    peers: Mutex<HashMap<IpAddr, Peer>>,
    /// Connections on probation still sending their first head, oldest first: their
    /// id and a handle to close them when the reserve is full.
    probation: Mutex<VecDeque<(u64, TcpStream)>>,
    /// Probation connection threads running now (sending a head or being served).
    probation_live: AtomicUsize,
    /// The id of the next connection.
    next_id: AtomicU64,
}

/// What the server counts per peer address.
#[derive(Debug)]
struct Peer {
    /// Connections counted against [`DoorLimits::max_connections_per_ip`] (not those
    /// on probation).
    conns: usize,
    /// Connections without a whole request head yet
    /// ([`DoorLimits::max_pending_heads_per_ip`]).
    pending: usize,
    /// Unauthenticated requests that may still be served now; refilled at
    /// [`DoorLimits::unauthenticated_per_sec`], up to twice that.
    tokens: f64,
    /// When `tokens` was last refilled.
    refilled: Instant,
}

impl Peer {
    fn new(limits: &DoorLimits) -> Peer {
        Peer {
            conns: 0,
            pending: 0,
            tokens: burst(limits),
            refilled: Instant::now(),
        }
    }

    /// Refills the bucket up to now.
    fn refill(&mut self, limits: &DoorLimits) {
        let now = Instant::now();
        let rate = limits.unauthenticated_per_sec as f64;
        let gained = now.duration_since(self.refilled).as_secs_f64() * rate;
        self.tokens = (self.tokens + gained).min(burst(limits));
        self.refilled = now;
    }

    /// An entry with nothing open and a full bucket carries no state worth keeping.
    fn forgettable(&mut self, limits: &DoorLimits) -> bool {
        if self.conns > 0 || self.pending > 0 {
            return false;
        }
        self.refill(limits);
        self.tokens >= burst(limits)
    }
}

/// The bucket size of [`Peer::tokens`]: twice the rate a second.
fn burst(limits: &DoorLimits) -> f64 {
    2.0 * limits.unauthenticated_per_sec as f64
}

impl Shared {
    /// `true` when more than half of [`DoorLimits::max_connections`] are in use: an
    /// idle keep-alive connection then closes, leaving room for new ones.
    fn crowded(&self) -> bool {
        self.conns.load(Ordering::SeqCst) > self.limits.max_connections / 2
    }
}

/// A connection counted against [`DoorLimits::max_pending_heads_per_ip`] until its
/// request head is complete; dropping it gives the count back.
struct PendingSlot {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl PendingSlot {
    /// A pending slot for a connection of `ip` that is already counted in
    /// [`Peer::conns`]; `None` when the address has none left.
    fn take(shared: &Arc<Shared>, ip: IpAddr) -> Option<PendingSlot> {
        let mut map = shared.peers.lock();
        let peer = map.get_mut(&ip)?;
        if peer.pending >= shared.limits.max_pending_heads_per_ip {
            return None;
        }
        peer.pending += 1;
        Some(PendingSlot {
            shared: shared.clone(),
            ip,
        })
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        if let Some(p) = self.shared.peers.lock().get_mut(&self.ip) {
            p.pending = p.pending.saturating_sub(1);
        }
    }
}

/// How a connection was admitted.
enum Admission {
    /// Within the caps: counted in [`Peer::conns`] (given back on drop) and holding a
    /// pending slot for its first head.
    Regular(PeerSlot, PendingSlot),
    /// Past a cap, in the reserve: its first request is served only with the token,
    /// and the connection closes after it.
    Probation(ProbationSlot),
}

/// A connection counted in [`Peer::conns`] while it lives.
struct PeerSlot {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let limits = &self.shared.limits;
        let mut map = self.shared.peers.lock();
        if let Some(p) = map.get_mut(&self.ip) {
            p.conns = p.conns.saturating_sub(1);
            if p.forgettable(limits) {
                map.remove(&self.ip);
            }
        }
    }
}

/// A probation connection: counted in [`Shared::probation_live`] while it lives, and
/// listed in [`Shared::probation`] (evictable) until its head is complete.
struct ProbationSlot {
    shared: Arc<Shared>,
    id: u64,
}

impl ProbationSlot {
    /// Takes the connection off the eviction list: its head is complete.
    fn settle(&self) {
        self.shared
            .probation
            .lock()
            .retain(|(id, _)| *id != self.id);
    }
}

impl Drop for ProbationSlot {
    fn drop(&mut self) {
        self.settle();
        self.shared.probation_live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Decides how a new connection from `ip` is admitted, or `None` when it must be
/// refused at once (the reserve is empty and every reserve connection is being
/// served, or too many evicted ones are still closing).
fn admit(shared: &Arc<Shared>, ip: IpAddr, stream: &TcpStream, live: usize) -> Option<Admission> {
    let limits = &shared.limits;
    let regular_live = live.saturating_sub(shared.probation_live.load(Ordering::SeqCst));
    {
        let mut map = shared.peers.lock();
        let peer = map.entry(ip).or_insert_with(|| Peer::new(limits));
        if regular_live < limits.max_connections
            && peer.conns < limits.max_connections_per_ip
            && peer.pending < limits.max_pending_heads_per_ip
        {
            peer.conns += 1;
            peer.pending += 1;
            drop(map);
            return Some(Admission::Regular(
                PeerSlot {
                    shared: shared.clone(),
                    ip,
                },
                PendingSlot {
                    shared: shared.clone(),
                    ip,
                },
            ));
        }
        if peer.forgettable(limits) {
            map.remove(&ip);
        }
    }
    if limits.reserve_connections == 0 {
        return None;
    }
    let mut queue = shared.probation.lock();
    let live_probation = shared.probation_live.load(Ordering::SeqCst);
    if live_probation >= limits.reserve_connections {
        // Evict the oldest still sending its head; settled ones are being served.
        let (_, old) = queue.pop_front()?;
        let _ = old.set_write_timeout(Some(Duration::from_millis(200)));
        let mut w = &old;
        let _ = write_response(&mut w, &refusal(503), false);
        let _ = old.shutdown(Shutdown::Both);
        // Evicted threads end at once; still, never more than twice the reserve.
        if live_probation >= 2 * limits.reserve_connections {
            return None;
        }
    }
    let handle = stream.try_clone().ok()?;
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    queue.push_back((id, handle));
    shared.probation_live.fetch_add(1, Ordering::SeqCst);
    Some(Admission::Probation(ProbationSlot {
        shared: shared.clone(),
        id,
    }))
}

/// Counts a connection thread in [`Shared::conns`] while it lives.
struct ConnGuard(Arc<Shared>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.conns.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running server: an accept thread and one thread per connection.
pub struct Server {
    local: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Starts serving `service` on `listener` within `limits`.
    ///
    /// # Errors
    ///
    /// A thread that cannot be spawned, or a listener without a local address.
    pub fn start(
        listener: TcpListener,
        limits: DoorLimits,
        service: Arc<dyn Service>,
    ) -> io::Result<Server> {
        let local = listener.local_addr()?;
        let shared = Arc::new(Shared {
            service,
            limits,
            stop: AtomicBool::new(false),
            conns: AtomicUsize::new(0),
            peers: Mutex::new(HashMap::new()),
            probation: Mutex::new(VecDeque::new()),
            probation_live: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("door-accept".into())
            .spawn(move || accept_loop(&listener, &s))?;
        Ok(Server {
            local,
            shared,
            accept: Some(accept),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops accepting, lets each connection finish its current request, joins all
    /// threads. Idempotent.
    pub fn shutdown(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept thread with a connection of our own.
        let mut wake = self.local;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if accept.join().is_err() {
            log::error!("door accept thread panicked");
        }
    }
}

/// Accepts until the server stops, one thread per connection within the caps; joins
/// every connection thread before it returns.
fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let limits = &shared.limits;
    let mut live: Vec<JoinHandle<()>> = Vec::new();
    let mut accepted: u64 = 0;
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                log::debug!("door: accept failed: {e}");
                std::thread::sleep(ACCEPT_ERROR_PAUSE);
                continue;
            }
        };
        // Join the threads that ended, so `live` holds at most max_connections.
        let (ended, running): (Vec<_>, Vec<_>) = live.drain(..).partition(|h| h.is_finished());
        live = running;
        for h in ended {
            if h.join().is_err() {
                log::error!("door connection thread panicked");
            }
        }
        if live.len() >= limits.max_connections + 2 * limits.reserve_connections {
            log::debug!("door: {} connections open; refusing one", live.len());
            refuse(stream);
            continue;
        }
        accepted = accepted.wrapping_add(1);
        if accepted % 1024 == 0 {
            shared.peers.lock().retain(|_, p| !p.forgettable(limits));
        }
        let ip = stream
            .peer_addr()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip());
        let Some(admission) = admit(shared, ip, &stream, live.len()) else {
            log::debug!("door: {ip} is past its caps and the reserve is busy; refusing one");
            refuse(stream);
            continue;
        };
        shared.conns.fetch_add(1, Ordering::SeqCst);
        let guard = ConnGuard(shared.clone());
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("door-conn".into())
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(move || {
                let _guard = guard;
                let peer = stream.peer_addr().ok();
                let r = catch_unwind(AssertUnwindSafe(|| serve_connection(stream, &s, admission)));
                if r.is_err() {
                    log::error!("door: a request from {peer:?} panicked; connection dropped");
                }
            });
        match spawned {
            Ok(h) => live.push(h),
            // The closure (stream, slot and guard) is dropped: the connection closes.
            Err(e) => log::error!("door: cannot start a connection thread: {e}"),
        }
    }
    for h in live {
        if h.join().is_err() {
            log::error!("door connection thread panicked");
        }
    }
}

/// HTTP 503 with `Retry-After: 1`, then close. Written on the accept thread: a fresh
/// socket's send buffer takes it at once, and the write is bounded by 1 s anyway.
fn refuse(mut s: TcpStream) {
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = write_response(&mut s, &refusal(503), false);
    let _ = s.shutdown(Shutdown::Write);
}

/// An empty answer with `Retry-After: 1` that closes the connection (503, 429).
fn refusal(status: u16) -> Response {
    let mut r = Response::empty(status);
    r.headers.push(("Retry-After", "1".into()));
    r.close = true;
    r
}

/// Takes one unauthenticated request from the bucket of `ip`; `false` when it is
/// empty. Always `true` when [`DoorLimits::unauthenticated_per_sec`] is 0.
fn spend_unauthenticated(shared: &Shared, ip: IpAddr) -> bool {
    let limits = &shared.limits;
    if limits.unauthenticated_per_sec == 0 {
        return true;
    }
    let mut map = shared.peers.lock();
    let peer = map.entry(ip).or_insert_with(|| Peer::new(limits));
    peer.refill(limits);
    if peer.tokens >= 1.0 {
        peer.tokens -= 1.0;
        true
    } else {
        false
    }
}

/// Why reading a request stopped.
#[derive(Debug)]
enum ReadError {
    /// The peer closed, the server stops, or no byte came before the idle wait ended.
    Closed,
    /// The request did not arrive in time.
    Timeout,
    /// The head exceeded the header limit.
    TooLarge,
    /// Not HTTP/1.x as we read it.
    Bad(&'static str),
}

fn serve_connection(mut stream: TcpStream, shared: &Arc<Shared>, admission: Admission) {
    let limits = &shared.limits;
    let ip = stream
        .peer_addr()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip());
    let (_peer_slot, pending, probation) = match admission {
        Admission::Regular(p, pending) => (Some(p), Some(pending), None),
        Admission::Probation(p) => (None, None, Some(p)),
    };
    let service = &*shared.service;
    let stop = &shared.stop;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    // A fresh connection must send its whole first head within the head deadline of
    // being accepted; it holds its pending slot meanwhile (a probation connection has
    // none: it is bounded by the reserve instead).
    let mut pending = pending;
    let mut start = Some(Instant::now());
    loop {
        // Wait for the first byte of the next request on a kept-alive connection,
        // giving it up when the server is crowded or stops.
        if buf.is_empty() && start.is_none() {
            match wait_first_byte(&mut stream, &mut buf, limits.idle_timeout, shared) {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            }
        }
        let begun = start.take().unwrap_or_else(Instant::now);
        // Counted against max_pending_heads_per_ip until the head is complete.
        let slot = match pending.take() {
            Some(p) => Some(p),
            None if probation.is_some() => None,
            None => match PendingSlot::take(shared, ip) {
                Some(p) => Some(p),
                None => return answer_and_close(stream, 503),
            },
        };
        let deadline = begun + limits.read_timeout;
        let head_deadline = begun + limits.head_timeout.min(limits.read_timeout);
        let head_len = match read_head(
            &mut stream,
            &mut buf,
            limits.max_header_bytes,
            head_deadline,
            stop,
        ) {
            Ok(n) => n,
            Err(ReadError::Closed) => return,
            Err(ReadError::Timeout) => return answer_and_close(stream, 408),
            Err(ReadError::TooLarge) => return answer_and_close(stream, 431),
            Err(ReadError::Bad(why)) => {
                log::debug!("door: bad request: {why}");
                return answer_and_close(stream, 400);
            }
        };
        drop(slot);
        if let Some(p) = &probation {
            p.settle();
        }
        let head = match parse_head(&buf[..head_len]) {
            Ok(mut h) => {
                h.peer = stream.peer_addr().ok();
                h
            }
            Err(ReadError::TooLarge) => return answer_and_close(stream, 431),
            Err(ReadError::Bad(why)) => {
                log::debug!("door: bad request: {why}");
                return answer_and_close(stream, 400);
            }
            Err(_) => return answer_and_close(stream, 400),
        };
        buf.drain(..head_len);

        if head.header("transfer-encoding").is_some() {
            return answer_and_close(stream, 501);
        }
        let length = match content_length(&head) {
            Ok(n) => n,
            Err(()) => return answer_and_close(stream, 400),
        };
        if length.is_none() && head.method == "POST" {
            return answer_and_close(stream, 411);
        }
        let length = length.unwrap_or(0);

        let authorized = service.authorized(&head);
        if !authorized {
            if probation.is_some() {
                return answer_refusal(stream, 503, length > buf.len());
            }
            if !spend_unauthenticated(shared, ip) {
                return answer_refusal(stream, 429, length > buf.len());
            }
        }
        if let Some(mut r) = service.check_head(&head) {
            let unread = length > buf.len();
            // A 401 ends the connection: a client without the token gets one try per
            // connection, and cannot hold it with refused requests.
            r.close |= unread || !keep_alive(&head) || r.status == 401 || probation.is_some();
            if length <= buf.len() {
                buf.drain(..length);
            }
            let close = r.close;
            if write_response(&mut stream, &r, head.method == "HEAD").is_err() || close {
                return close_gracefully(stream, unread);
            }
            continue;
        }
        if length > limits.max_body_bytes {
            log::info!(
                target: "mur::door",
                "refused a request from {}: HTTP 413, a body of {length} bytes is over the {} byte limit",
                stream
                    .peer_addr()
                    .map_or_else(|_| "an unknown peer".to_string(), |a| a.to_string()),
                limits.max_body_bytes
            );
            let mut r = service.too_large(limits.max_body_bytes);
            r.close = true;
            let _ = write_response(&mut stream, &r, false);
            return close_gracefully(stream, true);
        }
        if head
            .header("expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
            && buf.len() < length
            && stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_err()
        {
            return;
        }
        match read_body(&mut stream, &mut buf, length, deadline, stop) {
            Ok(()) => {}
            Err(ReadError::Timeout) => return answer_and_close(stream, 408),
            Err(_) => return,
        }
        let body: Vec<u8> = buf.drain(..length).collect();
        let mut r = service.call(&head, body, stop);
        r.close |= !keep_alive(&head)
            || stop.load(Ordering::SeqCst)
            || shared.crowded()
            || probation.is_some();
        let close = r.close;
        if write_response(&mut stream, &r, false).is_err() || close {
            return close_gracefully(stream, false);
        }
    }
}

/// `Ok(true)` once `buf` holds at least one byte; `Ok(false)` when the peer closed,
/// the idle time passed, the server is crowded, or it stops.
fn wait_first_byte(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    idle: Duration,
    shared: &Shared,
) -> io::Result<bool> {
    let end = Instant::now() + idle;
    let mut chunk = [0u8; 8192];
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let now = Instant::now();
        if now >= end {
            return Ok(false);
        }
        stream.set_read_timeout(Some(
            (end - now).min(IDLE_SLICE).max(Duration::from_millis(1)),
        ))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(true);
            }
            Err(e) if is_timeout(&e) => {
                if shared.crowded() {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads until `buf` holds a whole head; its length including the blank line. Lines
/// may end in CRLF or a bare LF. A connection that sent nothing before `deadline`
/// is [`ReadError::Closed`] (nothing to answer), one that sent part of a head is
/// [`ReadError::Timeout`].
fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<usize, ReadError> {
    let mut scanned: usize = 0;
    loop {
        if scanned == 0 {
            // Skip empty lines before a request line (RFC 9112 §2.2).
            let blank = buf
                .iter()
                .position(|b| *b != b'\r' && *b != b'\n')
                .unwrap_or(buf.len());
            let blank = buf[..blank]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            buf.drain(..blank);
        }
        let from = scanned.saturating_sub(2).min(buf.len());
        if let Some(end) = head_end(buf, from) {
            if end > max {
                return Err(ReadError::TooLarge);
            }
            return Ok(end);
        }
        scanned = buf.len();
        if buf.len() > max {
            return Err(ReadError::TooLarge);
        }
        match read_more(stream, buf, deadline, stop) {
            Err(ReadError::Timeout) if buf.is_empty() => return Err(ReadError::Closed),
            r => r?,
        }
    }
}

/// The end of a head in `buf` (just past its blank line), looking at line ends from
/// `from` on: an LF followed by an empty line, `\n\n` or `\n\r\n`.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < buf.len() {
        if buf[i] == b'\n' {
            match (buf.get(i + 1), buf.get(i + 2)) {
                (Some(b'\n'), _) => return Some(i + 2),
                (Some(b'\r'), Some(b'\n')) => return Some(i + 3),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    length: usize,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<(), ReadError> {
    while buf.len() < length {
        read_more(stream, buf, deadline, stop)?;
    }
    Ok(())
}

/// One read, bounded by `deadline`; [`ReadError::Closed`] once the server stops.
fn read_more(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<(), ReadError> {
    let mut chunk = [0u8; 16384];
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(ReadError::Closed);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(ReadError::Timeout);
        }
        stream
            .set_read_timeout(Some(
                (deadline - now)
                    .min(IDLE_SLICE)
                    .max(Duration::from_millis(1)),
            ))
            .map_err(|_| ReadError::Closed)?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(());
            }
            Err(e) if is_timeout(&e) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(ReadError::Closed),
        }
    }
}

fn parse_head(bytes: &[u8]) -> Result<Head, ReadError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ReadError::Bad("head is not utf-8"))?;
    if text
        .bytes()
        .zip(text.bytes().skip(1).chain(Some(b'\n')))
        .any(|(b, next)| b == b'\r' && next != b'\n')
    {
        return Err(ReadError::Bad("bare CR in the head"));
    }
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().ok_or(ReadError::Bad("no request line"))?;
    let mut it = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(ReadError::Bad("malformed request line"));
    };
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return Err(ReadError::Bad("unsupported http version")),
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(ReadError::Bad("malformed method"));
    }
    let mut path = target;
    if let Some(rest) = path
        .strip_prefix("http://")
        .or_else(|| path.strip_prefix("https://"))
    {
        path = rest.find('/').map_or("/", |i| &rest[i..]);
    }
    let path = path.split(['?', '#']).next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    for l in lines {
        if l.is_empty() {
            continue;
        }
        let (n, v) = l
            .split_once(':')
            .ok_or(ReadError::Bad("malformed header"))?;
        if n.is_empty() || n.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(ReadError::Bad("malformed header name"));
        }
        headers.push((n.to_ascii_lowercase(), v.trim().to_string()));
        if headers.len() > MAX_HEADERS {
            return Err(ReadError::TooLarge);
        }
    }
    Ok(Head {
        method: method.to_string(),
        path,
        http11,
        headers,
        peer: None,
    })
}

/// The declared body length; `Err` for a malformed or conflicting value.
fn content_length(head: &Head) -> Result<Option<usize>, ()> {
    let mut found: Option<usize> = None;
    for (n, v) in &head.headers {
        if n == "content-length" {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(());
            }
            let len: usize = v.parse().map_err(|_| ())?;
            if found.is_some_and(|f| f != len) {
                return Err(());
            }
            found = Some(len);
        }
    }
    Ok(found)
}

fn keep_alive(head: &Head) -> bool {
    let conn = head.header("connection").unwrap_or("");
    if head.http11 {
        !conn.eq_ignore_ascii_case("close")
    } else {
        false
    }
}

fn answer_and_close(mut stream: TcpStream, status: u16) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "an unknown peer".to_string(), |a| a.to_string());
    // 503 is load shedding, which can come in floods: debug only.
    let level = if status == 503 {
        log::Level::Debug
    } else {
        log::Level::Info
    };
    log::log!(
        target: "mur::door",
        level,
        "refused a request from {peer}: HTTP {status} {}",
        reason(status)
    );
    let mut r = Response::empty(status);
    r.close = true;
    let _ = write_response(&mut stream, &r, false);
    close_gracefully(stream, false);
}

/// [`refusal`] (503 for a probation connection without the token, 429 past the
/// unauthenticated rate), then closes; `drain` when a body was left unread.
fn answer_refusal(mut stream: TcpStream, status: u16, drain: bool) {
    log::debug!(
        target: "mur::door",
        "refused a request from {}: HTTP {status} {}",
        stream
            .peer_addr()
            .map_or_else(|_| "an unknown peer".to_string(), |a| a.to_string()),
        reason(status)
    );
    let _ = write_response(&mut stream, &refusal(status), false);
    close_gracefully(stream, drain);
}

/// Closes the write side, then drains what the peer still sends (bounded in bytes and
/// time) so it reads our answer rather than a connection reset.
fn close_gracefully(mut stream: TcpStream, drain: bool) {
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
    if !drain {
        return;
    }
    let end = Instant::now() + DRAIN_TIME;
    let mut chunk = [0u8; 16384];
    let mut total = 0;
    while total < DRAIN_BYTES {
        let now = Instant::now();
        if now >= end || stream.set_read_timeout(Some(end - now)).is_err() {
            break;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
}

fn write_response(stream: &mut impl Write, r: &Response, head_only: bool) -> io::Result<()> {
    let mut out = Vec::with_capacity(256 + r.body.len());
    write!(out, "HTTP/1.1 {} {}\r\n", r.status, reason(r.status))?;
    for (n, v) in &r.headers {
        write!(out, "{n}: {v}\r\n")?;
    }
    write!(out, "Content-Length: {}\r\n", r.body.len())?;
    if r.close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(&r.body);
    }
    stream.write_all(&out)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_and_bad_ones_do_not() {
        let h = parse_head(b"POST /?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n").unwrap();
        assert_eq!(h.path, "/");
        assert_eq!(h.header("content-length"), Some("3"));
        assert_eq!(content_length(&h), Ok(Some(3)));
        let h = parse_head(b"GET http://h:1/.well-known/agent-card.json HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(h.path, "/.well-known/agent-card.json");
        assert!(!h.http11);
        for bad in [
            &b"GET / HTTP/2\r\n\r\n"[..],
            b"GET /\r\n\r\n",
            b"get / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nNoColon\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"GET / HTTP/1.1\r\n\xff: x\r\n\r\n",
        ] {
            assert!(
                parse_head(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let h = parse_head(b"POST / HTTP/1.1\nHost: a\r\nContent-Length: 3\n\n").unwrap();
        assert_eq!(h.header("host"), Some("a"));
        assert_eq!(h.header("content-length"), Some("3"));
        assert!(parse_head(b"GET / HTTP/1.1\rHost: a\n\n").is_err());
        assert!(parse_head(b"GET / HTTP/1.1\nHost: a\rb\n\n").is_err());
        let h = parse_head(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n")
            .unwrap();
        assert!(content_length(&h).is_err());
        let h = parse_head(b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n").unwrap();
        assert!(content_length(&h).is_err());
        let h = parse_head(b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n")
            .unwrap();
        assert!(content_length(&h).is_err());
    }

    #[test]
    fn a_head_ends_at_an_empty_line_in_either_ending() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody", 0), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody", 0), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\nA: b\r\n\n", 0), Some(22));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\r\n", 0), Some(17));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r", 0), None);
    }
}
