//! `mur`: the command line. A thin `main`: parse, run, print the error chain once,
//! exit with the code decided in [`mur::exit`].

/// The static musl build's allocator: musl's malloc serializes threads on one lock
/// (the door's workers, the session's threads); mimalloc keeps a heap per thread.
/// Measured with benches/door.rs (`MUR_BENCH_DOOR_BINS`); see README, "The static
/// binary".
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::Parser;

use mur::cli::{Cli, Command, RunArgs};
use mur::exit::EXIT_FAILED;
use mur::formation::launch::{self, LaunchError, LaunchOptions};
use mur::manifest::Manifest;
use mur::session::{self, deadline::parse_deadline, SessionSpec};
use mur::staging;

/// Every error of `mur`: it decides its own exit code ([`LaunchError::code`]) and is
/// printed once, by `main`.
type Fail = LaunchError;

fn usage(message: impl Into<String>) -> Fail {
    LaunchError::Usage(message.into())
}

/// A runtime failure (exit code 1).
fn runtime(message: impl Into<String>) -> Fail {
    LaunchError::Runtime(message.into())
}

/// A staging failure of `mur run`/`mur stage`: its exit code is its cause's.
fn stage_error(source: staging::StageError) -> Fail {
    LaunchError::Stage {
        member: None,
        source,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `mur door` is a server: its task and refused-request lines (target mur::door)
    // show at info unless RUST_LOG says otherwise.
    let default_filter = match cli.command {
        Command::Door(_) => "warn,mur::door=info",
        _ => "warn",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_filter))
        .format_timestamp_millis()
        .init();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            let message = f.to_string();
            if !message.is_empty() {
                eprintln!("mur: {message}");
            }
            ExitCode::from(f.code())
        }
    }
}

fn run(cli: Cli) -> Result<u8, Fail> {
    mur::exec::sandbox::harden_self();
    // The door token is a secret wherever mur finds it (masked in every record).
    if let Ok(t) = std::env::var("MURMUR_DOOR_TOKEN") {
        mur::secrets::register(&t);
    }
    match cli.command {
        Command::Run(args) if args.roster.is_some() => run_roster(args),
        Command::Run(args) => run_capsule(args),
        Command::Door(args) => run_door(args),
        Command::Trace(args) => run_trace(args),
        Command::Sessions(args) => run_sessions(args),
        Command::Gc(args) => run_gc(args),
        Command::Check(args) => {
            if let Some(r) = &args.roster {
                let members = launch::check_roster(r)?;
                println!(
                    "{}: ok ({} local member(s): {})",
                    r.display(),
                    members.len(),
                    members.join(", ")
                );
                return Ok(0);
            }
            let looks_like_roster = args.capsule.is_file()
                && std::fs::read_to_string(&args.capsule)
                    .is_ok_and(|t| t.lines().any(|l| l.starts_with("members:")));
            match load(&args.capsule) {
                Err(LaunchError::Usage(mut message)) if looks_like_roster => {
                    message.push_str(&format!(
                        "\n{} looks like a roster.yaml: check it with `mur check --roster {}`",
                        args.capsule.display(),
                        args.capsule.display()
                    ));
                    Err(LaunchError::Usage(message))
                }
                Err(f) => Err(f),
                Ok((dir, _, m)) => {
                    // `.` (the default) says nothing: name the directory.
                    let shown = if args.capsule == Path::new(".") {
                        dir.display().to_string()
                    } else {
                        args.capsule.display().to_string()
                    };
                    println!("{shown}: ok (capsule {})", m.name);
                    if args.sandbox {
                        // What the sandbox enforces here; a closed stdout is no error.
                        let plan = staging::sandbox_plan(&m);
                        let mut out = std::io::stdout().lock();
                        for line in &plan.enforced {
                            let _ = writeln!(out, "sandbox: enforced: {line}");
                        }
                        for line in &plan.missing {
                            let _ = writeln!(out, "sandbox: not enforced on this host: {line}");
                        }
                    }
                    Ok(0)
                }
            }
        }
        Command::Stage(args) => {
            let (dir, text, m) = load(&args.capsule)?;
            let staged =
                staging::stage(&staging::murmur_home(), &dir, &text, &m).map_err(stage_error)?;
            // Left for inspection: the start-up sweep leaves it, mur gc removes it.
            staging::runtime::mark_kept(&staged.runtime_dir);
            println!("session: {}", staged.session_id);
            println!("runtime directory: {}", staged.runtime_dir.display());
            println!("workdir: {}", staged.workdir.display());
            println!("tools:");
            for t in &staged.inventory {
                println!("  {}", t.name);
            }
            Ok(0)
        }
        Command::Generate(args) => match mur::generate::run(&args) {
            Ok(()) => Ok(0),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
            Err(e) => Err(runtime(e.to_string())),
        },
    }
}

