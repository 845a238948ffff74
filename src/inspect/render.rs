//! The human view of a trace: each record as one or a few lines, with the time since
//! the session's start, in the order written. Records of a type this build does not
//! know (another version's) are shown raw, never dropped; a line that is not JSON, or
//! the last line cut short, is shown as such.

use std::collections::HashMap;
use std::io::Write;
use std::time::SystemTime;

use serde_json::{Map, Value};

/// Record types this build writes or the spec names; others are shown as unknown.
pub const KNOWN_TYPES: &[&str] = &[
    "session_start",
    "session_end",
    "session_status",
    "task_start",
    "task_end",
    "task_failed",
    "task_continued",
    "task_reopened",
    "inference",
    "inference_attempt",
    "tool_call",
    "background_command",
    "member_call_busy",
    "member_call_start",
    "member_call",
    "deadline_notice",
    "survivor_killed",
    "completion_dropped",
    "compaction",
    "control_change",
    "control_refused",
    "control_applied",
    "artifact_pulled",
    "tools_refreshed",
    "policy_decision",
    "hook_run",
    "done_check",
    "keep_working",
    "peer_file_shared",
    "peer_file_fetched",
    "plan",
];

/// Lines of a tool result (or a member's answer) shown without `--full`.
pub const CUT_LINES: usize = 12;
/// Bytes of a tool result (or a member's answer) shown without `--full`.
pub const CUT_BYTES: usize = 2000;
/// Characters of a tool call's input or a raw value shown without `--full`.
pub const CUT_INPUT: usize = 300;

/// Renders records onto `out`.
pub struct Renderer<W: Write> {
    out: W,
    color: bool,
    full: bool,
    start: Option<SystemTime>,
    task_start: HashMap<String, SystemTime>,
    call_start: HashMap<String, SystemTime>,
}

const INDENT: &str = "           ";

impl<W: Write> Renderer<W> {
    /// A renderer writing to `out`, with ANSI colour when `color`, and tool results
    /// whole when `full`.
    pub fn new(out: W, color: bool, full: bool) -> Renderer<W> {
        Renderer {
            out,
            color,
            full,
            start: None,
            task_start: HashMap::new(),
            call_start: HashMap::new(),
        }
    }

