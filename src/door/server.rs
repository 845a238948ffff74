//! A small blocking HTTP/1.1 server on `std::net`, with the limits a door needs and
//! tiny_http lacks: a deadline for a whole request, a bounded worker pool and a bounded
//! accept queue, a header and a body size cap.
//!
//! What it serves is a [`Service`]; the door's is the A2A JSON-RPC app. Supported:
//! `Content-Length` bodies (no chunked requests: 501), keep-alive and pipelining on
//! HTTP/1.1, `Expect: 100-continue`. One worker serves one connection at a time.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TrySendError};

use super::DoorLimits;

/// How many headers a request may carry.
const MAX_HEADERS: usize = 100;

/// How long an idle wait sleeps between looks at the queue and the stop flag.
const IDLE_SLICE: Duration = Duration::from_millis(200);

/// How long, and how many bytes, a connection closed early is drained, so the client
/// reads the answer instead of a reset.
const DRAIN_TIME: Duration = Duration::from_secs(2);
const DRAIN_BYTES: usize = 8 * 1024 * 1024;

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

    /// Serves one request. `stop` turns true when the server shuts down; a call that
    /// waits must watch it.
    fn call(&self, head: &Head, body: Vec<u8>, stop: &AtomicBool) -> Response;
}

/// A running server: an accept thread and a pool of workers.
pub struct Server {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
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
        let stop = Arc::new(AtomicBool::new(false));
        let idle = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = crossbeam_channel::bounded::<TcpStream>(limits.queue.max(1));
        let limits = Arc::new(limits);
        let mut threads = Vec::with_capacity(limits.workers + 1);
        for i in 0..limits.workers {
            let (wrx, wservice, wlimits, wstop, widle) = (
                rx.clone(),
                service.clone(),
                limits.clone(),
                stop.clone(),
                idle.clone(),
            );
            let h = std::thread::Builder::new()
                .name(format!("door-worker-{i}"))
                .spawn(move || {
                    let pool = Pool {
                        queue: &wrx,
                        idle: &widle,
                    };
                    worker(pool, &*wservice, &wlimits, &wstop)
                });
            match h {
                Ok(h) => threads.push(h),
                Err(e) => {
                    stop.store(true, Ordering::SeqCst);
                    drop(tx);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(e);
                }
            }
        }
        let (accept_stop, accept_limits) = (stop.clone(), limits.clone());
        let accept = std::thread::Builder::new()
            .name("door-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if accept_stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = conn else { continue };
                    match tx.try_send(stream) {
                        Ok(()) => {}
                        Err(TrySendError::Full(mut s)) => {
                            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                            let mut r = Response::empty(503);
                            r.headers.push(("Retry-After", "1".into()));
                            r.close = true;
                            let _ = write_response(&mut s, &r, false);
                        }
                        Err(TrySendError::Disconnected(_)) => break,
                    }
                }
                drop(accept_limits);
            });
        match accept {
            Ok(h) => threads.push(h),
            Err(e) => {
                stop.store(true, Ordering::SeqCst);
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
        Ok(Server {
            local,
            stop,
            threads,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops accepting, lets each worker finish its current request, joins all
    /// threads. Idempotent.
    pub fn shutdown(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept thread with a connection of our own.
        let mut wake = self.local;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                log::error!("door thread panicked");
            }
        }
    }
}

/// The accept queue and how many workers wait on it.
#[derive(Clone, Copy)]
struct Pool<'a> {
    queue: &'a Receiver<TcpStream>,
    idle: &'a AtomicUsize,
}

impl Pool<'_> {
    /// `true` when a connection waits and no worker is free to take it: a worker then
    /// gives up its idle keep-alive connection.
    fn crowded(&self) -> bool {
        !self.queue.is_empty() && self.idle.load(Ordering::SeqCst) == 0
    }

    fn next(&self) -> Option<TcpStream> {
        self.idle.fetch_add(1, Ordering::SeqCst);
        let s = self.queue.recv().ok();
        self.idle.fetch_sub(1, Ordering::SeqCst);
        s
    }
}

fn worker(pool: Pool<'_>, service: &dyn Service, limits: &DoorLimits, stop: &AtomicBool) {
    while let Some(stream) = pool.next() {
        if stop.load(Ordering::SeqCst) {
            continue; // drain the queue without serving; dropping closes
        }
        let peer = stream.peer_addr().ok();
        let r = catch_unwind(AssertUnwindSafe(|| {
            serve_connection(stream, service, limits, stop, pool)
        }));
        if r.is_err() {
            log::error!("door: a request from {peer:?} panicked; connection dropped");
        }
    }
}

