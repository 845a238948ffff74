//! Formations: members of a `roster.yaml` that hand each other tasks with
//! `call-member` (spec, "call-member" and "end-without-answer"). This floor stands
//! above [`crate::session`]: it stages every member, starts its session and its door,
//! and gives each session the links to the members it may call.
//!
//! - [`launch`]: `mur run --roster`: stage every local member, start their sessions
//!   and doors, run the entry task, end the formation.
//! - [`wire`]: how a caller reaches a member's door over A2A HTTP
//!   ([`wire::HttpLink`]), local members included (through their loopback doors).
//!
//! The task board, the [`link::Link`] trait, the call pollers and the continuation
//! belong to the session that owns its tasks and its outstanding work; they are
//! re-exported here under their old paths.

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
    let t: String = b.iter().map(|x| format!("{x:02x}")).collect();
    crate::secrets::register(&t);
    t
}
