//! Running a hook or a check: a command run like a shell tool, through the session's
//! hook supervisor ([`crate::exec::Supervisor`]): its own process group, cwd the
//! workdir, stdin a file holding the JSON the runtime hands it, stdout a file read back
//! once it exits, stderr into its log, a timeout after which the group is stopped
//! SIGTERM then SIGKILL 2 s later, and whatever it left in its group killed once its
//! leader exits.
//!
//! A hook answers one JSON object on stdout ([`one_object`]); anything else is a
//! failure the caller turns into a deny (on_tool_call) or a failed attempt
//! (on_task_end), never into an allow.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver};
use serde_json::{Map, Value};

use crate::exec::{ExitInfo, Io, Supervisor};

/// The most of a hook's stdout the runtime reads: 64 KiB. More is a failure.
pub const STDOUT_CAP: usize = 64 * 1024;

/// Files of hook runs in a process are numbered from one counter.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// How one run ended.
#[derive(Debug, Clone)]
pub(super) enum Ended {
    /// The leader exited.
    Exited(ExitInfo),
    /// The timeout passed; the group was stopped.
    TimedOut,
    /// The task was canceled or the session shut down; the group was stopped.
    Canceled,
    /// The session's deadline passed while it ran; the group was stopped.
    Deadline,
    /// It could not be started.
    NotStarted(String),
}

/// One finished run.
#[derive(Debug, Clone)]
pub(super) struct Run {
    /// How it ended.
    pub ended: Ended,
    /// What it printed on stdout (at most [`STDOUT_CAP`] bytes, lossy UTF-8).
    pub stdout: String,
    /// Whether stdout held more than [`STDOUT_CAP`] bytes.
    pub stdout_over: bool,
    /// From the start to the exit or the stop.
    pub duration: Duration,
    /// Its work id and log (stderr, or both streams for a check).
    pub work_id: Option<String>,
    /// The log's path.
    pub log: Option<PathBuf>,
}

impl Run {
    /// The `exit` of a `hook_run` record: the exit code (128 + signal for a signal
    /// kill), or null when it did not exit by itself.
    pub fn exit_code(&self) -> Option<i32> {
        match &self.ended {
            Ended::Exited(e) => Some(e.exit_code()),
            _ => None,
        }
    }

    /// Why the run does not count as an answer, or `None` for a zero exit.
    pub fn failure(&self, timeout: Duration) -> Option<String> {
        match &self.ended {
            Ended::Exited(e) if e.exit_code() == 0 && e.wait_error.is_none() => None,
            Ended::Exited(e) => Some(match (e.signal_name(), &e.wait_error) {
                (_, Some(w)) => format!("waiting for it failed: {w}"),
                (Some(sig), _) => format!("it was killed by {sig}"),
                (None, None) => format!("it exited with status {}", e.exit_code()),
            }),
            Ended::TimedOut => Some(format!(
                "it did not finish within {} s and was stopped",
                timeout.as_secs()
            )),
            Ended::Canceled => Some("the task was canceled while it ran".into()),
            Ended::Deadline => {
                Some("the session's deadline passed while it ran; it was stopped".into())
            }
            Ended::NotStarted(e) => Some(format!("it could not be started: {e}")),
        }
    }
}

/// What to run.
pub(super) struct Spec<'a> {
    /// argv, its first word resolved already.
    pub argv: &'a [String],
    /// The cwd.
    pub cwd: &'a Path,
    /// Where its files go (the session's `logs/`).
    pub logs_dir: &'a Path,
    /// Its stdin, or `None` for `/dev/null` with stdout into the log (a check).
    pub stdin: Option<&'a [u8]>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The bound of the run.
    pub timeout: Duration,
    /// Stops the run early when it fires or disconnects.
    pub stop: Option<&'a Receiver<()>>,
    /// Stops the run early when it passes (the session's deadline).
    pub deadline: Option<Instant>,
}

/// Runs `spec` to its end through `sup`.
pub(super) fn run(sup: &Supervisor, spec: Spec<'_>) -> Run {
    let started = Instant::now();
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let not_started = |e: String| Run {
        ended: Ended::NotStarted(e),
        stdout: String::new(),
        stdout_over: false,
        duration: started.elapsed(),
        work_id: None,
        log: None,
    };
    let mut io = Io {
        env: spec.env,
        ..Io::default()
    };
    let mut out_path = None;
    if let Some(input) = spec.stdin {
        let in_path = spec.logs_dir.join(format!("hook_{pid}_{n}.in.json"));
        let o_path = spec.logs_dir.join(format!("hook_{pid}_{n}.out"));
        let files = std::fs::write(&in_path, input)
            .and_then(|()| std::fs::File::open(&in_path))
            .and_then(|i| std::fs::File::create(&o_path).map(|o| (i, o)));
        match files {
            Ok((i, o)) => {
                io.stdin = Some(i);
                io.stdout = Some(o);
            }
            Err(e) => {
                return not_started(format!(
                    "cannot write its files in {}: {e}",
                    spec.logs_dir.display()
                ))
            }
        }
        out_path = Some(o_path);
    }
    let running = match sup.spawn_with(spec.argv, spec.cwd, spec.logs_dir, io) {
        Ok(r) => r,
        Err(e) => return not_started(e.to_string()),
    };
    let never_rx = never();
    let stop_rx = spec.stop.unwrap_or(&never_rx);
    let deadline_rx = match spec.deadline {
        Some(d) => after(d.saturating_duration_since(Instant::now())),
        None => never(),
    };
    let ended = select! {
        recv(running.exited()) -> _ => None,
        recv(after(spec.timeout)) -> _ => Some(Ended::TimedOut),
        recv(stop_rx) -> _ => Some(Ended::Canceled),
        recv(deadline_rx) -> _ => Some(Ended::Deadline),
    };
    let ended = match ended {
        None => match running.exit() {
            Some((e, _)) => Ended::Exited(e),
            None => Ended::TimedOut,
        },
        Some(why) => {
            running.stop();
            why
        }
    };
    let duration = started.elapsed();
    running.kill_leftovers();
    running.mark_exit_returned();
    // Once its group is reaped, the run is forgotten: a long session's hook runs do not
    // pile up in the supervisor.
    let _ = running.reaped().recv_timeout(Duration::from_millis(200));
    sup.forget(&running.work_id);
    // The hook supervisor's exit events are read by no one: drop them as they come.
    while sup.events().try_recv().is_ok() {}
    let (stdout, stdout_over) = match &out_path {
        Some(p) => read_capped(p),
        None => (String::new(), false),
    };
    Run {
        ended,
        stdout,
        stdout_over,
        duration,
        work_id: Some(running.work_id.clone()),
        log: Some(running.log_path.clone()),
    }
}

