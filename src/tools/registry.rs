//! The registry: which [`Tool`] answers each kind of inventory entry. Dispatch looks a
//! tool up here; a new tool is one file and one row.

use super::context::Tool;
use super::{
    background, call_member, end_without_answer, session_status, shell, submit_plan, ToolKind,
};
use super::{fetch_peer_file, share_file};

impl ToolKind {
    /// The tool that answers entries of this kind.
    pub fn tool(&self) -> &'static dyn Tool {
        match self {
            ToolKind::Shell { .. } => &shell::Shell,
            ToolKind::SessionStatus => &session_status::SessionStatus,
            ToolKind::BackgroundCommand => &background::BackgroundCommand,
            ToolKind::CallMember => &call_member::CallMember,
            ToolKind::EndWithoutAnswer => &end_without_answer::EndWithoutAnswer,
            ToolKind::ShareFile => &share_file::ShareFile,
            ToolKind::FetchPeerFile => &fetch_peer_file::FetchPeerFile,
            ToolKind::SubmitPlan => &submit_plan::SubmitPlan,
        }
    }
}
