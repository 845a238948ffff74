//! The walker's helpers: typed reads of a spanned YAML node that record a diagnostic
//! instead of failing, so one pass finds every problem.
//!
//! A [`Field`] is a node and its key path; an [`Obj`] is a mapping read key by key from
//! its known-key list. Every reader returns `None` after recording why.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::path::{Component, PathBuf};

use super::parse::Diagnostic;
use super::suggest;
use super::yaml::{Entry, Kind, Node, Pos, Value, COMPLEX_KEY};

/// The walk's state: the file name and what has been found wrong so far.
pub(super) struct Cx<'f> {
    pub(super) file: &'f str,
    pub(super) diags: Vec<Diagnostic>,
}

impl Cx<'_> {
    /// Records one diagnostic.
    pub(super) fn err(&mut self, pos: Pos, path: &str, message: impl Into<String>) {
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
pub(super) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// How a node reads in "found ..." messages: `a mapping`, `integer `5``, ...
pub(super) fn describe(node: &Node) -> String {
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
pub(super) struct Field<'n, 'p> {
    pub(super) node: &'n Node,
    pub(super) path: &'p str,
}

impl<'n> Field<'n, '_> {
    /// Reports that the value is not what `expected` says.
    pub(super) fn mismatch(&self, cx: &mut Cx, expected: &str) {
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
    pub(super) fn kind(&self) -> Option<(Kind, &'n str)> {
        match &self.node.value {
            Value::Scalar(s) => Some((s.kind(), s.text.as_str())),
            _ => None,
        }
    }

    /// A string (quoted or plain text that is not a number, boolean or null).
    pub(super) fn str(&self, cx: &mut Cx) -> Option<String> {
        match self.kind() {
            Some((Kind::Str, t)) => Some(t.to_string()),
            _ => {
                self.mismatch(cx, "a string");
                None
            }
        }
    }

    /// A non-empty string with no whitespace (a name, a host, an argv word).
    pub(super) fn word(&self, cx: &mut Cx, what: &str) -> Option<String> {
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
    pub(super) fn bool(&self, cx: &mut Cx) -> Option<bool> {
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
    pub(super) fn uint(&self, cx: &mut Cx, max: u64, unit: &str) -> Option<u64> {
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
    pub(super) fn u64(&self, cx: &mut Cx) -> Option<u64> {
        self.uint(cx, u64::MAX, "a whole number")
    }

    /// A `u32`.
    pub(super) fn u32(&self, cx: &mut Cx) -> Option<u32> {
        self.uint(cx, u32::MAX.into(), "a whole number")
            .and_then(|v| u32::try_from(v).ok())
    }

    /// An integer number of seconds. A duration string such as `"10s"` is refused with the
    /// integer to write instead.
    pub(super) fn secs(&self, cx: &mut Cx) -> Option<u64> {
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
    pub(super) fn f64(&self, cx: &mut Cx) -> Option<f64> {
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
    pub(super) fn one_of<T: Copy>(&self, cx: &mut Cx, values: &[(&str, T)]) -> Option<T> {
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
    pub(super) fn rel_path(&self, cx: &mut Cx) -> Option<PathBuf> {
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
    pub(super) fn list(&self, cx: &mut Cx) -> Option<Vec<(&'n Node, String)>> {
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
    /// (its diagnostic is recorded). Linear in the list's length (a set of the items
    /// seen), so a list near the value limit is checked as fast as it is read.
    pub(super) fn list_of<T: Eq + Hash + Clone>(
        &self,
        cx: &mut Cx,
        mut item: impl FnMut(&mut Cx, Field<'n, '_>) -> Option<T>,
    ) -> Vec<T> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for (node, path) in self.list(cx).unwrap_or_default() {
            let Some(v) = item(cx, Field { node, path: &path }) else {
                continue;
            };
            if seen.insert(v.clone()) {
                out.push(v);
            } else {
                cx.err(node.pos, &path, "duplicate entry");
            }
        }
        out
    }

    /// A mapping with the keys `known`; unknown and duplicate keys are reported now.
    pub(super) fn obj(&self, cx: &mut Cx, known: &'static [&'static str]) -> Option<Obj<'n>> {
        let entries = self.entries(cx)?;
        for e in entries {
            if !known.contains(&e.key.as_str()) && e.key != COMPLEX_KEY {
                cx.err(
                    e.key_pos,
                    self.path,
                    format!(
                        "unknown key `{}`{}",
                        e.key,
                        suggest::key_hint(&e.key, known)
                    ),
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
    /// Linear in the number of keys (a map from each key to its first entry).
    pub(super) fn entries(&self, cx: &mut Cx) -> Option<&'n [Entry]> {
        let Value::Map(entries) = &self.node.value else {
            self.mismatch(cx, "a mapping");
            return None;
        };
        let mut firsts: HashMap<&str, &Entry> = HashMap::with_capacity(entries.len());
        for e in entries {
            let first = *firsts.entry(e.key.as_str()).or_insert(e);
            if !std::ptr::eq(first, e) {
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
pub(super) struct Obj<'n> {
    pub(super) pos: Pos,
    pub(super) path: String,
    pub(super) entries: &'n [Entry],
    known: &'static [&'static str],
    read: RefCell<Vec<&'static str>>,
}

impl<'n> Obj<'n> {
    /// The entry for `key` (its first occurrence), if present.
    pub(super) fn entry(&self, key: &'static str) -> Option<&'n Entry> {
        debug_assert!(
            self.known.contains(&key),
            "`{key}` is read at `{}` but not in its known-key list",
            self.path
        );
        self.read.borrow_mut().push(key);
        self.entries.iter().find(|e| e.key == key)
    }

    /// Runs `f` on the value of `key` if present.
    pub(super) fn opt<T>(
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
    pub(super) fn req<T>(
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
    pub(super) fn missing(&self, cx: &mut Cx, key: &str, why: &str) {
        cx.err(
            self.pos,
            &self.path,
            format!("missing required key `{key}`{why}"),
        );
    }

    /// Whether `key` is present.
    pub(super) fn has(&self, key: &'static str) -> bool {
        self.entry(key).is_some()
    }

    /// Where the key `key` is written, for cross-key errors.
    pub(super) fn key_pos(&self, key: &'static str) -> Pos {
        self.entry(key).map_or(self.pos, |e| e.key_pos)
    }

    /// An optional string.
    pub(super) fn opt_str(&self, cx: &mut Cx, key: &'static str) -> Option<String> {
        self.opt(cx, key, |cx, f| f.str(cx))
    }

    /// An optional `u32`.
    pub(super) fn opt_u32(&self, cx: &mut Cx, key: &'static str) -> Option<u32> {
        self.opt(cx, key, |cx, f| f.u32(cx))
    }

    /// An optional number of seconds.
    pub(super) fn opt_secs(&self, cx: &mut Cx, key: &'static str) -> Option<u64> {
        self.opt(cx, key, |cx, f| f.secs(cx))
    }

    /// An optional positive `u64`, or number of seconds for a `_secs` key; 0 is refused
    /// with `zero` saying what to write instead.
    pub(super) fn opt_positive(&self, cx: &mut Cx, key: &'static str, zero: &str) -> Option<u64> {
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
    pub(super) fn finish(self) {
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
