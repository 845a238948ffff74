//! A blocking A2A 1.0 JSON-RPC client: one configured ureq `Agent`, cheap to clone into
//! poller threads (architecture page, "Formations and doors"; spec: call-member).
//!
//! Every RPC is a POST of a JSON-RPC 2.0 request with a fresh string id, the headers
//! `A2A-Version: 1.0`, `Authorization: Bearer <token>` and
//! `Content-Type: application/json`. Failures are sorted into [`ClientError`] so a
//! caller can tell "the door stopped answering" from "the door said no".

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::jsonrpc::{self, RpcError};
use super::types::{AgentCard, Message, Task};
use super::{PROTOCOL_VERSION, VERSION_HEADER};

/// The connect timeout unless configured. Defaults to 5 seconds.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The whole-request timeout unless configured (connect, send, wait, read). Defaults
/// to 30 seconds; a blocking `SendMessage` (`return_immediately: false`) is bounded by
/// it too, so raise it for long blocking calls.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest response body read, in bytes (8 MiB); a larger one is a
/// [`ClientError::Protocol`].
pub const MAX_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;

/// How much of an unexpected body an error quotes, in bytes.
const QUOTE_BYTES: usize = 300;

/// How a [`A2aClient`] reaches its door.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The JSON-RPC URL, e.g. `http://127.0.0.1:7431/`. The agent card is read from
    /// the same origin at `/.well-known/agent-card.json`.
    pub url: String,
    /// The bearer token sent on every RPC (not on the public card request). Empty:
    /// no `Authorization` header.
    pub token: String,
    /// Connect timeout. Defaults to [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// Whole-request timeout. Defaults to [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
}

impl ClientConfig {
    /// A config with the default timeouts.
    pub fn new(url: impl Into<String>, token: impl Into<String>) -> ClientConfig {
        ClientConfig {
            url: url.into(),
            token: token.into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// Why an RPC failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No HTTP answer: connection refused, DNS, timeout, reset, TLS. Two of these in a
    /// row make a member unreachable (spec: call-member).
    #[error("door {url} unreachable: {detail}")]
    Unreachable {
        /// The URL called.
        url: String,
        /// The transport error.
        detail: String,
    },
    /// An HTTP answer whose status is not 200, e.g. 401 for a wrong token.
    #[error("door {url} answered http status {status}{}", http_hint(*status, body))]
    HttpStatus {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the body (at most 300 bytes).
        body: String,
    },
    /// A JSON-RPC error response, e.g. -32001 task not found.
    #[error("door {url} answered json-rpc error {}: {}", .error.code, .error.message)]
    Rpc {
        /// The URL called.
        url: String,
        /// The error object (code, message, data).
        error: Box<RpcError>,
    },
    /// A 200 answer that is not a JSON-RPC response carrying what the method returns.
    #[error("door {url} broke the protocol: {detail}")]
    Protocol {
        /// The URL called.
        url: String,
        /// What was wrong.
        detail: String,
    },
}

impl ClientError {
    /// `true` for [`ClientError::Unreachable`].
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Unreachable { .. })
    }

