//! A tool call's result and how the model is shown it.

use serde_json::Value;

/// `passed` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The tool ran and reported success (a shell command's exit code does not decide
    /// this: a command that ran is `passed` unless it could not be run).
    Passed,
    /// A tool error: refused input, a tool that could not run, a failure.
    Failed,
}

impl Status {
    /// `passed` / `failed`, as in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
        }
    }
}

/// What a tool call returns: status, summary, the data the model sees fenced, and the
/// runtime's notes shown after the fence.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// `passed` or `failed`.
    pub status: Status,
    /// One line for records and the progress line.
    pub summary: String,
    /// The data, shown to the model inside the untrusted fence.
    pub data: String,
    /// The runtime's own lines, after the fence, in order.
    pub notes: Vec<String>,
    /// `true` when the call was refused or could not be run: such a result carries no
    /// deadline notice (spec, "The deadline notice").
    pub refused: bool,
    /// Extra fields for the `tool_call` record.
    pub record: serde_json::Map<String, Value>,
}

impl ToolResult {
    /// A passed result with `data` and no note.
    pub fn passed(summary: impl Into<String>, data: impl Into<String>) -> Self {
        ToolResult {
            status: Status::Passed,
            summary: summary.into(),
            data: data.into(),
            notes: Vec::new(),
            refused: false,
            record: serde_json::Map::new(),
        }
    }

    /// A tool that ran and reported failure (still carries a deadline notice).
    pub fn failed(summary: impl Into<String>, data: impl Into<String>) -> Self {
        ToolResult {
            status: Status::Failed,
            ..Self::passed(summary, data)
        }
    }

    /// A refused call (a tool error): the message is both summary and data.
    pub fn refused(message: impl Into<String>) -> Self {
        let m = message.into();
        ToolResult {
            status: Status::Failed,
            refused: true,
            ..Self::passed(m.clone(), m)
        }
    }

    /// Adds a note after the fence.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// The full text the model is given for a call of tool `name`:
    ///
    /// ```text
    /// <untrusted-content source=tool:NAME>
    /// DATA
    /// </untrusted-content>
    /// NOTE
    /// ```
    pub fn render(&self, name: &str) -> String {
        fence(&format!("tool:{name}"), &self.data, &self.notes)
    }
}

/// Fences `data` under `source` (e.g. `tool:ls`, `member:worker`) and appends `notes`,
/// one per line, after the closing marker.
pub fn fence(source: &str, data: &str, notes: &[String]) -> String {
    let mut s = String::with_capacity(data.len() + 64);
    s.push_str("<untrusted-content source=");
    s.push_str(source);
    s.push_str(">\n");
    s.push_str(data);
    if !data.ends_with('\n') {
        s.push('\n');
    }
    s.push_str("</untrusted-content>");
    for n in notes {
        s.push('\n');
        s.push_str(n);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_puts_notes_after_the_closing_marker() {
        let r = ToolResult::passed("ok", "{\"a\":1}").with_note("note one");
        assert_eq!(
            r.render("x"),
            "<untrusted-content source=tool:x>\n{\"a\":1}\n</untrusted-content>\nnote one"
        );
    }
}
