//! A door: one capsule served as an A2A 1.0 agent over JSON-RPC (architecture page,
//! "Formations and doors").
//!
//! The door owns the wire: HTTP/1.1, limits, the bearer token, JSON-RPC envelopes and
//! A2A errors. What a task *is* belongs to a [`TaskHandler`]; [`TaskBook`] is a
//! thread-safe task store a handler can build on.
//!
//! Routes:
//!
//! - `GET /.well-known/agent-card.json`: the public card, with `Cache-Control` and a
//!   weak `ETag` (`If-None-Match` answers 304).
//! - `POST /` (any query string ignored): JSON-RPC `SendMessage`, `GetTask`,
//!   `CancelTask`. Every POST needs `Authorization: Bearer <token>`; a missing or wrong
//!   token is a bare HTTP 401 with `WWW-Authenticate: Bearer` and an empty body, checked
//!   before anything else of the request is read.
//!
//! The HTTP server is our own small blocking HTTP/1.1 server on `std::net` (see
//! [`server`]) rather than tiny_http, which has no read timeout and unbounded threads.
//! Limits are in [`DoorLimits`].
//!
//! Errors, checked in the order a2a-sdk 1.3 checks them; all are HTTP 200 JSON-RPC
//! errors echoing the request `id` (string, number or null; a missing id is answered
//! as null) unless said otherwise:
//!
//! | case | code | `error.data` |
//! |---|---|---|
//! | body is not JSON | -32700, id null | none |
//! | a batch, a non-object, `jsonrpc` not `"2.0"`, no `method`, an id that is not a string, number or null | -32600 (id null when the id itself is bad or the body is a batch) | none |
//! | unknown method, 0.3's `message/send`, `tasks/get`, `tasks/cancel` | -32601 `Method not found` | none |
//! | A2A 1.0 methods not served (`SendStreamingMessage`, `ListTasks`, push configs, …) | -32004 | ErrorInfo `UNSUPPORTED_OPERATION` |
//! | params of the wrong shape | -32602 `Invalid params` | ErrorInfo `INVALID_PARAMS`, `metadata.parseError` |
//! | a missing message or id, empty `message.parts` | -32602 `Validation failed` | ErrorInfo + `google.rpc.BadRequest` |
//! | `A2A-Version` missing (read as 0.3) or not 1.x | -32009 | ErrorInfo `VERSION_NOT_SUPPORTED` |
//! | unknown task (GetTask, CancelTask, a message naming a `taskId`) | -32001 `Task not found` | ErrorInfo `TASK_NOT_FOUND` |
//! | CancelTask of a terminal task | -32002 `Task cannot be canceled` | ErrorInfo `TASK_NOT_CANCELABLE` |
//! | a message continuing an existing task | -32004 `Task … is in terminal state: …` | ErrorInfo `UNSUPPORTED_OPERATION` |
//! | `acceptedOutputModes` none of which the card's output modes (or `*/*`, `text/*`) match | -32005 | ErrorInfo `CONTENT_TYPE_NOT_SUPPORTED` |
//! | body over [`DoorLimits::max_body_bytes`] | HTTP 413, -32600 `Payload too large`, id null | none |
//!
//! HTTP-level answers with an empty body: 401 (token), 404 (other paths), 405 (other
//! methods), 408 (request not complete within [`DoorLimits::read_timeout`]), 411 (POST
//! without `Content-Length`), 431 (head too large), 501 (chunked request body), 503
//! (accept queue full).

pub mod book;
mod rpc;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use book::{TaskBook, TransitionError};

use crate::a2a::types::{AgentCard, Message, Task};

