//! The `openai` driver: Chat Completions with function tools.
//!
//! One driver for OpenAI, llama.cpp's server, vLLM, Ollama and most gateways:
//! `POST {base_url}/chat/completions`. By default the answer is streamed (`stream:
//! true` with `stream_options.include_usage`, so the last chunk carries the token
//! counts); the choice's `stream: false` asks for one JSON body instead. Either way the
//! answer is read by its content type, so a server that ignores `stream` and sends JSON
//! is read as JSON.
//!
//! Parsing is lenient: unknown fields are ignored, `content` may be a string, null or an
//! array of text parts, and tool call arguments may be a JSON string (the standard) or
//! an object (some servers). In a stream, tool call fragments are joined by their
//! `index` (or, without one, by their `id`); an `error` chunk is retried like a 529
//! unless it says the request itself is wrong; a stream that ends with neither
//! `[DONE]` nor a `finish_reason` is retried as broken off. Only chunks that bring
//! text, tool call fragments, a finish reason or usage count as progress for the
//! stream's `request_timeout_secs`; comments and bare chunks do
//! not.

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
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A driver choice served over OpenAI Chat Completions.
#[derive(Debug)]
pub struct OpenAiDriver {
    http: Endpoint,
    /// Ids made up for tool calls that came without one (`call_<n>`).
    made_up_ids: u64,
}

impl OpenAiDriver {
    /// A driver for `choice`; a credential file is taken relative to `capsule_dir`.
    ///
    /// The endpoint is `{base_url}/chat/completions` (base URL default
    /// [`DEFAULT_BASE_URL`], trailing `/` dropped); the whole-request timeout is
    /// `request_timeout_secs` (0: none), connect timeout 10 s; transient failures are
    /// retried `max_retries` times with the default [`Backoff`]. The credential is read
    /// at each call, not here.
    ///
    /// # Errors
    ///
    /// [`DriverError::Fatal`] when the choice has no `model`.
    pub fn new(choice: &DriverChoice, capsule_dir: &Path) -> Result<Self, DriverError> {
        Ok(OpenAiDriver {
            http: Endpoint::new(choice, capsule_dir, DEFAULT_BASE_URL, "/chat/completions")?,
            made_up_ids: 0,
        })
    }

    /// The same driver with other waits between retries (short ones in tests).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.http.policy.backoff = backoff;
        self
    }

    /// The endpoint called: `{base_url}/chat/completions`.
    pub fn url(&self) -> &str {
        &self.http.url
    }

    /// The JSON body of a request (without `Authorization`, which is a header).
    pub fn request_body(&self, req: &Request<'_>) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(self.http.model));
        body.insert("messages".into(), Value::Array(messages(req)));
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    }})
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(n) = req.max_output_tokens.or(self.http.max_output_tokens) {
            body.insert("max_tokens".into(), json!(n));
        }
        if let Some(t) = self.http.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if self.http.stream {
            body.insert("stream".into(), json!(true));
            body.insert("stream_options".into(), json!({"include_usage": true}));
        } else {
            body.insert("stream".into(), json!(false));
        }
        Value::Object(body)
    }
}

impl Driver for OpenAiDriver {
    fn complete(
        &mut self,
        req: &Request<'_>,
        attempts: AttemptSink<'_>,
    ) -> Result<Response, DriverError> {
        let key = self.http.secret.read()?;
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut headers = Vec::new();
        if let Some(a) = &auth {
            headers.push(("authorization", a.as_str()));
        }
        let body = self.request_body(req);
        let sent_cap = body.get("max_tokens").and_then(Value::as_u64);
        let made_up = &mut self.made_up_ids;
        self.http
            .call(&headers, &body, attempts, |answer| match answer {
                Answer::Json { value, .. } => parse_response(value, req, made_up),
                Answer::Stream(events) => read_stream(events, req, made_up),
            })
            .map(|r| Response {
                output_cap: sent_cap,
                ..r
            })
    }

    fn kind(&self) -> &'static str {
        "openai"
    }
}

