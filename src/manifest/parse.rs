//! Reading and validating `murmur.yaml`.
//!
//! The text is parsed into a spanned tree (`yaml.rs`), then walked once against the
//! key lists of [`super::keys`]. Every problem becomes a [`Diagnostic`] and the walk goes
//! on, so one run reports all of them, in file order. Any diagnostic at all means no
//! [`Manifest`]: a misspelt grant can never widen what a capsule is allowed.

use std::fmt;
use std::path::Path;

use super::sections;
use super::types::Manifest;
use super::walk::Cx;
use super::yaml::{self, Node, Pos};

pub use super::sections::{
    DEFAULT_COMPACTION_THRESHOLD, DEFAULT_MAX_RETRIES, DEFAULT_MAX_RETRY_AFTER_SECS,
    DEFAULT_REQUEST_TIMEOUT_SECS,
};

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
    let (text, file) = read(path, "manifest")?;
    parse_str(&text, &file)
}

/// The text of the file at `path` and its name for diagnostics (`path.display()`).
///
/// # Errors
///
/// A [`ManifestError`] with one position-less diagnostic, `cannot read the {what}: …`,
/// when the file cannot be read.
pub(super) fn read(path: &Path, what: &str) -> Result<(String, String), ManifestError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ManifestError {
        diagnostics: vec![Diagnostic {
            file: file.clone(),
            line: 0,
            column: 0,
            path: String::new(),
            message: format!("cannot read the {what}: {e}"),
        }],
    })?;
    Ok((text, file))
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
    let (manifest, diagnostics) = walk_yaml(
        text,
        file,
        "empty manifest: missing required key `name`",
        sections::manifest,
    );
    let diagnostics = not_provided_first(diagnostics);
    match manifest {
        Some(m) if diagnostics.is_empty() => Ok(m),
        _ => {
            debug_assert!(!diagnostics.is_empty(), "a failed walk left no diagnostic");
            Err(ManifestError { diagnostics })
        }
    }
}

/// Keys the parser knows that this build does not provide: staging refuses a capsule
/// that sets one (see `staging::inventory_for`), and a problem inside one's value is
/// reported as that refusal, never as the problem (see `not_provided_first`).
pub const NOT_PROVIDED: &[&str] = &[
    "lifecycle.done_check",
    "lifecycle.keep_working",
    "lifecycle.max_task_reopens",
    "inference.compaction",
];

/// The message for a key of [`NOT_PROVIDED`] whose value has problems.
pub const NOT_PROVIDED_MESSAGE: &str =
    "not provided by this build of mur (it would be silently ignored); remove it to run this capsule";

/// Problems inside a key this build does not provide are beside the point: fixing
/// them would only lead to staging's refusal. They become one diagnostic saying so, at
/// the first of them.
fn not_provided_first(mut diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    for key in NOT_PROVIDED {
        let inside = |d: &Diagnostic| {
            d.path == *key
                || d.path
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        };
        let Some(first) = diagnostics.iter().find(|d| inside(d)).cloned() else {
            continue;
        };
        diagnostics.retain(|d| !inside(d));
        diagnostics.push(Diagnostic {
            path: key.to_string(),
            message: NOT_PROVIDED_MESSAGE.into(),
            ..first
        });
    }
    diagnostics.sort_by_key(|d| (d.line, d.column));
    diagnostics
}

/// Parses `text` (named `file` in diagnostics) into a spanned tree and walks its root
/// with `walk`. Returns what the walk made (`None` after a syntax error, for an empty
/// stream, or when the walk made nothing) and every diagnostic, sorted by position and
/// without repeats: the syntax errors (which stop the walk), the tree's own errors,
/// `empty` when there is no document, and the walk's.
pub(super) fn walk_yaml<T>(
    text: &str,
    file: &str,
    empty: &str,
    walk: impl FnOnce(&mut Cx, &Node) -> Option<T>,
) -> (Option<T>, Vec<Diagnostic>) {
    let mut cx = Cx {
        file,
        diags: Vec::new(),
    };
    let made = match yaml::parse(text) {
        Err(e) => {
            syntax_diagnostics(&mut cx, text, &e);
            None
        }
        Ok((root, tree_errors)) => {
            let refused = !tree_errors.is_empty();
            for e in tree_errors {
                cx.err(e.pos, &e.path, e.message);
            }
            match root {
                // Refused part way (over the value limit): that error says it all.
                None if refused => None,
                None => {
                    cx.err(Pos { line: 1, column: 1 }, "", empty);
                    None
                }
                Some(root) => walk(&mut cx, &root),
            }
        }
    };
    let mut diagnostics = cx.diags;
    diagnostics.sort_by_key(|d| (d.line, d.column));
    diagnostics.dedup();
    (made, diagnostics)
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
    if tab_lines.contains(&e.pos.line) {
        return;
    }
    // An unclosed `[` or `{` is reported where the scanner gave up, often the end of
    // the file: point at where it opened instead.
    match super::flow::unclosed_before(text, e.pos) {
        Some((open, ch)) => {
            let close = if ch == '[' { ']' } else { '}' };
            cx.err(
                open,
                "",
                format!(
                    "invalid YAML: this `{ch}` is never closed; close it with `{close}` (the parser gave up at {}:{}: {})",
                    e.pos.line, e.pos.column, e.message
                ),
            );
        }
        None => cx.err(e.pos, "", format!("invalid YAML: {}", e.message)),
    }
}
