//! A blocking A2A 1.0 JSON-RPC client: one configured ureq `Agent`, cheap to clone into
//! poller threads (architecture page, "Formations and doors"; spec: call-member).
//!
//! Every RPC is a POST of a JSON-RPC 2.0 request with a fresh string id, the headers
//! `A2A-Version: 1.0`, `Authorization: Bearer <token>` and
//! `Content-Type: application/json`. Failures are sorted into [`ClientError`] so a
//! caller can tell "the door stopped answering" from "the door said no".
//!
//! # Discovery
//!
//! A client is given an address: an agent's base address as A2A agents are published
//! (`http://host:port`), or its JSON-RPC endpoint itself. Before its first RPC, and
//! again before a `SendMessage` once the card is stale, it reads the agent card at
//! `/.well-known/agent-card.json` of the address's origin and calls the `url` of the
//! card's first `supportedInterfaces` entry with `protocolBinding: JSONRPC` and
//! `protocolVersion` 1.x (an entry whose `url` is the address itself is preferred, so
//! an address that is already the endpoint stays the endpoint).
//!
//! | The card | The endpoint called |
//! |---|---|
//! | names a 1.x JSON-RPC interface | its `url` (a relative one against the origin; an unspecified host, `0.0.0.0` or `::`, is the address's host) |
//! | names such an interface at another origin (scheme, host or port) than the address's | none: [`ClientError::Incompatible`] (give the endpoint itself as the address) |
//! | names only A2A 0.x interfaces (or a 0.x `protocolVersion`) | none: [`ClientError::Incompatible`], "the peer speaks A2A 0.3" |
//! | names interfaces, none of them JSON-RPC 1.x | none: [`ClientError::Incompatible`], naming what it offers |
//! | names no interface, or there is no card (any status but 200 and 304, a redirect included), or it is not JSON | the address itself |
//! | cannot be fetched (no HTTP answer) | none: [`ClientError::Unreachable`] |
//!
//! The card is cached per client (clones share it) with its `ETag`: a stale card is
//! read again with `If-None-Match`, and a `304` keeps the endpoint. A card is fresh for
//! its `Cache-Control: max-age` (none, `no-cache` or `no-store`: stale at once, so every
//! `SendMessage` revalidates it); a missing card is remembered for
//! [`NO_CARD_FRESHNESS`]. `GetTask` and `CancelTask` use the endpoint already found.
//! No RPC is retried here: a `-32601` (method not found) or any other error ends the
//! call that got it.
//!
//! # Redirects
//!
//! No redirect is followed, neither on the card request nor on an RPC, so the token
//! only ever goes to the address's origin (the one `capabilities.network.allow`
//! admitted). A card answered by a redirect counts as no card (the address is the
//! endpoint; a warning names where it pointed); an RPC answered by one is a
//! [`ClientError::Redirect`] naming where it pointed.
//!
//! # What a peer says
//!
//! Text a peer chose (an error message, an error body, a status message, an answer)
//! goes through [`A2aClient::scrub`] before it is kept in an error: the client's own
//! token becomes `[token]` and the door's address (its endpoint, origin and
//! `host:port`) `[door address]`, so a peer echoing them puts neither in front of a
//! model, nor the token in a trace or on stderr. A body that is not JSON (a gateway's
//! HTML error page) is summarised by [`crate::net::summarise_body`], never quoted.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

/// How long an address without an agent card is called as the endpoint before the
/// card is looked for again: 300 seconds.
pub const NO_CARD_FRESHNESS: Duration = Duration::from_secs(300);

/// The path of the agent card, from the address's origin.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// How much of an unexpected body an error quotes, in bytes.
const QUOTE_BYTES: usize = 300;

/// What [`A2aClient::scrub`] puts where the client's token was.
pub const SCRUBBED_TOKEN: &str = "[token]";

/// What [`A2aClient::scrub`] puts where the door's address was.
pub const SCRUBBED_ADDRESS: &str = "[door address]";

/// How a [`A2aClient`] reaches its door.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The address: an agent's base address (`http://127.0.0.1:7431`) or its JSON-RPC
    /// endpoint (`http://127.0.0.1:7431/a2a/jsonrpc`). The agent card is read from the
    /// same origin at `/.well-known/agent-card.json`.
    pub url: String,
    /// The bearer token sent on every RPC (not on the public card request). Empty:
    /// no `Authorization` header.
    pub token: String,
    /// Connect timeout. Defaults to [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// Whole-request timeout. Defaults to [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// How the request timeout is set, named in a timeout error, e.g.
    /// `members.critic.request_timeout_secs in roster.yaml`. Defaults to empty: not
    /// named.
    pub request_timeout_setting: String,
    /// Whether the endpoint is found from the agent card (see the module docs).
    /// Defaults to `true`; `false` calls `url` as the endpoint and reads no card.
    pub discover: bool,
}

impl ClientConfig {
    /// A config with the default timeouts, discovering the endpoint.
    pub fn new(url: impl Into<String>, token: impl Into<String>) -> ClientConfig {
        ClientConfig {
            url: url.into(),
            token: token.into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            request_timeout_setting: String::new(),
            discover: true,
        }
    }
}

/// Why an RPC failed.
///
/// Its `Display` names the URL called (`door http://…/ answered http status 404 …`),
/// for logs and traces; [`ClientError::reason`] is the same text without the URL, for
/// whoever must not see the address (a model).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ClientError {
    /// No HTTP answer: connection refused, DNS, timeout, reset, TLS. Two of these in a
    /// row make a member unreachable (spec: call-member).
    Unreachable {
        /// The URL called.
        url: String,
        /// The transport error; a timeout names which one fired and its value.
        detail: String,
    },
    /// An HTTP answer whose status is not 200, e.g. 401 for a wrong token.
    HttpStatus {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of a JSON body (at most 300 bytes), or a one-line summary of any
        /// other ([`crate::net::summarise_body`]), scrubbed ([`A2aClient::scrub`]).
        body: String,
    },
    /// An RPC answered by a redirect (3xx), which the client does not follow.
    Redirect {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The `Location` it pointed to (at most 300 bytes, scrubbed), empty when
        /// none was sent.
        location: String,
    },
    /// A JSON-RPC error response, e.g. -32001 task not found.
    Rpc {
        /// The URL called.
        url: String,
        /// The error object (code, message, data).
        error: Box<RpcError>,
    },
    /// A 200 answer that is not a JSON-RPC response carrying what the method returns.
    Protocol {
        /// The URL called.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// The agent card says this client cannot call the agent: it speaks A2A 0.3 only,
    /// offers no JSON-RPC 1.x interface, or names its endpoint on another host.
    Incompatible {
        /// The card's URL.
        url: String,
        /// What the card says, without any URL.
        detail: String,
        /// The endpoint URLs the card names, for logs.
        named: Vec<String>,
    },
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Incompatible { url, named, .. } if !named.is_empty() => write!(
                f,
                "door {url} {} (the card names {})",
                self.reason(),
                named.join(", ")
            ),
            _ => write!(f, "door {} {}", self.url(), self.reason()),
        }
    }
}

