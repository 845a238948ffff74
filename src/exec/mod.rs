//! Process supervision: shell commands run in their own process group, their output
//! goes straight to a log file, and the process's one reaper thread reaps them.
//!
//! Nothing here reads a child's pipes: stdout and stderr both point at the command's
//! log file (opened `O_APPEND`, so both streams land in the order written), and stdin
//! is `/dev/null`. A grandchild that keeps the log open can never hang a tool call.
//!
//! # The reaper
//!
//! [`Supervisor::spawn`] registers the command's group with the reaper ([`orphans`]):
//! one thread for the whole process, blocked in `waitid` until a child of `mur`
//! exits, with no thread, poll or tick per command. It reaps the leader, then every
//! process of the group that becomes `mur`'s child (with `mur` a child subreaper, see
//! [`procs::become_subreaper`], orphans of the group come back to it), until no child
//! of `mur` is left in the group.
//!
//! When the leader exits the reaper stores the exit and broadcasts it: the
//! [`Running::exited`] channel disconnects (so any number of waiters wake in a
//! `select!`), and an [`ExitEvent`] goes to the supervisor's event channel (the
//! dispatcher's feed; a later completion task is built from it). When the group is
//! done the [`Running::reaped`] channel disconnects.
//!
//! # Stopping
//!
//! A stop (SIGTERM to the group, SIGKILL 2 s later if anything in it is still alive,
//! then up to 3 s for it to finish) keeps its clock on the thread that asked for it,
//! reading the reaper's broadcasts: a reaper blocked in `waitpid` cannot also keep a
//! clock without a second thread per command. [`Supervisor::stop_all`] runs the same
//! sequence on every group at once, so stopping a thousand commands takes about as
//! long as stopping one.
//!
//! Zombies that left their group are reaped by the same thread, in `mur` itself
//! (see [`orphans::start`]).
//!
//! # A log that could not be written
//!
//! The command writes its log itself, so a write that fails (the file-size limit
//! `RLIMIT_FSIZE` the command inherited from `mur`, or a full file system) fails in the
//! command, not in `mur`. When the leader exits the reaper looks for the aftermath
//! ([`log_write_failure`]) and reports it as the exit's `wait_error`, which makes the
//! result's `status` `error` whatever the exit code.
//!
//! Each command's environment carries `MURMUR_WORK_ID=<work id>` and, for a session's
//! supervisor, `MURMUR_SESSION=<session id>`: a survivor's record names its command
//! from them. They are never trusted to decide what to kill: the session's end finds
//! its processes by ancestry ([`procs::walk`], [`procs::sweep`]), since a process can
//! clear its environment.

pub mod loopback;
pub mod orphans;
pub mod output;
pub mod procs;
pub mod sandbox;

use std::collections::BTreeMap;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use parking_lot::Mutex;

/// Seconds between SIGTERM and SIGKILL in a stop: 2.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// Seconds a stop waits after SIGKILL for the command to finish: 3.
pub const STOP_AFTER_KILL: Duration = Duration::from_secs(3);

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code when it exited.
    pub code: Option<i32>,
    /// The signal number when a signal killed it.
    pub signal: Option<i32>,
    /// A failure in waiting for it, or in writing its log ([`log_write_failure`]).
    pub wait_error: Option<String>,
}

impl ExitInfo {
    /// The exit code as the spec reports it: the code, or 128 + signal for a signal
    /// kill; -1 when neither is known (a wait error).
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

/// A leader's exit as the reaper reports it on the supervisor's event channel.
#[derive(Debug, Clone)]
pub struct ExitEvent {
    /// The command's work id.
    pub work_id: String,
    /// How it ended.
    pub exit: ExitInfo,
}

#[derive(Default)]
struct State {
    exit: Option<(ExitInfo, Instant)>,
    stopped: bool,
    exit_returned: bool,
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
    state: Arc<Mutex<State>>,
    exited: Receiver<()>,
    reaped: Receiver<()>,
}

impl Running {
    /// The exit and when the reaper observed it, once the leader has exited.
    pub fn exit(&self) -> Option<(ExitInfo, Instant)> {
        self.state.lock().exit.clone()
    }

    /// A channel that disconnects (every `recv` fails at once, forever) when the leader
    /// has exited and [`Running::exit`] holds its exit. Nothing is ever sent on it.
    pub fn exited(&self) -> &Receiver<()> {
        &self.exited
    }

