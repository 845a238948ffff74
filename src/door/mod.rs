//! A door: one capsule served as an A2A 1.0 agent over JSON-RPC (architecture page,
//! "Formations and doors").
//!
//! The door owns the wire: HTTP/1.1, limits, the bearer token, JSON-RPC envelopes and
//! A2A errors. What a task *is* belongs to a [`TaskHandler`]; [`TaskBook`] is a
//! thread-safe task store a handler can build on.
//!
//! Routes:
//!
//! - `GET /.well-known/agent-card.json`: the public card, with `Cache-Control`, a
//!   weak `ETag` and `Last-Modified` (when a card with that ETag was first served);
//!   `If-None-Match`, or else `If-Modified-Since`, answers 304.
//! - `POST /` (any query string ignored): JSON-RPC `SendMessage`, `GetTask`,
//!   `ListTasks`, `CancelTask`. Every POST needs `Authorization: Bearer <token>`; a
//!   missing or wrong token is HTTP 401 with `WWW-Authenticate: Bearer` (plus
//!   `error="invalid_token"` for a wrong one) and a JSON body saying which, never the
//!   token, checked before anything else of the request is read. Then the
//!   `Content-Type` must be `application/json`: anything else is HTTP 415 with a
//!   JSON-RPC -32005 body (id null), before the body is read.
//! - `GET /peer-files/<id>`: the bytes of a file the member shared, for the bearer
//!   token plus the handle's secret ([`files`]).
//!
//! What `SendMessage` takes: `params.message` with `role` (`ROLE_USER`), a
//! `messageId` (required) and at least one part, each carrying text, data, url or raw;
//! a part other than text must have a media type the card's `defaultInputModes`
//! cover (-32005 otherwise); a task handler reads the text of the `text` parts.
//! Optional `params.configuration.returnImmediately` (else the call blocks until the
//! task ends, bounded by [`DoorLimits::send_wait`] and
//! [`DoorLimits::max_blocking_sends`]). How many tasks `GetTask` and `ListTasks` can
//! still read is the handler's business: [`TaskBook`] keeps
//! [`book::DEFAULT_CAPACITY`]; the formation board that `mur door` and formation
//! members serve keeps every unfinished task and the 1000 most recent finished ones
//! within 64 MiB of history. `ListTasks` (A2A 1.0 §3.1.4) filters by `contextId`,
//! `status` and `statusTimestampAfter`, sorts by status timestamp, newest first, and
//! pages with an opaque cursor (`pageSize` 1 to 100, default 50); a handler without
//! [`TaskHandler::list`] answers it -32004.
//!
//! Log lines (target `mur::door`, info): one per refused request (HTTP 4xx/5xx refusals
//! other than 503, 404 and 405 with the method and path asked for, and every JSON-RPC
//! error answer), naming the peer, never the token or a query string.
//!
//! The HTTP server is our own small blocking HTTP/1.1 server on `std::net` (see
//! [`server`]) rather than tiny_http, which has no read timeout and unbounded threads.
//! Limits are in [`DoorLimits`].
//!
//! Notifications: JSON-RPC 2.0 says a request without `id` is a notification the
//! server must not answer. The door does what the a2a-sdk 1.3 server does (checked
//! against it): it serves the request and answers it like any other, with `id: null`
//! (HTTP 200, a result or an error). An HTTP request needs an HTTP answer anyway, A2A
//! clients always send an id, and a client that sent a notification by mistake learns
//! what happened rather than reading an empty 204.
//!
//! Errors, checked in the order a2a-sdk 1.3 checks them; all are HTTP 200 JSON-RPC
//! errors echoing the request `id` (string, number or null; a missing id is answered
//! as null) unless said otherwise:
//!
//! | case | code | `error.data` |
//! |---|---|---|
//! | body is not JSON | -32700, id null, `Invalid JSON: …`; a `\uD800`–`\uDFFF` escape without its other half is named with its line and column (serde_json cannot hold it, where the SDK answers -32602) | none |
//! | a batch, a non-object, `jsonrpc` not `"2.0"`, no `method`, an id that is not a string, number or null | -32600 (id null when the id itself is bad or the body is a batch) | none |
//! | unknown method, 0.3's `message/send`, `tasks/get`, `tasks/cancel` | -32601 `Method not found` | none |
//! | push-notification config methods (the card says `pushNotifications: false`) | -32003 `Push notifications are not supported by the agent` | ErrorInfo `PUSH_NOTIFICATION_NOT_SUPPORTED` |
//! | A2A 1.0 methods not served (`SendStreamingMessage`, `SubscribeToTask`, `GetExtendedAgentCard`; `ListTasks` when the handler has no list) | -32004 | ErrorInfo `UNSUPPORTED_OPERATION` |
//! | params of the wrong shape (`ListTasks`: a page size outside 1–100, a page token or status or timestamp that does not parse) | -32602 `Invalid params` | ErrorInfo `INVALID_PARAMS`, `metadata.parseError` |
//! | a missing message, id or `message.messageId`, empty `message.parts`, a part carrying nothing | -32602 `Validation failed` | ErrorInfo + `google.rpc.BadRequest` |
//! | `A2A-Version` missing (read as 0.3) or not 1.x | -32009 | ErrorInfo `VERSION_NOT_SUPPORTED` |
//! | unknown task (GetTask, CancelTask, a message naming a `taskId`) | -32001 `Task not found` | ErrorInfo `TASK_NOT_FOUND` |
//! | CancelTask of a task completed, failed or rejected (a canceled one is answered as it is) | -32002 `Task cannot be canceled` | ErrorInfo `TASK_NOT_CANCELABLE` |
//! | a message continuing an existing task | -32004 `Task … is in terminal state: …` | ErrorInfo `UNSUPPORTED_OPERATION` |
//! | `acceptedOutputModes` none of which the card's output modes (or `*/*`, `text/*`) match; a part the card's input modes do not cover | -32005 | ErrorInfo `CONTENT_TYPE_NOT_SUPPORTED` |
//! | `Content-Type` not `application/json` | HTTP 415, -32005, id null | ErrorInfo `CONTENT_TYPE_NOT_SUPPORTED` |
//! | body over [`DoorLimits::max_body_bytes`] | HTTP 413, -32600 `Payload too large`, id null | none |
//!
//! HTTP-level answers with an empty body: 400 (not HTTP/1.x as the server reads it,
//! e.g. a bare CR in the head; bare LF line endings are accepted), 404
//! (other paths), 405 (other methods), 408 (head not complete within
//! [`DoorLimits::head_timeout`], request not complete within
//! [`DoorLimits::read_timeout`]), 411 (POST without `Content-Length`), 431 (head too
//! large), 429 (over [`DoorLimits::unauthenticated_per_sec`] without the token), 501
//! (chunked request body), 503 (a request without the token on a connection past
//! [`DoorLimits::max_connections`], [`DoorLimits::max_connections_per_ip`] or
//! [`DoorLimits::max_pending_heads_per_ip`], or evicted from the
//! [`DoorLimits::reserve_connections`]). A 401 closes its connection.