impl std::error::Error for ClientError {}

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

    /// The URL called (the card's, for a card that could not be used).
    pub fn url(&self) -> &str {
        match self {
            ClientError::Unreachable { url, .. }
            | ClientError::HttpStatus { url, .. }
            | ClientError::Redirect { url, .. }
            | ClientError::Rpc { url, .. }
            | ClientError::Protocol { url, .. }
            | ClientError::Incompatible { url, .. } => url,
        }
    }

    /// What went wrong, without the URL or the token, as a clause after "the door":
    /// `is unreachable: timed out: …`, `answered http status 404 (…)`,
    /// `answered json-rpc error -32601: Method not found (…)`,
    /// `broke the protocol: …`, `cannot be called: the peer speaks A2A 0.3 …`.
    pub fn reason(&self) -> String {
        match self {
            ClientError::Unreachable { detail, .. } => format!("is unreachable: {detail}"),
            ClientError::HttpStatus { status, body, .. } => {
                format!("answered http status {status}{}", http_hint(*status, body))
            }
            ClientError::Redirect {
                status, location, ..
            } => format!(
                "answered http status {status}, a redirect to {}, and mur does not follow redirects: give that endpoint itself as the member's `door` in roster.yaml (and allow its host in capabilities.network.allow)",
                if location.is_empty() { "nowhere (no Location header)" } else { location }
            ),
            ClientError::Rpc { error, .. } => format!(
                "answered json-rpc error {}: {}{}",
                error.code,
                error.message,
                rpc_hint(error.code)
            ),
            ClientError::Protocol { detail, .. } => format!("broke the protocol: {detail}"),
            ClientError::Incompatible { detail, .. } => format!("cannot be called: {detail}"),
        }
    }
}

/// What a card request got.
struct CardAnswer {
    status: u16,
    /// The `ETag` header.
    etag: Option<String>,
    /// How long the card stays fresh ([`freshness`]).
    fresh: Duration,
    /// The `Location` header (of a redirect, which is not followed).
    location: Option<String>,
    body: String,
}

/// The card a client found, and when to read it again.
#[derive(Debug, Default)]
struct Discovery {
    /// The JSON-RPC endpoint in use; `None` until found.
    endpoint: Option<String>,
    /// The card's `ETag`, sent as `If-None-Match` when the card is read again.
    etag: Option<String>,
    /// Until when the endpoint is used without reading the card.
    fresh_until: Option<Instant>,
}

/// A client of one A2A door. Clone it freely: clones share the connection pool and
/// the agent card found.
#[derive(Debug, Clone)]
pub struct A2aClient {
    agent: ureq::Agent,
    url: String,
    card_url: String,
    auth: Option<String>,
    /// The token as configured (empty: none), for [`A2aClient::scrub`].
    token: Arc<str>,
    setting: Arc<str>,
    discovery: Option<Arc<Mutex<Discovery>>>,
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
            .timeout_connect(Some(config.connect_timeout.min(config.request_timeout)))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("mur/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let card_url = format!("{}{CARD_PATH}", origin(&config.url));
        A2aClient {
            agent,
            url: config.url,
            card_url,
            auth: (!config.token.is_empty()).then(|| format!("Bearer {}", config.token)),
            token: config.token.as_str().into(),
            setting: config.request_timeout_setting.into(),
            discovery: config
                .discover
                .then(|| Arc::new(Mutex::new(Discovery::default()))),
        }
    }

    /// The address the client was given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `text` (something a peer said) without this client's secrets and addresses: the
    /// token becomes [`SCRUBBED_TOKEN`]; the endpoint found, the address, the card's
    /// URL, the address's origin (`http://host:port`) and its `host:port`, matched in
    /// any ASCII case, become [`SCRUBBED_ADDRESS`] (module docs, "What a peer says").
    pub fn scrub(&self, text: &str) -> String {
        let mut out = self.scrub_token(text);
        let mut addresses: Vec<String> = vec![
            trim_slash(&self.url).to_string(),
            self.card_url.clone(),
            origin(&self.url).to_string(),
            authority(&self.url).to_string(),
        ];
        if let Some(e) = self.endpoint() {
            addresses.push(trim_slash(&e).to_string());
        }
        addresses.retain(|a| !a.is_empty());
        addresses.sort_by_key(|a| std::cmp::Reverse(a.len()));
        for a in &addresses {
            out = replace_ascii_ci(&out, a, SCRUBBED_ADDRESS);
        }
        out
    }

    /// `text` with the token made [`SCRUBBED_TOKEN`]: as configured, and as escaped
    /// in a quoted summary (`"…"` with `\\` and `\"`), should it hold such characters.
    fn scrub_token(&self, text: &str) -> String {
        if self.token.is_empty() {
            return text.to_string();
        }
        let mut out = text.replace(&*self.token, SCRUBBED_TOKEN);
        let escaped = self.token.escape_debug().to_string();
        if escaped != *self.token {
            out = out.replace(&escaped, SCRUBBED_TOKEN);
        }
        out
    }

    /// An error with every text a peer chose in it scrubbed ([`A2aClient::scrub`]);
    /// URLs (the address, or ones a card named) lose the token only.
    fn clean(&self, e: ClientError) -> ClientError {
        match e {
            ClientError::Unreachable { url, detail } => ClientError::Unreachable {
                url: self.scrub_token(&url),
                detail: self.scrub(&detail),
            },
            ClientError::HttpStatus { url, status, body } => ClientError::HttpStatus {
                url: self.scrub_token(&url),
                status,
                body: self.scrub(&body),
            },
            ClientError::Redirect {
                url,
                status,
                location,
            } => ClientError::Redirect {
                url: self.scrub_token(&url),
                status,
                location: self.scrub(&location),
            },
            ClientError::Rpc { url, mut error } => {
                error.message = self.scrub(&error.message);
                if let Some(d) = error.data.take() {
                    let text = self.scrub(&d.to_string());
                    error.data = Some(serde_json::from_str(&text).unwrap_or(Value::String(text)));
                }
                ClientError::Rpc {
                    url: self.scrub_token(&url),
                    error,
                }
            }
            ClientError::Protocol { url, detail } => ClientError::Protocol {
                url: self.scrub_token(&url),
                detail: self.scrub(&detail),
            },
            ClientError::Incompatible { url, detail, named } => ClientError::Incompatible {
                url: self.scrub_token(&url),
                detail: self.scrub(&detail),
                named: named.iter().map(|n| self.scrub_token(n)).collect(),
            },
        }
    }

    /// The JSON-RPC endpoint found so far: the address itself without discovery,
    /// `None` before the first RPC with it.
    pub fn endpoint(&self) -> Option<String> {
        match &self.discovery {
            None => Some(self.url.clone()),
            Some(d) => d.lock().unwrap_or_else(|e| e.into_inner()).endpoint.clone(),
        }
    }

