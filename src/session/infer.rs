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
