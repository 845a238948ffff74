//! Reading and validating `murmur.yaml`.
//!
//! The text is parsed into a spanned tree ([`super::yaml`]), then walked once against the
//! key lists of [`super::keys`]. Every problem becomes a [`Diagnostic`] and the walk goes
//! on, so one run reports all of them, in file order. Any diagnostic at all means no
//! [`Manifest`]: a misspelt grant can never widen what a capsule is allowed.

use std::cell::RefCell;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::keys;
use super::suggest;
use super::types::{
    AfterTask, ArtifactRef, Capabilities, Control, Credential, DoneCheck, DriverChoice, DriverKind,
    Exports, Inference, Install, KeepWorking, Lifecycle, Manifest, Prompt, TaskAcceptance,
    Transport,
};
use super::yaml::{self, Entry, Kind, Node, Pos, Value};

/// Default of a choice's `request_timeout_secs`, in seconds.
pub const DEFAULT_REQUEST_TIMEOUT_SECS: u64 = 300;
/// Default of a choice's `max_retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 4;
/// Default of `inference.compaction.threshold`, a fraction of the input budget.
pub const DEFAULT_COMPACTION_THRESHOLD: f64 = 0.8;

/// One problem in a manifest, with where it is.
///
/// Displays as `FILE:LINE:COLUMN: KEY.PATH: MESSAGE`; the key path is left out when
/// empty (the top level), and `LINE:COLUMN` when the file could not be read at all.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// The file, as given to [`load`] or [`parse_str`].
    pub file: String,
    /// 1-based line; 0 when the problem has no position (an unreadable file).
    pub line: usize,
    /// 1-based column, in characters; 0 when the problem has no position.
    pub column: usize,
    /// The key path, e.g. `inference.choices.main.driver`, with `[i]` for the i-th
    /// (0-based) list item, e.g. `capabilities.shell.allow[2]`. A bad value names its
    /// own key; an unknown, duplicate or missing key names the mapping that holds it
    /// (empty at the top level).
    pub path: String,
    /// What is wrong and how to fix it: lowercase, no trailing period.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.file)?;
        if self.line > 0 {
            write!(f, "{}:{}:", self.line, self.column)?;
        }
        if !self.path.is_empty() {
            write!(f, " {}:", self.path)?;
        }
        write!(f, " {}", self.message)
    }
}

/// Every problem of a manifest; returned instead of a [`Manifest`] when there is any.
///
/// Displays one [`Diagnostic`] per line, in file order (line, then column).
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestError {
    /// The diagnostics, in file order; never empty.
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}

/// Reads and validates the manifest at `path`.
///
/// # Errors
///
/// A [`ManifestError`] with one position-less diagnostic when the file cannot be read,
/// otherwise every diagnostic of [`parse_str`]; diagnostics name the file as
/// `path.display()`.
pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ManifestError {
        diagnostics: vec![Diagnostic {
            file: file.clone(),
            line: 0,
            column: 0,
            path: String::new(),
            message: format!("cannot read the manifest: {e}"),
        }],
    })?;
    parse_str(&text, &file)
}

/// Validates manifest text; `file` names it in diagnostics.
///
/// Fills in the documented defaults (see [`super::types`]).
///
/// # Errors
///
/// A [`ManifestError`] holding every problem found, in file order: YAML syntax errors
/// (tabs in indentation among them), unknown keys (with the nearest known key),
/// duplicate keys, wrong types, values out of range and cross-key rules. A syntax error
/// stops the walk, so only syntax problems are reported for such a file.
pub fn parse_str(text: &str, file: &str) -> Result<Manifest, ManifestError> {
    let mut cx = Cx {
        file,
        diags: Vec::new(),
    };
    let manifest = match yaml::parse(text) {
        Err(e) => {
            syntax_diagnostics(&mut cx, text, &e);
            None
        }
        Ok((root, tree_errors)) => {
            for e in tree_errors {
                cx.err(e.pos, &e.path, e.message);
            }
            match root {
                None => {
                    cx.err(
                        Pos { line: 1, column: 1 },
                        "",
                        "empty manifest: missing required key `name`",
                    );
                    None
                }
                Some(root) => manifest(&mut cx, &root),
            }
        }
    };
    let mut diagnostics = cx.diags;
    diagnostics.sort_by_key(|d| (d.line, d.column));
    diagnostics.dedup();
    match manifest {
        Some(m) if diagnostics.is_empty() => Ok(m),
        _ => {
            debug_assert!(!diagnostics.is_empty(), "a failed walk left no diagnostic");
            Err(ManifestError { diagnostics })
        }
    }
}

