//! Process supervision: shell commands run in their own process group, their output
//! goes straight to a log file, and one reaper thread per group waits for the leader.
//!
//! Nothing here reads a child's pipes: stdout and stderr both point at the command's
//! log file (opened `O_APPEND`, so both streams land in the order written), and stdin
//! is `/dev/null`. A grandchild that keeps the log open can never hang a tool call.

pub mod output;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use parking_lot::Mutex;

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code when it exited.
    pub code: Option<i32>,
    /// The signal number when a signal killed it.
    pub signal: Option<i32>,
    /// A failure in waiting for it.
    pub wait_error: Option<String>,
}

impl ExitInfo {
    /// The exit code as the spec reports it: the code, or 128 + signal for a signal kill.
    pub fn exit_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => -1,
        }
    }

    /// `ok` for a zero exit with no wait error, `error` otherwise.
    pub fn status_word(&self) -> &'static str {
        if self.code == Some(0) && self.wait_error.is_none() {
            "ok"
        } else {
            "error"
        }
    }

    /// The signal's name (`SIGKILL`), when a signal ended it.
    pub fn signal_name(&self) -> Option<String> {
        self.signal.map(|s| {
            Signal::try_from(s)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {s}"))
        })
    }
}

/// A command started by the supervisor.
pub struct Running {
    /// The work id, `wrk_<32 hex>`.
    pub work_id: String,
    /// The argv it was started with.
    pub argv: Vec<String>,
    /// The leader's pid, which is also the process group id.
    pub pgid: i32,
    /// When it started.
    pub started: Instant,
    /// The absolute path of its log file.
    pub log_path: PathBuf,
    /// Receives the leader's exit once, from the reaper thread.
    exit_rx: Receiver<ExitInfo>,
    /// The exit, once observed.
    exit: Mutex<Option<(ExitInfo, Instant)>>,
    /// Whether a stop reached it.
    stopped: Mutex<bool>,
}

impl Running {
    /// The exit and when it was observed, without waiting.
    pub fn try_exit(&self) -> Option<(ExitInfo, Instant)> {
        let mut slot = self.exit.lock();
        if slot.is_none() {
            if let Ok(e) = self.exit_rx.try_recv() {
                *slot = Some((e, Instant::now()));
            }
        }
        slot.clone()
    }

    /// The channel the reaper reports the exit on (for `select!` with other events).
    pub fn exit_channel(&self) -> &Receiver<ExitInfo> {
        &self.exit_rx
    }

    /// Records an exit received from [`Running::exit_channel`].
    pub fn set_exit(&self, e: ExitInfo) {
        let mut slot = self.exit.lock();
        if slot.is_none() {
            *slot = Some((e, Instant::now()));
        }
    }

