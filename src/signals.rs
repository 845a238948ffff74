//! The signal thread: SIGINT and SIGTERM become one shutdown event (signal-hook;
//! nothing clever runs in a handler).
//!
//! Shutdown is broadcast by dropping a channel's only sender: every clone of the
//! [`Shutdown`] receiver then fires in `select!` at once, forever.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The first SIGINT/SIGTERM the signal thread received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The name of the first SIGINT/SIGTERM `mur` received, if any (`SIGTERM`).
pub fn received() -> Option<&'static str> {
    match RECEIVED.load(Ordering::SeqCst) {
        SIGINT => Some("SIGINT"),
        SIGTERM => Some("SIGTERM"),
        _ => None,
    }
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

/// Starts the signal thread: the first SIGINT or SIGTERM fires `handle`.
///
/// Errors: the signal handlers cannot be installed.
pub fn start(handle: ShutdownHandle) -> std::io::Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("signals".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                log::info!("signal {sig}: shutting down");
                RECEIVED.store(sig, Ordering::SeqCst);
                handle.fire(sig);
            }
        })?;
    Ok(())
}
