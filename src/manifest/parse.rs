//! Parser placeholder (the manifest helper fills this in).
use std::path::Path;

use super::types::Manifest;

/// One validation error.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The key path, e.g. `inference.choices.main.driver`.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Every error of a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestError {
    /// The diagnostics, in file order.
    pub diagnostics: Vec<Diagnostic>,
}

/// Reads and validates `path`.
pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|e| ManifestError {
        diagnostics: vec![Diagnostic {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            path: String::new(),
            message: e.to_string(),
        }],
    })?;
    parse_str(&text, &path.display().to_string())
}

/// Validates manifest text; `file` names it in diagnostics.
pub fn parse_str(_text: &str, _file: &str) -> Result<Manifest, ManifestError> {
    Err(ManifestError {
        diagnostics: vec![],
    })
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: {}: {}", self.file, self.line, self.column, self.path, self.message)
    }
}
