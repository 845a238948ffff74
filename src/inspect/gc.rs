//! `mur gc`: removes the records of sessions that ended longer ago than a threshold,
//! leftover runtime directories, and `latest` links whose session is gone. A running
//! session's records and runtime directory are never touched (its `mur` holds their
//! locks, see [`crate::records::is_running`] and [`crate::staging::runtime`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::records::find::scan;
use crate::staging::runtime;

/// The default of `--older-than`.
pub const DEFAULT_OLDER_THAN: &str = "30d";

/// What `mur gc` does.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Remove what was last written longer ago than this.
    pub older_than: Duration,
    /// Print what would be removed, remove nothing.
    pub dry_run: bool,
}

/// What `mur gc` removed (or would remove).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GcReport {
    /// Session records directories.
    pub sessions: usize,
    /// Runtime directories.
    pub runtime_dirs: usize,
    /// Bytes of the files in them.
    pub bytes: u64,
    /// Running sessions left alone.
    pub running: usize,
}

/// The bytes of the files below `p` (symlinks not followed).
pub fn size_of(p: &Path) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(p)
        .map(|es| es.flatten().map(|e| size_of(&e.path())).sum())
        .unwrap_or(0)
}

/// `bytes` for a person: `812 B`, `4.0 KiB`, `12.3 MiB`, `1.2 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

fn age(p: &Path, now: SystemTime) -> Option<Duration> {
    let t = std::fs::metadata(p).and_then(|m| m.modified()).ok()?;
    Some(now.duration_since(t).unwrap_or_default())
}

/// Removes empty directories from `dir` up to (not including) `stop`.
fn prune_empty(mut dir: PathBuf, stop: &Path) {
    while dir.starts_with(stop) && dir != stop {
        if std::fs::remove_dir(&dir).is_err() {
            break;
        }
        if !dir.pop() {
            break;
        }
    }
}

/// Runs `mur gc` over `home`, printing one line per thing removed and a total on `out`.
///
/// A session's age is the time since its `trace.jsonl` was last written; a runtime
/// directory's, since it was last changed. Removal errors are printed and skipped.
///
/// Errors: `out` cannot be written.
pub fn gc(home: &Path, opts: &GcOptions, out: &mut dyn Write) -> std::io::Result<GcReport> {
    let now = SystemTime::now();
    let root = home.join("records");
    let verb = if opts.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut report = GcReport::default();
    for f in scan(&root) {
        let trace = f.dir.join("trace.jsonl");
        if crate::records::is_running(&trace) {
            report.running += 1;
            continue;
        }
        if age(&trace, now).is_none_or(|a| a < opts.older_than) {
            continue;
        }
        let bytes = size_of(&f.dir);
        if !opts.dry_run {
            if let Err(e) = std::fs::remove_dir_all(&f.dir) {
                writeln!(out, "cannot remove {}: {e}", f.dir.display())?;
                continue;
            }
            if let Some(parent) = f.dir.parent() {
                let link = parent.join("latest");
                if link.is_symlink() && !link.exists() {
                    let _ = std::fs::remove_file(&link);
                }
                prune_empty(parent.to_path_buf(), &root);
            }
        }
        writeln!(out, "{verb} {} ({})", f.dir.display(), human_bytes(bytes))?;
        report.sessions += 1;
        report.bytes += bytes;
    }
    for d in runtime::list(home) {
        if d.in_use {
            continue;
        }
        let old = d
            .modified
            .map(|t| now.duration_since(t).unwrap_or_default())
            .is_some_and(|a| a >= opts.older_than);
        if !old {
            continue;
        }
        let bytes = size_of(&d.path);
        if !opts.dry_run {
            if let Err(e) = std::fs::remove_dir_all(&d.path) {
                writeln!(out, "cannot remove {}: {e}", d.path.display())?;
                continue;
            }
        }
        writeln!(out, "{verb} {} ({})", d.path.display(), human_bytes(bytes))?;
        report.runtime_dirs += 1;
        report.bytes += bytes;
    }
    if !opts.dry_run {
        remove_dangling_links(&root);
    }
    let what = format!(
        "{} session record(s) and {} runtime director(ies), {}",
        report.sessions,
        report.runtime_dirs,
        human_bytes(report.bytes)
    );
    let running = if report.running > 0 {
        format!("; {} running session(s) left alone", report.running)
    } else {
        String::new()
    };
    if opts.dry_run {
        writeln!(out, "would free {what}{running}")?;
    } else {
        writeln!(out, "freed {what}{running}")?;
    }
    Ok(report)
}

/// Removes the `latest` links below `root` whose target is gone.
fn remove_dangling_links(root: &Path) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let p = e.path();
            if ft.is_symlink() && e.file_name() == "latest" && !p.exists() {
                let _ = std::fs::remove_file(&p);
            } else if ft.is_dir() && !e.file_name().to_string_lossy().starts_with("ses_") {
                stack.push(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_for_people() {
        assert_eq!(human_bytes(812), "812 B");
        assert_eq!(human_bytes(4096), "4.0 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024 + 512 * 1024), "5.5 MiB");
    }
}
