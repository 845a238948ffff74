//! Retries of transient failures: capped exponential backoff with jitter, honouring
//! `Retry-After`.
//!
//! A driver describes one attempt as a closure returning `Ok((http_status, value))` or a
//! [`Failure`]; [`run`] calls it until it succeeds, fails for good, or the retries run
//! out, and reports every attempt to the [`AttemptSink`] as an [`Attempt`].
//!
//! Transient (retried): connect errors, timeouts, I/O errors while sending or reading,
//! HTTP 408, 429 and 5xx, an `overloaded_error` body (Anthropic, also inside a 200), and
//! an error event inside a stream. Everything else (400, 401, 403, 404, 422, a body
//! that is not the protocol) is fatal at once, with the provider's own message quoted;
//! an error page that is not JSON (an HTML page from a gateway) is summarised by
//! [`summarise_body`], never quoted whole.
//!
//! `Retry-After` is read in every form of RFC 9110 §10.2.3: delay seconds and the three
//! HTTP-date forms of §5.6.7 (IMF-fixdate, RFC 850, asctime). A wait longer than
//! [`RetryPolicy::max_retry_after`] ends the call at once with
//! [`DriverError::RetryAfterTooLong`], naming the wait asked for (a number of seconds
//! too large to hold is named as the provider sent it, or `more than
//! 18446744073709551615 s`); a value that does not parse gets the normal backoff and a
//! warning.

use std::fmt;
use std::time::{Duration, SystemTime};

use rand::Rng;
use serde_json::Value;

use super::{Attempt, AttemptSink, DriverError};
pub use crate::net::{summarise_body, truncate_utf8, MAX_SUMMARY_LINE_BYTES};

/// The longest provider message quoted in an error or attempt detail, in bytes.
pub const MAX_QUOTE_BYTES: usize = 500;

/// How long to wait between attempts.
///
/// The wait before retry `n` (1 for the first retry) is drawn uniformly from
/// `0..=min(cap, base * 2^(n-1))` ("full jitter"), unless the provider sent a
/// `Retry-After` (or `retry-after-ms`), which is used as given (see
/// [`RetryPolicy::max_retry_after`] for one that is too long).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first backoff ceiling. Defaults to 500 ms.
    pub base: Duration,
    /// The largest backoff ceiling. Defaults to 30 s.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// A backoff of a few milliseconds at most, for tests.
    pub fn fast() -> Self {
        Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
        }
    }

    /// The ceiling of the jittered wait before retry `retry` (1 for the first retry):
    /// `min(cap, base * 2^(retry-1))`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32 << retry.saturating_sub(1).min(20);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait before retry `retry` (1 for the first retry), given the provider's
    /// `Retry-After`, if any (used as given).
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(d) => d,
            None => {
                let ceiling = self.ceiling(retry).as_millis() as u64;
                Duration::from_millis(rand::thread_rng().gen_range(0..=ceiling))
            }
        }
    }
}

/// What [`run`] needs to know: how many retries and how long to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: no retry), so at most `max_retries + 1`
    /// attempts.
    pub max_retries: u32,
    /// The waits between attempts.
    pub backoff: Backoff,
    /// The longest wait a provider's `Retry-After` may ask for (the choice's
    /// `max_retry_after_secs`, default [`DEFAULT_MAX_RETRY_AFTER`]); a longer one fails
    /// the call at once with [`DriverError::RetryAfterTooLong`].
    pub max_retry_after: Duration,
}

/// The default of [`RetryPolicy::max_retry_after`]: 60 s.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The kind of an attempt's outcome, as written in an [`Attempt`]'s `outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The call succeeded: `ok`.
    Ok,
    /// The connection could not be made (refused, DNS, unreachable): `connect`.
    Connect,
    /// The connect or whole-request timeout struck: `timeout`.
    Timeout,
    /// The provider answered with an error status: `http_status`.
    HttpStatus,
    /// The provider said it is overloaded (`overloaded_error`, in a body or a stream):
    /// `overloaded`.
    Overloaded,
    /// An error event inside a stream that is not an overload: `stream_error`.
    StreamError,
    /// Sending or reading failed half-way: `io`.
    Io,
    /// The answer was not the protocol (not JSON, no choices…): `invalid_response`.
    InvalidResponse,
}

