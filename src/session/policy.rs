//! The decision point: the one function every tool call passes before it runs
//! (ARCHITECTURE.md, "The decision point"). It asks the capsule's `hooks.on_tool_call`
//! in declared order; the first deny wins, and a hook that fails in any way denies
//! (fail closed). A denied call runs nothing and is a tool error naming the hook and
//! its reason. One `policy_decision` record per call when any hook is declared, one
//! `hook_run` per hook run.

use std::time::Duration;

use serde_json::{json, Value};

use super::hooks::{self, Ended};
use super::Loop;
use crate::fields;
use crate::manifest::{Hook, DEFAULT_HOOK_TIMEOUT_SECS};

/// Who made a tool call. Every origin passes the same decision point; the hook is told
/// which one it is (`origin.kind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOrigin {
    /// The model, in a turn of the agent loop.
    Model,
    /// A step of a plan submitted with submit-plan.
    PlanStep {
        /// The plan's id.
        plan: String,
        /// The step's index, from 0.
        step: u32,
    },
    /// An external harness, through the loopback tool server (`transport: process`).
    Harness,
    /// A sub-capsule this session delegated a task to.
    SubCapsule {
        /// The sub-capsule's name.
        capsule: String,
        /// The delegation's id (`dlg_…`).
        delegation: String,
    },
}

impl CallOrigin {
    /// The `origin` object a hook and the `policy_decision` record get:
    /// `{"kind": "model"}`, `{"kind": "plan_step", "plan": …, "step": …}`,
    /// `{"kind": "harness"}`, `{"kind": "sub_capsule", "capsule": …, "delegation": …}`.
    pub fn to_json(&self) -> Value {
        match self {
            CallOrigin::Model => json!({"kind": "model"}),
            CallOrigin::PlanStep { plan, step } => {
                json!({"kind": "plan_step", "plan": plan, "step": step})
            }
            CallOrigin::Harness => json!({"kind": "harness"}),
            CallOrigin::SubCapsule {
                capsule,
                delegation,
            } => json!({"kind": "sub_capsule", "capsule": capsule, "delegation": delegation}),
        }
    }
}

/// What the decision point decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// The call may run.
    Allow,
    /// The call runs nothing; `message` is the tool error the caller is given.
    Deny {
        /// The tool error.
        message: String,
    },
}

/// A hook's name in records and messages: `on_tool_call[0]`.
pub(super) fn hook_name(event: &str, i: usize) -> String {
    format!("{event}[{i}]")
}

/// The program a hook runs, for messages: the last part of its first word.
pub(super) fn program(h: &Hook) -> String {
    let first = h.command.first().map(String::as_str).unwrap_or("");
    first.rsplit('/').next().unwrap_or(first).to_string()
}

/// The tool error of a denied call.
pub fn deny_message(hook: &str, program: &str, reason: &str) -> String {
    format!("denied by hook {hook} ({program}): {reason}; the call did not run")
}

