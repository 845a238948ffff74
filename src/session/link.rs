//! How a caller reaches a member: [`Link`], one implementation per way of reaching a
//! door. The poller ([`super::call`]) sees only this trait, so the wire (A2A JSON-RPC
//! over HTTP, or a direct call into a member of the same process) is swappable.

use std::sync::Arc;

use super::board::{Board, Origin};

/// A member task's state, as its door reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// `TASK_STATE_SUBMITTED` (not terminal).
    Submitted,
    /// `TASK_STATE_WORKING`.
    Working,
    /// `TASK_STATE_COMPLETED`.
    Completed,
    /// `TASK_STATE_FAILED`.
    Failed,
    /// `TASK_STATE_CANCELED`.
    Canceled,
    /// `TASK_STATE_REJECTED`.
    Rejected,
    /// Any other spelling (including `TASK_STATE_INPUT_REQUIRED`, which no member call
    /// can satisfy): a poll that reads it ends the call failed, it never loops on it.
    Other(String),
}

impl State {
    /// Whether no further change is expected: everything but submitted and working.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, State::Submitted | State::Working)
    }

    /// The A2A spelling, `TASK_STATE_…`.
    pub fn wire(&self) -> &str {
        match self {
            State::Submitted => "TASK_STATE_SUBMITTED",
            State::Working => "TASK_STATE_WORKING",
            State::Completed => "TASK_STATE_COMPLETED",
            State::Failed => "TASK_STATE_FAILED",
            State::Canceled => "TASK_STATE_CANCELED",
            State::Rejected => "TASK_STATE_REJECTED",
            State::Other(s) => s,
        }
    }

    /// Reads an A2A spelling in any casing, both cancel spellings included
    /// ([`TaskState::parse`](crate::a2a::TaskState::parse)); input-required,
    /// auth-required, unspecified and unknown states are [`State::Other`], kept as sent.
    pub fn from_wire(s: &str) -> State {
        State::from_task_state(&crate::a2a::TaskState::parse(s))
    }

    /// The state of an A2A task state.
    pub fn from_task_state(s: &crate::a2a::TaskState) -> State {
        use crate::a2a::TaskState as T;
        match s {
            T::Submitted => State::Submitted,
            T::Working => State::Working,
            T::Completed => State::Completed,
            T::Failed => State::Failed,
            T::Canceled => State::Canceled,
            T::Rejected => State::Rejected,
            other => State::Other(other.as_str().to_string()),
        }
    }
}

/// A member task as a door reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The member's task id.
    pub id: String,
    /// Its state.
    pub state: State,
    /// Its status message's text.
    pub message: Option<String>,
    /// For a completed task: the text of its artifacts (the answer).
    pub answer: Option<String>,
    /// `metadata.murmur.noAnswer`.
    pub no_answer: bool,
    /// `metadata.murmur.noAnswerBelow`, `(member, status)`, as sent.
    pub no_answer_below: Vec<(String, String)>,
    /// When the status (state and message) was last set, and its message's id;
    /// `None` for a snapshot no one stamped (a door then stamps it as it answers).
    pub stamp: Option<StatusStamp>,
    /// The A2A `contextId` the client gave its message; `None`: the task id serves.
    pub context_id: Option<String>,
}

impl Snapshot {
    /// Sets the state and status message; a change (and only a change) stamps the
    /// status anew, so every read of an unchanged status, above all a terminal one,
    /// answers the same timestamp and message id.
    pub fn set_status(&mut self, state: State, message: Option<String>) {
        if self.stamp.is_none() || self.state != state || self.message != message {
            self.stamp = Some(StatusStamp::now());
        }
        self.state = state;
        self.message = message;
    }
}

/// The A2A `status.timestamp` and `status.message.messageId` of a status, fixed when
/// the status is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusStamp {
    /// RFC 3339 UTC with microseconds, e.g. `2026-11-30T15:48:54.031120Z`.
    pub timestamp: String,
    /// `msg_` + a lowercase ULID.
    pub message_id: String,
}

impl StatusStamp {
    /// A stamp for a status set now.
    pub fn now() -> StatusStamp {
        StatusStamp {
            timestamp: crate::a2a::types::timestamp_now(),
            message_id: format!("msg_{}", ulid::Ulid::new().to_string().to_lowercase()),
        }
    }
}

