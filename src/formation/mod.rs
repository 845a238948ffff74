//! Formations: members of a `roster.yaml` that hand each other tasks with
//! `call-member` (spec, "call-member" and "end-without-answer").
//!
//! - [`board`]: a member's task store: what its door answers (`SendMessage`, `GetTask`,
//!   `CancelTask`), busy refusals, queueing, the no-answer metadata. It keeps every
//!   unfinished task and the [`board::KEEP_FINISHED`] (1000) most recent finished ones
//!   for `GetTask`; `mur door` serves the same board.
//! - [`link`]: how a caller reaches a member's door ([`link::Link`]), independent of
//!   the wire. A launch reaches every member over A2A HTTP ([`wire::HttpLink`]), local
//!   members included (through their loopback doors); [`link::LocalLink`], in process,
//!   is used by no launch.
//! - [`call`]: one poller thread per outstanding call: busy re-offers with backoff,
//!   `GetTask` every 500 ms, deadline, unreachable, abandon.
//! - [`continuation`]: the one message a waiting task continues with.
//! - [`launch`]: `mur run --roster`: stage every local member, start their sessions
//!   and doors, run the entry task, end the formation.

pub mod board;
pub mod call;
pub mod continuation;
pub mod launch;
pub mod link;
pub mod wire;

use std::time::Duration;

/// How a member call ended (`member_call.status`, and the continuation's headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    /// The member answered: its task completed.
    Completed,
    /// The member ended its task with end-without-answer.
    NoAnswer,
    /// The call could not be made, the door answered an error, or the member's task
    /// failed or reached a state the runtime does not know.
    Failed,
    /// The member's task was cancelled.
    Canceled,
    /// The member did not take the task (busy for the whole deadline, or refused).
    Rejected,
    /// `lifecycle.delegation_deadline_secs` passed while the member held the task.
    TimedOut,
    /// Two offers or two reads in a row got no answer.
    Unreachable,
    /// The calling task ended before the call was accounted for.
    Abandoned,
}

impl CallStatus {
    /// The record spelling: `completed`, `no_answer`, `failed`, `canceled`, `rejected`,
    /// `timed_out`, `unreachable`, `abandoned`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Completed => "completed",
            CallStatus::NoAnswer => "no_answer",
            CallStatus::Failed => "failed",
            CallStatus::Canceled => "canceled",
            CallStatus::Rejected => "rejected",
            CallStatus::TimedOut => "timed_out",
            CallStatus::Unreachable => "unreachable",
            CallStatus::Abandoned => "abandoned",
        }
    }
}

/// A member call that has ended.
#[derive(Debug, Clone, PartialEq)]
pub struct EndedCall {
    /// `mcl_…`.
    pub call_id: String,
    /// The member called.
    pub member: String,
    /// How it ended.
    pub status: CallStatus,
    /// What the model is shown: the member's answer, its reason, or the runtime's
    /// sentence (spec table "Ending / Output").
    pub output: String,
    /// Members further down with no answer, `(name, status)`: read only for a
    /// completed or no_answer call, at most 8, roster members only, never `completed`.
    pub below: Vec<(String, String)>,
    /// The member's task id, when it took the task.
    pub member_task: Option<String>,
    /// The member's door address as configured (trace only, never the model's).
    pub door: Option<String>,
    /// The error as the runtime logs it, naming the URL called, for a call that ended
    /// on a door error (trace and stderr only; `output` is the model's text).
    pub detail: Option<String>,
    /// `true` when the member was busy at every offer and the call ended before it
    /// took the task: the spec's "Ends rejected, never held" (the deadline passed) and
    /// "Ends abandoned, never held" (the calling task ended between offers, or while an
    /// offer was on its way that the member turned away busy). `member_call.never_held`.
    pub never_held: bool,
}

impl EndedCall {
    /// Whether the ending is one an operator is warned of on stderr: failed,
    /// unreachable or timed out.
    pub fn warns(&self) -> bool {
        matches!(
            self.status,
            CallStatus::Failed | CallStatus::Unreachable | CallStatus::TimedOut
        )
    }
}

/// The default bound of one member call: 600 seconds.
pub const DEFAULT_DELEGATION_DEADLINE_SECS: u64 = 600;

/// The bound of one member call, offering and waiting together:
/// `lifecycle.delegation_deadline_secs`, else `MURMUR_DELEGATION_TIMEOUT_SECS` (whole
/// seconds, at least 1), else 600 seconds.
pub fn delegation_deadline(manifest_secs: Option<u64>) -> Duration {
    let secs = manifest_secs
        .or_else(|| {
            std::env::var("MURMUR_DELEGATION_TIMEOUT_SECS")
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|v| *v > 0)
        })
        .unwrap_or(DEFAULT_DELEGATION_DEADLINE_SECS);
    Duration::from_secs(secs)
}

/// A new formation token: 32 random bytes as 64 lowercase hex digits, minted once per
/// launch and required as `Authorization: Bearer …` by every local door.
pub fn mint_token() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    let t: String = b.iter().map(|x| format!("{x:02x}")).collect();
    crate::secrets::register(&t);
    t
}