pub mod book;
pub mod files;
mod rpc;
pub mod server;
pub mod token;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use book::{TaskBook, TransitionError};

use crate::a2a::types::{AgentCard, Message, Task};

/// The task logic behind a door. The door calls it from its connection threads, so every
/// method must be quick except [`TaskHandler::wait_terminal`].
pub trait TaskHandler: Send + Sync + 'static {
    /// A new task from `SendMessage`: accept it (a task in SUBMITTED or WORKING) or
    /// refuse it (a task created straight into `TASK_STATE_REJECTED` with a status
    /// message, e.g. [`BUSY_MESSAGE`](crate::a2a::BUSY_MESSAGE)).
    ///
    /// The door calls it only for a message that names no `taskId`, has a
    /// `messageId` and at least one part, each part carrying something and, unless it
    /// is text, of a media type the card's `defaultInputModes` cover; a message
    /// continuing a task is answered by the door itself (-32001 unknown task, -32004
    /// otherwise).
    fn submit(&self, message: Message) -> Task;

    /// The task with this id, or `None` when there is none.
    fn get(&self, task_id: &str) -> Option<Task>;

    /// Cancels a task: the task now (normally CANCELED).
    ///
    /// # Errors
    ///
    /// [`CancelError::NotFound`] (-32001), or [`CancelError::NotCancelable`] with the
    /// task for a task already terminal (-32002; the door answers a task already
    /// CANCELED as a success: cancel is idempotent).
    fn cancel(&self, task_id: &str) -> Result<Task, CancelError>;

    /// Blocks until the task is terminal or `timeout` passes; the latest task, `None`
    /// when there is no such task. The door calls it in slices of at most 250 ms so it
    /// can shut down.
    fn wait_terminal(&self, task_id: &str, timeout: Duration) -> Option<Task>;

    /// The agent card. The door replaces `supportedInterfaces` with its own URL and
    /// adds the bearer security scheme.
    fn card(&self) -> AgentCard;

    /// Every task the handler still keeps, for `ListTasks`; `None` (the default) when
    /// it does not list tasks, and the door then answers `ListTasks` with -32004.
    ///
    /// The door filters, sorts and pages this index itself and reads each task of the
    /// page with [`TaskHandler::get`], so it must be cheap: no histories or artifacts.
    fn list(&self) -> Option<Vec<TaskIndex>> {
        None
    }

    /// The files this door's member shared (share-file), served at
    /// `GET /peer-files/<id>` ([`files`]); `None` (the default) answers every such
    /// request HTTP 404.
    fn files(&self) -> Option<&dyn files::FileSource> {
        None
    }
}

