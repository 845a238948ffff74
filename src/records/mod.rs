//! Records: `trace.jsonl`, written by one writer thread per session.
//!
//! Each record is one JSON object on one line:
//! `{"ts": "<RFC 3339 UTC, ms>", "seq": N, "session": "ses_…", "task": "tsk_…"|null,
//! "type": "<record type>", …fields}`. The writer formats the whole line, then writes it
//! with one `write(2)` to a file opened `O_APPEND`, so a crash may lose the last record
//! but never leaves a half line before another.
//!
//! While its session lives, the writer holds an exclusive `flock(2)` on `trace.jsonl`
//! ([`is_running`] tests it; the kernel drops it when `mur` dies, however it dies), so
//! `mur trace --follow`, `mur sessions` and `mur gc` can tell a running session from
//! one whose `mur` was killed. [`read`] reads a trace back as a stream, [`find`] finds a
//! session's records directory, [`latest`] keeps the `latest` symlinks.

//!
//! A record stores at most 64 KiB of any one string, the full text going to a file
//! beside the trace; a session's records are limited to 256 MiB (see [`cap`]).

pub mod cap;
pub mod find;
pub mod latest;
pub mod read;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::SystemTime;

use crossbeam_channel::{unbounded, Sender};
use parking_lot::Mutex;
use serde_json::{Map, Value};

/// A handle to a session's trace. Cheap to clone; every clone feeds the same writer.
#[derive(Clone)]
pub struct Trace {
    inner: Arc<Inner>,
}

struct Inner {
    session: String,
    tx: Mutex<Option<Sender<Line>>>,
    /// The last seq handed out, and the bytes of records sent so far.
    seq: Mutex<(u64, u64)>,
    writer: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
    /// [`cap::SESSION_LIMIT_BYTES`], or a smaller one in tests.
    limit: u64,
}

/// What the writer thread writes: a trace line, or first a blob file (a path relative
/// to the trace's directory, and its text).
enum Line {
    Line(Vec<u8>),
    Blob(String, String),
}

impl Trace {
    /// Opens (creates or appends to) `path` and starts the writer thread.
    ///
    /// Errors: the file cannot be opened.
    pub fn open(path: &Path, session: &str) -> std::io::Result<Trace> {
        Trace::open_with_limit(path, session, cap::SESSION_LIMIT_BYTES)
    }

    /// [`Trace::open`] with a session limit of `limit` bytes instead of
    /// [`cap::SESSION_LIMIT_BYTES`].
    ///
    /// Errors: the file cannot be opened.
    pub fn open_with_limit(path: &Path, session: &str, limit: u64) -> std::io::Result<Trace> {
        let file = crate::private::file_options()
            .create(true)
            .append(true)
            .open(path)?;
        let file = lock_running(file, path);
        let (tx, rx) = unbounded::<Line>();
        let writer = std::thread::Builder::new()
            .name("trace-writer".into())
            .stack_size(64 * 1024)
            .spawn({
                let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
                move || write_loop(file, &dir, rx)
            })?;
        Ok(Trace {
            inner: Arc::new(Inner {
                session: session.to_string(),
                tx: Mutex::new(Some(tx)),
                seq: Mutex::new((0, 0)),
                writer: Mutex::new(Some(writer)),
                path: path.to_path_buf(),
                limit,
            }),
        })
    }

    /// The session id this trace belongs to.
    pub fn session(&self) -> &str {
        &self.inner.session
    }

