//! The `anthropic` driver: Messages with tool use.
//!
//! `POST {base_url}/v1/messages`, headers `x-api-key` and `anthropic-version:
//! 2023-06-01`. The system prompt is a top-level field; tool calls are `tool_use`
//! blocks and their results `tool_result` blocks in a user message (consecutive results
//! and a following user text share one user message, since roles must alternate); a
//! result the runtime counts as failed carries `is_error: true`.
//!
//! By default the answer is streamed (`stream: true`): the text and `tool_use` blocks
//! are assembled from `content_block_*` events, the token counts from `message_start`
//! and `message_delta`; an `error` event (`overloaded_error`, `api_error`) is retried
//! like a 529, and a stream that ends before `message_stop` is retried as broken off.
//! Only `message_*` and `content_block_*` events count as progress for the stream's
//! `request_timeout_secs`; `ping` events and comments do not.
//! The choice's `stream: false` asks for one JSON body; a JSON body is read as such
//! whichever was asked.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::http::{Answer, Endpoint, Events};
use super::retry::{self, Backoff, Failure, Outcome};
use super::{
    call_id_or_made_up, estimate_usage, Arguments, AttemptSink, Driver, DriverError, Message,
    Request, Response, ToolCall, Usage,
};
use crate::manifest::types::DriverChoice;

/// The base URL used when a choice sets none.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header sent with every call.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` when neither the request nor the choice sets an output cap (the API
/// requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// A driver choice served over Anthropic Messages.
#[derive(Debug)]
pub struct AnthropicDriver {
    http: Endpoint,
    made_up_ids: u64,
}

impl AnthropicDriver {
    /// A driver for `choice`; a credential file is taken relative to `capsule_dir`.
    ///
    /// The endpoint is `{base_url}/v1/messages` (base URL default
    /// [`DEFAULT_BASE_URL`], trailing `/` dropped); timeouts and retries as for
    /// [`super::openai::OpenAiDriver::new`]. The credential is read at each call.
    ///
    /// # Errors
    ///
    /// [`DriverError::Fatal`] when the choice has no `model`.
    pub fn new(choice: &DriverChoice, capsule_dir: &Path) -> Result<Self, DriverError> {
        Ok(AnthropicDriver {
            http: Endpoint::new(choice, capsule_dir, DEFAULT_BASE_URL, "/v1/messages")?,
            made_up_ids: 0,
        })
    }

    /// The same driver with other waits between retries (short ones in tests).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.http.policy.backoff = backoff;
        self
    }

    /// The endpoint called: `{base_url}/v1/messages`.
    pub fn url(&self) -> &str {
        &self.http.url
    }

    /// The JSON body of a request (the key goes in the `x-api-key` header).
    pub fn request_body(&self, req: &Request<'_>) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.http.model));
        let max = req
            .max_output_tokens
            .or(self.http.max_output_tokens)
            .unwrap_or(DEFAULT_MAX_TOKENS);
        body.insert("max_tokens".into(), json!(max));
        if !req.system.is_empty() {
            body.insert("system".into(), json!(req.system));
        }
        body.insert("messages".into(), Value::Array(messages(req.messages)));
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "input_schema": t.input_schema,
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(t) = self.http.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if self.http.stream {
            body.insert("stream".into(), json!(true));
        }
        Value::Object(body)
    }
}

impl Driver for AnthropicDriver {
    fn complete(
        &mut self,
        req: &Request<'_>,
        attempts: AttemptSink<'_>,
    ) -> Result<Response, DriverError> {
        let key = self.http.secret.read()?;
        let mut headers = vec![("anthropic-version", API_VERSION)];
        if let Some(k) = &key {
            headers.push(("x-api-key", k.as_str()));
        }
        let body = self.request_body(req);
        let sent_cap = body.get("max_tokens").and_then(Value::as_u64);
        let made_up = &mut self.made_up_ids;
        self.http
            .call(&headers, &body, attempts, |answer| match answer {
                Answer::Json { value, raw } => parse_response(value, raw, req, made_up),
                Answer::Stream(events) => read_stream(events, req, made_up),
            })
            .map(|r| Response {
                output_cap: sent_cap,
                ..r
            })
    }

    fn kind(&self) -> &'static str {
        "anthropic"
    }
}

