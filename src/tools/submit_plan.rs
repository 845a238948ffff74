//! submit-plan: runs one plan of steps against this session's own tools, one at a
//! time, in order, and returns every step's result (mur-tools(7), "submit-plan").
//!
//! The whole plan is checked before any step runs: a refused plan runs nothing and
//! writes no record. Each step then passes the decision point like any call, with
//! origin `plan_step` (the session's [`super::Session::run_plan_step`]), and writes
//! its own `tool_call` record marked with the plan; the plan writes one `plan` record.
//! A step's output is never fed into a later step's input: the model sees the results
//! and decides.

use serde_json::{json, Map, Value};

use super::{Status, ToolEntry, ToolKind, ToolResult};

/// The tool's name.
pub const NAME: &str = "submit-plan";

/// The most steps one plan may hold.
pub const MAX_STEPS: usize = 16;

/// The most of one step's output the plan's result shows, in bytes (16 KiB); the
/// step's own `tool_call` record holds all of it.
pub const STEP_OUTPUT_CAP: usize = 16 * 1024;

/// Tools a plan step may not name (the spec's "Not callable from a plan step", and
/// submit-plan itself): each changes the session or the task in a way the model must
/// see before it decides anything else.
pub const NOT_IN_PLAN: &[&str] = &[
    "switch-driver",
    "pull-artifact",
    "remove-artifact",
    "end-without-answer",
    "submit-plan",
];

/// What the model is told about the tool.
pub const DESCRIPTION: &str = "Runs a plan: an ordered list of calls to your own tools, one at a time, in order, and returns every step's result (status, summary, output) at once. Use it to batch calls whose inputs you already know; a step's output is not passed to a later step. on_failure \"stop\" (the default) skips the steps after one that fails, \"continue\" runs them all. Each step passes the same checks as a call of its own.";

/// The inventory entry. `tools` are the tool names a step may name (the inventory
/// less [`NOT_IN_PLAN`]), the schema's enum.
pub fn entry(tools: &[String]) -> ToolEntry {
    ToolEntry {
        name: NAME.into(),
        description: DESCRIPTION.into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_STEPS,
                    "items": {
                        "type": "object",
                        "properties": {
                            "tool": {"type": "string", "enum": tools},
                            "input": {"type": "object"}
                        },
                        "required": ["tool"],
                        "additionalProperties": false
                    }
                },
                "on_failure": {"type": "string", "enum": ["stop", "continue"]}
            },
            "required": ["steps"],
            "additionalProperties": false
        }),
        kind: ToolKind::SubmitPlan,
    }
}

/// The form of the input, for refusals.
const FORM: &str = "submit-plan takes {\"steps\": [{\"tool\": \"<tool>\", \"input\": {…}}, …], \"on_failure\": \"stop\" | \"continue\"}";

/// Refusal: the plan has no step.
pub const EMPTY: &str = "a plan needs at least one step: `steps` is empty; give the calls to run, in order, as {\"tool\": \"<tool>\", \"input\": {…}}";

/// Refusal: more steps than [`MAX_STEPS`].
pub fn too_many(n: usize) -> String {
    format!("a plan holds at most {MAX_STEPS} steps; this one has {n}: split it into plans of {MAX_STEPS} or fewer, nothing was run")
}

/// Refusal: step `i` names a tool a plan step may not call.
pub fn not_in_plan(i: usize, tool: &str) -> String {
    format!("step {i}: `{tool}` is not callable from a plan step (none of {} is); call it on its own, nothing was run", NOT_IN_PLAN.join(", "))
}

/// How a plan treats a failed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnFailure {
    Stop,
    Continue,
}

/// One checked step.
struct Step {
    tool: String,
    input: Value,
}

/// Checks the whole plan; the first problem refuses it.
fn check(cx: &dyn super::Session, input: &Value) -> Result<(Vec<Step>, OnFailure), String> {
    let Value::Object(m) = input else {
        return Err(format!("{FORM}; got {}", super::json_type(input)));
    };
    if let Some(k) = m.keys().find(|k| *k != "steps" && *k != "on_failure") {
        return Err(format!("unknown input key `{k}`; {FORM}"));
    }
    let on_failure = match m.get("on_failure") {
        None | Some(Value::Null) => OnFailure::Stop,
        Some(Value::String(s)) if s == "stop" => OnFailure::Stop,
        Some(Value::String(s)) if s == "continue" => OnFailure::Continue,
        Some(other) => {
            return Err(format!(
                "`on_failure` must be \"stop\" or \"continue\", got `{other}`"
            ))
        }
    };
    let steps = match m.get("steps") {
        None => return Err(format!("`steps` is missing; {FORM}")),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(format!(
                "`steps` must be an array of steps, got {}; {FORM}",
                super::json_type(other)
            ))
        }
    };
    if steps.is_empty() {
        return Err(EMPTY.into());
    }
    if steps.len() > MAX_STEPS {
        return Err(too_many(steps.len()));
    }
    let mut out = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        let Value::Object(s) = s else {
            return Err(format!(
                "step {i} must be an object {{\"tool\": \"<tool>\", \"input\": {{…}}}}, got {}",
                super::json_type(s)
            ));
        };
        if let Some(k) = s.keys().find(|k| *k != "tool" && *k != "input") {
            return Err(format!(
                "step {i}: unknown key `{k}`; a step is {{\"tool\": \"<tool>\", \"input\": {{…}}}}"
            ));
        }
        let tool = match s.get("tool") {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            Some(other) => {
                return Err(format!(
                    "step {i}: `tool` must be a tool's name, got `{other}`"
                ))
            }
            None => {
                return Err(format!(
                    "step {i}: `tool` is missing: name the tool to call"
                ))
            }
        };
        if NOT_IN_PLAN.contains(&tool.as_str()) {
            return Err(not_in_plan(i, &tool));
        }
        if !cx.has_tool(&tool) {
            return Err(format!("step {i}: {}; nothing was run", cx.absent(&tool)));
        }
        let input = match s.get("input") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(other) => {
                return Err(format!(
                    "step {i}: `input` must be an object (the tool's input), got {}",
                    super::json_type(other)
                ))
            }
        };
        out.push(Step { tool, input });
    }
    Ok((out, on_failure))
}

