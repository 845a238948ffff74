//! background-command: reports on, waits for or stops a shell command that moved to
//! the background, by its work id (spec, "background-command").
//!
//! The tool exists only when the capsule has an `inference:` block, a non-empty
//! `capabilities.shell.allow` and `lifecycle.shell_grace_secs` (spec, "The twelve").
//! Input:
//!
//! ```json
//! {"type":"object","properties":{"operation":{"type":"string","enum":["status","wait","stop"]},
//!  "work_id":{"type":"string"},"wait_secs":{"type":"integer","minimum":0}},
//!  "required":["operation","work_id"]}
//! ```
//!
//! Every operation returns, fenced, the lines of [`describe`]:
//!
//! ```text
//! work_id: wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2
//! state: exited
//! elapsed_secs: 312
//! waited_secs: 41
//! exit_code: 101
//! status: error
//! output: /abs/records/…/logs/wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2.log
//! output_bytes: 48213
//! output_shown: last 16384 bytes
//!
//! <the last 16384 bytes of output>
//! ```
//!
//! The result is `passed` whatever the command's exit code. Notes after the fence: the
//! processes left holding the command's output once its leader exited
//! ([`holders_note`]), and, when a wait was cut short by the deadline or a cancel, why.
//! No resource limit is enforced on commands yet, so the resource-limit note of the
//! spec never appears and `status` depends on the exit code and wait errors only.
//!
//! Refusals ([`parse`]) write no `background_command` record; each answered call
//! writes one.
//!
//! # Completion tasks
//!
//! Under `task_acceptance: queue` with `after_task: sleep`, a command whose exit no
//! tool result returned (no background-command `status`, `wait` or `stop` saw it
//! exited, and it did not end inside its own shell call) arrives as a task of its own,
//! origin `completion`, queued on the session's board like any other task (spec,
//! "background-command"). Its text is [`completion_text`]: one runtime line naming the
//! command, how it ended and the task that started it; then exactly what a `status`
//! call would return, fenced under `tool:background-command`, with the same notes
//! after the fence; then one closing line:
//!
//! ```text
//! [background-command] Command wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2 (["sh","-c","make"]), started by task tsk_01k4m2y7xq8f9v3n5r7t9w1c2e, exited with exit_code 2 (status error) and no background-command call returned its exit, so its result arrives as this task:
//! <untrusted-content source=tool:background-command>
//! work_id: wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2
//! state: exited
//! elapsed_secs: 312
//! exit_code: 2
//! status: error
//! output: /abs/records/…/logs/wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2.log
//! output_bytes: 48213
//! output_shown: last 16384 bytes
//!
//! <the last 16384 bytes of output>
//! </untrusted-content>
//! The whole output is in the log named on the output line. Act on this result if it calls for anything, then answer this task in text without calling a tool.
//! ```
//!
//! A command a stop reached reads `ended after a stop reached it, with exit_code …`
//! instead of `exited with exit_code …`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver};
use serde_json::{json, Map, Value};

use super::shell::Cut;
use super::{ToolEntry, ToolKind, ToolResult};
use crate::exec::output::{tail, TAIL_BYTES};
use crate::exec::{procs, Running, Supervisor};

/// The tool's name.
pub const NAME: &str = "background-command";

/// The longest wait, in seconds: 600 (also the default; a larger `wait_secs` is taken
/// as 600).
pub const MAX_WAIT_SECS: u64 = 600;

/// The inventory entry, with the spec's input schema.
pub fn entry() -> ToolEntry {
    ToolEntry {
        name: NAME.into(),
        description: format!(
            "Reports on, waits for or stops a shell command that moved to the background, by the work id (wrk_<hex>) its shell call returned. operation: status returns at once; wait returns when the command exits or after wait_secs seconds (default {MAX_WAIT_SECS}, at most {MAX_WAIT_SECS}; 0 returns at once); stop sends SIGTERM to the command's process group, SIGKILL 2 seconds later if anything in it is still alive, and waits up to 3 seconds more. Each returns the command's state (running, exited or stopped), elapsed seconds, exit code and status once it ended, the path and size of its log, and the last {TAIL_BYTES} bytes of its output."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "operation": {"type": "string", "enum": ["status", "wait", "stop"]},
                "work_id": {"type": "string"},
                "wait_secs": {"type": "integer", "minimum": 0}
            },
            "required": ["operation", "work_id"]
        }),
        kind: ToolKind::BackgroundCommand,
    }
}