impl Outcome {
    /// The name written into records.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Connect => "connect",
            Outcome::Timeout => "timeout",
            Outcome::HttpStatus => "http_status",
            Outcome::Overloaded => "overloaded",
            Outcome::StreamError => "stream_error",
            Outcome::Io => "io",
            Outcome::InvalidResponse => "invalid_response",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The failure kind (never [`Outcome::Ok`]).
    pub outcome: Outcome,
    /// The HTTP status, when the provider answered.
    pub http_status: Option<u16>,
    /// `true` when another attempt may succeed.
    pub transient: bool,
    /// The wait the provider asked for (`Retry-After`), if any.
    pub retry_after: Option<Duration>,
    /// A `Retry-After` value that did not parse, as sent (the normal backoff is used).
    pub retry_after_unparsed: Option<String>,
    /// How messages name the wait asked for when `retry_after` cannot say it: a number
    /// of seconds (or milliseconds) too large for it, as the provider sent it
    /// (`99999999999999999999999 s`), or `more than 18446744073709551615 s` when even
    /// that is too long to quote. `None`: [`describe_wait`] of `retry_after`.
    pub retry_after_asked: Option<String>,
    /// One line saying what went wrong, provider message quoted.
    pub detail: String,
}

impl Failure {
    /// A transient failure of this kind.
    pub fn transient(outcome: Outcome, http_status: Option<u16>, detail: String) -> Self {
        Failure {
            outcome,
            http_status,
            transient: true,
            retry_after: None,
            retry_after_unparsed: None,
            retry_after_asked: None,
            detail,
        }
    }

    /// A failure retrying cannot fix.
    pub fn fatal(outcome: Outcome, http_status: Option<u16>, detail: String) -> Self {
        Failure {
            outcome,
            http_status,
            transient: false,
            retry_after: None,
            retry_after_unparsed: None,
            retry_after_asked: None,
            detail,
        }
    }

    /// A `200` answer whose body is not what the protocol says.
    pub fn invalid(detail: String) -> Self {
        Failure::fatal(Outcome::InvalidResponse, Some(200), detail)
    }

    /// Classifies a transport error of ureq (no HTTP status was read); `detail` is
    /// its text ([`crate::net::describe`]: a timeout names which one and its value).
    pub fn from_ureq(err: &ureq::Error, detail: String) -> Self {
        use std::io::ErrorKind as K;
        use ureq::Error as E;
        match err {
            E::Timeout(_) | E::BodyStalled => Failure::transient(Outcome::Timeout, None, detail),
            E::ConnectionFailed | E::HostNotFound | E::ConnectProxyFailed(_) => {
                Failure::transient(Outcome::Connect, None, detail)
            }
            E::Io(io) => match io.kind() {
                K::TimedOut | K::WouldBlock => Failure::transient(Outcome::Timeout, None, detail),
                K::ConnectionRefused | K::AddrNotAvailable | K::NotFound => {
                    Failure::transient(Outcome::Connect, None, detail)
                }
                _ => Failure::transient(Outcome::Io, None, detail),
            },
            E::Protocol(_) => Failure::transient(Outcome::Io, None, detail),
            // Bad URL, TLS setup or certificate, body too large, proxy config: retrying
            // gives the same answer.
            _ => Failure::fatal(Outcome::Io, None, detail),
        }
    }