/// Reports a YAML syntax error: one diagnostic per tab-indented line (the usual cause),
/// plus the scanner's own error when it is not on one of those lines.
fn syntax_diagnostics(cx: &mut Cx, text: &str, e: &yaml::SyntaxError) {
    let mut tab_lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let indent: &str = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
        if let Some(col) = indent.chars().position(|c| c == '\t') {
            let pos = Pos {
                line: i + 1,
                column: col + 1,
            };
            cx.err(pos, "", "YAML indentation must use spaces, not tabs");
            tab_lines.push(i + 1);
        }
    }
    if !tab_lines.contains(&e.pos.line) {
        cx.err(e.pos, "", format!("invalid YAML: {}", e.message));
    }
}

/// The walk's state: the file name and what has been found wrong so far.
struct Cx<'f> {
    file: &'f str,
    diags: Vec<Diagnostic>,
}

impl Cx<'_> {
    /// Records one diagnostic.
    fn err(&mut self, pos: Pos, path: &str, message: impl Into<String>) {
        self.diags.push(Diagnostic {
            file: self.file.to_string(),
            line: pos.line,
            column: pos.column,
            path: path.to_string(),
            message: message.into(),
        });
    }
}

/// `parent.key`, or `key` at the top.
fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// How a node reads in "found ..." messages: `a mapping`, `integer `5``, ...
fn describe(node: &Node) -> String {
    match &node.value {
        Value::Map(_) => "a mapping".into(),
        Value::Seq(_) => "a list".into(),
        Value::Scalar(s) => {
            let shown: String = if s.text.chars().count() > 40 {
                s.text.chars().take(40).chain("...".chars()).collect()
            } else {
                s.text.clone()
            };
            match s.kind() {
                Kind::Null => "nothing (null)".into(),
                Kind::Bool(_) => format!("boolean `{shown}`"),
                Kind::Int(_) => format!("integer `{shown}`"),
                Kind::Float(_) => format!("number `{shown}`"),
                Kind::Str => format!("string `{shown}`"),
            }
        }
    }
}

/// A value in the tree together with its key path.
#[derive(Clone, Copy)]
struct Field<'n, 'p> {
    node: &'n Node,
    path: &'p str,
}

