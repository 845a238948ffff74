//! What `/proc` tells about `mur`'s descendants: the child subreaper switch, the
//! processes left holding a command's output, and the sweep that ends every
//! descendant still alive when a session ends.
//!
//! With `mur` a child subreaper (`PR_SET_CHILD_SUBREAPER`), a process whose parent
//! dies is reparented to `mur` rather than to init, even one that left its command's
//! process group with `setsid` or a double fork. It stays a descendant of `mur`, so the
//! session's end finds it by walking down from `mur`'s own children
//! (`/proc/<pid>/task/<tid>/children`, see [`walk`]): the cost follows `mur`'s own
//! process tree, not the number of processes on the host.

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
    /// Its start time, in clock ticks after boot (`starttime`, field 22): with the pid
    /// it names one process, whatever pid reuse brings later.
    pub start: u64,
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
    // Fields 6..=22 after pgid: session, tty_nr, tpgid, flags, minflt, cminflt,
    // majflt, cmajflt, utime, stime, cutime, cstime, priority, nice, num_threads,
    // itrealvalue, starttime.
    let start = rest.nth(16).and_then(|v| v.parse().ok()).unwrap_or(0);
    Some(Proc {
        pid,
        ppid,
        pgid,
        comm,
        zombie: state == "Z" || state == "X",
        start,
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

/// Whether `mur` has a child outside `known` (cheap: one read of
/// `/proc/self/task/<tid>/children` per thread of `mur`; true when those cannot be
/// read). A process that escaped its command's group and outlived its parent came back
/// to `mur` as a child subreaper, so this tells whether a walk is worth doing.
pub fn has_unknown_children(known: &HashSet<i32>) -> bool {
    match children_of(std::process::id() as i32) {
        Some(c) => c.iter().any(|p| !known.contains(p)),
        None => true,
    }
}

/// The children of process `pid`: every thread's `/proc/<pid>/task/<tid>/children`
/// (a child belongs to the thread that forked it, or that adopted it). `None` when the
/// files cannot be read (a kernel without `CONFIG_PROC_CHILDREN`); empty for a process
/// that is gone.
pub fn children_of(pid: i32) -> Option<Vec<i32>> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Some(Vec::new());
    };
    let mut out = Vec::new();
    let mut readable = false;
    for t in tasks.flatten() {
        match std::fs::read_to_string(t.path().join("children")) {
            Ok(s) => {
                readable = true;
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !t.path().exists() => {
                // The thread ended between the listing and the read.
                readable = true;
            }
            Err(_) => {}
        }
    }
    readable.then_some(out)
}

/// Whose a descendant of `mur` is, as [`walk`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A command of this session's supervisor, or a process descended from one.
    Session(std::sync::Arc<str>),
    /// A command of a supervisor without a session, or a descendant of one.
    Anonymous,
    /// A process that came back to `mur` from a command that is no longer known
    /// (its group is done), in a process where more than one owner runs commands and
    /// no walk saw it while it was still attached.
    Unknown,
}

impl Owner {
    fn of(o: Option<std::sync::Arc<str>>) -> Owner {
        match o {
            Some(s) => Owner::Session(s),
            None => Owner::Anonymous,
        }
    }
}

/// The owners recorded for processes a walk saw, by (pid, start time): a process that
/// a later walk finds adopted by `mur` keeps the owner it had while it was attached.
static SEEN: std::sync::Mutex<Option<HashMap<(i32, u64), Owner>>> = std::sync::Mutex::new(None);