/// Why a door could not be used.
///
/// `Display` is the reason the model may see: it never names the door's address or
/// the token. [`LinkError::detail`] is the same error as the runtime logs it, with the
/// URL called, for the trace and stderr.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinkError {
    /// No answer at all: connection refused or reset, timeout. Two in a row make a call
    /// unreachable. `reason` is the transport error, e.g. `timed out: no answer
    /// within the request timeout of 10s (…)`.
    #[error("{reason}")]
    Unreachable {
        /// What happened, without the address.
        reason: String,
        /// The same, naming the URL called.
        detail: String,
    },
    /// An answer that is an error: HTTP error status, JSON-RPC error, a body that is not
    /// an A2A task, a card this runtime cannot use. `reason` reads after "the door",
    /// e.g. `answered http status 404 (…)` or `broke the protocol: …`.
    #[error("{reason}")]
    Failed {
        /// What happened, without the address.
        reason: String,
        /// The same, naming the URL called.
        detail: String,
    },
}

impl LinkError {
    /// An unreachable door with nothing more to log than `reason`.
    pub fn unreachable(reason: impl Into<String>) -> LinkError {
        let reason = reason.into();
        LinkError::Unreachable {
            detail: reason.clone(),
            reason,
        }
    }

    /// A failed door with nothing more to log than `reason`.
    pub fn failed(reason: impl Into<String>) -> LinkError {
        let reason = reason.into();
        LinkError::Failed {
            detail: reason.clone(),
            reason,
        }
    }

    /// The error as the runtime logs it (with the URL called).
    pub fn detail(&self) -> &str {
        match self {
            LinkError::Unreachable { detail, .. } | LinkError::Failed { detail, .. } => detail,
        }
    }
}

/// What a `SendMessage` carries besides the task text.
#[derive(Debug, Clone, PartialEq)]
pub struct SendMeta {
    /// The calling member's name (`metadata.murmur.caller`).
    pub caller: String,
    /// The calling task's trust class (`metadata.murmur.trust.class`); origin is `peer`.
    pub trust: String,
}

/// A way to reach one member's door.
pub trait Link: Send + Sync {
    /// `SendMessage` with `returnImmediately: true`: the task as one text part.
    fn send(&self, text: &str, meta: &SendMeta) -> Result<Snapshot, LinkError>;
    /// `GetTask`.
    fn get(&self, task_id: &str) -> Result<Snapshot, LinkError>;
    /// `CancelTask`.
    fn cancel(&self, task_id: &str) -> Result<(), LinkError>;
    /// The host of the door's address, for the egress check against
    /// `capabilities.network.allow` (`localhost` for a loopback address).
    fn host(&self) -> String;
    /// The door's address as configured, for the trace and stderr (never for the
    /// model); `local` for a member reached in process.
    fn address(&self) -> String;
}

/// A member of this process, reached by a direct call into its [`Board`]: the same
/// answers its door gives, without the HTTP hop.
pub struct LocalLink {
    /// The member's task store.
    pub board: Arc<Board>,
}

impl Link for LocalLink {
    fn send(&self, text: &str, meta: &SendMeta) -> Result<Snapshot, LinkError> {
        Ok(self.board.submit(
            text,
            Origin::Member {
                caller: meta.caller.clone(),
                trust: meta.trust.clone(),
            },
        ))
    }

    fn get(&self, task_id: &str) -> Result<Snapshot, LinkError> {
        self.board
            .get(task_id)
            .ok_or_else(|| LinkError::failed(format!("answered: task {task_id} not found")))
    }

    fn cancel(&self, task_id: &str) -> Result<(), LinkError> {
        self.board
            .cancel(task_id)
            .map(|_| ())
            .map_err(|e| LinkError::failed(format!("answered: {e}")))
    }

    fn host(&self) -> String {
        "localhost".into()
    }

    fn address(&self) -> String {
        "local".into()
    }
}

/// Whether a door host counts as `localhost` for `capabilities.network.allow`:
/// `localhost`, `127.0.0.0/8` and `::1`.
pub fn is_loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h == "localhost"
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
