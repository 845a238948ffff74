//! Staging: turning a capsule into a ready session: the runtime directory, the tool
//! inventory, `tools/<name>/murmur.yaml` for each tool, and the checks that refuse a
//! capsule before anything runs (E-CAP-013 and friends).
//!
//! The gate of a runtime-provided tool is whether its manifest file is written at all
//! (spec, "The grant is the tool's existence"): with the grant absent, staging writes
//! nothing under `tools/<name>/`, the tool is absent from the inventory and from
//! `session_start`'s `tools_declared`, and a call naming it is refused with a message
//! naming the missing declaration.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::manifest::{Manifest, Transport};

pub mod runtime;
use crate::tools::{self, ToolEntry, RESERVED};

/// A staged capsule.
#[derive(Debug)]
pub struct Staged {
    /// The session id, `ses_…`.
    pub session_id: String,
    /// The capsule directory, absolute.
    pub capsule_dir: PathBuf,
    /// The accessible workdir, absolute.
    pub workdir: PathBuf,
    /// `$MURMUR_HOME/run/<session id>/`.
    pub runtime_dir: PathBuf,
    /// The tool inventory, in the order the model is offered it.
    pub inventory: Vec<ToolEntry>,
}

/// Why a capsule cannot be staged.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// A declared artifact uses a reserved tool name.
    #[error("E-CAP-013: {field}: `{artifact}` is refused: `{name}` is a reserved runtime-provided tool name; rename the artifact")]
    Reserved {
        /// `tools` or `skills`.
        field: &'static str,
        /// The declared full name.
        artifact: String,
        /// The bare name.
        name: String,
    },
    /// The capsule grants a tool this build does not provide.
    #[error("{grant} grants `{tool}`, which this build of mur does not provide; remove the grant to run this capsule")]
    Unsupported {
        /// The declaration.
        grant: String,
        /// The tool it would create.
        tool: String,
    },
    /// Something else this build cannot stage.
    #[error("{0}")]
    Other(String),
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl StageError {
    /// The exit code of `mur` for this error ([`crate::exit`]): a file that cannot be
    /// written (an unwritable `$MURMUR_HOME`, a full disk) is a runtime failure,
    /// [`EXIT_FAILED`](crate::exit::EXIT_FAILED); everything else is the capsule's
    /// fault, [`EXIT_USAGE`](crate::exit::EXIT_USAGE).
    pub fn code(&self) -> u8 {
        match self {
            StageError::Io { .. } => crate::exit::EXIT_FAILED,
            StageError::Reserved { .. } | StageError::Unsupported { .. } | StageError::Other(_) => {
                crate::exit::EXIT_USAGE
            }
        }
    }
}

/// `$MURMUR_HOME`, or `~/.murmur` when unset.
/// Made absolute against the current directory, so every path a model or record
/// shows is absolute.
pub fn murmur_home() -> PathBuf {
    let home = match std::env::var_os("MURMUR_HOME") {
        Some(h) if !h.is_empty() => PathBuf::from(h),
        _ => std::env::var_os("HOME").map_or_else(
            || PathBuf::from(".murmur"),
            |h| PathBuf::from(h).join(".murmur"),
        ),
    };
    std::path::absolute(&home).unwrap_or(home)
}

/// A capsule argument resolved: its directory and its `murmur.yaml`.
///
/// Accepts the directory or the manifest file itself.
pub fn resolve_capsule(arg: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    let abs = std::path::absolute(arg)?;
    if abs.is_dir() {
        let m = abs.join("murmur.yaml");
        if !m.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} has no murmur.yaml", abs.display()),
            ));
        }
        Ok((abs, m))
    } else if abs.is_file() {
        let dir = abs
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        Ok((dir, abs))
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{}: no such capsule directory or murmur.yaml",
                abs.display()
            ),
        ))
    }
}

/// A capsule read and validated, not yet staged.
#[derive(Debug)]
pub struct Loaded {
    /// The capsule directory, absolute.
    pub dir: PathBuf,
    /// The text of its `murmur.yaml`.
    pub text: String,
    /// The validated manifest.
    pub manifest: Manifest,
}

