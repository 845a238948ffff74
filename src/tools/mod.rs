//! Tools: the inventory the model is offered and the runtime-provided tools, one file
//! per tool (spec: "Runtime-provided tools").

pub mod background;
pub mod call_member;
pub mod context;
pub mod end_without_answer;
pub mod fetch_peer_file;
pub mod peer_file;
pub mod registry;
pub mod result;
pub mod session_status;
pub mod share_file;
pub mod shell;
pub mod submit_plan;

use serde_json::Value;

pub use context::{Answer, Exec, Held, Placed, Session, Tool};
pub use result::{fence, Status, ToolResult};

pub use crate::manifest::reserved::RESERVED;

/// The declaration that makes a runtime-provided tool exist (spec, table "The twelve").
pub fn grant_of(name: &str) -> Option<&'static str> {
    Some(match name {
        "share-file" => "exports.peer_files",
        "fetch-peer-file" => "capabilities.peer_fetch",
        "delegate-task" => "capabilities.spawn.allow",
        "submit-plan" => "capabilities.plan.submit",
        "switch-driver" => "control.agent_settings: [inference.driver]",
        "call-member" | "end-without-answer" => "a reachability rule in the formation's roster.yaml that lets this member call another",
        "pull-artifact" | "remove-artifact" => "capabilities.install, under transport: http",
        "session-status" => "an inference: block",
        "background-command" => "an inference: block, a non-empty capabilities.shell.allow and lifecycle.shell_grace_secs",
        _ => return None,
    })
}

/// The refusal of a call naming a tool that is not in `inventory`: the declaration
/// that would make it exist, and the tools there are (spec, "The grant is the tool's
/// existence").
pub fn absent_tool_message(name: &str, inventory: &[ToolEntry]) -> String {
    let names: Vec<&str> = inventory.iter().map(|t| t.name.as_str()).collect();
    match grant_of(name) {
        Some(grant) => format!(
            "tool `{name}` does not exist in this session: it exists only when the capsule declares {grant}; the tools are: {}",
            names.join(", ")
        ),
        None => format!(
            "tool `{name}` does not exist in this session: a shell binary is a tool only when capabilities.shell.allow lists it; the tools are: {}",
            names.join(", ")
        ),
    }
}

/// What answers a tool in the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolKind {
    /// A shell binary from `capabilities.shell.allow`, run directly (argv, no shell).
    Shell {
        /// The binary's name, looked up on `PATH`.
        binary: String,
    },
    /// session-status.
    SessionStatus,
    /// background-command.
    BackgroundCommand,
    /// call-member (a formation member with a callee).
    CallMember,
    /// end-without-answer (exactly where call-member is).
    EndWithoutAnswer,
    /// share-file (`exports.peer_files`).
    ShareFile,
    /// fetch-peer-file (`capabilities.peer_fetch`).
    FetchPeerFile,
    /// submit-plan (`capabilities.plan.submit`).
    SubmitPlan,
}

/// One entry of the tool inventory: what the model is offered and what staging writes
/// to `tools/<name>/murmur.yaml`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEntry {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: Value,
    /// What answers it.
    pub kind: ToolKind,
}

impl ToolEntry {
    /// The spec the model is sent.
    pub fn spec(&self) -> crate::inference::ToolSpec {
        crate::inference::ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }
}

/// Describes a JSON value's type for error messages: `a string`, `an object`, ….
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
