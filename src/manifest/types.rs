//! The validated capsule manifest (`murmur.yaml`), after parsing.
//!
//! Every key the spec names lives at the path it names. The parser in
//! [`crate::manifest::parse`] turns the YAML text into these types, collecting every
//! error with its `file:line:column`; nothing here ever holds raw, unvalidated input.
//!
//! # Key reference
//!
//! General rules, for every key:
//!
//! - An unknown key is an error (with the nearest known key, or the keys allowed at
//!   that level); so is a duplicate key. Any error at all means the manifest does not
//!   load: a misspelt grant never silently grants less, or more.
//! - A key given with no value (`key:`, null) is an error: leave the key out instead.
//! - Durations (`*_secs`) are whole seconds written as an integer (`10`), never a
//!   string such as `"10s"`. No number may be negative.
//! - Strings may be plain or quoted; a quoted `"123"` stays a string. A number where a
//!   string is expected is an error (quote it).
//! - Booleans are `true` or `false` (YAML 1.2: `yes`/`no` are strings).
//! - Capsule-relative paths (`workdir`, `prompt.system_file`, a choice's `script`,
//!   `exports.peer_files`) must be relative and must not contain `..`.
//! - Names (`name`, artifact scopes and names) match `[a-z0-9][a-z0-9._-]*`.
//!
//! | key | type | default | unit | absent / 0 means |
//! |---|---|---|---|---|
//! | `name` | name | required | — | an error (the capsule must be named) |
//! | `description` | string | none | — | no description |
//! | `transport` | `http` \| `process` | `http` | — | mur runs the agent loop |
//! | `prompt.system` | string | none | — | no inline prompt; at most one of `system`, `system_file` |
//! | `prompt.system_file` | relative path | none | — | no prompt file |
//! | `workdir` | relative path | `.` | — | the capsule directory |
//! | `inference` | mapping | none | — | a script capsule: no model is run |
//! | `inference.driver` | string, a key of `inference.choices` | required in `inference` | — | — |
//! | `inference.choices` | mapping of name → choice, at least one | required in `inference` | — | — |
//! | `inference.choices.N.driver` | `openai` \| `anthropic` \| `script` | required | — | — |
//! | `inference.choices.N.model` | string | required for `openai`, `anthropic` | — | (script driver) none |
//! | `inference.choices.N.base_url` | `http://` or `https://` URL | `https://api.openai.com/v1` (openai), `https://api.anthropic.com` (anthropic) | — | the provider's public endpoint |
//! | `inference.choices.N.credential` | `{env: VAR}` \| `{file: PATH}` (exactly one) | none | — | no `Authorization` header |
//! | `inference.choices.N.script` | relative path | required for `script`, refused otherwise | — | — |
//! | `inference.choices.N.context_window` | integer ≥ 1 | none | tokens | window unknown |
//! | `inference.choices.N.max_output_tokens` | integer ≥ 1 | none | tokens | no output cap sent |
//! | `inference.choices.N.max_input_tokens` | integer ≥ 1 | none | tokens | no input ceiling |
//! | `inference.choices.N.temperature` | number ≥ 0 | none | — | the provider's default |
//! | `inference.choices.N.request_timeout_secs` | integer ≥ 1 | `300` | seconds | 300 s (streaming: to the answer's start and for each silence in it); 0 is an error |
//! | `inference.choices.N.max_retries` | integer | `4` | retries | 4; `0`: no retry |
//! | `inference.choices.N.max_retry_after_secs` | integer ≥ 0 | `60` | seconds | a `Retry-After` longer than this fails the call at once |
//! | `inference.choices.N.stream` | boolean (`openai`, `anthropic` only) | `true` | — | `false`: one JSON body per call |
//! | `inference.max_turns` | integer ≥ 1 | none | inference calls per task | no cap; 0 is an error |
//! | `inference.max_session_tokens` | integer ≥ 1 | none | tokens | no spend ceiling; 0 is an error |
//! | `inference.compaction.threshold` | number, 0 < t ≤ 1 | `0.8` | fraction of the input budget | 0.8 |
//! | `capabilities.shell.allow` | list of bare binary names (no `/`, no whitespace, distinct) | `[]` | — | no shell tools |
//! | `capabilities.peer_fetch` | `true` \| `false` \| `{}` | `false` | — | no fetch-peer-file; `true` or `{}` grant it (the map form takes no keys yet) |
//! | `capabilities.spawn.allow` | list of sub-capsule names (distinct) | `[]` | — | no delegate-task |
//! | `capabilities.plan.submit` | boolean, required in `plan` | `false` | — | no submit-plan |
//! | `capabilities.install` | mapping; needs `transport: http` | none | — | no pull-artifact, remove-artifact |
//! | `capabilities.install.skill` | list of name patterns | `[]` | — | no skill may be pulled |
//! | `capabilities.install.tool` | list of name patterns | `[]` | — | no tool may be pulled |
//! | `capabilities.install.from` | non-empty list of `stores` \| `sources` | `[stores]` | — | pull from the stores only |
//! | `capabilities.network.allow` | list of host names (no `/`, distinct) | `[]` | — | no egress; member calls need `localhost`; commands get no network (see murmur.yaml(5), SANDBOX) |
//! | `capabilities.shell.env` | list of environment variable names (distinct) | `[]` | — | commands get the documented base environment only |
//! | `capabilities.shell.read` | list of paths (relative to the capsule directory, or absolute; distinct) | `[]` | — | commands read only the workdir and the system paths |
//! | `capabilities.sandbox` | `off` \| `best_effort` \| `required` | `best_effort` | — | every layer the kernel has, one warning for the rest; `required` refuses on a kernel that lacks one |
//! | `exports.peer_files` | relative path (to the workdir) | none | — | no share-file |
//! | `control.agent_settings` | list of `inference.driver` | `[]` | — | the agent changes nothing; `inference.driver` grants switch-driver and needs `inference` |
//! | `lifecycle.shell_grace_secs` | integer ≥ 1 | none | seconds | commands never move to the background (no background-command); 0 is an error |
//! | `lifecycle.deadline_notice_secs` | integer | 300, or a tenth of the deadline when shorter, at least 1 | seconds | the default; `0`: no notice |
//! | `lifecycle.delegation_deadline_secs` | integer ≥ 1 | `MURMUR_DELEGATION_TIMEOUT_SECS` or 600 | seconds | the default; 0 is an error |
//! | `lifecycle.keep_working.limit` | integer, required | — | messages per task, across reopens | `0`: never sent |
//! | `lifecycle.keep_working.message` | non-empty string, required | — | — | — |
//! | `lifecycle.done_check.command` | non-empty list of strings (argv), required; a bare name must be on `PATH` at staging, a path is relative to the workdir | — | — | — |
//! | `lifecycle.done_check.limit` | integer, required | — | reopens per task | `0`: the first failed check fails the task |
//! | `lifecycle.max_task_reopens` | integer | `3` | `on_task_end` reopens per task | 3; `0`: no reopen |
//! | `hooks.on_tool_call` | list of hooks | `[]` | — | every call is allowed; no `policy_decision` record |
//! | `hooks.on_task_end` | list of hooks | `[]` | — | a task ends as its attempt ended |
//! | `hooks.*[i].command` | non-empty list of strings (argv), required; a name with `/` is relative to the capsule, a bare name must be on `PATH` at staging | — | — | — |
//! | `hooks.*[i].timeout_secs` | integer ≥ 1 | `30` | seconds | 30 s; 0 is an error |
//! | `task_acceptance` | `reject` \| `queue` | `reject` | — | a busy session refuses new tasks; with `queue` and `after_task: sleep`, background commands outlive their task and an exit no tool result returned arrives as a completion task |
//! | `after_task` | `sleep` \| `exit` | the launcher's (`exit` for `mur run`, `sleep` for a door) | — | the launcher's default |
//! | `tools` | list of `scope/name[@version]` (distinct) | `[]` | — | no tool artifacts |
//! | `skills` | list of `scope/name[@version]` (distinct) | `[]` | — | no skill artifacts |
//!
//! The key lists themselves live in [`crate::manifest::keys`].