    /// The writer, to flush it.
    pub fn out(&mut self) -> &mut W {
        &mut self.out
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Renders one complete line of the trace (line `number`).
    ///
    /// Errors: writing to the output failed.
    pub fn line(&mut self, number: u64, text: &str) -> std::io::Result<()> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(r)) => self.record(&r, text),
            _ => {
                let head = self.paint("31", &format!("line {number} is not a record:"));
                let raw = self.cut_str(text, CUT_INPUT);
                writeln!(self.out, "{head} {raw}")
            }
        }
    }

    /// Takes note of a record that is not shown (filtered out by `--type`) without
    /// writing anything: the session's start and the starts of tasks and member calls,
    /// so the times and durations of the records shown still count from them.
    pub fn note(&mut self, text: &str) {
        let Ok(Value::Object(r)) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let Some(t) = ts_of(&r) else { return };
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        if self.start.is_none() {
            self.start = Some(t);
        }
        match r.get("type").and_then(Value::as_str) {
            Some("task_start") => {
                self.task_start.insert(s("task"), t);
            }
            Some("member_call_start") => {
                self.call_start.insert(s("call_id"), t);
            }
            _ => {}
        }
    }

    /// Renders the text after the trace's last newline: a record cut short.
    ///
    /// Errors: writing to the output failed.
    pub fn partial(&mut self, number: u64, text: &str) -> std::io::Result<()> {
        let head = self.paint(
            "31",
            &format!(
                "line {number} is cut short ({} bytes, no newline: the writing mur was killed or the disk filled):",
                text.len()
            ),
        );
        let raw = self.cut_str(text, CUT_INPUT);
        writeln!(self.out, "{head} {raw}")
    }

    fn cut_str(&self, s: &str, max: usize) -> String {
        if self.full || s.chars().count() <= max {
            s.to_string()
        } else {
            let mut c: String = s.chars().take(max).collect();
            c.push('…');
            c
        }
    }

    fn stamp(&mut self, r: &Map<String, Value>) -> String {
        let ts = r
            .get("ts")
            .and_then(Value::as_str)
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        let text = match (ts, self.start) {
            (Some(t), Some(s)) => relative(t, s),
            (Some(t), None) => {
                self.start = Some(t);
                relative(t, t)
            }
            (None, _) => format!("{:<10}", "?"),
        };
        self.paint("2", &text)
    }

    fn record(&mut self, r: &Map<String, Value>, raw: &str) -> std::io::Result<()> {
        let kind = r.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "session_start" {
            return self.session_start(r);
        }
        let at = self.stamp(r);
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let n = |k: &str| r.get(k).and_then(Value::as_u64);
        match kind {
            "task_start" => {
                let task = s("task");
                if let Some(t) = r
                    .get("ts")
                    .and_then(Value::as_str)
                    .and_then(|t| humantime::parse_rfc3339(t).ok())
                {
                    self.task_start.insert(task.clone(), t);
                }
                let mut from = s("origin");
                if !s("caller").is_empty() {
                    from.push_str(&format!(" (caller {})", s("caller")));
                }
                if !s("work_id").is_empty() {
                    from.push_str(&format!(" (work {})", s("work_id")));
                }
                let label = self.paint("1;36", "task");
                writeln!(self.out, "{at} {label} {task} from {from}")?;
                self.block(&s("text"), false)
            }
            "inference" => {
                let label = self.paint("1;34", "model");
                let turn = n("turn").map_or("?".into(), |t| t.to_string());
                let took = ms(n("duration_ms"));
                if let Some(e) = r.get("error").and_then(Value::as_str) {
                    let e = self.paint("31", &format!("failed: {e}"));
                    return writeln!(self.out, "{at} {label} turn {turn} · {took} · {e}");
                }
                let model = s("model");
                let tokens = match (n("input_tokens"), n("output_tokens")) {
                    (Some(i), Some(o)) => {
                        let est = if s("usage_source") == "estimate" {
                            " (estimated)"
                        } else {
                            ""
                        };
                        format!(" · {i} in, {o} out tokens{est}")
                    }
                    _ => String::new(),
                };
                writeln!(
                    self.out,
                    "{at} {label} turn {turn} · {model}{tokens} · {took}"
                )?;
                let text = s("text");
                if !text.is_empty() {
                    self.block(&text, false)?;
                }
                for c in r
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
                    let id = c.get("id").and_then(Value::as_str).unwrap_or("");
                    let input = match c.get("input") {
                        Some(Value::String(s)) => s.clone(),
                        Some(v) => v.to_string(),
                        None => String::new(),
                    };
                    let input = self.cut_str(&input, CUT_INPUT);
                    let arrow = self.paint("34", &format!("→ {name}"));
                    let id = self.paint("2", &format!("[{id}]"));
                    writeln!(self.out, "{INDENT}{arrow} {input} {id}")?;
                }
                Ok(())
            }
            "inference_attempt" => {
                let mut what = format!(
                    "turn {} attempt {}: {}",
                    n("turn").unwrap_or(0),
                    n("attempt").unwrap_or(0),
                    s("outcome")
                );
                if let Some(h) = n("http_status") {
                    what.push_str(&format!(" (http {h})"));
                }
                if let Some(w) = n("retry_in_ms") {
                    what.push_str(&format!(", retry in {}", ms(Some(w))));
                }
                if !s("detail").is_empty() {
                    what.push_str(&format!(": {}", s("detail")));
                }
                let label = self.paint("33", "retry");
                writeln!(self.out, "{at} {label} {what}")
            }
            "tool_call" => {
                let status = s("status");
                let st = self.paint(if status == "passed" { "32" } else { "31" }, &status);
                let label = self.paint("1;35", "tool");
                let id = self.paint("2", &format!("[{}]", s("call_id")));
                writeln!(
                    self.out,
                    "{at} {label} {} {id} {st} · {} · {}",
                    s("name"),
                    ms(n("duration_ms")),
                    s("summary")
                )?;
                self.block(&s("content"), true)
            }
            "member_call_start" => {
                if let Some(t) = ts_of(r) {
                    self.call_start.insert(s("call_id"), t);
                }
                let label = self.paint("1;33", "call");
                writeln!(
                    self.out,
                    "{at} {label} {} [{}] started member task {} (offer {})",
                    s("member"),
                    s("call_id"),
                    s("member_task"),
                    n("offer").unwrap_or(1)
                )
            }
            "member_call_busy" => {
                let label = self.paint("33", "busy");
                writeln!(
                    self.out,
                    "{at} {label} {} [{}] is busy (offer {})",
                    s("member"),
                    s("call_id"),
                    n("offer").unwrap_or(1)
                )
            }
            "member_call" => {
                let status = s("status");
                let st = self.paint(if status == "completed" { "32" } else { "31" }, &status);
                let label = self.paint("1;33", "answer");
                let delivered = if r.get("delivered") == Some(&Value::Bool(false)) {
                    " (not delivered)"
                } else {
                    ""
                };
                let took = match (self.call_start.get(&s("call_id")), ts_of(r)) {
                    (Some(a), Some(b)) => format!(" · {}", secs(b, *a)),
                    _ => String::new(),
                };
                writeln!(
                    self.out,
                    "{at} {label} from {} [{}] {st}{delivered}{took}",
                    s("member"),
                    s("call_id")
                )?;
                self.block(&s("output"), true)
            }
            "task_continued" => {
                let label = self.paint("1;36", "continued");
                writeln!(
                    self.out,
                    "{at} {label} with {} answer(s)",
                    n("answers").unwrap_or(0)
                )?;
                self.block(&s("text"), true)
            }
            "session_status" => {
                let st = r.get("status");
                let at_path = |p: &str| {
                    st.and_then(|v| v.pointer(p)).map(|v| match v {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    })
                };
                let label = self.paint("2", "status");
                writeln!(
                    self.out,
                    "{at} {label} turns {}/{} · context {} tokens",
                    at_path("/turns/used").unwrap_or("?".into()),
                    at_path("/turns/cap").unwrap_or("?".into()),
                    at_path("/context/used_tokens").unwrap_or("?".into()),
                )
            }
            "background_command" => {
                // operation, work id, state, exit code (or what the command still is),
                // then how long it has run, the wait, and the command line.
                let state = s("state");
                let st = self.paint(
                    match state.as_str() {
                        "running" => "33",
                        "exited" if n("exit_code") == Some(0) => "32",
                        _ => "31",
                    },
                    &state,
                );
                let exit = match r.get("exit_code") {
                    Some(Value::Number(c)) => format!(" · exit code {c}"),
                    _ => String::new(),
                };
                let status = match s("status") {
                    x if x.is_empty() => String::new(),
                    x => format!(" ({x})"),
                };
                let mut what = format!(
                    "{} {} {st}{exit}{status} · {} s elapsed",
                    s("operation"),
                    s("work_id"),
                    n("elapsed_secs").map_or("?".into(), |e| e.to_string())
                );
                if let Some(w) = n("waited_secs") {
                    what.push_str(&format!(
                        " · waited {w} of {} s",
                        n("wait_secs").map_or("?".into(), |e| e.to_string())
                    ));
                }
                if !s("cut_by").is_empty() {
                    what.push_str(&format!(" · wait cut by {}", s("cut_by")));
                }
                let argv = self.cut_str(&argv_of(r.get("argv")), CUT_INPUT);
                let label = self.paint("1;35", "work");
                writeln!(self.out, "{at} {label} {what} · {argv}")
            }
            "deadline_notice" => {
                let label = self.paint("33", "deadline");
                writeln!(
                    self.out,
                    "{at} {label} notice with tool call [{}]: {} s left, deadline {}",
                    s("call_id"),
                    n("left_secs").map_or("?".into(), |e| e.to_string()),
                    s("at")
                )
            }
            "survivor_killed" => {
                let label = self.paint("31", "killed");
                let work = match s("work_id") {
                    w if w.is_empty() => String::new(),
                    w => format!(" of {w}"),
                };
                let argv = self.cut_str(&argv_of(r.get("argv")), CUT_INPUT);
                writeln!(
                    self.out,
                    "{at} {label} survivor pid {} ({}){work} with {} · {argv}",
                    n("pid").map_or("?".into(), |e| e.to_string()),
                    s("comm"),
                    s("signal")
                )
            }
            "completion_dropped" => {
                let label = self.paint("33", "dropped");
                writeln!(
                    self.out,
                    "{at} {label} completion task for {}: {}",
                    s("work_id"),
                    s("reason")
                )
            }
            "task_failed" => {
                let label = self.paint("1;31", "failed");
                writeln!(self.out, "{at} {label} {}", s("error"))
            }
            "task_end" => {
                let status = s("exit_status");
                let st = self.paint(
                    if status == "completed" {
                        "1;32"
                    } else {
                        "1;31"
                    },
                    &status,
                );
                let label = self.paint("1;36", "task end");
                let took = match (
                    self.task_start.get(&s("task")),
                    r.get("ts")
                        .and_then(Value::as_str)
                        .and_then(|t| humantime::parse_rfc3339(t).ok()),
                ) {
                    (Some(a), Some(b)) => format!(" · {}", secs(b, *a)),
                    _ => String::new(),
                };
                let why = [s("error"), s("reason")]
                    .into_iter()
                    .find(|e| !e.is_empty())
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                writeln!(
                    self.out,
                    "{at} {label} {st} · {} turn(s){took}{why}",
                    n("turns").unwrap_or(0)
                )
            }
            "session_end" => {
                let status = s("exit_status");
                let st = self.paint(
                    if status == "completed" {
                        "1;32"
                    } else {
                        "1;31"
                    },
                    &status,
                );
                let label = self.paint("1", "session end");
                let took = match (
                    self.start,
                    r.get("ts")
                        .and_then(Value::as_str)
                        .and_then(|t| humantime::parse_rfc3339(t).ok()),
                ) {
                    (Some(a), Some(b)) => secs(b, a),
                    _ => "?".into(),
                };
                writeln!(
                    self.out,
                    "{at} {label} {st} · {} task(s) · {took}",
                    n("tasks").unwrap_or(0)
                )
            }
            other => {
                let fields = rest(r);
                if KNOWN_TYPES.contains(&other) {
                    let v = self.cut_str(&Value::Object(fields).to_string(), CUT_INPUT);
                    let label = self.paint("1", other);
                    writeln!(self.out, "{at} {label} {v}")
                } else {
                    let label =
                        self.paint("1;31", &format!("{other} (unknown record type, shown raw)"));
                    writeln!(self.out, "{at} {label}")?;
                    writeln!(self.out, "{INDENT}{}", self.cut_str(raw, CUT_INPUT * 4))
                }
            }
        }
    }

    fn session_start(&mut self, r: &Map<String, Value>) -> std::io::Result<()> {
        let _ = self.stamp(r);
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let label = self.paint("1", "session");
        let mut head = format!("{label} {} · capsule {}", s("session"), s("capsule"));
        if !s("member").is_empty() {
            head.push_str(&format!(" (member {})", s("member")));
        }
        head.push_str(&format!(
            " · driver {} · mur {}",
            s("driver"),
            s("mur_version")
        ));
        writeln!(self.out, "{head}")?;
        writeln!(self.out, "{INDENT}started {}", s("ts"))?;
        if !s("deadline").is_empty() {
            writeln!(self.out, "{INDENT}deadline {}", s("deadline"))?;
        }
        writeln!(self.out, "{INDENT}records {}", s("records_dir"))?;
        let tools: Vec<&str> = r
            .get("tools_declared")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        writeln!(self.out, "{INDENT}tools {}", tools.join(", "))
    }

    /// Writes `text` indented under the record line, each line behind a bar; cut to
    /// [`CUT_LINES`] lines and [`CUT_BYTES`] bytes when `cut` and not `--full`.
    fn block(&mut self, text: &str, cut: bool) -> std::io::Result<()> {
        let bar = self.paint("2", "│");
        let total_lines = text.lines().count();
        let mut shown_bytes = 0;
        // Cutting a few lines saves nothing: a result barely over the cut is shown whole.
        let cut =
            cut && !self.full && (total_lines > CUT_LINES + 4 || text.len() > CUT_BYTES + 400);
        for (i, l) in text.lines().enumerate() {
            if cut && (i >= CUT_LINES || shown_bytes + l.len() > CUT_BYTES) {
                let more = self.paint(
                    "2",
                    &format!(
                        "… {} more line(s), {} bytes in all (--full shows all)",
                        total_lines - i,
                        text.len()
                    ),
                );
                return writeln!(self.out, "{INDENT}{more}");
            }
            shown_bytes += l.len() + 1;
            writeln!(self.out, "{INDENT}{bar} {l}")?;
        }
        Ok(())
    }
}

