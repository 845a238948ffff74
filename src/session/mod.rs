//! The session: one run of a capsule. It holds tasks one after another (the first
//! from `mur run`, later ones from its door), and for each the agent loop: turns until
//! the model answers with no tool call, a turn's tool calls one at a time and in order,
//! member calls and the continuation that delivers their answers, the deadline, the
//! ceilings and every record of the session.
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

pub mod deadline;
#[cfg(test)]
mod refusal_tests;
pub mod status;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{after, bounded, never, select, Receiver, Sender};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::exec::procs::SweepScope;
use crate::exec::Supervisor;
use crate::exit::ExitStatus;
use crate::fields;
use crate::formation::board::{Board, Final, Incoming, Origin};
use crate::formation::call::{self, CallCtx, First, Mode};
use crate::formation::continuation::{self, Ledger};
use crate::formation::link::{is_loopback, Link, SendMeta, State};
use crate::formation::{CallStatus, EndedCall};
use crate::inference::{
    self, Arguments, Driver, DriverError, Message, Request, Response, ToolCall, ToolSpec,
};
use crate::manifest::{AfterTask, DriverChoice, DriverKind, Manifest, TaskAcceptance};
use crate::progress::Progress;
use crate::records::Trace;
use crate::signals::Shutdown;
use crate::staging::{self, Staged};
use crate::tools::{self, call_member, end_without_answer, shell, ToolKind, ToolResult};

use deadline::Deadline;
use status::Counters;

/// The default system prompt when the capsule gives none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are an agent run by mur. Use the tools you are given to do the task, then answer it in text without calling a tool.";

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
    /// The bound of one call ([`crate::formation::delegation_deadline`]).
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
}

/// The member calls of the running task.
struct Calls {
    /// Calls outstanding, or ended with an answer not yet delivered, in the order made.
    slots: Vec<Slot>,
    /// Every member's latest ended call in this task.
    ledger: Ledger,
    /// The reason, once end-without-answer was accepted.
    ending: Option<String>,
    events_tx: Sender<EndedCall>,
    events_rx: Receiver<EndedCall>,
    /// Dropped when the task ends: every poller of the task is abandoned.
    abandon_tx: Option<Sender<()>>,
    abandon_rx: Receiver<()>,
}

struct Slot {
    call_id: String,
    member: String,
    arrived: Option<EndedCall>,
}

impl Calls {
    fn new() -> Calls {
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let (abandon_tx, abandon_rx) = bounded(0);
        Calls {
            slots: Vec::new(),
            ledger: Ledger::default(),
            ending: None,
            events_tx,
            events_rx,
            abandon_tx: Some(abandon_tx),
            abandon_rx,
        }
    }

    /// Moves every answer that has arrived into its slot.
    fn drain(&mut self) {
        while let Ok(e) = self.events_rx.try_recv() {
            self.arrive(e);
        }
    }

    fn arrive(&mut self, e: EndedCall) {
        self.ledger.ended(&e);
        if let Some(s) = self.slots.iter_mut().find(|s| s.call_id == e.call_id) {
            s.arrived = Some(e);
        }
    }

    fn outstanding(&self) -> usize {
        self.slots.iter().filter(|s| s.arrived.is_none()).count()
    }
}