use std::path::PathBuf;

/// A validated `murmur.yaml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// `name`: the capsule's name (required; `[a-z0-9][a-z0-9._-]*`).
    pub name: String,
    /// `description`: one line shown in the agent card and `mur stage` (optional).
    pub description: Option<String>,
    /// `transport`: `http` (mur runs the agent loop, the default) or `process`.
    pub transport: Transport,
    /// `prompt`: the system prompt, inline or from a file relative to the capsule.
    pub prompt: Prompt,
    /// `workdir`: the accessible workdir, relative to the capsule directory and not
    /// leaving it (default `.`).
    pub workdir: PathBuf,
    /// `inference`: absent for a script capsule (one that runs no model).
    pub inference: Option<Inference>,
    /// `capabilities`: the grants.
    pub capabilities: Capabilities,
    /// `exports`: what this capsule lets peers take.
    pub exports: Exports,
    /// `control`: what the agent may change about its own session.
    pub control: Control,
    /// `lifecycle`: clocks and limits of tasks and commands.
    pub lifecycle: Lifecycle,
    /// `hooks`: policy and task-end commands.
    pub hooks: Hooks,
    /// `task_acceptance`: what a busy session does with a new task (default `reject`).
    pub task_acceptance: TaskAcceptance,
    /// `after_task`: what the session does when a task ends; `None` means the
    /// launcher's default (`exit` for `mur run`, `sleep` for a door).
    pub after_task: Option<AfterTask>,
    /// `tools`: tool artifacts the capsule declares (`scope/name[@version]`).
    pub tools: Vec<ArtifactRef>,
    /// `skills`: skill artifacts the capsule declares (`scope/name[@version]`).
    pub skills: Vec<ArtifactRef>,
}

