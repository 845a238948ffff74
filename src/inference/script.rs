//! The `script` driver: the embedded default. It plays model turns from a YAML file in
//! order, so a capsule runs offline and deterministically.
//!
//! The file is a list; each item is one model turn:
//!
//! ```yaml
//! - tool_calls:
//!     - {name: ls, input: {args: ["-1"]}}
//!     - {name: session-status, input: {}}
//! - text: "There are 3 files."
//!   usage: {input: 120, output: 9}      # optional; estimated when absent
//! ```
//!
//! Keys of a turn: `text` (string), `tool_calls` (list of `{name, input, id}`; `id`
//! defaults to `call_<turn>_<index>`; `input_raw: TEXT` instead of `input` sends
//! arguments that are not JSON, to exercise the runtime's tool errors), `usage`
//! (`{input, output, cached, cache_write}` in tokens). A turn asked for after the last
//! item fails the task with [`DriverError::Script`].
//!
//! # Referring to an earlier result
//!
//! A string anywhere in a call's `input` may hold `${result.<call id>.<field>}`: it is
//! replaced, when the turn is played, by the value of the `<field>: <value>` line in
//! the result of the earlier tool call with that id (the lines inside the fence,
//! before the first blank line). This is how a script checks on and stops the command
//! it started, with the work id the shell call returned:
//!
//! ```yaml
//! - tool_calls:
//!     - {id: slow, name: sh, input: {args: ["-c", "sleep 30"]}}
//! - tool_calls:
//!     - {name: background-command, input: {operation: stop, work_id: "${result.slow.work_id}"}}
//! - text: stopped
//! ```
//!
//! A reference that cannot be resolved (no earlier result with that call id, or no
//! such line in it) fails the task with [`DriverError::Script`] naming it. Only
//! `${result.` starts a reference; any other `$` is left as it is.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::{
    estimate_request, estimate_tokens, Arguments, Attempt, AttemptSink, Driver, DriverError,
    Message, Request, Response, ToolCall, Usage,
};

/// One scripted model turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    /// The text the model says.
    #[serde(default)]
    pub text: Option<String>,
    /// The tool calls the model asks for, in order.
    #[serde(default)]
    pub tool_calls: Vec<ScriptCall>,
    /// Token usage to report for this turn; estimated when absent.
    #[serde(default)]
    pub usage: Option<ScriptUsage>,
}

/// One scripted tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// The tool name.
    pub name: String,
    /// The input object (any YAML value; usually a map).
    #[serde(default)]
    pub input: Option<Value>,
    /// Raw argument text sent instead of `input` (need not be JSON).
    #[serde(default)]
    pub input_raw: Option<String>,
    /// The call id; default `call_<turn>_<index>`.
    #[serde(default)]
    pub id: Option<String>,
}

/// Scripted usage, in tokens.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Cached input tokens.
    #[serde(default)]
    pub cached: Option<u64>,
    /// Cache-write tokens.
    #[serde(default)]
    pub cache_write: Option<u64>,
}

/// Plays a script's turns in order.
pub struct ScriptDriver {
    path: PathBuf,
    turns: Vec<ScriptTurn>,
    next: usize,
}

impl ScriptDriver {
    /// Loads `path` (the choice's `script`, resolved against the capsule directory).
    ///
    /// Errors: the file cannot be read, or is not a list of turns (the message gives
    /// the line and column).
    pub fn load(path: &Path) -> Result<ScriptDriver, DriverError> {
        let err = |detail: String| DriverError::Script {
            path: path.display().to_string(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let turns: Vec<ScriptTurn> =
            serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string()))?;
        Ok(ScriptDriver {
            path: path.to_path_buf(),
            turns,
            next: 0,
        })
    }
}

/// The value of the `field: value` line in the latest result of call `call_id` among
/// `messages` (inside the fence, before the first blank line).
///
/// Errors: no such result, or no such line, in a message naming the reference.
pub fn result_field(messages: &[Message], call_id: &str, field: &str) -> Result<String, String> {
    let Some(content) = messages.iter().rev().find_map(|m| match m {
        Message::Tool {
            call_id: id,
            content,
            ..
        } if id == call_id => Some(content),
        _ => None,
    }) else {
        return Err(format!(
            "`${{result.{call_id}.{field}}}`: no earlier tool result has call id `{call_id}`"
        ));
    };
    let prefix = format!("{field}: ");
    content
        .lines()
        .skip_while(|l| l.starts_with("<untrusted-content "))
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "`${{result.{call_id}.{field}}}`: the result of call `{call_id}` has no `{field}:` line"
            )
        })
}

