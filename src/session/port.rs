//! The session as a tool sees it: [`crate::tools::Session`] for the agent loop.

use serde_json::Value;

use super::{status, Loop};
use crate::tools::{self, Exec, Held, Placed};

impl tools::Session for Loop<'_> {
    fn exec(&self) -> Exec<'_> {
        Exec {
            workdir: &self.spec.staged.workdir,
            logs_dir: &self.logs_dir,
            supervisor: &self.supervisor,
            deadline: self.deadline.as_ref().map(|d| d.instant),
            shutdown: &self.shutdown,
            grace: self
                .spec
                .manifest
                .lifecycle
                .shell_grace_secs
                .map(std::time::Duration::from_secs),
            shell_allow: &self.spec.manifest.capabilities.shell_allow,
        }
    }

    fn absent(&self, tool: &str) -> String {
        tools::absent_tool_message(tool, &self.spec.staged.inventory)
    }

    fn task_running(&self) -> bool {
        self.task_start.is_some()
    }

    fn caller(&self) -> Option<String> {
        self.origin.caller().map(str::to_string)
    }

    fn callees(&self) -> Option<Vec<String>> {
        self.spec
            .member
            .as_ref()
            .filter(|r| !r.callees.is_empty())
            .map(|r| r.callees.iter().map(|(n, _)| n.clone()).collect())
    }

    fn held_call(&mut self, member: Option<&str>) -> Option<Held> {
        self.calls.drain();
        self.calls
            .slots
            .iter()
            .find(|s| member.is_none_or(|m| s.member == m))
            .map(|s| Held {
                call_id: s.call_id.clone(),
                member: s.member.clone(),
                arrived: s.arrived.is_some(),
            })
    }

    fn ending(&self) -> Option<&str> {
        self.calls.ending.as_deref()
    }

    fn end_without_answer(&mut self, reason: String) {
        self.calls.ending = Some(reason);
    }

    fn place_call(&mut self, member: &str, task: String) -> Placed {
        self.place_member_call(member, task)
    }

    fn peer_files(&self) -> Option<&tools::peer_file::PeerFiles> {
        self.spec.peer_files.as_ref()
    }

    fn has_tool(&self, tool: &str) -> bool {
        self.spec.staged.inventory.iter().any(|t| t.name == tool)
    }

    fn run_plan_step(
        &mut self,
        plan: &str,
        step: u32,
        tool: &str,
        input: &Value,
    ) -> (String, tools::ToolResult) {
        self.plan_step(plan, step, tool, input)
    }

    fn measure_status(&self) -> Value {
        let inf = self.spec.manifest.inference.as_ref();
        status::measure(&status::Inputs {
            manifest: &self.spec.manifest,
            choice: inf.and_then(|i| i.choice(&self.spec.choice)),
            session_start: self.session_start,
            task_start: self.task_start,
            deadline: self.deadline.as_ref(),
            counters: &self.counters,
        })
    }
}
