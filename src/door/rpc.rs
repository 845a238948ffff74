//! The door's A2A 1.0 JSON-RPC app: routing, the bearer check, envelopes, params and
//! errors, in the order a2a-sdk 1.3 checks them (parse, envelope, method, params,
//! version).

use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::server::{Head, Response, Service};
use super::{CancelError, DoorLimits, TaskHandler};
use crate::a2a::jsonrpc::{self, RpcError};
use crate::a2a::types::{AgentInterface, Message, Task};
use crate::a2a::PROTOCOL_VERSION;

/// The path of the agent card.
pub(crate) const CARD_PATH: &str = "/.well-known/agent-card.json";

/// How long one `wait_terminal` slice of a blocking `SendMessage` lasts.
const WAIT_SLICE: Duration = Duration::from_millis(250);

/// A2A 1.0 methods a door knows but does not serve: answered -32004.
const UNSUPPORTED_METHODS: &[&str] = &[
    "SendStreamingMessage",
    "SubscribeToTask",
    "ListTasks",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
];

pub(crate) struct App {
    token: String,
    handler: Arc<dyn TaskHandler>,
    url: String,
    send_wait: Duration,
    max_blocking: usize,
    blocking: AtomicUsize,
    cache_control: String,
}

impl App {
    pub(crate) fn new(
        token: String,
        handler: Arc<dyn TaskHandler>,
        limits: &DoorLimits,
        local: SocketAddr,
    ) -> App {
        App {
            token,
            handler,
            url: format!("http://{local}/"),
            send_wait: limits.send_wait,
            max_blocking: limits.max_blocking_sends.max(1),
            blocking: AtomicUsize::new(0),
            cache_control: limits.card_cache_control.clone(),
        }
    }

