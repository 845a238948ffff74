//! Inference: the conversation types and the drivers that serve a driver choice.
//!
//! A driver turns a [`Request`] (system prompt, conversation, tool specs) into one
//! [`Response`] (text and/or tool calls, with token usage). Transient failures are
//! retried by the driver itself (see [`retry`]); each attempt is reported through the
//! [`AttemptSink`] so it becomes a trace record.

pub mod anthropic;
mod http;
pub use http::register_credentials;
pub mod openai;
pub mod retry;
pub mod script;
mod sse;

use serde_json::Value;

/// One message of the conversation, in the runtime's own neutral form.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A user message: the task, or a continuation.
    User(String),
    /// What the model said: optional text and the tool calls it asked for, in order.
    Assistant {
        /// The text part, if any.
        text: Option<String>,
        /// The tool calls, in the order the model gave them.
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, as the model is shown it (fenced, notes after).
    Tool {
        /// The call id the model gave.
        call_id: String,
        /// The tool name.
        name: String,
        /// The full text the model is given.
        content: String,
        /// `true` when the runtime counts the call as failed (a tool error, a refused
        /// call, a tool that reported failure): sent as Anthropic's `is_error`.
        is_error: bool,
    },
}

/// A tool call as the model asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's call id (`call_…`, `toolu_…`), or one the runtime made up.
    pub id: String,
    /// The tool name the model used.
    pub name: String,
    /// The arguments: parsed JSON, or the raw text when the model sent text that is
    /// not JSON (the runtime answers that with a tool error).
    pub arguments: Arguments,
}

/// The arguments of a tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// Parsed JSON.
    Json(Value),
    /// Text that did not parse as JSON, kept as sent.
    Invalid(String),
}

impl Arguments {
    /// The arguments as JSON for a record: the value, or the raw text as a string.
    pub fn to_record(&self) -> Value {
        match self {
            Arguments::Json(v) => v.clone(),
            Arguments::Invalid(s) => Value::String(s.clone()),
        }
    }
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: Value,
}

/// One inference request.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The system prompt.
    pub system: &'a str,
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools offered.
    pub tools: &'a [ToolSpec],
    /// The output cap in tokens, if the choice sets one (a driver may send its own
    /// default without one: [`Response::output_cap`] is what it sent).
    pub max_output_tokens: Option<u64>,
}

/// Token usage of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (completion) tokens.
    pub output: u64,
    /// Input tokens served from the provider's cache, when reported.
    pub cached: Option<u64>,
    /// Input tokens written to the provider's cache, when reported.
    pub cache_write: Option<u64>,
    /// `true` when the provider reported nothing and these are the runtime's estimate.
    pub estimated: bool,
}

/// The model's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The text part, if any.
    pub text: Option<String>,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Token usage, reported or estimated.
    pub usage: Usage,
    /// The provider's stop/finish reason, when it gave one.
    pub finish_reason: Option<String>,
    /// The model name the provider reported, when it gave one.
    pub model: Option<String>,
    /// The output cap the request actually sent, in tokens (`None`: it sent none). The
    /// anthropic driver always sends one, its default when neither the request nor the
    /// choice sets one; session-status's `context.budget_tokens` subtracts this value.
    pub output_cap: Option<u64>,
}

/// What a driver reports about each attempt of a call (becomes an `inference_attempt`
/// record).
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// 1 for the first try.
    pub number: u32,
    /// `ok`, or the failure kind: `connect`, `timeout`, `http_status`, `overloaded`,
    /// `stream_error`, `io`, `invalid_response` (see [`retry::Outcome`]).
    pub outcome: String,
    /// The HTTP status, when there was one.
    pub http_status: Option<u16>,
    /// How long the runtime waits before the next attempt, in milliseconds (0 for none).
    pub retry_in_ms: u64,
    /// `true` when another attempt follows this one (after `retry_in_ms`).
    pub will_retry: bool,
    /// A one-line description of the failure.
    pub detail: Option<String>,
}

