//! session-status: reports the time the session has run and has left, its turns,
//! context, tokens and spend (spec, "session-status"). The object itself is measured by
//! the session ([`crate::session::status`]); this file is the tool's face.

use serde_json::{json, Value};

use super::{ToolEntry, ToolKind, ToolResult};

/// The inventory entry. Input: `{"type":"object","properties":{}}`.
pub fn entry() -> ToolEntry {
    ToolEntry {
        name: "session-status".into(),
        description: "Reports, at the moment of the call, the time this session has run and has left before its deadline, the turns used and the cap, the context size, the tokens used and the spend ceiling. Takes no input. Seconds are whole; a limit that is not set reads \"none\", a count the runtime does not have reads \"unknown\".".into(),
        input_schema: json!({"type":"object","properties":{}}),
        kind: ToolKind::SessionStatus,
    }
}

/// The result for a status object: passed, data the object as compact JSON.
pub fn result(status: &Value) -> ToolResult {
    ToolResult::passed("session status", status.to_string())
}

/// The session-status tool ([`super::registry`]).
pub struct SessionStatus;

impl super::Tool for SessionStatus {
    /// Takes no input (`{}` or null); writes one `session_status` record carrying the
    /// object returned.
    fn call(
        &self,
        cx: &mut dyn super::Session,
        _entry: &ToolEntry,
        input: &Value,
    ) -> super::Answer {
        match input {
            Value::Object(m) => {
                if let Some(k) = m.keys().next() {
                    return ToolResult::refused(format!(
                        "session-status takes no input; unknown key `{k}`"
                    ))
                    .into();
                }
            }
            Value::Null => {}
            other => {
                return ToolResult::refused(format!(
                    "session-status takes no input: send {{}}, not {}",
                    super::json_type(other)
                ))
                .into()
            }
        }
        let st = cx.measure_status();
        let r = result(&st);
        super::Answer::from(r).with_record("session_status", crate::fields! {"status" => st})
    }
}