/// Loads and validates a capsule's manifest, and runs staging's checks without writing
/// ([`staging::load_capsule`]).
fn load(capsule: &Path) -> Result<(std::path::PathBuf, String, Manifest), Fail> {
    let l = staging::load_capsule(capsule, &[]).map_err(usage)?;
    Ok((l.dir, l.text, l.manifest))
}

fn read_task(args: &RunArgs) -> Result<String, Fail> {
    let task = if let Some(t) = &args.task {
        t.clone()
    } else if let Some(f) = &args.task_file {
        std::fs::read_to_string(f)
            .map_err(|e| usage(format!("--task-file {}: {e}", f.display())))?
    } else {
        let mut stdin = std::io::stdin();
        if stdin.is_terminal() {
            return Err(usage(
                "no task: give --task TEXT, --task-file FILE, or the task on standard input",
            ));
        }
        let mut s = String::new();
        stdin
            .read_to_string(&mut s)
            .map_err(|e| usage(format!("reading the task from standard input: {e}")))?;
        s
    };
    if task.trim().is_empty() {
        return Err(usage("no task: the task text is empty; give --task TEXT, --task-file FILE, or the task on standard input"));
    }
    Ok(task)
}

/// `--deadline`, parsed against now; `None` when not given.
fn deadline_arg(args: &RunArgs) -> Result<Option<SystemTime>, Fail> {
    args.deadline
        .as_deref()
        .map(|d| parse_deadline(d, SystemTime::now()))
        .transpose()
        .map_err(usage)
}

fn run_capsule(args: RunArgs) -> Result<u8, Fail> {
    let capsule = args.capsule.clone().unwrap_or_else(|| ".".into());
    let (dir, text, m) = load(&capsule)?;
    let task = read_task(&args)?;
    let deadline = deadline_arg(&args)?;
    let inf = m
        .inference
        .as_ref()
        .ok_or_else(|| usage("this capsule has no inference: block"))?;
    let choice = args.driver.clone().unwrap_or_else(|| inf.driver.clone());
    if inf.choice(&choice).is_none() {
        let names: Vec<&str> = inf.choices.iter().map(|(n, _)| n.as_str()).collect();
        return Err(usage(format!(
            "--driver `{choice}` is not a key of inference.choices ({})",
            names.join(", ")
        )));
    }
    let system_prompt = staging::system_prompt(&dir, &m).map_err(usage)?;
    if m.after_task == Some(mur::manifest::AfterTask::Sleep) {
        return Err(usage(
            "after_task: sleep keeps a session waiting for tasks that only a door brings; serve this capsule with `mur door`, or remove after_task to run it with `mur run`",
        ));
    }
    // Peer files travel between formation members over their doors; `mur run` has
    // neither (mur-tools(7), "Peer files").
    if m.exports.peer_files.is_some() {
        return Err(usage(
            "exports.peer_files grants share-file, whose handles a member's door serves to the rest of its formation; `mur run` has no door: run the capsule as a formation member (mur formation) or behind `mur door`, or remove the grant",
        ));
    }
    if m.capabilities.peer_fetch {
        return Err(usage(
            "capabilities.peer_fetch grants fetch-peer-file, which redeems handles from the members of a formation; `mur run` is in no formation: run the capsule as a formation member (mur formation), or remove the grant",
        ));
    }
    // Checked before staging, so a refused run leaves no runtime directory behind.
    let chosen_records = match &args.records_dir {
        Some(d) => Some(staging::fresh_records_dir(d).map_err(usage)?),
        None => None,
    };
    let home = staging::murmur_home();
    staging::runtime::sweep_leftovers(&home);
    staging::runtime::keep_runtime_dirs(args.keep_runtime);
    let staged = staging::stage(&home, &dir, &text, &m).map_err(stage_error)?;
    // The runtime directory lives as long as the session, on every path out.
    let mut runtime_dirs = staging::RuntimeDirs::default();
    runtime_dirs.hold(&staged.runtime_dir);
    let records_dir = chosen_records
        .unwrap_or_else(|| staging::default_records_dir(&home, &dir, &staged.session_id));
    supervise();
    let shutdown = signals()?;
    log::info!(
        "session {} records in {}",
        staged.session_id,
        records_dir.display()
    );
    let session_id = staged.session_id.clone();
    let trace_path = records_dir.join("trace.jsonl");
    let spec = SessionSpec {
        manifest: m,
        staged,
        records_dir,
        deadline,
        choice,
        system_prompt,
        member: None,
        peer_files: None,
    };
    // --json: the records go to stdout as they are written, from a copier thread.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let copier = args.json.then(|| {
        let (stop, path) = (stop.clone(), trace_path.clone());
        std::thread::spawn(move || {
            let mut out = std::io::stdout().lock();
            mur::inspect::copy_lines_until(&path, &stop, &mut out)
        })
    });
    let progress = if args.json {
        mur::progress::Progress::none()
    } else {
        mur::progress::Progress::start()
    };
    let outcome = session::run(spec, &task, shutdown.receiver(), progress);
    drop(runtime_dirs);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let copied = copier.map(|c| c.join());
    let outcome = outcome.map_err(|e| runtime(e.to_string()))?;
    let interrupted = shutdown.fired();
    let code = outcome.status.exit_code(interrupted);
    if let Some(copied) = copied {
        match copied {
            Ok(Ok(())) => {
                print_result_line(&session_id, &outcome, code)?;
                print_no_answer(&outcome);
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            Ok(Err(e)) => {
                return Err(runtime(format!(
                    "--json: copying {}: {e}",
                    trace_path.display()
                )))
            }
            Err(_) => return Err(runtime("--json: the copier thread panicked")),
        }
    } else {
        print_outcome(&outcome)?;
    }
    print_session_line(&session_id, &outcome.records_dir);
    Ok(code)
}

