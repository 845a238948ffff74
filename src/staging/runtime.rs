//! Housekeeping of runtime directories (`$MURMUR_HOME/run/<session id>/`).
//!
//! A session's `mur` holds an exclusive `flock(2)` on the directory's `.lock` from
//! staging until the directory is removed at the session's end; the kernel drops it
//! when `mur` dies however it dies. So a directory whose `.lock` nobody holds is a
//! leftover: of a `mur` that crashed or was killed (kept for inspection until the next
//! `mur run` or `mur door` starts, which removes it, see [`sweep_leftovers`]), or one
//! kept on purpose (`--keep-runtime`, `mur stage`: marked by a `.keep` file, removed
//! only by `mur gc`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use parking_lot::Mutex;

/// The lock file of a runtime directory.
pub const LOCK_FILE: &str = ".lock";
/// The marker of a runtime directory kept on purpose.
pub const KEEP_FILE: &str = ".keep";
/// A `.lock` younger than this is never swept: its session may be between creating the
/// file and locking it.
pub const SWEEP_MIN_AGE: Duration = Duration::from_secs(60);

static HELD: Mutex<Vec<(PathBuf, Flock<File>)>> = Mutex::new(Vec::new());
static KEEP: AtomicBool = AtomicBool::new(false);

/// Keep every runtime directory this process stages (`--keep-runtime`): at the
/// session's end it is marked with `.keep` instead of removed.
pub fn keep_runtime_dirs(keep: bool) {
    KEEP.store(keep, Ordering::SeqCst);
}

/// Whether [`keep_runtime_dirs`] was asked.
pub fn keeping() -> bool {
    KEEP.load(Ordering::SeqCst)
}

/// Creates `dir/.lock` and holds an exclusive lock on it for as long as this process
/// lives or until [`release`]. A lock the file system refuses is a warning only.
pub(crate) fn lock(dir: &Path) {
    let path = dir.join(LOCK_FILE);
    let file = match File::create(&path) {
        Ok(f) => f,
        Err(e) => {
            log::warn!("cannot create {}: {e}", path.display());
            return;
        }
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => HELD.lock().push((dir.to_path_buf(), l)),
        Err((_, e)) => log::warn!("cannot lock {}: {e}", path.display()),
    }
}

/// Lets go of the lock on `dir` (after it is removed, or marked kept).
pub(crate) fn release(dir: &Path) {
    HELD.lock().retain(|(d, _)| d != dir);
}

/// Marks `dir` kept: a `.keep` file that the start-up sweep respects.
pub fn mark_kept(dir: &Path) {
    if let Err(e) = std::fs::write(dir.join(KEEP_FILE), "") {
        log::warn!("cannot mark {} kept: {e}", dir.display());
    }
}

/// Whether a `mur` holds `dir`'s lock: its session is running.
pub fn in_use(dir: &Path) -> bool {
    let Ok(file) = File::open(dir.join(LOCK_FILE)) else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// A runtime directory found under `$MURMUR_HOME/run`.
#[derive(Debug, Clone)]
pub struct RuntimeDir {
    /// Its path.
    pub path: PathBuf,
    /// A `mur` holds its lock.
    pub in_use: bool,
    /// Marked `.keep`.
    pub kept: bool,
    /// Has a `.lock` (written by this version and later), and its age.
    pub lock_age: Option<Duration>,
    /// The directory's own modification time.
    pub modified: Option<SystemTime>,
}

/// Every runtime directory under `home/run`.
pub fn list(home: &Path) -> Vec<RuntimeDir> {
    let Ok(entries) = std::fs::read_dir(home.join("run")) else {
        return Vec::new();
    };
    let now = SystemTime::now();
    let mut v: Vec<RuntimeDir> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| {
            let path = e.path();
            let lock_age = std::fs::metadata(path.join(LOCK_FILE))
                .and_then(|m| m.modified())
                .ok()
                .map(|t| now.duration_since(t).unwrap_or_default());
            RuntimeDir {
                in_use: in_use(&path),
                kept: path.join(KEEP_FILE).exists(),
                lock_age,
                modified: e.metadata().and_then(|m| m.modified()).ok(),
                path,
            }
        })
        .collect();
    v.sort_by(|a, b| a.path.cmp(&b.path));
    v
}

/// Removes the runtime directories that sessions which crashed or were killed left
/// behind: a `.lock` nobody holds, older than [`SWEEP_MIN_AGE`], no `.keep`. Returns
/// the directories removed. Directories without `.lock` (older versions) and kept ones
/// are left to `mur gc`.
pub fn sweep_leftovers(home: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for d in list(home) {
        let old = d.lock_age.is_some_and(|a| a >= SWEEP_MIN_AGE);
        if d.in_use || d.kept || !old {
            continue;
        }
        match std::fs::remove_dir_all(&d.path) {
            Ok(()) => {
                log::info!(
                    "removed the runtime directory {} that a session which did not end left behind",
                    d.path.display()
                );
                removed.push(d.path);
            }
            Err(e) => log::warn!("cannot remove {}: {e}", d.path.display()),
        }
    }
    removed
}