/// One of the three operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Returns at once.
    Status,
    /// Returns when the command exits or after `wait_secs`.
    Wait,
    /// Stops the command's process group.
    Stop,
}

impl Operation {
    /// `status`, `wait` or `stop`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Status => "status",
            Operation::Wait => "wait",
            Operation::Stop => "stop",
        }
    }
}

/// A validated call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The operation.
    pub operation: Operation,
    /// The work id, of the form `wrk_<hex>` (not yet looked up).
    pub work_id: String,
    /// Seconds to wait, already capped at 600; 600 when not given.
    pub wait_secs: u64,
}

const FORM: &str = "background-command takes {\"operation\": \"status\" | \"wait\" | \"stop\", \"work_id\": \"wrk_<hex>\", \"wait_secs\": integer}";

/// A value as a refusal names it: a string as is, anything else as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => cap(s.clone()),
        other => cap(other.to_string()),
    }
}

/// At most 200 characters of `s`, then `…`.
fn cap(s: String) -> String {
    if s.chars().count() > 200 {
        let cut: String = s.chars().take(200).collect();
        format!("{cut}…")
    } else {
        s
    }
}

/// Validates the input. Checked in this order, each refusal a message naming what is
/// wrong (exact texts in the README, "background-command"):
///
/// ```text
/// not an object          background-command takes {…}; got a string
/// an unknown key         unknown input key `x`; background-command takes {…}
/// no work_id             `work_id` is missing: give the work id a shell call returned, of the form wrk_<hex>
/// a malformed work_id    `job-7` is not a work id: a work id has the form wrk_<hex> (wrk_ followed by hexadecimal digits)
/// no operation           `operation` is missing: the accepted operations are status, wait, stop
/// another operation      `kill` is not an operation of background-command: the accepted operations are status, wait, stop
/// a bad wait_secs        `wait_secs` must be a whole number of seconds (0 or more), got `1.5`
/// ```
///
/// A `null` value counts as absent. A whole number written as a float (`5.0`) is
/// accepted; a value above 600 is taken as 600.
pub fn parse(input: &Value) -> Result<Input, String> {
    let Value::Object(map) = input else {
        return Err(format!("{FORM}; got {}", super::json_type(input)));
    };
    if let Some(k) = map
        .keys()
        .find(|k| !["operation", "work_id", "wait_secs"].contains(&k.as_str()))
    {
        return Err(format!("unknown input key `{k}`; {FORM}"));
    }
    let work_id = match map.get("work_id") {
        None | Some(Value::Null) => {
            return Err("`work_id` is missing: give the work id a shell call returned, of the form wrk_<hex>".into())
        }
        Some(Value::String(s)) if crate::ids::is_work_id(s) => s.clone(),
        Some(other) => {
            return Err(format!(
                "`{}` is not a work id: a work id has the form wrk_<hex> (wrk_ followed by hexadecimal digits)",
                shown(other)
            ))
        }
    };
    let operation = match map.get("operation") {
        None | Some(Value::Null) => {
            return Err(
                "`operation` is missing: the accepted operations are status, wait, stop".into(),
            )
        }
        Some(Value::String(s)) if s == "status" => Operation::Status,
        Some(Value::String(s)) if s == "wait" => Operation::Wait,
        Some(Value::String(s)) if s == "stop" => Operation::Stop,
        Some(other) => {
            return Err(format!(
                "`{}` is not an operation of background-command: the accepted operations are status, wait, stop",
                shown(other)
            ))
        }
    };
    let wait_secs = match map.get("wait_secs") {
        None | Some(Value::Null) => MAX_WAIT_SECS,
        Some(v) => {
            let whole = match v {
                Value::Number(n) => n.as_u64().or_else(|| {
                    n.as_f64()
                        .filter(|f| f.is_finite() && *f >= 0.0 && f.fract() == 0.0)
                        .map(|f| if f > 1e9 { u64::MAX } else { f as u64 })
                }),
                _ => None,
            };
            match whole {
                Some(n) => n.min(MAX_WAIT_SECS),
                None => {
                    return Err(format!(
                        "`wait_secs` must be a whole number of seconds (0 or more), got `{}`",
                        cap(v.to_string())
                    ))
                }
            }
        }
    };
    Ok(Input {
        operation,
        work_id,
        wait_secs,
    })
}

