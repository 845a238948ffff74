//! HTTP plumbing shared by the network drivers: the configured agent, the credential
//! read at call time, and one POST whose failures are classified for [`super::retry`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::retry::{self, truncate_utf8, Backoff, Failure, RetryPolicy, MAX_QUOTE_BYTES};
use super::{AttemptSink, DriverError, Response};
use crate::manifest::types::{Credential, DriverChoice};

/// The connect timeout of every driver call.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest response body read, in bytes.
pub(crate) const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// One agent per driver: whole-request timeout `request_timeout_secs` (0: none),
/// connect timeout [`CONNECT_TIMEOUT`], error statuses returned as responses.
pub(crate) fn agent(request_timeout_secs: u64) -> ureq::Agent {
    let global = (request_timeout_secs > 0).then(|| Duration::from_secs(request_timeout_secs));
    ureq::Agent::config_builder()
        .timeout_global(global)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .http_status_as_error(false)
        .user_agent(concat!("mur/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
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
}

impl Endpoint {
    /// The endpoint of `choice`: `{base_url}{path}` (base URL `default_base` when the
    /// choice sets none, trailing `/` dropped), an [`agent`] with the choice's request
    /// timeout, its credential resolved against `capsule_dir` (read at each call, not
    /// here), and `max_retries` retries with the default [`Backoff`].
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
            agent: agent(choice.request_timeout_secs),
            url,
            model,
            secret: Secret::new(choice.credential.as_ref(), capsule_dir),
            max_output_tokens: choice.max_output_tokens,
            temperature: choice.temperature,
            policy: RetryPolicy {
                max_retries: choice.max_retries,
                backoff: Backoff::default(),
            },
        })
    }

    /// One call under the retry policy: each attempt POSTs `body` with `headers`,
    /// parses the 2xx body as JSON and reads it with `parse` (given the JSON and the
    /// raw text).
    ///
    /// # Errors
    ///
    /// As [`retry::run`].
    pub(crate) fn call(
        &self,
        headers: &[(&str, &str)],
        body: &Value,
        attempts: AttemptSink<'_>,
        mut parse: impl FnMut(&Value, &str) -> Result<Response, Failure>,
    ) -> Result<Response, DriverError> {
        retry::run(&self.policy, &self.url, attempts, |_| {
            let (status, text) = post_json(&self.agent, &self.url, headers, body)?;
            let v = parse_body(&text)?;
            parse(&v, &text).map(|r| (status, r))
        })
    }
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
                Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_string())),
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
                Ok(Some(first.to_string()))
            }
        }
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

/// A transport error as text: a timeout names which one fired and its value
/// ([`crate::net::describe`]).
fn describe(e: &ureq::Error, agent: &ureq::Agent) -> String {
    crate::net::describe(e, agent, "request_timeout_secs of the inference choice")
}

/// POSTs `body` as JSON and returns the status (2xx only) and the body text.
///
/// Transport errors and non-2xx statuses become a classified [`Failure`].
pub(crate) fn post_json(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Result<(u16, String), Failure> {
    let mut req = agent
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let payload = body.to_string();
    let mut resp = req
        .send(payload.as_bytes())
        .map_err(|e| Failure::from_ureq(&e, describe(&e, agent)))?;
    let status = resp.status().as_u16();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let retry_after = header("retry-after");
    let retry_after_ms = header("retry-after-ms");
    let bytes = resp
        .body_mut()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(|e| Failure::from_ureq(&e, describe(&e, agent)))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if !(200..300).contains(&status) {
        return Err(Failure::from_status(
            status,
            retry_after.as_deref(),
            retry_after_ms.as_deref(),
            &text,
        ));
    }
    Ok((status, text))
}

/// Parses a 2xx body as JSON, or fails with the body quoted.
pub(crate) fn parse_body(text: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|e| {
        Failure::invalid(format!(
            "response is not JSON ({e}): {:?}",
            truncate_utf8(text.trim(), MAX_QUOTE_BYTES)
        ))
    })
}