/// A record's `ts`, parsed.
fn ts_of(r: &Map<String, Value>) -> Option<SystemTime> {
    r.get("ts")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339(t).ok())
}

/// The fields of a record other than the common ones (ts, seq, session, task, type).
fn rest(r: &Map<String, Value>) -> Map<String, Value> {
    r.iter()
        .filter(|(k, _)| !matches!(k.as_str(), "ts" | "seq" | "session" | "task" | "type"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `t` relative to `start` as `+MM:SS.mmm` (`+H:MM:SS.mmm` from an hour on).
pub fn relative(t: SystemTime, start: SystemTime) -> String {
    let (sign, d) = match t.duration_since(start) {
        Ok(d) => ('+', d),
        Err(e) => ('-', e.duration()),
    };
    let ms = d.as_millis();
    let (h, m, s, milli) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    if h > 0 {
        format!("{sign}{h}:{m:02}:{s:02}.{milli:03}")
    } else {
        format!("{sign}{m:02}:{s:02}.{milli:03}")
    }
}

/// A duration in milliseconds as `15 ms` or `1.234 s`; `?` when absent.
/// A record's `argv` as a shell-like line: each argument as is when it is plain,
/// JSON-quoted when it holds a space, a quote or a control character.
fn argv_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| match x {
                Value::String(t)
                    if !t.is_empty()
                        && !t.chars().any(|c| {
                            c.is_whitespace() || c.is_control() || "\"'\\".contains(c)
                        }) =>
                {
                    t.clone()
                }
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn ms(v: Option<u64>) -> String {
    match v {
        None => "?".into(),
        Some(v) if v < 1000 => format!("{v} ms"),
        Some(v) => format!("{:.3} s", v as f64 / 1000.0),
    }
}

fn secs(b: SystemTime, a: SystemTime) -> String {
    ms(Some(
        b.duration_since(a)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn relative_times() {
        let s = SystemTime::UNIX_EPOCH;
        assert_eq!(relative(s + Duration::from_millis(1234), s), "+00:01.234");
        assert_eq!(relative(s + Duration::from_secs(3725), s), "+1:02:05.000");
        assert_eq!(relative(s, s + Duration::from_millis(5)), "-00:00.005");
    }

    #[test]
    fn long_results_are_cut_unless_full() {
        let content: String = (0..40).map(|i| format!("line {i}\n")).collect();
        let rec = serde_json::json!({"ts": "2026-01-01T00:00:00.000Z", "type": "tool_call",
            "name": "ls", "call_id": "c1", "status": "passed", "summary": "ok",
            "duration_ms": 3, "content": content});
        let mut r = Renderer::new(Vec::new(), false, false);
        r.line(1, &rec.to_string()).unwrap();
        let out = String::from_utf8(r.out).unwrap();
        assert!(out.contains("│ line 11\n"), "{out}");
        assert!(!out.contains("line 12\n"), "{out}");
        assert!(
            out.contains("… 28 more line(s), 310 bytes in all (--full shows all)"),
            "{out}"
        );
        let mut r = Renderer::new(Vec::new(), false, true);
        r.line(1, &rec.to_string()).unwrap();
        let out = String::from_utf8(r.out).unwrap();
        assert!(out.contains("│ line 39\n"), "{out}");
    }
}
