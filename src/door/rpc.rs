//! The door's A2A 1.0 JSON-RPC app: routing, the bearer check, the content type,
//! envelopes, params and errors, in the order a2a-sdk 1.3 checks them (parse,
//! envelope, method, params, version).

use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use super::server::{Head, Response, Service};
use super::{CancelError, DoorLimits, TaskHandler};
use crate::a2a::jsonrpc::{self, RpcError};
use crate::a2a::types::{AgentInterface, Message, Task, TaskState};
use crate::a2a::PROTOCOL_VERSION;

/// The log target of the door's request lines.
const LOG_TARGET: &str = "mur::door";

/// `ListTasks` page size when the request names none.
pub(crate) const DEFAULT_PAGE_SIZE: usize = 50;
/// The largest `ListTasks` page size.
pub(crate) const MAX_PAGE_SIZE: usize = 100;

/// The push-notification config methods: answered -32003 (the card says
/// `pushNotifications: false`).
const PUSH_METHODS: &[&str] = &[
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
];

/// The path of the agent card.
pub(crate) const CARD_PATH: &str = "/.well-known/agent-card.json";

/// How long one `wait_terminal` slice of a blocking `SendMessage` lasts.
const WAIT_SLICE: Duration = Duration::from_millis(250);

/// A2A 1.0 methods a door knows but does not serve: answered -32004.
const UNSUPPORTED_METHODS: &[&str] = &[
    "SendStreamingMessage",
    "SubscribeToTask",
    "GetExtendedAgentCard",
];

pub(crate) struct App {
    token: String,
    handler: Arc<dyn TaskHandler>,
    url: String,
    /// Bound to every address with no advertised URL: the card names the host the
    /// request was sent to (its `Host` header) instead of `0.0.0.0`.
    url_from_host: bool,
    send_wait: Duration,
    max_blocking: usize,
    blocking: AtomicUsize,
    cache_control: String,
    /// The card's ETag and when a card with that ETag was first served
    /// (`Last-Modified`).
    card_stamp: Mutex<(String, SystemTime)>,
    /// The key of the `ListTasks` page tokens this door gives out (random per door).
    cursor_key: ring::hmac::Key,
}