/// Reads and validates a capsule's manifest (the directory or the `murmur.yaml`) and
/// runs staging's checks for a member that may call `callees`, without writing.
///
/// Errors: a message ready to print: every manifest diagnostic, one per line, after
/// `N error(s) in FILE`; or the staging refusal.
pub fn load_capsule(capsule: &Path, callees: &[String]) -> Result<Loaded, String> {
    let (dir, manifest_path) = resolve_capsule(capsule).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(&manifest_path)
        .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let manifest = crate::manifest::parse_str(&text, &manifest_path.display().to_string())
        .map_err(|e| errors_in(&manifest_path, &e.diagnostics))?;
    inventory_for(&manifest, callees).map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    preflight(&dir, &manifest).map_err(|errs| {
        // Each problem in the file it is in: the manifest's own, or a replies file's.
        let mut files: Vec<PathBuf> = Vec::new();
        let lines: Vec<String> = errs
            .iter()
            .map(|e| match e {
                Preflight::Manifest(m) => {
                    if !files.contains(&manifest_path) {
                        files.push(manifest_path.clone());
                    }
                    format!("{}: {m}", manifest_path.display())
                }
                Preflight::Replies(d) => {
                    let f = PathBuf::from(&d.file);
                    if !files.contains(&f) {
                        files.push(f);
                    }
                    d.to_string()
                }
            })
            .collect();
        match files.as_slice() {
            [one] => errors_in(one, &lines),
            _ => errors_in(&dir, &lines),
        }
    })?;
    if !manifest.capabilities.shell_allow.is_empty() {
        let plan = sandbox_plan(&manifest);
        if let Some(s) = plan.shortfall() {
            if plan.mode == crate::exec::sandbox::Mode::Required {
                return Err(format!("{}: {s}", manifest_path.display()));
            }
            eprintln!("mur: warning: {}: {s}", manifest_path.display());
        }
    }
    for b in missing_binaries(&manifest.capabilities.shell_allow) {
        eprintln!(
            "mur: warning: {}: capabilities.shell.allow: `{b}` is not found on PATH; a call to it will fail until it is installed",
            manifest_path.display()
        );
    }
    Ok(Loaded {
        dir,
        text,
        manifest,
    })
}

/// A report of several problems in one file: `N error(s) in FILE`, then each problem
/// on a line of its own.
pub fn errors_in<E: std::fmt::Display>(file: &Path, errors: &[E]) -> String {
    let lines: Vec<String> = errors.iter().map(E::to_string).collect();
    format!(
        "{} error(s) in {}\n{}",
        lines.len(),
        file.display(),
        lines.join("\n")
    )
}

/// The system prompt of a capsule: `prompt.system`, else the file `prompt.system_file`
/// (relative to the capsule), else [`DEFAULT_SYSTEM_PROMPT`]; with
/// `lifecycle.keep_working` set, followed by [`KEEP_WORKING_GUIDANCE`] on a paragraph
/// of its own; with `capabilities.plan.submit`, followed by [`PLAN_GUIDANCE`] so.
///
/// Errors: the prompt file cannot be read.
pub fn system_prompt(dir: &Path, m: &Manifest) -> Result<String, String> {
    let mut prompt = match (&m.prompt.system, &m.prompt.system_file) {
        (Some(s), _) => s.clone(),
        (None, Some(f)) => {
            let p = dir.join(f);
            std::fs::read_to_string(&p)
                .map_err(|e| format!("prompt.system_file {}: {e}", p.display()))?
        }
        (None, None) => DEFAULT_SYSTEM_PROMPT.to_string(),
    };
    if m.lifecycle.keep_working.is_some() {
        prompt = format!("{}\n\n{KEEP_WORKING_GUIDANCE}", prompt.trim_end());
    }
    if m.capabilities.plan_submit {
        prompt = format!("{}\n\n{PLAN_GUIDANCE}", prompt.trim_end());
    }
    Ok(prompt)
}