    /// A channel that disconnects when the reaper is done: the leader and every
    /// process of the group that came back to `mur` have been reaped.
    pub fn reaped(&self) -> &Receiver<()> {
        &self.reaped
    }

    /// Waits until the leader exits or `until` passes; returns the exit if it has.
    pub fn wait_until(&self, until: Instant) -> Option<(ExitInfo, Instant)> {
        let _ = self.exited.recv_deadline(until);
        self.exit()
    }

    /// Whether a stop reached this command (it was still running when SIGTERM went
    /// out).
    pub fn was_stopped(&self) -> bool {
        self.state.lock().stopped
    }

    /// Whether a tool result already gave the model this command's exit (so a later
    /// completion task for it would be redundant).
    pub fn exit_returned(&self) -> bool {
        self.state.lock().exit_returned
    }

    /// Remembers that a tool result gave the model this command's exit.
    pub fn mark_exit_returned(&self) {
        self.state.lock().exit_returned = true;
    }

    /// Seconds from the start to the exit, or to now while it runs.
    pub fn elapsed(&self) -> Duration {
        match self.exit() {
            Some((_, at)) => at.saturating_duration_since(self.started),
            None => self.started.elapsed(),
        }
    }

    /// Whether any process of its group may still be alive: the reaper is not done
    /// and the group answers signal 0. Once the reaper is done the group id is never
    /// signalled again (it could name another group by then).
    pub fn group_alive(&self) -> bool {
        let done = matches!(
            self.reaped.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        );
        !done && killpg(Pid::from_raw(self.pgid), None).is_ok()
    }

    fn signal_group(&self, sig: Signal) {
        if self.group_alive() {
            let _ = killpg(Pid::from_raw(self.pgid), sig);
        }
    }

    /// Stops the command (spec, background-command, `stop`): SIGTERM to its process
    /// group, SIGKILL to the group 2 s later if anything in it is still alive, then up
    /// to 3 s more for it to finish. A command whose leader already exited is sent
    /// nothing. Returns the exit, if the leader has exited by then.
    pub fn stop(&self) -> Option<(ExitInfo, Instant)> {
        if !self.begin_stop() {
            return self.exit();
        }
        if !self.group_alive() {
            // Nothing is left in the group: the leader left it (setpgid, setsid), or
            // the group just died and is being reaped. No grace to wait out.
            let _ = self
                .reaped
                .recv_deadline(Instant::now() + Duration::from_millis(100));
            return self.exit();
        }
        let _ = self.reaped.recv_deadline(Instant::now() + STOP_GRACE);
        self.signal_group(Signal::SIGKILL);
        let _ = self.reaped.recv_deadline(Instant::now() + STOP_AFTER_KILL);
        self.exit()
    }

    /// Sends SIGKILL to what is left of the process group once the leader has exited
    /// (a hook's or a check's leftovers: a grandchild that stayed in the group).
    pub fn kill_leftovers(&self) {
        if self.exit().is_some() {
            self.signal_group(Signal::SIGKILL);
        }
    }

    /// Marks the stop and sends SIGTERM; false when the leader already exited.
    fn begin_stop(&self) -> bool {
        {
            let mut st = self.state.lock();
            if st.exit.is_some() {
                return false;
            }
            st.stopped = true;
        }
        self.signal_group(Signal::SIGTERM);
        true
    }
}

/// What [`Supervisor::spawn_with`] gives a command instead of the defaults.
#[derive(Debug, Default)]
pub struct Io {
    /// stdin, instead of `/dev/null`.
    pub stdin: Option<std::fs::File>,
    /// stdout, instead of the command's log.
    pub stdout: Option<std::fs::File>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
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
    /// The argv is empty.
    #[error("no binary to start: the argv is empty")]
    Empty,
}

/// Starts and tracks a session's commands; stops every one still running at the end.
pub struct Supervisor {
    session: Option<String>,
    owner: Option<Arc<str>>,
    confinement: Option<Arc<sandbox::Confinement>>,
    commands: Mutex<BTreeMap<String, Arc<Running>>>,
    events_tx: Sender<ExitEvent>,
    events_rx: Receiver<ExitEvent>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new()
    }
}