    /// The JSON-RPC code of an [`ClientError::Rpc`].
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            ClientError::Rpc { error, .. } => Some(error.code),
            _ => None,
        }
    }

    /// The HTTP status of an [`ClientError::HttpStatus`].
    pub fn http_status(&self) -> Option<u16> {
        match self {
            ClientError::HttpStatus { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A client of one A2A door. Clone it freely: clones share the connection pool.
#[derive(Debug, Clone)]
pub struct A2aClient {
    agent: ureq::Agent,
    url: String,
    card_url: String,
    auth: Option<String>,
}

impl A2aClient {
    /// A client for `url` with bearer `token` and the default timeouts.
    pub fn new(url: impl Into<String>, token: impl Into<String>) -> A2aClient {
        A2aClient::with_config(ClientConfig::new(url, token))
    }

    /// A client from a full config.
    pub fn with_config(config: ClientConfig) -> A2aClient {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.request_timeout))
            .timeout_connect(Some(config.connect_timeout))
            .http_status_as_error(false)
            .user_agent(concat!("mur/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let card_url = format!("{}/.well-known/agent-card.json", origin(&config.url));
        A2aClient {
            agent,
            url: config.url,
            card_url,
            auth: (!config.token.is_empty()).then(|| format!("Bearer {}", config.token)),
        }
    }

    /// The JSON-RPC URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `SendMessage` with one text part and `metadata` on the message (an object; any
    /// other value is dropped). With `return_immediately` the door answers at once
    /// (SUBMITTED, WORKING or REJECTED); without, it blocks until the task is
    /// terminal, bounded by the request timeout.
    ///
    /// # Errors
    ///
    /// Any [`ClientError`]; a door that answers with a Message instead of a Task, or
    /// with a task whose id is missing or empty, is a [`ClientError::Protocol`].
    pub fn send_message(
        &self,
        text: &str,
        metadata: Option<Value>,
        return_immediately: bool,
    ) -> Result<Task, ClientError> {
        let mut message = Message::user(text);
        message.metadata = match metadata {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        };
        self.send(message, return_immediately)
    }

    /// `SendMessage` with a message built by the caller.
    ///
    /// # Errors
    ///
    /// As [`A2aClient::send_message`].
    pub fn send(&self, message: Message, return_immediately: bool) -> Result<Task, ClientError> {
        let params = json!({
            "message": message,
            "configuration": {
                "acceptedOutputModes": ["text/plain"],
                "returnImmediately": return_immediately,
            },
        });
        let result = self.call(jsonrpc::SEND_MESSAGE, params)?;
        match result {
            Value::Object(mut m) => match m.remove("task") {
                Some(t) => {
                    let task = self.task(t)?;
                    if task.id.is_empty() {
                        return Err(self
                            .protocol("SendMessage answered a task with an empty id".to_string()));
                    }
                    Ok(task)
                }
                None if m.contains_key("message") => {
                    Err(self
                        .protocol("SendMessage answered with a message, not a task".to_string()))
                }
                None => Err(self.protocol("SendMessage result has no task".to_string())),
            },
            other => Err(self.protocol(format!(
                "SendMessage result is not an object: {}",
                quote(&other.to_string())
            ))),
        }
    }

    /// `GetTask` with the whole history.
    ///
    /// # Errors
    ///
    /// Any [`ClientError`]; an unknown id is [`ClientError::Rpc`] with -32001; an
    /// answer without a task id, or naming another task than `id`, is
    /// [`ClientError::Protocol`].
    pub fn get_task(&self, id: &str) -> Result<Task, ClientError> {
        self.get_task_with_history(id, None)
    }

    /// `GetTask` with `historyLength` (`None`: the whole history).
    ///
    /// # Errors
    ///
    /// As [`A2aClient::get_task`].
    pub fn get_task_with_history(
        &self,
        id: &str,
        history_length: Option<u32>,
    ) -> Result<Task, ClientError> {
        let mut params = Map::new();
        params.insert("id".into(), Value::String(id.to_string()));
        if let Some(n) = history_length {
            params.insert("historyLength".into(), json!(n));
        }
        let result = self.call(jsonrpc::GET_TASK, Value::Object(params))?;
        self.task_named(jsonrpc::GET_TASK, id, result)
    }

    /// `CancelTask`: the task as the door left it.
    ///
    /// # Errors
    ///
    /// Any [`ClientError`]; -32001 unknown task, -32002 a task already terminal; an
    /// answer naming another task than `id` is [`ClientError::Protocol`].
    pub fn cancel_task(&self, id: &str) -> Result<Task, ClientError> {
        let result = self.call(jsonrpc::CANCEL_TASK, json!({"id": id}))?;
        self.task_named(jsonrpc::CANCEL_TASK, id, result)
    }

    /// `GET /.well-known/agent-card.json` at the URL's origin (no token sent).
    ///
    /// # Errors
    ///
    /// [`ClientError::Unreachable`], [`ClientError::HttpStatus`], or
    /// [`ClientError::Protocol`] for a body that is not a card.
    pub fn agent_card(&self) -> Result<AgentCard, ClientError> {
        let mut resp = self
            .agent
            .get(&self.card_url)
            .header("accept", "application/json")
            .call()
            .map_err(|e| self.transport(&self.card_url, e))?;
        let status = resp.status().as_u16();
        let body = self.read_body(&mut resp, &self.card_url)?;
        if status != 200 {
            return Err(ClientError::HttpStatus {
                url: self.card_url.clone(),
                status,
                body: quote(&body),
            });
        }
        serde_json::from_str(&body).map_err(|e| ClientError::Protocol {
            url: self.card_url.clone(),
            detail: format!("agent card does not parse ({e}): {}", quote(&body)),
        })
    }

    /// One JSON-RPC call; the `result` value.
    fn call(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = Value::String(format!(
            "rpc_{}",
            ulid::Ulid::new().to_string().to_lowercase()
        ));
        let payload = jsonrpc::request(&id, method, params).to_string();
        let mut req = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .header(VERSION_HEADER, PROTOCOL_VERSION);
        if let Some(a) = &self.auth {
            req = req.header("authorization", a);
        }
        let mut resp = req
            .send(payload.as_bytes())
            .map_err(|e| self.transport(&self.url, e))?;
        let status = resp.status().as_u16();
        let body = self.read_body(&mut resp, &self.url)?;
        if status != 200 {
            return Err(ClientError::HttpStatus {
                url: self.url.clone(),
                status,
                body: quote(&body),
            });
        }
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| self.protocol(format!("response is not JSON ({e}): {}", quote(&body))))?;
        let Value::Object(mut obj) = v else {
            return Err(self.protocol(format!(
                "response is not a JSON-RPC object: {}",
                quote(&body)
            )));
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(self.protocol(format!("response is not JSON-RPC 2.0: {}", quote(&body))));
        }
        if let Some(e) = obj.get("error") {
            return match RpcError::from_value(e) {
                Some(error) => Err(ClientError::Rpc {
                    url: self.url.clone(),
                    error: Box::new(error),
                }),
                None => Err(self.protocol(format!("malformed error object: {}", quote(&body)))),
            };
        }
        if obj.get("id") != Some(&id) {
            return Err(self.protocol(format!(
                "response id {} does not match request id {id}",
                obj.get("id").map_or("(none)".to_string(), Value::to_string)
            )));
        }
        obj.remove("result")
            .ok_or_else(|| self.protocol("response has neither result nor error".to_string()))
    }

    fn task(&self, v: Value) -> Result<Task, ClientError> {
        let text = v.to_string();
        serde_json::from_value(v)
            .map_err(|e| self.protocol(format!("result is not a task ({e}): {}", quote(&text))))
    }

    /// The task `method` answered for task `id`: another task's id is a protocol
    /// error, as a missing id is.
    fn task_named(&self, method: &str, id: &str, v: Value) -> Result<Task, ClientError> {
        let task = self.task(v)?;
        if task.id != id {
            return Err(self.protocol(format!(
                "{method} asked for task {} and was answered task {}",
                quote(id),
                quote(&task.id)
            )));
        }
        Ok(task)
    }

    fn read_body(
        &self,
        resp: &mut ureq::http::Response<ureq::Body>,
        url: &str,
    ) -> Result<String, ClientError> {
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport(url, e))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn transport(&self, url: &str, e: ureq::Error) -> ClientError {
        match e {
            ureq::Error::BodyExceedsLimit(n) => ClientError::Protocol {
                url: url.to_string(),
                detail: format!("response body exceeds {n} bytes"),
            },
            other => ClientError::Unreachable {
                url: url.to_string(),
                detail: other.to_string(),
            },
        }
    }

    fn protocol(&self, detail: String) -> ClientError {
        ClientError::Protocol {
            url: self.url.clone(),
            detail,
        }
    }
}

/// `scheme://authority` of a URL (everything before the first `/` after `://`).
fn origin(url: &str) -> &str {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].find('/') {
        Some(i) => &url[..start + i],
        None => url,
    }
}

/// At most [`QUOTE_BYTES`] of `s`, cut on a character boundary.
fn quote(s: &str) -> String {
    let s = s.trim();
    if s.len() <= QUOTE_BYTES {
        return s.to_string();
    }
    let mut end = QUOTE_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The tail of an [`ClientError::HttpStatus`] message: what a status means for a
/// caller, then the start of the body when there is one.
fn http_hint(status: u16, body: &str) -> String {
    let meaning = match status {
        401 => " (the door refused the bearer token: check the member's `token` in roster.yaml)",
        403 => " (the door forbids this caller)",
        404 => " (no A2A endpoint at this URL: check the member's `door` URL)",
        413 => " (the request was larger than the door accepts)",
        503 => " (the door is overloaded; it asks to retry later)",
        _ => "",
    };
    let body = body.trim();
    if body.is_empty() {
        meaning.to_string()
    } else {
        format!("{meaning}: {body}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_drops_the_path() {
        assert_eq!(origin("http://127.0.0.1:7431/"), "http://127.0.0.1:7431");
        assert_eq!(origin("http://h:1/a2a/jsonrpc"), "http://h:1");
        assert_eq!(origin("http://h:1"), "http://h:1");
    }

    #[test]
    fn an_unreachable_door_is_unreachable() {
        // Port 9 on loopback: nothing listens (discard is not run on test machines).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let c = A2aClient::new(format!("http://{addr}/"), "t");
        let e = c.get_task("x").unwrap_err();
        assert!(e.is_unreachable(), "{e}");
    }
}