impl Loop<'_> {
    /// The decision point. `tool`, `call_id` and `input` are the call as it would run.
    pub(super) fn decide(
        &mut self,
        origin: &CallOrigin,
        tool: &str,
        call_id: &str,
        input: &Value,
    ) -> Decision {
        let spec = self.spec;
        let list = &spec.manifest.hooks.on_tool_call;
        if list.is_empty() {
            if self.spec.manifest.hooks.any() {
                self.trace.record(
                    Some(&self.task_id),
                    "policy_decision",
                    fields! {"call_id" => call_id, "tool" => tool, "origin" => origin.to_json(), "decision" => "allow", "hooks_run" => 0},
                );
            }
            return Decision::Allow;
        }
        let stdin = json!({
            "event": "on_tool_call",
            "session": self.spec.staged.session_id,
            "task": self.task_id,
            "tool": tool,
            "call_id": call_id,
            "input": input,
            "origin": origin.to_json(),
        });
        let mut decision = Decision::Allow;
        let mut decided_by = None;
        let mut reason_given = None;
        let mut ran = 0;
        for (i, h) in list.iter().enumerate() {
            let name = hook_name("on_tool_call", i);
            let timeout = Duration::from_secs(h.timeout_secs.unwrap_or(DEFAULT_HOOK_TIMEOUT_SECS));
            let (run, answer) = self.ask_hook(
                &name,
                h,
                "on_tool_call",
                &stdin,
                timeout,
                true,
                Some(call_id),
            );
            ran += 1;
            let verdict = answer.and_then(|o| {
                let reason = match o.get("reason") {
                    Some(Value::String(r)) if !r.trim().is_empty() => Some(r.trim().to_string()),
                    _ => None,
                };
                match o.get("decision") {
                    Some(Value::String(d)) if d == "allow" => Ok((true, reason)),
                    Some(Value::String(d)) if d == "deny" => Ok((false, reason)),
                    Some(Value::String(d)) => Err(format!(
                        "it answered decision `{d}`; the decision must be \"allow\" or \"deny\""
                    )),
                    Some(other) => Err(format!(
                        "its decision is {}, not \"allow\" or \"deny\"",
                        crate::tools::json_type(other)
                    )),
                    None => Err("its answer has no `decision`; answer {\"decision\": \"allow\"} or {\"decision\": \"deny\", \"reason\": \"…\"}".into()),
                }
            });
            let (word, reason) = match &verdict {
                Ok((true, r)) => ("allow", r.clone()),
                Ok((false, r)) => (
                    "deny",
                    Some(r.clone().unwrap_or_else(|| "no reason given".into())),
                ),
                Err(f) => ("deny", Some(format!("the hook failed closed: {f}"))),
            };
            self.record_hook_run(
                &name,
                h,
                "on_tool_call",
                &run,
                word,
                reason.as_deref(),
                Some(call_id),
            );
            if word == "deny" {
                let reason = reason.unwrap_or_default();
                decision = Decision::Deny {
                    message: deny_message(&name, &program(h), &reason),
                };
                decided_by = Some(name);
                reason_given = Some(reason);
                break;
            }
        }
        self.trace.record(
            Some(&self.task_id),
            "policy_decision",
            fields! {
                "call_id" => call_id,
                "tool" => tool,
                "origin" => origin.to_json(),
                "decision" => if decision == Decision::Allow { "allow" } else { "deny" },
                "hook" => decided_by,
                "reason" => reason_given,
                "hooks_run" => ran,
            },
        );
        decision
    }

    /// Asks one hook: runs it with `stdin` and reads its one JSON object. A hook's
    /// run-inference is a two-step answer: a first answer
    /// `{"run_inference": {"prompt": "…", "system": "…"}}` makes the runtime do one
    /// inference call on the session's driver choice (it counts in `turns.used`, and
    /// is refused once `inference.max_turns` is used up), then run the hook again with
    /// the same stdin plus `"inference": {"text": …}` or `{"error": …}`; that second
    /// answer is final. The first run writes its own `hook_run` (decision
    /// `run_inference`); the caller records the run returned.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ask_hook(
        &mut self,
        name: &str,
        h: &Hook,
        event: &str,
        stdin: &Value,
        timeout: Duration,
        cancelable: bool,
        call_id: Option<&str>,
    ) -> (hooks::Run, Result<serde_json::Map<String, Value>, String>) {
        let run = self.run_hook(h, event, stdin.to_string().as_bytes(), timeout, cancelable);
        let answer = match run.failure(timeout) {
            Some(f) => Err(f),
            None => hooks::one_object(&run),
        };
        let request = match &answer {
            Ok(o) => match o.get("run_inference") {
                None => return (run, answer),
                Some(r) => r.clone(),
            },
            Err(_) => return (run, answer),
        };
        let prompt = match request.get("prompt") {
            Some(Value::String(p)) if !p.trim().is_empty() => p.clone(),
            _ => {
                return (
                    run,
                    Err("its `run_inference` needs a non-empty `prompt` string".into()),
                )
            }
        };
        let system = match request.get("system") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return (
                    run,
                    Err(format!(
                        "its `run_inference.system` is {}, not a string",
                        crate::tools::json_type(other)
                    )),
                )
            }
        };
        self.record_hook_run(name, h, event, &run, "run_inference", None, call_id);
        let inference = self.hook_inference(name, &prompt, system.as_deref());
        let mut again = stdin.clone();
        again["inference"] = inference;
        let run = self.run_hook(h, event, again.to_string().as_bytes(), timeout, cancelable);
        let answer = match run.failure(timeout) {
            Some(f) => Err(f),
            None => hooks::one_object(&run).and_then(|o| {
                if o.contains_key("run_inference") {
                    Err("it asked for a second inference call; a hook gets one per run".into())
                } else {
                    Ok(o)
                }
            }),
        };
        (run, answer)
    }

    /// One inference call for hook `name`: `{"text": …, "turn": N}`, or `{"error": …}`.
    fn hook_inference(&mut self, name: &str, prompt: &str, system: Option<&str>) -> Value {
        let spec = self.spec;
        let Some(inf) = spec.manifest.inference.as_ref() else {
            return json!({"error": "this capsule has no inference: block"});
        };
        let Some(choice) = inf.choice(&spec.choice) else {
            return json!({"error": format!("driver choice `{}` is not declared", spec.choice)});
        };
        if let Some(cap) = inf.max_turns {
            if self.counters.turns_used >= u64::from(cap) {
                return json!({"error": format!("inference.max_turns ({cap}) is used up; no inference call was made")});
            }
        }
        let driver = match self.driver(choice) {
            Ok(d) => d,
            Err(e) => return json!({"error": e}),
        };
        let turn = self.counters.turns_used + 1;
        let messages = [crate::inference::Message::User(prompt.to_string())];
        match self.infer(&driver, choice, &messages, &[], turn, Some((name, system))) {
            Ok(r) => json!({"text": r.text.unwrap_or_default(), "turn": turn}),
            Err(super::Stop::Failed(e)) | Err(super::Stop::Limit(_, e)) => json!({"error": e}),
            Err(_) => json!({"error": "the task was canceled during the inference call"}),
        }
    }

    /// Runs one hook with `stdin`; `cancelable`: the task's stop and the session's
    /// deadline end it early (an `on_task_end` hook runs to its own timeout).
    pub(super) fn run_hook(
        &self,
        h: &Hook,
        event: &str,
        stdin: &[u8],
        timeout: Duration,
        cancelable: bool,
    ) -> hooks::Run {
        let argv = hooks::resolve(&h.command, &self.spec.staged.capsule_dir);
        hooks::run(
            &self.hook_supervisor,
            hooks::Spec {
                argv: &argv,
                cwd: &self.spec.staged.workdir,
                logs_dir: &self.logs_dir,
                stdin: Some(stdin),
                env: vec![
                    ("MURMUR_TASK".into(), self.task_id.clone()),
                    ("MURMUR_HOOK_EVENT".into(), event.into()),
                ],
                timeout,
                stop: cancelable.then_some(&self.shutdown),
                deadline: self
                    .deadline
                    .as_ref()
                    .filter(|_| cancelable)
                    .map(|d| d.instant),
            },
        )
    }

    /// Writes one `hook_run` record.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_hook_run(
        &self,
        name: &str,
        h: &Hook,
        event: &str,
        run: &hooks::Run,
        decision: &str,
        reason: Option<&str>,
        call_id: Option<&str>,
    ) {
        self.trace.record(
            Some(&self.task_id),
            "hook_run",
            fields! {
                "hook" => name,
                "command" => h.command,
                "event" => event,
                "call_id" => call_id,
                "duration_ms" => run.duration.as_millis() as u64,
                "exit" => run.exit_code(),
                "timed_out" => matches!(run.ended, Ended::TimedOut),
                "decision" => decision,
                "reason" => reason,
                "work_id" => run.work_id,
                "log" => run.log.as_ref().map(|p| p.display().to_string()),
            },
        );
    }
}
