//! `mur`: parse the command line and dispatch.
//!
//! Stub: only `mur generate` is wired here; the other subcommands are dispatched by the
//! real `main` (merged by the lead).

use std::process::ExitCode;

use clap::Parser;
use mur::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Generate(args) => mur::generate::run(args),
        _ => {
            eprintln!("mur: this subcommand is not implemented in this build");
            return ExitCode::from(mur::exit::EXIT_USAGE);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mur: {e}");
            ExitCode::from(mur::exit::EXIT_FAILED)
        }
    }
}
