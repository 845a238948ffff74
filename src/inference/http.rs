//! HTTP plumbing shared by the network drivers: the configured agent, the credential
//! read at call time, and one POST whose failures are classified for [`super::retry`].
//!
//! A streaming choice asks for server-sent events; the answer is read by its
//! `Content-Type`, not by what was asked: `text/event-stream` is handed to the driver
//! event by event ([`Answer::Stream`]), anything else is read whole as JSON
//! ([`Answer::Json`]), since many OpenAI-compatible servers ignore `stream`.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::retry::{self, summarise_body, Backoff, Failure, Outcome, RetryPolicy};
use super::sse::{DeadlinePassed, Event, SseReader};
use super::{AttemptSink, DriverError, Response};
use crate::manifest::types::{Credential, DriverChoice};

/// The connect timeout of every driver call.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest response body read, in bytes.
pub(crate) const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// One agent per driver, connect timeout [`CONNECT_TIMEOUT`], error statuses returned
/// as responses. `request_timeout_secs` (0: none) bounds the whole request when
/// `stream` is `false`; when streaming, it bounds the wait for the answer to start and
/// each silence within it, so a long generation that keeps sending is never cut (the
/// wait between events that bring progress is bounded by [`Events`]).
pub(crate) fn agent(request_timeout_secs: u64, stream: bool) -> ureq::Agent {
    let t = (request_timeout_secs > 0).then(|| Duration::from_secs(request_timeout_secs));
    let b = ureq::Agent::config_builder()
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .http_status_as_error(false)
        .user_agent(concat!("mur/", env!("CARGO_PKG_VERSION")));
    let b = if stream {
        b.timeout_recv_response(t).timeout_per_read(t)
    } else {
        b.timeout_global(t)
    };
    b.build().into()
}

/// What a network driver keeps of its choice: the agent, the endpoint, the model, the
/// credential, the output cap and temperature, and the retry policy.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) agent: ureq::Agent,
    pub(crate) url: String,
    pub(crate) model: String,
    pub(crate) secret: Secret,
    pub(crate) max_output_tokens: Option<u64>,
    pub(crate) temperature: Option<f64>,
    pub(crate) policy: RetryPolicy,
    /// Ask for server-sent events (the choice's `stream`, default `true`).
    pub(crate) stream: bool,
    pub(crate) request_timeout_secs: u64,
}

impl Endpoint {
    /// The endpoint of `choice`: `{base_url}{path}` (base URL `default_base` when the
    /// choice sets none, trailing `/` dropped), an [`agent`] with the choice's request
    /// timeout and `stream` setting, its credential resolved against `capsule_dir`
    /// (read at each call, not here), and `max_retries` retries with the default
    /// [`Backoff`] and the choice's `max_retry_after_secs`.
    ///
    /// # Errors
    ///
    /// [`DriverError::Fatal`] when the choice has no `model`.
    pub(crate) fn new(
        choice: &DriverChoice,
        capsule_dir: &Path,
        default_base: &str,
        path: &str,
    ) -> Result<Self, DriverError> {
        let url = format!(
            "{}{path}",
            base_url(choice.base_url.as_deref(), default_base)
        );
        let model = choice
            .model
            .clone()
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| DriverError::Fatal {
                url: url.clone(),
                detail: "the driver choice names no `model`".to_string(),
            })?;
        Ok(Endpoint {
            agent: agent(choice.request_timeout_secs, choice.stream),
            url,
            model,
            secret: Secret::new(choice.credential.as_ref(), capsule_dir),
            max_output_tokens: choice.max_output_tokens,
            temperature: choice.temperature,
            policy: RetryPolicy {
                max_retries: choice.max_retries,
                backoff: Backoff::default(),
                max_retry_after: Duration::from_secs(choice.max_retry_after_secs),
            },
            stream: choice.stream,
            request_timeout_secs: choice.request_timeout_secs,
        })
    }

    /// One call under the retry policy: each attempt POSTs `body` with `headers` and
    /// hands the 2xx answer to `read`, as [`Answer::Json`] or [`Answer::Stream`] by its
    /// content type.
    ///
    /// # Errors
    ///
    /// As [`retry::run`].
    pub(crate) fn call(
        &self,
        headers: &[(&str, &str)],
        body: &Value,
        attempts: AttemptSink<'_>,
        mut read: impl FnMut(Answer<'_>) -> Result<Response, Failure>,
    ) -> Result<Response, DriverError> {
        retry::run(&self.policy, &self.url, attempts, |_| {
            let (status, reply) = post_json(self, headers, body)?;
            let r = match reply {
                Reply::Text(text) => {
                    let v = parse_body(&text)?;
                    read(Answer::Json {
                        value: &v,
                        raw: &text,
                    })
                }
                Reply::Events(mut events) => read(Answer::Stream(&mut events)),
            };
            r.map(|r| (status, r))
        })
    }
}