impl Supervisor {
    /// A supervisor with no command, whose commands carry no `MURMUR_SESSION`.
    pub fn new() -> Self {
        let (events_tx, events_rx) = unbounded();
        Supervisor {
            session: None,
            owner: None,
            confinement: None,
            commands: Mutex::new(BTreeMap::new()),
            events_tx,
            events_rx,
        }
    }

    /// A supervisor for session `session_id`: its commands carry
    /// `MURMUR_SESSION=<session_id>` in their environment.
    pub fn for_session(session_id: &str) -> Self {
        let mut s = Self::new();
        s.session = Some(session_id.to_string());
        s.owner = Some(Arc::from(session_id));
        s
    }

    /// This supervisor, starting every command under `confinement`: its built
    /// environment instead of `mur`'s, and its sandbox ([`sandbox`]).
    pub fn confined(mut self, confinement: Arc<sandbox::Confinement>) -> Self {
        self.confinement = Some(confinement);
        self
    }

    /// The confinement of its commands, if any.
    pub fn confinement(&self) -> Option<&sandbox::Confinement> {
        self.confinement.as_deref()
    }

    /// The channel the reapers report leader exits on, in the order observed. It is
    /// unbounded: a reaper never blocks on it.
    pub fn events(&self) -> &Receiver<ExitEvent> {
        &self.events_rx
    }

    /// Starts `argv` in `cwd`, in a new process group, stdin `/dev/null`, stdout and
    /// stderr appended to `logs_dir/<work id>.log`, and a reaper thread for it.
    ///
    /// Errors: the argv is empty, the log cannot be created, the binary cannot be
    /// started, or the reaper thread cannot be started (then the group is killed).
    pub fn spawn(
        &self,
        argv: &[String],
        cwd: &Path,
        logs_dir: &Path,
    ) -> Result<Arc<Running>, SpawnError> {
        self.spawn_with(argv, cwd, logs_dir, Io::default())
    }

    /// [`Supervisor::spawn`] with `io`: stdin read from a file instead of `/dev/null`,
    /// stdout written to a file instead of the log (stderr still goes to the log), and
    /// extra environment variables. Hooks and `lifecycle.done_check` run so.
    ///
    /// Errors: as [`Supervisor::spawn`].
    pub fn spawn_with(
        &self,
        argv: &[String],
        cwd: &Path,
        logs_dir: &Path,
        io: Io,
    ) -> Result<Arc<Running>, SpawnError> {
        let Some(binary) = argv.first() else {
            return Err(SpawnError::Empty);
        };
        let work_id = crate::ids::work_id();
        let log_path = logs_dir.join(format!("{work_id}.log"));
        let log_err = |source| SpawnError::Log {
            path: log_path.clone(),
            source,
        };
        let log = crate::private::file_options()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(log_err)?;
        let log2 = log.try_clone().map_err(log_err)?;
        let mut cmd = match &self.confinement {
            Some(c) => {
                let mut cmd = StdCommand::new(c.program(binary));
                cmd.arg0(binary);
                c.apply(&mut cmd);
                cmd
            }
            None => StdCommand::new(binary),
        };
        cmd.args(&argv[1..])
            .current_dir(cwd)
            .env("MURMUR_WORK_ID", &work_id)
            .stdin(io.stdin.map_or_else(Stdio::null, Stdio::from))
            .stdout(io.stdout.map_or_else(|| Stdio::from(log), Stdio::from))
            .stderr(Stdio::from(log2))
            .envs(io.env)
            .process_group(0);
        if let Some(s) = &self.session {
            cmd.env("MURMUR_SESSION", s);
        }
        // No orphan pass may see the leader before its group is registered.
        let gate = orphans::spawn_guard();
        // The command's clock starts before the spawn: the process may run (and a
        // short one end) before spawn() returns, so a clock started after it would
        // read short (elapsed_secs one second low for `sleep 2` on a busy machine).
        let started = Instant::now();
        let spawned = match &self.confinement {
            Some(c) => c.spawn(cmd),
            None => {
                // The Command holds the log's descriptors: it goes before the reaper
                // starts.
                let mut cmd = cmd;
                cmd.spawn()
            }
        };
        let child = match spawned {
            Ok(c) => c,
            Err(source) => {
                let _ = std::fs::remove_file(&log_path);
                return Err(SpawnError::Start {
                    binary: binary.clone(),
                    source,
                });
            }
        };
        let pgid = child.id() as i32;
        // The reaper waits by pid; the std handle is not used to wait.
        drop(child);
        let state = Arc::new(Mutex::new(State::default()));
        let (exited_tx, exited) = bounded::<()>(0);
        let (reaped_tx, reaped) = bounded::<()>(0);
        let registered = orphans::register(Group {
            pgid,
            owner: self.owner.clone(),
            state: state.clone(),
            exited_tx: Some(exited_tx),
            reaped_tx: Some(reaped_tx),
            events: self.events_tx.clone(),
            work_id: work_id.clone(),
            log: log_path.clone(),
        });
        drop(gate);
        if let Err(source) = registered {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            let _ = waitpid(Pid::from_raw(pgid), None);
            return Err(SpawnError::Start {
                binary: binary.clone(),
                source,
            });
        }
        let running = Arc::new(Running {
            work_id: work_id.clone(),
            argv: argv.to_vec(),
            pgid,
            started,
            log_path,
            state,
            exited,
            reaped,
        });
        self.commands.lock().insert(work_id, running.clone());
        Ok(running)
    }