    /// Waits up to `timeout` for the exit.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<(ExitInfo, Instant)> {
        if let Some(e) = self.try_exit() {
            return Some(e);
        }
        match self.exit_rx.recv_timeout(timeout) {
            Ok(e) => {
                self.set_exit(e);
                self.try_exit()
            }
            Err(_) => self.try_exit(),
        }
    }

    /// Whether a stop reached this command.
    pub fn was_stopped(&self) -> bool {
        *self.stopped.lock()
    }

    /// Whether any process of its group is still alive.
    pub fn group_alive(&self) -> bool {
        killpg(Pid::from_raw(self.pgid), None).is_ok()
    }

    /// Stops the command: SIGTERM to its process group, SIGKILL to the group 2 s later
    /// if anything in it is still alive, then waits up to 3 s more for the leader.
    /// A command that already exited (and whose group is empty) is sent nothing.
    pub fn stop(&self) -> Option<(ExitInfo, Instant)> {
        if self.try_exit().is_some() && !self.group_alive() {
            return self.try_exit();
        }
        *self.stopped.lock() = true;
        let pg = Pid::from_raw(self.pgid);
        let _ = killpg(pg, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let exited = self.wait_timeout(Duration::from_millis(20)).is_some();
            if exited && !self.group_alive() {
                return self.try_exit();
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        if self.group_alive() {
            let _ = killpg(pg, Signal::SIGKILL);
        }
        self.wait_timeout(Duration::from_secs(3))
    }
}

/// Errors starting a command.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The log file could not be created.
    #[error("cannot create log {path}: {source}")]
    Log {
        /// The log path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The binary could not be started.
    #[error("cannot start `{binary}`: {source}")]
    Start {
        /// The binary.
        binary: String,
        /// The cause.
        source: io::Error,
    },
}

/// Starts and tracks a session's commands; stops every one still running at the end.
#[derive(Default)]
pub struct Supervisor {
    commands: Mutex<BTreeMap<String, Arc<Running>>>,
}

impl Supervisor {
    /// A supervisor with no command.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts `argv` in `cwd`, in a new process group, stdin `/dev/null`, stdout and
    /// stderr appended to `logs_dir/<work id>.log`, and a reaper thread for it.
    ///
    /// Errors: the log cannot be created or the binary cannot be started.
    pub fn spawn(
        &self,
        argv: &[String],
        cwd: &Path,
        logs_dir: &Path,
    ) -> Result<Arc<Running>, SpawnError> {
        let work_id = crate::ids::work_id();
        let log_path = logs_dir.join(format!("{work_id}.log"));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| SpawnError::Log {
                path: log_path.clone(),
                source,
            })?;
        let log2 = log.try_clone().map_err(|source| SpawnError::Log {
            path: log_path.clone(),
            source,
        })?;
        let mut cmd = StdCommand::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .process_group(0);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                let _ = std::fs::remove_file(&log_path);
                return Err(SpawnError::Start {
                    binary: argv[0].clone(),
                    source,
                });
            }
        };
        let pgid = child.id() as i32;
        let (tx, rx) = bounded(1);
        std::thread::Builder::new()
            .name(format!("reaper-{pgid}"))
            .stack_size(32 * 1024)
            .spawn(move || {
                let info = match child.wait() {
                    Ok(st) => ExitInfo {
                        code: st.code(),
                        signal: st.signal(),
                        wait_error: None,
                    },
                    Err(e) => ExitInfo {
                        code: None,
                        signal: None,
                        wait_error: Some(format!("waitpid({pgid}): {e}")),
                    },
                };
                let _ = tx.send(info);
            })
            .map_err(|source| SpawnError::Start {
                binary: argv[0].clone(),
                source,
            })?;
        let running = Arc::new(Running {
            work_id: work_id.clone(),
            argv: argv.to_vec(),
            pgid,
            started: Instant::now(),
            log_path,
            exit_rx: rx,
            exit: Mutex::new(None),
            stopped: Mutex::new(false),
        });
        self.commands.lock().insert(work_id, running.clone());
        Ok(running)
    }

    /// The command with this work id, if this supervisor started it.
    pub fn get(&self, work_id: &str) -> Option<Arc<Running>> {
        self.commands.lock().get(work_id).cloned()
    }

    /// Work ids of the commands still running (leader not yet exited).
    pub fn running(&self) -> Vec<Arc<Running>> {
        self.commands
            .lock()
            .values()
            .filter(|c| c.try_exit().is_none())
            .cloned()
            .collect()
    }

    /// Stops every command still running, all groups at once: SIGTERM now, SIGKILL 2 s
    /// later to groups still alive, then up to 3 s for their leaders.
    /// Returns the work ids it had to stop.
    pub fn stop_all(&self) -> Vec<String> {
        let all: Vec<Arc<Running>> = self.commands.lock().values().cloned().collect();
        let live: Vec<Arc<Running>> = all
            .into_iter()
            .filter(|c| c.try_exit().is_none() || c.group_alive())
            .collect();
        let handles: Vec<_> = live
            .iter()
            .map(|c| {
                let c = c.clone();
                std::thread::Builder::new()
                    .stack_size(32 * 1024)
                    .spawn(move || {
                        c.stop();
                    })
            })
            .collect();
        for h in handles.into_iter().flatten() {
            let _ = h.join();
        }
        live.iter().map(|c| c.work_id.clone()).collect()
    }
}
