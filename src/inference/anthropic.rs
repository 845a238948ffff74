//! The `anthropic` driver: Messages with tool use.
