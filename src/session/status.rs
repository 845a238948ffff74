//! The session-status object (spec, "session-status"), measured at the moment of the
//! call from the session's counters.

use std::time::Instant;

use serde_json::{json, Value};

use super::deadline::Deadline;
use crate::inference::Usage;
use crate::manifest::{DriverChoice, Manifest};

/// The counters session-status reads.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Inference calls of the running task (across reopens and continuations).
    pub turns_used: u64,
    /// Messages lifecycle.keep_working sent the running task.
    pub keep_working_used: u64,
    /// Reopens by lifecycle.done_check of the running task.
    pub done_check_used: u64,
    /// Sums over inference records that carried a count (`None`: no record carried it).
    pub input: Option<u64>,
    /// Output tokens reported.
    pub output: Option<u64>,
    /// Cached input tokens reported.
    pub cached: Option<u64>,
    /// Cache-write tokens reported.
    pub cache_write: Option<u64>,
    /// Inference records that carried no count.
    pub unreported_calls: u64,
    /// Tokens the spend ceiling counts (reported or estimated, input + output).
    pub spend_tokens: u64,
    /// The last call: its size in tokens, whether the provider counted it, and the
    /// output cap it sent.
    pub last_call: Option<LastCall>,
}

/// What the compaction check last counted.
#[derive(Debug, Clone, Copy)]
pub struct LastCall {
    /// The conversation's size in tokens: request plus completion.
    pub used_tokens: u64,
    /// `true` when the provider counted it.
    pub actual: bool,
    /// The output cap the call sent, in tokens.
    pub output_cap: Option<u64>,
}

fn add(slot: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *slot = Some(slot.unwrap_or(0).saturating_add(v));
    }
}

impl Counters {
    /// Adds one inference call's usage.
    pub fn add_usage(&mut self, u: &Usage, output_cap: Option<u64>) {
        self.turns_used += 1;
        if u.estimated {
            self.unreported_calls += 1;
        } else {
            add(&mut self.input, Some(u.input));
            add(&mut self.output, Some(u.output));
            add(&mut self.cached, u.cached);
            add(&mut self.cache_write, u.cache_write);
        }
        let call = u.input.saturating_add(u.output);
        self.spend_tokens = self.spend_tokens.saturating_add(call);
        self.last_call = Some(LastCall {
            used_tokens: call,
            actual: !u.estimated,
            output_cap,
        });
    }

    /// Resets the per-task counts at a task's start.
    pub fn start_task(&mut self) {
        self.turns_used = 0;
        self.keep_working_used = 0;
        self.done_check_used = 0;
    }
}

fn or(v: Option<u64>, word: &str) -> Value {
    v.map_or_else(|| json!(word), |n| json!(n))
}

/// Everything the object is measured from.
pub struct Inputs<'a> {
    /// The manifest.
    pub manifest: &'a Manifest,
    /// The choice that served the last call.
    pub choice: Option<&'a DriverChoice>,
    /// When the session started.
    pub session_start: Instant,
    /// When the running task started, if one runs.
    pub task_start: Option<Instant>,
    /// The effective deadline.
    pub deadline: Option<&'a Deadline>,
    /// The counters.
    pub counters: &'a Counters,
}

/// Measures the object now.
pub fn measure(i: &Inputs<'_>) -> Value {
    let now = Instant::now();
    let time = json!({
        "elapsed_secs": now.duration_since(i.session_start).as_secs(),
        "task_elapsed_secs": i.task_start.map_or(json!("unknown"), |t| json!(now.duration_since(t).as_secs())),
        "deadline": i.deadline.map_or(json!("none"), |d| json!({"at": crate::records::rfc3339_secs(d.at), "left_secs": d.left_secs()})),
    });
    let inf = i.manifest.inference.as_ref();
    let c = i.counters;
    let mut obj = serde_json::Map::new();
    obj.insert("time".into(), time);
    obj.insert("turns".into(), json!({"used": c.turns_used, "cap": or(inf.and_then(|f| f.max_turns.map(u64::from)), "none")}));
    obj.insert(
        "keep_working".into(),
        match &i.manifest.lifecycle.keep_working {
            None => json!("none"),
            Some(k) => json!({"used": c.keep_working_used, "left": u64::from(k.limit).saturating_sub(c.keep_working_used)}),
        },
    );
    obj.insert(
        "done_check".into(),
        match &i.manifest.lifecycle.done_check {
            None => json!("none"),
            Some(d) => json!({"used": c.done_check_used, "left": u64::from(d.limit).saturating_sub(c.done_check_used)}),
        },
    );
    obj.insert("context".into(), context(i));
    obj.insert(
        "tokens".into(),
        json!({
            "input": or(c.input, "unknown"),
            "output": or(c.output, "unknown"),
            "cached": or(c.cached, "unknown"),
            "cache_write": or(c.cache_write, "unknown"),
            "unreported_calls": c.unreported_calls,
        }),
    );
    obj.insert(
        "spend".into(),
        json!({"tokens": c.spend_tokens, "ceiling": or(inf.and_then(|f| f.max_session_tokens), "none"), "machine": "none"}),
    );
    Value::Object(obj)
}

fn context(i: &Inputs<'_>) -> Value {
    let Some(last) = i.counters.last_call else {
        return json!("unknown");
    };
    let window = i.choice.and_then(|c| c.context_window);
    let (budget, basis) = match window {
        None => (json!("none"), json!("none")),
        Some(w) => {
            let less_cap = w.saturating_sub(last.output_cap.unwrap_or(0));
            match i.choice.and_then(|c| c.max_input_tokens) {
                Some(max_in) if max_in < less_cap => (json!(max_in), json!("max_input_tokens")),
                _ => (json!(less_cap), json!("context_window_less_output_cap")),
            }
        }
    };
    json!({
        "used_tokens": last.used_tokens,
        "window_tokens": or(window, "none"),
        "budget_tokens": budget,
        "budget_basis": basis,
        "measured_by": if last.actual { "actual" } else { "estimate" },
    })
}