/// The line that tells the runtime a task is really done under `lifecycle.keep_working`:
/// an answer whose last non-blank line is exactly this ends the task; the line is
/// removed from the answer.
pub const DONE_MARKER: &str = "[done]";

/// What the system prompt says when `lifecycle.keep_working` is set.
pub const KEEP_WORKING_GUIDANCE: &str = "When you reply without calling a tool before the task is finished, the runtime answers with a message asking you to keep working. When the task is really done, end your final answer with a line that reads exactly [done]; the runtime removes that line from your answer and ends the task.";

/// What the system prompt says exactly when submit-plan exists
/// (`capabilities.plan.submit`; spec, "The grant is the tool's existence").
pub const PLAN_GUIDANCE: &str = "When you already know the inputs of several tool calls, send them together as one submit-plan call instead of one call per turn: the steps run in order and you get every result at once. A step's output is not passed to a later step, so a call that needs an earlier result waits for the plan's result.";

/// The records directory of a session by default:
/// `$MURMUR_HOME/records/<capsule dir's absolute path, without its leading slash>/<session id>`.
///
/// The capsule path is normalised first, lexically: `.` parts are dropped and each
/// `..` removes the part before it (none above the root), so `/../../tmp/x` and
/// `/tmp/./y/../x` both give `records/tmp/x`. The result always lies beneath
/// `$MURMUR_HOME/records`, whatever the path holds.
pub fn default_records_dir(home: &Path, capsule_dir: &Path, session_id: &str) -> PathBuf {
    use std::path::Component;
    let mut rel = PathBuf::new();
    for c in capsule_dir.components() {
        match c {
            Component::Normal(part) => rel.push(part),
            Component::ParentDir => {
                rel.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    home.join("records").join(rel).join(session_id)
}

/// Checks the manifest and builds the inventory of a session in no formation, without
/// writing anything. See [`inventory_for`].
pub fn inventory(m: &Manifest) -> Result<Vec<ToolEntry>, StageError> {
    inventory_for(m, &[])
}

/// Checks the manifest and builds the inventory, without writing anything. `callees`
/// are the members roster.yaml lets this capsule call, in roster order: when there is
/// one, the inventory holds call-member (its `member` an enum of them) and
/// end-without-answer; otherwise neither exists.
///
/// Order: E-CAP-013 on every declared artifact first (before anything is pulled), then
/// what this build cannot run.
pub fn inventory_for(m: &Manifest, callees: &[String]) -> Result<Vec<ToolEntry>, StageError> {
    for (field, list) in [("tools", &m.tools), ("skills", &m.skills)] {
        for a in list {
            if RESERVED.contains(&a.name.as_str()) {
                return Err(StageError::Reserved {
                    field,
                    artifact: a.to_string(),
                    name: a.name.clone(),
                });
            }
        }
    }
    if m.transport == Transport::Process {
        return Err(StageError::Other("transport: process (an external harness) is not supported by this build of mur; use transport: http".into()));
    }
    let Some(_inference) = &m.inference else {
        return Err(StageError::Other("this capsule has no inference: block (a script capsule); this build of mur runs agent capsules only".into()));
    };
    let unsupported = |grant: &str, tool: &str| {
        Err(StageError::Unsupported {
            grant: grant.into(),
            tool: tool.into(),
        })
    };
    let c = &m.capabilities;
    if !c.spawn_allow.is_empty() {
        return unsupported("capabilities.spawn.allow", "delegate-task");
    }
    if m.control
        .agent_settings
        .iter()
        .any(|s| s == "inference.driver")
    {
        return unsupported(
            "control.agent_settings: [inference.driver]",
            "switch-driver",
        );
    }
    if c.install.is_some() {
        return unsupported("capabilities.install", "pull-artifact");
    }
    if let Some(a) = m.tools.first().or(m.skills.first()) {
        return Err(StageError::Other(format!(
            "`{a}` is declared, but this build of mur has no artifact store to pull it from; remove it from tools:/skills:"
        )));
    }
    let mut inv: Vec<ToolEntry> = c
        .shell_allow
        .iter()
        .map(|b| tools::shell::entry(b))
        .collect();
    if !callees.is_empty() {
        inv.push(tools::call_member::entry(callees));
        inv.push(tools::end_without_answer::entry());
    }
    // Peer files (mur-tools(7), "Peer files"): a member serves its handles at its
    // door; where there is no door (`mur run`) the session refuses to start.
    if m.exports.peer_files.is_some() {
        inv.push(tools::share_file::entry());
    }
    if c.peer_fetch {
        inv.push(tools::fetch_peer_file::entry());
    }
    inv.push(tools::session_status::entry());
    // Spec, "The twelve": an inference: block (checked above), a non-empty
    // capabilities.shell.allow and lifecycle.shell_grace_secs.
    for (declared, key) in [(
        m.inference.as_ref().is_some_and(|i| i.compaction_declared),
        "inference.compaction",
    )] {
        if declared {
            return Err(StageError::Other(format!(
                "{key} is not provided by this build of mur (it would be silently ignored); remove it to run this capsule"
            )));
        }
    }
    if m.lifecycle.shell_grace_secs.is_some() && !c.shell_allow.is_empty() {
        inv.push(tools::background::entry());
    }
    if c.plan_submit {
        let callable: Vec<String> = inv
            .iter()
            .map(|t| t.name.clone())
            .filter(|n| !tools::submit_plan::NOT_IN_PLAN.contains(&n.as_str()))
            .collect();
        inv.push(tools::submit_plan::entry(&callable));
    }
    Ok(inv)
}

/// The manifest staging writes for a runtime-provided tool.
#[derive(Serialize)]
struct ToolManifest<'a> {
    name: &'a str,
    version: &'static str,
    runtime: &'static str,
    implementation: &'static str,
    description: &'a str,
    input_schema: &'a Value,
}

/// Stages a validated manifest: checks it, then writes
/// `$MURMUR_HOME/run/<session id>/murmur.yaml` (the manifest as staged) and
/// `tools/<name>/murmur.yaml` for each tool of the inventory.
pub fn stage(
    home: &Path,
    capsule_dir: &Path,
    manifest_text: &str,
    m: &Manifest,
) -> Result<Staged, StageError> {
    stage_member(home, capsule_dir, manifest_text, m, &[])
}

/// Stages a formation member that may call `callees` (roster order); see [`stage`]
/// and [`inventory_for`].
pub fn stage_member(
    home: &Path,
    capsule_dir: &Path,
    manifest_text: &str,
    m: &Manifest,
    callees: &[String],
) -> Result<Staged, StageError> {
    let inventory = inventory_for(m, callees)?;
    let session_id = crate::ids::session_id();
    let runtime_dir = home.join("run").join(&session_id);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StageError::Io { path, source }
    };
    crate::private::create_dir_all(&runtime_dir).map_err(io(&runtime_dir))?;
    runtime::lock(&runtime_dir);
    let staged_manifest = runtime_dir.join("murmur.yaml");
    crate::private::write(&staged_manifest, manifest_text).map_err(io(&staged_manifest))?;
    for t in &inventory {
        let dir = runtime_dir.join("tools").join(&t.name);
        crate::private::create_dir_all(&dir).map_err(io(&dir))?;
        let doc = ToolManifest {
            name: &t.name,
            version: "0.0.0",
            runtime: "tool",
            implementation: "native",
            description: &t.description,
            input_schema: &t.input_schema,
        };
        let text = serde_yaml_ng::to_string(&doc).map_err(|e| {
            StageError::Other(format!("cannot write the manifest of {}: {e}", t.name))
        })?;
        let file = dir.join("murmur.yaml");
        crate::private::write(&file, text).map_err(io(&file))?;
    }
    let workdir = capsule_dir.join(&m.workdir);
    let workdir = workdir
        .canonicalize()
        .map_err(|e| StageError::Other(format!("workdir {}: {e}", workdir.display())))?;
    Ok(Staged {
        session_id,
        capsule_dir: capsule_dir.to_path_buf(),
        workdir,
        runtime_dir,
        inventory,
    })
}

pub use crate::tools::absent_tool_message;

/// The default system prompt when the capsule gives none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are an agent run by mur. Use the tools you are given to do the task, then answer it in text without calling a tool.";

/// One problem [`preflight`] found.
#[derive(Debug, Clone)]
pub enum Preflight {
    /// A problem of the manifest: `KEY.PATH: MESSAGE`, reported under its path.
    Manifest(String),
    /// A problem inside a `script` replies file, at its own position there.
    Replies(crate::manifest::parse::Diagnostic),
}

impl From<String> for Preflight {
    fn from(s: String) -> Self {
        Preflight::Manifest(s)
    }
}

impl std::fmt::Display for Preflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Preflight::Manifest(m) => f.write_str(m),
            Preflight::Replies(d) => write!(f, "{d}"),
        }
    }
}

