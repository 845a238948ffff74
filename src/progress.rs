//! The live progress line on stderr (only when stderr is a terminal): turn, the tool
//! being run or the model being waited for (with its retries: attempt, reason, wait),
//! elapsed seconds. Redrawn four times a second by its own thread.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

#[derive(Default)]
struct State {
    turn: u64,
    doing: String,
    done: bool,
}

/// A handle to the progress line; a no-op when stderr is not a terminal.
#[derive(Clone)]
pub struct Progress {
    state: Option<Arc<Mutex<State>>>,
}

impl Progress {
    /// Starts the progress thread when stderr is a terminal and `NO_COLOR`/`TERM=dumb`
    /// do not ask for plain output.
    pub fn start() -> Progress {
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        if !std::io::stderr().is_terminal() || dumb {
            return Progress { state: None };
        }
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        let start = Instant::now();
        let _ = std::thread::Builder::new()
            .name("progress".into())
            .stack_size(64 * 1024)
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(250));
                let st = s.lock();
                let mut err = std::io::stderr().lock();
                if st.done {
                    let _ = write!(err, "\r\x1b[2K");
                    let _ = err.flush();
                    return;
                }
                let _ = write!(
                    err,
                    "\r\x1b[2K[turn {}] {} ({}s)",
                    st.turn,
                    st.doing,
                    start.elapsed().as_secs()
                );
                let _ = err.flush();
            });
        Progress { state: Some(state) }
    }

    /// `true` when the line is drawn (stderr is a terminal); `false` for a handle that
    /// never draws, whose news a caller then logs instead.
    pub fn is_live(&self) -> bool {
        self.state.is_some()
    }

    /// A handle that keeps what it is told without drawing, for tests.
    #[cfg(test)]
    pub(crate) fn recording() -> Progress {
        Progress {
            state: Some(Arc::new(Mutex::new(State::default()))),
        }
    }

    /// What the line says now (turn, text), for tests.
    #[cfg(test)]
    pub(crate) fn shown(&self) -> Option<(u64, String)> {
        self.state.as_ref().map(|s| {
            let st = s.lock();
            (st.turn, st.doing.clone())
        })
    }

    /// A progress handle that never draws.
    pub fn none() -> Progress {
        Progress { state: None }
    }

    /// Shows what runs now.
    pub fn set(&self, turn: u64, doing: impl Into<String>) {
        if let Some(s) = &self.state {
            let mut st = s.lock();
            st.turn = turn;
            st.doing = doing.into();
        }
    }

    /// Clears the line and stops drawing.
    pub fn finish(&self) {
        if let Some(s) = &self.state {
            s.lock().done = true;
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}