/// Why reading a request stopped.
#[derive(Debug)]
enum ReadError {
    /// The peer closed, or never sent a byte before the idle wait ended.
    Closed,
    /// The request did not arrive in time (after its first byte).
    Timeout,
    /// The head exceeded the header limit.
    TooLarge,
    /// Not HTTP/1.x as we read it.
    Bad(&'static str),
}

fn serve_connection(
    mut stream: TcpStream,
    service: &dyn Service,
    limits: &DoorLimits,
    stop: &AtomicBool,
    pool: Pool<'_>,
) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        // Wait for the first byte of the next request, giving up the connection when
        // others wait for a worker or the server stops.
        if buf.is_empty() {
            match wait_first_byte(&mut stream, &mut buf, limits.idle_timeout, stop, pool) {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            }
        }
        let deadline = Instant::now() + limits.read_timeout;
        let head_len = match read_head(&mut stream, &mut buf, limits.max_header_bytes, deadline) {
            Ok(n) => n,
            Err(ReadError::Closed) => return,
            Err(ReadError::Timeout) => return answer_and_close(stream, 408),
            Err(ReadError::TooLarge) => return answer_and_close(stream, 431),
            Err(ReadError::Bad(why)) => {
                log::debug!("door: bad request: {why}");
                return answer_and_close(stream, 400);
            }
        };
        let head = match parse_head(&buf[..head_len]) {
            Ok(h) => h,
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

        if let Some(mut r) = service.check_head(&head) {
            let unread = length > buf.len();
            r.close |= unread || !keep_alive(&head);
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
        match read_body(&mut stream, &mut buf, length, deadline) {
            Ok(()) => {}
            Err(ReadError::Timeout) => return answer_and_close(stream, 408),
            Err(_) => return,
        }
        let body: Vec<u8> = buf.drain(..length).collect();
        let mut r = service.call(&head, body, stop);
        r.close |= !keep_alive(&head) || stop.load(Ordering::SeqCst) || pool.crowded();
        let close = r.close;
        if write_response(&mut stream, &r, false).is_err() || close {
            return close_gracefully(stream, false);
        }
    }
}

/// `Ok(true)` once `buf` holds at least one byte; `Ok(false)` when the peer closed,
/// the idle time passed, others wait for a worker and none is free, or the server
/// stops.
fn wait_first_byte(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    idle: Duration,
    stop: &AtomicBool,
    pool: Pool<'_>,
) -> io::Result<bool> {
    let end = Instant::now() + idle;
    let mut chunk = [0u8; 8192];
    loop {
        if stop.load(Ordering::SeqCst) {
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
                if pool.crowded() {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads until `buf` holds a whole head; its length including the blank line.
fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    deadline: Instant,
) -> Result<usize, ReadError> {
    let mut scanned: usize = 0;
    loop {
        if scanned == 0 {
            // Skip empty lines before a request line (RFC 9112 §2.2).
            while buf.starts_with(b"\r\n") {
                buf.drain(..2);
            }
        }
        let start = scanned.saturating_sub(3).min(buf.len());
        if let Some(i) = find(&buf[start..], b"\r\n\r\n") {
            let end = start + i + 4;
            if end > max {
                return Err(ReadError::TooLarge);
            }
            return Ok(end);
        }
        scanned = buf.len();
        if buf.len() > max {
            return Err(ReadError::TooLarge);
        }
        read_more(stream, buf, deadline)?;
    }
}

fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    length: usize,
    deadline: Instant,
) -> Result<(), ReadError> {
    while buf.len() < length {
        read_more(stream, buf, deadline)?;
    }
    Ok(())
}

/// One read, bounded by `deadline`.
fn read_more(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<(), ReadError> {
    let mut chunk = [0u8; 16384];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(ReadError::Timeout);
        }
        stream
            .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))
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
    let mut lines = text.split("\r\n");
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
    let mut r = Response::empty(status);
    r.close = true;
    let _ = write_response(&mut stream, &r, false);
    close_gracefully(stream, false);
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

fn write_response(stream: &mut TcpStream, r: &Response, head_only: bool) -> io::Result<()> {
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

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
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
        let h = parse_head(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n")
            .unwrap();
        assert!(content_length(&h).is_err());
        let h = parse_head(b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n").unwrap();
        assert!(content_length(&h).is_err());
        let h = parse_head(b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n")
            .unwrap();
        assert!(content_length(&h).is_err());
    }
}