/// `transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// mur runs the agent loop itself and calls the model through a driver.
    #[default]
    Http,
    /// An external harness runs the agent loop (not run by this build).
    Process,
}

/// `prompt`: `{system: TEXT}` or `{system_file: PATH}` (at most one).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prompt {
    /// `prompt.system`: inline system prompt.
    pub system: Option<String>,
    /// `prompt.system_file`: path relative to the capsule directory.
    pub system_file: Option<PathBuf>,
}

/// `inference`.
#[derive(Debug, Clone, PartialEq)]
pub struct Inference {
    /// `inference.driver`: the name of the default choice (must be a key of `choices`).
    pub driver: String,
    /// `inference.choices`: named driver choices, in manifest order.
    pub choices: Vec<(String, DriverChoice)>,
    /// `inference.max_turns`: the cap on inference calls per task (at least 1); `None`:
    /// no cap.
    pub max_turns: Option<u32>,
    /// `inference.max_session_tokens`: the session's spend ceiling in tokens (at least
    /// 1); `None`: none.
    pub max_session_tokens: Option<u64>,
    /// `inference.compaction.threshold`: fraction (0 < t <= 1) of the input budget at
    /// which compaction fires (default 0.8).
    pub compaction_threshold: f64,
    /// Whether the manifest declares `inference.compaction` at all (this build does
    /// not compact, so staging refuses it).
    pub compaction_declared: bool,
}

