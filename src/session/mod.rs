//! The session: one run of a capsule. It holds the agent loop: turns until the model
//! answers with no tool call, a turn's tool calls one at a time and in order, the
//! deadline, the ceilings and every record of the session.

pub mod deadline;
pub mod status;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crossbeam_channel::{after, bounded, never, select};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::exec::Supervisor;
use crate::exit::ExitStatus;
use crate::fields;
use crate::inference::{
    self, Arguments, Driver, DriverError, Message, Request, Response, ToolCall, ToolSpec,
};
use crate::manifest::{DriverChoice, DriverKind, Manifest};
use crate::progress::Progress;
use crate::records::Trace;
use crate::signals::Shutdown;
use crate::staging::{self, Staged};
use crate::tools::{self, shell, ToolKind, ToolResult};

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
    /// The task text.
    pub task: String,
    /// The system prompt.
    pub system_prompt: String,
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The task's (and session's) exit status.
    pub status: ExitStatus,
    /// The answer, for `completed`.
    pub answer: Option<String>,
    /// Why it failed, for `failed` and the ceilings.
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

struct Loop<'a> {
    spec: &'a SessionSpec,
    trace: Trace,
    supervisor: Supervisor,
    shutdown: Shutdown,
    progress: Progress,
    session_start: Instant,
    task_start: Option<Instant>,
    task_id: String,
    deadline: Option<Deadline>,
    counters: Counters,
    logs_dir: PathBuf,
    /// Where the task was when a cancel or the deadline cut it short, for `task_end`'s
    /// `phase` (`background_wait`).
    phase: Option<&'static str>,
}

/// Why the loop stopped.
enum Stop {
    Answer(String),
    Failed(String),
    Limit(ExitStatus, String),
    Interrupted,
}

/// Runs one task in a staged session and writes every record; stops every command
/// still running on the way out, whatever the way out is.
///
/// Errors: only when the records directory cannot be written; every other failure is
/// an [`Outcome`] with a status.
pub fn run(
    spec: SessionSpec,
    shutdown: Shutdown,
    progress: Progress,
) -> Result<Outcome, SessionError> {
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
            "mur_version" => env!("CARGO_PKG_VERSION"),
        },
    );
    let mut lp = Loop {
        spec: &spec,
        trace: trace.clone(),
        supervisor: Supervisor::for_session(&spec.staged.session_id),
        shutdown,
        progress,
        session_start,
        task_start: None,
        task_id: crate::ids::task_id(),
        deadline,
        counters: Counters::default(),
        logs_dir,
        phase: None,
    };
    let stop = lp.run_task();
    // Every path out stops what still runs.
    let running: Vec<Value> = lp
        .supervisor
        .running()
        .iter()
        .map(|c| json!({"work_id": c.work_id, "argv": c.argv, "pgid": c.pgid}))
        .collect();
    let stopped = lp.supervisor.stop_all();
    // Descendants that left their command's group (setsid, double fork) came back to
    // mur as a child subreaper: the session's end kills them, and says so.
    let task = Some(lp.task_id.as_str());
    for s in crate::exec::procs::sweep(Some(&spec.staged.session_id), &lp.supervisor.live_groups())
    {
        trace.record(
            task,
            "survivor_killed",
            fields! {"pid" => s.pid, "argv" => s.argv, "comm" => s.comm, "work_id" => s.work_id, "signal" => "SIGKILL"},
        );
    }
    let (status, answer, error) = match stop {
        Stop::Answer(a) => (ExitStatus::Completed, Some(a), None),
        Stop::Failed(e) => (ExitStatus::Failed, None, Some(e)),
        Stop::Limit(s, e) => (s, None, Some(e)),
        Stop::Interrupted => (
            ExitStatus::Canceled,
            None,
            Some("interrupted by a signal".to_string()),
        ),
    };
    let result_text = match (&answer, &error) {
        (Some(a), _) => a.clone(),
        (None, Some(e)) => format!("{status}: {e}"),
        (None, None) => status.to_string(),
    };
    let result_path = out_dir.join("result.txt");
    if let Err(e) = std::fs::write(&result_path, &result_text) {
        log::error!("cannot write {}: {e}", result_path.display());
    }
    if status == ExitStatus::Failed {
        trace.record(task, "task_failed", fields! {"error" => error});
    }
    trace.record(
        task,
        "task_end",
        fields! {
            "exit_status" => status.as_str(),
            "turns" => lp.counters.turns_used,
            "runningCommands" => running,
            "stopped_commands" => stopped,
            "phase" => lp.phase,
            "error" => error,
        },
    );
    trace.record(
        None,
        "session_end",
        fields! {
            "exit_status" => status.as_str(),
            "elapsed_secs" => session_start.elapsed().as_secs(),
        },
    );
    trace.close();
    lp.progress.finish();
    Ok(Outcome {
        status,
        answer,
        error,
        records_dir: spec.records_dir.clone(),
    })
}

impl Loop<'_> {
    fn run_task(&mut self) -> Stop {
        let spec = self.spec;
        let inf = spec
            .manifest
            .inference
            .as_ref()
            .expect("staging refuses capsules without inference");
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
            fields! {"text" => spec.task, "origin" => "command_line"},
        );
        let driver = match make_driver(choice, &spec.staged.capsule_dir) {
            Ok(d) => Arc::new(Mutex::new(d)),
            Err(e) => return Stop::Failed(e.to_string()),
        };
        let tools: Vec<ToolSpec> = spec.staged.inventory.iter().map(|t| t.spec()).collect();
        let mut messages = vec![Message::User(spec.task.clone())];
        loop {
            // The dispatcher's feed of background exits: nothing consumes it until
            // sessions take completion tasks, so it is drained to stay small.
            while let Ok(ev) = self.supervisor.events().try_recv() {
                log::debug!("{} exited: {}", ev.work_id, ev.exit.exit_code());
            }
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
                return match resp.text {
                    Some(t) if !t.trim().is_empty() => Stop::Answer(t),
                    _ => Stop::Failed("the model ended its turn with no text and no tool call, so there is no answer".into()),
                };
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
