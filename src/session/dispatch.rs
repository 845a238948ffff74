//! Answering one tool call of a turn: the duplicate-id refusal, the deadline notice,
//! the `tool_call` record, and the match over the tool's kind.

use std::time::Instant;

use serde_json::Value;

use crate::fields;
use crate::inference::{Arguments, ToolCall};
use crate::staging;
use crate::tools::{self, shell, ToolKind, ToolResult};

use super::{status, Loop};

impl Loop<'_> {
    /// Answers one tool call and returns the full text the model is given.
    pub(super) fn dispatch(&mut self, call: &ToolCall, turn: u64, duplicate: bool) -> String {
        let started = Instant::now();
        self.progress.set(turn, format!("running {}", call.name));
        let mut result = if duplicate {
            ToolResult::refused("this tool call repeats a call id already used in this turn, so it was not run; give each call its own id")
        } else {
            self.answer(call)
        };
        if !result.refused {
            if let Some(d) = self.deadline.as_mut().filter(|d| !d.passed()) {
                if let Some((line, left)) = d.take_notice() {
                    result.notes.push(line);
                    self.trace.record(
                        Some(&self.task_id),
                        "deadline_notice",
                        fields! {"at" => crate::records::rfc3339_secs(d.at), "left_secs" => left, "call_id" => call.id},
                    );
                }
            }
        }
        let content = result.render(&call.name);
        let mut f = fields! {
            "turn" => turn,
            "name" => call.name,
            "call_id" => call.id,
            "input" => call.arguments.to_record(),
            "status" => result.status.as_str(),
            "summary" => result.summary,
            "duration_ms" => started.elapsed().as_millis() as u64,
            "content" => content,
        };
        f.extend(result.record.clone());
        self.trace.record(Some(&self.task_id), "tool_call", f);
        content
    }

    fn answer(&mut self, call: &ToolCall) -> ToolResult {
        let inventory = &self.spec.staged.inventory;
        let Some(entry) = inventory.iter().find(|t| t.name == call.name) else {
            return ToolResult::refused(staging::absent_tool_message(&call.name, inventory));
        };
        let input = match &call.arguments {
            Arguments::Json(v) => v.clone(),
            Arguments::Invalid(raw) => {
                let shown: String = raw.chars().take(200).collect();
                return ToolResult::refused(format!(
                    "the arguments of this call to `{}` are not JSON: `{shown}`; send a JSON object matching the tool's input schema",
                    call.name
                ));
            }
        };
        match &entry.kind {
            ToolKind::Shell { binary } => {
                if !self
                    .spec
                    .manifest
                    .capabilities
                    .shell_allow
                    .iter()
                    .any(|b| b == binary)
                {
                    return ToolResult::refused(format!(
                        "`{binary}` is not in capabilities.shell.allow"
                    ));
                }
                let args = match shell::parse_args(binary, &input) {
                    Ok(a) => a,
                    Err(e) => return ToolResult::refused(e),
                };
                let ctx = shell::ShellContext {
                    workdir: &self.spec.staged.workdir,
                    logs_dir: &self.logs_dir,
                    supervisor: &self.supervisor,
                    deadline: self.deadline.as_ref().map(|d| d.instant),
                    shutdown: &self.shutdown,
                    grace: self
                        .spec
                        .manifest
                        .lifecycle
                        .shell_grace_secs
                        .map(std::time::Duration::from_secs),
                };
                shell::call(&ctx, binary, args).0
            }
            ToolKind::BackgroundCommand => {
                let ctx = tools::background::Context {
                    supervisor: &self.supervisor,
                    deadline: self.deadline.as_ref().map(|d| d.instant),
                    shutdown: &self.shutdown,
                };
                match tools::background::call(&ctx, &input) {
                    Ok(a) => {
                        if a.cut.is_some() {
                            self.phase = Some("background_wait");
                        }
                        self.trace
                            .record(Some(&self.task_id), "background_command", a.record);
                        a.result
                    }
                    Err(message) => ToolResult::refused(message),
                }
            }
            ToolKind::CallMember => self.call_member(&input),
            ToolKind::EndWithoutAnswer => self.end_without_answer(&input),
            ToolKind::SessionStatus => {
                match &input {
                    Value::Object(m) => {
                        if let Some(k) = m.keys().next() {
                            return ToolResult::refused(format!(
                                "session-status takes no input; unknown key `{k}`"
                            ));
                        }
                    }
                    Value::Null => {}
                    other => {
                        return ToolResult::refused(format!(
                            "session-status takes no input: send {{}}, not {}",
                            tools::json_type(other)
                        ))
                    }
                }
                let inf = self.spec.manifest.inference.as_ref();
                let st = status::measure(&status::Inputs {
                    manifest: &self.spec.manifest,
                    choice: inf.and_then(|i| i.choice(&self.spec.choice)),
                    session_start: self.session_start,
                    task_start: self.task_start,
                    deadline: self.deadline.as_ref(),
                    counters: &self.counters,
                });
                self.trace.record(
                    Some(&self.task_id),
                    "session_status",
                    fields! {"status" => st},
                );
                tools::session_status::result(&st)
            }
        }
    }
}