    fn card(&self, head: &Head) -> Response {
        let mut card = self.handler.card();
        card.supported_interfaces = vec![AgentInterface {
            url: self.url.clone(),
            protocol_binding: "JSONRPC".into(),
            protocol_version: PROTOCOL_VERSION.into(),
        }];
        card.capabilities.streaming = false;
        card.capabilities.push_notifications = false;
        card.security_schemes =
            Some(json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}));
        card.security_requirements = Some(json!([{"schemes": {"bearer": {"list": []}}}]));
        let body = serde_json::to_vec(&card).unwrap_or_default();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        body.hash(&mut h);
        let etag = format!("W/\"{:016x}{:08x}\"", h.finish(), body.len());
        let cache = ("Cache-Control", self.cache_control.clone());
        if head
            .header("if-none-match")
            .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
        {
            let mut r = Response::empty(304);
            r.headers.push(("ETag", etag));
            r.headers.push(cache);
            return r;
        }
        Response {
            status: 200,
            headers: vec![
                ("Content-Type", "application/json".into()),
                ("ETag", etag),
                cache,
            ],
            body,
            close: false,
        }
    }

    fn authorized(&self, head: &Head) -> bool {
        let Some(v) = head.header("authorization") else {
            return false;
        };
        let Some((scheme, token)) = v.split_once(' ') else {
            return false;
        };
        scheme.eq_ignore_ascii_case("bearer")
            && !self.token.is_empty()
            && constant_time_eq(token.trim().as_bytes(), self.token.as_bytes())
    }

    fn dispatch(&self, head: &Head, body: &[u8], stop: &AtomicBool) -> Value {
        let req: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return jsonrpc::failure(
                    &Value::Null,
                    &RpcError::plain(jsonrpc::PARSE_ERROR, parse_error_message(body, &e)),
                )
            }
        };
        let obj = match req {
            Value::Object(o) => o,
            Value::Array(_) => {
                return invalid_request(&Value::Null, "Batch requests are not supported")
            }
            _ => {
                return invalid_request(
                    &Value::Null,
                    "Invalid request: not a JSON-RPC request object",
                )
            }
        };
        let id = match obj.get("id") {
            None | Some(Value::Null) => Value::Null,
            Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
            Some(_) => {
                return invalid_request(
                    &Value::Null,
                    "Invalid request: id must be a string, integer, or null",
                )
            }
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return invalid_request(&id, "Invalid request: 'jsonrpc' must be exactly '2.0'");
        }
        let method = match obj.get("method") {
            Some(Value::String(m)) if !m.is_empty() => m.as_str(),
            _ => return invalid_request(&id, "Method is required"),
        };
        let known = matches!(
            method,
            jsonrpc::SEND_MESSAGE | jsonrpc::GET_TASK | jsonrpc::CANCEL_TASK
        );
        if !known && !UNSUPPORTED_METHODS.contains(&method) {
            return jsonrpc::failure(
                &id,
                &RpcError::plain(jsonrpc::METHOD_NOT_FOUND, "Method not found"),
            );
        }
        let params = match obj.get("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => {
                return jsonrpc::failure(&id, &RpcError::invalid_params("params must be an object"))
            }
        };
        let result = match method {
            jsonrpc::SEND_MESSAGE => SendParams::parse(&params)
                .and_then(|p| check_version(head).map(|()| p))
                .and_then(|p| self.send_message(p, stop)),
            jsonrpc::GET_TASK => TaskParams::parse(&params, true)
                .and_then(|p| check_version(head).map(|()| p))
                .and_then(|p| self.get_task(&p)),
            jsonrpc::CANCEL_TASK => TaskParams::parse(&params, false)
                .and_then(|p| check_version(head).map(|()| p))
                .and_then(|p| self.cancel_task(&p)),
            other => check_version(head).and_then(|()| {
                Err(RpcError::a2a(
                    jsonrpc::UNSUPPORTED_OPERATION,
                    format!("{other} is not supported by this agent"),
                    Map::new(),
                ))
            }),
        };
        match result {
            Ok(v) => jsonrpc::success(&id, v),
            Err(e) => jsonrpc::failure(&id, &e),
        }
    }

    fn send_message(&self, p: SendParams, stop: &AtomicBool) -> Result<Value, RpcError> {
        if let Some(task_id) = p.message.task_id.as_deref().filter(|t| !t.is_empty()) {
            return Err(match self.handler.get(task_id) {
                None => RpcError::task_not_found(),
                Some(t) if t.is_terminal() => RpcError::a2a(
                    jsonrpc::UNSUPPORTED_OPERATION,
                    format!("Task {} is in terminal state: {}", t.id, t.status.state),
                    Map::new(),
                ),
                Some(t) => RpcError::a2a(
                    jsonrpc::UNSUPPORTED_OPERATION,
                    format!("Task {} does not take further messages", t.id),
                    Map::new(),
                ),
            });
        }
        if !p.accepted_output_modes.is_empty() {
            let ours = self.handler.card().default_output_modes;
            let fits = p.accepted_output_modes.iter().any(|m| {
                m == "*/*" || m == "text/*" || ours.iter().any(|o| o.eq_ignore_ascii_case(m))
            });
            if !fits {
                return Err(RpcError::a2a(
                    jsonrpc::CONTENT_TYPE_NOT_SUPPORTED,
                    format!(
                        "Incompatible content types: this agent answers in {}",
                        ours.join(", ")
                    ),
                    Map::new(),
                ));
            }
        }
        let mut task = self.handler.submit(p.message);
        if !p.return_immediately && !task.is_terminal() {
            if let Some(_slot) = BlockingSlot::take(&self.blocking, self.max_blocking) {
                let end = Instant::now() + self.send_wait;
                while !task.is_terminal() && !stop.load(Ordering::SeqCst) {
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    match self
                        .handler
                        .wait_terminal(&task.id, (end - now).min(WAIT_SLICE))
                    {
                        Some(t) => task = t,
                        None => break,
                    }
                }
            }
        }
        let task = task.with_history_length(p.history_length);
        Ok(json!({ "task": task_value(&task)? }))
    }

    fn get_task(&self, p: &TaskParams) -> Result<Value, RpcError> {
        let task = self
            .handler
            .get(&p.id)
            .ok_or_else(RpcError::task_not_found)?;
        task_value(&task.with_history_length(p.history_length))
    }

    fn cancel_task(&self, p: &TaskParams) -> Result<Value, RpcError> {
        match self.handler.cancel(&p.id) {
            Ok(t) => task_value(&t),
            Err(CancelError::NotFound) => Err(RpcError::task_not_found()),
            Err(CancelError::NotCancelable(_)) => Err(RpcError::task_not_cancelable()),
        }
    }
}

impl Service for App {
    fn check_head(&self, head: &Head) -> Option<Response> {
        let path = head.path.as_str();
        if path == CARD_PATH {
            return Some(match head.method.as_str() {
                "GET" | "HEAD" => self.card(head),
                _ => method_not_allowed("GET, HEAD"),
            });
        }
        if path != "/" && !path.is_empty() {
            return Some(Response::empty(404));
        }
        if head.method != "POST" {
            return Some(method_not_allowed("POST"));
        }
        if !self.authorized(head) {
            let mut r = Response::empty(401);
            r.headers.push(("WWW-Authenticate", "Bearer".into()));
            return Some(r);
        }
        None
    }