/// A 2xx answer as the driver reads it.
pub(crate) enum Answer<'a> {
    /// A whole JSON body (`raw` is its text).
    Json {
        /// The parsed body.
        value: &'a Value,
        /// The body as sent.
        raw: &'a str,
    },
    /// A `text/event-stream` body, read event by event.
    Stream(&'a mut Events),
}

/// The events of a streamed answer.
///
/// With a `request_timeout_secs` (not 0) the stream has a progress deadline: it starts
/// when the answer's headers arrived and is moved on by [`Events::progress`], which the
/// driver calls for each event that brought something of the answer (content, tool
/// call fragments, usage, the message's own events). SSE comments, `ping` events and
/// other events that bring nothing do not move it, so a provider that sends only
/// keep-alives times out like a silent one, as [`Outcome::Timeout`]. The deadline is
/// checked as bytes arrive; a connection that goes wholly silent is ended by the
/// socket's read timeout (also `request_timeout_secs`).
pub(crate) struct Events {
    reader: SseReader<BufReader<ureq::BodyReader<'static>>>,
    timeout_secs: u64,
}

impl Events {
    /// The events of `body`, its progress deadline `timeout_secs` from now (none when 0).
    fn new(body: ureq::BodyReader<'static>, timeout_secs: u64) -> Self {
        let mut ev = Events {
            reader: SseReader::new(BufReader::new(body), MAX_BODY_BYTES),
            timeout_secs,
        };
        ev.progress();
        ev
    }

    /// The last event brought progress: the deadline is `request_timeout_secs` from now.
    pub(crate) fn progress(&mut self) {
        let at = (self.timeout_secs > 0)
            .then(|| Instant::now() + Duration::from_secs(self.timeout_secs));
        self.reader.set_deadline(at);
    }

    /// The next event, `None` when the stream ended.
    ///
    /// # Errors
    ///
    /// A transient [`Failure`]: `timeout` when nothing arrived, or nothing but
    /// keep-alives, for `request_timeout_secs`; `io` when reading fails. A fatal `io`
    /// failure when the stream grows past [`MAX_BODY_BYTES`] (a runaway answer would be
    /// as long again on a retry).
    pub(crate) fn next(&mut self) -> Result<Option<Event>, Failure> {
        let secs = self.timeout_secs;
        self.reader.next_event().map_err(|e| {
            let inner = e.get_ref();
            if inner.is_some_and(|i| i.is::<DeadlinePassed>()) {
                return Failure::transient(
                    Outcome::Timeout,
                    None,
                    format!(
                        "timeout: the answer made no progress for request_timeout_secs ({secs} s), only keep-alives arrived"
                    ),
                );
            }
            let f = match inner.and_then(|i| i.downcast_ref::<ureq::Error>()) {
                Some(u) => classify(u, secs),
                None if e.kind() == std::io::ErrorKind::TimedOut => Failure::transient(
                    Outcome::Timeout,
                    None,
                    timeout_detail(&ureq::Timeout::PerRead, secs),
                ),
                None if e.kind() == std::io::ErrorKind::InvalidData => Failure::fatal(
                    Outcome::Io,
                    Some(200),
                    format!(
                        "the streamed answer is larger than {MAX_BODY_BYTES} bytes (16 MiB), the most mur reads of one answer, so it was cut off and is not retried"
                    ),
                ),
                None => Failure::transient(Outcome::Io, None, e.to_string()),
            };
            if f.outcome == Outcome::Timeout || !f.transient {
                return f;
            }
            Failure {
                detail: format!("the stream broke off: {}", f.detail),
                ..f
            }
        })
    }
}

/// A transport error classified, a timeout named by which one fired and its value.
fn classify(err: &ureq::Error, timeout_secs: u64) -> Failure {
    let detail = match err {
        ureq::Error::Timeout(t) => timeout_detail(t, timeout_secs),
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            timeout_detail(&ureq::Timeout::PerRead, timeout_secs)
        }
        ureq::Error::BodyStalled => "the response body stopped arriving".to_string(),
        other => other.to_string(),
    };
    Failure::from_ureq(err, detail)
}

/// What a ureq timeout means here, with the setting and value that made it.
fn timeout_detail(t: &ureq::Timeout, secs: u64) -> String {
    use ureq::Timeout as T;
    match t {
        T::Connect | T::Resolve => format!(
            "timeout: no connection within the connect timeout ({} s)",
            CONNECT_TIMEOUT.as_secs()
        ),
        T::Global | T::PerCall => {
            format!("timeout: no whole answer within request_timeout_secs ({secs} s)")
        }
        T::RecvResponse => {
            format!("timeout: the answer did not start within request_timeout_secs ({secs} s)")
        }
        T::PerRead | T::RecvBody => {
            format!("timeout: the answer sent nothing for request_timeout_secs ({secs} s)")
        }
        other => format!("timeout: {other} (request_timeout_secs {secs} s)"),
    }
}

/// What [`post_json`] read: a whole body or a stream of events.
enum Reply {
    Text(String),
    Events(Box<Events>),
}