/// The conversation as Messages turns; blocks of the same role are merged into one
/// message, since the API wants user and assistant to alternate.
fn messages(conversation: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in conversation {
        let (role, blocks) = match m {
            Message::User(text) => ("user", vec![json!({"type": "text", "text": text})]),
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if let Some(t) = text.as_deref().filter(|t| !t.is_empty()) {
                    blocks.push(json!({"type": "text", "text": t}));
                }
                for c in tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": tool_input(&c.arguments),
                    }));
                }
                if blocks.is_empty() {
                    // The API rejects empty content and empty text blocks.
                    blocks.push(json!({"type": "text", "text": "(no answer)"}));
                }
                ("assistant", blocks)
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } => {
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if *is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        match turns.last_mut() {
            Some((last, b)) if *last == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// A `tool_use` input must be an object: other JSON is wrapped as `{"value": …}`, text
/// that was not JSON as `{"invalid_arguments": "…"}`.
fn tool_input(args: &Arguments) -> Value {
    match args {
        Arguments::Json(v @ Value::Object(_)) => v.clone(),
        Arguments::Json(v) => json!({ "value": v }),
        Arguments::Invalid(raw) => json!({ "invalid_arguments": raw }),
    }
}

/// Reads one Messages answer; an `error` body (even with status 200) is a failure,
/// transient when it is `overloaded_error`.
fn parse_response(
    v: &Value,
    raw: &str,
    req: &Request<'_>,
    made_up: &mut u64,
) -> Result<Response, Failure> {
    if v.get("type").and_then(Value::as_str) == Some("error") || v.get("error").is_some() {
        let detail = format!(
            "error in a 200 answer: {}",
            retry::quote_provider_message(raw)
        );
        return Err(if retry::is_overloaded(raw) {
            Failure::transient(Outcome::Overloaded, Some(200), detail)
        } else {
            Failure::invalid(detail)
        });
    }
    let Some(content) = v.get("content").and_then(Value::as_array) else {
        return Err(Failure::invalid(format!(
            "response has no content: {}",
            retry::quote_provider_message(raw)
        )));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(tool_use(block, made_up)),
            _ => {} // thinking, redacted_thinking, server tools: not for the runtime
        }
    }
    let text = (!text.is_empty()).then_some(text);
    let usage = reported_usage(v.get("usage"))
        .unwrap_or_else(|| estimate_usage(req, text.as_deref(), &tool_calls));
    Ok(Response {
        text,
        tool_calls,
        usage,
        finish_reason: v
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        output_cap: None,
    })
}

/// Reads a Messages stream to `message_stop` and assembles the answer.
fn read_stream(
    events: &mut Events,
    req: &Request<'_>,
    made_up: &mut u64,
) -> Result<Response, Failure> {
    let mut st = StreamState::default();
    while let Some(ev) = events.next()? {
        if st.event(&ev.event, &ev.data)? {
            break;
        }
        if std::mem::take(&mut st.progressed) {
            events.progress();
        }
    }
    st.finish(req, made_up)
}

/// One content block being assembled.
#[derive(Debug)]
enum Block {
    Text(String),
    /// A `tool_use` block: the start event's block and the `partial_json` so far.
    Tool(Value, String),
    Other,
}

/// What a Messages stream said so far.
#[derive(Debug, Default)]
struct StreamState {
    blocks: Vec<(u64, Block)>,
    usage: Map<String, Value>,
    stop_reason: Option<String>,
    model: Option<String>,
    done: bool,
    /// The last event brought progress: a `message_*` or `content_block_*` event
    /// (`ping` and events added later do not).
    progressed: bool,
}

impl StreamState {
    /// Takes one event; `true` at `message_stop`.
    fn event(&mut self, event: &str, data: &str) -> Result<bool, Failure> {
        let v: Value = serde_json::from_str(data.trim()).map_err(|e| {
            Failure::transient(
                Outcome::InvalidResponse,
                Some(200),
                format!(
                    "a stream event is not JSON ({e}): {}",
                    retry::summarise_body(data)
                ),
            )
        })?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        self.progressed = kind.starts_with("message_") || kind.starts_with("content_block_");
        match kind {
            "error" => return Err(retry::stream_error(&v)),
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                if let Some(model) = m.get("model").and_then(Value::as_str) {
                    self.model = Some(model.to_string());
                }
                self.merge_usage(m.get("usage"));
            }
            "content_block_start" => {
                let b = v.get("content_block").unwrap_or(&Value::Null);
                let block = match b.get("type").and_then(Value::as_str) {
                    Some("text") => Block::Text(
                        b.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    ),
                    Some("tool_use") => Block::Tool(b.clone(), String::new()),
                    _ => Block::Other,
                };
                self.blocks.push((index, block));
            }
            "content_block_delta" => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                let piece = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
                match (self.block(index), d.get("type").and_then(Value::as_str)) {
                    (Some(Block::Text(t)), Some("text_delta")) => t.push_str(piece("text")),
                    (Some(Block::Tool(_, json)), Some("input_json_delta")) => {
                        json.push_str(piece("partial_json"))
                    }
                    _ => {} // thinking, signatures, citations: not for the runtime
                }
            }
            "message_delta" => {
                if let Some(r) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(r.to_string());
                }
                self.merge_usage(v.get("usage"));
            }
            "message_stop" => {
                self.done = true;
                return Ok(true);
            }
            _ => {} // ping, content_block_stop, events added later
        }
        Ok(false)
    }

    fn block(&mut self, index: u64) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }

    /// Counts in `message_delta` are cumulative: a later value replaces an earlier one.
    fn merge_usage(&mut self, usage: Option<&Value>) {
        if let Some(Value::Object(u)) = usage {
            for (k, v) in u {
                if !v.is_null() {
                    self.usage.insert(k.clone(), v.clone());
                }
            }
        }
    }

    /// The answer, or a transient failure when the stream broke off before its end.
    fn finish(self, req: &Request<'_>, made_up: &mut u64) -> Result<Response, Failure> {
        if !self.done {
            return Err(Failure::transient(
                Outcome::Io,
                Some(200),
                "the stream ended before the answer was complete (no message_stop)".to_string(),
            ));
        }
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for (_, b) in self.blocks {
            match b {
                Block::Text(t) => text.push_str(&t),
                Block::Tool(mut start, json) => {
                    if !json.trim().is_empty() {
                        start["input"] = match serde_json::from_str::<Value>(&json) {
                            Ok(v) => v,
                            Err(_) => Value::String(json),
                        };
                    }
                    tool_calls.push(tool_use(&start, made_up));
                }
                Block::Other => {}
            }
        }
        let text = (!text.is_empty()).then_some(text);
        let usage = reported_usage(Some(&Value::Object(self.usage)))
            .unwrap_or_else(|| estimate_usage(req, text.as_deref(), &tool_calls));
        Ok(Response {
            text,
            tool_calls,
            usage,
            finish_reason: self.stop_reason,
            model: self.model,
            output_cap: None,
        })
    }
}