/// One task in a [`TaskHandler::list`] index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskIndex {
    /// The task id.
    pub id: String,
    /// The context id, as [`TaskHandler::get`] would answer it.
    pub context_id: String,
    /// The state now.
    pub state: crate::a2a::types::TaskState,
    /// `status.timestamp`: RFC 3339 UTC, e.g. `2026-11-30T15:48:54.031120Z`; empty
    /// when the status has none.
    pub timestamp: String,
}

/// Why a task cannot be canceled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CancelError {
    /// No task with that id (-32001).
    #[error("task not found")]
    NotFound,
    /// The task is terminal (-32002); it is returned as it is.
    #[error("task {} cannot be canceled: it is {}", .0.id, .0.status.state)]
    NotCancelable(Box<Task>),
}

/// The limits a door enforces on its peers. Every field says its default.
///
/// Every connection is served by its own thread (stack
/// [`server::CONNECTION_STACK_BYTES`]), so a slow client holds only its own thread;
/// what bounds the threads, the memory and the time a peer may hold them is here:
///
/// | limit | default | beyond it |
/// |---|---|---|
/// | [`max_connections`](Self::max_connections) | 256 | on probation in the reserve |
/// | [`max_connections_per_ip`](Self::max_connections_per_ip) | 64 | on probation in the reserve |
/// | [`max_pending_heads_per_ip`](Self::max_pending_heads_per_ip) | 64 | on probation in the reserve |
/// | [`reserve_connections`](Self::reserve_connections) | 32 | the oldest still sending its head: HTTP 503, closed |
/// | [`unauthenticated_per_sec`](Self::unauthenticated_per_sec) | 32 a second, bursts of 64 | HTTP 429 `Retry-After: 1`, closed |
/// | [`head_timeout`](Self::head_timeout) | 5 s | HTTP 408, closed (no answer if nothing came) |
/// | [`read_timeout`](Self::read_timeout) | 10 s | HTTP 408, closed |
/// | [`idle_timeout`](Self::idle_timeout) | 5 s | closed |
/// | [`write_timeout`](Self::write_timeout) | 10 s | closed |
/// | [`max_header_bytes`](Self::max_header_bytes) | 16 KiB (and 100 headers) | HTTP 431, closed |
/// | [`max_body_bytes`](Self::max_body_bytes) | 1 MiB | HTTP 413, closed |
/// | [`max_blocking_sends`](Self::max_blocking_sends) | 4 | answered at once |
/// | [`send_wait`](Self::send_wait) | 300 s | answered with the task as it is |
#[derive(Debug, Clone)]
pub struct DoorLimits {
    /// The largest request body, in bytes. Defaults to 1 MiB. A request declaring more
    /// gets HTTP 413 with a JSON-RPC -32600 `Payload too large` body (id null), and
    /// the connection is closed without reading the body.
    pub max_body_bytes: usize,
    /// The largest request line plus headers, in bytes. Defaults to 16 KiB; more gets
    /// HTTP 431 and the connection is closed.
    pub max_header_bytes: usize,
    /// How long a request line and headers may take to arrive: from the connection's
    /// acceptance for its first request, from the first byte for a later request on a
    /// kept-alive connection. Defaults to 5 seconds, and is never longer than
    /// [`read_timeout`](Self::read_timeout). A slower client gets HTTP 408 and is
    /// dropped; a connection that sent nothing at all is closed without an answer.
    pub head_timeout: Duration,
    /// How long a whole request (request line, headers and body) may take to arrive
    /// once it began. Defaults to 10 seconds; a slower client is dropped (HTTP 408
    /// when it can still be told).
    pub read_timeout: Duration,
    /// How long an idle keep-alive connection is kept waiting for its next request.
    /// Defaults to 5 seconds; while more than half of
    /// [`max_connections`](Self::max_connections) are open, idle connections close
    /// at once (within 200 ms).
    pub idle_timeout: Duration,
    /// How long a write of a response may block. Defaults to 10 seconds.
    pub write_timeout: Duration,
    /// Connections served at once, each by its own thread, not counting the
    /// [`reserve_connections`](Self::reserve_connections). Defaults to 256; a
    /// connection beyond that is put on probation in the reserve. At least 1.
    pub max_connections: usize,
    /// Connections from one peer IP address, whatever their state (sending a head,
    /// being served, idle between keep-alive requests). Defaults to 64; one more is put
    /// on probation in the reserve, so one address holds at most this many of
    /// [`max_connections`](Self::max_connections). At least 1.
    pub max_connections_per_ip: usize,
    /// Connections from one peer IP address that have not sent a whole request head
    /// yet (fresh connections, and kept-alive ones in the middle of a head). Defaults
    /// to 64; a fresh connection past it is put on probation in the reserve, and a
    /// kept-alive one starting a head past it gets HTTP 503 and is closed. At least 1.
    pub max_pending_heads_per_ip: usize,
    /// Connections past a cap that the door still reads, *on probation*: its first
    /// request is served, and the connection then closed, only when it carries the
    /// door's bearer token; any other gets HTTP 503 (`Retry-After: 1`) and is closed.
    /// One address can carry a hostile client and legitimate ones (loopback for a
    /// whole formation, a reverse proxy, a NAT); the reserve is how a client with the
    /// token is still served while another on its address holds every slot. When the
    /// reserve is full, a new connection evicts the oldest one still sending its head
    /// (HTTP 503, closed), so trickled heads cannot hold it. Defaults to 32; 0 refuses
    /// every connection past a cap at once with HTTP 503.
    pub reserve_connections: usize,
    /// Requests without the door's token (agent-card GETs, requests answered 401, 404,
    /// 405, …) served per peer IP address per second, in bursts of up to twice that.
    /// Defaults to 32; one more gets HTTP 429 (`Retry-After: 1`) and the connection is
    /// closed. 0 turns the limit off. A 401 always closes its connection.
    pub unauthenticated_per_sec: u32,
    /// How long a blocking `SendMessage` (no `returnImmediately`) waits for the task to
    /// end before answering with the task as it is. Defaults to 300 seconds.
    pub send_wait: Duration,
    /// How many blocking `SendMessage` calls may wait at once. Defaults to 4 (at least
    /// 1); beyond that a blocking call answers at once, as if `returnImmediately` were
    /// set, so waiting callers never hold more than this many connection threads for
    /// long.
    pub max_blocking_sends: usize,
    /// `Cache-Control` of the agent card. Defaults to `public, max-age=300`.
    pub card_cache_control: String,
    /// The URL the agent card advertises in `supportedInterfaces` (an `http://` or
    /// `https://` URL with a host), for a door reached through a TLS terminator, a
    /// reverse proxy or a name: e.g. `https://agent.example.com/`. Defaults to `None`:
    /// `http://<bound address>/`, or, bound to every address (`0.0.0.0`, `::`),
    /// `http://<the card request's Host header>/` (the bound address when the header
    /// is missing or not a plain `host[:port]`).
    pub advertised_url: Option<String>,
}