impl<'n> Field<'n, '_> {
    /// Reports that the value is not what `expected` says.
    fn mismatch(&self, cx: &mut Cx, expected: &str) {
        let mut msg = format!("expected {expected}, found {}", describe(self.node));
        if expected == "a string" {
            if let Value::Scalar(s) = &self.node.value {
                if !matches!(s.kind(), Kind::Null) {
                    msg.push_str(&format!(" (quote it to make it a string: \"{}\")", s.text));
                }
            }
        }
        cx.err(self.node.pos, self.path, msg);
    }

    /// The resolved scalar, if the node is one.
    fn kind(&self) -> Option<(Kind, &'n str)> {
        match &self.node.value {
            Value::Scalar(s) => Some((s.kind(), s.text.as_str())),
            _ => None,
        }
    }

    /// A string (quoted or plain text that is not a number, boolean or null).
    fn str(&self, cx: &mut Cx) -> Option<String> {
        match self.kind() {
            Some((Kind::Str, t)) => Some(t.to_string()),
            _ => {
                self.mismatch(cx, "a string");
                None
            }
        }
    }

    /// A non-empty string with no whitespace (a name, a host, an argv word).
    fn word(&self, cx: &mut Cx, what: &str) -> Option<String> {
        let s = self.str(cx)?;
        if s.is_empty() {
            cx.err(
                self.node.pos,
                self.path,
                format!("{what} must not be empty"),
            );
            None
        } else if s.chars().any(char::is_whitespace) {
            cx.err(
                self.node.pos,
                self.path,
                format!("{what} `{s}` must not contain whitespace"),
            );
            None
        } else {
            Some(s)
        }
    }

    /// `true` or `false`.
    fn bool(&self, cx: &mut Cx) -> Option<bool> {
        match self.kind() {
            Some((Kind::Bool(b), _)) => Some(b),
            _ => {
                self.mismatch(cx, "`true` or `false`");
                None
            }
        }
    }

    /// A non-negative whole number no larger than `max`; `unit` names it in messages
    /// (`"a whole number"`, `"a whole number of seconds"`).
    fn uint(&self, cx: &mut Cx, max: u64, unit: &str) -> Option<u64> {
        match self.kind() {
            Some((Kind::Int(v), t)) if v < 0 => {
                cx.err(
                    self.node.pos,
                    self.path,
                    format!("must not be negative, found `{t}`"),
                );
                None
            }
            Some((Kind::Int(v), t)) => match u64::try_from(v) {
                Ok(v) if v <= max => Some(v),
                _ => {
                    cx.err(
                        self.node.pos,
                        self.path,
                        format!("`{t}` is too large (at most {max})"),
                    );
                    None
                }
            },
            _ => {
                self.mismatch(cx, unit);
                None
            }
        }
    }

    /// A `u64`.
    fn u64(&self, cx: &mut Cx) -> Option<u64> {
        self.uint(cx, u64::MAX, "a whole number")
    }

    /// A `u32`.
    fn u32(&self, cx: &mut Cx) -> Option<u32> {
        self.uint(cx, u32::MAX.into(), "a whole number")
            .and_then(|v| u32::try_from(v).ok())
    }

    /// An integer number of seconds. A duration string such as `"10s"` is refused with the
    /// integer to write instead.
    fn secs(&self, cx: &mut Cx) -> Option<u64> {
        if let Some((Kind::Str, t)) = self.kind() {
            let key = self.path.rsplit('.').next().unwrap_or(self.path);
            let fix = match humantime::parse_duration(t.trim()) {
                Ok(d) if d.subsec_nanos() == 0 => format!("write `{key}: {}`", d.as_secs()),
                _ => format!("write e.g. `{key}: 10`"),
            };
            cx.err(
                self.node.pos,
                self.path,
                format!("expected an integer number of seconds, found string `{t}`; {fix}"),
            );
            return None;
        }
        self.uint(cx, u64::MAX, "an integer number of seconds")
    }

    /// A number, whole or not.
    fn f64(&self, cx: &mut Cx) -> Option<f64> {
        match self.kind() {
            Some((Kind::Float(v), _)) => Some(v),
            Some((Kind::Int(v), _)) => Some(v as f64),
            _ => {
                self.mismatch(cx, "a number");
                None
            }
        }
    }

    /// One of `values`, by its name.
    fn one_of<T: Copy>(&self, cx: &mut Cx, values: &[(&str, T)]) -> Option<T> {
        let s = self.str(cx)?;
        if let Some((_, v)) = values.iter().find(|(n, _)| *n == s) {
            return Some(*v);
        }
        let names: Vec<&str> = values.iter().map(|(n, _)| *n).collect();
        cx.err(
            self.node.pos,
            self.path,
            format!("unknown value `{s}`{}", suggest::hint(&s, &names)),
        );
        None
    }

    /// A path relative to the capsule (or workdir): not empty, not absolute, no `..`.
    fn rel_path(&self, cx: &mut Cx) -> Option<PathBuf> {
        let s = self.str(cx)?;
        let p = PathBuf::from(&s);
        let problem = if s.is_empty() {
            Some("must not be empty")
        } else if p.is_absolute() {
            Some("must be a relative path")
        } else if p.components().any(|c| c == Component::ParentDir) {
            Some("must not leave its directory (`..`)")
        } else {
            None
        };
        match problem {
            Some(why) => {
                cx.err(self.node.pos, self.path, format!("`{s}` {why}"));
                None
            }
            None => Some(p),
        }
    }

    /// A list; each item comes with its path `PATH[i]`.
    fn list(&self, cx: &mut Cx) -> Option<Vec<(&'n Node, String)>> {
        match &self.node.value {
            Value::Seq(items) => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n, format!("{}[{i}]", self.path)))
                    .collect(),
            ),
            _ => {
                self.mismatch(cx, "a list");
                None
            }
        }
    }

    /// A list of items read by `item`, each distinct; an item that fails is left out
    /// (its diagnostic is recorded).
    fn list_of<T: PartialEq>(
        &self,
        cx: &mut Cx,
        mut item: impl FnMut(&mut Cx, Field<'n, '_>) -> Option<T>,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for (node, path) in self.list(cx).unwrap_or_default() {
            let Some(v) = item(cx, Field { node, path: &path }) else {
                continue;
            };
            if out.contains(&v) {
                cx.err(node.pos, &path, "duplicate entry");
            } else {
                out.push(v);
            }
        }
        out
    }

    /// A mapping with the keys `known`; unknown and duplicate keys are reported now.
    fn obj(&self, cx: &mut Cx, known: &'static [&'static str]) -> Option<Obj<'n>> {
        let entries = self.entries(cx)?;
        for e in entries {
            if !known.contains(&e.key.as_str()) {
                cx.err(
                    e.key_pos,
                    self.path,
                    format!("unknown key `{}`{}", e.key, suggest::hint(&e.key, known)),
                );
            }
        }
        Some(Obj {
            pos: self.node.pos,
            path: self.path.to_string(),
            entries,
            known,
            read: RefCell::new(Vec::new()),
        })
    }

    /// A mapping with any keys; duplicate keys are reported (the first one counts).
    fn entries(&self, cx: &mut Cx) -> Option<&'n [Entry]> {
        let Value::Map(entries) = &self.node.value else {
            self.mismatch(cx, "a mapping");
            return None;
        };
        for (i, e) in entries.iter().enumerate() {
            if let Some(first) = entries[..i].iter().find(|f| f.key == e.key) {
                cx.err(
                    e.key_pos,
                    self.path,
                    format!(
                        "duplicate key `{}` (first given at line {})",
                        e.key, first.key_pos.line
                    ),
                );
            }
        }
        Some(entries)
    }
}