    fn too_large(&self, limit: usize) -> Response {
        let _ = limit;
        Response::json(
            413,
            &jsonrpc::failure(
                &Value::Null,
                &RpcError::plain(jsonrpc::INVALID_REQUEST, "Payload too large"),
            ),
        )
    }

    fn call(&self, head: &Head, body: Vec<u8>, stop: &AtomicBool) -> Response {
        Response::json(200, &self.dispatch(head, &body, stop))
    }
}

/// A seat among the blocking `SendMessage` calls, given back on drop.
struct BlockingSlot<'a>(&'a AtomicUsize);

impl<'a> BlockingSlot<'a> {
    fn take(counter: &'a AtomicUsize, max: usize) -> Option<BlockingSlot<'a>> {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| BlockingSlot(counter))
    }
}

impl Drop for BlockingSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct SendParams {
    message: Message,
    return_immediately: bool,
    history_length: Option<usize>,
    accepted_output_modes: Vec<String>,
}

impl SendParams {
    fn parse(params: &Map<String, Value>) -> Result<SendParams, RpcError> {
        let Some(m) = params.get("message").filter(|m| !m.is_null()) else {
            return Err(RpcError::validation("message", "Field is required."));
        };
        let message: Message = serde_json::from_value(m.clone())
            .map_err(|e| RpcError::invalid_params(format!("Failed to parse message field: {e}")))?;
        if message.parts.is_empty() {
            return Err(RpcError::validation(
                "message.parts",
                "Field must contain at least one element.",
            ));
        }
        let config = match params.get("configuration") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(c)) => c.clone(),
            Some(_) => return Err(RpcError::invalid_params("configuration must be an object")),
        };
        let return_immediately = match field(&config, "returnImmediately", "return_immediately") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "Failed to parse returnImmediately field: expected a boolean",
                ))
            }
        };
        let accepted_output_modes =
            match field(&config, "acceptedOutputModes", "accepted_output_modes") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        RpcError::invalid_params(
                            "Failed to parse acceptedOutputModes field: expected strings",
                        )
                    })?,
                Some(_) => {
                    return Err(RpcError::invalid_params(
                        "Failed to parse acceptedOutputModes field: expected a list",
                    ))
                }
            };
        Ok(SendParams {
            message,
            return_immediately,
            history_length: history_length(&config)?,
            accepted_output_modes,
        })
    }
}

struct TaskParams {
    id: String,
    history_length: Option<usize>,
}

impl TaskParams {
    fn parse(params: &Map<String, Value>, with_history: bool) -> Result<TaskParams, RpcError> {
        let id = match params.get("id") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => {
                return Err(RpcError::validation("id", "Field is required."))
            }
            Some(other) => {
                return Err(RpcError::invalid_params(format!(
                    "Failed to parse id field: expected string, got {}.",
                    json_type(other)
                )))
            }
        };
        let history_length = if with_history {
            history_length(params)?
        } else {
            None
        };
        Ok(TaskParams { id, history_length })
    }
}

/// `historyLength` (or `history_length`): a non-negative integer; absent or null means
/// the whole history, 0 none.
fn history_length(m: &Map<String, Value>) -> Result<Option<usize>, RpcError> {
    match field(m, "historyLength", "history_length") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "Failed to parse historyLength field: expected a non-negative integer, got {v}"
                ))
            }),
    }
}

fn field<'a>(m: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    m.get(camel).or_else(|| m.get(snake))
}

/// `Ok` when the `A2A-Version` header is 1.x; a missing or empty header is 0.3.
fn check_version(head: &Head) -> Result<(), RpcError> {
    let v = head
        .header("a2a-version")
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("0.3");
    let major = v.split('.').next().unwrap_or("");
    let ok = major == "1"
        && v.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if ok {
        Ok(())
    } else {
        Err(RpcError::version_not_supported(v))
    }
}

fn invalid_request(id: &Value, message: &str) -> Value {
    jsonrpc::failure(id, &RpcError::plain(jsonrpc::INVALID_REQUEST, message))
}

fn method_not_allowed(allow: &str) -> Response {
    let mut r = Response::empty(405);
    r.headers.push(("Allow", allow.to_string()));
    r
}

