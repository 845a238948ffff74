//! The member calls of a running task: their bookkeeping ([`Calls`]), making one
//! (call-member), waiting on them for the continuation, accounting for those a task
//! leaves behind, and ending a task without an answer.

use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, never, select, Receiver, Sender};
use serde_json::{json, Value};

use crate::fields;
use crate::formation::call::{self, CallCtx, First, Mode};
use crate::formation::continuation::{self, Ledger};
use crate::formation::link::{is_loopback, SendMeta};
use crate::formation::{CallStatus, EndedCall};
use crate::staging;
use crate::tools::{self, call_member, end_without_answer, ToolResult};

use super::{Loop, Stop};

/// The most of a member call's reason a stderr warning quotes, in bytes.
const WARN_CAP: usize = 400;

/// The member calls of the running task.
pub(super) struct Calls {
    /// Calls outstanding, or ended with an answer not yet delivered, in the order made.
    pub(super) slots: Vec<Slot>,
    /// Every member's latest ended call in this task.
    pub(super) ledger: Ledger,
    /// The reason, once end-without-answer was accepted.
    pub(super) ending: Option<String>,
    pub(super) events_tx: Sender<EndedCall>,
    pub(super) events_rx: Receiver<EndedCall>,
    /// Dropped when the task ends: every poller of the task is abandoned.
    pub(super) abandon_tx: Option<Sender<()>>,
    pub(super) abandon_rx: Receiver<()>,
}

pub(super) struct Slot {
    pub(super) call_id: String,
    pub(super) member: String,
    pub(super) arrived: Option<EndedCall>,
}

impl Calls {
    pub(super) fn new() -> Calls {
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let (abandon_tx, abandon_rx) = bounded(0);
        Calls {
            slots: Vec::new(),
            ledger: Ledger::default(),
            ending: None,
            events_tx,
            events_rx,
            abandon_tx: Some(abandon_tx),
            abandon_rx,
        }
    }

    /// Moves every answer that has arrived into its slot.
    pub(super) fn drain(&mut self) {
        while let Ok(e) = self.events_rx.try_recv() {
            self.arrive(e);
        }
    }

    pub(super) fn arrive(&mut self, e: EndedCall) {
        self.ledger.ended(&e);
        if let Some(s) = self.slots.iter_mut().find(|s| s.call_id == e.call_id) {
            s.arrived = Some(e);
        }
    }

    pub(super) fn outstanding(&self) -> usize {
        self.slots.iter().filter(|s| s.arrived.is_none()).count()
    }
}