/// Why a request's bearer token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AuthRefusal {
    /// No `Authorization` header, another scheme than Bearer, or an empty token.
    Missing,
    /// A Bearer token that is not the door's.
    Wrong,
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
            url: limits
                .advertised_url
                .clone()
                .unwrap_or_else(|| format!("http://{local}/")),
            url_from_host: limits.advertised_url.is_none() && local.ip().is_unspecified(),
            send_wait: limits.send_wait,
            max_blocking: limits.max_blocking_sends.max(1),
            blocking: AtomicUsize::new(0),
            cache_control: limits.card_cache_control.clone(),
            card_stamp: Mutex::new((String::new(), SystemTime::now())),
            cursor_key: cursor_key(),
        }
    }

    fn card(&self, head: &Head) -> Response {
        let mut card = self.handler.card();
        let url = match head
            .header("host")
            .filter(|h| self.url_from_host && plain_host(h))
        {
            Some(host) => format!("http://{host}/"),
            None => self.url.clone(),
        };
        card.supported_interfaces = vec![AgentInterface {
            url,
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
        let modified = {
            let mut stamp = self.card_stamp.lock();
            if stamp.0 != etag {
                *stamp = (etag.clone(), SystemTime::now());
            }
            stamp.1
        };
        let last_modified = httpdate::fmt_http_date(modified);
        let cache = ("Cache-Control", self.cache_control.clone());
        // If-None-Match wins over If-Modified-Since (RFC 9110 §13.1.3).
        let not_modified = match head.header("if-none-match") {
            Some(v) => v.split(',').any(|t| t.trim() == etag || t.trim() == "*"),
            None => head
                .header("if-modified-since")
                .and_then(|v| httpdate::parse_http_date(v).ok())
                .is_some_and(|since| {
                    // Last-Modified has whole seconds: compare what the client saw.
                    httpdate::parse_http_date(&last_modified).is_ok_and(|m| m <= since)
                }),
        };
        if not_modified {
            let mut r = Response::empty(304);
            r.headers.push(("ETag", etag));
            r.headers.push(("Last-Modified", last_modified));
            r.headers.push(cache);
            return r;
        }
        Response {
            status: 200,
            headers: vec![
                ("Content-Type", "application/json".into()),
                ("ETag", etag),
                ("Last-Modified", last_modified),
                cache,
            ],
            body,
            close: false,
        }
    }

    fn authorize(&self, head: &Head) -> Result<(), AuthRefusal> {
        let Some(v) = head.header("authorization") else {
            return Err(AuthRefusal::Missing);
        };
        let Some((scheme, token)) = v.split_once(' ') else {
            return Err(AuthRefusal::Missing);
        };
        if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
            return Err(AuthRefusal::Missing);
        }
        if !self.token.is_empty()
            && constant_time_eq(token.trim().as_bytes(), self.token.as_bytes())
        {
            Ok(())
        } else {
            Err(AuthRefusal::Wrong)
        }
    }

    fn dispatch(&self, head: &Head, body: &[u8], stop: &AtomicBool) -> Value {
        let req: Value = match jsonrpc::parse_strict(body) {
            Ok(v) => v,
            Err(jsonrpc::StrictError::Syntax(e)) => {
                return jsonrpc::failure(
                    &Value::Null,
                    &RpcError::plain(jsonrpc::PARSE_ERROR, parse_error_message(body, &e)),
                )
            }
            Err(jsonrpc::StrictError::Duplicate { key, path }) => {
                // The id is echoed when it is not itself what is doubled.
                let id = match serde_json::from_slice::<Value>(body) {
                    Ok(Value::Object(o)) if !(path.is_empty() && key == "id") => {
                        match o.get("id") {
                            Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
                            _ => Value::Null,
                        }
                    }
                    _ => Value::Null,
                };
                let place = if path.is_empty() {
                    "the request object".to_string()
                } else {
                    format!("`{}`", short(&path))
                };
                return invalid_request(
                    &id,
                    &format!(
                        "Invalid request: duplicate key {:?} in {place}; a JSON-RPC request must name each key once",
                        short(&key)
                    ),
                );
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
            jsonrpc::SEND_MESSAGE | jsonrpc::GET_TASK | jsonrpc::CANCEL_TASK | jsonrpc::LIST_TASKS
        );
        if !known && !UNSUPPORTED_METHODS.contains(&method) && !PUSH_METHODS.contains(&method) {
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
            jsonrpc::SEND_MESSAGE => SendParams::parse(&params, body)
                .and_then(|p| check_version(head).map(|()| p))
                .and_then(|p| self.send_message(p, stop)),
            jsonrpc::GET_TASK => TaskParams::parse(&params, true, body)
                .and_then(|p| check_version(head).map(|()| p))
                .and_then(|p| self.get_task(&p)),
            jsonrpc::CANCEL_TASK => TaskParams::parse(&params, false, body)
                .and_then(|p| check_version(head).map(|()| p))
                .and_then(|p| self.cancel_task(&p)),
            jsonrpc::LIST_TASKS => ListParams::parse(&params, body, &self.cursor_key)
                .and_then(|p| check_version(head).map(|()| p))
                .and_then(|p| self.list_tasks(&p)),
            push if PUSH_METHODS.contains(&push) => check_version(head).and_then(|()| {
                Err(RpcError::a2a(
                    jsonrpc::PUSH_NOTIFICATION_NOT_SUPPORTED,
                    "Push notifications are not supported by the agent",
                    Map::new(),
                ))
            }),
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
        let inputs = self.handler.card().default_input_modes;
        for (i, part) in p.message.parts.iter().enumerate() {
            // A text part is read as text whatever its mediaType says.
            if part.kind() == Some("text") {
                continue;
            }
            let media = part.effective_media_type();
            if !inputs.iter().any(|m| media_type_covers(m, media)) {
                return Err(RpcError::a2a(
                    jsonrpc::CONTENT_TYPE_NOT_SUPPORTED,
                    format!(
                        "Incompatible content types: message part {i} is a {} part ({media}); this agent takes {}",
                        part.kind().unwrap_or("empty"),
                        if inputs.is_empty() { "text parts only".to_string() } else { inputs.join(", ") }
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
            // Cancel is idempotent: a canceled task is what the client asked for.
            Err(CancelError::NotCancelable(t)) if t.status.state == TaskState::Canceled => {
                task_value(&t)
            }
            Err(CancelError::NotCancelable(_)) => Err(RpcError::task_not_cancelable()),
        }
    }

    fn list_tasks(&self, p: &ListParams) -> Result<Value, RpcError> {
        let Some(index) = self.handler.list() else {
            return Err(RpcError::a2a(
                jsonrpc::UNSUPPORTED_OPERATION,
                "ListTasks is not supported by this agent",
                Map::new(),
            ));
        };
        let mut matching: Vec<_> = index
            .into_iter()
            .filter(|t| p.context_id.as_ref().is_none_or(|c| &t.context_id == c))
            .filter(|t| p.status.as_ref().is_none_or(|s| &t.state == s))
            .filter(|t| {
                p.after
                    .as_ref()
                    .is_none_or(|a| t.timestamp.as_str() >= a.as_str())
            })
            .collect();
        // Most recently updated first; the id breaks ties so pages never overlap.
        matching.sort_by(|a, b| (&b.timestamp, &b.id).cmp(&(&a.timestamp, &a.id)));
        let total = matching.len();
        let start = match &p.cursor {
            None => 0,
            Some((ts, id)) => matching
                .iter()
                .position(|t| (&t.timestamp, &t.id) < (ts, id))
                .unwrap_or(total),
        };
        let mut tasks = Vec::new();
        let mut last = None;
        for t in matching.iter().skip(start).take(p.page_size) {
            last = Some((t.timestamp.clone(), t.id.clone()));
            // A task forgotten since the index was read is left out.
            let Some(mut task) = self.handler.get(&t.id) else {
                continue;
            };
            task = task.with_history_length(p.history_length);
            if !p.include_artifacts {
                task.artifacts.clear();
            }
            tasks.push(task_value(&task)?);
        }
        let more = start + p.page_size < total;
        let next = match (more, last) {
            (true, Some((ts, id))) => encode_cursor(&self.cursor_key, &ts, &id),
            _ => String::new(),
        };
        Ok(json!({
            "tasks": tasks,
            "nextPageToken": next,
            "pageSize": p.page_size,
            "totalSize": total,
        }))
    }
}

impl Service for App {
    fn check_head(&self, head: &Head) -> Option<Response> {
        let path = head.path.as_str();
        if path == CARD_PATH {
            return Some(match head.method.as_str() {
                "GET" | "HEAD" => self.card(head),
                _ => refused_http(head, method_not_allowed("GET, HEAD")),
            });
        }
        if path.starts_with(super::files::PREFIX) {
            // The peer-file endpoint: the door's token first, as for every POST.
            if let Err(why) = self.authorize(head) {
                log::info!(
                    target: LOG_TARGET,
                    "refused a peer-file request from {}: HTTP 401, bearer token {}",
                    peer(head),
                    match why {
                        AuthRefusal::Missing => "missing",
                        AuthRefusal::Wrong => "wrong",
                    }
                );
                return Some(unauthorized(why));
            }
            return Some(super::files::answer(head, self.handler.files()));
        }
        if path != "/" && !path.is_empty() {
            return Some(refused_http(head, Response::empty(404)));
        }
        if head.method != "POST" {
            return Some(refused_http(head, method_not_allowed("POST")));
        }
        let auths = head
            .headers
            .iter()
            .filter(|(n, _)| n == "authorization")
            .count();
        if auths > 1 {
            log::info!(
                target: LOG_TARGET,
                "refused a request from {}: HTTP 400, {auths} Authorization headers",
                peer(head)
            );
            let mut r = Response::empty(400);
            r.headers
                .push(("Content-Type", "text/plain; charset=utf-8".into()));
            r.body = format!(
                "the request has {auths} Authorization headers; send exactly one: Authorization: Bearer <token>\n"
            )
            .into_bytes();
            return Some(r);
        }
        if let Err(why) = self.authorize(head) {
            log::info!(
                target: LOG_TARGET,
                "refused a request from {}: HTTP 401, bearer token {}",
                peer(head),
                match why {
                    AuthRefusal::Missing => "missing",
                    AuthRefusal::Wrong => "wrong",
                }
            );
            return Some(unauthorized(why));
        }
        if let Some(r) = self.check_content_type(head) {
            return Some(r);
        }
        None
    }

    fn authorized(&self, head: &Head) -> bool {
        self.authorize(head).is_ok()
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
        let answer = self.dispatch(head, &body, stop);
        if let Some(e) = answer.get("error") {
            let method = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("method").and_then(Value::as_str).map(shown))
                .unwrap_or_else(|| "a request".into());
            log::info!(
                target: LOG_TARGET,
                "refused {method} from {}: {} {}",
                peer(head),
                e["code"],
                shown(e["message"].as_str().unwrap_or(""))
            );
        }
        // A numeric id is echoed as its text was sent, not as an f64 rewrote it.
        #[derive(serde::Deserialize)]
        struct RawId<'a> {
            #[serde(borrow)]
            id: Option<&'a serde_json::value::RawValue>,
        }
        let raw = answer["id"]
            .is_number()
            .then(|| serde_json::from_slice::<RawId>(&body).ok())
            .flatten()
            .and_then(|r| r.id);
        let mut r = Response::json(200, &Value::Null);
        r.body = jsonrpc::response_text(&answer, raw).into_bytes();
        r
    }
}

impl App {
    /// HTTP 415 with a JSON-RPC -32005 body (id null: the body is not read) unless
    /// the request's `Content-Type` is `application/json` (parameters allowed).
    fn check_content_type(&self, head: &Head) -> Option<Response> {
        let ct = head.header("content-type").unwrap_or("");
        let essence = ct.split(';').next().unwrap_or("").trim();
        if essence.eq_ignore_ascii_case("application/json") {
            return None;
        }
        let shown = if ct.is_empty() {
            "no Content-Type".to_string()
        } else {
            format!("Content-Type '{}'", shown(ct))
        };
        log::info!(
            target: LOG_TARGET,
            "refused a request from {}: HTTP 415, {shown}",
            peer(head)
        );
        Some(Response::json(
            415,
            &jsonrpc::failure(
                &Value::Null,
                &RpcError::a2a(
                    jsonrpc::CONTENT_TYPE_NOT_SUPPORTED,
                    format!(
                        "Unsupported media type: the request has {shown}; send the JSON-RPC request as Content-Type: application/json"
                    ),
                    Map::new(),
                ),
            ),
        ))
    }
}

/// The 401 answer: `WWW-Authenticate: Bearer` (with `error="invalid_token"` for a
/// wrong token, RFC 6750 §3.1) and a JSON body in the google.rpc.Status shape A2A's
/// HTTP binding uses, saying whether the token was missing or wrong (never the token).
fn unauthorized(why: AuthRefusal) -> Response {
    let (challenge, reason, message) = match why {
        AuthRefusal::Missing => (
            "Bearer",
            "BEARER_TOKEN_MISSING",
            "no bearer token: send the header Authorization: Bearer <token>",
        ),
        AuthRefusal::Wrong => (
            "Bearer error=\"invalid_token\"",
            "BEARER_TOKEN_WRONG",
            "the bearer token is not this door's token",
        ),
    };
    let mut r = Response::json(
        401,
        &json!({"error": {
            "code": 401,
            "status": "UNAUTHENTICATED",
            "message": message,
            "details": [{
                "@type": jsonrpc::ERROR_INFO_TYPE,
                "reason": reason,
                "domain": "mur",
                "metadata": {},
            }],
        }}),
    );
    r.headers.push(("WWW-Authenticate", challenge.into()));
    r
}

/// The peer of a request, for log lines.
fn peer(head: &Head) -> String {
    head.peer
        .map_or_else(|| "an unknown peer".to_string(), |a| a.to_string())
}

/// A client-chosen text for a log line: at most 200 characters, escaped as a Rust
/// string literal's inside ([`str::escape_debug`]: `\0`, `\n`, `\u{1b}`, `\"`), so
/// it can neither hide characters nor start a line of its own.
fn shown(s: &str) -> String {
    let cut = short(s);
    cut.escape_debug().to_string()
}

/// At most 200 characters of a client-chosen text, for an error message or a log line
/// (through [`shown`]).
fn short(s: &str) -> String {
    let mut out: String = s.chars().take(200).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Whether an input mode (`text/plain`, `image/*`, `*/*`) covers a media type;
/// parameters are ignored, case too.
fn media_type_covers(mode: &str, media: &str) -> bool {
    let essence = |m: &str| {
        m.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    let (mode, media) = (essence(mode), essence(media));
    if mode == "*/*" || mode == media {
        return true;
    }
    match (mode.split_once('/'), media.split_once('/')) {
        (Some((mt, "*")), Some((t, _))) => mt == t,
        _ => false,
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
    fn parse(params: &Map<String, Value>, body: &[u8]) -> Result<SendParams, RpcError> {
        let Some(m) = params.get("message").filter(|m| !m.is_null()) else {
            return Err(RpcError::validation("message", "Field is required."));
        };
        let message: Message = serde_json::from_value(m.clone())
            .map_err(|e| RpcError::invalid_params(format!("Failed to parse message field: {e}")))?;
        if message.message_id.trim().is_empty() {
            return Err(RpcError::validation(
                "message.messageId",
                "Field is required.",
            ));
        }
        if message.parts.is_empty() {
            return Err(RpcError::validation(
                "message.parts",
                "Field must contain at least one element.",
            ));
        }
        if let Some(i) = message.parts.iter().position(|p| p.kind().is_none()) {
            return Err(RpcError::validation(
                &format!("message.parts[{i}]"),
                "Part must carry one of text, data, url or raw.",
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
            history_length: history_length(&config, body, &["params", "configuration"])?,
            accepted_output_modes,
        })
    }
}

struct TaskParams {
    id: String,
    history_length: Option<usize>,
}

impl TaskParams {
    fn parse(
        params: &Map<String, Value>,
        with_history: bool,
        body: &[u8],
    ) -> Result<TaskParams, RpcError> {
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
            history_length(params, body, &["params"])?
        } else {
            None
        };
        Ok(TaskParams { id, history_length })
    }
}

/// `ListTasks` params (A2A 1.0 §3.1.4), camelCase or snake_case.
struct ListParams {
    context_id: Option<String>,
    status: Option<TaskState>,
    page_size: usize,
    /// The `(timestamp, id)` of the last task of the previous page.
    cursor: Option<(String, String)>,
    history_length: Option<usize>,
    /// `statusTimestampAfter` as an RFC 3339 UTC timestamp with microseconds.
    after: Option<String>,
    include_artifacts: bool,
}

impl ListParams {
    fn parse(
        params: &Map<String, Value>,
        body: &[u8],
        key: &ring::hmac::Key,
    ) -> Result<ListParams, RpcError> {
        let string = |camel: &str, snake: &str| -> Result<Option<String>, RpcError> {
            match field(params, camel, snake) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(RpcError::invalid_params(format!(
                    "Failed to parse {camel} field: expected string, got {}.",
                    json_type(other)
                ))),
            }
        };
        let context_id = string("contextId", "context_id")?;
        let status = match string("status", "status")? {
            None => None,
            Some(s) if s == "TASK_STATE_UNSPECIFIED" => None,
            Some(s) => match TaskState::parse(&s) {
                TaskState::Unknown(_) => {
                    return Err(RpcError::invalid_params(format!(
                        "Failed to parse status field: '{}' is not a task state (TASK_STATE_WORKING, TASK_STATE_COMPLETED, …)",
                        short(&s)
                    )))
                }
                state => Some(state),
            },
        };
        let page_size = match field(params, "pageSize", "page_size") {
            None | Some(Value::Null) => DEFAULT_PAGE_SIZE,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_PAGE_SIZE as u64).contains(&n) => n as usize,
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "Failed to parse pageSize field: expected an integer from 1 to {MAX_PAGE_SIZE}, got {}",
                        short(&as_sent(params, body, &["params"], "pageSize", "page_size"))
                    )))
                }
            },
        };
        let cursor = match string("pageToken", "page_token")? {
            None => None,
            Some(t) => Some(decode_cursor(key, &t).ok_or_else(|| {
                RpcError::invalid_params(
                    "Failed to parse pageToken field: not a nextPageToken this agent gave out",
                )
            })?),
        };
        let after = match string("statusTimestampAfter", "status_timestamp_after")? {
            None => None,
            Some(t) => Some(
                parse_timestamp(&t)
                    .map(|at| humantime::format_rfc3339_micros(at).to_string())
                    .ok_or_else(|| {
                        RpcError::invalid_params(format!(
                            "Failed to parse statusTimestampAfter field: '{}' is not an RFC 3339 timestamp with a time zone, e.g. 2026-10-27T10:00:00Z",
                            short(&t)
                        ))
                    })?,
            ),
        };
        let include_artifacts = match field(params, "includeArtifacts", "include_artifacts") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "Failed to parse includeArtifacts field: expected a boolean",
                ))
            }
        };
        Ok(ListParams {
            context_id,
            status,
            page_size,
            cursor,
            history_length: history_length(params, body, &["params"])?,
            after,
            include_artifacts,
        })
    }
}