/// The conversation as Chat Completions messages, system first.
fn messages(req: &Request<'_>) -> Vec<Value> {
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        out.push(json!({"role": "system", "content": req.system}));
    }
    for m in req.messages {
        out.push(match m {
            Message::User(text) => json!({"role": "user", "content": text}),
            Message::Assistant { text, tool_calls } => {
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                let content = match text {
                    Some(t) => json!(t),
                    None if !tool_calls.is_empty() => Value::Null,
                    None => json!(""),
                };
                msg.insert("content".into(), content);
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function", "function": {
                                "name": c.name,
                                "arguments": arguments_string(&c.arguments),
                            }})
                        })
                        .collect();
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(msg)
            }
            Message::Tool {
                call_id, content, ..
            } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
        });
    }
    out
}

/// Arguments as the JSON string the protocol wants. Text that was not JSON is sent as
/// a JSON string holding it, so a server that parses the arguments of earlier calls
/// (some chat templates do) still gets JSON and does not reject the conversation.
fn arguments_string(args: &Arguments) -> String {
    match args {
        Arguments::Json(v) => v.to_string(),
        Arguments::Invalid(raw) => Value::String(raw.clone()).to_string(),
    }
}

/// Reads one Chat Completions answer. `made_up` counts ids invented for tool calls
/// that came without one.
fn parse_response(v: &Value, req: &Request<'_>, made_up: &mut u64) -> Result<Response, Failure> {
    let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
        if v.get("error").is_some() {
            // Some gateways send an error object with status 200.
            return Err(Failure::invalid(format!(
                "error in a 200 answer: {}",
                retry::quote_provider_message(&v.to_string())
            )));
        }
        return Err(Failure::invalid(format!(
            "response has no choices: {}",
            retry::quote_provider_message(&v.to_string())
        )));
    };
    let message = choice.get("message").unwrap_or(&Value::Null);
    let text = content_text(message.get("content").unwrap_or(&Value::Null));
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for call in calls {
            tool_calls.push(tool_call(call, made_up));
        }
    }
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    let model = v.get("model").and_then(Value::as_str).map(str::to_string);
    let usage = reported_usage(v.get("usage"))
        .unwrap_or_else(|| estimate_usage(req, text.as_deref(), &tool_calls));
    Ok(Response {
        text,
        tool_calls,
        usage,
        finish_reason,
        model,
        output_cap: None,
    })
}

/// The text of a `content`: a string, or the `text` of each part of an array; `None`
/// when null or empty.
fn content_text(content: &Value) -> Option<String> {
    let text = match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                _ => p.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    (!text.is_empty()).then_some(text)
}

/// One entry of `tool_calls`. Never fails: a missing id is made up, a missing name is
/// empty (the runtime answers it as an unknown tool), arguments that are not JSON are
/// kept as [`Arguments::Invalid`].
fn tool_call(call: &Value, made_up: &mut u64) -> ToolCall {
    let id = call_id_or_made_up(call.get("id"), made_up);
    let function = call.get("function").unwrap_or(&Value::Null);
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => Arguments::Json(json!({})),
        Some(Value::String(s)) if s.trim().is_empty() => Arguments::Json(json!({})),
        Some(Value::String(s)) => match serde_json::from_str(s) {
            Ok(v) => Arguments::Json(v),
            Err(_) => Arguments::Invalid(s.clone()),
        },
        Some(other) => Arguments::Json(other.clone()),
    };
    ToolCall {
        id,
        name,
        arguments,
    }
}

/// Reads a Chat Completions stream to its end (`[DONE]`) and assembles the answer.
fn read_stream(
    events: &mut Events,
    req: &Request<'_>,
    made_up: &mut u64,
) -> Result<Response, Failure> {
    let mut st = StreamState::default();
    while let Some(ev) = events.next()? {
        if st.chunk(&ev.event, &ev.data)? {
            break;
        }
        if std::mem::take(&mut st.progressed) {
            events.progress();
        }
    }
    st.finish(req, made_up)
}

/// What a Chat Completions stream said so far.
#[derive(Debug, Default)]
struct StreamState {
    text: String,
    calls: Vec<PartialCall>,
    finish_reason: Option<String>,
    model: Option<String>,
    usage: Option<Usage>,
    done: bool,
    /// The last chunk brought progress: text, a tool call fragment, a finish reason or
    /// usage (a chunk with none of these, such as a bare role, is a keep-alive).
    progressed: bool,
}

