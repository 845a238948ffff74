//! The capsule manifest, `murmur.yaml`: its types and its parser.
//!
//! [`load`] and [`parse_str`] turn YAML into a validated [`Manifest`] or a
//! [`ManifestError`] listing every problem with its `file:line:column`. The key
//! reference is in [`types`].

mod flow;
pub mod keys;
pub mod parse;
pub mod replies;
pub mod roster;
mod sections;
mod suggest;
pub mod types;
mod walk;
mod yaml;

pub use parse::{load, parse_str, Diagnostic, ManifestError};
pub use types::*;
