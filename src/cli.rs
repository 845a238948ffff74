//! clap
