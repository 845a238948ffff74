//! Every key and enumerated value the manifest accepts, level by level.
//!
//! The walker in [`super::parse`] reads keys only from these lists (checked in debug
//! builds) and reports any other key as unknown with the nearest of them, so the
//! parser and its "did you mean" can never disagree. Order is the order of the key
//! reference in [`super::types`] and of "expected one of" hints.

/// Top level of `murmur.yaml`.
pub const ROOT: &[&str] = &[
    "name",
    "description",
    "transport",
    "prompt",
    "workdir",
    "inference",
    "capabilities",
    "exports",
    "control",
    "lifecycle",
    "hooks",
    "task_acceptance",
    "after_task",
    "tools",
    "skills",
];

/// `prompt`.
pub const PROMPT: &[&str] = &["system", "system_file"];

/// `inference`.
pub const INFERENCE: &[&str] = &[
    "driver",
    "choices",
    "max_turns",
    "max_session_tokens",
    "compaction",
];

/// `inference.compaction`.
pub const COMPACTION: &[&str] = &["threshold"];

/// One entry of `inference.choices`.
pub const CHOICE: &[&str] = &[
    "driver",
    "model",
    "base_url",
    "credential",
    "script",
    "context_window",
    "max_output_tokens",
    "max_input_tokens",
    "temperature",
    "request_timeout_secs",
    "max_retries",
    "max_retry_after_secs",
    "stream",
];

/// `credential` of a choice (exactly one of them).
pub const CREDENTIAL: &[&str] = &["env", "file"];

/// `capabilities`.
pub const CAPABILITIES: &[&str] = &[
    "shell",
    "peer_fetch",
    "spawn",
    "plan",
    "install",
    "network",
    "sandbox",
];

/// `capabilities.shell`, `capabilities.spawn` and `capabilities.network`.
pub const ALLOW: &[&str] = &["allow"];

/// `capabilities.shell`.
pub const SHELL: &[&str] = &["allow", "env", "read"];

/// `capabilities.peer_fetch` in its map form: no keys yet (`{}` grants).
pub const PEER_FETCH: &[&str] = &[];

/// `capabilities.plan`.
pub const PLAN: &[&str] = &["submit"];

/// `capabilities.install`.
pub const INSTALL: &[&str] = &["skill", "tool", "from"];

/// `exports`.
pub const EXPORTS: &[&str] = &["peer_files"];

/// `control`.
pub const CONTROL: &[&str] = &["agent_settings"];

/// `lifecycle`.
pub const LIFECYCLE: &[&str] = &[
    "shell_grace_secs",
    "deadline_notice_secs",
    "delegation_deadline_secs",
    "keep_working",
    "done_check",
    "max_task_reopens",
];

/// `lifecycle.keep_working`.
pub const KEEP_WORKING: &[&str] = &["limit", "message"];

/// `lifecycle.done_check`.
pub const DONE_CHECK: &[&str] = &["command", "limit"];

/// `hooks`.
pub const HOOKS: &[&str] = &["on_tool_call", "on_task_end"];

/// One hook of `hooks.on_tool_call` or `hooks.on_task_end`.
pub const HOOK: &[&str] = &["command", "timeout_secs"];

/// Values of `control.agent_settings`: the settings an agent may be allowed to change.
pub const AGENT_SETTINGS: &[&str] = &["inference.driver"];

/// Values of `capabilities.install.from`.
pub const INSTALL_FROM: &[&str] = &["stores", "sources"];

/// Every mapping with a fixed key list, by its key path (`N` stands for a choice name),
/// so a key written at the wrong level can be pointed to its home.
pub const LEVELS: &[(&str, &[&str])] = &[
    ("", ROOT),
    ("prompt", PROMPT),
    ("inference", INFERENCE),
    ("inference.compaction", COMPACTION),
    ("inference.choices.N", CHOICE),
    ("inference.choices.N.credential", CREDENTIAL),
    ("capabilities", CAPABILITIES),
    ("capabilities.shell", SHELL),
    ("capabilities.spawn", ALLOW),
    ("capabilities.network", ALLOW),
    ("capabilities.plan", PLAN),
    ("capabilities.install", INSTALL),
    ("exports", EXPORTS),
    ("control", CONTROL),
    ("lifecycle", LIFECYCLE),
    ("lifecycle.keep_working", KEEP_WORKING),
    ("lifecycle.done_check", DONE_CHECK),
    ("hooks", HOOKS),
];

/// The levels other than `here` where `key` is a known key, for a hint such as
/// "`max_turns` belongs under `inference`".
pub fn homes_of(key: &str, here: &[&str]) -> Vec<&'static str> {
    LEVELS
        .iter()
        .filter(|(_, known)| *known != here && known.contains(&key))
        .map(|(path, _)| *path)
        .collect()
}

/// Top level of `roster.yaml`.
pub const ROSTER: &[&str] = &["formation", "entry", "members"];

/// One entry of a roster's `members`.
pub const ROSTER_MEMBER: &[&str] = &[
    "capsule",
    "door",
    "token",
    "calls",
    "listen",
    "request_timeout_secs",
];
