//! The session's driver and one inference call, cut short by the deadline or a
//! shutdown.

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{after, bounded, never, select};
use parking_lot::Mutex;
use serde_json::json;

use crate::fields;
use crate::inference::{self, Driver, DriverError, Message, Request, Response, ToolSpec};
use crate::manifest::DriverChoice;

use super::{make_driver, Loop, SharedDriver, Stop};

impl Loop<'_> {
    pub(super) fn driver(&mut self, choice: &DriverChoice) -> Result<SharedDriver, String> {
        let spec = self.spec;
        self.driver
            .get_or_insert_with(|| {
                make_driver(choice, &spec.staged.capsule_dir)
                    .map(|d| Arc::new(Mutex::new(d)))
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    /// One inference call, on its own thread so the deadline and a shutdown can cut it.
    pub(super) fn infer(
        &mut self,
        driver: &Arc<Mutex<Box<dyn Driver>>>,
        choice: &DriverChoice,
        messages: &[Message],
        tools: &[ToolSpec],
        turn: u64,
    ) -> Result<Response, Stop> {
        let (tx, rx) = bounded(1);
        let d = driver.clone();
        let system = self.spec.system_prompt.clone();
        let msgs = messages.to_vec();
        let tl = tools.to_vec();
        let cap = choice.max_output_tokens;
        let trace = self.trace.clone();
        let task = self.task_id.clone();
        let progress = self.progress.clone();
        let max_attempts = u64::from(choice.max_retries) + 1;
        let started = Instant::now();
        let spawned = std::thread::Builder::new().name("inference".into()).spawn(move || {
            let mut drv = d.lock();
            let req = Request { system: &system, messages: &msgs, tools: &tl, max_output_tokens: cap };
            let kind = drv.kind();
            let mut sink = |a: inference::Attempt| {
                if a.outcome != "ok" || a.number > 1 {
                    trace.record(
                        Some(&task),
                        "inference_attempt",
                        fields! {"turn" => turn, "driver" => kind, "attempt" => a.number, "outcome" => a.outcome, "http_status" => a.http_status, "retry_in_ms" => a.retry_in_ms, "detail" => a.detail},
                    );
                }
                if a.will_retry {
                    report_retry(&progress, turn, &a, max_attempts);
                }
            };
            let _ = tx.send(drv.complete(&req, &mut sink));
        });
        if let Err(e) = spawned {
            return Err(Stop::Failed(format!(
                "cannot start the inference thread: {e}"
            )));
        }
        let deadline_rx = match &self.deadline {
            Some(d) => after(d.instant.saturating_duration_since(Instant::now())),
            None => never(),
        };
        let result = select! {
            recv(rx) -> r => r.unwrap_or_else(|_| Err(DriverError::Interrupted("the inference thread ended without an answer".into()))),
            recv(deadline_rx) -> _ => {
                self.cut_inference(turn, choice, started, "the session's deadline passed during the call");
                return Err(self.check_stop().unwrap_or(Stop::Interrupted));
            }
            recv(self.shutdown) -> _ => {
                self.cut_inference(turn, choice, started, "mur was told to shut down during the call");
                return Err(Stop::Interrupted);
            }
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        let kind = choice.driver;
        match result {
            Ok(resp) => {
                self.counters.add_usage(&resp.usage, resp.output_cap);
                let u = resp.usage;
                self.trace.record(
                    Some(&self.task_id),
                    "inference",
                    fields! {
                        "turn" => turn,
                        "choice" => self.spec.choice,
                        "driver" => format!("{kind:?}").to_lowercase(),
                        "model" => resp.model.clone().or(choice.model.clone()),
                        "input_tokens" => u.input,
                        "output_tokens" => u.output,
                        "cached_tokens" => u.cached,
                        "cache_write_tokens" => u.cache_write,
                        "usage_source" => if u.estimated { "estimate" } else { "provider" },
                        "duration_ms" => duration_ms,
                        "finish_reason" => resp.finish_reason,
                        "text" => resp.text,
                        "tool_calls" => resp.tool_calls.iter().map(|c| json!({"id": c.id, "name": c.name, "input": c.arguments.to_record()})).collect::<Vec<_>>(),
                    },
                );
                Ok(resp)
            }
            Err(e) => {
                self.trace.record(
                    Some(&self.task_id),
                    "inference",
                    fields! {"turn" => turn, "choice" => self.spec.choice, "driver" => format!("{kind:?}").to_lowercase(), "error" => e.to_string(), "duration_ms" => duration_ms},
                );
                Err(Stop::Failed(format!("inference failed: {e}")))
            }
        }
    }

    /// Records an inference call the deadline or a shutdown cut short.
    fn cut_inference(&self, turn: u64, choice: &DriverChoice, started: Instant, why: &str) {
        self.trace.record(
            Some(&self.task_id),
            "inference",
            fields! {"turn" => turn, "choice" => self.spec.choice, "driver" => format!("{:?}", choice.driver).to_lowercase(), "error" => why, "duration_ms" => started.elapsed().as_millis() as u64},
        );
    }
}

/// Shows a retry of the model on the progress line (attempt, reason, wait), and, when
/// there is no live progress line (stderr is not a terminal), as a warning on stderr.
fn report_retry(progress: &crate::progress::Progress, turn: u64, a: &inference::Attempt, max: u64) {
    let wait = inference::retry::describe_wait(std::time::Duration::from_millis(a.retry_in_ms));
    let reason = match (a.outcome.as_str(), a.http_status) {
        ("http_status", Some(s)) => format!("HTTP {s}"),
        (o, Some(s)) if s != 200 => format!("{o}, HTTP {s}"),
        (o, _) => o.to_string(),
    };
    let next = u64::from(a.number) + 1;
    progress.set(
        turn,
        format!(
            "waiting for the model: attempt {} of {max} failed ({reason}), attempt {next} in {wait}",
            a.number
        ),
    );
    if !progress.is_live() {
        let detail = a.detail.as_deref().unwrap_or("no detail");
        // A detail that already opens with its outcome (`timeout: …`) is not prefixed
        // twice.
        let why = match detail.strip_prefix(reason.as_str()) {
            Some(rest) if rest.starts_with(':') => detail.to_string(),
            _ => format!("{reason}: {detail}"),
        };
        log::warn!(
            "turn {turn}: model attempt {} of {max} failed ({why}); attempt {next} in {wait}",
            a.number
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_shows_attempt_reason_and_wait_on_the_progress_line() {
        let p = crate::progress::Progress::recording();
        let a = inference::Attempt {
            number: 1,
            outcome: "http_status".into(),
            http_status: Some(429),
            retry_in_ms: 2000,
            will_retry: true,
            detail: Some("http status 429: \"slow down\"".into()),
        };
        report_retry(&p, 3, &a, 5);
        assert_eq!(
            p.shown(),
            Some((
                3,
                "waiting for the model: attempt 1 of 5 failed (HTTP 429), attempt 2 in 2 s".into()
            ))
        );
        let a = inference::Attempt {
            number: 2,
            outcome: "overloaded".into(),
            http_status: Some(529),
            retry_in_ms: 350,
            ..a
        };
        report_retry(&p, 3, &a, 5);
        assert_eq!(
            p.shown().unwrap().1,
            "waiting for the model: attempt 2 of 5 failed (overloaded, HTTP 529), attempt 3 in 350 ms"
        );
    }
}