/// A mapping being read key by key.
///
/// Keys are read only from its known list (checked in debug builds); [`Obj::finish`]
/// checks, in debug builds, that every known key present was read.
struct Obj<'n> {
    pos: Pos,
    path: String,
    entries: &'n [Entry],
    known: &'static [&'static str],
    read: RefCell<Vec<&'static str>>,
}

impl<'n> Obj<'n> {
    /// The entry for `key` (its first occurrence), if present.
    fn entry(&self, key: &'static str) -> Option<&'n Entry> {
        debug_assert!(
            self.known.contains(&key),
            "`{key}` is read at `{}` but not in its known-key list",
            self.path
        );
        self.read.borrow_mut().push(key);
        self.entries.iter().find(|e| e.key == key)
    }

    /// Runs `f` on the value of `key` if present.
    fn opt<T>(
        &self,
        cx: &mut Cx,
        key: &'static str,
        f: impl FnOnce(&mut Cx, Field<'n, '_>) -> Option<T>,
    ) -> Option<T> {
        let e = self.entry(key)?;
        let path = join(&self.path, key);
        f(
            cx,
            Field {
                node: &e.value,
                path: &path,
            },
        )
    }

    /// Runs `f` on the value of `key`, reporting it missing if absent.
    fn req<T>(
        &self,
        cx: &mut Cx,
        key: &'static str,
        f: impl FnOnce(&mut Cx, Field<'n, '_>) -> Option<T>,
    ) -> Option<T> {
        if self.entry(key).is_none() {
            self.missing(cx, key, "");
            return None;
        }
        self.opt(cx, key, f)
    }

    /// Reports that `key` is required here; `why` is appended to the message.
    fn missing(&self, cx: &mut Cx, key: &str, why: &str) {
        cx.err(
            self.pos,
            &self.path,
            format!("missing required key `{key}`{why}"),
        );
    }

    /// Whether `key` is present.
    fn has(&self, key: &'static str) -> bool {
        self.entry(key).is_some()
    }

    /// Where the key `key` is written, for cross-key errors.
    fn key_pos(&self, key: &'static str) -> Pos {
        self.entry(key).map_or(self.pos, |e| e.key_pos)
    }

    /// An optional string.
    fn opt_str(&self, cx: &mut Cx, key: &'static str) -> Option<String> {
        self.opt(cx, key, |cx, f| f.str(cx))
    }

    /// An optional `u32`.
    fn opt_u32(&self, cx: &mut Cx, key: &'static str) -> Option<u32> {
        self.opt(cx, key, |cx, f| f.u32(cx))
    }

    /// An optional number of seconds.
    fn opt_secs(&self, cx: &mut Cx, key: &'static str) -> Option<u64> {
        self.opt(cx, key, |cx, f| f.secs(cx))
    }

    /// An optional positive `u64`, or number of seconds for a `_secs` key; 0 is refused
    /// with `zero` saying what to write instead.
    fn opt_positive(&self, cx: &mut Cx, key: &'static str, zero: &str) -> Option<u64> {
        self.opt(cx, key, |cx, f| {
            let v = if key.ends_with("_secs") {
                f.secs(cx)?
            } else {
                f.u64(cx)?
            };
            if v == 0 {
                cx.err(f.node.pos, f.path, format!("must be at least 1; {zero}"));
                return None;
            }
            Some(v)
        })
    }

    /// Ends the reading of this mapping.
    fn finish(self) {
        if cfg!(debug_assertions) {
            let read = self.read.borrow();
            for e in self.entries {
                if self.known.contains(&e.key.as_str()) {
                    debug_assert!(
                        read.contains(&e.key.as_str()),
                        "known key `{}` at `{}` was never read",
                        e.key,
                        self.path
                    );
                }
            }
        }
    }
}

/// `[a-z0-9][a-z0-9._-]*`: capsule, scope and artifact names.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

/// Walks the whole manifest; `None` when a required part could not be read.
fn manifest(cx: &mut Cx, root: &Node) -> Option<Manifest> {
    let top = Field {
        node: root,
        path: "",
    };
    if !matches!(root.value, Value::Map(_)) {
        cx.err(
            root.pos,
            "",
            format!("a manifest is a mapping of keys, found {}", describe(root)),
        );
        return None;
    }
    let o = top.obj(cx, keys::ROOT)?;
    let name = o.req(cx, "name", |cx, f| {
        let s = f.str(cx)?;
        if !is_name(&s) {
            cx.err(
                f.node.pos,
                f.path,
                format!("`{s}` is not a valid name (use `[a-z0-9][a-z0-9._-]*`)"),
            );
            return None;
        }
        Some(s)
    });
    let description = o.opt_str(cx, "description");
    let transport = o
        .opt(cx, "transport", |cx, f| {
            f.one_of(
                cx,
                &[("http", Transport::Http), ("process", Transport::Process)],
            )
        })
        .unwrap_or_default();
    let prompt = o
        .opt(cx, "prompt", |cx, f| prompt(cx, f))
        .unwrap_or_default();
    let workdir = o
        .opt(cx, "workdir", |cx, f| f.rel_path(cx))
        .unwrap_or_else(|| PathBuf::from("."));
    let inference = o.opt(cx, "inference", |cx, f| inference(cx, f));
    let capabilities = o
        .opt(cx, "capabilities", |cx, f| capabilities(cx, f))
        .unwrap_or_default();
    let exports = o
        .opt(cx, "exports", |cx, f| {
            let e = f.obj(cx, keys::EXPORTS)?;
            let peer_files = e.opt(cx, "peer_files", |cx, f| f.rel_path(cx));
            e.finish();
            Some(Exports { peer_files })
        })
        .unwrap_or_default();
    let control = o
        .opt(cx, "control", |cx, f| {
            let c = f.obj(cx, keys::CONTROL)?;
            let agent_settings = c
                .opt(cx, "agent_settings", |cx, f| {
                    Some(f.list_of(cx, |cx, item| {
                        let s = item.str(cx)?;
                        if keys::AGENT_SETTINGS.contains(&s.as_str()) {
                            Some(s)
                        } else {
                            cx.err(
                                item.node.pos,
                                item.path,
                                format!(
                                    "unknown setting `{s}`{}",
                                    suggest::hint(&s, keys::AGENT_SETTINGS)
                                ),
                            );
                            None
                        }
                    }))
                })
                .unwrap_or_default();
            c.finish();
            Some(Control { agent_settings })
        })
        .unwrap_or_default();
    let lifecycle = o
        .opt(cx, "lifecycle", |cx, f| lifecycle(cx, f))
        .unwrap_or_default();
    let task_acceptance = o
        .opt(cx, "task_acceptance", |cx, f| {
            f.one_of(
                cx,
                &[
                    ("reject", TaskAcceptance::Reject),
                    ("queue", TaskAcceptance::Queue),
                ],
            )
        })
        .unwrap_or_default();
    let after_task = o.opt(cx, "after_task", |cx, f| {
        f.one_of(
            cx,
            &[("sleep", AfterTask::Sleep), ("exit", AfterTask::Exit)],
        )
    });
    let tools = o
        .opt(cx, "tools", |cx, f| Some(f.list_of(cx, artifact)))
        .unwrap_or_default();
    let skills = o
        .opt(cx, "skills", |cx, f| Some(f.list_of(cx, artifact)))
        .unwrap_or_default();

    // Rules across sections.
    if control
        .agent_settings
        .iter()
        .any(|s| s == "inference.driver")
        && !o.has("inference")
    {
        cx.err(
            o.key_pos("control"),
            "control.agent_settings",
            "`inference.driver` needs an `inference` section to switch between",
        );
    }
    if transport == Transport::Process && capabilities.install.is_some() {
        cx.err(
            o.key_pos("capabilities"),
            "capabilities.install",
            "`capabilities.install` needs `transport: http` (under `process` the harness owns the tool list)",
        );
    }
    o.finish();

    Some(Manifest {
        name: name?,
        description,
        transport,
        prompt,
        workdir,
        inference,
        capabilities,
        exports,
        control,
        lifecycle,
        task_acceptance,
        after_task,
        tools,
        skills,
    })
}

/// `prompt`.
fn prompt(cx: &mut Cx, f: Field) -> Option<Prompt> {
    let p = f.obj(cx, keys::PROMPT)?;
    let system = p.opt_str(cx, "system");
    let system_file = p.opt(cx, "system_file", |cx, f| f.rel_path(cx));
    if p.has("system") && p.has("system_file") {
        let second = p.key_pos("system").max(p.key_pos("system_file"));
        cx.err(
            second,
            f.path,
            "give either `system` or `system_file`, not both",
        );
    }
    p.finish();
    Some(Prompt {
        system,
        system_file,
    })
}

/// `inference`.
fn inference(cx: &mut Cx, f: Field) -> Option<Inference> {
    let i = f.obj(cx, keys::INFERENCE)?;
    let choices = i.req(cx, "choices", |cx, f| {
        let entries = f.entries(cx)?;
        if entries.is_empty() {
            cx.err(f.node.pos, f.path, "declare at least one choice");
        }
        let mut out: Vec<(String, DriverChoice)> = Vec::new();
        for e in entries {
            let path = join(f.path, &e.key);
            let choice_field = Field {
                node: &e.value,
                path: &path,
            };
            if let Some(c) = choice(cx, choice_field) {
                if !out.iter().any(|(n, _)| *n == e.key) {
                    out.push((e.key.clone(), c));
                }
            }
        }
        Some(out)
    });
    let driver = i.req(cx, "driver", |cx, f| {
        let s = f.str(cx)?;
        let Some(choice_entries) = i.entry("choices").and_then(|e| match &e.value.value {
            Value::Map(m) => Some(m),
            _ => None,
        }) else {
            return Some(s); // `choices` is missing or wrong: already reported
        };
        let names: Vec<&str> = choice_entries.iter().map(|e| e.key.as_str()).collect();
        if names.contains(&s.as_str()) {
            Some(s)
        } else {
            cx.err(
                f.node.pos,
                f.path,
                format!(
                    "`{s}` is not a key of `inference.choices`{}",
                    suggest::hint(&s, &names)
                ),
            );
            None
        }
    });
    let max_turns = i.opt(cx, "max_turns", |cx, f| {
        let v = f.u32(cx)?;
        if v == 0 {
            cx.err(
                f.node.pos,
                f.path,
                "must be at least 1; leave the key out for no cap",
            );
            return None;
        }
        Some(v)
    });
    let max_session_tokens =
        i.opt_positive(cx, "max_session_tokens", "leave the key out for no ceiling");
    let compaction_threshold = i
        .opt(cx, "compaction", |cx, f| {
            let c = f.obj(cx, keys::COMPACTION)?;
            let t = c.opt(cx, "threshold", |cx, f| {
                let t = f.f64(cx)?;
                if t > 0.0 && t <= 1.0 {
                    Some(t)
                } else {
                    cx.err(
                        f.node.pos,
                        f.path,
                        format!("must be more than 0 and at most 1, found `{t}`"),
                    );
                    None
                }
            });
            c.finish();
            t
        })
        .unwrap_or(DEFAULT_COMPACTION_THRESHOLD);
    i.finish();
    Some(Inference {
        driver: driver?,
        choices: choices?,
        max_turns,
        max_session_tokens,
        compaction_threshold,
    })
}

/// One entry of `inference.choices`.
fn choice(cx: &mut Cx, f: Field) -> Option<DriverChoice> {
    let c = f.obj(cx, keys::CHOICE)?;
    let driver = c.req(cx, "driver", |cx, f| {
        f.one_of(
            cx,
            &[
                ("openai", DriverKind::Openai),
                ("anthropic", DriverKind::Anthropic),
                ("script", DriverKind::Script),
            ],
        )
    });
    let model = c.opt_str(cx, "model");
    let base_url = c.opt(cx, "base_url", |cx, f| {
        let s = f.str(cx)?;
        if s.starts_with("http://") || s.starts_with("https://") {
            Some(s)
        } else {
            cx.err(
                f.node.pos,
                f.path,
                format!("`{s}` is not an `http://` or `https://` URL"),
            );
            None
        }
    });
    let credential = c.opt(cx, "credential", |cx, f| credential(cx, f));
    let script = c.opt(cx, "script", |cx, f| f.rel_path(cx));
    match driver {
        Some(DriverKind::Script) if !c.has("script") => {
            c.missing(cx, "script", " (the replies file of the `script` driver)");
        }
        Some(kind @ (DriverKind::Openai | DriverKind::Anthropic)) => {
            if c.has("script") {
                cx.err(
                    c.key_pos("script"),
                    f.path,
                    "`script` is only for `driver: script`",
                );
            }
            if !c.has("model") {
                let name = if kind == DriverKind::Openai {
                    "openai"
                } else {
                    "anthropic"
                };
                c.missing(
                    cx,
                    "model",
                    &format!(" (the `{name}` driver needs a model)"),
                );
            }
        }
        Some(DriverKind::Script) | None => {}
    }
    let context_window = c.opt_positive(cx, "context_window", "leave the key out if unknown");
    let max_output_tokens = c.opt_positive(cx, "max_output_tokens", "leave the key out for none");
    let max_input_tokens = c.opt_positive(cx, "max_input_tokens", "leave the key out for none");
    let temperature = c.opt(cx, "temperature", |cx, f| {
        let t = f.f64(cx)?;
        if t.is_finite() && t >= 0.0 {
            Some(t)
        } else {
            cx.err(
                f.node.pos,
                f.path,
                format!("must be a number of at least 0, found `{t}`"),
            );
            None
        }
    });
    let request_timeout_secs = c
        .opt_positive(
            cx,
            "request_timeout_secs",
            "leave the key out for the default of 300 seconds",
        )
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT_SECS);
    let max_retries = c.opt_u32(cx, "max_retries").unwrap_or(DEFAULT_MAX_RETRIES);
    c.finish();
    Some(DriverChoice {
        driver: driver?,
        model,
        base_url,
        credential,
        script,
        context_window,
        max_output_tokens,
        max_input_tokens,
        temperature,
        request_timeout_secs,
        max_retries,
    })
}