fn read_capped(p: &Path) -> (String, bool) {
    let mut buf = Vec::new();
    let over = match std::fs::File::open(p) {
        Ok(f) => {
            let _ = f.take(STDOUT_CAP as u64 + 1).read_to_end(&mut buf);
            buf.len() > STDOUT_CAP
        }
        Err(_) => false,
    };
    buf.truncate(STDOUT_CAP);
    (String::from_utf8_lossy(&buf).into_owned(), over)
}

/// The one JSON object a hook printed, or why its output is not one.
pub(super) fn one_object(run: &Run) -> Result<Map<String, Value>, String> {
    if run.stdout_over {
        return Err(format!(
            "it printed more than {} KiB on stdout; it must print one JSON object",
            STDOUT_CAP / 1024
        ));
    }
    if run.stdout.trim().is_empty() {
        return Err("it printed nothing; it must print one JSON object on stdout".into());
    }
    let mut values = serde_json::Deserializer::from_str(&run.stdout).into_iter::<Value>();
    let first = match values.next() {
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            return Err(format!(
                "its output is not JSON ({e}): {}",
                shown(&run.stdout)
            ))
        }
        None => return Err("it printed nothing; it must print one JSON object on stdout".into()),
    };
    match values.next() {
        None => {}
        Some(_) => {
            return Err(format!(
                "it printed more than one JSON value; it must print exactly one object: {}",
                shown(&run.stdout)
            ))
        }
    }
    match first {
        Value::Object(m) => Ok(m),
        other => Err(format!(
            "it printed {}, not a JSON object: {}",
            crate::tools::json_type(&other),
            shown(&run.stdout)
        )),
    }
}

/// The first 200 characters of a hook's output, for a reason.
fn shown(s: &str) -> String {
    let t = s.trim();
    let mut out: String = t.chars().take(200).collect();
    if out.len() < t.len() {
        out.push('…');
    }
    format!("`{out}`")
}

/// A hook's argv with its first word resolved: a word with `/` is relative to
/// `capsule_dir`, a bare name is left for `PATH`.
pub(super) fn resolve(argv: &[String], base: &Path) -> Vec<String> {
    let mut v = argv.to_vec();
    if let Some(first) = v.first_mut() {
        if first.contains('/') && !Path::new(first.as_str()).is_absolute() {
            *first = base.join(first.as_str()).display().to_string();
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(stdout: &str) -> Run {
        Run {
            ended: Ended::Exited(ExitInfo {
                code: Some(0),
                signal: None,
                wait_error: None,
            }),
            stdout: stdout.into(),
            stdout_over: false,
            duration: Duration::ZERO,
            work_id: None,
            log: None,
        }
    }

    #[test]
    fn a_finished_run_is_answered_from_its_stdout_and_forgotten_by_the_supervisor() {
        let dir = tempfile::tempdir().unwrap();
        let sup = Supervisor::new();
        let argv: Vec<String> = ["sh", "-c", "read x; echo \"{\\\"got\\\": \\\"$x\\\"}\""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let r = run(
            &sup,
            Spec {
                argv: &argv,
                cwd: dir.path(),
                logs_dir: dir.path(),
                stdin: Some(b"hello\n"),
                env: Vec::new(),
                timeout: Duration::from_secs(60),
                stop: None,
                deadline: None,
            },
        );
        assert_eq!(r.exit_code(), Some(0));
        assert_eq!(one_object(&r).unwrap()["got"], "hello");
        assert!(sup.all().is_empty(), "the run is still listed");
    }

    #[test]
    fn only_one_json_object_is_an_answer() {
        assert!(one_object(&run_with(" {\"decision\":\"allow\"}\n")).is_ok());
        assert_eq!(
            one_object(&run_with("")).unwrap_err(),
            "it printed nothing; it must print one JSON object on stdout"
        );
        assert_eq!(
            one_object(&run_with("{\"a\":1}{\"b\":2}")).unwrap_err(),
            "it printed more than one JSON value; it must print exactly one object: `{\"a\":1}{\"b\":2}`"
        );
        assert_eq!(
            one_object(&run_with("[1]")).unwrap_err(),
            "it printed an array, not a JSON object: `[1]`"
        );
        assert!(one_object(&run_with("allow"))
            .unwrap_err()
            .starts_with("its output is not JSON"));
    }
}