/// The line `mur run` prints on stderr after the answer: which session it was and
/// where its records are.
fn print_session_line(session_id: &str, records_dir: &Path) {
    eprintln!(
        "mur: session {session_id}: records in {}",
        records_dir.display()
    );
}

/// The last line of `mur run --json`: `{"type": "result", …}` with the answer.
fn print_result_line(session_id: &str, outcome: &session::Outcome, code: u8) -> Result<(), Fail> {
    let line = serde_json::json!({
        "type": "result",
        "session": session_id,
        "task": outcome.task_id,
        "exit_status": outcome.status.as_str(),
        "exit_code": code,
        "answer": outcome.answer,
        "error": outcome.error,
        "records_dir": outcome.records_dir.display().to_string(),
    });
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(runtime(format!("writing the result: {e}")))
        }
        _ => Ok(()),
    }
}

/// The session id of the trace in `records_dir` (its first record's `session`).
fn session_of(records_dir: &Path) -> Option<String> {
    let mut lines = mur::records::read::TraceLines::open(&records_dir.join("trace.jsonl")).ok()?;
    let first = lines.next_line().ok()??;
    let v: serde_json::Value = serde_json::from_str(&first.text).ok()?;
    v.get("session")?.as_str().map(str::to_string)
}

fn run_trace(args: mur::cli::TraceArgs) -> Result<u8, Fail> {
    let home = staging::murmur_home();
    let path = mur::records::find::resolve(&home, &args.session).map_err(usage)?;
    let opts = mur::inspect::TraceOptions {
        json: args.json,
        types: args.types.clone(),
        full: args.full,
        follow: args.follow,
        color: !args.json && mur::inspect::stdout_color(),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut err = std::io::stderr();
    match mur::inspect::trace(&path, &opts, &mut out, &mut err) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(runtime(format!("{}: {e}", path.display()))),
    }
}

fn run_sessions(args: mur::cli::SessionsArgs) -> Result<u8, Fail> {
    let home = staging::murmur_home();
    let list = mur::inspect::sessions::list(&home, args.capsule.as_deref(), args.limit);
    let mut out = std::io::stdout().lock();
    let r = if args.json {
        list.iter()
            .try_for_each(|s| writeln!(out, "{}", serde_json::to_string(s).unwrap_or_default()))
    } else if list.is_empty() {
        drop(out);
        eprintln!("mur: no sessions under {}", home.join("records").display());
        return Ok(0);
    } else {
        write!(out, "{}", mur::inspect::sessions::table(&list))
    };
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(runtime(e.to_string())),
        _ => Ok(0),
    }
}

fn run_gc(args: mur::cli::GcArgs) -> Result<u8, Fail> {
    let older_than = if args.older_than.trim() == "0" {
        std::time::Duration::ZERO
    } else {
        humantime::parse_duration(args.older_than.trim()).map_err(|e| {
            usage(format!(
                "--older-than `{}`: {e}; give a duration such as 90s, 12h or 7d",
                args.older_than
            ))
        })?
    };
    let home = staging::murmur_home();
    let opts = mur::inspect::gc::GcOptions {
        older_than,
        dry_run: args.dry_run,
    };
    let mut out = std::io::stdout().lock();
    mur::inspect::gc::gc(&home, &opts, &mut out).map_err(|e| runtime(e.to_string()))?;
    Ok(0)
}

/// Prints a task's answer on stdout (a closed stdout is not an error), or why it has
/// none on stderr.
fn print_outcome(outcome: &session::Outcome) -> Result<(), Fail> {
    if let Some(a) = &outcome.answer {
        let mut out = std::io::stdout().lock();
        let r = writeln!(out, "{a}").and_then(|_| out.flush());
        if let Err(e) = r {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                return Err(runtime(format!("writing the answer: {e}")));
            }
        }
    } else {
        print_no_answer(outcome);
    }
    Ok(())
}