impl Default for DoorLimits {
    fn default() -> DoorLimits {
        DoorLimits {
            max_body_bytes: 1024 * 1024,
            max_header_bytes: 16 * 1024,
            head_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_connections: 256,
            max_connections_per_ip: 64,
            max_pending_heads_per_ip: 64,
            reserve_connections: 32,
            unauthenticated_per_sec: 32,
            send_wait: Duration::from_secs(300),
            max_blocking_sends: 4,
            card_cache_control: "public, max-age=300".to_string(),
            advertised_url: None,
        }
    }
}

/// Why a door did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DoorError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// A thread could not be spawned.
    #[error("cannot start door thread: {0}")]
    Spawn(std::io::Error),
    /// The limits are unusable (zero connections, zero body size, …).
    #[error("invalid door limits: {0}")]
    Limits(String),
}

/// Checks a URL for [`DoorLimits::advertised_url`].
///
/// # Errors
///
/// A message naming the URL and what is wrong: not a URL, a scheme other than `http`
/// or `https`, no host.
pub fn check_advertised_url(url: &str) -> Result<(), String> {
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| format!("advertised URL `{url}` is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(format!(
                "advertised URL `{url}` must start with http:// or https://"
            ))
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("advertised URL `{url}` has no host"));
    }
    Ok(())
}

