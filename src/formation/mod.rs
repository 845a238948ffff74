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

pub mod launch;
pub mod wire;

// The task board, the links to a member's door, the call pollers and the continuation
// belong to the session (ARCHITECTURE.md, "Layers"); their old paths stay valid here.
pub use crate::session::{board, call, continuation, link};
pub use crate::session::{CallStatus, EndedCall};

use std::time::Duration;

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
    b.iter().map(|x| format!("{x:02x}")).collect()
}
