//! The reaper: one thread for the whole process that reaps every child of `mur`, the
//! leaders and group members of the supervisor's commands and, in `mur` itself, the
//! orphans that came back to it as a child subreaper.
//!
//! The thread blocks in `waitid(P_ALL, WEXITED | WNOWAIT)`, which returns a zombie
//! child without reaping it; it reads the zombie's process group (`getpgid` answers
//! for a zombie), takes the spawn gate exclusively ([`reap_guard`]), and then:
//!
//! - a process of a registered group (a command's leader, or a process of its group
//!   that came back to `mur`) is reaped with `waitpid(pid, WNOHANG)`; the leader's exit
//!   is reported to its command (see [`super::Running`]), and once `waitpid(-pgid,
//!   WNOHANG)` answers `ECHILD` (no child of `mur` is left in the group) the group is
//!   done and forgotten;
//! - any other zombie is an orphan (`mur` as a child subreaper, or as a container's
//!   PID 1) and is reaped, once [`start`] has switched that on; a `debug` log line is
//!   all it leaves.
//!
//! Each exit costs the same constant work (one `waitid`, one `getpgid`, one or two
//! `waitpid`), whatever the number of commands held; with nothing exiting the thread
//! sleeps in the kernel: no tick, no poll. When `mur` has no child at all
//! (`ECHILD`) it sleeps on a channel that every spawn wakes.
//!
//! Every command starts holding [`spawn_guard`] until its group is registered
//! (by the supervisor), and the reaper decides and reaps holding [`reap_guard`], so the
//! reaper never sees a command's leader between its fork and its registration.
//!
//! Without [`start`] (a program using the library, such as a benchmark, that spawns
//! children of its own), the thread still starts with the first command but reaps
//! only registered groups; it waits in `waitid` only while a group is registered, and
//! a zombie it must not reap (the host program's own child) makes it reap the
//! registered groups one by one (`waitpid(-pgid, WNOHANG)`) every 2 ms until the host
//! reaps its child.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};
use nix::errno::Errno;
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::{getpgid, Pid};

use super::{Group, News};

/// Held for reading while a command is started and its group registered, for writing
/// while the reaper or a sweep decides and reaps.
static GATE: RwLock<()> = RwLock::new(());

/// The registered groups, by process group id.
static GROUPS: Mutex<Option<HashMap<i32, Group>>> = Mutex::new(None);

/// Every session whose supervisor registered a group in this process (supervisors
/// without a session, such as a hook supervisor, are not counted).
static OWNERS: Mutex<BTreeSet<Arc<str>>> = Mutex::new(BTreeSet::new());

/// Whether orphans (zombies of no registered group) are reaped: set by [`start`].
static ORPHANS: AtomicBool = AtomicBool::new(false);

static STARTED: Once = Once::new();
static WAKE: Mutex<Option<Sender<()>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn groups() -> MutexGuard<'static, Option<HashMap<i32, Group>>> {
    lock(&GROUPS)
}

/// Held by whoever starts a child of `mur` until its group is registered: the
/// reaper decides nothing meanwhile.
pub fn spawn_guard() -> RwLockReadGuard<'static, ()> {
    GATE.read().unwrap_or_else(|e| e.into_inner())
}

/// Held by whoever reaps a zombie it did not start (the reaper, the session's end
/// sweep) while it decides and reaps: no command starts meanwhile.
pub fn reap_guard() -> RwLockWriteGuard<'static, ()> {
    GATE.write().unwrap_or_else(|e| e.into_inner())
}

/// Registers a command's group (its leader's pid is its group id): the reaper reports
/// the leader's exit to it. Starts the reaper thread on first use.
///
/// Errors: the reaper thread cannot be started.
pub(super) fn register(group: Group) -> std::io::Result<()> {
    ensure_thread()?;
    if let Some(o) = &group.owner {
        lock(&OWNERS).insert(o.clone());
    }
    groups()
        .get_or_insert_with(HashMap::new)
        .insert(group.pgid, group);
    wake();
    Ok(())
}

/// Whether process group `pgid` is a command's group the reaper still works on.
pub fn is_tracked(pgid: i32) -> bool {
    groups().as_ref().is_some_and(|g| g.contains_key(&pgid))
}

/// The owner of registered group `pgid`: `Some(Some(session id))`, `Some(None)` for
/// a supervisor without a session, `None` when no such group is registered.
pub fn owner_of(pgid: i32) -> Option<Option<Arc<str>>> {
    groups().as_ref()?.get(&pgid).map(|g| g.owner.clone())
}

/// The only session that ever registered a group in this process, when there is
/// exactly one (`mur run`, `mur door`): a descendant of `mur` that no command group
/// claims is then its.
pub fn sole_owner() -> Option<Arc<str>> {
    let o = lock(&OWNERS);
    if o.len() == 1 {
        o.iter().next().cloned()
    } else {
        None
    }
}

fn wake() {
    if let Some(tx) = lock(&WAKE).as_ref() {
        let _ = tx.try_send(());
    }
}

