//! What a runtime tool is given and what it answers: the [`Tool`] interface, the
//! [`Session`] a tool reads and acts through (implemented by the session, a floor
//! above, so this floor never imports it), and the [`Answer`] with the records the
//! session writes for it.

use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::{Map, Value};

use super::{ToolEntry, ToolResult};
use crate::exec::Supervisor;

/// One tool the runtime answers itself: a shell binary or a runtime-provided tool.
/// Each is one file in `src/tools/` and one row of [`super::registry`].
pub trait Tool: Sync {
    /// Answers one call that passed the decision point: checks `input` (a refusal is
    /// a [`ToolResult::refused`]), runs, and returns the result and its records.
    /// `entry` is the inventory entry the call named.
    fn call(&self, cx: &mut dyn Session, entry: &ToolEntry, input: &Value) -> Answer;
}

/// What running a command needs: the session's workdir, logs, supervisor and clocks.
pub struct Exec<'a> {
    /// The accessible workdir (a command's cwd).
    pub workdir: &'a Path,
    /// `logs/` in the session's records directory.
    pub logs_dir: &'a Path,
    /// The session's process supervisor.
    pub supervisor: &'a Supervisor,
    /// The session's effective deadline, if any.
    pub deadline: Option<Instant>,
    /// Disconnected when the running task is canceled or the session shuts down.
    pub shutdown: &'a Receiver<()>,
    /// `lifecycle.shell_grace_secs`, when set.
    pub grace: Option<Duration>,
    /// `capabilities.shell.allow`, checked again at dispatch.
    pub shell_allow: &'a [String],
}

/// A formation member's call this task made whose answer has not been delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// `mcl_…`.
    pub call_id: String,
    /// The member called.
    pub member: String,
    /// Whether its answer has arrived (and waits for the turn to end).
    pub arrived: bool,
}

/// How the session placed a member call (spec, call-member, "What a call returns").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// The member holds the task: the call is outstanding.
    Started {
        /// `mcl_…`.
        call_id: String,
        /// The member's task id.
        task_id: String,
    },
    /// The member was busy: the runtime keeps offering; the call is outstanding.
    Busy {
        /// `mcl_…`.
        call_id: String,
        /// The call's deadline in whole seconds.
        deadline_secs: u64,
    },
    /// The call ended in its own tool call (already recorded as a `member_call`).
    Ended {
        /// `mcl_…`.
        call_id: String,
        /// `rejected` or `failed`.
        status: &'static str,
        /// What the model is shown.
        output: String,
    },
}

/// The session as a tool sees it. Implemented by the session's agent loop.
pub trait Session {
    /// The command-running side of the session.
    fn exec(&self) -> Exec<'_>;
    /// The refusal for a call naming a tool this session does not have.
    fn absent(&self, tool: &str) -> String;
    /// Whether a task is running.
    fn task_running(&self) -> bool;
    /// The formation member that sent the running task, if one did.
    fn caller(&self) -> Option<String>;
    /// The members this session may call, in roster order; `None` when it is no
    /// formation member with a callee.
    fn callees(&self) -> Option<Vec<String>>;
    /// This task's undelivered call to `member`, or with `None` its first undelivered
    /// call to anyone, answers that arrived meanwhile counted in.
    fn held_call(&mut self, member: Option<&str>) -> Option<Held>;
    /// The reason, once end-without-answer was accepted in this task.
    fn ending(&self) -> Option<&str>;
    /// Accepts end-without-answer: the attempt ends without an answer once this
    /// turn's tool calls finish.
    fn end_without_answer(&mut self, reason: String);
    /// Hands `task` to `member` (egress check, first offer, a poller for a call left
    /// outstanding).
    fn place_call(&mut self, member: &str, task: String) -> Placed;
    /// The session-status object, measured now (spec, "session-status").
    fn measure_status(&self) -> Value;
    /// The session's peer-file side (share-file, fetch-peer-file); `None` (the
    /// default) when it has none.
    fn peer_files(&self) -> Option<&super::peer_file::PeerFiles> {
        None
    }
    /// Whether the inventory holds a tool named `tool`.
    fn has_tool(&self, tool: &str) -> bool;
    /// Runs step `step` (from 0) of plan `plan` (`pln_…`): the call passes the decision
    /// point with origin `plan_step` and runs through the registry, and its `tool_call`
    /// record (marked `plan`, `step`) is written. Returns the step's call id
    /// (`<plan>.<step>`) and result.
    fn run_plan_step(
        &mut self,
        plan: &str,
        step: u32,
        tool: &str,
        input: &Value,
    ) -> (String, super::ToolResult);
}

/// A tool's answer: the result the model is given and the records the session writes
/// for it, in order, before the call's `tool_call` record.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The tool result.
    pub result: ToolResult,
    /// `(record type, fields)` for each record of the call.
    pub records: Vec<(&'static str, Map<String, Value>)>,
    /// Where the task was when a cancel or the deadline cut the call short, for
    /// `task_end.phase` (`background_wait`).
    pub phase: Option<&'static str>,
}

impl From<ToolResult> for Answer {
    fn from(result: ToolResult) -> Answer {
        Answer {
            result,
            records: Vec::new(),
            phase: None,
        }
    }
}

impl Answer {
    /// Adds one record.
    pub fn with_record(mut self, kind: &'static str, fields: Map<String, Value>) -> Answer {
        self.records.push((kind, fields));
        self
    }
}