    /// The path of `trace.jsonl`.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Appends one record of `kind` for `task` (or the session when `None`) with the
    /// given fields, long strings cut as [`cap`] says. Never blocks on the disk; a
    /// record sent after [`Trace::close`] is dropped with a log line.
    pub fn record(&self, task: Option<&str>, kind: &str, mut fields: Map<String, Value>) {
        // No secret of the runtime's is written, in the line or a blob (crate::secrets);
        // masked before any cut, so no part of one is left either.
        crate::secrets::mask_fields(&mut fields);
        // seq is taken under the same lock as the send so lines are in seq order.
        let mut state = self.inner.seq.lock();
        let (seq, used) = &mut *state;
        let over = *used >= self.inner.limit;
        let max = if over {
            cap::OVER_LIMIT_STRING_BYTES
        } else {
            cap::MAX_STRING_BYTES
        };
        let cuts = cap::cut_fields(&mut fields, max);
        *seq += 1;
        let mut blobs = Vec::new();
        if !cuts.is_empty() {
            let entries: Vec<Value> = cuts
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    let bytes = c.full.len();
                    let file = if over {
                        Value::Null
                    } else {
                        let name = format!("blobs/{:06}-{i}.txt", *seq);
                        blobs.push((name.clone(), c.full));
                        Value::String(name)
                    };
                    serde_json::json!({"field": c.path, "bytes": bytes, "file": file})
                })
                .collect();
            fields.insert("truncated".into(), Value::Array(entries));
        }
        let mut line = self.line(*seq, task, kind, fields);
        *used += line.len() as u64 + blobs.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
        if !over && *used >= self.inner.limit {
            *seq += 1;
            let limit = self.inner.limit;
            let note = self.line(
                *seq,
                None,
                "records_limit",
                crate::fields! {"limit_bytes" => limit, "used_bytes" => *used},
            );
            *used += note.len() as u64;
            line.extend_from_slice(&note);
        }
        match self.inner.tx.lock().as_ref() {
            Some(tx) => {
                for (name, bytes) in blobs {
                    let _ = tx.send(Line::Blob(name, bytes));
                }
                let _ = tx.send(Line::Line(line));
            }
            None => log::warn!("trace closed; dropped a {kind} record"),
        }
    }

    /// One record as a JSON line.
    fn line(
        &self,
        seq: u64,
        task: Option<&str>,
        kind: &str,
        fields: Map<String, Value>,
    ) -> Vec<u8> {
        let mut obj = Map::new();
        obj.insert("ts".into(), Value::String(now_rfc3339_ms()));
        obj.insert("seq".into(), Value::from(seq));
        obj.insert("session".into(), Value::String(self.inner.session.clone()));
        obj.insert(
            "task".into(),
            task.map_or(Value::Null, |t| Value::String(t.to_string())),
        );
        obj.insert("type".into(), Value::String(kind.to_string()));
        for (k, v) in fields {
            obj.insert(k, v);
        }
        let mut line = serde_json::to_vec(&Value::Object(obj)).unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// Closes the channel and waits until every record sent so far is on disk.
    pub fn close(&self) {
        self.inner.tx.lock().take();
        if let Some(h) = self.inner.writer.lock().take() {
            let _ = h.join();
        }
    }
}

/// The trace file, locked while the session runs when the file system allows it.
enum Held {
    Locked(nix::fcntl::Flock<File>),
    Plain(File),
}

impl Held {
    fn file(&self) -> &File {
        match self {
            Held::Locked(f) => f,
            Held::Plain(f) => f,
        }
    }
}

fn lock_running(file: File, path: &Path) -> Held {
    use nix::fcntl::{Flock, FlockArg};
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(f) => Held::Locked(f),
        Err((file, e)) => {
            log::warn!(
                "cannot lock {}: {e}; mur trace --follow and mur gc cannot tell this session is running",
                path.display()
            );
            Held::Plain(file)
        }
    }
}

/// Whether the session that writes `trace` is running: its `mur` holds the lock that
/// [`Trace::open`] takes. A file that cannot be opened is not running.
pub fn is_running(trace: &Path) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    let Ok(file) = File::open(trace) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

fn write_loop(file: Held, dir: &Path, rx: crossbeam_channel::Receiver<Line>) {
    let mut f = file.file();
    for msg in rx {
        match msg {
            Line::Line(bytes) => {
                if let Err(e) = f.write_all(&bytes) {
                    log::error!("cannot write trace record: {e}");
                }
            }
            Line::Blob(name, text) => {
                let path = dir.join(&name);
                let r = path
                    .parent()
                    .map_or(Ok(()), crate::private::create_dir_all)
                    .and_then(|()| crate::private::write(&path, text));
                if let Err(e) = r {
                    log::error!("cannot write {}: {e}", path.display());
                }
            }
        }
    }
    let _ = file.file().sync_all();
}

/// Now as RFC 3339 UTC with milliseconds, e.g. `2026-10-20T14:00:00.123Z`.
pub fn now_rfc3339_ms() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// A time as RFC 3339 UTC to the second, e.g. `2026-10-20T14:00:00Z`.
pub fn rfc3339_secs(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (`month` 1 to 12), by Howard
/// Hinnant's days-from-civil algorithm; negative before 1970.
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Builds a field map from `key => value` pairs: `fields!{"a" => 1, "b" => "x"}`.
#[macro_export]
macro_rules! fields {
    () => { serde_json::Map::new() };
    ($($k:expr => $v:expr),+ $(,)?) => {{
        let mut m = serde_json::Map::new();
        $( m.insert(String::from($k), serde_json::json!($v)); )+
        m
    }};
}