    /// Classifies an answer with a status that is not 2xx, given its `Retry-After`
    /// (and `retry-after-ms`) header values and its body.
    ///
    /// 408, 429 and 5xx are transient; a body whose error type is `overloaded_error`
    /// is transient with [`Outcome::Overloaded`]; every other status is fatal. The body
    /// is quoted by [`quote_provider_message`] (an error page that is not JSON is
    /// summarised). `retry-after-ms` wins over `Retry-After`; a `Retry-After` that does
    /// not parse is kept in `retry_after_unparsed`.
    pub fn from_status(
        status: u16,
        retry_after: Option<&str>,
        retry_after_ms: Option<&str>,
        body: &str,
    ) -> Self {
        let detail = format!("http status {status}: {}", quote_provider_message(body));
        let mut f = if is_overloaded(body) {
            Failure::transient(Outcome::Overloaded, Some(status), detail)
        } else if status == 408 || status == 429 || (500..=599).contains(&status) {
            Failure::transient(Outcome::HttpStatus, Some(status), detail)
        } else {
            Failure::fatal(Outcome::HttpStatus, Some(status), detail)
        };
        let ms = retry_after_ms
            .map(str::trim)
            .and_then(|v| Some((v, v.parse::<f64>().ok()?)))
            .filter(|(_, ms)| ms.is_finite() && *ms >= 0.0);
        if let Some((text, ms)) = ms {
            f.retry_after = Some(Duration::from_millis(ms.min(u64::MAX as f64) as u64));
            if ms > u64::MAX as f64 {
                f.retry_after_asked = Some(asked_as_sent(text, "ms"));
            }
        }
        if f.retry_after.is_none() {
            if let Some(v) = retry_after.filter(|v| !v.trim().is_empty()) {
                f.retry_after = parse_retry_after(v, SystemTime::now());
                if f.retry_after.is_none() {
                    f.retry_after_unparsed = Some(v.to_string());
                }
                let digits = v.trim();
                if f.retry_after.is_some()
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && digits.parse::<u64>().is_err()
                {
                    f.retry_after_asked = Some(asked_as_sent(digits, "s"));
                }
            }
        }
        f
    }
}

/// The longest number of a `Retry-After` quoted as sent, in characters; a longer one
/// is named `more than 18446744073709551615 <unit>`.
pub const MAX_QUOTED_WAIT_CHARS: usize = 40;

/// A wait too large for a [`Duration`], named as the provider sent it: `text <unit>`
/// (leading zeros dropped), or `more than 18446744073709551615 <unit>` when `text` is
/// longer than [`MAX_QUOTED_WAIT_CHARS`].
fn asked_as_sent(text: &str, unit: &str) -> String {
    let text = text.trim();
    let digits = text.trim_start_matches('0');
    let text = if digits.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        text
    } else {
        digits
    };
    if text.chars().count() > MAX_QUOTED_WAIT_CHARS {
        format!("more than {} {unit}", u64::MAX)
    } else {
        format!("{text} {unit}")
    }
}

/// `true` when a body is an error whose type is `overloaded_error` (Anthropic).
pub fn is_overloaded(body: &str) -> bool {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.get("error")?
                .get("type")?
                .as_str()
                .map(|t| t == "overloaded_error")
        })
        .unwrap_or(false)
}

/// The provider's error message in an error body, quoted and cut to
/// [`MAX_QUOTE_BYTES`]: `error.message`, `error` (a string), `message` or `detail`,
/// else the JSON body itself; a body that is not JSON is summarised by
/// [`summarise_body`] instead of quoted.
pub fn quote_provider_message(body: &str) -> String {
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty body)".to_string();
    }
    let Ok(v) = serde_json::from_str::<Value>(trimmed) else {
        return summarise_body(body);
    };
    let e = v.get("error");
    let msg = e
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .or_else(|| e.and_then(Value::as_str))
        .or_else(|| v.get("message").and_then(Value::as_str))
        .or_else(|| v.get("detail").and_then(Value::as_str));
    let text = msg.map(str::trim).unwrap_or(trimmed);
    if text.is_empty() {
        return "(empty message)".to_string();
    }
    format!("{:?}", truncate_utf8(text, MAX_QUOTE_BYTES))
}