/// One tool call being assembled from its fragments.
#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
    object: Option<Value>,
}

impl StreamState {
    /// Takes one event; `true` when the stream said it is done (`[DONE]`).
    fn chunk(&mut self, event: &str, data: &str) -> Result<bool, Failure> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            Failure::transient(
                Outcome::InvalidResponse,
                Some(200),
                format!(
                    "a stream event is not JSON ({e}): {}",
                    retry::summarise_body(data)
                ),
            )
        })?;
        if v.get("error").is_some() || event == "error" {
            return Err(retry::stream_error(&v));
        }
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            self.model = Some(m.to_string());
        }
        if let Some(u) = reported_usage(v.get("usage")) {
            self.usage = Some(u);
            self.progressed = true;
        }
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            return Ok(false);
        };
        let delta = choice
            .get("delta")
            .or_else(|| choice.get("message"))
            .unwrap_or(&Value::Null);
        if let Some(t) = content_text(delta.get("content").unwrap_or(&Value::Null)) {
            self.text.push_str(&t);
            self.progressed = true;
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                self.call_fragment(c);
                self.progressed = true;
            }
        }
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(r.to_string());
            self.progressed = true;
        }
        Ok(false)
    }

    /// Adds one `tool_calls` fragment to the call it belongs to: the one with the same
    /// `index`; without an index, a new call when it brings a new `id`, else the last.
    fn call_fragment(&mut self, c: &Value) {
        let index = c.get("index").and_then(Value::as_u64);
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let pos = match index {
            Some(i) => self.calls.iter().position(|p| p.index == Some(i)),
            None => match (id, self.calls.last()) {
                (Some(id), Some(last)) if last.id.as_deref() != Some(id) => None,
                (_, Some(_)) => Some(self.calls.len() - 1),
                (_, None) => None,
            },
        };
        let pos = pos.unwrap_or_else(|| {
            self.calls.push(PartialCall {
                index,
                ..PartialCall::default()
            });
            self.calls.len() - 1
        });
        let p = &mut self.calls[pos];
        if p.id.is_none() {
            p.id = id.map(str::to_string);
        }
        let f = c.get("function").unwrap_or(&Value::Null);
        if let Some(n) = f.get("name").and_then(Value::as_str) {
            // The name comes whole in the first fragment; some servers repeat it.
            if p.name.is_empty() {
                p.name = n.to_string();
            } else if n != p.name {
                p.name.push_str(n);
            }
        }
        match f.get("arguments") {
            Some(Value::String(a)) => p.arguments.push_str(a),
            Some(o @ Value::Object(_)) => p.object = Some(o.clone()),
            _ => {}
        }
    }

    /// The answer, or a transient failure when the stream broke off before its end.
    fn finish(self, req: &Request<'_>, made_up: &mut u64) -> Result<Response, Failure> {
        if !self.done && self.finish_reason.is_none() {
            return Err(Failure::transient(
                Outcome::Io,
                Some(200),
                "the stream ended before the answer was complete (no [DONE], no finish_reason)"
                    .to_string(),
            ));
        }
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .map(|p| {
                let arguments = p.object.unwrap_or(Value::String(p.arguments));
                tool_call(
                    &json!({"id": p.id, "function": {"name": p.name, "arguments": arguments}}),
                    made_up,
                )
            })
            .collect();
        let text = (!self.text.is_empty()).then_some(self.text);
        let usage = self
            .usage
            .unwrap_or_else(|| estimate_usage(req, text.as_deref(), &tool_calls));
        Ok(Response {
            text,
            tool_calls,
            usage,
            finish_reason: self.finish_reason,
            model: self.model,
            output_cap: None,
        })
    }
}

/// `usage` as reported, when it has at least `prompt_tokens` or `completion_tokens`.
fn reported_usage(usage: Option<&Value>) -> Option<Usage> {
    let u = usage?;
    let n = |v: Option<&Value>| v.and_then(Value::as_u64);
    let input = n(u.get("prompt_tokens"));
    let output = n(u.get("completion_tokens"));
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Usage {
        input: input.unwrap_or(0),
        output: output.unwrap_or(0),
        cached: n(u
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))),
        cache_write: None,
        estimated: false,
    })
}