    /// Forgets a command whose group is gone (a hook run that ended): it is no longer
    /// listed, stopped or swept. A command still running is kept.
    pub fn forget(&self, work_id: &str) {
        let mut c = self.commands.lock();
        if c.get(work_id)
            .is_some_and(|r| r.exit().is_some() && !r.group_alive())
        {
            c.remove(work_id);
        }
    }

    /// The command with this work id, if this supervisor started it.
    pub fn get(&self, work_id: &str) -> Option<Arc<Running>> {
        self.commands.lock().get(work_id).cloned()
    }

    /// Every command this supervisor started, by work id.
    pub fn all(&self) -> Vec<Arc<Running>> {
        self.commands.lock().values().cloned().collect()
    }

    /// The commands whose leader has not exited, by work id.
    pub fn running(&self) -> Vec<Arc<Running>> {
        self.all()
            .into_iter()
            .filter(|c| c.exit().is_none())
            .collect()
    }

    /// Process group ids whose reaper is still at work.
    pub fn live_groups(&self) -> Vec<i32> {
        self.all()
            .iter()
            .filter(|c| {
                !matches!(
                    c.reaped.try_recv(),
                    Err(crossbeam_channel::TryRecvError::Disconnected)
                )
            })
            .map(|c| c.pgid)
            .collect()
    }

    /// Stops every command whose leader is still running and every group still alive,
    /// all at once: SIGTERM now, SIGKILL 2 s later to groups still alive, then up to
    /// 3 s for them to finish. Returns the work ids whose leader was still running
    /// (a stop reached them).
    pub fn stop_all(&self) -> Vec<String> {
        Self::stop_these(&self.all())
    }

    /// [`Supervisor::stop_all`] for the commands in `these` only (a canceled task's
    /// own commands). Returns the work ids whose leader was still running.
    pub fn stop_these(these: &[Arc<Running>]) -> Vec<String> {
        let all = these;
        let mut stopped = Vec::new();
        let mut live = Vec::new();
        for c in all {
            if c.begin_stop() {
                stopped.push(c.work_id.clone());
                live.push(c.clone());
            } else if c.group_alive() {
                c.signal_group(Signal::SIGTERM);
                live.push(c.clone());
            }
        }
        if live.is_empty() {
            return stopped;
        }
        // A group already empty (its leader left it) has nothing to wait for.
        live.retain(|c| c.group_alive());
        let until = Instant::now() + STOP_GRACE;
        for c in &live {
            let _ = c.reaped.recv_deadline(until);
        }
        for c in &live {
            c.signal_group(Signal::SIGKILL);
        }
        let until = Instant::now() + STOP_AFTER_KILL;
        for c in &live {
            let _ = c.reaped.recv_deadline(until);
        }
        stopped
    }
}

/// Whatever owns processes kills them when it goes: a supervisor dropped with
/// commands still running (a session that panicked, an early return) stops them as
/// [`Supervisor::stop_all`] does: SIGTERM to every group, SIGKILL after the grace.
impl Drop for Supervisor {
    fn drop(&mut self) {
        let stopped = self.stop_all();
        if !stopped.is_empty() {
            log::warn!(
                "stopped {} command(s) still running as their supervisor ended: {}",
                stopped.len(),
                stopped.join(", ")
            );
        }
    }
}

