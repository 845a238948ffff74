//! call-member: hands one task to another formation member and returns at once with
//! one of four results: `started` or `busy` (passed; the answer arrives later in the
//! same task, after the turn ends), `rejected` or `failed` (failed; no answer will
//! come) (spec, "call-member", "What a call returns").
//!
//! This file is the tool's face: its inventory entry, the four results with their
//! `data`, the runtime's notes and the refusals, word for word as the spec gives them.
//! The calls themselves are made by [`crate::formation`].

use serde_json::json;

use super::{ToolEntry, ToolKind, ToolResult};

/// The tool's name.
pub const NAME: &str = "call-member";

/// What the model is told about the tool (spec, call-member, "Description").
pub const DESCRIPTION: &str = "Hands one task to another member of this formation and returns at once with a call id. The task text is the whole of what the member is told, so put any file content it needs into the task itself. The call returns started when the member holds the task, or busy when it has no room; for a busy member the runtime keeps offering the task until the member takes it or the call's deadline passes. The member's answer is not in this result and no tool fetches it: it arrives in this conversation, naming the call id, after you end your turn. A second call to a member before its answer has arrived is refused.";

/// The inventory entry for a member that may call `callees` (in roster order).
///
/// Input: `{"member": "<name>", "task": "<text>"}`, both required; `member` is an enum
/// of `callees`.
pub fn entry(callees: &[String]) -> ToolEntry {
    ToolEntry {
        name: NAME.into(),
        description: DESCRIPTION.into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "member": {"type": "string", "enum": callees, "description": "The member to hand the task to."},
                "task": {"type": "string", "description": "The whole of what the member is told."}
            },
            "required": ["member", "task"],
            "additionalProperties": false
        }),
        kind: ToolKind::CallMember,
    }
}

fn data(call_id: &str, member: &str, status: &str, key: &str, value: &str) -> String {
    json!({"call_id": call_id, "member": member, "status": status, key: value}).to_string()
}

/// `passed`, `Called <member>: started`, with the started note.
pub fn started(call_id: &str, member: &str, task_id: &str) -> ToolResult {
    ToolResult::passed(
        format!("Called {member}: started"),
        data(call_id, member, "started", "task_id", task_id),
    )
    .with_note(format!("[call-member] {member} is now working on call {call_id}. Its answer is not in this result and no tool fetches it: the runtime adds it to this conversation after you end your turn. Unless you still have work to hand to a different member, end your turn now by replying without calling a tool. Calling {member} again before its answer arrives is refused."))
}

/// `passed`, `Called <member>: busy`, with the busy note; `deadline_secs` is the call's
/// deadline in seconds.
pub fn busy(call_id: &str, member: &str, deadline_secs: u64) -> ToolResult {
    ToolResult::passed(
        format!("Called {member}: busy"),
        data(call_id, member, "busy", "output", &busy_output(member)),
    )
    .with_note(format!("[call-member] {member} is busy with other work and has not taken call {call_id} yet. The runtime keeps offering it the task for up to {deadline_secs}s and adds {member}'s answer, or word that it stayed busy, to this conversation after you end your turn. Unless you still have work to hand to a different member, end your turn now by replying without calling a tool. Calling {member} again before then is refused."))
}

/// `failed`, `Called <member>: <status>` (`rejected` or `failed`), with `output` and the
/// ended note; `caller` is the member that sent the calling task, if one did.
pub fn ended(
    call_id: &str,
    member: &str,
    status: &str,
    output: &str,
    caller: Option<&str>,
) -> ToolResult {
    let mut note = format!("[call-member] Call {call_id} to {member} ended {status}, with no answer from {member}. Do not present an answer of your own as {member}'s.");
    if let Some(c) = caller {
        note.push_str(&format!(" If you have no answer to give without {member}, call end-without-answer with the reason: the runtime then tells {c} plainly that you gave none."));
    }
    ToolResult::failed(
        format!("Called {member}: {status}"),
        data(call_id, member, status, "output", output),
    )
    .with_note(note)
}

/// The `output` of a busy refusal.
pub fn busy_output(member: &str) -> String {
    format!("{member} is busy with other work and did not take the task")
}

