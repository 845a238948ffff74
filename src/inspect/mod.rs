//! The operator's view of records: `mur trace` (one session read as the conversation,
//! or its records as JSON lines), `mur sessions` (the recent sessions) and `mur gc`
//! (removing old records and leftover runtime directories).
//!
//! Everything here reads `trace.jsonl` as a stream ([`crate::records::read`]), so a
//! trace of any length is shown in constant memory.

pub mod gc;
pub mod render;
pub mod sessions;

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use crate::records::read::{kind_of, TraceLines};

/// How often `--follow` looks for new lines.
pub const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Whether to colour output written to stdout: only on a terminal, and never when
/// `NO_COLOR` is set to a non-empty value (no-color.org) or `TERM` is `dumb`.
pub fn stdout_color() -> bool {
    color_for(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    )
}

/// The rule of [`stdout_color`]: a terminal, `NO_COLOR` unset or empty, `TERM` not
/// `dumb`.
pub fn color_for(
    terminal: bool,
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
) -> bool {
    let no_color = no_color.is_some_and(|v| !v.is_empty());
    let dumb = term.is_some_and(|t| t == "dumb");
    terminal && !no_color && !dumb
}

/// What `mur trace` shows.
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    /// The records as JSON lines, unchanged, instead of the human view.
    pub json: bool,
    /// Only records of these types (all when empty).
    pub types: Vec<String>,
    /// Tool results and inputs whole instead of cut.
    pub full: bool,
    /// Keep reading as the session writes, until its `session_end`.
    pub follow: bool,
    /// ANSI colour in the human view.
    pub color: bool,
}

/// `mur trace`: writes the trace at `path` to `out` as `opts` says, and notes on
/// `err` (a line cut short under `--json`, a session that ended before `--follow`
/// began, one whose `mur` died without `session_end`).
///
/// Errors: the trace cannot be opened or read, or `out` cannot be written (a closed
/// pipe is the caller's to treat as the end).
pub fn trace(
    path: &Path,
    opts: &TraceOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<()> {
    let mut lines = TraceLines::open(path)?;
    let mut view = render::Renderer::new(out, opts.color, opts.full);
    let mut ended = false;
    let mut first_pass = true;
    loop {
        // Checked before reading: a writer that lets go of its lock after this has
        // written its lines before the next read.
        let running = opts.follow && crate::records::is_running(path);
        while let Some(l) = lines.next_line()? {
            let kind = kind_of(&l.text);
            if kind.as_deref() == Some("session_end") {
                ended = true;
            }
            let wanted = opts.types.is_empty()
                || kind
                    .as_ref()
                    .is_some_and(|k| opts.types.iter().any(|t| t == k));
            if !wanted {
                if !opts.json
                    && matches!(
                        kind.as_deref(),
                        Some("session_start" | "task_start" | "member_call_start")
                    )
                {
                    view.note(&l.text);
                }
                continue;
            }
            if opts.json {
                let o = view.out();
                o.write_all(l.text.as_bytes())?;
                o.write_all(b"\n")?;
            } else {
                view.line(l.number, &l.text)?;
            }
        }
        view.out().flush()?;
        if !opts.follow {
            break;
        }
        if ended {
            if first_pass {
                writeln!(
                    err,
                    "mur: trace: the session has ended (its trace ends with session_end); nothing more to follow"
                )?;
            }
            break;
        }
        if !running {
            writeln!(
                err,
                "mur: trace: the session is not running and its trace has no session_end (its mur was killed?); stopped following"
            )?;
            break;
        }
        first_pass = false;
        std::thread::sleep(FOLLOW_POLL);
    }
    // A running session's writer may be midway through a line: that is its next
    // record on the way, not a cut one.
    let partial = lines
        .partial()
        .filter(|_| !crate::records::is_running(path));
    if let Some(p) = partial {
        if opts.json {
            writeln!(
                err,
                "mur: trace: line {} is cut short ({} bytes, no newline: the writing mur was killed or the disk filled); not printed",
                p.number,
                p.text.len()
            )?;
        } else if opts.types.is_empty() {
            view.partial(p.number, &p.text)?;
        }
    }
    view.out().flush()
}

/// `mur run --json`'s copier: from the moment `path` exists, copies each complete line
/// of it to `out` as it is written, until `stop` is set, then copies what is left and
/// returns. `mur` sets `stop` once the session has returned (its trace closed, so every
/// record is on disk). Errors writing `out` end the copy (a reader that went away).
pub fn copy_lines_until(
    path: &Path,
    stop: &std::sync::atomic::AtomicBool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    let mut lines = loop {
        let stopping = stop.load(Ordering::SeqCst);
        match TraceLines::open(path) {
            Ok(l) => break l,
            Err(_) if !stopping => std::thread::sleep(Duration::from_millis(20)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
    };
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        while let Some(l) = lines.next_line()? {
            out.write_all(l.text.as_bytes())?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        if stopping {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_and_never_under_no_color() {
        let xterm = Some(OsStr::new("xterm"));
        assert!(color_for(true, None, xterm));
        assert!(color_for(true, Some(OsStr::new("")), xterm));
        assert!(!color_for(true, Some(OsStr::new("1")), xterm));
        assert!(!color_for(false, None, xterm));
        assert!(!color_for(true, None, Some(OsStr::new("dumb"))));
    }

    #[test]
    fn the_view_is_coloured_when_asked_and_plain_otherwise() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("trace.jsonl");
        std::fs::write(
            &p,
            "{\"ts\":\"2026-01-01T00:00:00.000Z\",\"type\":\"task_end\",\"exit_status\":\"completed\",\"turns\":1}\n",
        )
        .unwrap();
        let show = |color| {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let opts = TraceOptions {
                color,
                ..TraceOptions::default()
            };
            trace(&p, &opts, &mut out, &mut err).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert!(show(true).contains("\x1b[1;32mcompleted\x1b[0m"));
        assert!(!show(false).contains('\x1b'));
    }
}
