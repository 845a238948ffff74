//! One task: its run to an answer or a stop (the turn loop), its end and records,
//! and the completion tasks dispatched between tasks.

use std::collections::HashSet;
use std::time::Instant;

use crossbeam_channel::{bounded, select};
use serde_json::{json, Value};

use super::board::{Final, Incoming, Origin};
use super::link::State;
use crate::exec::procs::SweepScope;
use crate::exec::Supervisor;
use crate::exit::ExitStatus;
use crate::fields;
use crate::inference::{Message, ToolCall, ToolSpec};
use crate::tools::{self, end_without_answer};

use super::lifecycle::Next;
use super::{Calls, Loop, Outcome, Stop};

impl Loop<'_> {
    /// Runs one task to its end and writes its records; tells the board how it ended.
    pub(super) fn run_one(&mut self, inc: Incoming, out_dir: &std::path::Path) -> Outcome {
        self.task_id = inc.id.clone();
        self.origin = inc.origin.clone();
        self.calls = Calls::new();
        self.phase = None;
        // The task's stop: the session's shutdown or this task's cancel, whichever first.
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let (done_tx, done_rx) = bounded::<()>(0);
        let session_shutdown = self.session_shutdown.clone();
        let cancel = inc.cancel;
        let relay = std::thread::Builder::new()
            .name("task-stop".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                select! {
                    recv(session_shutdown) -> _ => {},
                    recv(cancel) -> _ => {},
                    recv(done_rx) -> _ => {},
                }
                drop(stop_tx);
            });
        self.shutdown = if relay.is_ok() {
            stop_rx
        } else {
            self.session_shutdown.clone()
        };
        let stop = self.run_task(&inc.text);
        self.account_leftovers();
        drop(done_tx);
        for c in self.supervisor.all() {
            self.owners
                .entry(c.work_id.clone())
                .or_insert_with(|| (self.task_id.clone(), self.origin.clone()));
        }
        let running: Vec<Value> = self
            .supervisor
            .running()
            .iter()
            .map(|c| json!({"work_id": c.work_id, "argv": c.argv, "pgid": c.pgid}))
            .collect();
        let session_ends = matches!(stop, Stop::Limit(ExitStatus::Deadline, _))
            || self
                .session_shutdown
                .try_recv()
                .is_err_and(|e| e.is_disconnected());
        let stopped = if self.completions && !session_ends {
            // Commands outlive the task; a canceled task's own are stopped, and a stop
            // the runtime made yields no completion task.
            if matches!(stop, Stop::Interrupted) {
                let own: Vec<_> = self
                    .supervisor
                    .all()
                    .into_iter()
                    .filter(|c| {
                        self.owners
                            .get(&c.work_id)
                            .is_some_and(|(t, _)| *t == self.task_id)
                    })
                    .collect();
                let stopped = Supervisor::stop_these(&own);
                for c in &own {
                    c.mark_exit_returned();
                }
                stopped
            } else {
                Vec::new()
            }
        } else {
            // Every path out stops what still runs.
            let stopped = self.supervisor.stop_all();
            // Descendants that left their command's group (setsid, double fork) came
            // back to mur as a child subreaper: the task's end kills them, and says so.
            for s in crate::exec::procs::sweep(
                SweepScope::Session(&self.spec.staged.session_id),
                &self.supervisor.live_groups(),
            ) {
                self.trace.record(
                    Some(&self.task_id),
                    "survivor_killed",
                    fields! {"pid" => s.pid, "argv" => s.argv, "comm" => s.comm, "work_id" => s.work_id, "signal" => "SIGKILL"},
                );
            }
            stopped
        };
        let (status, answer, error) = match stop {
            Stop::Answer(a) => (ExitStatus::Completed, Some(a), None),
            Stop::NoAnswer(r) => (ExitStatus::NoAnswer, None, Some(r)),
            Stop::Failed(e) => (ExitStatus::Failed, None, Some(e)),
            Stop::Limit(s, e) => (s, None, Some(e)),
            Stop::Interrupted => (ExitStatus::Canceled, None, Some(self.interrupted_reason())),
        };
        let result_text = match (status, &answer, &error) {
            (ExitStatus::NoAnswer, _, Some(r)) => end_without_answer::result_text(r),
            (_, Some(a), _) => a.clone(),
            (_, None, Some(e)) => format!("{status}: {e}"),
            (_, None, None) => status.to_string(),
        };
        let result_path = out_dir.join("result.txt");
        // No secret of the runtime's lands in out/ (crate::secrets).
        if let Err(e) =
            crate::private::write(&result_path, crate::secrets::mask(&result_text).as_bytes())
        {
            log::error!("cannot write {}: {e}", result_path.display());
        }
        let task = Some(self.task_id.as_str());
        if status == ExitStatus::Failed {
            self.trace
                .record(task, "task_failed", fields! {"error" => error});
        }
        self.trace.record(
            task,
            "task_end",
            fields! {
                "exit_status" => status.as_str(),
                "turns" => self.counters.turns_used,
                "runningCommands" => running,
                "stopped_commands" => stopped,
                "phase" => self.phase,
                "error" => if status == ExitStatus::NoAnswer { None } else { error.clone() },
                "reason" => if status == ExitStatus::NoAnswer { error.clone() } else { None },
            },
        );
        // A completed task names the members below it that gave none too: its caller
        // then reads it as an answer with a gap.
        let below = if matches!(status, ExitStatus::NoAnswer | ExitStatus::Completed) {
            self.calls.ledger.no_answer_below()
        } else {
            Vec::new()
        };
        self.board.finish(
            &self.task_id,
            Final {
                state: match status {
                    ExitStatus::Completed => State::Completed,
                    ExitStatus::Canceled => State::Canceled,
                    _ => State::Failed,
                },
                message: error.clone(),
                answer: answer.clone(),
                no_answer: status == ExitStatus::NoAnswer,
                no_answer_below: below,
            },
        );
        self.task_start = None;
        Outcome {
            task_id: self.task_id.clone(),
            status,
            answer,
            error,
            records_dir: self.spec.records_dir.clone(),
        }
    }

    /// Ends task `task_id` whose run panicked (`panic`: the panic's message): every
    /// command of the session is stopped (TERM to its group, KILL after the grace) and
    /// what left its group is killed, the task is recorded `failed` (`task_failed`
    /// with the panic, `task_end`) and its caller told `<who>'s session crashed`.
    /// The session ends after it ([`super::serve`]).
    pub(super) fn crashed(&mut self, task_id: &str, panic: &str) -> Outcome {
        self.task_id = task_id.to_string();
        let stopped = self.supervisor.stop_all();
        self.hook_supervisor.stop_all();
        for s in crate::exec::procs::sweep(
            SweepScope::Session(&self.spec.staged.session_id),
            &self.supervisor.live_groups(),
        ) {
            self.trace.record(
                Some(task_id),
                "survivor_killed",
                fields! {"pid" => s.pid, "argv" => s.argv, "comm" => s.comm, "work_id" => s.work_id, "signal" => "SIGKILL"},
            );
        }
        let who = self
            .spec
            .member
            .as_ref()
            .map_or_else(|| self.spec.manifest.name.clone(), |m| m.name.clone());
        let error = format!("{who}'s session crashed");
        self.trace.record(
            Some(task_id),
            "task_failed",
            fields! {"error" => error, "panic" => panic},
        );
        self.trace.record(
            Some(task_id),
            "task_end",
            fields! {
                "exit_status" => ExitStatus::Failed.as_str(),
                "turns" => self.counters.turns_used,
                "runningCommands" => Vec::<Value>::new(),
                "stopped_commands" => stopped,
                "phase" => self.phase,
                "error" => error,
            },
        );
        self.board.finish(
            task_id,
            Final {
                state: State::Failed,
                message: Some(error.clone()),
                answer: None,
                no_answer: false,
                no_answer_below: Vec::new(),
            },
        );
        self.task_start = None;
        Outcome {
            task_id: task_id.to_string(),
            status: ExitStatus::Failed,
            answer: None,
            error: Some(error),
            records_dir: self.spec.records_dir.clone(),
        }
    }

    /// Dispatches one command exit between tasks: with completion tasks on, an exit no
    /// tool result returned, of a command the runtime did not stop, is submitted to the
    /// board as a completion task (spec, "background-command"); anything else is only
    /// logged.
    pub(super) fn completion(&mut self, ev: crate::exec::ExitEvent) {
        log::debug!("{} exited: {}", ev.work_id, ev.exit.exit_code());
        if !self.completions {
            return;
        }
        let Some(c) = self.supervisor.get(&ev.work_id) else {
            return;
        };
        if c.exit_returned() {
            return;
        }
        let (started_by, origin) = self
            .owners
            .get(&ev.work_id)
            .cloned()
            .unwrap_or_else(|| (self.task_id.clone(), self.origin.clone()));
        let text = tools::background::completion_text(&self.supervisor, &c, &started_by);
        let snap = self.board.submit(
            &text,
            Origin::Completion {
                work_id: ev.work_id.clone(),
                started_by,
                trust: origin.trust(),
            },
        );
        log::info!(
            "{} exited: completion task {} ({})",
            ev.work_id,
            snap.id,
            snap.state.wire()
        );
    }

    fn run_task(&mut self, text: &str) -> Stop {
        let spec = self.spec;
        let Some(inf) = spec.manifest.inference.as_ref() else {
            return Stop::Failed("this capsule has no inference: block".into());
        };
        let Some(choice) = inf.choice(&spec.choice) else {
            return Stop::Failed(format!(
                "driver choice `{}` is not declared in inference.choices",
                spec.choice
            ));
        };
        self.task_start = Some(Instant::now());
        self.counters.start_task();
        self.trace.record(
            Some(&self.task_id),
            "task_start",
            fields! {
                "text" => text,
                "origin" => self.origin.as_str(),
                "caller" => self.origin.caller(),
                "work_id" => match &self.origin { Origin::Completion { work_id, .. } => Some(work_id.clone()), _ => None },
                "started_by" => match &self.origin { Origin::Completion { started_by, .. } => Some(started_by.clone()), _ => None },
            },
        );
        // Debug builds only: a test's way to crash a session (tests/formation.rs).
        if cfg!(debug_assertions) {
            if let Some(marker) = std::env::var_os("MUR_DEBUG_PANIC_ON_TASK") {
                if text.contains(marker.to_string_lossy().as_ref()) {
                    panic!("MUR_DEBUG_PANIC_ON_TASK matched the task text");
                }
            }
        }
        let driver = match self.driver(choice) {
            Ok(d) => d,
            Err(e) => return self.after_attempt(Stop::Failed(e), false).into_stop(),
        };
        let tools: Vec<ToolSpec> = spec.staged.inventory.iter().map(|t| t.spec()).collect();
        let mut messages = vec![Message::User(text.to_string())];
        // Every call id the conversation has used so far: the history sent back to
        // the model never holds one id twice (providers that count from `call_0` in
        // each turn would otherwise pair a result with the wrong call).
        let mut used_ids: HashSet<String> = HashSet::new();
        self.attempt = 1;
        self.reopens = 0;
        loop {
            let stop = 'turns: loop {
                if let Some(s) = self.check_stop() {
                    break 'turns s;
                }
                if let Some(cap) = inf.max_turns {
                    if self.counters.turns_used >= u64::from(cap) {
                        break 'turns Stop::Limit(
                            ExitStatus::MaxTurns,
                            format!(
                                "inference.max_turns ({cap}) ran out before the model answered"
                            ),
                        );
                    }
                }
                if let Some(ceiling) = inf.max_session_tokens {
                    if self.counters.spend_tokens >= ceiling {
                        break 'turns Stop::Limit(
                            ExitStatus::SpendCeiling,
                            format!(
                                "inference.max_session_tokens ({ceiling}) reached: {} tokens spent",
                                self.counters.spend_tokens
                            ),
                        );
                    }
                }
                let turn = self.counters.turns_used + 1;
                self.progress.set(turn, "waiting for the model");
                let resp = match self.infer(&driver, choice, &messages, &tools, turn, None) {
                    Ok(r) => r,
                    Err(s) => break 'turns s,
                };
                let (calls, renamed) = unique_ids(resp.tool_calls.clone(), &mut used_ids);
                messages.push(Message::Assistant {
                    text: resp.text.clone(),
                    tool_calls: calls.clone(),
                });
                if calls.is_empty() {
                    self.calls.drain();
                    let turn_left = inf
                        .max_turns
                        .is_none_or(|cap| self.counters.turns_used < u64::from(cap));
                    if self.calls.slots.is_empty() || !turn_left {
                        let text = resp.text.unwrap_or_default();
                        let (text, done) = self.strip_done(&text);
                        if turn_left && !done {
                            if let Some(message) = self.keep_working() {
                                messages.push(Message::User(message));
                                continue;
                            }
                        }
                        break 'turns if text.trim().is_empty() {
                            Stop::Failed("the model ended its turn with no text and no tool call, so there is no answer".into())
                        } else {
                            Stop::Answer(text)
                        };
                    }
                    match self.continuation() {
                        Ok(text) => messages.push(Message::User(text)),
                        Err(s) => break 'turns s,
                    }
                    continue;
                }
                for (call, model_id) in calls.iter().zip(&renamed) {
                    if let Some(s) = self.check_stop() {
                        break 'turns s;
                    }
                    let (content, is_error) = self.dispatch(call, turn, model_id.as_deref());
                    messages.push(Message::Tool {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        content,
                        is_error,
                    });
                }
                if let Some(reason) = self.calls.ending.clone() {
                    break 'turns Stop::NoAnswer(reason);
                }
            };
            match self.after_attempt(stop, true) {
                Next::End(s) => return s,
                Next::Reopen(message) => messages.push(Message::User(message)),
            }
        }
    }

    /// Why an interrupted task ended: the signal, the formation's end, the session's
    /// shutdown, or its own cancel.
    pub(super) fn interrupted_reason(&self) -> String {
        if self
            .session_shutdown
            .try_recv()
            .is_err_and(|e| e.is_disconnected())
        {
            match (crate::signals::received(), &self.spec.member) {
                (Some(sig), _) => format!("interrupted by {sig}"),
                (None, Some(_)) => "the formation ended before this task did".to_string(),
                (None, None) => "the session was shut down".to_string(),
            }
        } else {
            "the task was canceled".to_string()
        }
    }

    pub(super) fn status(&self, message: &str) {
        self.board.status(&self.task_id, message);
        self.progress.set(self.counters.turns_used, message);
        log::info!("task {}: {message}", self.task_id);
    }

    pub(super) fn check_stop(&self) -> Option<Stop> {
        if self.shutdown.try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected) {
            return Some(Stop::Interrupted);
        }
        if let Some(d) = &self.deadline {
            if d.passed() {
                return Some(Stop::Limit(
                    ExitStatus::Deadline,
                    format!(
                        "the session's deadline {} passed",
                        crate::records::rfc3339_secs(d.at)
                    ),
                ));
            }
        }
        None
    }
}

