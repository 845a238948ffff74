//! One tool per shell binary in `capabilities.shell.allow` (spec, "The twelve": "Runs
//! that binary as a subprocess in the accessible workdir").
//!
//! Input `{"args": [string, …]}`. The binary is run directly (argv, never through a
//! shell) in the workdir, in a new process group, stdin `/dev/null`, stdout and stderr
//! both into `logs/<work id>.log` in the records directory. The model gets, fenced:
//!
//! ```text
//! work_id: wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2
//! exit_code: 1
//! status: error
//! output: /abs/records/…/logs/wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2.log
//! output_bytes: 48213
//! output_shown: last 16384 bytes
//!
//! <the last 16384 bytes of output>
//! ```
//!
//! `exit_code` is 128 + signal for a signal kill, followed then by a `signal: SIGKILL`
//! line. A command that ran is `passed` whatever its exit code; one that could not be
//! started is a tool error. When processes are left holding the command's output after
//! it exited (a job it put in the background, a `setsid` escape), a note after the
//! fence names them ([`super::background::holders_note`]).
//!
//! # Moving to the background
//!
//! With `lifecycle.shell_grace_secs` set, a command still running after that many
//! seconds moves to the background: it keeps running, and the call returns at once,
//! `passed`, with the lines background-command itself returns
//! ([`super::background::describe`]) for a running command:
//!
//! ```text
//! work_id: wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2
//! state: running
//! elapsed_secs: 10
//! output: /abs/records/…/logs/wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2.log
//! output_bytes: 120
//! output_shown: all
//!
//! <the output so far>
//! ```
//!
//! and this note after the fence ([`moved_note`]):
//!
//! ```text
//! The command is still running after lifecycle.shell_grace_secs (10 s) and has moved to the background: call background-command with work_id wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2 and operation status, wait or stop.
//! ```
//!
//! Without `lifecycle.shell_grace_secs` no command moves to the background: the call
//! waits for the exit, the session's deadline or a shutdown.

use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver};
use serde_json::{json, Value};

use super::background::{describe, holders_note};
use super::{json_type, ToolEntry, ToolKind, ToolResult};
use crate::exec::output::{tail, TAIL_BYTES};
use crate::exec::{ExitInfo, Running, Supervisor};

/// The inventory entry for `binary`.
pub fn entry(binary: &str) -> ToolEntry {
    ToolEntry {
        name: binary.to_string(),
        description: format!(
            "Runs the `{binary}` binary directly (no shell: no pipes, globs, redirections or variables) in the workdir with the given arguments. stdin is empty. Returns the exit code and the last {TAIL_BYTES} bytes of stdout and stderr together; the full output stays in the log file named in the result."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "args": {"type": "array", "items": {"type": "string"}, "description": "The arguments after the binary's name, one string each"}
            },
            "additionalProperties": false
        }),
        kind: ToolKind::Shell { binary: binary.to_string() },
    }
}

/// Validates the input: an object with an optional `args` array of strings.
///
/// Errors: a message naming what is wrong and the form expected.
pub fn parse_args(binary: &str, input: &Value) -> Result<Vec<String>, String> {
    let form = format!("`{binary}` takes {{\"args\": [string, …]}}");
    let Value::Object(map) = input else {
        return Err(format!(
            "the input must be an object, got {}; {form}",
            json_type(input)
        ));
    };
    if let Some(k) = map.keys().find(|k| k.as_str() != "args") {
        return Err(format!("unknown input key `{k}`; {form}"));
    }
    match map.get("args") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) if s.contains('\0') => {
                    Err(format!("`args[{i}]` contains a NUL byte"))
                }
                Value::String(s) => Ok(s.clone()),
                other => Err(format!(
                    "`args[{i}]` must be a string, got {}; {form}",
                    json_type(other)
                )),
            })
            .collect(),
        Some(other) => Err(format!(
            "`args` must be an array of strings, got {}; {form}",
            json_type(other)
        )),
    }
}

/// Where and how a shell call runs.
pub struct ShellContext<'a> {
    /// The accessible workdir.
    pub workdir: &'a Path,
    /// `logs/` in the session's records directory.
    pub logs_dir: &'a Path,
    /// The session's supervisor.
    pub supervisor: &'a Supervisor,
    /// When the session ends (its effective deadline), if it has one.
    pub deadline: Option<Instant>,
    /// Disconnected when `mur` is told to shut down.
    pub shutdown: &'a Receiver<()>,
    /// `lifecycle.shell_grace_secs`: how long a call waits before its command moves to
    /// the background; `None`: it never does.
    pub grace: Option<Duration>,
}

/// Why a shell call returned before its command exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The session's deadline passed; the command's process group was stopped.
    Deadline,
    /// `mur` was told to shut down; the command's process group was stopped.
    Shutdown,
}

/// The note after the fence of a call whose command moved to the background.
pub fn moved_note(grace: Duration, work_id: &str) -> String {
    format!(
        "The command is still running after lifecycle.shell_grace_secs ({} s) and has moved to the background: call background-command with work_id {work_id} and operation status, wait or stop.",
        grace.as_secs()
    )
}