/// An error event inside a stream: fatal when it says the request itself is wrong
/// (bad request, key, permission, model, context length), transient otherwise — as
/// `overloaded` when it says so, else `stream_error`.
pub fn stream_error(v: &Value) -> Failure {
    let e = v.get("error").unwrap_or(v);
    let kind = [e.get("type"), e.get("code")]
        .into_iter()
        .flatten()
        .filter_map(|k| match k {
            Value::String(s) => Some(s.to_ascii_lowercase()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let detail = format!(
        "error event in the stream: {}",
        quote_provider_message(&v.to_string())
    );
    const FATAL: [&str; 7] = [
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "invalid_api_key",
        "context_length_exceeded",
        "model_not_found",
    ];
    if kind.contains("overloaded") || kind.contains("529") {
        Failure::transient(Outcome::Overloaded, Some(200), detail)
    } else if FATAL.iter().any(|k| kind.contains(k)) {
        Failure::fatal(Outcome::StreamError, Some(200), detail)
    } else {
        Failure::transient(Outcome::StreamError, Some(200), detail)
    }
}

/// Parses a `Retry-After` value (RFC 9110 §10.2.3): delay seconds (`"120"`) or an
/// HTTP date in any of the three forms of §5.6.7 — IMF-fixdate (`Sun, 06 Nov 1994
/// 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6
/// 08:49:37 1994`) — taken relative to `now`; a date in the past is 0. `None` when it
/// is none of these.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Delay seconds; a number too large for u64 is still "a very long wait".
        return Some(Duration::from_secs(
            value.parse::<u64>().unwrap_or(u64::MAX),
        ));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A wait for messages: `150 ms`, `7 s`, `3600 s`.
pub fn describe_wait(d: Duration) -> String {
    if d.subsec_millis() != 0 && d < Duration::from_secs(10) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", d.as_secs())
    }
}

/// Runs `attempt` until it succeeds, fails for good, or `policy.max_retries` retries
/// are spent, sleeping between attempts as `policy.backoff` says.
///
/// `attempt` gets the attempt number (1 for the first) and returns the HTTP status and
/// the value, or a [`Failure`]. Every attempt is reported to `sink`. A fatal failure
/// becomes [`DriverError::Fatal`] at once; a `Retry-After` longer than
/// `policy.max_retry_after` becomes [`DriverError::RetryAfterTooLong`] at once; the
/// last transient failure becomes [`DriverError::Exhausted`]. `url` names the endpoint
/// in each. A `Retry-After` that does not parse is logged as a warning (the normal
/// backoff is used).
pub fn run<T>(
    policy: &RetryPolicy,
    url: &str,
    sink: AttemptSink<'_>,
    mut attempt: impl FnMut(u32) -> Result<(u16, T), Failure>,
) -> Result<T, DriverError> {
    let mut number = 1u32;
    loop {
        match attempt(number) {
            Ok((status, value)) => {
                sink(Attempt {
                    number,
                    outcome: Outcome::Ok.as_str().to_string(),
                    http_status: Some(status),
                    retry_in_ms: 0,
                    will_retry: false,
                    detail: None,
                });
                return Ok(value);
            }
            Err(mut f) => {
                if let Some(v) = &f.retry_after_unparsed {
                    log::warn!(
                        "{url}: Retry-After {v:?} is neither delay seconds nor an HTTP date; using the normal backoff"
                    );
                    f.detail
                        .push_str(&format!(" (Retry-After {v:?} not understood)"));
                }
                let too_long = f
                    .retry_after
                    .filter(|d| f.transient && *d > policy.max_retry_after);
                let retry = f.transient && too_long.is_none() && number <= policy.max_retries;
                let wait = if retry {
                    policy.backoff.delay(number, f.retry_after)
                } else {
                    Duration::ZERO
                };
                sink(Attempt {
                    number,
                    outcome: f.outcome.as_str().to_string(),
                    http_status: f.http_status,
                    retry_in_ms: wait.as_millis() as u64,
                    will_retry: retry,
                    detail: Some(f.detail.clone()),
                });
                if let Some(asked) = too_long {
                    return Err(DriverError::RetryAfterTooLong {
                        url: url.to_string(),
                        detail: f.detail,
                        asked: f.retry_after_asked.unwrap_or_else(|| describe_wait(asked)),
                        cap: describe_wait(policy.max_retry_after),
                    });
                }
                if !f.transient {
                    return Err(DriverError::Fatal {
                        url: url.to_string(),
                        detail: f.detail,
                    });
                }
                if !retry {
                    return Err(DriverError::Exhausted {
                        url: url.to_string(),
                        detail: f.detail,
                        attempts: number,
                    });
                }
                log::debug!(
                    "{url}: attempt {number} failed ({}), retry in {wait:?}",
                    f.detail
                );
                std::thread::sleep(wait);
                number += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn retry_after_seconds_and_the_three_date_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777 - 60); // 1994-11-06 08:48:37
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",  // IMF-fixdate
            "Sunday, 06-Nov-94 08:49:37 GMT", // RFC 850
            "Sun Nov  6 08:49:37 1994",       // asctime
        ] {
            assert_eq!(
                parse_retry_after(form, now),
                Some(Duration::from_secs(60)),
                "{form}"
            );
        }
        assert_eq!(
            parse_retry_after("Sat, 05 Nov 1994 08:49:37 GMT", now),
            Some(Duration::ZERO),
            "a past date is no wait"
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        for bad in ["soon", "-1", "1.5", "", "Sun, 32 Nov 1994 08:49:37 GMT"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn a_retry_after_too_large_for_a_duration_is_named_as_sent() {
        let f = Failure::from_status(429, Some("99999999999999999999999"), None, "");
        assert_eq!(f.retry_after, Some(Duration::from_secs(u64::MAX)));
        assert_eq!(
            f.retry_after_asked.as_deref(),
            Some("99999999999999999999999 s")
        );
        let f = Failure::from_status(429, Some(" 0018446744073709551616 "), None, "");
        assert_eq!(
            f.retry_after_asked.as_deref(),
            Some("18446744073709551616 s")
        );
        let f = Failure::from_status(429, Some(&"9".repeat(500)), None, "");
        assert_eq!(
            f.retry_after_asked.as_deref(),
            Some("more than 18446744073709551615 s")
        );
        let f = Failure::from_status(429, None, Some("1e30"), "");
        assert_eq!(f.retry_after_asked.as_deref(), Some("1e30 ms"));
        for fits in ["18446744073709551615", "7200"] {
            let f = Failure::from_status(429, Some(fits), None, "");
            assert_eq!(f.retry_after_asked, None, "{fits}: describe_wait says it");
        }
    }

    #[test]
    fn unparsed_retry_after_is_kept() {
        let f = Failure::from_status(429, Some("in a while"), None, "");
        assert_eq!(f.retry_after, None);
        assert_eq!(f.retry_after_unparsed.as_deref(), Some("in a while"));
    }

    #[test]
    fn a_provider_page_that_is_not_json_is_summarised() {
        assert_eq!(
            quote_provider_message("<html><title>Oops</title></html>"),
            "an HTML page titled \"Oops\" (32 bytes)"
        );
    }

    #[test]
    fn backoff_is_capped() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(1), Duration::from_millis(500));
        assert_eq!(b.ceiling(3), Duration::from_secs(2));
        assert_eq!(b.ceiling(40), Duration::from_secs(30));
        assert!(b.delay(2, None) <= Duration::from_secs(1));
        assert_eq!(
            b.delay(1, Some(Duration::from_secs(3600))),
            Duration::from_secs(3600),
            "a Retry-After is used as given; run() refuses one over the cap"
        );
    }

    #[test]
    fn status_classification() {
        let f = Failure::from_status(401, None, None, r#"{"error":{"message":"bad key"}}"#);
        assert!(!f.transient);
        assert_eq!(f.detail, r#"http status 401: "bad key""#);
        let f = Failure::from_status(429, Some("2"), None, "slow down");
        assert!(f.transient);
        assert_eq!(f.retry_after, Some(Duration::from_secs(2)));
        let f = Failure::from_status(429, Some("2"), Some("150"), "");
        assert_eq!(f.retry_after, Some(Duration::from_millis(150)));
        let f = Failure::from_status(
            529,
            None,
            None,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(f.outcome, Outcome::Overloaded);
        assert!(f.transient);
        assert!(Failure::from_status(503, None, None, "").transient);
        assert!(!Failure::from_status(422, None, None, "").transient);
    }
}