impl Inference {
    /// The choice named `name`, if declared.
    pub fn choice(&self, name: &str) -> Option<&DriverChoice> {
        self.choices.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
}

/// One entry of `inference.choices`.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverChoice {
    /// `driver`: which wire protocol serves this choice.
    pub driver: DriverKind,
    /// `model`: the model name sent to the provider (required for `openai`, `anthropic`).
    pub model: Option<String>,
    /// `base_url`: the provider's base URL (`openai` default `https://api.openai.com/v1`,
    /// `anthropic` default `https://api.anthropic.com`).
    pub base_url: Option<String>,
    /// `credential`: where the API key comes from; `None`: no `Authorization` header.
    pub credential: Option<Credential>,
    /// `script`: for the `script` driver, the replies file relative to the capsule.
    pub script: Option<PathBuf>,
    /// `context_window`: the model's context window in tokens; `None`: unknown.
    pub context_window: Option<u64>,
    /// `max_output_tokens`: the output cap sent with each call, in tokens.
    pub max_output_tokens: Option<u64>,
    /// `max_input_tokens`: the driver's input ceiling in tokens.
    pub max_input_tokens: Option<u64>,
    /// `temperature`: sampling temperature sent to the provider, if set.
    pub temperature: Option<f64>,
    /// `request_timeout_secs`: whole-request timeout of one call, in seconds (at least
    /// 1; default 300).
    pub request_timeout_secs: u64,
    /// `max_retries`: retries of a transient failure (default 4; 0 = no retry).
    pub max_retries: u32,
    /// `max_retry_after_secs`: the longest wait a provider's `Retry-After` may ask for,
    /// in seconds (default 60); a longer one fails the call at once, naming the wait.
    pub max_retry_after_secs: u64,
    /// `stream`: ask for server-sent events (default `true`; `false`: one JSON body).
    /// With streaming, `request_timeout_secs` bounds the wait for the answer to start
    /// and each silence within it, not the whole answer.
    pub stream: bool,
}

/// `driver` of a choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverKind {
    /// OpenAI Chat Completions with function tools.
    Openai,
    /// Anthropic Messages with tool use.
    Anthropic,
    /// Offline model turns played from a YAML file.
    Script,
}

/// `credential`: `{env: VAR}` or `{file: PATH}`.
#[derive(Debug, Clone, PartialEq)]
pub enum Credential {
    /// Read from this environment variable at call time.
    Env(String),
    /// Read from this file (first line, trimmed) at call time.
    File(PathBuf),
}

/// `capabilities`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Capabilities {
    /// `capabilities.shell.allow`: binaries the agent may run, one tool each.
    pub shell_allow: Vec<String>,
    /// `capabilities.peer_fetch`: `true` or a map grants fetch-peer-file; `false` or
    /// absent does not. The map form takes no keys yet, so only `{}` is accepted.
    pub peer_fetch: bool,
    /// `capabilities.spawn.allow`: sub-capsules delegate-task may hand tasks to.
    pub spawn_allow: Vec<String>,
    /// `capabilities.plan.submit`: `true` grants submit-plan.
    pub plan_submit: bool,
    /// `capabilities.install`: grants pull-artifact and remove-artifact.
    pub install: Option<Install>,
    /// `capabilities.network.allow`: hosts the capsule may reach (`localhost`, names).
    pub network_allow: Vec<String>,
    /// `capabilities.shell.env`: names of `mur`'s environment variables passed to
    /// commands, on top of the documented base (murmur.yaml(5), ENVIRONMENT OF A
    /// COMMAND).
    pub shell_env: Vec<String>,
    /// `capabilities.shell.read`: more paths commands may read and execute beneath
    /// (relative to the capsule directory, or absolute).
    pub shell_read: Vec<PathBuf>,
    /// `capabilities.sandbox`: what a kernel lacking a sandbox layer means.
    pub sandbox: crate::exec::sandbox::Mode,
}

/// `capabilities.install`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Install {
    /// `install.skill`: skill name patterns the agent may pull.
    pub skill: Vec<String>,
    /// `install.tool`: tool name patterns the agent may pull.
    pub tool: Vec<String>,
    /// `install.from`: `stores` and/or `sources` (default `[stores]`).
    pub from: Vec<String>,
}

/// `exports`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Exports {
    /// `exports.peer_files`: the export root, relative to the workdir; grants share-file.
    pub peer_files: Option<PathBuf>,
}

