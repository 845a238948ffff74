//! A2A 1.0, JSON-RPC binding: the wire types ([`types`]) and a blocking client
//! ([`client`]) a formation member uses to call another member's door.
//!
//! The server side lives in [`crate::door`]. Facts checked against the official Python
//! SDK (a2a-sdk 1.3); see the architecture page, "Formations and doors".

pub mod client;
pub mod jsonrpc;
pub mod types;

pub use client::{A2aClient, ClientConfig, ClientError};
pub use types::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Artifact, Message, MurmurMetadata,
    NoAnswerBelow, Part, Role, Task, TaskState, TaskStatus,
};

/// The protocol version this crate speaks, sent as the `A2A-Version` header.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The name of the header carrying the protocol version.
pub const VERSION_HEADER: &str = "A2A-Version";

/// The status message of a task a busy member refuses (spec: call-member, "A busy
/// member"). Only a refusal with exactly this message is offered again.
pub const BUSY_MESSAGE: &str = "task rejected: capsule is busy";