/// Why a task has no answer, on stderr (nothing when it has one).
fn print_no_answer(outcome: &session::Outcome) {
    if let (None, Some(e)) = (&outcome.answer, &outcome.error) {
        eprintln!(
            "mur: task {}: {e} (records: {})",
            outcome.status,
            outcome.records_dir.display()
        );
    }
}

fn signals() -> Result<mur::signals::ShutdownHandle, Fail> {
    let shutdown = mur::signals::ShutdownHandle::new();
    mur::signals::start(shutdown.clone(), second_signal)
        .map_err(|e| runtime(format!("cannot install signal handlers: {e}")))?;
    Ok(shutdown)
}

/// A second SIGINT/SIGTERM/SIGHUP/SIGQUIT while the shutdown of the first is under
/// way: every process group is killed at once (no grace), and `mur` exits 130 without
/// waiting for the session to end (no `session_end`; the runtime directory is left to
/// the next start's sweep).
fn second_signal(sig: i32) {
    let killed = mur::signals::kill_every_group();
    let name = mur::signals::name(sig).unwrap_or("signal");
    eprintln!("mur: second {name}: killed {killed} process group(s) and process(es) at once; exiting without waiting for the shutdown");
    std::process::exit(i32::from(mur::exit::EXIT_INTERRUPTED));
}

/// Orphaned descendants (a command's `setsid` or double-forked children) come back to
/// mur rather than to init, so the session's end can find, kill and reap them; the
/// orphan reaper reaps those that exit meanwhile (and, with mur as PID 1 in a
/// container, every orphan of the container).
fn supervise() {
    if let Err(e) = mur::exec::procs::become_subreaper() {
        log::warn!("cannot become a child subreaper: {e}; processes that leave their command's group may outlive the session");
    }
    if let Err(e) = mur::exec::orphans::start() {
        log::warn!("cannot start the orphan reaper: {e}; processes that leave their command's group stay zombies until the session ends");
    }
}

fn run_roster(args: RunArgs) -> Result<u8, Fail> {
    let task = read_task(&args)?;
    let deadline = deadline_arg(&args)?;
    let records_dir = match &args.records_dir {
        Some(d) => Some(std::path::absolute(d).map_err(|e| usage(format!("--records-dir: {e}")))?),
        None => None,
    };
    let shutdown = signals()?;
    supervise();
    staging::runtime::sweep_leftovers(&staging::murmur_home());
    staging::runtime::keep_runtime_dirs(args.keep_runtime);
    let opts = LaunchOptions {
        roster: args.roster.clone().unwrap_or_default(),
        task,
        deadline,
        records_dir,
        driver: args.driver.clone(),
    };
    let outcome = launch::run_roster(opts, &shutdown)?;
    let interrupted = shutdown.fired();
    let code = outcome.status.exit_code(interrupted);
    let session_id = session_of(&outcome.records_dir).unwrap_or_else(|| "?".into());
    // Every member's session pointed `latest` at itself as it started; the formation's
    // session to read is its entry member's.
    mur::records::latest::point_all(
        &[&staging::murmur_home().join("records").join("latest")],
        &outcome.records_dir,
    );
    if args.json {
        // A formation's entry records are known once it ends: printed then.
        let stop = std::sync::atomic::AtomicBool::new(true);
        let mut out = std::io::stdout().lock();
        let trace = outcome.records_dir.join("trace.jsonl");
        match mur::inspect::copy_lines_until(&trace, &stop, &mut out) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => {
                drop(out);
                r.map_err(|e| runtime(format!("--json: copying {}: {e}", trace.display())))?;
                print_result_line(&session_id, &outcome, code)?;
                print_no_answer(&outcome);
            }
        }
    } else {
        print_outcome(&outcome)?;
    }
    print_session_line(&session_id, &outcome.records_dir);
    Ok(code)
}

fn run_door(args: mur::cli::DoorArgs) -> Result<u8, Fail> {
    let token = mur::door::token::read_token(
        args.token_file.as_deref(),
        std::env::var("MURMUR_DOOR_TOKEN").ok(),
    )
    .map_err(usage)?;
    mur::secrets::register(&token);
    let records_dir = match &args.records_dir {
        Some(d) => Some(std::path::absolute(d).map_err(|e| usage(format!("--records-dir: {e}")))?),
        None => None,
    };
    let shutdown = signals()?;
    supervise();
    staging::runtime::sweep_leftovers(&staging::murmur_home());
    staging::runtime::keep_runtime_dirs(args.keep_runtime);
    launch::run_door(
        &args.capsule,
        args.listen,
        token,
        args.advertise_url.clone(),
        records_dir,
        &shutdown,
    )?;
    Ok(if shutdown.fired() { 0 } else { EXIT_FAILED })
}
