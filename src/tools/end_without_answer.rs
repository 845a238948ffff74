//! end-without-answer: ends a task another formation member sent without an answer,
//! and the runtime tells that member none came (spec, "end-without-answer").
//!
//! The tool: entry, the accepted result and the refusals, checked in the spec's order
//! and words against what the session reports ([`super::Session`]).

use serde_json::json;

use super::{ToolEntry, ToolKind, ToolResult};

/// The tool's name.
pub const NAME: &str = "end-without-answer";

/// What the model is told about the tool (spec, end-without-answer, "Description").
pub const DESCRIPTION: &str = "Ends the task you are working on without an answer. Use it instead of replying when you have no answer to give, usually because a member you called gave you none. The reason is passed to the member that sent you the task; the runtime tells that member plainly that no answer came, and names each member you called that gave none. It is refused while a call you made is still out, and for a task no formation member sent.";

/// The inventory entry. Input: `{"reason": "<text>"}`, required.
pub fn entry() -> ToolEntry {
    ToolEntry {
        name: NAME.into(),
        description: DESCRIPTION.into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "reason": {"type": "string", "description": "In a sentence, why you have no answer. It becomes the task's status message."}
            },
            "required": ["reason"],
            "additionalProperties": false
        }),
        kind: ToolKind::EndWithoutAnswer,
    }
}

/// Refusal 1: the session is no formation member with a callee.
pub const NOT_A_CALLER: &str = "'end-without-answer' is answered only for a formation member that roster.yaml lets call another; this session is not one";
/// Refusal 2: no task is running.
pub const NO_TASK: &str =
    "'end-without-answer' is answered only while a task runs; this session is running none";
/// Refusal 3: no formation member sent the task (the entry member's task among them).
pub const NOT_FROM_MEMBER: &str = "'end-without-answer' ends only a task another formation member sent; no formation member sent this one. Reply in text, saying plainly which part has no answer.";
/// Refusal 5: reason missing or blank.
pub const NO_REASON: &str =
    "'end-without-answer' needs a reason: say in a sentence why you have no answer.";
/// Refusal 6: the task has already accepted one.
pub const ALREADY: &str = "This task is already ending without an answer.";

/// Refusal 4: a call this task made is being sent, is outstanding, or has an answer not
/// yet delivered.
pub fn call_still_out(call_id: &str, member: &str) -> String {
    format!("Call {call_id} to {member} is still out; its answer arrives after you end your turn. Call end-without-answer only when no call is left to wait for.")
}

/// The accepted result: `passed`, `Ending task without an answer`, data
/// `{"status": "ending", "caller": "<caller>"}` and the note.
pub fn accepted(caller: &str) -> ToolResult {
    ToolResult::passed(
        "Ending task without an answer",
        json!({"status": "ending", "caller": caller}).to_string(),
    )
    .with_note(format!("[end-without-answer] This task ends without an answer once this turn's tool calls finish, and {caller} is told you gave none."))
}

/// `out/result.txt` of a task that ended so.
pub fn result_text(reason: &str) -> String {
    format!("no answer: {reason}")
}

/// The end-without-answer tool ([`super::registry`]).
pub struct EndWithoutAnswer;

impl super::Tool for EndWithoutAnswer {
    /// The refusals in the spec's order, then acceptance.
    fn call(
        &self,
        cx: &mut dyn super::Session,
        _entry: &ToolEntry,
        input: &serde_json::Value,
    ) -> super::Answer {
        call(cx, input).into()
    }
}

fn call(cx: &mut dyn super::Session, input: &serde_json::Value) -> ToolResult {
    if cx.callees().is_none_or(|c| c.is_empty()) {
        return ToolResult::refused(NOT_A_CALLER);
    }
    if !cx.task_running() {
        return ToolResult::refused(NO_TASK);
    }
    let Some(caller) = cx.caller() else {
        return ToolResult::refused(NOT_FROM_MEMBER);
    };
    if let Some(h) = cx.held_call(None) {
        return ToolResult::refused(call_still_out(&h.call_id, &h.member));
    }
    let reason = match input.get("reason") {
        // Kept as given: the reason is the task's status message (spec).
        Some(serde_json::Value::String(r)) if !r.trim().is_empty() => r.clone(),
        _ => return ToolResult::refused(NO_REASON),
    };
    if cx.ending().is_some() {
        return ToolResult::refused(ALREADY);
    }
    cx.end_without_answer(reason);
    accepted(&caller)
}