/// The status message a busy door answers with.
pub const BUSY_MESSAGE: &str = "task rejected: capsule is busy";

/// The `output` for a door's `TASK_STATE_REJECTED` answer with status message `message`
/// (spec: "A door's TASK_STATE_REJECTED answer reads as one sentence"). Only exactly
/// [`BUSY_MESSAGE`] reads as busy; any other message, the busy words with spaces around
/// them included, is a refusal for another reason.
pub fn rejected_output(member: &str, message: Option<&str>) -> String {
    if message == Some(BUSY_MESSAGE) {
        return busy_output(member);
    }
    match message.map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => {
            let m = m.strip_prefix("task rejected: ").unwrap_or(m);
            format!("{member} did not take the task: {m}")
        }
        None => format!("{member} did not take the task"),
    }
}

/// Refusal: a member the roster does not let this capsule call; names those it may.
pub fn not_callable(member: &str, callees: &[String]) -> String {
    format!(
        "'call-member' cannot call `{member}`: this member may call only {}; nothing was sent",
        callees.join(", ")
    )
}

/// Refusal: a call made while no task is running.
pub const NO_TASK: &str =
    "'call-member' is answered only while a task runs; this session is running none";

/// Refusal: a call made after end-without-answer was accepted in this task.
pub const ENDING: &str =
    "'call-member' makes no call from a task that is ending without an answer.";

/// Refusal: the member holds a call from this task whose answer has not arrived.
pub fn not_yet_answered(member: &str, call_id: &str) -> String {
    format!("{member} has not yet answered call {call_id} from this task, so nothing was sent. Its answer reaches you only after you end your turn: end your turn now by replying without calling a tool. Once that answer has arrived you may call {member} again with new work.")
}

/// Refusal: the member's answer to an earlier call arrived and waits for the turn's end.
pub fn answered_waiting(member: &str, call_id: &str) -> String {
    format!("{member} has already answered call {call_id}, so nothing was sent. The answer reaches you as soon as you end your turn: end your turn now by replying without calling a tool.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn started_renders_as_the_spec_shows() {
        let r = started("mcl_01a1…", "worker", "tsk_…");
        assert_eq!(r.render(NAME), "<untrusted-content source=tool:call-member>\n{\"call_id\":\"mcl_01a1…\",\"member\":\"worker\",\"status\":\"started\",\"task_id\":\"tsk_…\"}\n</untrusted-content>\n[call-member] worker is now working on call mcl_01a1…. Its answer is not in this result and no tool fetches it: the runtime adds it to this conversation after you end your turn. Unless you still have work to hand to a different member, end your turn now by replying without calling a tool. Calling worker again before its answer arrives is refused.");
        assert_eq!(r.summary, "Called worker: started");
    }

    #[test]
    fn rejected_sentences() {
        assert_eq!(
            rejected_output("critic", Some("task rejected: capsule is busy")),
            "critic is busy with other work and did not take the task"
        );
        assert_eq!(
            rejected_output("critic", Some("task rejected: session closing")),
            "critic did not take the task: session closing"
        );
        assert_eq!(
            rejected_output("critic", Some("no room")),
            "critic did not take the task: no room"
        );
        assert_eq!(
            rejected_output("critic", None),
            "critic did not take the task"
        );
        assert_eq!(
            rejected_output("critic", Some(" task rejected: capsule is busy\n")),
            "critic did not take the task: capsule is busy"
        );
    }

    #[test]
    fn ended_note_names_end_without_answer_only_for_a_member_sent_task() {
        let r = ended(
            "mcl_1",
            "critic",
            "rejected",
            "critic did not take the task",
            None,
        );
        assert_eq!(r.notes, ["[call-member] Call mcl_1 to critic ended rejected, with no answer from critic. Do not present an answer of your own as critic's."]);
        let r = ended("mcl_1", "critic", "failed", "x", Some("lead"));
        assert_eq!(r.notes, ["[call-member] Call mcl_1 to critic ended failed, with no answer from critic. Do not present an answer of your own as critic's. If you have no answer to give without critic, call end-without-answer with the reason: the runtime then tells lead plainly that you gave none."]);
        assert_eq!(r.summary, "Called critic: failed");
    }
}
