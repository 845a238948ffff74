//! HTTP client plumbing shared by every ureq caller (the inference drivers and the A2A
//! client): how a transport error reads.
//!
//! ureq's own text for a timeout is `timeout: global` or `timeout: connect`, which
//! says neither which setting fired nor its value. [`describe`] names both: the
//! timeout, its value as configured on the agent, and the setting that changes it.

use std::time::Duration;

/// How a whole-request timeout is set, for error texts: e.g.
/// `members.critic.request_timeout_secs in roster.yaml`.
pub type Setting<'a> = &'a str;

/// A transport error of `agent` as one lowercase line without a trailing period.
///
/// A timeout names which one fired, its value from the agent's configuration, and,
/// for the whole-request timeout, `setting` (how to change it): `timed out: no
/// answer within the request timeout of 10s (members.critic.request_timeout_secs in
/// roster.yaml)`. The connect timeout reads `timed out: no connection within the
/// connect timeout of 3s`. Every other error keeps ureq's text (`io: Connection
/// refused (os error 111)`, `host not found`).
pub fn describe(err: &ureq::Error, agent: &ureq::Agent, setting: Setting<'_>) -> String {
    let t = agent.config().timeouts();
    match err {
        ureq::Error::Timeout(which) => {
            use ureq::Timeout as T;
            let (what, value) = match which {
                T::Global => ("no answer within the request timeout of", t.global),
                T::PerCall => ("no answer within the per-call timeout of", t.per_call),
                T::Connect => ("no connection within the connect timeout of", t.connect),
                T::Resolve => ("the host name did not resolve within", t.resolve),
                T::SendRequest => ("the request was not sent within", t.send_request),
                T::SendBody => ("the request body was not sent within", t.send_body),
                T::RecvResponse => ("no response head within", t.recv_response),
                T::RecvBody => ("the response body was not read within", t.recv_body),
                _ => ("the transfer stalled beyond", t.global),
            };
            // The stage timeouts are bounded by the whole-request one when unset.
            let value = value.or(t.global);
            let mut s = format!("timed out: {what} {}", secs(value));
            if matches!(which, T::Global) && !setting.is_empty() {
                s.push_str(&format!(" ({setting})"));
            }
            s
        }
        ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => format!(
            "timed out: the connection stopped answering ({io}); the request timeout is {}{}",
            secs(t.global),
            if setting.is_empty() {
                String::new()
            } else {
                format!(" ({setting})")
            }
        ),
        ureq::Error::BodyStalled => "the response body stopped arriving".to_string(),
        other => other.to_string(),
    }
}

/// `10s`, `1.5s`, or `none` for an unset timeout.
fn secs(d: Option<Duration>) -> String {
    match d {
        None => "none".to_string(),
        Some(d) if d.subsec_millis() == 0 => format!("{}s", d.as_secs()),
        Some(d) => format!("{}s", d.as_secs_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(global: u64, connect: u64) -> ureq::Agent {
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(global)))
            .timeout_connect(Some(Duration::from_millis(connect)))
            .build()
            .into()
    }

    #[test]
    fn a_timeout_names_which_one_and_its_value() {
        let a = agent(10, 3000);
        assert_eq!(
            describe(
                &ureq::Error::Timeout(ureq::Timeout::Global),
                &a,
                "x.request_timeout_secs"
            ),
            "timed out: no answer within the request timeout of 10s (x.request_timeout_secs)"
        );
        assert_eq!(
            describe(&ureq::Error::Timeout(ureq::Timeout::Connect), &a, "x"),
            "timed out: no connection within the connect timeout of 3s"
        );
        let a = agent(7, 1500);
        assert_eq!(
            describe(&ureq::Error::Timeout(ureq::Timeout::Connect), &a, ""),
            "timed out: no connection within the connect timeout of 1.5s"
        );
        assert_eq!(
            describe(&ureq::Error::Timeout(ureq::Timeout::RecvBody), &a, "y"),
            "timed out: the response body was not read within 7s"
        );
        assert_eq!(
            describe(&ureq::Error::HostNotFound, &a, "y"),
            "host not found"
        );
    }
}
