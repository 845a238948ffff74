//! Answering one tool call of a turn: the tool looked up in the inventory, the
//! decision point ([`super::policy`]), the tool run through the registry
//! ([`crate::tools::registry`]), the deadline notice, and the `tool_call` record.

use std::time::Instant;

use serde_json::Value;

use crate::fields;
use crate::inference::{Arguments, ToolCall};
use crate::tools::{self, ToolResult};

use super::policy::{CallOrigin, Decision};
use super::Loop;

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
        let mut result = self.answer(call, &CallOrigin::Model);
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
        // Debug builds only: a test's way to crash a session while its commands run
        // (tests/background.rs).
        if cfg!(debug_assertions) {
            if let Some(marker) = std::env::var_os("MUR_DEBUG_PANIC_AFTER_TOOL") {
                if content.contains(marker.to_string_lossy().as_ref()) {
                    panic!("MUR_DEBUG_PANIC_AFTER_TOOL matched a tool result");
                }
            }
        }
        (content, result.status == tools::Status::Failed)
    }

    /// Runs one plan step: the call, with id `<plan>.<step>`, passes the decision point
    /// with origin `plan_step` and runs; its `tool_call` record carries `plan`, `step`
    /// and `origin: "plan_step"`. A step carries no deadline notice: the plan's own
    /// result does.
    pub(super) fn plan_step(
        &mut self,
        plan: &str,
        step: u32,
        tool: &str,
        input: &Value,
    ) -> (String, ToolResult) {
        let started = Instant::now();
        let call = ToolCall {
            id: format!("{plan}.{step}"),
            name: tool.to_string(),
            arguments: Arguments::Json(input.clone()),
        };
        let origin = CallOrigin::PlanStep {
            plan: plan.to_string(),
            step,
        };
        let result = self.answer(&call, &origin);
        let mut f = fields! {
            "turn" => self.counters.turns_used,
            "name" => call.name,
            "call_id" => call.id,
            "input" => call.arguments.to_record(),
            "status" => result.status.as_str(),
            "summary" => result.summary,
            "duration_ms" => started.elapsed().as_millis() as u64,
            "content" => result.render(tool),
            "plan" => plan,
            "step" => step,
            "origin" => "plan_step",
        };
        f.extend(result.record.clone());
        self.trace.record(Some(&self.task_id), "tool_call", f);
        (call.id, result)
    }

    /// Looks the call's tool up in the inventory, passes it through the decision point
    /// ([`Loop::decide`]), then runs it through the registry; writes the records the
    /// tool answers with. A call naming no tool of the inventory, or whose arguments
    /// are not JSON, is refused before the decision point: nothing could run.
    fn answer(&mut self, call: &ToolCall, origin: &CallOrigin) -> ToolResult {
        let spec = self.spec;
        let inventory = &spec.staged.inventory;
        let Some(entry) = inventory.iter().find(|t| t.name == call.name) else {
            return ToolResult::refused(tools::absent_tool_message(&call.name, inventory));
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
        // The decision point: nothing runs a tool around it.
        if let Decision::Deny { message } = self.decide(origin, &call.name, &call.id, &input) {
            let mut r = ToolResult::refused(message);
            r.record
                .insert("policy".into(), Value::String("deny".into()));
            return r;
        }
        let answer = entry.kind.tool().call(self, entry, &input);
        for (kind, fields) in answer.records {
            self.trace.record(Some(&self.task_id), kind, fields);
        }
        if answer.phase.is_some() {
            self.phase = answer.phase;
        }
        answer.result
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