/// Makes call ids unique across the conversation: an id already in `used` (from an
/// earlier turn, or earlier in this one) becomes `<id>-2`, `<id>-3`…, the first that
/// neither `used` nor any call of this turn has, so each result answers exactly one
/// call and every call runs. Returns the calls and, beside each, the id the model gave
/// when it was renamed. Every id returned is added to `used`.
fn unique_ids(
    calls: Vec<ToolCall>,
    used: &mut HashSet<String>,
) -> (Vec<ToolCall>, Vec<Option<String>>) {
    // The ids of this turn are reserved, so a renamed call never takes an id that a
    // later call of the same turn brings.
    let turn_ids: HashSet<String> = calls.iter().map(|c| c.id.clone()).collect();
    let mut renamed = Vec::with_capacity(calls.len());
    let calls = calls
        .into_iter()
        .map(|mut c| {
            if used.contains(&c.id) {
                let original = c.id.clone();
                let mut n = 2u64;
                let id = loop {
                    let id = format!("{original}-{n}");
                    if !used.contains(&id) && !turn_ids.contains(&id) {
                        break id;
                    }
                    n += 1;
                };
                log::debug!("tool call id `{original}` was used before in this conversation; answered as `{id}`");
                c.id = id;
                renamed.push(Some(original));
            } else {
                renamed.push(None);
            }
            used.insert(c.id.clone());
            c
        })
        .collect();
    (calls, renamed)
}

#[cfg(test)]
mod unique_id_tests {
    use super::*;
    use crate::inference::Arguments;

    fn calls(ids: &[&str]) -> Vec<ToolCall> {
        ids.iter()
            .map(|id| ToolCall {
                id: id.to_string(),
                name: "ls".into(),
                arguments: Arguments::Json(serde_json::json!({})),
            })
            .collect()
    }

    fn ids(c: &[ToolCall]) -> Vec<&str> {
        c.iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn ids_are_unique_across_turns_and_within_one() {
        let mut used = HashSet::new();
        let (c1, r1) = unique_ids(calls(&["call_0", "call_1"]), &mut used);
        assert_eq!(ids(&c1), ["call_0", "call_1"]);
        assert_eq!(r1, [None, None]);
        let (c2, r2) = unique_ids(calls(&["call_0", "call_0", "call_0-2"]), &mut used);
        assert_eq!(ids(&c2), ["call_0-3", "call_0-4", "call_0-2"]);
        assert_eq!(r2, [Some("call_0".into()), Some("call_0".into()), None]);
        let (c3, _) = unique_ids(calls(&["call_0-2"]), &mut used);
        assert_eq!(ids(&c3), ["call_0-2-2"]);
    }
}