/// One `tool_use` block; never fails (see the openai driver for the same leniency).
fn tool_use(block: &Value, made_up: &mut u64) -> ToolCall {
    let id = call_id_or_made_up(block.get("id"), made_up);
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let arguments = match block.get("input") {
        None | Some(Value::Null) => Arguments::Json(json!({})),
        Some(Value::String(s)) => match serde_json::from_str(s) {
            Ok(v) => Arguments::Json(v),
            Err(_) => Arguments::Invalid(s.clone()),
        },
        Some(v) => Arguments::Json(v.clone()),
    };
    ToolCall {
        id,
        name,
        arguments,
    }
}

/// `usage` as reported. `input` is the whole prompt: `input_tokens` plus the tokens read
/// from and written to the cache (which Anthropic counts apart).
fn reported_usage(usage: Option<&Value>) -> Option<Usage> {
    let u = usage?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    let (input, output) = (n("input_tokens"), n("output_tokens"));
    if input.is_none() && output.is_none() {
        return None;
    }
    let cached = n("cache_read_input_tokens");
    let cache_write = n("cache_creation_input_tokens");
    Some(Usage {
        input: input
            .unwrap_or(0)
            .saturating_add(cached.unwrap_or(0))
            .saturating_add(cache_write.unwrap_or(0)),
        output: output.unwrap_or(0),
        cached,
        cache_write,
        estimated: false,
    })
}