/// Checks what the manifest points at on disk, so `mur check` and staging refuse a
/// capsule that could not run: the workdir is a directory, `prompt.system_file` is a
/// readable file, and every `script` choice's replies file loads.
///
/// Errors: one per problem: a message naming the manifest's key and the path, or a
/// replies file's own diagnostics (every one, each at its line and column there).
pub fn preflight(capsule_dir: &Path, m: &Manifest) -> Result<(), Vec<Preflight>> {
    let mut errs = Vec::new();
    let wd = capsule_dir.join(&m.workdir);
    if !wd.is_dir() {
        errs.push(
            format!(
                "workdir: {} is not a directory; create it or point workdir at one",
                wd.display()
            )
            .into(),
        );
    }
    if let Some(f) = &m.prompt.system_file {
        let p = capsule_dir.join(f);
        if !p.is_file() {
            errs.push(format!("prompt.system_file: {} is not a readable file", p.display()).into());
        }
    }
    if let Some(inf) = &m.inference {
        for (name, c) in &inf.choices {
            if let (crate::manifest::DriverKind::Script, Some(s)) = (c.driver, &c.script) {
                let path = capsule_dir.join(s);
                let problems = if path.is_file() {
                    crate::manifest::replies::check(&path)
                } else {
                    Vec::new()
                };
                if !problems.is_empty() {
                    errs.extend(problems.into_iter().map(Preflight::Replies));
                } else if let Err(e) = crate::inference::script::ScriptDriver::load(&path) {
                    errs.push(format!("inference.choices.{name}.script: {e}").into());
                }
            }
        }
    }
    // A hook that cannot start would fail every call closed, or never review a task:
    // the capsule is refused now rather than surprising at run time.
    for (event, list) in [
        ("on_tool_call", &m.hooks.on_tool_call),
        ("on_task_end", &m.hooks.on_task_end),
    ] {
        for (i, h) in list.iter().enumerate() {
            if let Some(problem) = command_problem(&h.command, capsule_dir, "the capsule directory")
            {
                errs.push(format!("hooks.{event}[{i}].command: {problem}").into());
            }
        }
    }
    if let Some(d) = &m.lifecycle.done_check {
        // A path is relative to the workdir, where a task may still create it; a bare
        // name must be on PATH now.
        if !d.command[0].contains('/') {
            if let Some(problem) = command_problem(&d.command, &wd, "the workdir") {
                errs.push(format!("lifecycle.done_check.command: {problem}").into());
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// Why `argv[0]` cannot be started: a name with `/` is relative to `base` (`what`)
/// and must be an executable file there; a bare name must be on `PATH`.
fn command_problem(argv: &[String], base: &Path, what: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let first = argv.first()?;
    if first.contains('/') {
        let path = base.join(first);
        match std::fs::metadata(&path) {
            Ok(md) if md.is_file() && md.permissions().mode() & 0o111 != 0 => None,
            Ok(md) if md.is_file() => {
                Some(format!("{} is not executable; chmod +x it", path.display()))
            }
            Ok(_) => Some(format!("{} is not a file", path.display())),
            Err(e) => Some(format!(
                "{} ({first}, relative to {what}): {e}",
                path.display()
            )),
        }
    } else if missing_binaries(std::slice::from_ref(first)).is_empty() {
        None
    } else {
        Some(format!(
            "`{first}` is not found on PATH; install it, or give its path relative to {what}"
        ))
    }
}

/// Checks a records directory given on the command line: made absolute; refused when
/// it is not a directory or already holds a session's `trace.jsonl`.
///
/// Errors: a message naming the path and how to fix it.
pub fn fresh_records_dir(d: &Path) -> Result<PathBuf, String> {
    let d = std::path::absolute(d).map_err(|e| format!("--records-dir {}: {e}", d.display()))?;
    if d.exists() && !d.is_dir() {
        return Err(format!("--records-dir {} is not a directory", d.display()));
    }
    if d.join("trace.jsonl").exists() {
        return Err(format!(
            "--records-dir {} already holds a session's trace.jsonl; give an empty directory",
            d.display()
        ));
    }
    Ok(d)
}

/// Removes the runtime directories it holds when dropped: a session's runtime
/// directory lives as long as the session, on every path out (the records stay).
/// Under `--keep-runtime` ([`runtime::keep_runtime_dirs`]) they are marked kept
/// instead; dropped while the thread panics, they are left for inspection (the next
/// start sweeps them, see [`runtime::sweep_leftovers`]).
#[derive(Debug, Default)]
pub struct RuntimeDirs(Vec<PathBuf>);

impl RuntimeDirs {
    /// Holds `dir` until the guard is dropped.
    pub fn hold(&mut self, dir: &Path) {
        self.0.push(dir.to_path_buf());
    }
}

impl Drop for RuntimeDirs {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for d in &self.0 {
            if panicking {
                log::warn!("left the runtime directory {} for inspection", d.display());
            } else if runtime::keeping() {
                runtime::mark_kept(d);
            } else if let Err(e) = std::fs::remove_dir_all(d) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::warn!("cannot remove the runtime directory {}: {e}", d.display());
                }
            }
            runtime::release(d);
        }
    }
}

/// The names in `allow` that no directory of `PATH` holds as an executable file.
pub fn missing_binaries(allow: &[String]) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    allow
        .iter()
        .filter(|b| {
            !dirs.iter().any(|d| {
                std::fs::metadata(d.join(b))
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
        })
        .cloned()
        .collect()
}

/// What the confinement of `staged`'s commands is built from ([`crate::exec::sandbox`]):
/// read-write the workdir, `home/` and `tmp/` in the runtime directory; read and
/// execute the directory of each allowed binary as found on `PATH` (and of the file a
/// symlink there points to) and each `capabilities.shell.read` path (relative ones
/// from the capsule directory); the names of `capabilities.shell.env`.
pub fn sandbox_spec(m: &Manifest, staged: &Staged) -> crate::exec::sandbox::Spec {
    let c = &m.capabilities;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    let mut read: Vec<PathBuf> = Vec::new();
    for b in &c.shell_allow {
        let Some(found) = dirs.iter().map(|d| d.join(b)).find(|p| p.is_file()) else {
            continue;
        };
        let mut add = |p: &Path| {
            if let Some(parent) = p.parent() {
                if !read.iter().any(|r| r == parent) {
                    read.push(parent.to_path_buf());
                }
            }
        };
        add(&found);
        if let Ok(real) = found.canonicalize() {
            add(&real);
        }
    }
    for p in &c.shell_read {
        read.push(staged.capsule_dir.join(p));
    }
    crate::exec::sandbox::Spec {
        mode: c.sandbox,
        workdir: staged.workdir.clone(),
        home: staged.runtime_dir.join("home"),
        tmp: staged.runtime_dir.join("tmp"),
        read,
        env_names: c.shell_env.clone(),
        network_allow: c.network_allow.clone(),
    }
}

/// The sandbox plan of a capsule on this host ([`crate::exec::sandbox::Plan`]).
pub fn sandbox_plan(m: &Manifest) -> crate::exec::sandbox::Plan {
    let c = &m.capabilities;
    crate::exec::sandbox::Plan::new(c.sandbox, &c.network_allow, crate::exec::sandbox::host())
}
