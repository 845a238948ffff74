//! The orphan reaper: reaps, while the session runs, the zombie children of `mur` that
//! no group reaper waits for.
//!
//! A process that leaves its command's process group (`setsid`, a double fork that
//! ends in a new group) and whose parent exits is reparented to `mur`, a child
//! subreaper ([`super::procs::become_subreaper`]), or to `mur` as PID 1 in a
//! container. Its group's reaper waits on `waitpid(-pgid)` and never sees it, so
//! without this thread it would stay a zombie until the session's end sweep.
//!
//! [`start`] runs one thread, woken by SIGCHLD (through `signal-hook`'s iterator on
//! a second small thread: nothing runs in the handler itself) and by a 1 s tick in
//! case a signal was coalesced away. Each pass ([`reap_once`]) lists `mur`'s children
//! from `/proc/self/task/<tid>/children` (every thread's: an orphan comes back to the
//! thread that started its ancestor), falling back to a scan of `/proc`, and reaps with
//! `waitpid(pid, WNOHANG)` each child that is a zombie (state `Z`) whose process group
//! is not one a group reaper is still waiting on. It never calls `waitpid(-1)`, which
//! would steal a group reaper's status.
//!
//! Every group reaper registers its group here ([`track`]) while it works, and the
//! supervisor starts a command holding [`spawn_guard`], so a pass can never see a
//! command's leader between its fork and its registration. Nothing is recorded per
//! reap (a `debug` log line only); live survivors are still killed and recorded
//! (`survivor_killed`) by the session's end.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use crossbeam_channel::{bounded, select, tick};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use signal_hook::consts::SIGCHLD;
use signal_hook::iterator::Signals;

use super::procs::{read_stat, scan, Proc};

/// The orphan reaper's tick when no SIGCHLD comes: 1 s.
pub const TICK: Duration = Duration::from_secs(1);

/// Held for reading while a command is started and its group registered, for writing
/// while a pass decides and reaps.
static GATE: RwLock<()> = RwLock::new(());

/// Process groups whose reaper thread is still waiting on them.
static GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn groups() -> MutexGuard<'static, BTreeSet<i32>> {
    GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held by whoever starts a child of `mur` until its group is [`track`]ed: no orphan
/// pass runs meanwhile.
pub fn spawn_guard() -> RwLockReadGuard<'static, ()> {
    GATE.read().unwrap_or_else(|e| e.into_inner())
}

/// Held by whoever reaps a zombie it did not start (an orphan pass, the session's end
/// sweep) while it decides and reaps: no command starts meanwhile.
pub fn reap_guard() -> RwLockWriteGuard<'static, ()> {
    GATE.write().unwrap_or_else(|e| e.into_inner())
}

/// Registers process group `pgid` as waited on by a group reaper.
pub fn track(pgid: i32) {
    groups().insert(pgid);
}

/// Forgets process group `pgid` once its reaper is done.
pub fn untrack(pgid: i32) {
    groups().remove(&pgid);
}

/// Whether a group reaper is waiting on process group `pgid`.
pub fn is_tracked(pgid: i32) -> bool {
    groups().contains(&pgid)
}

/// `mur`'s children: every thread's `/proc/self/task/<tid>/children`, or, when those
/// cannot be read, the processes of `/proc` whose parent is `mur`.
fn children(me: i32) -> Vec<Proc> {
    let mut pids = BTreeSet::new();
    let mut readable = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                readable = true;
                pids.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    if !readable {
        return scan().into_iter().filter(|p| p.ppid == me).collect();
    }
    pids.into_iter().filter_map(read_stat).collect()
}

/// One pass: reaps every zombie child of `mur` whose process group no group reaper
/// waits on. Returns the pids reaped.
pub fn reap_once() -> Vec<i32> {
    let me = std::process::id() as i32;
    let _gate = reap_guard();
    let mut reaped = Vec::new();
    for p in children(me) {
        if !p.zombie || p.ppid != me || is_tracked(p.pgid) {
            continue;
        }
        if let Ok(s) = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG)) {
            if s.pid().is_some() {
                log::debug!(
                    "reaped orphan {} ({}), process group {}",
                    p.pid,
                    p.comm,
                    p.pgid
                );
                reaped.push(p.pid);
            }
        }
    }
    reaped
}

/// Starts the orphan reaper: a pass at every SIGCHLD (bursts coalesce into one pass)
/// and every [`TICK`], for the rest of the process.
///
/// Errors: the SIGCHLD handler or a thread cannot be installed.
pub fn start() -> std::io::Result<()> {
    let mut signals = Signals::new([SIGCHLD])?;
    let (tx, rx) = bounded::<()>(1);
    std::thread::Builder::new()
        .name("sigchld".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            for _ in signals.forever() {
                // A pass already pending covers this signal too.
                let _ = tx.try_send(());
            }
        })?;
    std::thread::Builder::new()
        .name("orphan-reaper".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let ticks = tick(TICK);
            loop {
                select! {
                    recv(rx) -> m => if m.is_err() { break },
                    recv(ticks) -> _ => {},
                }
                reap_once();
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracked_group_is_tracked_until_untracked() {
        track(-77);
        assert!(is_tracked(-77));
        untrack(-77);
        assert!(!is_tracked(-77));
    }
}
