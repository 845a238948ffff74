//! The capsule manifest, `murmur.yaml`: its types and its parser.

pub mod parse;
pub mod types;

pub use parse::{load, parse_str, Diagnostic, ManifestError};
pub use types::*;