/// The warning for a door listening beyond loopback over plain HTTP, or `None` when
/// `listen` is a loopback address or the card advertises an `https://` URL (a TLS
/// terminator in front). The door itself speaks plain HTTP only: TLS is a reverse
/// proxy's job (nginx, Caddy, an ingress, `stunnel`), which also brings certificate
/// renewal; the door's bearer token must not cross a network in clear.
pub fn exposure_warning(listen: SocketAddr, advertised_url: Option<&str>) -> Option<String> {
    if listen.ip().is_loopback() || advertised_url.is_some_and(|u| u.starts_with("https://")) {
        return None;
    }
    Some(format!(
        "the door listens on {listen}, beyond loopback, over plain HTTP: the bearer token and every task travel in clear; put a TLS terminator (a reverse proxy) in front and give its address with --advertise-url https://…, or listen on 127.0.0.1"
    ))
}

/// A running door. Dropping it shuts it down (as [`Door::shutdown`]).
pub struct Door {
    server: server::Server,
}

impl Door {
    /// Binds `listen` and starts serving `handler` behind `token`.
    ///
    /// Bind `127.0.0.1:0` for an ephemeral loopback port; the door binds exactly what it
    /// is given, so loopback is the caller's default to keep.
    ///
    /// # Errors
    ///
    /// [`DoorError::Bind`], [`DoorError::Spawn`], [`DoorError::Limits`].
    pub fn start(
        listen: SocketAddr,
        token: String,
        handler: Arc<dyn TaskHandler>,
        limits: DoorLimits,
    ) -> Result<Door, DoorError> {
        if limits.max_connections == 0
            || limits.max_connections_per_ip == 0
            || limits.max_pending_heads_per_ip == 0
            || limits.max_body_bytes == 0
            || limits.max_header_bytes < 256
        {
            return Err(DoorError::Limits(format!(
                "max_connections {}, max_connections_per_ip {}, max_pending_heads_per_ip {}, max_body_bytes {}, max_header_bytes {} (at least 1, 1, 1, 1, 256)",
                limits.max_connections,
                limits.max_connections_per_ip,
                limits.max_pending_heads_per_ip,
                limits.max_body_bytes,
                limits.max_header_bytes
            )));
        }
        if let Some(u) = &limits.advertised_url {
            check_advertised_url(u).map_err(DoorError::Limits)?;
        }
        let listener = std::net::TcpListener::bind(listen).map_err(|source| DoorError::Bind {
            addr: listen,
            source,
        })?;
        let local = listener.local_addr().map_err(|source| DoorError::Bind {
            addr: listen,
            source,
        })?;
        let app = Arc::new(rpc::App::new(token, handler, &limits, local));
        let server = server::Server::start(listener, limits, app).map_err(DoorError::Spawn)?;
        Ok(Door { server })
    }

    /// The bound address (with the real port when `:0` was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The JSON-RPC URL, `http://<addr>/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.local_addr())
    }

    /// Stops accepting, lets in-flight requests finish (a blocking `SendMessage`
    /// answers with its task as it is) and joins every thread.
    pub fn shutdown(mut self) {
        self.server.shutdown();
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}