    /// `SendMessage` with one text part and `metadata` on the message (an object; any
    /// other value is dropped). With `return_immediately` the door answers at once
    /// (SUBMITTED, WORKING or REJECTED); without, it blocks until the task is
    /// terminal, bounded by the request timeout.
    ///
    /// # Errors
    ///
    /// Any [`ClientError`]; a result that is not `{"task": …}` with a task carrying
    /// a non-empty `id` and a `status.state` (a Message, an A2A 0.3 `kind: task`, a
    /// bare task, another wrapper) is a [`ClientError::Protocol`] saying what was
    /// found or missing.
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

    /// `SendMessage` with a message built by the caller. Reads the agent card first
    /// when it is stale (module docs, "Discovery").
    ///
    /// # Errors
    ///
    /// As [`A2aClient::send_message`].
    pub fn send(&self, message: Message, return_immediately: bool) -> Result<Task, ClientError> {
        self.send_unscrubbed(message, return_immediately)
            .map_err(|e| self.clean(e))
    }

    fn send_unscrubbed(
        &self,
        message: Message,
        return_immediately: bool,
    ) -> Result<Task, ClientError> {
        let params = json!({
            "message": message,
            "configuration": {
                "acceptedOutputModes": ["text/plain"],
                "returnImmediately": return_immediately,
            },
        });
        let url = self.resolve(true)?;
        let result = self.call(&url, jsonrpc::SEND_MESSAGE, params)?;
        let method = jsonrpc::SEND_MESSAGE;
        let protocol = |detail: String| ClientError::Protocol {
            url: url.clone(),
            detail,
        };
        let Value::Object(mut m) = result else {
            return Err(protocol(format!(
                "{method} answered {}, not an object holding `task`",
                kind_of(&result)
            )));
        };
        if let Some(t) = m.remove("task") {
            return self.task(&url, method, t);
        }
        if m.contains_key("message") {
            return Err(protocol(format!(
                "{method} answered with a message, not a task"
            )));
        }
        if let Some(k) = m.get("kind").and_then(Value::as_str) {
            return Err(protocol(format!(
                "{method} answered an A2A 0.3 result (`kind: {}`) instead of `{{\"task\": …}}`: the peer speaks A2A 0.3, and mur speaks 1.0",
                cut(k, 40)
            )));
        }
        if m.contains_key("id") && m.contains_key("status") {
            return Err(protocol(format!(
                "{method} answered a bare task instead of `{{\"task\": …}}`"
            )));
        }
        Err(protocol(format!(
            "{method} answered no `task` ({})",
            keys_found(&m)
        )))
    }