/// `control`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Control {
    /// `control.agent_settings`: settings the agent may change; `inference.driver`
    /// grants switch-driver.
    pub agent_settings: Vec<String>,
}

/// `lifecycle`. All durations are whole seconds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Lifecycle {
    /// `lifecycle.shell_grace_secs`: seconds after which a shell command moves to the
    /// background (at least 1); `None`: never (and no background-command tool).
    pub shell_grace_secs: Option<u64>,
    /// `lifecycle.deadline_notice_secs`: the deadline notice margin; `None`: the spec's
    /// default (300 s, or a tenth of the deadline when shorter, at least 1 s); `Some(0)`:
    /// no notice.
    pub deadline_notice_secs: Option<u64>,
    /// `lifecycle.delegation_deadline_secs`: bound of one member call or delegation;
    /// `None`: `MURMUR_DELEGATION_TIMEOUT_SECS` or 600.
    pub delegation_deadline_secs: Option<u64>,
    /// `lifecycle.keep_working`: nudges sent when the model stops early.
    pub keep_working: Option<KeepWorking>,
    /// `lifecycle.done_check`: a command that must pass for a task to end completed.
    pub done_check: Option<DoneCheck>,
    /// `lifecycle.max_task_reopens`: the cap on reopens of one task (default 3).
    pub max_task_reopens: Option<u32>,
}

/// `hooks`: commands the runtime runs at a call's decision point and at a task's end.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hooks {
    /// `hooks.on_tool_call`: asked, in order, whether each tool call may run.
    pub on_tool_call: Vec<Hook>,
    /// `hooks.on_task_end`: told, in order, how each attempt of a task ended.
    pub on_task_end: Vec<Hook>,
}

impl Hooks {
    /// Whether any hook is declared.
    pub fn any(&self) -> bool {
        !self.on_tool_call.is_empty() || !self.on_task_end.is_empty()
    }
}

/// One hook: a command run like a shell tool, JSON on stdin, one JSON object on stdout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Hook {
    /// `command`: argv. A first word with `/` is relative to the capsule directory; a
    /// bare name is looked up on `PATH`.
    pub command: Vec<String>,
    /// `timeout_secs`: how long one run may take (default [`DEFAULT_HOOK_TIMEOUT_SECS`]).
    pub timeout_secs: Option<u64>,
}

/// How long one hook run may take when `timeout_secs` is not given: 30 seconds.
pub const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 30;

/// `lifecycle.max_task_reopens` when not given: 3.
pub const DEFAULT_MAX_TASK_REOPENS: u32 = 3;

/// `lifecycle.keep_working`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeepWorking {
    /// `limit`: how many messages at most per task.
    pub limit: u32,
    /// `message`: the text sent.
    pub message: String,
}

/// `lifecycle.done_check`.
#[derive(Debug, Clone, PartialEq)]
pub struct DoneCheck {
    /// `command`: argv run in the workdir; exit 0 means done.
    pub command: Vec<String>,
    /// `limit`: how many reopens at most per task.
    pub limit: u32,
}

/// `task_acceptance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskAcceptance {
    /// A busy session refuses a new task (`TASK_STATE_REJECTED`).
    #[default]
    Reject,
    /// A busy session queues new tasks, first in first out.
    Queue,
}

/// `after_task`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterTask {
    /// The session sleeps until the next task arrives.
    Sleep,
    /// The session ends.
    Exit,
}

/// A declared artifact, `scope/name[@version]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArtifactRef {
    /// The part before the `/`.
    pub scope: String,
    /// The bare (tool) name, the part after the `/`.
    pub name: String,
    /// The pinned version, if given.
    pub version: Option<String>,
}

impl std::fmt::Display for ArtifactRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.scope, self.name)?;
        if let Some(v) = &self.version {
            write!(f, "@{v}")?;
        }
        Ok(())
    }
}