/// An RFC 3339 timestamp with `Z` or a `±HH:MM` offset, as a time.
fn parse_timestamp(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    if s.ends_with(['Z', 'z']) {
        return humantime::parse_rfc3339_weak(&s[..s.len() - 1]).ok();
    }
    // `…T10:00:00+02:00`: the offset is the last 6 characters.
    let at = s.len().checked_sub(6)?;
    let (base, offset) = (s.get(..at)?, s.get(at..)?);
    let sign = match offset.as_bytes()[0] {
        b'+' => 1i64,
        b'-' => -1,
        _ => return None,
    };
    let (h, m) = offset[1..].split_once(':')?;
    let (h, m): (u64, u64) = (h.parse().ok()?, m.parse().ok()?);
    if h > 23 || m > 59 || !base.contains('T') {
        return None;
    }
    let local = humantime::parse_rfc3339_weak(base).ok()?;
    let shift = Duration::from_secs(h * 3600 + m * 60);
    if sign > 0 {
        local.checked_sub(shift)
    } else {
        local.checked_add(shift)
    }
}

/// A fresh random key for the page tokens of one door (HMAC-SHA256, 32 bytes from the
/// operating system's generator).
fn cursor_key() -> ring::hmac::Key {
    let mut bytes = [0u8; 32];
    rand::Rng::fill(&mut rand::rngs::OsRng, &mut bytes);
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of lowercase or uppercase hex; `None` for anything else.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A page token: the hex of `<timestamp> <task id>` of a page's last task, `.`, and
/// the hex of its HMAC-SHA256 under the door's `key`, so a token no door gave out (or
/// one of another door, or of this door before a restart) is refused, not followed.
fn encode_cursor(key: &ring::hmac::Key, timestamp: &str, id: &str) -> String {
    let payload = format!("{timestamp} {id}");
    let tag = ring::hmac::sign(key, payload.as_bytes());
    format!("{}.{}", hex(payload.as_bytes()), hex(tag.as_ref()))
}

/// The `(timestamp, id)` of a token [`encode_cursor`] made with `key`; `None` for any
/// other text.
fn decode_cursor(key: &ring::hmac::Key, token: &str) -> Option<(String, String)> {
    if token.len() > 2048 {
        return None;
    }
    let (payload, tag) = token.split_once('.')?;
    let (payload, tag) = (unhex(payload)?, unhex(tag)?);
    ring::hmac::verify(key, &payload, &tag).ok()?;
    let text = String::from_utf8(payload).ok()?;
    let (ts, id) = text.split_once(' ')?;
    (!id.is_empty() && humantime::parse_rfc3339(ts).is_ok())
        .then(|| (ts.to_string(), id.to_string()))
}

/// The text of `m[camel]` (else `m[snake]`) as the client sent it: a number as
/// written (`100000000000000000000`, not `1e20`), found in `body` under `prefix`;
/// else as serde_json writes the value.
fn as_sent(
    m: &Map<String, Value>,
    body: &[u8],
    prefix: &[&str],
    camel: &str,
    snake: &str,
) -> String {
    let name = if m.contains_key(camel) { camel } else { snake };
    let Some(v) = m.get(name) else {
        return String::new();
    };
    if !v.is_number() {
        return v.to_string();
    }
    let mut path = prefix.to_vec();
    path.push(name);
    jsonrpc::text_at(body, &path).unwrap_or_else(|| v.to_string())
}

/// `historyLength` (or `history_length`): a non-negative integer; absent or null means
/// the whole history, 0 none.
fn history_length(
    m: &Map<String, Value>,
    body: &[u8],
    prefix: &[&str],
) -> Result<Option<usize>, RpcError> {
    match field(m, "historyLength", "history_length") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "Failed to parse historyLength field: expected a non-negative integer, got {}",
                    short(&as_sent(m, body, prefix, "historyLength", "history_length"))
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

/// Logs a 404 or 405 answer as one `refused …` line naming the method and path asked
/// for (cut at 200 characters, control characters escaped), then returns it.
fn refused_http(head: &Head, r: Response) -> Response {
    let asked: String = format!("{} {}", head.method, head.path)
        .chars()
        .flat_map(char::escape_default)
        .take(200)
        .collect();
    let allow = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("allow"))
        .map(|(_, v)| format!(" (allowed: {v})"))
        .unwrap_or_default();
    let what = if r.status == 404 {
        "Not Found"
    } else {
        "Method Not Allowed"
    };
    log::info!(
        target: LOG_TARGET,
        "refused a request from {}: HTTP {} {what}, {asked}{allow}",
        peer(head),
        r.status
    );
    r
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
/// `true` for a `Host` header fit to build a URL from: `host[:port]` of letters,
/// digits, `.`, `-`, `:`, `[`, `]` (IPv6), at most 255 bytes.
fn plain_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 255
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
}

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
            peer: None,
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
    fn media_types_timestamps_and_cursors() {
        assert!(media_type_covers("text/plain", "Text/Plain; charset=utf-8"));
        assert!(media_type_covers("image/*", "image/png"));
        assert!(media_type_covers("*/*", "application/json"));
        assert!(!media_type_covers("text/plain", "application/json"));
        assert!(!media_type_covers("image/*", "text/plain"));
        let z = parse_timestamp("2026-10-27T10:00:00Z").unwrap();
        assert_eq!(parse_timestamp("2026-10-27T12:00:00+02:00"), Some(z));
        assert_eq!(parse_timestamp("2026-10-27T08:30:00-01:30"), Some(z));
        assert_eq!(
            humantime::format_rfc3339_micros(parse_timestamp("2026-10-27T10:00:00.5Z").unwrap())
                .to_string(),
            "2026-10-27T10:00:00.500000Z"
        );
        for bad in [
            "2026-10-27T10:00:00",
            "yesterday",
            "2026-10-27T10:00:00+25:00",
            "",
        ] {
            assert!(parse_timestamp(bad).is_none(), "{bad}");
        }
        let key = cursor_key();
        let t = encode_cursor(&key, "2026-10-27T10:00:00.000001Z", "tsk_1");
        assert_eq!(
            decode_cursor(&key, &t),
            Some(("2026-10-27T10:00:00.000001Z".into(), "tsk_1".into()))
        );
        // Forged: the bare hex of `<ts> <id>` (the old form), another door's token,
        // a payload changed under its tag.
        let bare = hex(b"2026-10-27T10:00:00.000001Z tsk_2");
        let other = encode_cursor(&cursor_key(), "2026-10-27T10:00:00.000001Z", "tsk_1");
        let (_, tag) = t.split_once('.').unwrap();
        let moved = format!("{bare}.{tag}");
        for bad in [
            "",
            "zz",
            "abc",
            &bare,
            &other,
            &moved,
            &encode_cursor(&key, "not-a-time", "tsk_1"),
        ] {
            assert!(decode_cursor(&key, bad).is_none(), "{bad}");
        }
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
