//! HTTP client plumbing shared by every ureq caller (the inference drivers and the A2A
//! client): how a transport error reads, and how a body that is not JSON (a gateway's
//! HTML error page) is summarised in one line instead of quoted ([`summarise_body`]).
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

/// The longest title or first line [`summarise_body`] quotes, in bytes.
pub const MAX_SUMMARY_LINE_BYTES: usize = 120;

/// A one-line summary of a body that is not JSON, so an error page never lands whole
/// in a record, an error message or `out/result.txt`:
///
/// - markup (the first character is `<`): `an HTML page titled "502 Bad Gateway"
///   (1234 bytes)`; without a `<title>`, the first line of text between the tags:
///   `an HTML page starting "…" (N bytes)`;
/// - other text: `a text body starting "…" (N bytes)` with its first non-blank line;
/// - nothing: `(empty body)`.
///
/// Quoted parts are cut to [`MAX_SUMMARY_LINE_BYTES`] on a UTF-8 boundary and shown as
/// Rust string literals (control characters escaped); the count is the body's bytes.
pub fn summarise_body(body: &str) -> String {
    let bytes = body.len();
    let trimmed = body.trim_start();
    if trimmed.is_empty() {
        return "(empty body)".to_string();
    }
    let quote = |t: &str| format!("{:?}", truncate_utf8(t, MAX_SUMMARY_LINE_BYTES));
    if trimmed.starts_with('<') {
        if let Some(title) = html_title(trimmed).filter(|t| !t.is_empty()) {
            return format!("an HTML page titled {} ({bytes} bytes)", quote(&title));
        }
        let text = strip_tags(trimmed);
        return match first_line(&text) {
            Some(l) => format!("an HTML page starting {} ({bytes} bytes)", quote(&l)),
            None => format!("an HTML page ({bytes} bytes)"),
        };
    }
    match first_line(trimmed) {
        Some(l) => format!("a text body starting {} ({bytes} bytes)", quote(&l)),
        None => "(empty body)".to_string(),
    }
}

/// The first line with something on it, trimmed, whitespace runs made one space.
fn first_line(text: &str) -> Option<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| !l.is_empty())
}

/// The text of the first `<title>` element, entities decoded, whitespace collapsed.
fn html_title(html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let title = decode_entities(&html[start..end]);
    Some(title.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// `html` with every `<…>` tag (and the content of `<script>`/`<style>`) removed, a
/// line break where a tag was, entities decoded.
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len().min(4096));
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        out.push('\n');
        let tag = &rest[lt..];
        let lower: String = tag.chars().take(8).collect::<String>().to_ascii_lowercase();
        let skip_to = if lower.starts_with("<script") {
            tag.to_ascii_lowercase().find("</script").map(|i| i + 1)
        } else if lower.starts_with("<style") {
            tag.to_ascii_lowercase().find("</style").map(|i| i + 1)
        } else {
            Some(0)
        };
        let Some(from) = skip_to else {
            return decode_entities(&out);
        };
        match tag[from..].find('>') {
            Some(gt) => rest = &tag[from + gt + 1..],
            None => return decode_entities(&out),
        }
    }
    out.push_str(rest);
    decode_entities(&out)
}

/// The five XML entities and `&nbsp;` decoded; others are left as written.
fn decode_entities(text: &str) -> String {
    text.replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
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

    #[test]
    fn non_json_bodies_are_summarised() {
        let page = "<!DOCTYPE html>\n<html><head><title>502 Bad\n Gateway &amp; co</title></head>\n<body><h1>502</h1>" .to_string()
            + &"x".repeat(5000)
            + "</body></html>";
        let s = summarise_body(&page);
        assert_eq!(
            s,
            format!(
                "an HTML page titled \"502 Bad Gateway & co\" ({} bytes)",
                page.len()
            )
        );
        assert_eq!(
            summarise_body(
                "<html><body>\n  <h1>Service Unavailable</h1><p>later</p></body></html>"
            ),
            "an HTML page starting \"Service Unavailable\" (69 bytes)"
        );
        assert_eq!(
            summarise_body("<html><script>var a = '<b>';</script>Down</html>"),
            "an HTML page starting \"Down\" (48 bytes)"
        );
        assert_eq!(
            summarise_body("\n\nupstream connect error\nreset reason: overflow"),
            "a text body starting \"upstream connect error\" (47 bytes)"
        );
        assert_eq!(summarise_body("  \n"), "(empty body)");
        let long = summarise_body(&"é".repeat(300));
        assert!(long.len() < 200 && long.contains("…"), "{long}");
    }

    #[test]
    fn truncation_keeps_utf8_boundaries() {
        assert_eq!(truncate_utf8("abc", 3), "abc");
        assert_eq!(truncate_utf8("aé", 2), "a…");
        assert_eq!(truncate_utf8("ééé", 5), "éé…");
    }
}