/// The descendants of `mur`, parents before children, each with its owner. The walk
/// starts at `mur`'s own children and reads only the children lists of the processes
/// it finds, so its cost follows `mur`'s process tree, not the host's (without
/// `CONFIG_PROC_CHILDREN` it falls back to reading every process of `/proc`).
///
/// A child of `mur` is attributed, in this order: to the owner of the registered
/// command group it is in (its leader, or a process of its group); to the owner a
/// previous walk recorded for it while it still had a parent below `mur`; to the only
/// session that ever ran a command in this process (`mur run`, `mur door`: there is
/// one session); else it is [`Owner::Unknown`]. Every other descendant has its parent's
/// owner. The walk records what it saw (and forgets the processes it no longer sees).
pub fn walk() -> Vec<(Proc, Owner)> {
    let me = std::process::id() as i32;
    let Some(roots) = children_of(me) else {
        return walk_scan(me);
    };
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let old = seen.take().unwrap_or_default();
    let sole = super::orphans::sole_owner();
    let mut out: Vec<(Proc, Owner)> = Vec::new();
    let mut queue: Vec<(i32, Option<Owner>)> = roots.into_iter().map(|p| (p, None)).collect();
    let mut visited = HashSet::new();
    let mut i = 0;
    while i < queue.len() {
        let (pid, inherited) = queue[i].clone();
        i += 1;
        if !visited.insert(pid) {
            continue;
        }
        let Some(p) = read_stat(pid) else { continue };
        let owner = inherited.unwrap_or_else(|| {
            if let Some(o) = super::orphans::owner_of(p.pgid) {
                Owner::of(o)
            } else if let Some(o) = old.get(&(p.pid, p.start)) {
                o.clone()
            } else if let Some(o) = sole.clone() {
                Owner::Session(o)
            } else {
                Owner::Unknown
            }
        });
        for c in children_of(pid).unwrap_or_default() {
            queue.push((c, Some(owner.clone())));
        }
        out.push((p, owner));
    }
    let mut now = HashMap::new();
    for (p, o) in &out {
        if *o != Owner::Unknown {
            now.insert((p.pid, p.start), o.clone());
        }
    }
    *seen = Some(now);
    out
}

/// [`walk`] without children lists: every process of `/proc`, attributed by its
/// group, or to the sole owner.
fn walk_scan(me: i32) -> Vec<(Proc, Owner)> {
    let sole = super::orphans::sole_owner();
    let procs = scan();
    let mut owner: HashMap<i32, Owner> = HashMap::new();
    descendants(me, &procs)
        .into_iter()
        .map(|p| {
            let o = match owner.get(&p.ppid) {
                Some(o) if p.ppid != me => o.clone(),
                _ => match (super::orphans::owner_of(p.pgid), &sole) {
                    (Some(o), _) => Owner::of(o),
                    (None, Some(o)) => Owner::Session(o.clone()),
                    (None, None) => Owner::Unknown,
                },
            };
            owner.insert(p.pid, o.clone());
            (p, o)
        })
        .collect()
}

/// The live descendants of `mur` that hold `file` open (any file descriptor on the
/// same device and inode), by pid.
pub fn holders(file: &Path) -> Vec<Proc> {
    let Ok(meta) = std::fs::metadata(file) else {
        return Vec::new();
    };
    let (dev, ino) = (meta.dev(), meta.ino());
    let mut out: Vec<Proc> = walk()
        .into_iter()
        .map(|(p, _)| p)
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
    /// Only those [`walk`] attributes to this session ([`Owner::Session`]), by
    /// ancestry: descendants of its commands, wherever they moved (`setsid`, double
    /// fork, a cleared environment). Used at a task's or member's end, where other
    /// sessions may share the process (a formation's members), so one member's end
    /// never kills another's processes; a process no walk could attribute
    /// ([`Owner::Unknown`]) is left to the process's own end.
    Session(&'a str),
    /// Every live descendant of `mur`: the end of the last session in the process.
    All,
}

/// Kills (SIGKILL) the live descendants of `mur` that `scope` covers and reaps every
/// zombie child of no command group, in rounds, until a round finds nothing to do or
/// 3 s pass. Processes whose process group is in `skip_pgids` or is a command group
/// the reaper still works on ([`super::orphans::is_tracked`]) are left alone. Returns
/// each process it killed, once. Its cost follows `mur`'s own process tree ([`walk`]).
pub fn sweep(scope: SweepScope<'_>, skip_pgids: &[i32]) -> Vec<Survivor> {
    let me = std::process::id() as i32;
    let until = Instant::now() + SWEEP_LIMIT;
    let mut killed: Vec<Survivor> = Vec::new();
    let mut seen = HashSet::new();
    loop {
        let mut acted = false;
        for (p, owner) in walk() {
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
                if !matches!(&owner, Owner::Session(s) if &**s == want) {
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
            start: 0,
        };
        let procs = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(20, 2)];
        let d: Vec<i32> = descendants(10, &procs).iter().map(|p| p.pid).collect();
        assert_eq!(d, [11, 12]);
    }
}
