//! `mur sessions`: the recent sessions under `$MURMUR_HOME/records`, newest first, one
//! summary each, read from its trace as a stream.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use crate::records::find::{scan, Found};
use crate::records::read::TraceLines;

/// One session's summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The session id.
    pub session: String,
    /// The capsule's `name`.
    pub capsule: Option<String>,
    /// The capsule directory.
    pub capsule_dir: Option<String>,
    /// The formation member it served, if any.
    pub member: Option<String>,
    /// `session_start`'s `ts` (RFC 3339 UTC, ms).
    pub started: Option<String>,
    /// Seconds from `session_start` to `session_end` (to now while it runs), ms
    /// precision.
    pub duration_secs: Option<f64>,
    /// `session_end.exit_status`; `running` while its `mur` holds the trace;
    /// `unfinished` when neither (its `mur` was killed).
    pub status: String,
    /// Tasks started.
    pub tasks: u64,
    /// Model calls that answered (turns) over all its tasks: `inference` records
    /// without an `error`. A call that failed (an unset credential, a script with no
    /// turn left, an HTTP error after its retries) or that the deadline or a shutdown
    /// cut short is not a turn.
    pub turns: u64,
    /// Input plus output tokens over all its model calls.
    pub tokens: u64,
    /// The records directory.
    pub records_dir: PathBuf,
}

fn ts(v: &Value) -> Option<SystemTime> {
    v.get("ts")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339(t).ok())
}

/// Reads the summary of the session whose records are in `dir`. Lines that do not
/// parse are skipped.
///
/// Errors: `dir/trace.jsonl` cannot be opened or read.
pub fn summarize(id: &str, dir: &Path) -> std::io::Result<Summary> {
    let trace = dir.join("trace.jsonl");
    let running = crate::records::is_running(&trace);
    let mut lines = TraceLines::open(&trace)?;
    let mut s = Summary {
        session: id.to_string(),
        capsule: None,
        capsule_dir: None,
        member: None,
        started: None,
        duration_secs: None,
        status: if running { "running" } else { "unfinished" }.into(),
        tasks: 0,
        turns: 0,
        tokens: 0,
        records_dir: dir.to_path_buf(),
    };
    let (mut start, mut end) = (None, None);
    while let Some(l) = lines.next_line()? {
        let Ok(r) = serde_json::from_str::<Value>(&l.text) else {
            continue;
        };
        let str_of = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
        match r.get("type").and_then(Value::as_str) {
            Some("session_start") => {
                s.session = str_of("session").unwrap_or(s.session);
                s.capsule = str_of("capsule");
                s.capsule_dir = str_of("capsule_dir");
                s.member = str_of("member");
                s.started = str_of("ts");
                start = ts(&r);
            }
            Some("task_start") => s.tasks += 1,
            Some("inference") => {
                if r.get("error").is_none() {
                    s.turns += 1;
                }
                let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
                s.tokens += n("input_tokens") + n("output_tokens");
            }
            Some("session_end") => {
                if let Some(st) = str_of("exit_status") {
                    s.status = st;
                }
                end = ts(&r);
            }
            _ => {}
        }
    }
    let end = end.or(running.then(SystemTime::now));
    if let (Some(a), Some(b)) = (start, end) {
        s.duration_secs = Some(b.duration_since(a).unwrap_or_default().as_millis() as f64 / 1000.0);
    }
    Ok(s)
}

/// The summaries of the `limit` newest sessions under `home/records`, newest first;
/// with `capsule`, only that capsule's: the capsule whose directory (or murmur.yaml)
/// `capsule` is when that path exists, else those whose `name` it is. A trace that
/// cannot be read is skipped with a warning.
pub fn list(home: &Path, capsule: Option<&str>, limit: usize) -> Vec<Summary> {
    let root = home.join("records");
    let (found, name): (Vec<Found>, Option<&str>) = match capsule {
        None => (scan(&root), None),
        Some(c) if Path::new(c).exists() => {
            let p = Path::new(c);
            let dir = crate::staging::resolve_capsule(p)
                .map(|(d, _)| d)
                .unwrap_or_else(|_| p.to_path_buf());
            let link = crate::staging::default_records_dir(home, &dir, "latest");
            let sub = link.parent().unwrap_or(&root).to_path_buf();
            // Only the capsule's own sessions, not those of capsules inside it.
            let own = scan(&sub)
                .into_iter()
                .filter(|f| f.dir.parent() == Some(sub.as_path()))
                .collect();
            (own, None)
        }
        Some(c) => (scan(&root), Some(c)),
    };
    let mut out = Vec::new();
    for f in found {
        if out.len() >= limit {
            break;
        }
        match summarize(&f.id, &f.dir) {
            Ok(s) if name.is_none_or(|n| s.capsule.as_deref() == Some(n)) => out.push(s),
            Ok(_) => {}
            Err(e) => log::warn!("cannot read {}: {e}", f.dir.join("trace.jsonl").display()),
        }
    }
    out
}

/// Formats `summaries` as the table `mur sessions` prints (a header, then one row
/// each).
pub fn table(summaries: &[Summary]) -> String {
    let header = [
        "SESSION", "CAPSULE", "STARTED", "DURATION", "STATUS", "TURNS", "TOKENS", "RECORDS",
    ];
    let rows: Vec<[String; 8]> = summaries
        .iter()
        .map(|s| {
            let mut capsule = s.capsule.clone().unwrap_or_else(|| "?".into());
            if let Some(m) = &s.member {
                if m != &capsule {
                    capsule.push_str(&format!(" ({m})"));
                }
            }
            [
                s.session.clone(),
                capsule,
                s.started.as_deref().map_or_else(
                    || "?".into(),
                    |t| match t.find('.') {
                        Some(i) => format!("{}Z", &t[..i]),
                        None => t.to_string(),
                    },
                ),
                s.duration_secs.map_or_else(|| "?".into(), short_duration),
                s.status.clone(),
                s.turns.to_string(),
                s.tokens.to_string(),
                s.records_dir.display().to_string(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut push = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        for (i, c) in cells.iter().enumerate() {
            if i == last {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        out.push('\n');
    };
    push(header.to_vec());
    for r in &rows {
        push(r.iter().map(String::as_str).collect());
    }
    out
}

/// A duration for a table cell: `850ms`, `12.3s`, `4m05s`, `2h10m`.
pub fn short_duration(secs: f64) -> String {
    if secs < 1.0 {
        format!("{}ms", (secs * 1000.0).round() as u64)
    } else if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        let s = secs as u64;
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let m = secs as u64 / 60;
        format!("{}h{:02}m", m / 60, m % 60)
    }
}
