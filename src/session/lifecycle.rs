//! A task's attempts: what happens when an attempt ends (spec words: `task_reopened`,
//! `lifecycle.max_task_reopens`, "the on-task-end exit status", `keep_working.used`,
//! `done_check.used`).
//!
//! 1. `lifecycle.keep_working` (in the turn loop): a model that ends its turn with text
//!    and no [`DONE_MARKER`] line gets the configured message as a new user turn
//!    instead of ending the task, up to `limit` times per task, across reopens. It is
//!    not a reopen.
//! 2. `lifecycle.done_check`, when the model answers: the command runs in the workdir;
//!    exit 0 and the answer stands; otherwise the task is reopened with the check's exit
//!    and output tail (`done_check.used` grows), and at the limit the task ends
//!    `failed` with the last check's output as its reason, never `completed`.
//! 3. `hooks.on_task_end`, in order, for every ending (deadline, cancel and SIGTERM
//!    included): each gets the exit status, answer or reason, attempt and reopens, and
//!    may answer `{"reopen": "<message>"}`. A reopen is honoured for an attempt that
//!    ended `completed`, `failed` or `no_answer` while the session may go on, up to
//!    `lifecycle.max_task_reopens` per task. A hook that fails (non-zero exit, timeout,
//!    output that is not one JSON object, an unknown key) turns a `completed` attempt
//!    into `failed` (fail closed), and leaves any other status as it was.
//!
//! Continuing with member answers is not a reopen and runs before all of this.

use std::time::Duration;

use serde_json::{json, Value};

use super::hooks::{self, Ended};
use super::policy::{hook_name, program};
use super::{Loop, Stop};
use crate::exit::ExitStatus;
use crate::fields;
use crate::manifest::{DoneCheck, DEFAULT_HOOK_TIMEOUT_SECS, DEFAULT_MAX_TASK_REOPENS};
use crate::staging::DONE_MARKER;

/// How long one `lifecycle.done_check` run may take: 600 seconds (and never past the
/// session's deadline).
pub const DONE_CHECK_TIMEOUT_SECS: u64 = 600;

/// How much of a failed check's output the reopen message quotes: its last 4096 bytes.
pub const DONE_CHECK_TAIL_BYTES: u64 = 4096;

/// What comes after an attempt.
pub(super) enum Next {
    /// The task ends so.
    End(Stop),
    /// The task is reopened with this message as a new user turn.
    Reopen(String),
}

impl Next {
    /// The stop, for an attempt that could not be reopened.
    pub(super) fn into_stop(self) -> Stop {
        match self {
            Next::End(s) => s,
            Next::Reopen(_) => Stop::Failed("the task could not be reopened".into()),
        }
    }
}

/// The exit status a stop ends the task with.
pub(super) fn stop_status(stop: &Stop) -> ExitStatus {
    match stop {
        Stop::Answer(_) => ExitStatus::Completed,
        Stop::NoAnswer(_) => ExitStatus::NoAnswer,
        Stop::Failed(_) => ExitStatus::Failed,
        Stop::Limit(s, _) => *s,
        Stop::Interrupted => ExitStatus::Canceled,
    }
}

