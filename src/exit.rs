//! Exit statuses of tasks and sessions, and the process exit codes of `mur`.
//!
//! Decided in one place; repeated in the man page's EXIT STATUS section.

use std::fmt;

/// `0`: the task completed with an answer.
pub const EXIT_COMPLETED: u8 = 0;
/// `1`: the task failed or ended without an answer, or `mur` failed at run time (a
/// file it must write cannot be written: a read-only or full disk).
pub const EXIT_FAILED: u8 = 1;
/// `2`: usage error, or a manifest/roster that does not validate or stage.
pub const EXIT_USAGE: u8 = 2;
/// `3`: the deadline passed, or a ceiling (`max_turns`, `max_session_tokens`) was hit.
pub const EXIT_LIMIT: u8 = 3;
/// `130`: interrupted by SIGINT, SIGTERM, SIGHUP or SIGQUIT.
pub const EXIT_INTERRUPTED: u8 = 130;

/// `task_end.exit_status` / `session_end.exit_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// The model answered.
    Completed,
    /// The task failed (driver error, bad script, …).
    Failed,
    /// The task ended with end-without-answer.
    NoAnswer,
    /// The task was cancelled, or `mur` was interrupted.
    Canceled,
    /// The session's deadline passed.
    Deadline,
    /// `inference.max_turns` ran out.
    MaxTurns,
    /// `inference.max_session_tokens` was reached.
    SpendCeiling,
}

impl ExitStatus {
    /// The record spelling: `completed`, `failed`, `no_answer`, `canceled`, `deadline`,
    /// `max_turns`, `spend_ceiling`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitStatus::Completed => "completed",
            ExitStatus::Failed => "failed",
            ExitStatus::NoAnswer => "no_answer",
            ExitStatus::Canceled => "canceled",
            ExitStatus::Deadline => "deadline",
            ExitStatus::MaxTurns => "max_turns",
            ExitStatus::SpendCeiling => "spend_ceiling",
        }
    }

    /// The process exit code of `mur run` for a task that ended so.
    /// `interrupted` is true when `mur` itself got SIGINT, SIGTERM, SIGHUP or SIGQUIT.
    pub fn exit_code(self, interrupted: bool) -> u8 {
        if interrupted {
            return EXIT_INTERRUPTED;
        }
        match self {
            ExitStatus::Completed => EXIT_COMPLETED,
            ExitStatus::Failed | ExitStatus::NoAnswer | ExitStatus::Canceled => EXIT_FAILED,
            ExitStatus::Deadline | ExitStatus::MaxTurns | ExitStatus::SpendCeiling => EXIT_LIMIT,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