/// The submit-plan tool ([`super::registry`]).
pub struct SubmitPlan;

impl super::Tool for SubmitPlan {
    /// Checks the plan, runs its steps in order through the session, and returns
    /// every step's result; writes one `plan` record.
    fn call(
        &self,
        cx: &mut dyn super::Session,
        _entry: &ToolEntry,
        input: &Value,
    ) -> super::Answer {
        let (steps, on_failure) = match check(cx, input) {
            Ok(p) => p,
            Err(e) => return ToolResult::refused(e).into(),
        };
        let plan = crate::ids::plan_id();
        let total = steps.len();
        let mut shown = Vec::with_capacity(total);
        let mut recorded = Vec::with_capacity(total);
        let mut stopped: Option<(usize, &'static str)> = None;
        let mut failed = 0;
        for (i, s) in steps.iter().enumerate() {
            let ex = cx.exec();
            let canceled = ex.shutdown.try_recv().is_err_and(|e| e.is_disconnected());
            let past = ex.deadline.is_some_and(|d| std::time::Instant::now() >= d);
            if stopped.is_none() && (canceled || past) {
                stopped = Some((i, "canceled"));
            }
            if stopped.is_some() {
                shown.push(json!({"step": i, "tool": s.tool, "status": "skipped"}));
                recorded.push(json!({"step": i, "tool": s.tool, "status": "skipped"}));
                continue;
            }
            let (call_id, r) = cx.run_plan_step(&plan, i as u32, &s.tool, &s.input);
            let status = if r.refused {
                "refused"
            } else {
                r.status.as_str()
            };
            let mut output = r.data.clone();
            let mut step =
                json!({"step": i, "tool": s.tool, "status": status, "summary": r.summary});
            if output.len() > STEP_OUTPUT_CAP {
                output = cut(&output, STEP_OUTPUT_CAP).to_string();
                step["output_truncated"] = json!(format!(
                    "{} bytes of {} shown; tool_call record {call_id} holds all of it",
                    output.len(),
                    r.data.len()
                ));
            }
            step["output"] = json!(output);
            if !r.notes.is_empty() {
                step["notes"] = json!(r.notes);
            }
            shown.push(step);
            recorded.push(json!({"step": i, "tool": s.tool, "status": status, "call_id": call_id}));
            if r.status == Status::Failed {
                failed += 1;
                if on_failure == OnFailure::Stop {
                    stopped = Some((i + 1, "step_failed"));
                }
            }
        }
        let ran = recorded.iter().filter(|s| s["status"] != "skipped").count();
        let summary = match stopped {
            Some((_, "canceled")) => {
                format!("plan {plan}: stopped by a cancel or the deadline after {ran} of {total} step(s)")
            }
            Some((at, _)) if at < total => format!(
                "plan {plan}: step {} failed; stopped, {} step(s) skipped",
                at - 1,
                total - at
            ),
            _ if failed > 0 => format!("plan {plan}: {failed} of {total} step(s) failed"),
            _ => format!("plan {plan}: {total} of {total} step(s) passed"),
        };
        let on_failure = match on_failure {
            OnFailure::Stop => "stop",
            OnFailure::Continue => "continue",
        };
        let data = json!({"plan": plan, "on_failure": on_failure, "steps": shown});
        let data = serde_json::to_string_pretty(&data).unwrap_or_else(|_| data.to_string());
        let r = if failed > 0 {
            ToolResult::failed(summary, data)
        } else {
            ToolResult::passed(summary, data)
        };
        let canceled = matches!(stopped, Some((_, "canceled")));
        let mut r = r;
        r.record.insert("plan".into(), json!(plan));
        super::Answer::from(r).with_record(
            "plan",
            crate::fields! {
                "plan" => plan,
                "on_failure" => on_failure,
                "steps" => recorded,
                "ran" => ran,
                "failed" => failed,
                "canceled" => canceled,
            },
        )
    }
}

/// `s` cut to at most `cap` bytes on a character boundary.
fn cut(s: &str, cap: usize) -> &str {
    let mut end = cap.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