/// A credential with a file path already resolved against the capsule directory.
#[derive(Debug, Clone)]
pub(crate) enum Secret {
    /// No credential: no auth header.
    None,
    /// An environment variable, read at call time.
    Env(String),
    /// A file whose first line (trimmed) is the key, read at call time.
    File(PathBuf),
}

impl Secret {
    /// Resolves a manifest credential; a relative file is taken from `capsule_dir`.
    pub(crate) fn new(credential: Option<&Credential>, capsule_dir: &Path) -> Self {
        match credential {
            None => Secret::None,
            Some(Credential::Env(var)) => Secret::Env(var.clone()),
            Some(Credential::File(p)) => Secret::File(capsule_dir.join(p)),
        }
    }

    /// The key now, `None` when there is no credential.
    ///
    /// # Errors
    ///
    /// [`DriverError::Credential`] when the variable is unset or empty, or the file
    /// cannot be read or is empty.
    pub(crate) fn read(&self) -> Result<Option<String>, DriverError> {
        match self {
            Secret::None => Ok(None),
            Secret::Env(var) => match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => {
                    crate::secrets::register(&v);
                    Ok(Some(v.trim().to_string()))
                }
                Ok(_) => Err(DriverError::Credential(format!(
                    "environment variable {var} is empty"
                ))),
                Err(std::env::VarError::NotPresent) => Err(DriverError::Credential(format!(
                    "environment variable {var} is not set"
                ))),
                Err(std::env::VarError::NotUnicode(_)) => Err(DriverError::Credential(format!(
                    "environment variable {var} is not valid UTF-8"
                ))),
            },
            Secret::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    DriverError::Credential(format!("cannot read {}: {e}", path.display()))
                })?;
                let first = text.lines().next().unwrap_or("").trim();
                if first.is_empty() {
                    return Err(DriverError::Credential(format!(
                        "{} is empty",
                        path.display()
                    )));
                }
                crate::secrets::register(first);
                Ok(Some(first.to_string()))
            }
        }
    }
}

/// Registers the credential of every choice in `choices` that can be read now (the
/// variable is set, the file is readable; a relative file is taken from
/// `capsule_dir`) as a secret ([`crate::secrets`]), so it is masked in the records
/// from the session's start, whichever choice ends up being called. One that cannot be
/// read is skipped: the driver reports it when it is called.
pub fn register_credentials<'a>(
    choices: impl IntoIterator<Item = &'a Credential>,
    capsule_dir: &Path,
) {
    for c in choices {
        let _ = Secret::new(Some(c), capsule_dir).read();
    }
}

/// `base` without trailing slashes, or `default` when unset or blank.
pub(crate) fn base_url(base: Option<&str>, default: &str) -> String {
    let base = base
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .unwrap_or(default);
    base.trim_end_matches('/').to_string()
}

/// POSTs `body` as JSON to the endpoint and returns the status (2xx only) and the
/// answer: an event stream when its content type is `text/event-stream`, else the
/// body text (at most [`MAX_BODY_BYTES`]).
///
/// Transport errors and non-2xx statuses become a classified [`Failure`].
fn post_json(
    ep: &Endpoint,
    headers: &[(&str, &str)],
    body: &Value,
) -> Result<(u16, Reply), Failure> {
    let accept = if ep.stream {
        "text/event-stream, application/json"
    } else {
        "application/json"
    };
    let mut req = ep
        .agent
        .post(&ep.url)
        .header("content-type", "application/json")
        .header("accept", accept);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let payload = body.to_string();
    let secs = ep.request_timeout_secs;
    let resp = req
        .send(payload.as_bytes())
        .map_err(|e| classify(&e, secs))?;
    let status = resp.status().as_u16();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let retry_after = header("retry-after");
    let retry_after_ms = header("retry-after-ms");
    let is_stream = resp
        .body()
        .mime_type()
        .is_some_and(|m| m.eq_ignore_ascii_case("text/event-stream"));
    let mut resp_body = resp.into_body();
    if (200..300).contains(&status) && is_stream {
        // No limit here: the SSE reader enforces MAX_BODY_BYTES itself, naming it.
        let reader = resp_body.into_with_config().limit(u64::MAX).reader();
        return Ok((status, Reply::Events(Box::new(Events::new(reader, secs)))));
    }
    let bytes = resp_body
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(|e| classify(&e, secs))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if !(200..300).contains(&status) {
        return Err(Failure::from_status(
            status,
            retry_after.as_deref(),
            retry_after_ms.as_deref(),
            &text,
        ));
    }
    Ok((status, Reply::Text(text)))
}

/// Parses a 2xx body as JSON, or fails with the parse error and a summary of the body
/// (never the body itself: it may be a whole HTML page).
pub(crate) fn parse_body(text: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|e| {
        Failure::invalid(format!(
            "response is not JSON ({e}): {}",
            summarise_body(text)
        ))
    })
}
