//! What `/proc` tells about `mur`'s descendants: the child subreaper switch, the
//! processes left holding a command's output, and the sweep that ends every
//! descendant still alive when a session ends.
//!
//! With `mur` a child subreaper (`PR_SET_CHILD_SUBREAPER`), a process whose parent
//! dies is reparented to `mur` rather than to init, even one that left its command's
//! process group with `setsid` or a double fork. It stays a descendant of `mur`, so the
//! session's end finds it by walking the parent links in `/proc/<pid>/stat`.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Makes `mur` a child subreaper: orphaned descendants are reparented to it.
///
/// Errors: the `prctl` call failed (a kernel older than 3.4).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Its pid.
    pub pid: i32,
    /// Its parent's pid.
    pub ppid: i32,
    /// Its process group id.
    pub pgid: i32,
    /// Its command name (`comm`, at most 15 bytes).
    pub comm: String,
    /// Whether it has exited and waits to be reaped (state `Z` or `X`).
    pub zombie: bool,
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone. A command name that is
/// not UTF-8 (a process may name itself with any bytes) is read lossily, never a reason
/// to miss the process.
pub fn read_stat(pid: i32) -> Option<Proc> {
    let raw = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let s = String::from_utf8_lossy(&raw);
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    let mut rest = s.get(close + 2..)?.split(' ');
    let state = rest.next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgid = rest.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        pgid,
        comm,
        zombie: state == "Z" || state == "X",
    })
}

/// Every process `/proc` lists.
pub fn scan() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

/// The descendants of `root` among `procs` (children, their children, …), `root`
/// excluded, parents before children.
pub fn descendants(root: i32, procs: &[Proc]) -> Vec<Proc> {
    let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    let mut seen = HashSet::from([root]);
    while let Some(pid) = queue.pop() {
        for c in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(c.pid) {
                out.push((*c).clone());
                queue.push(c.pid);
            }
        }
    }
    out
}

/// The argv of a process (`/proc/<pid>/cmdline`); empty when unreadable.
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The value of `key` in a process's environment as it was at exec.
pub fn env_var(pid: i32, key: &str) -> Option<String> {
    let b = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{key}=");
    b.split(|&c| c == 0).find_map(|kv| {
        kv.strip_prefix(prefix.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// Whether the calling thread has a child outside `known` (cheap: one read of
/// `/proc/thread-self/children`; true when that file cannot be read). An orphan that
/// comes back to `mur` is reparented to the thread that started its ancestor, so on
/// the thread that spawns commands this tells whether a slower scan is worth doing.
pub fn has_unknown_children(known: &HashSet<i32>) -> bool {
    match std::fs::read_to_string("/proc/thread-self/children") {
        Ok(s) => s
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .any(|p| !known.contains(&p)),
        Err(_) => true,
    }
}

/// The live descendants of `mur` that hold `file` open (any file descriptor on the
/// same device and inode), by pid.
pub fn holders(file: &Path) -> Vec<Proc> {
    let Ok(meta) = std::fs::metadata(file) else {
        return Vec::new();
    };
    let (dev, ino) = (meta.dev(), meta.ino());
    let me = std::process::id() as i32;
    let mut out: Vec<Proc> = descendants(me, &scan())
        .into_iter()
        .filter(|p| !p.zombie)
        .filter(|p| {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", p.pid)) else {
                return false;
            };
            fds.filter_map(Result::ok).any(|fd| {
                std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino)
            })
        })
        .collect();
    out.sort_by_key(|p| p.pid);
    out
}

/// A descendant the session's end had to kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survivor {
    /// Its pid.
    pub pid: i32,
    /// Its argv from `/proc/<pid>/cmdline` (empty when unreadable).
    pub argv: Vec<String>,
    /// Its `comm`.
    pub comm: String,
    /// The work id of the command it descends from, from its `MURMUR_WORK_ID`.
    pub work_id: Option<String>,
}

/// How long [`sweep`] keeps at it: 3 s.
pub const SWEEP_LIMIT: Duration = Duration::from_secs(3);

/// Which descendants a [`sweep`] kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepScope<'a> {
    /// Only those positively marked as this session's: `MURMUR_SESSION` equal to the
    /// id. Used where other sessions share the process (a formation's members), so one
    /// member's end never kills another's processes; a process that cleared or forged
    /// the variable is left to the process's own end.
    Session(&'a str),
    /// Every live descendant of `mur`, whatever it claims to be: the end of the last
    /// session in the process.
    All,
}

/// Kills (SIGKILL) the live descendants of `mur` that `scope` covers and reaps every
/// zombie child, in rounds, until a round finds nothing to do or 3 s pass. Processes
/// whose process group is in `skip_pgids` or that any group reaper still waits on
/// ([`super::orphans::is_tracked`]) are left alone. Returns each process it killed,
/// once.
pub fn sweep(scope: SweepScope<'_>, skip_pgids: &[i32]) -> Vec<Survivor> {
    let me = std::process::id() as i32;
    let until = Instant::now() + SWEEP_LIMIT;
    let mut killed: Vec<Survivor> = Vec::new();
    let mut seen = HashSet::new();
    loop {
        let mut acted = false;
        for p in descendants(me, &scan()) {
            if skip_pgids.contains(&p.pgid) || super::orphans::is_tracked(p.pgid) {
                continue;
            }
            if p.zombie {
                if p.ppid == me {
                    let _gate = super::orphans::reap_guard();
                    let flags = Some(WaitPidFlag::WNOHANG);
                    if !super::orphans::is_tracked(p.pgid)
                        && matches!(waitpid(Pid::from_raw(p.pid), flags), Ok(s) if s.pid().is_some())
                    {
                        acted = true;
                    }
                }
                continue;
            }
            if let SweepScope::Session(want) = scope {
                if env_var(p.pid, "MURMUR_SESSION").as_deref() != Some(want) {
                    continue;
                }
            }
            if seen.insert(p.pid) {
                killed.push(Survivor {
                    pid: p.pid,
                    argv: cmdline(p.pid),
                    comm: p.comm.clone(),
                    work_id: env_var(p.pid, "MURMUR_WORK_ID"),
                });
            }
            let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            acted = true;
        }
        if !acted || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_of_self_parses() {
        let me = std::process::id() as i32;
        let p = read_stat(me).unwrap();
        assert_eq!(p.pid, me);
        assert!(!p.zombie);
        assert!(p.ppid > 0);
    }

    #[test]
    fn descendants_walk_parent_links() {
        let p = |pid, ppid| Proc {
            pid,
            ppid,
            pgid: pid,
            comm: String::new(),
            zombie: false,
        };
        let procs = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(20, 2)];
        let d: Vec<i32> = descendants(10, &procs).iter().map(|p| p.pid).collect();
        assert_eq!(d, [11, 12]);
    }
}