fn task_value(task: &Task) -> Result<Value, RpcError> {
    serde_json::to_value(task).map_err(|e| {
        RpcError::plain(
            jsonrpc::INTERNAL_ERROR,
            format!("task does not serialize: {e}"),
        )
    })
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The -32700 message for a body serde_json refused. serde_json refuses a `\uD800`
/// –`\uDFFF` escape that is not half of a surrogate pair, and says so in words that
/// mislead (e.g. `unexpected end of hex escape` for `"\ud800"`); such a body gets a
/// message naming the escape and where it is. Any other body gets serde_json's message.
fn parse_error_message(body: &[u8], e: &serde_json::Error) -> String {
    match unpaired_surrogate(body) {
        Some((at, unit)) => {
            let line = 1 + body[..at].iter().filter(|b| **b == b'\n').count();
            let column = at
                - body[..at]
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |i| i + 1)
                + 1;
            format!(
                "Invalid JSON: unpaired UTF-16 surrogate escape \\u{unit:04x} in a string at line {line} column {column}; a JSON string must encode Unicode text, and a surrogate escape needs its other half right after it"
            )
        }
        None => format!("Invalid JSON: {e}"),
    }
}

/// The byte offset and code unit of the first `\uXXXX` escape inside a JSON string
/// that is a surrogate without its other half, if there is one. One pass over `body`.
fn unpaired_surrogate(body: &[u8]) -> Option<(usize, u16)> {
    let hex4 = |at: usize| -> Option<u16> {
        let h = body.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    let escape = |at: usize| -> Option<u16> {
        (body.get(at) == Some(&b'\\') && body.get(at + 1) == Some(&b'u'))
            .then(|| hex4(at + 2))
            .flatten()
    };
    let mut in_string = false;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                let Some(unit) = escape(i) else {
                    i += 2; // any other escape: skip the escaped byte
                    continue;
                };
                match unit {
                    0xD800..=0xDBFF => match escape(i + 6) {
                        Some(0xDC00..=0xDFFF) => i += 12,
                        _ => return Some((i, unit)),
                    },
                    0xDC00..=0xDFFF => return Some((i, unit)),
                    _ => i += 6,
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Compares without stopping at the first difference (the length still shows).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(version: Option<&str>) -> Head {
        Head {
            method: "POST".into(),
            path: "/".into(),
            http11: true,
            headers: version
                .map(|v| vec![("a2a-version".to_string(), v.to_string())])
                .unwrap_or_default(),
        }
    }

    #[test]
    fn unpaired_surrogates_are_found_and_pairs_are_not() {
        assert_eq!(unpaired_surrogate(br#"{"a":"\ud800"}"#), Some((6, 0xd800)));
        assert_eq!(
            unpaired_surrogate(br#"{"a":"x\uDC00y"}"#),
            Some((7, 0xdc00))
        );
        assert_eq!(
            unpaired_surrogate(br#"{"a":"\ud800\u0041"}"#),
            Some((6, 0xd800))
        );
        assert_eq!(unpaired_surrogate(br#"{"a":"\ud83d\ude00 \\ud800"}"#), None);
        assert_eq!(
            unpaired_surrogate(br#"{"a":"\"\ud800"}"#),
            Some((8, 0xd800))
        );
        assert_eq!(unpaired_surrogate(br#"{"a":"\ud8"}"#), None);
        assert_eq!(unpaired_surrogate(b"\\ud800"), None, "outside a string");
        let body = b"{\n \"id\": \"\\ud800\"}";
        let e = serde_json::from_slice::<Value>(body).unwrap_err();
        assert_eq!(
            parse_error_message(body, &e),
            "Invalid JSON: unpaired UTF-16 surrogate escape \\ud800 in a string at line 2 column 9; a JSON string must encode Unicode text, and a surrogate escape needs its other half right after it"
        );
        let e = serde_json::from_slice::<Value>(b"[1,").unwrap_err();
        assert!(parse_error_message(b"[1,", &e).starts_with("Invalid JSON: "));
    }

    #[test]
    fn versions_of_major_one_pass() {
        for v in ["1.0", "1", "1.0.3", "1.1"] {
            assert!(check_version(&head(Some(v))).is_ok(), "{v}");
        }
        for v in [
            None,
            Some(""),
            Some("0.3"),
            Some("2.0"),
            Some("1.x"),
            Some("one"),
        ] {
            assert!(check_version(&head(v)).is_err(), "{v:?}");
        }
        let e = check_version(&head(None)).unwrap_err();
        assert_eq!(
            e.message,
            "A2A version '0.3' is not supported by this handler. Expected version '1.0'."
        );
    }
}