/// `credential`: `{env: VAR}` or `{file: PATH}`.
fn credential(cx: &mut Cx, f: Field) -> Option<Credential> {
    let c = f.obj(cx, keys::CREDENTIAL)?;
    let env = c.opt(cx, "env", |cx, f| {
        let s = f.str(cx)?;
        let mut chars = s.chars();
        let ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ok {
            Some(s)
        } else {
            cx.err(
                f.node.pos,
                f.path,
                format!("`{s}` is not an environment variable name"),
            );
            None
        }
    });
    let file = c.opt(cx, "file", |cx, f| {
        let s = f.str(cx)?;
        if s.is_empty() {
            cx.err(f.node.pos, f.path, "must not be empty");
            return None;
        }
        Some(PathBuf::from(s))
    });
    let out = match (c.has("env"), c.has("file")) {
        (true, true) => {
            let second = c.key_pos("env").max(c.key_pos("file"));
            cx.err(second, f.path, "give either `env` or `file`, not both");
            None
        }
        (false, false) => {
            // Unknown keys were reported with a suggestion; an empty map was not.
            if c.entries.is_empty() {
                cx.err(f.node.pos, f.path, "give `env: VAR` or `file: PATH`");
            }
            None
        }
        (true, false) => env.map(Credential::Env),
        (false, true) => file.map(Credential::File),
    };
    c.finish();
    out
}