/// What shows that writing the command's log at `log` failed, checked when its leader
/// exits: the log reached the soft `RLIMIT_FSIZE` the command inherited (writes past
/// it fail with `EFBIG` or kill the writer with `SIGXFSZ`), or the file system holding
/// the log has no block left for an unprivileged writer (`ENOSPC`). `None` when
/// neither shows.
pub fn log_write_failure(log: &Path) -> Option<String> {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let len = std::fs::metadata(log).map(|m| m.len()).ok()?;
    if let Ok((soft, _)) = getrlimit(Resource::RLIMIT_FSIZE) {
        if soft != RLIM_INFINITY && len >= soft {
            return Some(format!("writing the log failed: it reached the file-size limit (RLIMIT_FSIZE) of {soft} bytes, and output past it was lost"));
        }
    }
    let dir = log.parent()?;
    match nix::sys::statvfs::statvfs(dir) {
        Ok(v) if v.blocks_available() == 0 => Some(format!(
            "writing the log may have failed: the file system holding {} has no space left, and output may be missing from the log",
            dir.display()
        )),
        _ => None,
    }
}

/// A command's group as the reaper ([`orphans`]) holds it until no child of `mur` is
/// left in it.
pub(crate) struct Group {
    pgid: i32,
    owner: Option<Arc<str>>,
    state: Arc<Mutex<State>>,
    exited_tx: Option<Sender<()>>,
    reaped_tx: Option<Sender<()>>,
    events: Sender<ExitEvent>,
    work_id: String,
    log: PathBuf,
}

/// What the reaper does for a group once it has let go of its locks (masking a log
/// can take a while): the leader's exit to report, the group's end to announce.
pub(crate) struct News {
    state: Arc<Mutex<State>>,
    exited_tx: Option<Sender<()>>,
    reaped_tx: Option<Sender<()>>,
    events: Sender<ExitEvent>,
    work_id: String,
    log: PathBuf,
    exit: Option<ExitInfo>,
}

impl Group {
    fn news(&mut self, exit: Option<ExitInfo>, done: bool) -> News {
        News {
            state: self.state.clone(),
            exited_tx: if exit.is_some() {
                self.exited_tx.take()
            } else {
                None
            },
            reaped_tx: if done { self.reaped_tx.take() } else { None },
            events: self.events.clone(),
            work_id: self.work_id.clone(),
            log: self.log.clone(),
            exit,
        }
    }

    /// The leader exited: its exit, to report once.
    fn leader_exited(&mut self, code: Option<i32>, signal: Option<i32>) -> Option<News> {
        self.exited_tx.as_ref()?;
        Some(self.news(
            Some(ExitInfo {
                code,
                signal,
                wait_error: None,
            }),
            false,
        ))
    }

    /// No child of `mur` is left in the group (and, had the leader's exit not been
    /// seen, it is unknown).
    fn done(&mut self) -> News {
        let pgid = self.pgid;
        let exit = self.exited_tx.is_some().then(|| ExitInfo {
            code: None,
            signal: None,
            wait_error: Some(format!(
                "the leader {pgid} was reaped by someone else; its exit is unknown"
            )),
        });
        self.news(exit, true)
    }
}

impl News {
    /// Reports: no secret of the runtime's stays in clear in the log (masked when the
    /// leader exits, before anyone is told, and again when the group is gone), then the
    /// exit is stored and broadcast, then the group's end.
    pub(crate) fn deliver(mut self) {
        let mask = |log: &Path| {
            if let Err(e) = output::mask_log(log) {
                log::warn!("cannot mask secrets in {}: {e}", log.display());
            }
        };
        if let Some(mut exit) = self.exit.take() {
            mask(&self.log);
            if exit.wait_error.is_none() {
                exit.wait_error = log_write_failure(&self.log);
            }
            self.state.lock().exit = Some((exit.clone(), Instant::now()));
            drop(self.exited_tx.take());
            let _ = self.events.send(ExitEvent {
                work_id: self.work_id.clone(),
                exit,
            });
        }
        if let Some(tx) = self.reaped_tx.take() {
            mask(&self.log);
            drop(tx);
        }
    }
}