    /// `GetTask` with the whole history.
    ///
    /// # Errors
    ///
    /// Any [`ClientError`]; an unknown id is [`ClientError::Rpc`] with -32001; an
    /// answer that is not a task, lacks its id or state, or names another task than
    /// `id`, is [`ClientError::Protocol`].
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
        let get = || {
            let url = self.resolve(false)?;
            let result = self.call(&url, jsonrpc::GET_TASK, Value::Object(params))?;
            self.task_named(&url, jsonrpc::GET_TASK, id, result)
        };
        get().map_err(|e| self.clean(e))
    }

    /// `CancelTask`: the task as the door left it.
    ///
    /// # Errors
    ///
    /// Any [`ClientError`]; -32001 unknown task, -32002 a task already terminal; an
    /// answer naming another task than `id` is [`ClientError::Protocol`].
    pub fn cancel_task(&self, id: &str) -> Result<Task, ClientError> {
        let cancel = || {
            let url = self.resolve(false)?;
            let result = self.call(&url, jsonrpc::CANCEL_TASK, json!({"id": id}))?;
            self.task_named(&url, jsonrpc::CANCEL_TASK, id, result)
        };
        cancel().map_err(|e| self.clean(e))
    }

    /// `GET /.well-known/agent-card.json` at the URL's origin (no token sent).
    ///
    /// # Errors
    ///
    /// [`ClientError::Unreachable`], [`ClientError::HttpStatus`], or
    /// [`ClientError::Protocol`] for a body that is not a card.
    pub fn agent_card(&self) -> Result<AgentCard, ClientError> {
        let read = || {
            let CardAnswer { status, body, .. } = self.get_card(None)?;
            if status != 200 {
                return Err(ClientError::HttpStatus {
                    url: self.card_url.clone(),
                    status,
                    body: body_text(&body),
                });
            }
            serde_json::from_str(&body).map_err(|e| ClientError::Protocol {
                url: self.card_url.clone(),
                detail: format!("agent card does not parse ({e}): {}", body_text(&body)),
            })
        };
        read().map_err(|e| self.clean(e))
    }

    /// The card request with `If-None-Match: etag` when given.
    fn get_card(&self, etag: Option<&str>) -> Result<CardAnswer, ClientError> {
        let mut req = self
            .agent
            .get(&self.card_url)
            .header("accept", "application/json");
        if let Some(t) = etag {
            req = req.header("if-none-match", t);
        }
        let mut resp = req.call().map_err(|e| self.transport(&self.card_url, e))?;
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let tag = header("etag");
        let fresh = freshness(header("cache-control").as_deref());
        let location = header("location");
        let body = self.read_body(&mut resp, &self.card_url)?;
        Ok(CardAnswer {
            status,
            etag: tag,
            fresh,
            location,
            body,
        })
    }

    /// The endpoint to call: the address without discovery; else the one found, read
    /// again from the card first when `for_send` and the card is stale, or when none
    /// was found yet.
    fn resolve(&self, for_send: bool) -> Result<String, ClientError> {
        let Some(d) = &self.discovery else {
            return Ok(self.url.clone());
        };
        let mut d = d.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = &d.endpoint {
            let fresh = d.fresh_until.is_some_and(|t| Instant::now() < t);
            if fresh || !for_send {
                return Ok(e.clone());
            }
        }
        let etag = d.endpoint.as_ref().and(d.etag.clone());
        let CardAnswer {
            status,
            etag: tag,
            fresh,
            location,
            body,
        } = self.get_card(etag.as_deref())?;
        let now = Instant::now();
        match status {
            304 if d.endpoint.is_some() => {
                d.fresh_until = Some(now + fresh);
                if tag.is_some() {
                    d.etag = tag;
                }
            }
            200 => {
                let card: Option<Value> = serde_json::from_str(&body).ok();
                let endpoint = match card.as_ref().filter(|c| c.is_object()) {
                    Some(c) => self.pick(c)?,
                    None => self.url.clone(),
                };
                d.endpoint = Some(endpoint);
                d.etag = tag;
                d.fresh_until = Some(now + fresh);
            }
            300..=399 => {
                // A redirect is not followed: the token goes to the address's origin
                // only. No card there: the address is the endpoint.
                log::warn!(
                    "the agent card at {} answered http status {status}, a redirect to {}, which mur does not follow; calling {} as the endpoint",
                    self.card_url,
                    self.scrub_token(&cut(location.as_deref().unwrap_or("nowhere"), QUOTE_BYTES)),
                    self.url
                );
                d.endpoint = Some(self.url.clone());
                d.etag = None;
                d.fresh_until = Some(now + NO_CARD_FRESHNESS);
            }
            _ => {
                // No card at this origin: the address is the endpoint.
                log::debug!(
                    "no agent card at {} (http status {status}); calling {} as the endpoint",
                    self.card_url,
                    self.url
                );
                d.endpoint = Some(self.url.clone());
                d.etag = None;
                d.fresh_until = Some(now + NO_CARD_FRESHNESS);
            }
        }
        Ok(d.endpoint.clone().unwrap_or_else(|| self.url.clone()))
    }

    /// The endpoint a card names (module docs, "Discovery").
    fn pick(&self, card: &Value) -> Result<String, ClientError> {
        let interfaces: Vec<(String, String, String)> = card
            .get("supportedInterfaces")
            .or_else(|| card.get("supported_interfaces"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|i| {
                        let s = |k: &str, alt: &str| {
                            i.get(k)
                                .or_else(|| i.get(alt))
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .trim()
                                .to_string()
                        };
                        let url = s("url", "url");
                        (!url.is_empty()).then(|| {
                            (
                                self.absolute(&url),
                                s("protocolBinding", "protocol_binding"),
                                s("protocolVersion", "protocol_version"),
                            )
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let jsonrpc =
            |b: &str| b.eq_ignore_ascii_case("JSONRPC") || b.eq_ignore_ascii_case("JSON-RPC");
        let major = |v: &str| {
            v.trim_start_matches(['v', 'V'])
                .split('.')
                .next()
                .unwrap_or("")
                .to_string()
        };
        let ones: Vec<&String> = interfaces
            .iter()
            .filter(|(_, b, v)| jsonrpc(b) && major(v) == "1")
            .map(|(u, _, _)| u)
            .collect();
        let unversioned: Vec<&String> = interfaces
            .iter()
            .filter(|(_, b, v)| jsonrpc(b) && v.is_empty())
            .map(|(u, _, _)| u)
            .collect();
        let top_version = card
            .get("protocolVersion")
            .or_else(|| card.get("protocol_version"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let named: Vec<String> = interfaces.iter().map(|(u, _, _)| u.clone()).collect();
        let incompatible = |detail: String| ClientError::Incompatible {
            url: self.card_url.clone(),
            detail,
            named: named.clone(),
        };
        let candidates = if !ones.is_empty() {
            ones
        } else if major(&top_version) == "0" || interfaces.iter().any(|(_, _, v)| major(v) == "0") {
            let v = if major(&top_version) == "0" {
                top_version.clone()
            } else {
                interfaces
                    .iter()
                    .find(|(_, _, v)| major(v) == "0")
                    .map(|(_, _, v)| v.clone())
                    .unwrap_or_default()
            };
            return Err(incompatible(format!(
                "the peer speaks A2A 0.3: its agent card names protocol version {} and no 1.x JSON-RPC interface, and mur speaks A2A 1.0 only",
                cut(&v, 20)
            )));
        } else if !unversioned.is_empty() {
            unversioned
        } else if !interfaces.is_empty() {
            let offered: Vec<String> = interfaces
                .iter()
                .take(5)
                .map(|(_, b, v)| {
                    let b = if b.is_empty() { "(no binding)" } else { b };
                    cut(format!("{b} {v}").trim(), 40)
                })
                .collect();
            return Err(incompatible(format!(
                "its agent card offers no A2A 1.x JSON-RPC interface (it offers {}), and mur calls JSON-RPC only",
                offered.join(", ")
            )));
        } else {
            // A card that names no interface says nothing about the endpoint.
            return Ok(self.url.clone());
        };
        let same = |u: &str| trim_slash(u) == trim_slash(&self.url);
        if candidates.iter().any(|u| same(u)) {
            return Ok(self.url.clone());
        }
        let chosen = candidates
            .first()
            .map(|u| u.to_string())
            .unwrap_or_else(|| self.url.clone());
        if !same_origin(&chosen, &self.url) {
            return Err(incompatible(
                "its agent card names the JSON-RPC endpoint at another origin (scheme, host or port) than the member's address; give that endpoint itself as the address (and allow its host in capabilities.network.allow)"
                    .to_string(),
            ));
        }
        Ok(chosen)
    }

    /// An interface URL made absolute against the address: a path is joined to the
    /// origin, an unspecified host (`0.0.0.0`, `[::]`) becomes the address's authority.
    fn absolute(&self, url: &str) -> String {
        if url.starts_with('/') {
            return format!("{}{url}", origin(&self.url));
        }
        let h = host(url);
        if h == "0.0.0.0" || h == "::" {
            let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
            let path = rest.find(['/', '?', '#']).map_or("", |i| &rest[i..]);
            let (_, port) = split_port(authority(url));
            let (address_host, _) = split_port(authority(&self.url));
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            return format!("{scheme}://{address_host}{port}{path}");
        }
        url.to_string()
    }

    /// One JSON-RPC call to `url`; the `result` value.
    fn call(&self, url: &str, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = Value::String(format!(
            "rpc_{}",
            ulid::Ulid::new().to_string().to_lowercase()
        ));
        let payload = jsonrpc::request(&id, method, params).to_string();
        let mut req = self
            .agent
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .header(VERSION_HEADER, PROTOCOL_VERSION);
        if let Some(a) = &self.auth {
            req = req.header("authorization", a);
        }
        let mut resp = req
            .send(payload.as_bytes())
            .map_err(|e| self.transport(url, e))?;
        let status = resp.status().as_u16();
        if (300..400).contains(&status) {
            let location = resp
                .headers()
                .get("location")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            return Err(ClientError::Redirect {
                url: url.to_string(),
                status,
                location: cut(location.trim(), QUOTE_BYTES),
            });
        }
        let body = self.read_body(&mut resp, url)?;
        let protocol = |detail: String| ClientError::Protocol {
            url: url.to_string(),
            detail,
        };
        if status != 200 {
            return Err(ClientError::HttpStatus {
                url: url.to_string(),
                status,
                body: body_text(&body),
            });
        }
        let v: Value = serde_json::from_str(&body).map_err(|e| {
            protocol(format!(
                "response is not JSON ({e}): {}",
                crate::net::summarise_body(&body)
            ))
        })?;
        let Value::Object(mut obj) = v else {
            return Err(protocol(format!(
                "response is not a JSON-RPC object: {}",
                quote(&body)
            )));
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(protocol(format!(
                "response is not JSON-RPC 2.0: {}",
                quote(&body)
            )));
        }
        if let Some(e) = obj.get("error") {
            return match RpcError::from_value(e) {
                Some(error) => Err(ClientError::Rpc {
                    url: url.to_string(),
                    error: Box::new(error),
                }),
                None => Err(protocol(format!(
                    "malformed error object: {}",
                    quote(&body)
                ))),
            };
        }
        if obj.get("id") != Some(&id) {
            return Err(protocol(format!(
                "response id {} does not match request id {id}",
                obj.get("id")
                    .map_or("(none)".to_string(), |v| cut(&v.to_string(), 80))
            )));
        }
        obj.remove("result")
            .ok_or_else(|| protocol("response has neither result nor error".to_string()))
    }

    /// The task `method` answered, checked for the fields a caller needs.
    fn task(&self, url: &str, method: &str, v: Value) -> Result<Task, ClientError> {
        let protocol = |detail: String| ClientError::Protocol {
            url: url.to_string(),
            detail,
        };
        if let Some(missing) = task_shape(&v) {
            return Err(protocol(format!("{method} answered {missing}")));
        }
        serde_json::from_value(v).map_err(|e| {
            protocol(format!(
                "{method} answered a task that does not parse: {}",
                cut(&e.to_string(), 200)
            ))
        })
    }

    /// The task `method` answered for task `id`: another task's id is a protocol
    /// error, as a missing id is.
    fn task_named(&self, url: &str, method: &str, id: &str, v: Value) -> Result<Task, ClientError> {
        if v.as_object()
            .is_some_and(|o| o.len() == 1 && o.contains_key("task"))
        {
            return Err(ClientError::Protocol {
                url: url.to_string(),
                detail: format!("{method} answered `{{\"task\": …}}`; a task is answered bare"),
            });
        }
        let task = self.task(url, method, v)?;
        if task.id != id {
            return Err(ClientError::Protocol {
                url: url.to_string(),
                detail: format!(
                    "{method} asked for task {} and was answered task {}",
                    quote(id),
                    quote(&task.id)
                ),
            });
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
                detail: crate::net::describe(&other, &self.agent, &self.setting),
            },
        }
    }
}

/// What a task value lacks, as the end of "GetTask answered …"; `None` when it has a
/// non-empty string `id` and a `status` object with a `state`.
fn task_shape(v: &Value) -> Option<String> {
    let Value::Object(o) = v else {
        return Some(format!("{}, not a task", kind_of(v)));
    };
    match o.get("id") {
        None => return Some("a task without `id`".to_string()),
        Some(Value::String(s)) if s.is_empty() => {
            return Some("a task with an empty `id`".to_string())
        }
        Some(Value::String(_)) => {}
        Some(other) => return Some(format!("a task whose `id` is {}", kind_of(other))),
    }
    match o.get("status") {
        None => Some("a task without `status`".to_string()),
        Some(Value::Object(st)) if !st.contains_key("state") => {
            Some("a task without `status.state`".to_string())
        }
        Some(Value::Object(_)) => None,
        Some(other) => Some(format!("a task whose `status` is {}", kind_of(other))),
    }
}

/// `a string`, `an array`, `null`, … for an error text.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `found keys a, b, c` (at most 5, each cut), or `found an empty object`.
fn keys_found(m: &Map<String, Value>) -> String {
    if m.is_empty() {
        return "found an empty object".to_string();
    }
    let keys: Vec<String> = m
        .keys()
        .take(5)
        .map(|k| format!("`{}`", cut(k, 40)))
        .collect();
    let more = if m.len() > 5 { ", …" } else { "" };
    format!("found {}{more}", keys.join(", "))
}

/// How long a card stays fresh: `max-age` of `Cache-Control`; none, `no-cache`,
/// `no-store` or a bad value: not at all.
fn freshness(cache_control: Option<&str>) -> Duration {
    let Some(cc) = cache_control else {
        return Duration::ZERO;
    };
    let mut age = None;
    for d in cc.split(',').map(str::trim) {
        let lower = d.to_ascii_lowercase();
        if lower == "no-cache" || lower == "no-store" {
            return Duration::ZERO;
        }
        if let Some(v) = lower.strip_prefix("max-age=") {
            age = v.trim_matches('"').parse::<u64>().ok();
        }
    }
    Duration::from_secs(age.unwrap_or(0).min(86_400))
}

fn trim_slash(u: &str) -> &str {
    u.trim_end_matches('/')
}

/// The authority of a URL (`host:port`), userinfo dropped.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let a = rest.split(['/', '?', '#']).next().unwrap_or("");
    a.rsplit_once('@').map_or(a, |(_, h)| h)
}

/// An authority split into its host as written (brackets kept) and its port.
fn split_port(a: &str) -> (&str, Option<&str>) {
    if a.starts_with('[') {
        match a.find(']') {
            Some(i) => (&a[..=i], a[i + 1..].strip_prefix(':')),
            None => (a, None),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    }
}

/// The host of a URL, lowercase, without brackets.
fn host(url: &str) -> String {
    let a = authority(url);
    let h = if let Some(v6) = a.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        a.split(':').next().unwrap_or("")
    };
    h.to_ascii_lowercase()
}

/// Whether two URLs have the same origin: scheme and host equal (ASCII case aside)
/// and the same port, a missing one being the scheme's default (80, 443). Two
/// loopback addresses, or a name and its address, are different hosts.
fn same_origin(a: &str, b: &str) -> bool {
    let parts = |u: &str| {
        let scheme = u
            .split_once("://")
            .map_or("", |(s, _)| s)
            .to_ascii_lowercase();
        let port = split_port(authority(u))
            .1
            .map(str::to_string)
            .unwrap_or_else(|| match scheme.as_str() {
                "https" => "443".to_string(),
                _ => "80".to_string(),
            });
        (scheme, host(u), port)
    };
    parts(a) == parts(b)
}

/// `text` with every ASCII-case-insensitive occurrence of `needle` made `with`.
fn replace_ascii_ci(text: &str, needle: &str, with: &str) -> String {
    if needle.is_empty() {
        return text.to_string();
    }
    let (hay, pat) = (text.to_ascii_lowercase(), needle.to_ascii_lowercase());
    // ASCII lowercasing keeps every byte offset, so offsets in `hay` are `text`'s.
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (i, _) in hay.match_indices(&pat) {
        if i < last {
            continue;
        }
        out.push_str(&text[last..i]);
        out.push_str(with);
        last = i + pat.len();
    }
    out.push_str(&text[last..]);
    out
}

/// An unexpected body for an error: a JSON one quoted (at most [`QUOTE_BYTES`]), any
/// other summarised in one line ([`crate::net::summarise_body`]): an HTML error page
/// is never pasted whole.
fn body_text(body: &str) -> String {
    if body.trim().is_empty() {
        return String::new();
    }
    match serde_json::from_str::<Value>(body) {
        Ok(_) => quote(body),
        Err(_) => crate::net::summarise_body(body),
    }
}

/// At most `n` bytes of `s`, cut on a character boundary, `…` marking a cut.
fn cut(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
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

/// The tail of an [`ClientError::Rpc`] reason: what a code means for a caller.
fn rpc_hint(code: i64) -> &'static str {
    match code {
        jsonrpc::METHOD_NOT_FOUND => " (the peer does not know this A2A 1.0 method: it may speak A2A 0.3, whose methods are `message/send` and `tasks/get`; mur speaks 1.0)",
        jsonrpc::VERSION_NOT_SUPPORTED => " (the peer does not speak A2A 1.0, the version mur sends)",
        _ => "",
    }
}

/// The tail of an [`ClientError::HttpStatus`] message: what a status means for a
/// caller, then the start of the body when there is one.
fn http_hint(status: u16, body: &str) -> String {
    let meaning = match status {
        401 => " (the door refused the bearer token: check the member's `token` in roster.yaml)",
        403 => " (the door forbids this caller)",
        404 => " (no A2A endpoint at this URL: check the member's `door` address)",
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

    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// One request a fake peer got.
    #[derive(Debug, Clone)]
    struct Req {
        method: String,
        path: String,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Req {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
        fn rpc_id(&self) -> Value {
            serde_json::from_str::<Value>(&self.body).unwrap()["id"].clone()
        }
    }

    type Answer = (u16, Vec<(&'static str, String)>, String);

    /// A fake HTTP peer on loopback: answers each request with `answer` (one request per
    /// connection) and keeps every request it got.
    struct Fake {
        base: String,
        log: Arc<Mutex<Vec<Req>>>,
        stop: Arc<AtomicBool>,
    }

    impl Fake {
        fn start(answer: impl Fn(&Req, &str) -> Answer + Send + Sync + 'static) -> Fake {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let base = format!("http://{}", l.local_addr().unwrap());
            let log = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let (log2, stop2, base2) = (log.clone(), stop.clone(), base.clone());
            std::thread::spawn(move || {
                for conn in l.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(mut conn) = conn else { continue };
                    let mut r = BufReader::new(conn.try_clone().unwrap());
                    let mut line = String::new();
                    if r.read_line(&mut line).is_err() {
                        continue;
                    }
                    let mut it = line.split_whitespace();
                    let method = it.next().unwrap_or("").to_string();
                    let path = it.next().unwrap_or("").to_string();
                    let mut headers = Vec::new();
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.trim().split_once(':') {
                            headers.push((k.trim().to_string(), v.trim().to_string()));
                        }
                    }
                    let len = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    let mut body = vec![0; len];
                    let _ = r.read_exact(&mut body);
                    let req = Req {
                        method,
                        path,
                        headers,
                        body: String::from_utf8_lossy(&body).into_owned(),
                    };
                    log2.lock().unwrap().push(req.clone());
                    let (status, hs, body) = answer(&req, &base2);
                    if status == 0 {
                        // Never answer: hold the connection open.
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_secs(30));
                            drop(conn);
                        });
                        continue;
                    }
                    let mut out = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                        body.len()
                    );
                    for (k, v) in hs {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    out.push_str("\r\n");
                    out.push_str(&body);
                    let _ = conn.write_all(out.as_bytes());
                }
            });
            Fake { base, log, stop }
        }

        fn requests(&self) -> Vec<(String, String)> {
            self.log
                .lock()
                .unwrap()
                .iter()
                .map(|r| (r.method.clone(), r.path.clone()))
                .collect()
        }
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            let _ = std::net::TcpStream::connect(self.base.trim_start_matches("http://"));
        }
    }

    fn card(interfaces: Value) -> String {
        json!({"name": "peer", "supportedInterfaces": interfaces}).to_string()
    }

    fn rpc_result(req: &Req, result: Value) -> Answer {
        let body = json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": result}).to_string();
        (200, vec![("content-type", "application/json".into())], body)
    }

    fn a_task(id: &str, state: &str) -> Value {
        json!({"id": id, "contextId": "c", "status": {"state": state}})
    }

    /// A peer like an a2a-sdk deployment: the card names `/a2a/jsonrpc`; the card
    /// carries `ETag: "v1"` and `cache_control`, and answers 304 to `If-None-Match`.
    fn sdk_like(cache_control: &'static str) -> Fake {
        Fake::start(
            move |req, base| match (req.method.as_str(), req.path.as_str()) {
                ("GET", CARD_PATH) if req.header("if-none-match") == Some("\"v1\"") => {
                    (304, vec![("etag", "\"v1\"".into())], String::new())
                }
                ("GET", CARD_PATH) => (
                    200,
                    vec![
                        ("etag", "\"v1\"".into()),
                        ("cache-control", cache_control.into()),
                    ],
                    card(json!([
                        {"url": format!("{base}/a2a/grpc"), "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                        {"url": format!("{base}/a2a/v03"), "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                        {"url": format!("{base}/a2a/jsonrpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                    ])),
                ),
                ("POST", "/a2a/jsonrpc") => {
                    let v: Value = serde_json::from_str(&req.body).unwrap();
                    match v["method"].as_str() {
                        Some("SendMessage") => {
                            rpc_result(req, json!({"task": a_task("t1", "TASK_STATE_WORKING")}))
                        }
                        _ => rpc_result(req, a_task("t1", "TASK_STATE_COMPLETED")),
                    }
                }
                _ => (404, vec![], String::new()),
            },
        )
    }

    #[test]
    fn a_base_address_finds_the_json_rpc_endpoint_on_the_card_and_revalidates_it_by_etag() {
        let peer = sdk_like("no-cache");
        let c = A2aClient::new(peer.base.clone(), "tok");
        assert_eq!(c.endpoint(), None);
        let t = c.send_message("hi", None, true).unwrap();
        assert_eq!(t.id, "t1");
        assert_eq!(c.endpoint().unwrap(), format!("{}/a2a/jsonrpc", peer.base));
        c.get_task("t1").unwrap();
        // a clone shares the card found
        c.clone().send_message("again", None, true).unwrap();
        let card = |r: &(String, String)| r.1 == CARD_PATH;
        assert_eq!(
            peer.requests(),
            [
                ("GET".into(), CARD_PATH.into()),
                ("POST".into(), "/a2a/jsonrpc".into()),
                ("POST".into(), "/a2a/jsonrpc".into()),
                ("GET".into(), CARD_PATH.into()),
                ("POST".into(), "/a2a/jsonrpc".into()),
            ]
        );
        let log = peer.log.lock().unwrap().clone();
        let cards: Vec<&Req> = log
            .iter()
            .filter(|r| card(&(r.method.clone(), r.path.clone())))
            .collect();
        assert_eq!(cards[0].header("if-none-match"), None);
        assert_eq!(cards[1].header("if-none-match"), Some("\"v1\""));
        assert!(cards.iter().all(|r| r.header("authorization").is_none()));
        assert!(log
            .iter()
            .filter(|r| r.method == "POST")
            .all(|r| r.header("authorization") == Some("Bearer tok")));
    }

    #[test]
    fn a_fresh_card_is_not_read_again() {
        let peer = sdk_like("public, max-age=300");
        let c = A2aClient::new(format!("{}/", peer.base), "tok");
        c.send_message("hi", None, true).unwrap();
        c.send_message("hi", None, true).unwrap();
        let cards = peer.requests().iter().filter(|r| r.1 == CARD_PATH).count();
        assert_eq!(cards, 1);
    }

    #[test]
    fn an_address_that_is_the_endpoint_stays_the_endpoint() {
        // The card names the address among others: the address is kept.
        let peer = Fake::start(|req, base| match req.path.as_str() {
            CARD_PATH => (
                200,
                vec![],
                card(json!([
                    {"url": format!("{base}/other"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                    {"url": format!("{base}/rpc/"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                ])),
            ),
            _ => rpc_result(req, json!({"task": a_task("t1", "TASK_STATE_WORKING")})),
        });
        let c = A2aClient::new(format!("{}/rpc", peer.base), "");
        c.send_message("hi", None, true).unwrap();
        assert_eq!(peer.requests()[1], ("POST".into(), "/rpc".into()));
        // No card at all (404): the address is called.
        let bare = Fake::start(|req, _| match req.path.as_str() {
            CARD_PATH => (404, vec![], "not here".into()),
            _ => rpc_result(req, json!({"task": a_task("t9", "TASK_STATE_WORKING")})),
        });
        let c = A2aClient::new(format!("{}/jsonrpc", bare.base), "");
        assert_eq!(c.send_message("hi", None, true).unwrap().id, "t9");
        assert_eq!(bare.requests()[1], ("POST".into(), "/jsonrpc".into()));
        // Without discovery no card is read.
        let c = A2aClient::with_config(ClientConfig {
            discover: false,
            ..ClientConfig::new(format!("{}/jsonrpc", bare.base), "")
        });
        c.send_message("hi", None, true).unwrap();
        assert_eq!(bare.requests()[2], ("POST".into(), "/jsonrpc".into()));
    }

    #[test]
    fn a_card_naming_only_a2a_0_3_is_one_clear_error_and_nothing_is_posted() {
        for card_body in [
            // a 0.3 card: top-level url and protocolVersion, no supportedInterfaces
            json!({"name": "old", "url": "http://127.0.0.1:1/", "protocolVersion": "0.3.0",
                   "preferredTransport": "JSONRPC"})
            .to_string(),
            card(
                json!([{"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]),
            ),
        ] {
            let peer = Fake::start(move |_, _| (200, vec![], card_body.clone()));
            let c = A2aClient::new(peer.base.clone(), "");
            let e = c.send_message("hi", None, true).unwrap_err();
            assert!(matches!(e, ClientError::Incompatible { .. }), "{e:?}");
            assert!(
                e.reason().starts_with("cannot be called: the peer speaks A2A 0.3: its agent card names protocol version 0.3"),
                "{}",
                e.reason()
            );
            assert!(!e.reason().contains("127.0.0.1"), "{}", e.reason());
            assert!(peer.requests().iter().all(|r| r.0 == "GET"));
        }
    }

    #[test]
    fn a_card_without_json_rpc_1_or_on_another_host_is_refused() {
        let peer = Fake::start(|_, _| {
            (
                200,
                vec![],
                card(json!([
                    {"url": "http://127.0.0.1:1/g", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                    {"url": "http://127.0.0.1:1/h", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                ])),
            )
        });
        let e = A2aClient::new(peer.base.clone(), "")
            .send_message("hi", None, true)
            .unwrap_err();
        assert_eq!(e.reason(), "cannot be called: its agent card offers no A2A 1.x JSON-RPC interface (it offers GRPC 1.0, HTTP+JSON 1.0), and mur calls JSON-RPC only");
        let far = Fake::start(|_, _| {
            (
                200,
                vec![],
                card(json!([
                    {"url": "http://agents.example.org/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                ])),
            )
        });
        let e = A2aClient::new(far.base.clone(), "")
            .send_message("hi", None, true)
            .unwrap_err();
        assert!(
            e.reason()
                .contains("at another origin (scheme, host or port) than the member's address"),
            "{e}"
        );
        assert!(!e.reason().contains("example.org"), "{}", e.reason());
        assert!(
            e.to_string().contains("http://agents.example.org/a2a"),
            "{e}"
        );
    }

    #[test]
    fn method_not_found_is_not_retried_and_says_what_it_may_mean() {
        let peer = Fake::start(|req, _| match req.path.as_str() {
            CARD_PATH => (404, vec![], String::new()),
            _ => {
                let body = json!({"jsonrpc": "2.0", "id": req.rpc_id(), "error": {"code": -32601, "message": "Method not found"}}).to_string();
                (200, vec![], body)
            }
        });
        let c = A2aClient::new(peer.base.clone(), "");
        let e = c.send_message("hi", None, true).unwrap_err();
        assert_eq!(e.rpc_code(), Some(-32601));
        assert_eq!(e.reason(), "answered json-rpc error -32601: Method not found (the peer does not know this A2A 1.0 method: it may speak A2A 0.3, whose methods are `message/send` and `tasks/get`; mur speaks 1.0)");
        assert_eq!(peer.requests().iter().filter(|r| r.0 == "POST").count(), 1);
    }

    #[test]
    fn results_of_another_shape_get_one_short_error_saying_what_was_found() {
        let cases: Vec<(Value, &str)> = vec![
            (json!({"kind": "task", "id": "t", "status": {"state": "working"}}),
             "SendMessage answered an A2A 0.3 result (`kind: task`) instead of `{\"task\": …}`: the peer speaks A2A 0.3, and mur speaks 1.0"),
            (a_task("t", "TASK_STATE_WORKING"), "SendMessage answered a bare task instead of `{\"task\": …}`"),
            (json!({"Task": {}, "result": 1}), "SendMessage answered no `task` (found `Task`, `result`)"),
            (json!({"task": {"contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}}), "SendMessage answered a task without `id`"),
            (json!({"task": {"id": "", "status": {"state": "TASK_STATE_WORKING"}}}), "SendMessage answered a task with an empty `id`"),
            (json!({"task": {"id": "t"}}), "SendMessage answered a task without `status`"),
            (json!({"task": {"id": "t", "status": {}}}), "SendMessage answered a task without `status.state`"),
            (json!({"task": {"id": "t", "status": "done"}}), "SendMessage answered a task whose `status` is a string"),
            (json!({"message": {}}), "SendMessage answered with a message, not a task"),
            (json!([1]), "SendMessage answered an array, not an object holding `task`"),
        ];
        for (result, want) in cases {
            let r = result.clone();
            let peer = Fake::start(move |req, _| match req.path.as_str() {
                CARD_PATH => (404, vec![], String::new()),
                _ => rpc_result(req, r.clone()),
            });
            let e = A2aClient::new(peer.base.clone(), "")
                .send_message("hi", None, true)
                .unwrap_err();
            assert_eq!(
                e.reason(),
                format!("broke the protocol: {want}"),
                "{result}"
            );
        }
        // GetTask answers a task bare.
        let peer = Fake::start(|req, _| match req.path.as_str() {
            CARD_PATH => (404, vec![], String::new()),
            _ => rpc_result(req, json!({"task": a_task("t", "TASK_STATE_WORKING")})),
        });
        let e = A2aClient::new(peer.base.clone(), "")
            .get_task("t")
            .unwrap_err();
        assert_eq!(
            e.reason(),
            "broke the protocol: GetTask answered `{\"task\": …}`; a task is answered bare"
        );
    }

    #[test]
    fn a_request_timeout_names_itself_its_value_and_its_setting() {
        let peer = Fake::start(|req, _| match req.path.as_str() {
            CARD_PATH => (404, vec![], String::new()),
            _ => (0, vec![], String::new()),
        });
        let c = A2aClient::with_config(ClientConfig {
            request_timeout: Duration::from_secs(1),
            request_timeout_setting: "members.slow.request_timeout_secs in roster.yaml".into(),
            ..ClientConfig::new(peer.base.clone(), "")
        });
        let e = c.send_message("hi", None, true).unwrap_err();
        assert!(e.is_unreachable(), "{e}");
        assert_eq!(
            e.reason(),
            "is unreachable: timed out: no answer within the request timeout of 1s (members.slow.request_timeout_secs in roster.yaml)"
        );
        assert!(!e.to_string().contains("timeout: global"), "{e}");
    }

    #[test]
    fn an_unspecified_card_host_is_the_address_host() {
        let peer = Fake::start(|req, base| match req.path.as_str() {
            CARD_PATH => {
                let port = base.rsplit(':').next().unwrap().to_string();
                (
                    200,
                    vec![],
                    card(
                        json!([{"url": format!("http://0.0.0.0:{port}/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]),
                    ),
                )
            }
            _ => rpc_result(req, json!({"task": a_task("t1", "TASK_STATE_WORKING")})),
        });
        let c = A2aClient::new(peer.base.clone(), "");
        c.send_message("hi", None, true).unwrap();
        assert_eq!(c.endpoint().unwrap(), format!("{}/rpc", peer.base));
    }

    #[test]
    fn a_card_naming_another_loopback_address_or_port_is_refused_and_gets_no_token() {
        for named in [
            "http://127.0.0.2:{port}/rpc",
            "http://127.0.0.1:1/rpc",
            "https://127.0.0.1:{port}/rpc",
            "http://localhost:{port}/rpc",
        ] {
            let peer = Fake::start(move |req, base| match req.path.as_str() {
                CARD_PATH => {
                    let port = base.rsplit(':').next().unwrap().to_string();
                    let url = named.replace("{port}", &port);
                    (
                        200,
                        vec![],
                        card(
                            json!([{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]),
                        ),
                    )
                }
                _ => rpc_result(req, json!({"task": a_task("t1", "TASK_STATE_WORKING")})),
            });
            let e = A2aClient::new(peer.base.clone(), "tok")
                .send_message("hi", None, true)
                .unwrap_err();
            assert!(
                matches!(e, ClientError::Incompatible { .. }),
                "{named}: {e:?}"
            );
            assert!(
                e.reason()
                    .contains("give that endpoint itself as the address"),
                "{e}"
            );
            assert!(peer.requests().iter().all(|r| r.0 == "GET"), "{named}");
        }
        assert!(same_origin("http://H:80/a", "http://h/b"));
        assert!(same_origin("https://h/a", "https://h:443"));
        assert!(!same_origin("http://h:8080/", "http://h/"));
        assert!(!same_origin("http://[::1]:5/", "http://127.0.0.1:5/"));
    }

    #[test]
    fn a_card_redirect_is_not_followed_and_the_address_is_called() {
        let other = Fake::start(|req, _| {
            rpc_result(req, json!({"task": a_task("evil", "TASK_STATE_WORKING")}))
        });
        let to = format!("{}/.well-known/agent-card.json", other.base);
        let peer = Fake::start(move |req, _| match req.path.as_str() {
            CARD_PATH => (302, vec![("location", to.clone())], String::new()),
            _ => rpc_result(req, json!({"task": a_task("t1", "TASK_STATE_WORKING")})),
        });
        let c = A2aClient::new(peer.base.clone(), "tok");
        assert_eq!(c.send_message("hi", None, true).unwrap().id, "t1");
        assert_eq!(c.endpoint().unwrap(), peer.base);
        assert!(other.requests().is_empty(), "{:?}", other.requests());
    }

    #[test]
    fn an_rpc_redirect_names_where_it_points_and_is_not_followed() {
        let other = Fake::start(|req, _| {
            rpc_result(req, json!({"task": a_task("evil", "TASK_STATE_WORKING")}))
        });
        let to = format!("{}/rpc", other.base);
        let peer = Fake::start(move |req, _| match req.path.as_str() {
            CARD_PATH => (404, vec![], String::new()),
            _ => (307, vec![("location", to.clone())], String::new()),
        });
        let e = A2aClient::new(peer.base.clone(), "tok")
            .send_message("hi", None, true)
            .unwrap_err();
        assert_eq!(
            e.reason(),
            format!("answered http status 307, a redirect to {}/rpc, and mur does not follow redirects: give that endpoint itself as the member's `door` in roster.yaml (and allow its host in capabilities.network.allow)", other.base)
        );
        assert!(other.requests().is_empty());
    }

    #[test]
    fn what_a_peer_says_loses_the_token_and_the_door_address_and_html_is_summarised() {
        let peer = Fake::start(|req, base| {
            match req.path.as_str() {
            CARD_PATH => (404, vec![], String::new()),
            _ if req.body.contains("GetTask") => (
                500,
                vec![("content-type", "text/plain".into())],
                format!("Internal error contacting {} with {}", base.to_uppercase(), req.header("authorization").unwrap_or("")),
            ),
            _ if req.body.contains("CancelTask") => (
                502,
                vec![("content-type", "text/html".into())],
                "<html><head><title>502 Bad Gateway</title></head><body>nginx secret-internal-host 10.1.2.3</body></html>".into(),
            ),
            _ => {
                let msg = format!("internal at {base}/rpc ({}) token={}", base.trim_start_matches("http://"), req.header("authorization").unwrap_or(""));
                (200, vec![], json!({"jsonrpc": "2.0", "id": req.rpc_id(), "error": {"code": -32000, "message": msg}}).to_string())
            }
        }
        });
        let c = A2aClient::new(peer.base.clone(), "s3cr\"et");
        let e = c.send_message("hi", None, true).unwrap_err();
        assert_eq!(e.reason(), "answered json-rpc error -32000: internal at [door address]/rpc ([door address]) token=Bearer [token]");
        let e = c.get_task("t").unwrap_err();
        assert_eq!(e.reason(), "answered http status 500: a text body starting \"Internal error contacting [door address] with Bearer [token]\" (N bytes)".replace("N", &(format!("Internal error contacting {} with Bearer s3cr\"et", peer.base).len()).to_string()));
        assert!(!e.to_string().contains("s3cr"), "{e}");
        let e = c.cancel_task("t").unwrap_err();
        assert_eq!(
            e.reason(),
            "answered http status 502: an HTML page titled \"502 Bad Gateway\" (104 bytes)"
        );
        assert_eq!(
            c.scrub(&format!("{}/a2a and 127.0.0.1", peer.base)),
            "[door address]/a2a and 127.0.0.1"
        );
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
