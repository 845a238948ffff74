//! Retries of transient failures: capped exponential backoff with jitter, honouring
//! `Retry-After`.
//!
//! A driver describes one attempt as a closure returning `Ok((http_status, value))` or a
//! [`Failure`]; [`run`] calls it until it succeeds, fails for good, or the retries run
//! out, and reports every attempt to the [`AttemptSink`] as an [`Attempt`].
//!
//! Transient (retried): connect errors, timeouts, I/O errors while sending or reading,
//! HTTP 408, 429 and 5xx, and an `overloaded_error` body (Anthropic, also inside a 200).
//! Everything else (400, 401, 403, 404, 422, a body that is not the protocol) is fatal
//! at once, with the provider's own message quoted.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use serde_json::Value;

use super::{Attempt, AttemptSink, DriverError};

/// The longest provider message quoted in an error or attempt detail, in bytes.
pub const MAX_QUOTE_BYTES: usize = 500;

/// How long to wait between attempts.
///
/// The wait before retry `n` (1 for the first retry) is drawn uniformly from
/// `0..=min(cap, base * 2^(n-1))` ("full jitter"), unless the provider sent a
/// `Retry-After` (or `retry-after-ms`), which is used as given, up to `retry_after_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first backoff ceiling. Defaults to 500 ms.
    pub base: Duration,
    /// The largest backoff ceiling. Defaults to 30 s.
    pub cap: Duration,
    /// The longest wait a provider's `Retry-After` may ask for. Defaults to 60 s.
    pub retry_after_cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
            retry_after_cap: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// A backoff of a few milliseconds at most, for tests.
    pub fn fast() -> Self {
        Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
            retry_after_cap: Duration::from_millis(20),
        }
    }

    /// The ceiling of the jittered wait before retry `retry` (1 for the first retry):
    /// `min(cap, base * 2^(retry-1))`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32 << retry.saturating_sub(1).min(20);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait before retry `retry` (1 for the first retry), given the provider's
    /// `Retry-After`, if any.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(d) => d.min(self.retry_after_cap),
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
}

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
    /// The provider said it is overloaded (`overloaded_error`): `overloaded`.
    Overloaded,
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
    /// is transient with [`Outcome::Overloaded`]; every other status is fatal.
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
        f.retry_after = retry_after_ms
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| Duration::from_millis(ms.min(u64::MAX as f64) as u64))
            .or_else(|| retry_after.and_then(|v| parse_retry_after(v, SystemTime::now())));
        f
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
/// else the body itself.
pub fn quote_provider_message(body: &str) -> String {
    let v: Option<Value> = serde_json::from_str(body).ok();
    let msg = v.as_ref().and_then(|v| {
        let e = v.get("error");
        e.and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .or_else(|| e.and_then(Value::as_str))
            .or_else(|| v.get("message").and_then(Value::as_str))
            .or_else(|| v.get("detail").and_then(Value::as_str))
    });
    let text = msg.unwrap_or(body).trim();
    if text.is_empty() {
        return "(empty body)".to_string();
    }
    format!("{:?}", truncate_utf8(text, MAX_QUOTE_BYTES))
}

/// `text` cut to at most `max` bytes on a UTF-8 character boundary, with `…` appended
/// when something was cut.
pub fn truncate_utf8(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Parses a `Retry-After` value: delay seconds (`"120"`) or an HTTP date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`, taken relative to `now`; a past date is 0).
/// `None` when it is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = parse_http_date(value)?;
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Seconds since the Unix epoch of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn parse_http_date(value: &str) -> Option<u64> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? as i64 + 1;
    let day: i64 = day.parse().ok()?;
    let year: i64 = year.parse().ok()?;
    let hms: Vec<i64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    if !(1..=31).contains(&day) || !(0..24).contains(h) || !(0..60).contains(m) {
        return None;
    }
    if !(0..=60).contains(s) || !(1970..=9999).contains(&year) {
        return None;
    }
    let days = crate::records::days_from_civil(year, month, day);
    u64::try_from(days * 86_400 + h * 3600 + m * 60 + s).ok()
}

/// Runs `attempt` until it succeeds, fails for good, or `policy.max_retries` retries
/// are spent, sleeping between attempts as `policy.backoff` says.
///
/// `attempt` gets the attempt number (1 for the first) and returns the HTTP status and
/// the value, or a [`Failure`]. Every attempt is reported to `sink`. A fatal failure
/// becomes [`DriverError::Fatal`] at once; the last transient failure becomes
/// [`DriverError::Exhausted`]. `url` names the endpoint in both.
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
                    detail: None,
                });
                return Ok(value);
            }
            Err(f) => {
                let retry = f.transient && number <= policy.max_retries;
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
                    detail: Some(f.detail.clone()),
                });
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

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_000); // 2015-10-21 07:20:00
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(480))
        );
        assert_eq!(
            parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(
            parse_retry_after("Wed, 32 Oct 2015 07:28:00 GMT", now),
            None
        );
    }

    #[test]
    fn truncation_keeps_utf8_boundaries() {
        assert_eq!(truncate_utf8("abc", 3), "abc");
        assert_eq!(truncate_utf8("aé", 2), "a…");
        assert_eq!(truncate_utf8("ééé", 5), "éé…");
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
            Duration::from_secs(60)
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
