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

/// Parses `--deadline`: an RFC 3339 time with its offset (`2026-10-20T14:00:00Z`,
/// `2026-10-20T16:00:00+02:00`, fractions of a second allowed), or a duration from
/// `now` (`90s`, `15m`, `2h`, `1h30m`). The deadline must lie in the future.
///
/// Errors: a message naming the value and the accepted forms, or saying it has passed.
pub fn parse_deadline(value: &str, now: SystemTime) -> Result<SystemTime, String> {
    let v = value.trim();
    let at = if v.len() >= 10 && v.as_bytes()[4] == b'-' {
        parse_rfc3339(v).ok_or_else(|| {
            format!("--deadline `{value}` is not an RFC 3339 time: write it with its offset, as 2026-10-20T14:00:00Z or 2026-10-20T16:00:00+02:00")
        })?
    } else {
        match humantime::parse_duration(v) {
            Ok(d) if d.is_zero() => return Err(format!("--deadline `{value}` is zero: give a duration greater than 0 (90s, 15m, 2h)")),
            Ok(d) => now.checked_add(d).ok_or_else(|| format!("--deadline `{value}` is too far in the future"))?,
            Err(_) => {
                return Err(format!(
                    "--deadline `{value}` is neither an RFC 3339 time (2026-10-20T14:00:00Z) nor a duration from now (90s, 15m, 2h)"
                ))
            }
        }
    };
    // RFC 3339 ends at 9999-12-31T23:59:59Z.
    if at > SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799) {
        return Err(format!("--deadline `{value}` lies after the year 9999"));
    }
    if at <= now {
        return Err(format!(
            "--deadline `{value}` has already passed (it is {} now)",
            crate::records::rfc3339_secs(now)
        ));
    }
    Ok(at)
}

/// Parses an RFC 3339 date-time (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, `T`/`Z` in
/// either case, or a space for `T`). `None` when it is not one.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    if b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos: u64 = 0;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        if frac.is_empty() {
            return None;
        }
        let digits: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
        nanos = digits.parse().ok()?;
    }
    let offset_secs: i64 = match &s[i..] {
        "Z" | "z" => 0,
        rest if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let h = num(i + 1..i + 3)?;
            let m = num(i + 4..i + 6)?;
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if rest.starts_with('-') {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let days = crate::records::days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec.min(59) - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_nanos(nanos))
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
        let t = parse_deadline("2026-10-20T16:00:00+02:00", now).unwrap();
        assert_eq!(crate::records::rfc3339_secs(t), "2026-10-20T14:00:00Z");
        let t = parse_deadline("2026-10-20t09:30:00.5-04:30", now).unwrap();
        assert_eq!(
            humantime::format_rfc3339_millis(t).to_string(),
            "2026-10-20T14:00:00.500Z"
        );
        assert!(parse_deadline("2026-10-20T14:00:00", now)
            .unwrap_err()
            .contains("with its offset"));
        assert!(parse_deadline("soon", now).unwrap_err().contains("`soon`"));
        assert!(parse_deadline("500000000000y", now).is_err());
        assert!(parse_deadline("9000y", now).unwrap_err().contains("9999"));
        assert!(parse_deadline("0s", now).unwrap_err().contains("is zero"));
        assert!(parse_deadline("1970-01-02T00:00:00Z", now)
            .unwrap_err()
            .contains("has already passed"));
    }
}
