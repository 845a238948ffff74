//! The session: one run of a capsule. It holds tasks one after another (the first
//! from `mur run`, later ones from its door), and for each the agent loop: turns until
//! the model answers with no tool call, a turn's tool calls one at a time and in order,
//! member calls and the continuation that delivers their answers, the deadline, the
//! ceilings and every record of the session.
//!
//! - [`board`]: the session's tasks: what its door answers (`SendMessage`, `GetTask`,
//!   `CancelTask`), busy refusals, queueing, the no-answer metadata.
//! - [`link`], [`call`], [`continuation`] and `outstanding`: the task's outstanding
//!   work (member calls today, delegations next), one poller per call, and the one
//!   message a waiting task continues with.
//! - [`policy`]: the decision point every tool call passes (`hooks.on_tool_call`);
//!   `hooks` runs a hook or a check; `lifecycle`: a task's attempts (keep_working,
//!   done_check, `hooks.on_task_end` and reopens).
//! - `dispatch` looks a call's tool up and runs it through [`crate::tools::registry`];
//!   `port` is the [`crate::tools::Session`] a tool sees.
//!
//! This floor imports nothing from [`crate::formation`] (scripts/check-layers.sh): a
//! member's callees arrive as [`link::Link`] trait objects in its [`MemberRole`].
//!
//! # Completion tasks
//!
//! Under `task_acceptance: queue` with `after_task: sleep`, a background command
//! outlives the task that started it, and its exit, when no tool result returned it,
//! becomes a task of its own (origin `completion`, text
//! [`crate::tools::background::completion_text`]) submitted to the session's board
//! (spec, "background-command"). The session reads its supervisor's exit events
//! between tasks only: an exit seen while a task runs waits for that task's end, so a
//! background-command call in it can still return the exit and make the task
//! unnecessary. A command the runtime stopped (a canceled task's, or any at the
//! session's end) yields none. Under any other combination every command still
//! running is stopped when its task ends.

pub mod board;
pub mod call;
pub mod continuation;
pub mod deadline;
mod dispatch;
mod hooks;
mod infer;
mod lifecycle;
pub mod link;
mod outstanding;
pub mod policy;
mod port;
#[cfg(test)]
mod refusal_tests;
pub mod status;
mod task;

pub use outstanding::{CallStatus, EndedCall};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{after, never, select, Receiver};
use parking_lot::Mutex;

use crate::exec::procs::SweepScope;
use crate::exec::Supervisor;
use crate::exit::ExitStatus;
use crate::fields;
use crate::inference::{self, Driver, DriverError};
use crate::manifest::{AfterTask, DriverChoice, DriverKind, Manifest, TaskAcceptance};
use crate::progress::Progress;
use crate::records::Trace;
use crate::signals::Shutdown;
use crate::staging::Staged;
use board::{Board, Final, Incoming, Origin};
use link::{Link, State};

use deadline::Deadline;
use outstanding::Calls;
use status::Counters;

pub use crate::staging::DEFAULT_SYSTEM_PROMPT;

/// Everything a session needs, validated.
pub struct SessionSpec {
    /// The validated manifest.
    pub manifest: Manifest,
    /// The staged capsule.
    pub staged: Staged,
    /// The session's records directory (trace.jsonl, logs/, out/).
    pub records_dir: PathBuf,
    /// The session's effective deadline.
    pub deadline: Option<SystemTime>,
    /// The driver choice serving the session.
    pub choice: String,
    /// The system prompt.
    pub system_prompt: String,
    /// Its place in a formation, when it is a member of one.
    pub member: Option<MemberRole>,
    /// Its peer-file side (share-file's store, fetch-peer-file's doors), when it
    /// serves or fetches peer files; `None` in a plain `mur run`.
    pub peer_files: Option<crate::tools::peer_file::PeerFiles>,
}

/// A formation member's side of the roster: who it is and whom it may call.
#[derive(Clone)]
pub struct MemberRole {
    /// Its name in the roster.
    pub name: String,
    /// The members it may call, in roster order, each with its door.
    pub callees: Vec<(String, Arc<dyn Link>)>,
    /// Every roster member's name (filters `noAnswerBelow`).
    pub roster: Arc<Vec<String>>,
    /// The bound of one call (`lifecycle.delegation_deadline_secs`, else `MURMUR_DELEGATION_TIMEOUT_SECS`, else 600 s).
    pub call_deadline: Duration,
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct SessionEnd {
    /// `session_end.exit_status`: the last task's that is not `no_answer`; `completed`
    /// when there is none (`canceled` when a shutdown ended it before any task).
    pub status: ExitStatus,
    /// Each task's outcome, in order.
    pub tasks: Vec<Outcome>,
}

/// How a task ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The task id.
    pub task_id: String,
    /// The task's exit status.
    pub status: ExitStatus,
    /// The answer, for `completed`.
    pub answer: Option<String>,
    /// Why it failed, for `failed` and the ceilings; the reason, for `no_answer`.
    pub error: Option<String>,
    /// The records directory.
    pub records_dir: PathBuf,
}