/// The message for a well-formed id this session never issued (spec, word for word).
pub fn unknown_id_message(work_id: &str) -> String {
    format!("no background command with work id `{work_id}` in this session")
}

/// `running`, `exited`, or `stopped` for a command that ended after a stop reached it.
pub fn state_word(running: &Running) -> &'static str {
    match running.exit() {
        None => "running",
        Some(_) if running.was_stopped() => "stopped",
        Some(_) => "exited",
    }
}

/// What [`describe`] measured, for records.
#[derive(Debug, Clone)]
pub struct Described {
    /// The text shown to the model (inside the fence).
    pub text: String,
    /// `running`, `exited` or `stopped`.
    pub state: &'static str,
    /// Whole seconds from the start to now or to the exit.
    pub elapsed_secs: u64,
    /// The exit code (128 + signal for a signal kill), once exited.
    pub exit_code: Option<i32>,
    /// `ok` or `error`, once exited.
    pub status: Option<&'static str>,
    /// Bytes in the log.
    pub output_bytes: u64,
}

/// The lines the spec shows for a command, in its order: `work_id`, `state`,
/// `elapsed_secs`, `waited_secs` (when given), `exit_code` and `status` (once it
/// ended), `wait_error` (a failure in waiting, or in reading its log), `output`,
/// `output_bytes`, `output_shown`, a blank line and the last 16384 bytes of output.
pub fn describe(running: &Running, waited_secs: Option<u64>) -> Described {
    let exit = running.exit().map(|(e, _)| e);
    let state = state_word(running);
    let elapsed_secs = running.elapsed().as_secs();
    let mut text = format!(
        "work_id: {}\nstate: {state}\nelapsed_secs: {elapsed_secs}\n",
        running.work_id
    );
    if let Some(w) = waited_secs {
        text.push_str(&format!("waited_secs: {w}\n"));
    }
    let log = tail(&running.log_path, TAIL_BYTES);
    let mut errors = Vec::new();
    if let Some(e) = exit.as_ref().and_then(|e| e.wait_error.clone()) {
        errors.push(e);
    }
    if let Err(e) = &log {
        errors.push(format!("cannot read the log: {e}"));
    }
    let mut status = None;
    if let Some(e) = &exit {
        let word = if errors.is_empty() {
            e.status_word()
        } else {
            "error"
        };
        status = Some(word);
        text.push_str(&format!("exit_code: {}\nstatus: {word}\n", e.exit_code()));
    }
    if !errors.is_empty() {
        text.push_str(&format!("wait_error: {}\n", errors.join("; ")));
    }
    let (bytes, shown, body) = match log {
        Ok(t) => (t.total_bytes, t.shown(), t.text),
        Err(_) => (0, "all".to_string(), String::new()),
    };
    text.push_str(&format!(
        "output: {}\noutput_bytes: {bytes}\noutput_shown: {shown}\n\n{body}",
        running.log_path.display()
    ));
    Described {
        text,
        state,
        elapsed_secs,
        exit_code: exit.as_ref().map(|e| e.exit_code()),
        status,
        output_bytes: bytes,
    }
}

