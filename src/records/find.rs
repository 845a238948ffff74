//! Finding sessions' records directories under `$MURMUR_HOME/records`: a directory
//! named `ses_…` that holds a `trace.jsonl` is one session's. Symlinks (the `latest`
//! links) are not followed by the scan, so no session is found twice.

use std::path::{Path, PathBuf};

/// One session found by [`scan`]: its id (the directory's name) and its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The session id, `ses_…`.
    pub id: String,
    /// The records directory.
    pub dir: PathBuf,
}

/// Every session's records directory below `root`, newest first (session ids are
/// ULIDs, so their order is their start's). A directory that cannot be read is
/// skipped; `root` missing is an empty list.
pub fn scan(root: &Path) -> Vec<Found> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if !ft.is_dir() {
                continue;
            }
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("ses_") && path.join("trace.jsonl").is_file() {
                found.push(Found {
                    id: name,
                    dir: path,
                });
            } else {
                stack.push(path);
            }
        }
    }
    found.sort_by(|a, b| b.id.cmp(&a.id).then_with(|| a.dir.cmp(&b.dir)));
    found
}

/// The `trace.jsonl` that `arg` names for `mur trace`: `latest` (the
/// `records/latest` link of `home`), a records directory or a `trace.jsonl` file, or a
/// session id or an unambiguous prefix of one (with or without `ses_`).
///
/// Errors, as one line each: no `latest` link yet; a directory with no `trace.jsonl`;
/// a path that does not exist; an id no session has; a prefix several sessions share
/// (naming up to five of them).
pub fn resolve(home: &Path, arg: &str) -> Result<PathBuf, String> {
    let root = home.join("records");
    if arg == "latest" {
        let link = root.join("latest");
        return match std::fs::read_link(&link) {
            Ok(target) => {
                let dir = if target.is_absolute() {
                    target
                } else {
                    root.join(target)
                };
                records_dir_trace(&dir, &format!("{} (the latest link)", link.display()))
            }
            Err(_) => Err(format!(
                "no latest session: {} does not exist yet (mur run and mur door point it at the newest session's records)",
                link.display()
            )),
        };
    }
    let path = Path::new(arg);
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    if path.is_dir() {
        return records_dir_trace(path, arg);
    }
    let looks_like_path = arg.contains('/') || arg.starts_with('.') || arg.starts_with('~');
    if looks_like_path {
        return Err(format!(
            "{arg}: no such records directory (give a records directory, a session id or latest)"
        ));
    }
    let want = arg.to_ascii_lowercase();
    let want = if want.starts_with("ses_") {
        want
    } else {
        format!("ses_{want}")
    };
    let matches: Vec<Found> = scan(&root)
        .into_iter()
        .filter(|f| f.id.starts_with(&want))
        .collect();
    match matches.as_slice() {
        [] => Err(format!(
            "no session {arg} under {} (mur sessions lists them; a session run with --records-dir is read by its directory)",
            root.display()
        )),
        [one] => Ok(one.dir.join("trace.jsonl")),
        many if many.iter().all(|f| f.id == want) => Err(format!(
            "session {arg} has {} records directories under {}: {}; give the directory",
            many.len(),
            root.display(),
            many.iter().map(|f| f.dir.display().to_string()).collect::<Vec<_>>().join(", ")
        )),
        many => {
            let shown: Vec<&str> = many.iter().take(5).map(|f| f.id.as_str()).collect();
            let more = if many.len() > 5 { ", …" } else { "" };
            Err(format!(
                "session id prefix {arg} is ambiguous: it matches {} sessions ({}{more}); give more characters",
                many.len(),
                shown.join(", ")
            ))
        }
    }
}

fn records_dir_trace(dir: &Path, shown: &str) -> Result<PathBuf, String> {
    let t = dir.join("trace.jsonl");
    if t.is_file() {
        Ok(t)
    } else if dir.is_dir() {
        // A formation's records directory holds one per member.
        let mut members: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().join("trace.jsonl").is_file())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        members.sort();
        let hint = if members.is_empty() {
            String::new()
        } else {
            format!(
                "; it holds the records of {}: give one of them, e.g. {}",
                members.join(", "),
                dir.join(&members[0]).display()
            )
        };
        Err(format!(
            "{shown} is not a records directory: it has no trace.jsonl (a session's records directory holds trace.jsonl, logs/ and out/){hint}"
        ))
    } else {
        Err(format!("{shown}: no such records directory"))
    }
}