impl Loop<'_> {
    /// Under `lifecycle.keep_working`, removes a last line reading exactly
    /// [`DONE_MARKER`] and says whether there was one; otherwise returns the text.
    pub(super) fn strip_done(&self, text: &str) -> (String, bool) {
        if self.spec.manifest.lifecycle.keep_working.is_none() {
            return (text.to_string(), false);
        }
        let trimmed = text.trim_end();
        let (head, last) = match trimmed.rfind('\n') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        if last.trim() == DONE_MARKER {
            (head.trim_end().to_string(), true)
        } else {
            (text.to_string(), false)
        }
    }

    /// The keep-working message, when `lifecycle.keep_working` is set and its limit is
    /// not used up; counts it and writes a `keep_working` record.
    pub(super) fn keep_working(&mut self) -> Option<String> {
        let kw = self.spec.manifest.lifecycle.keep_working.as_ref()?;
        if self.counters.keep_working_used >= u64::from(kw.limit) {
            return None;
        }
        self.counters.keep_working_used += 1;
        let used = self.counters.keep_working_used;
        self.trace.record(
            Some(&self.task_id),
            "keep_working",
            fields! {"used" => used, "left" => u64::from(kw.limit) - used, "message" => kw.message},
        );
        self.status(&format!("keep working ({used} of {})", kw.limit));
        Some(kw.message.clone())
    }

    /// Decides what follows an attempt that ended with `stop`; `reopenable`: the task
    /// could go on (false for a driver that could not be set up).
    pub(super) fn after_attempt(&mut self, stop: Stop, reopenable: bool) -> Next {
        let mut stop = stop;
        if let (Stop::Answer(_), Some(dc)) = (&stop, &self.spec.manifest.lifecycle.done_check) {
            if let Err((why, tail)) = self.done_check(dc) {
                let used = self.counters.done_check_used;
                if let Some(s) = self.check_stop() {
                    // The deadline or a cancel cut the check (or came during it): the
                    // task ends so, unverified.
                    return self.task_end_hooks(s, reopenable);
                }
                if used < u64::from(dc.limit) {
                    self.counters.done_check_used += 1;
                    let left = u64::from(dc.limit) - used - 1;
                    let message = format!(
                        "[done_check] The task is not done: {why}. Its output, the last {DONE_CHECK_TAIL_BYTES} bytes at most:\n{}",
                        crate::tools::fence(
                            "done_check",
                            &tail,
                            &[format!("Keep working on the task, then answer again. The check runs again when you answer; {left} more failed check(s) reopen the task, the next one after that fails it.")],
                        )
                    );
                    self.reopen("done_check", None, &message);
                    return Next::Reopen(message);
                }
                stop = Stop::Failed(format!(
                    "lifecycle.done_check failed with its limit ({}) of reopens used: {why}; its last output:\n{tail}",
                    dc.limit
                ));
            }
        }
        self.task_end_hooks(stop, reopenable)
    }

    /// Runs `lifecycle.done_check` once. Errors: why it failed, and its output's tail.
    fn done_check(&mut self, dc: &DoneCheck) -> Result<(), (String, String)> {
        let argv = hooks::resolve(&dc.command, &self.spec.staged.workdir);
        let timeout = Duration::from_secs(DONE_CHECK_TIMEOUT_SECS);
        self.status("running lifecycle.done_check");
        let run = hooks::run(
            &self.hook_supervisor,
            hooks::Spec {
                argv: &argv,
                cwd: &self.spec.staged.workdir,
                logs_dir: &self.logs_dir,
                stdin: None,
                env: vec![("MURMUR_TASK".into(), self.task_id.clone())],
                timeout,
                stop: Some(&self.shutdown),
                deadline: self.deadline.as_ref().map(|d| d.instant),
            },
        );
        let shown = dc.command.join(" ");
        let failure = run
            .failure(timeout)
            .map(|f| format!("the check `{shown}`: {f}"));
        let tail = match (&run.log, &run.ended) {
            (_, Ended::NotStarted(e)) => e.clone(),
            (Some(p), _) => crate::exec::output::tail(p, DONE_CHECK_TAIL_BYTES)
                .map(|t| t.text)
                .unwrap_or_else(|e| format!("(its log {} cannot be read: {e})", p.display())),
            (None, _) => String::new(),
        };
        self.trace.record(
            Some(&self.task_id),
            "done_check",
            fields! {
                "command" => dc.command,
                "attempt" => self.attempt,
                "exit" => run.exit_code(),
                "passed" => failure.is_none(),
                "reason" => failure,
                "duration_ms" => run.duration.as_millis() as u64,
                "used" => self.counters.done_check_used,
                "limit" => dc.limit,
                "work_id" => run.work_id,
                "log" => run.log.as_ref().map(|p| p.display().to_string()),
            },
        );
        match failure {
            None => Ok(()),
            Some(f) => Err((f, tail)),
        }
    }

    /// Starts the next attempt: writes `task_reopened`.
    fn reopen(&mut self, by: &str, hook: Option<&str>, message: &str) {
        self.attempt += 1;
        self.calls.ending = None;
        self.trace.record(
            Some(&self.task_id),
            "task_reopened",
            fields! {
                "by" => by,
                "hook" => hook,
                "attempt" => self.attempt,
                "reopens_used" => self.reopens,
                "done_check_used" => self.counters.done_check_used,
                "message" => message,
            },
        );
        self.status(&format!("reopened by {}", hook.unwrap_or(by)));
    }

    /// `hooks.on_task_end`, in order.
    fn task_end_hooks(&mut self, stop: Stop, reopenable: bool) -> Next {
        let mut stop = stop;
        let list = &self.spec.manifest.hooks.on_task_end;
        let max = self
            .spec
            .manifest
            .lifecycle
            .max_task_reopens
            .unwrap_or(DEFAULT_MAX_TASK_REOPENS);
        for (i, h) in list.iter().enumerate() {
            let name = hook_name("on_task_end", i);
            let status = stop_status(&stop);
            let (answer, reason) = match &stop {
                Stop::Answer(a) => (Some(a.clone()), None),
                Stop::NoAnswer(r) | Stop::Failed(r) | Stop::Limit(_, r) => (None, Some(r.clone())),
                Stop::Interrupted => (None, Some(self.interrupted_reason())),
            };
            let stdin = json!({
                "event": "on_task_end",
                "session": self.spec.staged.session_id,
                "task": self.task_id,
                "exit_status": status.as_str(),
                "answer": answer,
                "reason": reason,
                "attempt": self.attempt,
                "reopens_used": self.reopens,
                "reopens_left": max.saturating_sub(self.reopens),
            });
            let timeout = Duration::from_secs(h.timeout_secs.unwrap_or(DEFAULT_HOOK_TIMEOUT_SECS));
            let (run, answer) =
                self.ask_hook(&name, h, "on_task_end", &stdin, timeout, false, None);
            let answer = match answer {
                Err(f) => Err(f),
                Ok(o) => reopen_of(&o),
            };
            match answer {
                Err(f) => {
                    let why = format!("the hook failed: {f}");
                    self.record_hook_run(&name, h, "on_task_end", &run, "error", Some(&why), None);
                    log::warn!(
                        "task {}: hook {name} ({}) failed: {f}",
                        self.task_id,
                        program(h)
                    );
                    if status == ExitStatus::Completed {
                        stop = Stop::Failed(format!(
                            "hook {name} ({}) failed, so the task is not reported completed: {f}",
                            program(h)
                        ));
                    }
                    break;
                }
                Ok(None) => {
                    self.record_hook_run(&name, h, "on_task_end", &run, "none", None, None);
                }
                Ok(Some(message)) => {
                    let refused = if !reopenable
                        || !matches!(
                            status,
                            ExitStatus::Completed | ExitStatus::Failed | ExitStatus::NoAnswer
                        ) {
                        Some(format!(
                            "not reopened: a task that ended {status} cannot go on"
                        ))
                    } else if let Some(s) = self.check_stop() {
                        Some(format!(
                            "not reopened: the task cannot go on ({})",
                            stop_status(&s)
                        ))
                    } else if self.reopens >= max {
                        Some(format!(
                            "not reopened: lifecycle.max_task_reopens ({max}) reached"
                        ))
                    } else {
                        None
                    };
                    self.record_hook_run(
                        &name,
                        h,
                        "on_task_end",
                        &run,
                        "reopen",
                        refused.as_deref(),
                        None,
                    );
                    match refused {
                        Some(why) => {
                            log::warn!(
                                "task {}: hook {name} asked to reopen it; {why}",
                                self.task_id
                            );
                            break;
                        }
                        None => {
                            self.reopens += 1;
                            self.reopen("on_task_end", Some(&name), &message);
                            return Next::Reopen(message);
                        }
                    }
                }
            }
        }
        Next::End(stop)
    }
}

/// What an `on_task_end` hook's answer asks: `{}` nothing, `{"reopen": "<message>"}` a
/// reopen. Errors: any other key, a blank or non-string message.
fn reopen_of(o: &serde_json::Map<String, Value>) -> Result<Option<String>, String> {
    if let Some(k) = o.keys().find(|k| *k != "reopen") {
        return Err(format!(
            "its answer has the unknown key `{k}`; answer {{}} or {{\"reopen\": \"<message>\"}}"
        ));
    }
    match o.get("reopen") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(m)) if !m.trim().is_empty() => Ok(Some(m.clone())),
        Some(Value::String(_)) => Err("its `reopen` message is blank".into()),
        Some(other) => Err(format!(
            "its `reopen` is {}, not a message",
            crate::tools::json_type(other)
        )),
    }
}