/// `capabilities`.
fn capabilities(cx: &mut Cx, f: Field) -> Option<Capabilities> {
    let c = f.obj(cx, keys::CAPABILITIES)?;
    let allow_list = |cx: &mut Cx,
                      f: Field,
                      item: &dyn Fn(&mut Cx, Field) -> Option<String>|
     -> Option<Vec<String>> {
        let a = f.obj(cx, keys::ALLOW)?;
        let v = a.req(cx, "allow", |cx, f| Some(f.list_of(cx, item)));
        a.finish();
        v
    };
    let shell_allow = c
        .opt(cx, "shell", |cx, f| {
            allow_list(cx, f, &|cx, item| {
                let s = item.word(cx, "a binary name")?;
                if s.contains('/') {
                    cx.err(
                        item.node.pos,
                        item.path,
                        format!("`{s}` must be a bare binary name, without `/`"),
                    );
                    return None;
                }
                Some(s)
            })
        })
        .unwrap_or_default();
    let peer_fetch = c
        .opt(cx, "peer_fetch", |cx, f| match &f.node.value {
            Value::Map(_) => {
                let m = f.obj(cx, keys::PEER_FETCH)?;
                m.finish();
                Some(true)
            }
            Value::Scalar(s) if matches!(s.kind(), Kind::Bool(_)) => f.bool(cx),
            _ => {
                f.mismatch(cx, "`true`, `false` or a mapping");
                None
            }
        })
        .unwrap_or(false);
    let spawn_allow = c
        .opt(cx, "spawn", |cx, f| {
            allow_list(cx, f, &|cx, item| item.word(cx, "a sub-capsule"))
        })
        .unwrap_or_default();
    let plan_submit = c
        .opt(cx, "plan", |cx, f| {
            let p = f.obj(cx, keys::PLAN)?;
            let v = p.req(cx, "submit", |cx, f| f.bool(cx));
            p.finish();
            v
        })
        .unwrap_or(false);
    let install = c.opt(cx, "install", |cx, f| {
        let i = f.obj(cx, keys::INSTALL)?;
        let pattern = |cx: &mut Cx, item: Field| item.word(cx, "a name pattern");
        let skill = i
            .opt(cx, "skill", |cx, f| Some(f.list_of(cx, pattern)))
            .unwrap_or_default();
        let tool = i
            .opt(cx, "tool", |cx, f| Some(f.list_of(cx, pattern)))
            .unwrap_or_default();
        let from = i
            .opt(cx, "from", |cx, f| {
                let v = f.list_of(cx, |cx, item| {
                    let s = item.str(cx)?;
                    if keys::INSTALL_FROM.contains(&s.as_str()) {
                        Some(s)
                    } else {
                        cx.err(
                            item.node.pos,
                            item.path,
                            format!(
                                "unknown value `{s}`{}",
                                suggest::hint(&s, keys::INSTALL_FROM)
                            ),
                        );
                        None
                    }
                });
                if matches!(&f.node.value, Value::Seq(s) if s.is_empty()) {
                    cx.err(
                        f.node.pos,
                        f.path,
                        "name at least one of `stores`, `sources` (or leave the key out for `[stores]`)",
                    );
                }
                Some(v)
            })
            .unwrap_or_else(|| vec!["stores".to_string()]);
        i.finish();
        Some(Install { skill, tool, from })
    });
    let network_allow = c
        .opt(cx, "network", |cx, f| {
            allow_list(cx, f, &|cx, item| {
                let s = item.word(cx, "a host")?;
                if s.contains('/') {
                    cx.err(
                        item.node.pos,
                        item.path,
                        format!("`{s}` must be a host name, not a URL"),
                    );
                    return None;
                }
                Some(s)
            })
        })
        .unwrap_or_default();
    c.finish();
    Some(Capabilities {
        shell_allow,
        peer_fetch,
        spawn_allow,
        plan_submit,
        install,
        network_allow,
    })
}