/// Receives one [`Attempt`] per try of a call.
pub type AttemptSink<'a> = &'a mut dyn FnMut(Attempt);

/// Why a driver call failed for good.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A transient failure that stayed after every retry.
    #[error("{url}: {detail} (gave up after {attempts} attempts)")]
    Exhausted {
        /// The URL called.
        url: String,
        /// The last failure.
        detail: String,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The provider asked to wait (`Retry-After`) longer than the choice's
    /// `max_retry_after_secs`: the call fails at once rather than retrying early or
    /// sleeping past what the session allows.
    #[error("{url}: {detail}; the provider asks to wait {asked} before retrying (Retry-After), longer than max_retry_after_secs ({cap}), so the call is not retried")]
    RetryAfterTooLong {
        /// The URL called.
        url: String,
        /// The failure that came with the wait.
        detail: String,
        /// The wait asked for (`3600 s`).
        asked: String,
        /// The longest wait allowed (`60 s`).
        cap: String,
    },
    /// A failure that retrying cannot fix (401, 400, a body that is not the protocol).
    #[error("{url}: {detail}")]
    Fatal {
        /// The URL called.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The credential could not produce a value.
    #[error("credential: {0}")]
    Credential(String),
    /// The script driver has no turn left, or its file is bad.
    #[error("script {path}: {detail}")]
    Script {
        /// The script file.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// The call was interrupted (deadline or shutdown).
    #[error("inference call interrupted: {0}")]
    Interrupted(String),
}

/// A model behind a driver choice.
pub trait Driver: Send {
    /// Makes one inference call, retrying transient failures, reporting each attempt.
    fn complete(
        &mut self,
        req: &Request<'_>,
        attempts: AttemptSink<'_>,
    ) -> Result<Response, DriverError>;
    /// The driver kind's name for records: `openai`, `anthropic`, `script`.
    fn kind(&self) -> &'static str;
}

/// The runtime's token estimate for a text: one token per 4 bytes, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The runtime's estimate of a request's input size in tokens.
pub fn estimate_request(req: &Request<'_>) -> u64 {
    let mut n = estimate_tokens(req.system);
    for m in req.messages {
        n += match m {
            Message::User(t) => estimate_tokens(t),
            Message::Assistant { text, tool_calls } => {
                text.as_deref().map_or(0, estimate_tokens)
                    + tool_calls
                        .iter()
                        .map(|c| {
                            estimate_tokens(&c.name)
                                + estimate_tokens(&c.arguments.to_record().to_string())
                        })
                        .sum::<u64>()
            }
            Message::Tool { content, .. } => estimate_tokens(content),
        } + 4;
    }
    for t in req.tools {
        n += estimate_tokens(&t.name)
            + estimate_tokens(&t.description)
            + estimate_tokens(&t.input_schema.to_string());
    }
    n
}

/// The runtime's estimate of a whole call, for a provider that reported no usage:
/// input from [`estimate_request`], output from the answer's text and tool calls;
/// marked `estimated`.
pub fn estimate_usage(req: &Request<'_>, text: Option<&str>, calls: &[ToolCall]) -> Usage {
    let output = text.map_or(0, estimate_tokens)
        + calls
            .iter()
            .map(|c| {
                estimate_tokens(&c.name) + estimate_tokens(&c.arguments.to_record().to_string())
            })
            .sum::<u64>();
    Usage {
        input: estimate_request(req),
        output,
        cached: None,
        cache_write: None,
        estimated: true,
    }
}

/// A tool call's `id` as the provider sent it, or one made up (`mur_call_<n>`, `made_up`
/// counting them) when it is missing or empty.
pub(crate) fn call_id_or_made_up(id: Option<&Value>, made_up: &mut u64) -> String {
    match id.and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => {
            *made_up += 1;
            format!("mur_call_{made_up}")
        }
    }
}
