//! The signal thread: SIGINT, SIGTERM, SIGHUP and SIGQUIT become one shutdown event
//! (signal-hook; nothing clever runs in a handler).
//!
//! SIGHUP (a dropped ssh session, a closed terminal) and SIGQUIT (Ctrl-\) would
//! otherwise end `mur` on the spot, leaving its commands running under PID 1 and no
//! `session_end` written; they are handled as SIGTERM is. A `mur` started with SIGHUP
//! or SIGQUIT ignored (`nohup mur …`, a background job of a non-interactive shell)
//! keeps ignoring it, as POSIX programs do: the disposition is read before any
//! handler is installed.
//!
//! Shutdown is broadcast by dropping a channel's only sender: every clone of the
//! [`Shutdown`] receiver then fires in `select!` at once, forever.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

/// The first shutdown signal the signal thread received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The name of the first shutdown signal `mur` received, if any (`SIGTERM`, `SIGINT`,
/// `SIGHUP`, `SIGQUIT`).
pub fn received() -> Option<&'static str> {
    name(RECEIVED.load(Ordering::SeqCst))
}

/// The name of a shutdown signal; `None` for any other number.
pub fn name(signal: i32) -> Option<&'static str> {
    match signal {
        SIGINT => Some("SIGINT"),
        SIGTERM => Some("SIGTERM"),
        SIGHUP => Some("SIGHUP"),
        SIGQUIT => Some("SIGQUIT"),
        _ => None,
    }
}

/// The signals that shut `mur` down: SIGINT and SIGTERM always, SIGHUP and SIGQUIT
/// unless the process started with them ignored.
pub fn shutdown_signals() -> Vec<i32> {
    let mut v = vec![SIGINT, SIGTERM];
    v.extend(
        [SIGHUP, SIGQUIT]
            .into_iter()
            .filter(|s| !inherited_ignored(*s)),
    );
    v
}

/// `true` when `signal`'s disposition is SIG_IGN now (inherited from the parent).
fn inherited_ignored(signal: i32) -> bool {
    // SAFETY: a zeroed `sigaction` is a valid out-value; with a null new action,
    // sigaction(2) only reads the current disposition and changes nothing.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) };
    r == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// A receiver that becomes ready (disconnected) when `mur` is told to shut down.
pub type Shutdown = Receiver<()>;

/// The shutdown broadcaster.
#[derive(Clone)]
pub struct ShutdownHandle {
    tx: Arc<Mutex<Option<Sender<()>>>>,
    rx: Receiver<()>,
    signal: Arc<AtomicI32>,
}

impl ShutdownHandle {
    /// A broadcaster that has not fired.
    pub fn new() -> Self {
        let (tx, rx) = bounded(0);
        ShutdownHandle {
            tx: Arc::new(Mutex::new(Some(tx))),
            rx,
            signal: Arc::new(AtomicI32::new(0)),
        }
    }

    /// A receiver to `select!` on.
    pub fn receiver(&self) -> Shutdown {
        self.rx.clone()
    }

    /// Fires the shutdown (idempotent).
    pub fn fire(&self, signal: i32) {
        self.signal
            .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
            .ok();
        self.tx.lock().take();
    }

    /// The signal that fired the shutdown, if any.
    pub fn fired_by(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }

    /// Whether the shutdown has fired.
    pub fn fired(&self) -> bool {
        self.tx.lock().is_none()
    }
}

impl Default for ShutdownHandle {
    fn default() -> Self {
        Self::new()
    }
}

/// Starts the signal thread: the first of [`shutdown_signals`] (SIGINT, SIGTERM, and
/// SIGHUP and SIGQUIT unless inherited ignored) fires `handle`; the second, while the
/// shutdown is still under way, calls `second` with its number (`mur` kills every
/// process group at once there and exits 130, see [`kill_every_group`]).
///
/// Errors: the signal handlers cannot be installed.
pub fn start(
    handle: ShutdownHandle,
    second: impl FnOnce(i32) + Send + 'static,
) -> std::io::Result<()> {
    let mut signals = Signals::new(shutdown_signals())?;
    std::thread::Builder::new()
        .name("signals".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let mut forever = signals.forever();
            if let Some(sig) = forever.next() {
                log::info!("signal {sig}: shutting down");
                RECEIVED.store(sig, Ordering::SeqCst);
                handle.fire(sig);
            }
            if let Some(sig) = forever.next() {
                log::info!("signal {sig} during the shutdown: ending now");
                second(sig);
            }
        })?;
    Ok(())
}

/// Kills (SIGKILL) every process group of `mur`'s descendants at once, and every
/// descendant left in `mur`'s own group, without a grace: the second signal's end.
/// Returns how many groups and processes it signalled.
pub fn kill_every_group() -> usize {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::{getpgrp, Pid};
    let own = getpgrp().as_raw();
    let procs = crate::exec::procs::scan();
    let descendants = crate::exec::procs::descendants(std::process::id() as i32, &procs);
    let mut groups: Vec<i32> = descendants
        .iter()
        .map(|p| p.pgid)
        .filter(|g| *g != own && *g > 1)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let mut n = 0;
    for g in &groups {
        if killpg(Pid::from_raw(*g), Signal::SIGKILL).is_ok() {
            n += 1;
        }
    }
    for p in descendants.iter().filter(|p| p.pgid == own && !p.zombie) {
        if kill(Pid::from_raw(p.pid), Signal::SIGKILL).is_ok() {
            n += 1;
        }
    }
    n
}