/// Replaces every `${result.<call id>.<field>}` in the strings of `v`.
fn resolve(v: &Value, messages: &[Message]) -> Result<Value, String> {
    Ok(match v {
        Value::String(s) => Value::String(resolve_str(s, messages)?),
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| resolve(x, messages))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| Ok((k.clone(), resolve(x, messages)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

fn resolve_str(s: &str, messages: &[Message]) -> Result<String, String> {
    const OPEN: &str = "${result.";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let Some(end) = after.find('}') else {
            return Err(format!("`{}` has no closing `}}`", &rest[at..]));
        };
        let inner = &after[..end];
        let Some((call_id, field)) = inner.rsplit_once('.') else {
            return Err(format!(
                "`${{result.{inner}}}` must name a call id and a field: ${{result.<call id>.<field>}}"
            ));
        };
        out.push_str(&result_field(messages, call_id, field)?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Driver for ScriptDriver {
    fn complete(
        &mut self,
        req: &Request<'_>,
        attempts: AttemptSink<'_>,
    ) -> Result<Response, DriverError> {
        let Some(turn) = self.turns.get(self.next).cloned() else {
            return Err(DriverError::Script {
                path: self.path.display().to_string(),
                detail: format!(
                    "the script has {} turn(s) and turn {} was asked for; add a turn that answers with text and no tool call",
                    self.turns.len(),
                    self.next + 1
                ),
            });
        };
        self.next += 1;
        let mut tool_calls: Vec<ToolCall> = Vec::with_capacity(turn.tool_calls.len());
        for (i, c) in turn.tool_calls.iter().enumerate() {
            let arguments = match (&c.input_raw, &c.input) {
                (Some(raw), _) => match serde_json::from_str(raw) {
                    Ok(v) => Arguments::Json(v),
                    Err(_) => Arguments::Invalid(raw.clone()),
                },
                (None, Some(v)) => {
                    let v = resolve(v, req.messages).map_err(|detail| DriverError::Script {
                        path: self.path.display().to_string(),
                        detail: format!("turn {}, call {}: {detail}", self.next, i + 1),
                    })?;
                    Arguments::Json(v)
                }
                (None, None) => Arguments::Json(Value::Object(Default::default())),
            };
            tool_calls.push(ToolCall {
                id: c
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{}_{}", self.next, i + 1)),
                name: c.name.clone(),
                arguments,
            });
        }
        let usage = match turn.usage {
            Some(u) => Usage {
                input: u.input,
                output: u.output,
                cached: u.cached,
                cache_write: u.cache_write,
                estimated: false,
            },
            None => {
                let out = turn.text.as_deref().map_or(0, estimate_tokens)
                    + tool_calls
                        .iter()
                        .map(|c| {
                            estimate_tokens(&c.name)
                                + estimate_tokens(&c.arguments.to_record().to_string())
                        })
                        .sum::<u64>();
                Usage {
                    input: estimate_request(req),
                    output: out,
                    cached: None,
                    cache_write: None,
                    estimated: true,
                }
            }
        };
        attempts(Attempt {
            number: 1,
            outcome: "ok".into(),
            http_status: None,
            retry_in_ms: 0,
            will_retry: false,
            detail: None,
        });
        Ok(Response {
            text: turn.text,
            tool_calls,
            usage,
            finish_reason: None,
            model: Some("script".into()),
            // A script sends nothing; it counts the choice's cap as sent.
            output_cap: req.max_output_tokens,
        })
    }

    fn kind(&self) -> &'static str {
        "script"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(id: &str, content: &str) -> Message {
        Message::Tool {
            call_id: id.into(),
            name: "sh".into(),
            content: content.into(),
            is_error: false,
        }
    }

    #[test]
    fn references_take_a_line_of_an_earlier_result() {
        let msgs = [tool(
            "slow",
            "<untrusted-content source=tool:sh>\nwork_id: wrk_0a\nstate: running\n\nwork_id: fake\n</untrusted-content>",
        )];
        let v = serde_json::json!({"work_id": "${result.slow.work_id}", "x": ["a ${result.slow.state}!"]});
        assert_eq!(
            resolve(&v, &msgs).unwrap(),
            serde_json::json!({"work_id": "wrk_0a", "x": ["a running!"]})
        );
        assert_eq!(
            resolve_str("${result.nope.work_id}", &msgs).unwrap_err(),
            "`${result.nope.work_id}`: no earlier tool result has call id `nope`"
        );
        assert_eq!(
            resolve_str("${result.slow.exit_code}", &msgs).unwrap_err(),
            "`${result.slow.exit_code}`: the result of call `slow` has no `exit_code:` line"
        );
        assert_eq!(resolve_str("$HOME ${x}", &msgs).unwrap(), "$HOME ${x}");
    }
}