/// Errors that stop a session from starting at all.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The records directory cannot be created or written.
    #[error("records directory {path}: {source}")]
    Records {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The confinement of its commands cannot be built (murmur.yaml(5), SANDBOX).
    #[error("{0}")]
    Sandbox(String),
}

/// The session's supervisor, its commands confined ([`crate::exec::sandbox`]); the
/// credentials of every driver choice registered as secrets first.
///
/// Errors: the confinement cannot be built.
fn confined_supervisor(spec: &SessionSpec) -> Result<Supervisor, SessionError> {
    if let Some(i) = &spec.manifest.inference {
        crate::inference::register_credentials(
            i.choices.iter().filter_map(|(_, c)| c.credential.as_ref()),
            &spec.staged.capsule_dir,
        );
    }
    let sup = Supervisor::for_session(&spec.staged.session_id);
    if spec.manifest.capabilities.shell_allow.is_empty() {
        return Ok(sup);
    }
    let conf = crate::exec::sandbox::Confinement::new(&crate::staging::sandbox_spec(
        &spec.manifest,
        &spec.staged,
    ))
    .map_err(SessionError::Sandbox)?;
    Ok(sup.confined(std::sync::Arc::new(conf)))
}

/// The supervisor of the session's hooks and `lifecycle.done_check`: their commands get
/// the same built environment as shell commands (the documented base plus
/// `capabilities.shell.env`), so no driver credential or door token reaches them
/// unless named; they are the operator's own commands and run outside the sandbox.
fn hook_supervisor(spec: &SessionSpec) -> Result<Supervisor, SessionError> {
    let sup = Supervisor::for_session(&spec.staged.session_id);
    let m = &spec.manifest;
    if !m.hooks.any() && m.lifecycle.done_check.is_none() {
        return Ok(sup);
    }
    let mut s = crate::staging::sandbox_spec(m, &spec.staged);
    s.mode = crate::exec::sandbox::Mode::Off;
    let conf = crate::exec::sandbox::Confinement::new(&s).map_err(SessionError::Sandbox)?;
    Ok(sup.confined(std::sync::Arc::new(conf)))
}

/// Builds the driver for a choice.
///
/// Errors: the driver cannot be set up (a script that does not parse, …).
pub fn make_driver(
    choice: &DriverChoice,
    capsule_dir: &std::path::Path,
) -> Result<Box<dyn Driver>, DriverError> {
    match choice.driver {
        DriverKind::Script => {
            let Some(script) = choice.script.as_deref() else {
                return Err(DriverError::Script {
                    path: String::new(),
                    detail: "a script choice needs `script:`".into(),
                });
            };
            Ok(Box::new(inference::script::ScriptDriver::load(
                &capsule_dir.join(script),
            )?))
        }
        DriverKind::Openai => Ok(Box::new(inference::openai::OpenAiDriver::new(
            choice,
            capsule_dir,
        )?)),
        DriverKind::Anthropic => Ok(Box::new(inference::anthropic::AnthropicDriver::new(
            choice,
            capsule_dir,
        )?)),
    }
}

/// A session's driver, made at its first task and kept for the next ones (a script
/// plays on across tasks).
type SharedDriver = Arc<Mutex<Box<dyn Driver>>>;

struct Loop<'a> {
    spec: &'a SessionSpec,
    trace: Trace,
    supervisor: Supervisor,
    /// The session's shutdown (signal, formation end).
    session_shutdown: Shutdown,
    /// The running task's stop: fires on the session's shutdown or the task's cancel.
    shutdown: Shutdown,
    progress: Progress,
    session_start: Instant,
    task_start: Option<Instant>,
    task_id: String,
    origin: Origin,
    deadline: Option<Deadline>,
    counters: Counters,
    logs_dir: PathBuf,
    /// Where the task was when a cancel or the deadline cut it short, for `task_end`'s
    /// `phase` (`background_wait`).
    phase: Option<&'static str>,
    board: Arc<Board>,
    driver: Option<Result<SharedDriver, String>>,
    calls: Calls,
    /// Completion tasks are on: `task_acceptance: queue` with `after_task: sleep`.
    /// Commands then outlive the task that started them (until the session ends or
    /// that task is canceled), and each exit no tool result returned becomes a task.
    completions: bool,
    /// Each command's starting task and that task's origin, by work id.
    owners: HashMap<String, (String, Origin)>,
    /// Runs hooks and `lifecycle.done_check`: their processes are no shell command of
    /// the task (no work id the model sees, no `runningCommands`).
    hook_supervisor: Supervisor,
    /// The running task's attempt, from 1.
    attempt: u32,
    /// Reopens of the running task by its `on_task_end` hooks.
    reopens: u32,
}