impl Loop<'_> {
    /// call-member: the refusals, the egress check, the first offer, and a poller for
    /// a call left outstanding (spec, "call-member").
    pub(super) fn call_member(&mut self, input: &Value) -> ToolResult {
        let Some(role) = self.spec.member.as_ref().filter(|r| !r.callees.is_empty()) else {
            return ToolResult::refused(staging::absent_tool_message(
                call_member::NAME,
                &self.spec.staged.inventory,
            ));
        };
        let callees: Vec<String> = role.callees.iter().map(|(n, _)| n.clone()).collect();
        let member = match input.get("member") {
            Some(Value::String(m)) => m.clone(),
            Some(v) => {
                return ToolResult::refused(format!(
                    "'call-member' needs `member` as a string naming one of: {}; found {}",
                    callees.join(", "),
                    tools::json_type(v)
                ))
            }
            None => {
                return ToolResult::refused(format!(
                    "'call-member' needs `member`, one of: {}",
                    callees.join(", ")
                ))
            }
        };
        let Some((_, link)) = role.callees.iter().find(|(n, _)| *n == member) else {
            return ToolResult::refused(call_member::not_callable(&member, &callees));
        };
        if self.task_start.is_none() {
            return ToolResult::refused(call_member::NO_TASK);
        }
        if self.calls.ending.is_some() {
            return ToolResult::refused(call_member::ENDING);
        }
        self.calls.drain();
        if let Some(s) = self.calls.slots.iter().find(|s| s.member == member) {
            return ToolResult::refused(match s.arrived {
                None => call_member::not_yet_answered(&member, &s.call_id),
                Some(_) => call_member::answered_waiting(&member, &s.call_id),
            });
        }
        let task = match input.get("task") {
            Some(Value::String(t)) if !t.trim().is_empty() => t.clone(),
            Some(Value::String(_)) => {
                return ToolResult::refused(
                    "'call-member' needs a task: `task` is blank; write the whole of what the member is told",
                )
            }
            Some(v) => {
                return ToolResult::refused(format!(
                    "'call-member' needs `task` as a string, found {}",
                    tools::json_type(v)
                ))
            }
            None => {
                return ToolResult::refused(
                    "'call-member' needs `task`: the whole of what the member is told",
                )
            }
        };
        if let Some(k) = input
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "member" && *k != "task"))
        {
            return ToolResult::refused(format!(
                "'call-member' takes `member` and `task` only; unknown key `{k}`"
            ));
        }
        let call_id = crate::ids::call_id();
        let caller = self.origin.caller().map(str::to_string);
        let deadline_secs = role.call_deadline.as_secs();
        // Egress: the door is checked against this capsule's own network allowlist.
        let host = link.host();
        let allow = &self.spec.manifest.capabilities.network_allow;
        let allowed = if is_loopback(&host) {
            allow.iter().any(|h| h == "localhost")
        } else {
            allow.contains(&host)
        };
        let ended = if !allowed {
            let need = if is_loopback(&host) {
                "localhost"
            } else {
                host.as_str()
            };
            Some(EndedCall {
                call_id: call_id.clone(),
                member: member.clone(),
                status: CallStatus::Failed,
                output: format!("W-RUN-008: capabilities.network.allow does not list {need}, so {member}'s door cannot be reached from this capsule; nothing was sent"),
                below: Vec::new(),
                member_task: None,
                door: Some(link.address()),
                detail: None,
                never_held: false,
            })
        } else {
            let ctx = CallCtx {
                call_id: call_id.clone(),
                member: member.clone(),
                text: task,
                link: link.clone(),
                meta: SendMeta {
                    caller: role.name.clone(),
                    trust: self.origin.trust(),
                },
                deadline: Instant::now() + role.call_deadline,
                deadline_secs,
                trace: self.trace.clone(),
                task_id: self.task_id.clone(),
                roster: role.roster.clone(),
            };
            let (first, result) = match ctx.first_offer() {
                First::Ended(e) => (None, Err(e)),
                First::Started(task_id) => (
                    Some(Mode::Held {
                        task_id: task_id.clone(),
                        offers: 1,
                    }),
                    Ok(call_member::started(&call_id, &member, &task_id)),
                ),
                First::Busy => (
                    Some(Mode::Busy { offers: 1 }),
                    Ok(call_member::busy(&call_id, &member, deadline_secs)),
                ),
            };
            match (first, result) {
                (Some(mode), Ok(r)) => {
                    let spawned = call::spawn(
                        ctx,
                        mode,
                        self.calls.events_tx.clone(),
                        self.calls.abandon_rx.clone(),
                    );
                    match spawned {
                        Ok(()) => {
                            self.calls.slots.push(Slot {
                                call_id: call_id.clone(),
                                member: member.clone(),
                                arrived: None,
                            });
                            let mut r = r;
                            r.record.insert("member_call_id".into(), json!(call_id));
                            return r;
                        }
                        Err(e) => Some(EndedCall {
                            call_id: call_id.clone(),
                            member: member.clone(),
                            status: CallStatus::Failed,
                            output: format!("cannot start the call's poller thread: {e}"),
                            below: Vec::new(),
                            member_task: None,
                            door: Some(link.address()),
                            detail: None,
                            never_held: false,
                        }),
                    }
                }
                (_, Err(e)) => Some(e),
                (None, Ok(_)) => None,
            }
        };
        let Some(e) = ended else {
            return ToolResult::refused("'call-member' could not make the call");
        };
        // Ended in its own tool call: accounted for now.
        self.calls.ledger.ended(&e);
        self.record_member_call(&e, true);
        let status = if e.status == CallStatus::Rejected {
            "rejected"
        } else {
            "failed"
        };
        let mut r = call_member::ended(&call_id, &member, status, &e.output, caller.as_deref());
        r.record.insert("member_call_id".into(), json!(call_id));
        r
    }

    /// end-without-answer: the refusals in the spec's order, then acceptance.
    pub(super) fn end_without_answer(&mut self, input: &Value) -> ToolResult {
        if self
            .spec
            .member
            .as_ref()
            .is_none_or(|r| r.callees.is_empty())
        {
            return ToolResult::refused(end_without_answer::NOT_A_CALLER);
        }
        if self.task_start.is_none() {
            return ToolResult::refused(end_without_answer::NO_TASK);
        }
        let Some(caller) = self.origin.caller().map(str::to_string) else {
            return ToolResult::refused(end_without_answer::NOT_FROM_MEMBER);
        };
        self.calls.drain();
        if let Some(s) = self.calls.slots.first() {
            return ToolResult::refused(end_without_answer::call_still_out(&s.call_id, &s.member));
        }
        let reason = match input.get("reason") {
            // Kept as given: the reason is the task's status message (spec).
            Some(Value::String(r)) if !r.trim().is_empty() => r.clone(),
            _ => return ToolResult::refused(end_without_answer::NO_REASON),
        };
        if self.calls.ending.is_some() {
            return ToolResult::refused(end_without_answer::ALREADY);
        }
        self.calls.ending = Some(reason);
        end_without_answer::accepted(&caller)
    }

    /// Waits until every call of the task has ended, then builds the one message the
    /// task continues with and records the delivery (spec, "How the answer arrives").
    pub(super) fn continuation(&mut self) -> Result<String, Stop> {
        let mut out = self.calls.outstanding();
        if out > 0 {
            self.status(&format!(
                "waiting on call-member: {out} call(s) outstanding"
            ));
        }
        while out > 0 {
            let deadline_rx = match &self.deadline {
                Some(d) => after(d.instant.saturating_duration_since(Instant::now())),
                None => never(),
            };
            select! {
                recv(self.calls.events_rx) -> e => {
                    if let Ok(e) = e {
                        self.calls.arrive(e);
                    }
                    out = self.calls.outstanding();
                    if out > 0 {
                        self.status(&format!("waiting on call-member: {out} call(s) outstanding"));
                    }
                }
                recv(self.shutdown) -> _ => return Err(Stop::Interrupted),
                recv(deadline_rx) -> _ => return Err(self.check_stop().unwrap_or(Stop::Interrupted)),
            }
        }
        let answers: Vec<EndedCall> = self
            .calls
            .slots
            .drain(..)
            .filter_map(|s| s.arrived)
            .collect();
        let text = continuation::build(&answers, &[], &self.calls.ledger, self.origin.caller());
        for a in &answers {
            self.record_member_call(a, true);
        }
        self.trace.record(
            Some(&self.task_id),
            "task_continued",
            fields! {
                "answers" => answers.len(),
                "calls" => answers.iter().map(|a| json!({"call_id": a.call_id, "member": a.member, "status": a.status.as_str()})).collect::<Vec<_>>(),
                "text" => text,
            },
        );
        self.status(&format!(
            "continuing with {} member answer(s)",
            answers.len()
        ));
        Ok(text)
    }

    /// Writes `member_call` (with the door's address and the error's detail, which the
    /// model never sees) and, for a call that ended failed, unreachable or timed out,
    /// a warning on stderr.
    fn record_member_call(&self, e: &EndedCall, delivered: bool) {
        let mut f = fields! {
            "call_id" => e.call_id,
            "member" => e.member,
            "status" => e.status.as_str(),
            "delivered" => delivered,
            "member_task" => e.member_task,
            "never_held" => e.never_held,
            "output" => continuation::cut_utf8(&e.output, continuation::OUTPUT_CAP),
            "no_answer_below" => e.below.iter().map(|(n, s)| json!({"member": n, "status": s})).collect::<Vec<_>>(),
        };
        if let Some(d) = &e.door {
            f.insert("door".into(), json!(d));
        }
        if let Some(d) = &e.detail {
            f.insert("detail".into(), json!(d));
        }
        self.trace.record(Some(&self.task_id), "member_call", f);
        if e.warns() {
            let why = e.detail.as_deref().unwrap_or(&e.output);
            let why = continuation::cut_utf8(why, WARN_CAP);
            let door = match (&e.detail, &e.door) {
                (None, Some(d)) => format!(" (door {d})"),
                _ => String::new(),
            };
            log::warn!(
                "member call {} to {} from task {} ended {}: {why}{door}",
                e.call_id,
                e.member,
                self.task_id,
                e.status.as_str()
            );
        }
    }

    /// Accounts for the calls the task leaves behind when it ends other than by a
    /// continuation: each outstanding call is abandoned and recorded so, each answer
    /// that arrived is recorded `delivered: false`.
    pub(super) fn account_leftovers(&mut self) {
        self.calls.abandon_tx.take();
        let until = Instant::now() + call::IN_FLIGHT_GRACE + Duration::from_secs(2);
        while self.calls.outstanding() > 0 {
            match self
                .calls
                .events_rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(e) => self.calls.arrive(e),
                Err(_) => break,
            }
        }
        let slots: Vec<Slot> = self.calls.slots.drain(..).collect();
        for s in slots {
            let e = s.arrived.unwrap_or_else(|| EndedCall {
                call_id: s.call_id.clone(),
                member: s.member.clone(),
                status: CallStatus::Abandoned,
                output: format!(
                    "the calling task ended; the call to {} was not accounted for in time",
                    s.member
                ),
                below: Vec::new(),
                member_task: None,
                door: None,
                detail: None,
                never_held: false,
            });
            self.record_member_call(&e, false);
        }
    }
}