/// The task logic behind a door. The door calls it from its worker threads, so every
/// method must be quick except [`TaskHandler::wait_terminal`].
pub trait TaskHandler: Send + Sync + 'static {
    /// A new task from `SendMessage`: accept it (a task in SUBMITTED or WORKING) or
    /// refuse it (a task created straight into `TASK_STATE_REJECTED` with a status
    /// message, e.g. [`BUSY_MESSAGE`](crate::a2a::BUSY_MESSAGE)).
    ///
    /// The door calls it only for a message that names no `taskId` and has at least
    /// one part; a message continuing a task is answered by the door itself (-32001
    /// unknown task, -32004 otherwise).
    fn submit(&self, message: Message) -> Task;

    /// The task with this id, or `None` when there is none.
    fn get(&self, task_id: &str) -> Option<Task>;

    /// Cancels a task: the task now (normally CANCELED).
    ///
    /// # Errors
    ///
    /// [`CancelError::NotFound`] (-32001) or [`CancelError::NotCancelable`] (-32002)
    /// for a task already terminal.
    fn cancel(&self, task_id: &str) -> Result<Task, CancelError>;

    /// Blocks until the task is terminal or `timeout` passes; the latest task, `None`
    /// when there is no such task. The door calls it in slices of at most 250 ms so it
    /// can shut down.
    fn wait_terminal(&self, task_id: &str, timeout: Duration) -> Option<Task>;

    /// The agent card. The door replaces `supportedInterfaces` with its own URL and
    /// adds the bearer security scheme.
    fn card(&self) -> AgentCard;
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
#[derive(Debug, Clone)]
pub struct DoorLimits {
    /// The largest request body, in bytes. Defaults to 1 MiB. A request declaring more
    /// gets HTTP 413 with a JSON-RPC -32600 `Payload too large` body (id null), and
    /// the connection is closed without reading the body.
    pub max_body_bytes: usize,
    /// The largest request line plus headers, in bytes. Defaults to 16 KiB; more gets
    /// HTTP 431 and the connection is closed.
    pub max_header_bytes: usize,
    /// How long a whole request (request line, headers and body) may take to arrive
    /// once its first byte came. Defaults to 10 seconds; a slower client is dropped
    /// (HTTP 408 when it can still be told), so it holds a worker at most this long.
    pub read_timeout: Duration,
    /// How long an idle keep-alive connection is kept waiting for its next request.
    /// Defaults to 5 seconds; connections waiting for a worker close idle connections
    /// at once.
    pub idle_timeout: Duration,
    /// How long a write of a response may block. Defaults to 10 seconds.
    pub write_timeout: Duration,
    /// Worker threads serving connections. Defaults to 8.
    pub workers: usize,
    /// Accepted connections waiting for a worker. Defaults to 64; beyond that a new
    /// connection gets HTTP 503 and is closed.
    pub queue: usize,
    /// How long a blocking `SendMessage` (no `returnImmediately`) waits for the task to
    /// end before answering with the task as it is. Defaults to 300 seconds.
    pub send_wait: Duration,
    /// How many blocking `SendMessage` calls may wait at once. Defaults to half the
    /// workers (at least 1); beyond that a blocking call answers at once, as if
    /// `returnImmediately` were set, so waiting never starves `GetTask`.
    pub max_blocking_sends: usize,
    /// `Cache-Control` of the agent card. Defaults to `public, max-age=300`.
    pub card_cache_control: String,
}

impl Default for DoorLimits {
    fn default() -> DoorLimits {
        DoorLimits {
            max_body_bytes: 1024 * 1024,
            max_header_bytes: 16 * 1024,
            read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            workers: 8,
            queue: 64,
            send_wait: Duration::from_secs(300),
            max_blocking_sends: 4,
            card_cache_control: "public, max-age=300".to_string(),
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
    /// The limits are unusable (zero workers, zero body size, …).
    #[error("invalid door limits: {0}")]
    Limits(String),
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
        if limits.workers == 0 || limits.max_body_bytes == 0 || limits.max_header_bytes < 256 {
            return Err(DoorError::Limits(format!(
                "workers {}, max_body_bytes {}, max_header_bytes {} (at least 1, 1, 256)",
                limits.workers, limits.max_body_bytes, limits.max_header_bytes
            )));
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