/// The note naming the processes left holding a command's output after its leader
/// exited, when there are any:
///
/// `Processes left holding its output: 4242 (sleep), 4250 (sh). They can still write to its log; the session's end kills them.`
///
/// At most ten are named, then `and N more`. "Holding its output" means a live
/// descendant of `mur` with a file descriptor on the command's log: a process of its
/// group, or one that left the group (`setsid`, double fork) and came back to `mur`
/// as a child subreaper. The `/proc` scan runs only when the group is still alive or
/// the calling thread has a child that is not a running command's leader.
pub fn holders_note(supervisor: &Supervisor, running: &Running) -> Option<String> {
    running.exit()?;
    let known: HashSet<i32> = supervisor.running().iter().map(|c| c.pgid).collect();
    if !running.group_alive() && !procs::has_unknown_children(&known) {
        return None;
    }
    let h = procs::holders(&running.log_path);
    if h.is_empty() {
        return None;
    }
    let mut named: Vec<String> = h
        .iter()
        .take(10)
        // The name is the process's own choice: escaped, so it cannot break the note's
        // line or forge one of its own.
        .map(|p| format!("{} ({})", p.pid, p.comm.escape_debug()))
        .collect();
    if h.len() > 10 {
        named.push(format!("and {} more", h.len() - 10));
    }
    Some(format!(
        "Processes left holding its output: {}. They can still write to its log; the session's end kills them.",
        named.join(", ")
    ))
}

/// The text of the completion task for `running`, a command whose leader has exited
/// (see "Completion tasks" in the module documentation); `started_by` is the id of the
/// task that started it. The argv is shown as JSON, cut at 200 characters. A command
/// still running gets the same text with `is still running` (never sent as a task).
pub fn completion_text(supervisor: &Supervisor, running: &Running, started_by: &str) -> String {
    let d = describe(running, None);
    let argv = cap(serde_json::to_string(&running.argv).unwrap_or_default());
    let how = match (d.state, d.exit_code, d.status) {
        ("stopped", Some(c), Some(s)) => {
            format!("ended after a stop reached it, with exit_code {c} (status {s})")
        }
        (_, Some(c), Some(s)) => format!("exited with exit_code {c} (status {s})"),
        _ => "is still running".to_string(),
    };
    let mut notes = Vec::new();
    if let Some(n) = holders_note(supervisor, running) {
        notes.push(n);
    }
    notes.push(COMPLETION_LAST_LINE.to_string());
    format!(
        "[background-command] Command {} ({argv}), started by task {started_by}, {how} and no background-command call returned its exit, so its result arrives as this task:\n{}",
        running.work_id,
        super::result::fence(&format!("tool:{NAME}"), &d.text, &notes)
    )
}

/// The last line of a completion task's text.
pub const COMPLETION_LAST_LINE: &str = "The whole output is in the log named on the output line. Act on this result if it calls for anything, then answer this task in text without calling a tool.";

/// Where a background-command call runs.
pub struct Context<'a> {
    /// The session's supervisor.
    pub supervisor: &'a Supervisor,
    /// The session's effective deadline, if any.
    pub deadline: Option<Instant>,
    /// Disconnected when the task is canceled (`mur` told to shut down).
    pub shutdown: &'a Receiver<()>,
}

/// An answered call: the result for the model, the fields of its
/// `background_command` record, and what cut a wait short.
pub struct Answer {
    /// The tool result.
    pub result: ToolResult,
    /// The `background_command` record's fields.
    pub record: Map<String, Value>,
    /// Set when the deadline or a cancel ended a `wait` early (`phase:
    /// background_wait`).
    pub cut: Option<Cut>,
}

