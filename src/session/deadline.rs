//! The session's deadline and the one deadline notice (spec, "The deadline notice").

use std::time::{Duration, Instant, SystemTime};

/// The session's effective deadline and its notice margin.
#[derive(Debug, Clone)]
pub struct Deadline {
    /// When the runtime ends the session (wall clock, for `at`).
    pub at: SystemTime,
    /// The same moment on the monotonic clock.
    pub instant: Instant,
    /// The notice margin; zero means no notice.
    pub margin: Duration,
    /// Whether the notice was sent.
    pub notified: bool,
}

/// The default margin: five minutes, or a tenth of the deadline when that is shorter,
/// and at least one second. `total` is the time from the session's start to the deadline.
pub fn default_margin(total: Duration) -> Duration {
    let tenth = Duration::from_secs(total.as_secs() / 10);
    tenth
        .min(Duration::from_secs(300))
        .max(Duration::from_secs(1))
}

impl Deadline {
    /// A deadline at `at`, for a session that started at `start` (`start_wall` on the
    /// wall clock). `notice_secs` is `lifecycle.deadline_notice_secs`: `None` for the
    /// default margin, `Some(0)` for no notice.
    pub fn new(
        at: SystemTime,
        start: Instant,
        start_wall: SystemTime,
        notice_secs: Option<u64>,
    ) -> Deadline {
        let total = at.duration_since(start_wall).unwrap_or_default();
        let margin = match notice_secs {
            Some(s) => Duration::from_secs(s),
            None => default_margin(total),
        };
        Deadline {
            at,
            instant: start + total,
            margin,
            notified: false,
        }
    }

    /// Whole seconds until the deadline, rounded down; 0 once it has passed.
    pub fn left_secs(&self) -> u64 {
        self.instant
            .saturating_duration_since(Instant::now())
            .as_secs()
    }

    /// Whether the deadline has passed.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.instant
    }

    /// The notice line, once per session, when no more than the margin is left:
    /// `Session deadline: the runtime ends this session at <at>, in <n> seconds.`
    pub fn take_notice(&mut self) -> Option<(String, u64)> {
        if self.notified || self.margin.is_zero() {
            return None;
        }
        let left = self.instant.saturating_duration_since(Instant::now());
        if left > self.margin {
            return None;
        }
        self.notified = true;
        let secs = left.as_secs();
        Some((
            format!(
                "Session deadline: the runtime ends this session at {}, in {secs} seconds.",
                crate::records::rfc3339_secs(self.at)
            ),
            secs,
        ))
    }
}

/// Parses `--deadline`: an RFC 3339 time, or a duration from `now` (`90s`, `15m`,
/// `2h`, `1h30m`).
///
/// Errors: a message naming the value and the accepted forms.
pub fn parse_deadline(value: &str, now: SystemTime) -> Result<SystemTime, String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(value) {
        if value.contains('T') || value.contains(' ') {
            return Ok(t);
        }
    }
    match humantime::parse_duration(value) {
        Ok(d) => Ok(now + d),
        Err(_) => Err(format!(
            "--deadline `{value}` is neither an RFC 3339 time (2026-10-20T14:00:00Z) nor a duration (90s, 15m, 2h)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_margin_follows_the_spec() {
        assert_eq!(
            default_margin(Duration::from_secs(7200)),
            Duration::from_secs(300)
        );
        assert_eq!(
            default_margin(Duration::from_secs(600)),
            Duration::from_secs(60)
        );
        assert_eq!(
            default_margin(Duration::from_secs(5)),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn deadline_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            parse_deadline("90s", now).unwrap(),
            now + Duration::from_secs(90)
        );
        assert_eq!(
            parse_deadline("2h", now).unwrap(),
            now + Duration::from_secs(7200)
        );
        let t = parse_deadline("2026-10-20T14:00:00Z", now).unwrap();
        assert_eq!(crate::records::rfc3339_secs(t), "2026-10-20T14:00:00Z");
        assert!(parse_deadline("soon", now).unwrap_err().contains("`soon`"));
    }
}