/// Why the loop stopped.
enum Stop {
    Answer(String),
    NoAnswer(String),
    Failed(String),
    Limit(ExitStatus, String),
    Interrupted,
}

/// The text of a caught panic's payload (`panic!` with a message or a format string).
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Runs one task (from the command line) in a staged session and writes every record;
/// stops every command still running on the way out, whatever the way out is.
///
/// Errors: only when the records directory cannot be written; every other failure is
/// an [`Outcome`] with a status.
pub fn run(
    spec: SessionSpec,
    task: &str,
    shutdown: Shutdown,
    progress: Progress,
) -> Result<Outcome, SessionError> {
    let (board, inbox) = Board::new(spec.manifest.task_acceptance);
    let board = Arc::new(board);
    let first = board.submit(task, Origin::CommandLine);
    let records_dir = spec.records_dir.clone();
    let end = serve(spec, board, inbox, AfterTask::Exit, shutdown, progress)?;
    // The command line's task decides, even when the capsule's `after_task: sleep`
    // kept the session serving completion tasks after it.
    Ok(end
        .tasks
        .into_iter()
        .find(|o| o.task_id == first.id)
        .unwrap_or(Outcome {
            task_id: first.id,
            status: ExitStatus::Canceled,
            answer: None,
            error: Some("interrupted by a signal before the task started".into()),
            records_dir,
        }))
}

