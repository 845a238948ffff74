//! Answering one tool call of a turn: the deadline notice, the `tool_call` record, and
//! the match over the tool's kind.

use std::time::Instant;

use serde_json::Value;

use crate::fields;
use crate::inference::{Arguments, ToolCall};
use crate::staging;
use crate::tools::{self, shell, ToolKind, ToolResult};

use super::{status, Loop};

impl Loop<'_> {
    /// Answers one tool call and returns the full text the model is given, and whether
    /// the call counts as failed (Anthropic's `is_error`). `model_id` is the id the
    /// model gave when the runtime renamed it (see `unique_ids`); the record keeps both.
    pub(super) fn dispatch(
        &mut self,
        call: &ToolCall,
        turn: u64,
        model_id: Option<&str>,
    ) -> (String, bool) {
        let started = Instant::now();
        self.progress.set(turn, format!("running {}", call.name));
        let mut result = self.answer(call);
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
        if let Some(id) = model_id {
            f.insert("model_call_id".into(), Value::String(id.to_string()));
        }
        f.extend(result.record.clone());
        self.trace.record(Some(&self.task_id), "tool_call", f);
        (content, result.status == tools::Status::Failed)
    }

    fn answer(&mut self, call: &ToolCall) -> ToolResult {
        let inventory = &self.spec.staged.inventory;
        let Some(entry) = inventory.iter().find(|t| t.name == call.name) else {
            return ToolResult::refused(staging::absent_tool_message(&call.name, inventory));
        };
        let input = match &call.arguments {
            Arguments::Json(v) => v.clone(),
            Arguments::Invalid(raw) => {
                return ToolResult::refused(invalid_arguments(
                    &call.name,
                    raw,
                    &entry.spec().input_schema,
                ))
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

/// The tool error for arguments that are not JSON: the parse problem with its line and
/// column, the text sent (its first 200 characters), and the tool's input schema, so
/// the model can send the call again correctly.
fn invalid_arguments(tool: &str, raw: &str, schema: &Value) -> String {
    let problem = match serde_json::from_str::<Value>(raw) {
        Err(e) => e.to_string(),
        Ok(_) => "not a JSON value".to_string(),
    };
    let mut shown: String = raw.chars().take(200).collect();
    if shown.len() < raw.len() {
        shown.push('…');
    }
    format!(
        "the arguments of this call to `{tool}` are not JSON ({problem}): `{shown}`; send one JSON object matching the tool's input schema: {schema}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_arguments_name_the_problem_its_position_and_the_schema() {
        let schema =
            serde_json::json!({"type": "object", "properties": {"args": {"type": "array"}}});
        assert_eq!(
            invalid_arguments("ls", "{\"args\": [\"-l\"", &schema),
            "the arguments of this call to `ls` are not JSON (EOF while parsing a list at line 1 column 14): `{\"args\": [\"-l\"`; send one JSON object matching the tool's input schema: {\"type\":\"object\",\"properties\":{\"args\":{\"type\":\"array\"}}}"
        );
    }
}
