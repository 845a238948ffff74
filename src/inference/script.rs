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

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::{
    estimate_request, estimate_tokens, Arguments, Attempt, AttemptSink, Driver, DriverError,
    Request, Response, ToolCall, Usage,
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
        let tool_calls: Vec<ToolCall> = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: c
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{}_{}", self.next, i + 1)),
                name: c.name.clone(),
                arguments: match (&c.input_raw, &c.input) {
                    (Some(raw), _) => match serde_json::from_str(raw) {
                        Ok(v) => Arguments::Json(v),
                        Err(_) => Arguments::Invalid(raw.clone()),
                    },
                    (None, Some(v)) => Arguments::Json(v.clone()),
                    (None, None) => Arguments::Json(Value::Object(Default::default())),
                },
            })
            .collect();
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
            detail: None,
        });
        Ok(Response {
            text: turn.text,
            tool_calls,
            usage,
            finish_reason: None,
            model: Some("script".into()),
        })
    }

    fn kind(&self) -> &'static str {
        "script"
    }
}