fn ensure_thread() -> std::io::Result<()> {
    let mut res = Ok(());
    STARTED.call_once(|| {
        let (tx, rx) = bounded::<()>(1);
        *lock(&WAKE) = Some(tx);
        if let Err(e) = std::thread::Builder::new()
            .name("reaper".into())
            .stack_size(128 * 1024)
            .spawn(move || run(&rx))
        {
            *lock(&WAKE) = None;
            res = Err(e);
        }
    });
    if res.is_ok() && lock(&WAKE).is_none() {
        return Err(std::io::Error::other(
            "the reaper thread could not be started",
        ));
    }
    res
}

/// Makes the reaper reap every zombie child of `mur`, orphans included, and starts
/// it: `mur` is then a correct parent for whatever its commands leave behind (and a
/// correct PID 1 in a container).
///
/// Errors: the reaper thread cannot be started.
pub fn start() -> std::io::Result<()> {
    ORPHANS.store(true, Ordering::SeqCst);
    ensure_thread()?;
    wake();
    Ok(())
}

fn any_registered() -> bool {
    groups().as_ref().is_some_and(|g| !g.is_empty())
}

fn run(wake: &Receiver<()>) {
    loop {
        let orphans = ORPHANS.load(Ordering::SeqCst);
        if !orphans && !any_registered() {
            if wake.recv().is_err() {
                return;
            }
            continue;
        }
        match waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(status) => {
                let Some(pid) = status.pid() else { continue };
                if !reap_pid(pid.as_raw(), orphans) {
                    reap_registered();
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            Err(Errno::EINTR) => {}
            Err(Errno::ECHILD) => {
                // No child: sleep until a spawn (or start) says there may be one.
                let _ = wake.recv_timeout(Duration::from_secs(3600));
            }
            Err(e) => {
                log::warn!("the reaper's waitid failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Handles zombie `pid`; false when it is not the reaper's to reap (a host program's
/// own child, without [`start`]).
fn reap_pid(pid: i32, orphans: bool) -> bool {
    let pgid = getpgid(Some(Pid::from_raw(pid))).map(Pid::as_raw).ok();
    let mut news = Vec::new();
    {
        let _gate = reap_guard();
        let registered = pgid.is_some_and(is_tracked);
        if !registered && !orphans {
            return false;
        }
        let status = match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return true,
            Ok(s) => s,
        };
        match pgid {
            Some(pgid) if registered => {
                settle(pgid, pid, &status, &mut news);
            }
            _ => log::debug!("reaped orphan {pid}, process group {pgid:?}"),
        }
    }
    // Told outside the locks: masking a log may take a while.
    for n in news {
        n.deliver();
    }
    true
}

/// Reaps what it can of every registered group, one `waitpid(-pgid, WNOHANG)` each.
fn reap_registered() {
    let mut news = Vec::new();
    {
        let _gate = reap_guard();
        let pgids: Vec<i32> = groups()
            .as_ref()
            .map(|g| g.keys().copied().collect())
            .unwrap_or_default();
        for pgid in pgids {
            loop {
                match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => break,
                    Ok(s) => {
                        let pid = s.pid().map(Pid::as_raw).unwrap_or(0);
                        if settle(pgid, pid, &s, &mut news) {
                            break;
                        }
                    }
                    Err(Errno::EINTR) => {}
                    Err(_) => {
                        finish(pgid, &mut news);
                        break;
                    }
                }
            }
        }
    }
    for n in news {
        n.deliver();
    }
}

/// Notes `status` of `pid` for group `pgid` (the leader's exit goes to `news`), then
/// reaps the group's other zombies and forgets the group once no child of `mur` is
/// left in it. True when the group is done.
fn settle(pgid: i32, pid: i32, status: &WaitStatus, news: &mut Vec<News>) -> bool {
    let exit = match *status {
        WaitStatus::Exited(_, code) => Some((Some(code), None)),
        WaitStatus::Signaled(_, sig, _) => Some((None, Some(sig as i32))),
        _ => None,
    };
    if pid == pgid {
        if let Some((code, signal)) = exit {
            let mut g = groups();
            if let Some(group) = g.as_mut().and_then(|g| g.get_mut(&pgid)) {
                news.extend(group.leader_exited(code, signal));
            }
        }
    }
    loop {
        match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(s) => {
                if s.pid().map(Pid::as_raw) == Some(pgid) {
                    if let WaitStatus::Exited(_, _) | WaitStatus::Signaled(..) = s {
                        return settle(pgid, pgid, &s, news);
                    }
                }
            }
            Err(Errno::EINTR) => {}
            Err(_) => {
                finish(pgid, news);
                return true;
            }
        }
    }
}

/// The group is done: no child of `mur` is left in it.
fn finish(pgid: i32, news: &mut Vec<News>) {
    let group = groups().as_mut().and_then(|g| g.remove(&pgid));
    if let Some(mut group) = group {
        news.push(group.done());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unregistered_group_is_not_tracked() {
        assert!(!is_tracked(-77));
        assert_eq!(owner_of(-77), None);
    }
}