/// Runs `binary args…` until it exits, the grace passes (then it moves to the
/// background and keeps running), the deadline passes or `mur` shuts down (then the
/// whole process group is stopped).
pub fn call(ctx: &ShellContext<'_>, binary: &str, args: Vec<String>) -> (ToolResult, Option<Cut>) {
    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(binary.to_string());
    argv.extend(args);
    let running = match ctx.supervisor.spawn(&argv, ctx.workdir, ctx.logs_dir) {
        Ok(r) => r,
        Err(e) => return (ToolResult::refused(e.to_string()), None),
    };
    let deadline_rx = match ctx.deadline {
        Some(d) => after(d.saturating_duration_since(Instant::now())),
        None => never(),
    };
    let grace_rx = match ctx.grace {
        Some(g) => after(g),
        None => never(),
    };
    let mut cut = None;
    select! {
        recv(running.exited()) -> _ => {}
        recv(grace_rx) -> _ => {
            if running.exit().is_none() {
                return (moved(&running, ctx.grace.unwrap_or_default()), None);
            }
        }
        recv(deadline_rx) -> _ => cut = Some(Cut::Deadline),
        recv(ctx.shutdown) -> _ => cut = Some(Cut::Shutdown),
    }
    if cut.is_some() {
        running.stop();
    }
    let exit = running.exit();
    let mut r = render(&running, exit.as_ref().map(|(e, _)| e.clone()), cut);
    if exit.is_some() {
        running.mark_exit_returned();
        if let Some(n) = holders_note(ctx.supervisor, &running) {
            r.notes.insert(0, n);
        }
    }
    (r, cut)
}

/// The result of a call whose command moved to the background.
fn moved(running: &Running, grace: Duration) -> ToolResult {
    let d = describe(running, None);
    let mut r = ToolResult::passed(
        format!("moved to the background as {}", running.work_id),
        d.text,
    )
    .with_note(moved_note(grace, &running.work_id));
    r.record.insert("work_id".into(), json!(running.work_id));
    r.record.insert("argv".into(), json!(running.argv));
    r.record.insert("background".into(), json!(true));
    r.record.insert("exit_code".into(), Value::Null);
    r.record
        .insert("output_bytes".into(), json!(d.output_bytes));
    r
}

/// The result text for a finished (or stopped) foreground command.
fn render(running: &Running, exit: Option<ExitInfo>, cut: Option<Cut>) -> ToolResult {
    let mut text = format!("work_id: {}\n", running.work_id);
    let mut summary = String::new();
    match &exit {
        Some(e) => {
            text.push_str(&format!("exit_code: {}\n", e.exit_code()));
            if let Some(sig) = e.signal_name() {
                text.push_str(&format!("signal: {sig}\n"));
            }
            text.push_str(&format!("status: {}\n", e.status_word()));
            if let Some(w) = &e.wait_error {
                text.push_str(&format!("wait_error: {w}\n"));
            }
            summary.push_str(&format!("exit {}", e.exit_code()));
        }
        None => {
            text.push_str("state: running\n");
            summary.push_str("still running");
        }
    }
    let log = running.log_path.display().to_string();
    let shown = match tail(&running.log_path, TAIL_BYTES) {
        Ok(t) => {
            text.push_str(&format!(
                "output: {log}\noutput_bytes: {}\noutput_shown: {}\n\n{}",
                t.total_bytes,
                t.shown(),
                t.text
            ));
            summary.push_str(&format!(", {} bytes of output", t.total_bytes));
            t.total_bytes
        }
        Err(e) => {
            text.push_str(&format!(
                "output: {log}\nwait_error: cannot read the log: {e}\n"
            ));
            0
        }
    };
    let mut r = ToolResult::passed(summary, text);
    match cut {
        Some(Cut::Deadline) => r.notes.push(
            "The session's deadline passed while the command ran; its process group was stopped."
                .into(),
        ),
        Some(Cut::Shutdown) => r.notes.push(
            "mur was told to shut down while the command ran; its process group was stopped."
                .into(),
        ),
        None => {}
    }
    r.record.insert("work_id".into(), json!(running.work_id));
    r.record.insert("argv".into(), json!(running.argv));
    r.record.insert(
        "exit_code".into(),
        exit.as_ref().map_or(Value::Null, |e| json!(e.exit_code())),
    );
    r.record.insert("output_bytes".into(), json!(shown));
    r
}

/// The tool of every shell binary entry ([`super::registry`]).
pub struct Shell;

impl super::Tool for Shell {
    /// Checks the binary against `capabilities.shell.allow` again and the input, then
    /// runs it ([`call`]).
    fn call(&self, cx: &mut dyn super::Session, entry: &ToolEntry, input: &Value) -> super::Answer {
        let ToolKind::Shell { binary } = &entry.kind else {
            return ToolResult::refused(cx.absent(&entry.name)).into();
        };
        let ex = cx.exec();
        if !ex.shell_allow.iter().any(|b| b == binary) {
            return ToolResult::refused(format!("`{binary}` is not in capabilities.shell.allow"))
                .into();
        }
        let args = match parse_args(binary, input) {
            Ok(a) => a,
            Err(e) => return ToolResult::refused(e).into(),
        };
        let ctx = ShellContext {
            workdir: ex.workdir,
            logs_dir: ex.logs_dir,
            supervisor: ex.supervisor,
            deadline: ex.deadline,
            shutdown: ex.shutdown,
            grace: ex.grace,
        };
        call(&ctx, binary, args).0.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_must_be_strings() {
        assert_eq!(
            parse_args("ls", &json!({"args": ["-l", "a"]})).unwrap(),
            vec!["-l", "a"]
        );
        assert_eq!(parse_args("ls", &json!({})).unwrap(), Vec::<String>::new());
        assert_eq!(
            parse_args("ls", &json!({"args": ["-l", {"x": 1}]})).unwrap_err(),
            "`args[1]` must be a string, got an object; `ls` takes {\"args\": [string, …]}"
        );
        assert_eq!(
            parse_args("ls", &json!({"argz": []})).unwrap_err(),
            "unknown input key `argz`; `ls` takes {\"args\": [string, …]}"
        );
        assert!(parse_args("ls", &json!("-l")).is_err());
    }
}