/// Why the loop stopped.
enum Stop {
    Answer(String),
    NoAnswer(String),
    Failed(String),
    Limit(ExitStatus, String),
    Interrupted,
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
        std::fs::create_dir_all(d).map_err(|source| SessionError::Records {
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
    let after_task = spec.manifest.after_task.unwrap_or(default_after);
    let mut lp = Loop {
        spec: &spec,
        trace: trace.clone(),
        supervisor: Supervisor::for_session(&spec.staged.session_id),
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
        let outcome = lp.run_one(inc, &out_dir);
        outcomes.push(outcome);
        if after_task == AfterTask::Exit || lp.deadline.as_ref().is_some_and(|d| d.passed()) {
            break;
        }
    }
    board.close();
    // Commands that outlived their task (completion tasks on) are stopped now, and
    // what left their groups is killed; none of them becomes a completion task.
    let stopped = lp.supervisor.stop_all();
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

impl Loop<'_> {
    /// Runs one task to its end and writes its records; tells the board how it ended.
    fn run_one(&mut self, inc: Incoming, out_dir: &std::path::Path) -> Outcome {
        self.task_id = inc.id.clone();
        self.origin = inc.origin.clone();
        self.calls = Calls::new();
        self.phase = None;
        // The task's stop: the session's shutdown or this task's cancel, whichever first.
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let (done_tx, done_rx) = bounded::<()>(0);
        let session_shutdown = self.session_shutdown.clone();
        let cancel = inc.cancel;
        let relay = std::thread::Builder::new()
            .name("task-stop".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                select! {
                    recv(session_shutdown) -> _ => {},
                    recv(cancel) -> _ => {},
                    recv(done_rx) -> _ => {},
                }
                drop(stop_tx);
            });
        self.shutdown = if relay.is_ok() {
            stop_rx
        } else {
            self.session_shutdown.clone()
        };
        let stop = self.run_task(&inc.text);
        self.account_leftovers();
        drop(done_tx);
        for c in self.supervisor.all() {
            self.owners
                .entry(c.work_id.clone())
                .or_insert_with(|| (self.task_id.clone(), self.origin.clone()));
        }
        let running: Vec<Value> = self
            .supervisor
            .running()
            .iter()
            .map(|c| json!({"work_id": c.work_id, "argv": c.argv, "pgid": c.pgid}))
            .collect();
        let session_ends = matches!(stop, Stop::Limit(ExitStatus::Deadline, _))
            || self
                .session_shutdown
                .try_recv()
                .is_err_and(|e| e.is_disconnected());
        let stopped = if self.completions && !session_ends {
            // Commands outlive the task; a canceled task's own are stopped, and a stop
            // the runtime made yields no completion task.
            if matches!(stop, Stop::Interrupted) {
                let own: Vec<_> = self
                    .supervisor
                    .all()
                    .into_iter()
                    .filter(|c| {
                        self.owners
                            .get(&c.work_id)
                            .is_some_and(|(t, _)| *t == self.task_id)
                    })
                    .collect();
                let stopped = Supervisor::stop_these(&own);
                for c in &own {
                    c.mark_exit_returned();
                }
                stopped
            } else {
                Vec::new()
            }
        } else {
            // Every path out stops what still runs.
            let stopped = self.supervisor.stop_all();
            // Descendants that left their command's group (setsid, double fork) came
            // back to mur as a child subreaper: the task's end kills them, and says so.
            for s in crate::exec::procs::sweep(
                SweepScope::Session(&self.spec.staged.session_id),
                &self.supervisor.live_groups(),
            ) {
                self.trace.record(
                    Some(&self.task_id),
                    "survivor_killed",
                    fields! {"pid" => s.pid, "argv" => s.argv, "comm" => s.comm, "work_id" => s.work_id, "signal" => "SIGKILL"},
                );
            }
            stopped
        };
        let (status, answer, error) = match stop {
            Stop::Answer(a) => (ExitStatus::Completed, Some(a), None),
            Stop::NoAnswer(r) => (ExitStatus::NoAnswer, None, Some(r)),
            Stop::Failed(e) => (ExitStatus::Failed, None, Some(e)),
            Stop::Limit(s, e) => (s, None, Some(e)),
            Stop::Interrupted => (
                ExitStatus::Canceled,
                None,
                Some(
                    if self
                        .session_shutdown
                        .try_recv()
                        .is_err_and(|e| e.is_disconnected())
                    {
                        match (crate::signals::received(), &self.spec.member) {
                            (Some(sig), _) => format!("interrupted by {sig}"),
                            (None, Some(_)) => {
                                "the formation ended before this task did".to_string()
                            }
                            (None, None) => "the session was shut down".to_string(),
                        }
                    } else {
                        "the task was canceled".to_string()
                    },
                ),
            ),
        };
        let result_text = match (status, &answer, &error) {
            (ExitStatus::NoAnswer, _, Some(r)) => end_without_answer::result_text(r),
            (_, Some(a), _) => a.clone(),
            (_, None, Some(e)) => format!("{status}: {e}"),
            (_, None, None) => status.to_string(),
        };
        let result_path = out_dir.join("result.txt");
        if let Err(e) = std::fs::write(&result_path, &result_text) {
            log::error!("cannot write {}: {e}", result_path.display());
        }
        let task = Some(self.task_id.as_str());
        if status == ExitStatus::Failed {
            self.trace
                .record(task, "task_failed", fields! {"error" => error});
        }
        self.trace.record(
            task,
            "task_end",
            fields! {
                "exit_status" => status.as_str(),
                "turns" => self.counters.turns_used,
                "runningCommands" => running,
                "stopped_commands" => stopped,
                "phase" => self.phase,
                "error" => if status == ExitStatus::NoAnswer { None } else { error.clone() },
                "reason" => if status == ExitStatus::NoAnswer { error.clone() } else { None },
            },
        );
        // A completed task names the members below it that gave none too: its caller
        // then reads it as an answer with a gap.
        let below = if matches!(status, ExitStatus::NoAnswer | ExitStatus::Completed) {
            self.calls.ledger.no_answer_below()
        } else {
            Vec::new()
        };
        self.board.finish(
            &self.task_id,
            Final {
                state: match status {
                    ExitStatus::Completed => State::Completed,
                    ExitStatus::Canceled => State::Canceled,
                    _ => State::Failed,
                },
                message: error.clone(),
                answer: answer.clone(),
                no_answer: status == ExitStatus::NoAnswer,
                no_answer_below: below,
            },
        );
        self.task_start = None;
        Outcome {
            task_id: self.task_id.clone(),
            status,
            answer,
            error,
            records_dir: self.spec.records_dir.clone(),
        }
    }

    /// Dispatches one command exit between tasks: with completion tasks on, an exit no
    /// tool result returned, of a command the runtime did not stop, is submitted to the
    /// board as a completion task (spec, "background-command"); anything else is only
    /// logged.
    fn completion(&mut self, ev: crate::exec::ExitEvent) {
        log::debug!("{} exited: {}", ev.work_id, ev.exit.exit_code());
        if !self.completions {
            return;
        }
        let Some(c) = self.supervisor.get(&ev.work_id) else {
            return;
        };
        if c.exit_returned() {
            return;
        }
        let (started_by, origin) = self
            .owners
            .get(&ev.work_id)
            .cloned()
            .unwrap_or_else(|| (self.task_id.clone(), self.origin.clone()));
        let text = tools::background::completion_text(&self.supervisor, &c, &started_by);
        let snap = self.board.submit(
            &text,
            Origin::Completion {
                work_id: ev.work_id.clone(),
                started_by,
                trust: origin.trust(),
            },
        );
        log::info!(
            "{} exited: completion task {} ({})",
            ev.work_id,
            snap.id,
            snap.state.wire()
        );
    }

    fn driver(&mut self, choice: &DriverChoice) -> Result<SharedDriver, String> {
        let spec = self.spec;
        self.driver
            .get_or_insert_with(|| {
                make_driver(choice, &spec.staged.capsule_dir)
                    .map(|d| Arc::new(Mutex::new(d)))
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    fn run_task(&mut self, text: &str) -> Stop {
        let spec = self.spec;
        let Some(inf) = spec.manifest.inference.as_ref() else {
            return Stop::Failed("this capsule has no inference: block".into());
        };
        let Some(choice) = inf.choice(&spec.choice) else {
            return Stop::Failed(format!(
                "driver choice `{}` is not declared in inference.choices",
                spec.choice
            ));
        };
        self.task_start = Some(Instant::now());
        self.counters.start_task();
        self.trace.record(
            Some(&self.task_id),
            "task_start",
            fields! {
                "text" => text,
                "origin" => self.origin.as_str(),
                "caller" => self.origin.caller(),
                "work_id" => match &self.origin { Origin::Completion { work_id, .. } => Some(work_id.clone()), _ => None },
                "started_by" => match &self.origin { Origin::Completion { started_by, .. } => Some(started_by.clone()), _ => None },
            },
        );
        // Debug builds only: a test's way to crash a session (tests/formation.rs).
        if cfg!(debug_assertions) {
            if let Some(marker) = std::env::var_os("MUR_DEBUG_PANIC_ON_TASK") {
                if text.contains(marker.to_string_lossy().as_ref()) {
                    panic!("MUR_DEBUG_PANIC_ON_TASK matched the task text");
                }
            }
        }
        let driver = match self.driver(choice) {
            Ok(d) => d,
            Err(e) => return Stop::Failed(e),
        };
        let tools: Vec<ToolSpec> = spec.staged.inventory.iter().map(|t| t.spec()).collect();
        let mut messages = vec![Message::User(text.to_string())];
        loop {
            if let Some(s) = self.check_stop() {
                return s;
            }
            if let Some(cap) = inf.max_turns {
                if self.counters.turns_used >= u64::from(cap) {
                    return Stop::Limit(
                        ExitStatus::MaxTurns,
                        format!("inference.max_turns ({cap}) ran out before the model answered"),
                    );
                }
            }
            if let Some(ceiling) = inf.max_session_tokens {
                if self.counters.spend_tokens >= ceiling {
                    return Stop::Limit(
                        ExitStatus::SpendCeiling,
                        format!(
                            "inference.max_session_tokens ({ceiling}) reached: {} tokens spent",
                            self.counters.spend_tokens
                        ),
                    );
                }
            }
            let turn = self.counters.turns_used + 1;
            self.progress.set(turn, "waiting for the model");
            let resp = match self.infer(&driver, choice, &messages, &tools, turn) {
                Ok(r) => r,
                Err(s) => return s,
            };
            let (calls, dups) = dedupe_ids(resp.tool_calls.clone());
            messages.push(Message::Assistant {
                text: resp.text.clone(),
                tool_calls: calls.clone(),
            });
            if calls.is_empty() {
                self.calls.drain();
                let turn_left = inf
                    .max_turns
                    .is_none_or(|cap| self.counters.turns_used < u64::from(cap));
                if self.calls.slots.is_empty() || !turn_left {
                    return match resp.text {
                        Some(t) if !t.trim().is_empty() => Stop::Answer(t),
                        _ => Stop::Failed("the model ended its turn with no text and no tool call, so there is no answer".into()),
                    };
                }
                match self.continuation() {
                    Ok(text) => messages.push(Message::User(text)),
                    Err(s) => return s,
                }
                continue;
            }
            for call in &calls {
                if let Some(s) = self.check_stop() {
                    return s;
                }
                let content = self.dispatch(call, turn, dups.contains(&call.id));
                messages.push(Message::Tool {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    content,
                });
            }
            if let Some(reason) = self.calls.ending.clone() {
                return Stop::NoAnswer(reason);
            }
        }
    }

    fn status(&self, message: &str) {
        self.board.status(&self.task_id, message);
        self.progress.set(self.counters.turns_used, message);
        log::info!("task {}: {message}", self.task_id);
    }

    /// Waits until every call of the task has ended, then builds the one message the
    /// task continues with and records the delivery (spec, "How the answer arrives").
    fn continuation(&mut self) -> Result<String, Stop> {
        let mut out = self.calls.outstanding();
        if out > 0 {
            self.status(&format!(
                "waiting on call-member: {out} call(s) outstanding"
            ));
        }
        while out > 0 {
            let deadline_rx = match &self.deadline {
                Some(d) => after(d.instant.saturating_duration_since(Instant::now())),
                None => never(),
            };
            select! {
                recv(self.calls.events_rx) -> e => {
                    if let Ok(e) = e {
                        self.calls.arrive(e);
                    }
                    out = self.calls.outstanding();
                    if out > 0 {
                        self.status(&format!("waiting on call-member: {out} call(s) outstanding"));
                    }
                }
                recv(self.shutdown) -> _ => return Err(Stop::Interrupted),
                recv(deadline_rx) -> _ => return Err(self.check_stop().unwrap_or(Stop::Interrupted)),
            }
        }
        let answers: Vec<EndedCall> = self
            .calls
            .slots
            .drain(..)
            .filter_map(|s| s.arrived)
            .collect();
        let text = continuation::build(&answers, &[], &self.calls.ledger, self.origin.caller());
        for a in &answers {
            self.record_member_call(a, true);
        }
        self.trace.record(
            Some(&self.task_id),
            "task_continued",
            fields! {
                "answers" => answers.len(),
                "calls" => answers.iter().map(|a| json!({"call_id": a.call_id, "member": a.member, "status": a.status.as_str()})).collect::<Vec<_>>(),
                "text" => text,
            },
        );
        self.status(&format!(
            "continuing with {} member answer(s)",
            answers.len()
        ));
        Ok(text)
    }

    fn record_member_call(&self, e: &EndedCall, delivered: bool) {
        self.trace.record(
            Some(&self.task_id),
            "member_call",
            fields! {
                "call_id" => e.call_id,
                "member" => e.member,
                "status" => e.status.as_str(),
                "delivered" => delivered,
                "member_task" => e.member_task,
                "output" => continuation::cut_utf8(&e.output, continuation::OUTPUT_CAP),
                "no_answer_below" => e.below.iter().map(|(n, s)| json!({"member": n, "status": s})).collect::<Vec<_>>(),
            },
        );
    }

    /// Accounts for the calls the task leaves behind when it ends other than by a
    /// continuation: each outstanding call is abandoned and recorded so, each answer
    /// that arrived is recorded `delivered: false`.
    fn account_leftovers(&mut self) {
        self.calls.abandon_tx.take();
        let until = Instant::now() + call::IN_FLIGHT_GRACE + Duration::from_secs(2);
        while self.calls.outstanding() > 0 {
            match self
                .calls
                .events_rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(e) => self.calls.arrive(e),
                Err(_) => break,
            }
        }
        let slots: Vec<Slot> = self.calls.slots.drain(..).collect();
        for s in slots {
            let e = s.arrived.unwrap_or_else(|| EndedCall {
                call_id: s.call_id.clone(),
                member: s.member.clone(),
                status: CallStatus::Abandoned,
                output: format!(
                    "the calling task ended; the call to {} was not accounted for in time",
                    s.member
                ),
                below: Vec::new(),
                member_task: None,
            });
            self.record_member_call(&e, false);
        }
    }

    fn check_stop(&self) -> Option<Stop> {
        if self.shutdown.try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected) {
            return Some(Stop::Interrupted);
        }
        if let Some(d) = &self.deadline {
            if d.passed() {
                return Some(Stop::Limit(
                    ExitStatus::Deadline,
                    format!(
                        "the session's deadline {} passed",
                        crate::records::rfc3339_secs(d.at)
                    ),
                ));
            }
        }
        None
    }

    /// One inference call, on its own thread so the deadline and a shutdown can cut it.
    fn infer(
        &mut self,
        driver: &Arc<Mutex<Box<dyn Driver>>>,
        choice: &DriverChoice,
        messages: &[Message],
        tools: &[ToolSpec],
        turn: u64,
    ) -> Result<Response, Stop> {
        let (tx, rx) = bounded(1);
        let d = driver.clone();
        let system = self.spec.system_prompt.clone();
        let msgs = messages.to_vec();
        let tl = tools.to_vec();
        let cap = choice.max_output_tokens;
        let trace = self.trace.clone();
        let task = self.task_id.clone();
        let started = Instant::now();
        let spawned = std::thread::Builder::new().name("inference".into()).spawn(move || {
            let mut drv = d.lock();
            let req = Request { system: &system, messages: &msgs, tools: &tl, max_output_tokens: cap };
            let kind = drv.kind();
            let mut sink = |a: inference::Attempt| {
                if a.outcome != "ok" || a.number > 1 {
                    trace.record(
                        Some(&task),
                        "inference_attempt",
                        fields! {"turn" => turn, "driver" => kind, "attempt" => a.number, "outcome" => a.outcome, "http_status" => a.http_status, "retry_in_ms" => a.retry_in_ms, "detail" => a.detail},
                    );
                }
            };
            let _ = tx.send(drv.complete(&req, &mut sink));
        });
        if let Err(e) = spawned {
            return Err(Stop::Failed(format!(
                "cannot start the inference thread: {e}"
            )));
        }
        let deadline_rx = match &self.deadline {
            Some(d) => after(d.instant.saturating_duration_since(Instant::now())),
            None => never(),
        };
        let result = select! {
            recv(rx) -> r => r.unwrap_or_else(|_| Err(DriverError::Interrupted("the inference thread ended without an answer".into()))),
            recv(deadline_rx) -> _ => {
                self.cut_inference(turn, choice, started, "the session's deadline passed during the call");
                return Err(self.check_stop().unwrap_or(Stop::Interrupted));
            }
            recv(self.shutdown) -> _ => {
                self.cut_inference(turn, choice, started, "mur was told to shut down during the call");
                return Err(Stop::Interrupted);
            }
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        let kind = choice.driver;
        match result {
            Ok(resp) => {
                self.counters
                    .add_usage(&resp.usage, choice.max_output_tokens);
                let u = resp.usage;
                self.trace.record(
                    Some(&self.task_id),
                    "inference",
                    fields! {
                        "turn" => turn,
                        "choice" => self.spec.choice,
                        "driver" => format!("{kind:?}").to_lowercase(),
                        "model" => resp.model.clone().or(choice.model.clone()),
                        "input_tokens" => u.input,
                        "output_tokens" => u.output,
                        "cached_tokens" => u.cached,
                        "cache_write_tokens" => u.cache_write,
                        "usage_source" => if u.estimated { "estimate" } else { "provider" },
                        "duration_ms" => duration_ms,
                        "finish_reason" => resp.finish_reason,
                        "text" => resp.text,
                        "tool_calls" => resp.tool_calls.iter().map(|c| json!({"id": c.id, "name": c.name, "input": c.arguments.to_record()})).collect::<Vec<_>>(),
                    },
                );
                Ok(resp)
            }
            Err(e) => {
                self.trace.record(
                    Some(&self.task_id),
                    "inference",
                    fields! {"turn" => turn, "choice" => self.spec.choice, "driver" => format!("{kind:?}").to_lowercase(), "error" => e.to_string(), "duration_ms" => duration_ms},
                );
                Err(Stop::Failed(format!("inference failed: {e}")))
            }
        }
    }

    /// Records an inference call the deadline or a shutdown cut short.
    fn cut_inference(&self, turn: u64, choice: &DriverChoice, started: Instant, why: &str) {
        self.trace.record(
            Some(&self.task_id),
            "inference",
            fields! {"turn" => turn, "choice" => self.spec.choice, "driver" => format!("{:?}", choice.driver).to_lowercase(), "error" => why, "duration_ms" => started.elapsed().as_millis() as u64},
        );
    }

    /// Answers one tool call and returns the full text the model is given.
    fn dispatch(&mut self, call: &ToolCall, turn: u64, duplicate: bool) -> String {
        let started = Instant::now();
        self.progress.set(turn, format!("running {}", call.name));
        let mut result = if duplicate {
            ToolResult::refused("this tool call repeats a call id already used in this turn, so it was not run; give each call its own id")
        } else {
            self.answer(call)
        };
        if !result.refused {
            if let Some(d) = self.deadline.as_mut().filter(|d| !d.passed()) {
                if let Some((line, left)) = d.take_notice() {
                    result.notes.push(line);
                    self.trace.record(
                        Some(&self.task_id),
                        "deadline_notice",
                        fields! {"at" => crate::records::rfc3339_secs(d.at), "left_secs" => left, "call_id" => call.id},
                    );
                }
            }
        }
        let content = result.render(&call.name);
        let mut f = fields! {
            "turn" => turn,
            "name" => call.name,
            "call_id" => call.id,
            "input" => call.arguments.to_record(),
            "status" => result.status.as_str(),
            "summary" => result.summary,
            "duration_ms" => started.elapsed().as_millis() as u64,
            "content" => content,
        };
        f.extend(result.record.clone());
        self.trace.record(Some(&self.task_id), "tool_call", f);
        content
    }

    fn answer(&mut self, call: &ToolCall) -> ToolResult {
        let inventory = &self.spec.staged.inventory;
        let Some(entry) = inventory.iter().find(|t| t.name == call.name) else {
            return ToolResult::refused(staging::absent_tool_message(&call.name, inventory));
        };
        let input = match &call.arguments {
            Arguments::Json(v) => v.clone(),
            Arguments::Invalid(raw) => {
                let shown: String = raw.chars().take(200).collect();
                return ToolResult::refused(format!(
                    "the arguments of this call to `{}` are not JSON: `{shown}`; send a JSON object matching the tool's input schema",
                    call.name
                ));
            }
        };
        match &entry.kind {
            ToolKind::Shell { binary } => {
                if !self
                    .spec
                    .manifest
                    .capabilities
                    .shell_allow
                    .iter()
                    .any(|b| b == binary)
                {
                    return ToolResult::refused(format!(
                        "`{binary}` is not in capabilities.shell.allow"
                    ));
                }
                let args = match shell::parse_args(binary, &input) {
                    Ok(a) => a,
                    Err(e) => return ToolResult::refused(e),
                };
                let ctx = shell::ShellContext {
                    workdir: &self.spec.staged.workdir,
                    logs_dir: &self.logs_dir,
                    supervisor: &self.supervisor,
                    deadline: self.deadline.as_ref().map(|d| d.instant),
                    shutdown: &self.shutdown,
                    grace: self
                        .spec
                        .manifest
                        .lifecycle
                        .shell_grace_secs
                        .map(std::time::Duration::from_secs),
                };
                shell::call(&ctx, binary, args).0
            }
            ToolKind::BackgroundCommand => {
                let ctx = tools::background::Context {
                    supervisor: &self.supervisor,
                    deadline: self.deadline.as_ref().map(|d| d.instant),
                    shutdown: &self.shutdown,
                };
                match tools::background::call(&ctx, &input) {
                    Ok(a) => {
                        if a.cut.is_some() {
                            self.phase = Some("background_wait");
                        }
                        self.trace
                            .record(Some(&self.task_id), "background_command", a.record);
                        a.result
                    }
                    Err(message) => ToolResult::refused(message),
                }
            }
            ToolKind::CallMember => self.call_member(&input),
            ToolKind::EndWithoutAnswer => self.end_without_answer(&input),
            ToolKind::SessionStatus => {
                match &input {
                    Value::Object(m) => {
                        if let Some(k) = m.keys().next() {
                            return ToolResult::refused(format!(
                                "session-status takes no input; unknown key `{k}`"
                            ));
                        }
                    }
                    Value::Null => {}
                    other => {
                        return ToolResult::refused(format!(
                            "session-status takes no input: send {{}}, not {}",
                            tools::json_type(other)
                        ))
                    }
                }
                let inf = self.spec.manifest.inference.as_ref();
                let st = status::measure(&status::Inputs {
                    manifest: &self.spec.manifest,
                    choice: inf.and_then(|i| i.choice(&self.spec.choice)),
                    session_start: self.session_start,
                    task_start: self.task_start,
                    deadline: self.deadline.as_ref(),
                    counters: &self.counters,
                });
                self.trace.record(
                    Some(&self.task_id),
                    "session_status",
                    fields! {"status" => st},
                );
                tools::session_status::result(&st)
            }
        }
    }
    /// call-member: the refusals, the egress check, the first offer, and a poller for
    /// a call left outstanding (spec, "call-member").
    fn call_member(&mut self, input: &Value) -> ToolResult {
        let Some(role) = self.spec.member.as_ref().filter(|r| !r.callees.is_empty()) else {
            return ToolResult::refused(staging::absent_tool_message(
                call_member::NAME,
                &self.spec.staged.inventory,
            ));
        };
        let callees: Vec<String> = role.callees.iter().map(|(n, _)| n.clone()).collect();
        let member = match input.get("member") {
            Some(Value::String(m)) => m.clone(),
            Some(v) => {
                return ToolResult::refused(format!(
                    "'call-member' needs `member` as a string naming one of: {}; found {}",
                    callees.join(", "),
                    tools::json_type(v)
                ))
            }
            None => {
                return ToolResult::refused(format!(
                    "'call-member' needs `member`, one of: {}",
                    callees.join(", ")
                ))
            }
        };
        let Some((_, link)) = role.callees.iter().find(|(n, _)| *n == member) else {
            return ToolResult::refused(call_member::not_callable(&member, &callees));
        };
        if self.task_start.is_none() {
            return ToolResult::refused(call_member::NO_TASK);
        }
        if self.calls.ending.is_some() {
            return ToolResult::refused(call_member::ENDING);
        }
        self.calls.drain();
        if let Some(s) = self.calls.slots.iter().find(|s| s.member == member) {
            return ToolResult::refused(match s.arrived {
                None => call_member::not_yet_answered(&member, &s.call_id),
                Some(_) => call_member::answered_waiting(&member, &s.call_id),
            });
        }
        let task = match input.get("task") {
            Some(Value::String(t)) if !t.trim().is_empty() => t.clone(),
            Some(Value::String(_)) => {
                return ToolResult::refused(
                    "'call-member' needs a task: `task` is blank; write the whole of what the member is told",
                )
            }
            Some(v) => {
                return ToolResult::refused(format!(
                    "'call-member' needs `task` as a string, found {}",
                    tools::json_type(v)
                ))
            }
            None => {
                return ToolResult::refused(
                    "'call-member' needs `task`: the whole of what the member is told",
                )
            }
        };
        if let Some(k) = input
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "member" && *k != "task"))
        {
            return ToolResult::refused(format!(
                "'call-member' takes `member` and `task` only; unknown key `{k}`"
            ));
        }
        let call_id = crate::ids::call_id();
        let caller = self.origin.caller().map(str::to_string);
        let deadline_secs = role.call_deadline.as_secs();
        // Egress: the door is checked against this capsule's own network allowlist.
        let host = link.host();
        let allow = &self.spec.manifest.capabilities.network_allow;
        let allowed = if is_loopback(&host) {
            allow.iter().any(|h| h == "localhost")
        } else {
            allow.contains(&host)
        };
        let ended = if !allowed {
            let need = if is_loopback(&host) {
                "localhost"
            } else {
                host.as_str()
            };
            Some(EndedCall {
                call_id: call_id.clone(),
                member: member.clone(),
                status: CallStatus::Failed,
                output: format!("W-RUN-008: capabilities.network.allow does not list {need}, so {member}'s door cannot be reached from this capsule; nothing was sent"),
                below: Vec::new(),
                member_task: None,
            })
        } else {
            let ctx = CallCtx {
                call_id: call_id.clone(),
                member: member.clone(),
                text: task,
                link: link.clone(),
                meta: SendMeta {
                    caller: role.name.clone(),
                    trust: self.origin.trust(),
                },
                deadline: Instant::now() + role.call_deadline,
                deadline_secs,
                trace: self.trace.clone(),
                task_id: self.task_id.clone(),
                roster: role.roster.clone(),
            };
            let (first, result) = match ctx.first_offer() {
                First::Ended(e) => (None, Err(e)),
                First::Started(task_id) => (
                    Some(Mode::Held {
                        task_id: task_id.clone(),
                        offers: 1,
                    }),
                    Ok(call_member::started(&call_id, &member, &task_id)),
                ),
                First::Busy => (
                    Some(Mode::Busy { offers: 1 }),
                    Ok(call_member::busy(&call_id, &member, deadline_secs)),
                ),
            };
            match (first, result) {
                (Some(mode), Ok(r)) => {
                    let spawned = call::spawn(
                        ctx,
                        mode,
                        self.calls.events_tx.clone(),
                        self.calls.abandon_rx.clone(),
                    );
                    match spawned {
                        Ok(()) => {
                            self.calls.slots.push(Slot {
                                call_id: call_id.clone(),
                                member: member.clone(),
                                arrived: None,
                            });
                            let mut r = r;
                            r.record.insert("member_call_id".into(), json!(call_id));
                            return r;
                        }
                        Err(e) => Some(EndedCall {
                            call_id: call_id.clone(),
                            member: member.clone(),
                            status: CallStatus::Failed,
                            output: format!("cannot start the call's poller thread: {e}"),
                            below: Vec::new(),
                            member_task: None,
                        }),
                    }
                }
                (_, Err(e)) => Some(e),
                (None, Ok(_)) => None,
            }
        };
        let Some(e) = ended else {
            return ToolResult::refused("'call-member' could not make the call");
        };
        // Ended in its own tool call: accounted for now.
        self.calls.ledger.ended(&e);
        self.record_member_call(&e, true);
        let status = if e.status == CallStatus::Rejected {
            "rejected"
        } else {
            "failed"
        };
        let mut r = call_member::ended(&call_id, &member, status, &e.output, caller.as_deref());
        r.record.insert("member_call_id".into(), json!(call_id));
        r
    }

    /// end-without-answer: the refusals in the spec's order, then acceptance.
    fn end_without_answer(&mut self, input: &Value) -> ToolResult {
        if self
            .spec
            .member
            .as_ref()
            .is_none_or(|r| r.callees.is_empty())
        {
            return ToolResult::refused(end_without_answer::NOT_A_CALLER);
        }
        if self.task_start.is_none() {
            return ToolResult::refused(end_without_answer::NO_TASK);
        }
        let Some(caller) = self.origin.caller().map(str::to_string) else {
            return ToolResult::refused(end_without_answer::NOT_FROM_MEMBER);
        };
        self.calls.drain();
        if let Some(s) = self.calls.slots.first() {
            return ToolResult::refused(end_without_answer::call_still_out(&s.call_id, &s.member));
        }
        let reason = match input.get("reason") {
            Some(Value::String(r)) if !r.trim().is_empty() => r.trim().to_string(),
            _ => return ToolResult::refused(end_without_answer::NO_REASON),
        };
        if self.calls.ending.is_some() {
            return ToolResult::refused(end_without_answer::ALREADY);
        }
        self.calls.ending = Some(reason);
        end_without_answer::accepted(&caller)
    }
}

/// Makes call ids unique within a turn: a repeated id gets `-2`, `-3`… so each result
/// answers exactly one call (the repeated call is then refused as a duplicate).
fn dedupe_ids(calls: Vec<ToolCall>) -> (Vec<ToolCall>, HashSet<String>) {
    // Every id the model gave is taken, so a renamed duplicate never collides with a
    // later genuine id.
    let mut seen: HashSet<String> = calls.iter().map(|c| c.id.clone()).collect();
    let mut first = HashSet::new();
    let mut dups = HashSet::new();
    let calls = calls
        .into_iter()
        .map(|mut c| {
            if !first.insert(c.id.clone()) {
                let original = c.id.clone();
                let mut n = 2;
                while !seen.insert(format!("{original}-{n}")) {
                    n += 1;
                }
                c.id = format!("{original}-{n}");
                dups.insert(c.id.clone());
                log::warn!("model sent tool call id `{original}` twice in one turn");
            }
            c
        })
        .collect();
    (calls, dups)
}