/// Answers one call. Errors: a refusal message (no record is written for it).
pub fn call(ctx: &Context<'_>, input: &Value) -> Result<Answer, String> {
    let input = parse(input)?;
    let Some(running) = ctx.supervisor.get(&input.work_id) else {
        return Err(unknown_id_message(&input.work_id));
    };
    let mut cut = None;
    let mut waited = None;
    match input.operation {
        Operation::Status => {}
        Operation::Stop => {
            running.stop();
        }
        Operation::Wait => {
            let started = Instant::now();
            if running.exit().is_none() && input.wait_secs > 0 {
                let deadline_rx = match ctx.deadline {
                    Some(d) => after(d.saturating_duration_since(Instant::now())),
                    None => never(),
                };
                select! {
                    recv(running.exited()) -> _ => {}
                    recv(after(Duration::from_secs(input.wait_secs))) -> _ => {}
                    recv(deadline_rx) -> _ => cut = Some(Cut::Deadline),
                    recv(ctx.shutdown) -> _ => cut = Some(Cut::Shutdown),
                }
            }
            waited = Some(started.elapsed().as_secs());
        }
    }
    let d = describe(&running, waited);
    if d.exit_code.is_some() {
        running.mark_exit_returned();
    }
    let summary = match d.exit_code {
        Some(c) => format!("{} {}, exit {c}", running.work_id, d.state),
        None => format!("{} running, {} s", running.work_id, d.elapsed_secs),
    };
    let mut result = ToolResult::passed(summary, d.text.clone());
    if let Some(n) = holders_note(ctx.supervisor, &running) {
        result.notes.push(n);
    }
    if input.operation == Operation::Stop && d.exit_code.is_none() {
        result.notes.push(format!(
            "The stop did not reach the command: its process left its process group {} (setpgid or setsid), so the signals went to an empty group. The session's end kills it.",
            running.pgid
        ));
    }
    match cut {
        Some(Cut::Deadline) => result
            .notes
            .push("The wait ended early: the session's deadline has passed.".into()),
        Some(Cut::Shutdown) => result.notes.push(
            "The wait ended early: the task was canceled (mur was told to shut down).".into(),
        ),
        None => {}
    }
    result
        .record
        .insert("work_id".into(), json!(running.work_id));
    let mut record = Map::new();
    record.insert("operation".into(), json!(input.operation.as_str()));
    record.insert("work_id".into(), json!(running.work_id));
    record.insert("argv".into(), json!(running.argv));
    record.insert("state".into(), json!(d.state));
    record.insert("elapsed_secs".into(), json!(d.elapsed_secs));
    if input.operation == Operation::Wait {
        record.insert("wait_secs".into(), json!(input.wait_secs));
        record.insert("waited_secs".into(), json!(waited));
    }
    record.insert("exit_code".into(), json!(d.exit_code));
    record.insert("status".into(), json!(d.status));
    record.insert("output_bytes".into(), json!(d.output_bytes));
    if let Some(c) = cut {
        record.insert("phase".into(), json!("background_wait"));
        record.insert(
            "cut_by".into(),
            json!(match c {
                Cut::Deadline => "deadline",
                Cut::Shutdown => "cancel",
            }),
        );
    }
    Ok(Answer {
        result,
        record,
        cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: &str = "wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2";

    #[test]
    fn wait_secs_defaults_caps_and_accepts_whole_floats() {
        let p = |v: Value| parse(&v);
        assert_eq!(
            p(json!({"operation": "wait", "work_id": W}))
                .unwrap()
                .wait_secs,
            600
        );
        assert_eq!(
            p(json!({"operation": "wait", "work_id": W, "wait_secs": 9000}))
                .unwrap()
                .wait_secs,
            600
        );
        assert_eq!(
            p(json!({"operation": "wait", "work_id": W, "wait_secs": 5.0}))
                .unwrap()
                .wait_secs,
            5
        );
        assert_eq!(
            p(json!({"operation": "wait", "work_id": W, "wait_secs": 1e300}))
                .unwrap()
                .wait_secs,
            600
        );
        assert_eq!(
            p(json!({"operation": "wait", "work_id": W, "wait_secs": -1})).unwrap_err(),
            "`wait_secs` must be a whole number of seconds (0 or more), got `-1`"
        );
        assert_eq!(
            p(json!({"operation": "wait", "work_id": W, "wait_secs": "5"})).unwrap_err(),
            "`wait_secs` must be a whole number of seconds (0 or more), got `\"5\"`"
        );
    }

    #[test]
    fn refusals_name_the_value() {
        assert_eq!(
            parse(&json!({"operation": "status", "work_id": 42})).unwrap_err(),
            "`42` is not a work id: a work id has the form wrk_<hex> (wrk_ followed by hexadecimal digits)"
        );
        assert_eq!(
            parse(&json!({"operation": ["stop"], "work_id": W})).unwrap_err(),
            "`[\"stop\"]` is not an operation of background-command: the accepted operations are status, wait, stop"
        );
        assert!(parse(&json!("status")).unwrap_err().starts_with(FORM));
    }
}