/// `lifecycle`.
fn lifecycle(cx: &mut Cx, f: Field) -> Option<Lifecycle> {
    let l = f.obj(cx, keys::LIFECYCLE)?;
    let shell_grace_secs = l.opt_positive(
        cx,
        "shell_grace_secs",
        "leave the key out to never move a command to the background",
    );
    let deadline_notice_secs = l.opt_secs(cx, "deadline_notice_secs");
    let delegation_deadline_secs = l.opt_positive(
        cx,
        "delegation_deadline_secs",
        "leave the key out for the default of 600 seconds",
    );
    let keep_working = l.opt(cx, "keep_working", |cx, f| {
        let k = f.obj(cx, keys::KEEP_WORKING)?;
        let limit = k.req(cx, "limit", |cx, f| f.u32(cx));
        let message = k.req(cx, "message", |cx, f| {
            let s = f.str(cx)?;
            if s.trim().is_empty() {
                cx.err(f.node.pos, f.path, "must not be empty");
                return None;
            }
            Some(s)
        });
        k.finish();
        Some(KeepWorking {
            limit: limit?,
            message: message?,
        })
    });
    let done_check = l.opt(cx, "done_check", |cx, f| {
        let d = f.obj(cx, keys::DONE_CHECK)?;
        let command = d.req(cx, "command", |cx, f| {
            if let Value::Scalar(_) = f.node.value {
                cx.err(
                    f.node.pos,
                    f.path,
                    format!(
                        "expected a list of words (argv), found {}; write e.g. `command: [cargo, test]`",
                        describe(f.node)
                    ),
                );
                return None;
            }
            let argv: Vec<String> = f
                .list(cx)?
                .into_iter()
                .filter_map(|(node, path)| Field { node, path: &path }.str(cx))
                .collect();
            if matches!(&f.node.value, Value::Seq(s) if s.is_empty()) {
                cx.err(f.node.pos, f.path, "must name a command to run");
                return None;
            }
            Some(argv)
        });
        let limit = d.req(cx, "limit", |cx, f| f.u32(cx));
        d.finish();
        Some(DoneCheck {
            command: command?,
            limit: limit?,
        })
    });
    let max_task_reopens = l.opt_u32(cx, "max_task_reopens");
    l.finish();
    Some(Lifecycle {
        shell_grace_secs,
        deadline_notice_secs,
        delegation_deadline_secs,
        keep_working,
        done_check,
        max_task_reopens,
    })
}

/// One `tools` or `skills` entry, `scope/name[@version]`.
fn artifact(cx: &mut Cx, f: Field) -> Option<ArtifactRef> {
    let s = f.str(cx)?;
    let (full, version) = match s.split_once('@') {
        Some((full, v)) => (full, Some(v)),
        None => (s.as_str(), None),
    };
    let version_ok = version.is_none_or(|v| {
        !v.is_empty()
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
    });
    match full.split_once('/') {
        Some((scope, name)) if is_name(scope) && is_name(name) && version_ok => Some(ArtifactRef {
            scope: scope.to_string(),
            name: name.to_string(),
            version: version.map(str::to_string),
        }),
        _ => {
            cx.err(
                f.node.pos,
                f.path,
                format!(
                    "`{s}` is not `scope/name[@version]` (scope and name are `[a-z0-9][a-z0-9._-]*`)"
                ),
            );
            None
        }
    }
}