/// Runs a session: takes tasks from `inbox` one after another (its board refuses or
/// queues those that arrive while one runs) until `shutdown` fires, the inbox closes,
/// or a task ends under `after_task: exit` (`default_after` when the capsule does not
/// say). Writes `session_start`, each task's records, and `session_end`.
///
/// Errors: only when the records directory cannot be written.
pub fn serve(
    spec: SessionSpec,
    board: Arc<Board>,
    inbox: Receiver<Incoming>,
    default_after: AfterTask,
    shutdown: Shutdown,
    progress: Progress,
) -> Result<SessionEnd, SessionError> {
    let session_start = Instant::now();
    let start_wall = SystemTime::now();
    let rd = &spec.records_dir;
    let logs_dir = rd.join("logs");
    let out_dir = rd.join("out");
    for d in [rd, &logs_dir, &out_dir] {
        crate::private::create_dir_all(d).map_err(|source| SessionError::Records {
            path: d.clone(),
            source,
        })?;
    }
    let trace_path = rd.join("trace.jsonl");
    let trace = Trace::open(&trace_path, &spec.staged.session_id).map_err(|source| {
        SessionError::Records {
            path: trace_path,
            source,
        }
    })?;
    let deadline = spec.deadline.map(|at| {
        Deadline::new(
            at,
            session_start,
            start_wall,
            spec.manifest.lifecycle.deadline_notice_secs,
        )
    });
    let tools_declared: Vec<&str> = spec
        .staged
        .inventory
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    trace.record(
        None,
        "session_start",
        fields! {
            "capsule" => spec.manifest.name,
            "capsule_dir" => spec.staged.capsule_dir.display().to_string(),
            "runtime_dir" => spec.staged.runtime_dir.display().to_string(),
            "records_dir" => rd.display().to_string(),
            "transport" => "http",
            "driver" => spec.choice,
            "tools_declared" => tools_declared,
            "deadline" => deadline.as_ref().map(|d| crate::records::rfc3339_secs(d.at)),
            "member" => spec.member.as_ref().map(|m| m.name.clone()),
            "mur_version" => env!("CARGO_PKG_VERSION"),
        },
    );
    // The newest session's records, overall and per capsule (`mur trace latest`).
    let home = crate::staging::murmur_home();
    crate::records::latest::point_all(
        &[
            &home.join("records").join("latest"),
            &crate::staging::default_records_dir(&home, &spec.staged.capsule_dir, "latest"),
        ],
        rd,
    );
    let after_task = spec.manifest.after_task.unwrap_or(default_after);
    let supervisor = confined_supervisor(&spec)?;
    let hook_supervisor = hook_supervisor(&spec)?;
    let mut lp = Loop {
        spec: &spec,
        trace: trace.clone(),
        supervisor,
        session_shutdown: shutdown.clone(),
        shutdown,
        progress,
        session_start,
        task_start: None,
        task_id: String::new(),
        origin: Origin::CommandLine,
        deadline,
        counters: Counters::default(),
        logs_dir,
        phase: None,
        board: board.clone(),
        driver: None,
        calls: Calls::new(),
        completions: after_task == AfterTask::Sleep
            && spec.manifest.task_acceptance == TaskAcceptance::Queue,
        owners: HashMap::new(),
        hook_supervisor,
        attempt: 1,
        reopens: 0,
    };
    let exits = lp.supervisor.events().clone();
    let mut outcomes: Vec<Outcome> = Vec::new();
    loop {
        // Exits seen while a task ran wait for its end (a background-command call in
        // it may still return them); between tasks each one is dispatched at once.
        while let Ok(ev) = exits.try_recv() {
            lp.completion(ev);
        }
        let deadline_rx = match &lp.deadline {
            Some(d) => after(d.instant.saturating_duration_since(Instant::now())),
            None => never(),
        };
        let inc = select! {
            recv(inbox) -> m => match m { Ok(i) => i, Err(_) => break },
            recv(exits) -> ev => {
                if let Ok(ev) = ev {
                    lp.completion(ev);
                }
                continue;
            }
            recv(lp.session_shutdown) -> _ => break,
            recv(deadline_rx) -> _ => break,
        };
        if !board.start(&inc.id) {
            continue;
        }
        if let Origin::Completion { work_id, .. } = &inc.origin {
            match lp.supervisor.get(work_id) {
                Some(c) if !c.exit_returned() => c.mark_exit_returned(),
                _ => {
                    // A task ahead of it in the queue returned the exit meanwhile.
                    let why = format!("background-command returned the exit of {work_id} before this completion task started");
                    trace.record(
                        Some(&inc.id),
                        "completion_dropped",
                        fields! {"work_id" => work_id, "reason" => why},
                    );
                    board.finish(
                        &inc.id,
                        Final {
                            state: State::Canceled,
                            message: Some(why),
                            answer: None,
                            no_answer: false,
                            no_answer_below: Vec::new(),
                        },
                    );
                    continue;
                }
            }
        }
        // A panic in the task is a failed task and the session's end, both recorded;
        // its commands are stopped on the way out.
        let task_id = inc.id.clone();
        let run =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lp.run_one(inc, &out_dir)));
        let outcome = match run {
            Ok(o) => o,
            Err(p) => {
                let why = panic_message(p.as_ref());
                outcomes.push(lp.crashed(&task_id, &why));
                break;
            }
        };
        outcomes.push(outcome);
        if after_task == AfterTask::Exit || lp.deadline.as_ref().is_some_and(|d| d.passed()) {
            break;
        }
    }
    board.close();
    // Commands that outlived their task (completion tasks on) are stopped now, and
    // what left their groups is killed; none of them becomes a completion task.
    let stopped = lp.supervisor.stop_all();
    lp.hook_supervisor.stop_all();
    // The last session in the process (mur run, mur door) kills every descendant left;
    // a formation member only its own, and the formation's end the rest.
    let scope = if spec.member.is_none() {
        SweepScope::All
    } else {
        SweepScope::Session(&spec.staged.session_id)
    };
    for s in crate::exec::procs::sweep(scope, &lp.supervisor.live_groups()) {
        trace.record(
            None,
            "survivor_killed",
            fields! {"pid" => s.pid, "argv" => s.argv, "comm" => s.comm, "work_id" => s.work_id, "signal" => "SIGKILL"},
        );
    }
    // A task queued or handed over just before the close never runs.
    while let Ok(inc) = inbox.try_recv() {
        board.finish(
            &inc.id,
            Final {
                state: State::Canceled,
                message: Some("the member's session closed before the task started".into()),
                answer: None,
                no_answer: false,
                no_answer_below: Vec::new(),
            },
        );
    }
    let status = outcomes
        .iter()
        .rev()
        .find(|o| o.status != ExitStatus::NoAnswer)
        .map(|o| o.status)
        .unwrap_or(
            if outcomes.is_empty()
                && lp
                    .session_shutdown
                    .try_recv()
                    .is_err_and(|e| e.is_disconnected())
                && after_task == AfterTask::Exit
            {
                ExitStatus::Canceled
            } else {
                ExitStatus::Completed
            },
        );
    trace.record(
        None,
        "session_end",
        fields! {
            "exit_status" => status.as_str(),
            "tasks" => outcomes.len(),
            "elapsed_secs" => session_start.elapsed().as_secs(),
            "stopped_commands" => stopped,
        },
    );
    trace.close();
    lp.progress.finish();
    Ok(SessionEnd {
        status,
        tasks: outcomes,
    })
}
