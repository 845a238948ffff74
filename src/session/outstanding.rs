//! Outstanding work: what a running task has handed out and waits on (member calls
//! today, delegations next), each ending in an outcome the continuation delivers.
//! Their bookkeeping ([`Calls`]), placing a member call (the session's side of
//! call-member: egress, the first offer, a poller), waiting on them for the
//! continuation, and accounting for those a task leaves behind.

use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, never, select, Receiver, Sender};
use serde_json::json;

use super::call::{self, CallCtx, First, Mode};
use super::continuation::{self, Ledger};
use super::link::{is_loopback, SendMeta};
use super::{Loop, Stop};
use crate::fields;
use crate::tools::Placed;

/// How a member call ended (`member_call.status`, and the continuation's headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    /// The member answered: its task completed.
    Completed,
    /// The member ended its task with end-without-answer.
    NoAnswer,
    /// The call could not be made, the door answered an error, or the member's task
    /// failed or reached a state the runtime does not know.
    Failed,
    /// The member's task was cancelled.
    Canceled,
    /// The member did not take the task (busy for the whole deadline, or refused).
    Rejected,
    /// `lifecycle.delegation_deadline_secs` passed while the member held the task.
    TimedOut,
    /// Two offers or two reads in a row got no answer.
    Unreachable,
    /// The calling task ended before the call was accounted for.
    Abandoned,
}

impl CallStatus {
    /// The record spelling: `completed`, `no_answer`, `failed`, `canceled`, `rejected`,
    /// `timed_out`, `unreachable`, `abandoned`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Completed => "completed",
            CallStatus::NoAnswer => "no_answer",
            CallStatus::Failed => "failed",
            CallStatus::Canceled => "canceled",
            CallStatus::Rejected => "rejected",
            CallStatus::TimedOut => "timed_out",
            CallStatus::Unreachable => "unreachable",
            CallStatus::Abandoned => "abandoned",
        }
    }
}

/// A member call that has ended.
#[derive(Debug, Clone, PartialEq)]
pub struct EndedCall {
    /// `mcl_…`.
    pub call_id: String,
    /// The member called.
    pub member: String,
    /// How it ended.
    pub status: CallStatus,
    /// What the model is shown: the member's answer, its reason, or the runtime's
    /// sentence (spec table "Ending / Output").
    pub output: String,
    /// Members further down with no answer, `(name, status)`: read only for a
    /// completed or no_answer call, at most 8, roster members only, never `completed`.
    pub below: Vec<(String, String)>,
    /// The member's task id, when it took the task.
    pub member_task: Option<String>,
    /// The member's door address as configured (trace only, never the model's).
    pub door: Option<String>,
    /// The error as the runtime logs it, naming the URL called, for a call that ended
    /// on a door error (trace and stderr only; `output` is the model's text).
    pub detail: Option<String>,
    /// `true` when the member was busy at every offer and the call ended before it
    /// took the task: the spec's "Ends rejected, never held" (the deadline passed) and
    /// "Ends abandoned, never held" (the calling task ended between offers, or while an
    /// offer was on its way that the member turned away busy). `member_call.never_held`.
    pub never_held: bool,
}

impl EndedCall {
    /// Whether the ending is one an operator is warned of on stderr: failed,
    /// unreachable or timed out.
    pub fn warns(&self) -> bool {
        matches!(
            self.status,
            CallStatus::Failed | CallStatus::Unreachable | CallStatus::TimedOut
        )
    }
}

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
    /// Places one member call for call-member, whose refusals have passed: the egress
    /// check, the first offer, and a poller for a call left outstanding. A call that
    /// ended in its own tool call is accounted for (and recorded) now.
    pub(super) fn place_member_call(&mut self, member: &str, task: String) -> Placed {
        let call_id = crate::ids::call_id();
        let Some(role) = self.spec.member.as_ref() else {
            return Placed::Ended {
                call_id,
                status: "failed",
                output: format!(
                    "this session is no formation member, so {member} cannot be called"
                ),
            };
        };
        let Some((_, link)) = role.callees.iter().find(|(n, _)| n == member) else {
            return Placed::Ended {
                call_id,
                status: "failed",
                output: format!("{member} is not a member this one may call"),
            };
        };
        let member = member.to_string();
        let deadline_secs = role.call_deadline.as_secs();
        // Egress: the door is checked against this capsule's own network allowlist.
        let host = link.host();
        let allow = &self.spec.manifest.capabilities.network_allow;
        let allowed = if is_loopback(&host) {
            allow.iter().any(|h| h == "localhost")
        } else {
            allow.contains(&host)
        };
        let e = if !allowed {
            let need = if is_loopback(&host) {
                "localhost"
            } else {
                host.as_str()
            };
            EndedCall {
                call_id: call_id.clone(),
                member: member.clone(),
                status: CallStatus::Failed,
                output: format!("W-RUN-008: capabilities.network.allow does not list {need}, so {member}'s door cannot be reached from this capsule; nothing was sent"),
                below: Vec::new(),
                member_task: None,
                door: Some(link.address()),
                detail: None,
                never_held: false,
            }
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
            let (mode, placed) = match ctx.first_offer() {
                First::Ended(e) => (None, Err(e)),
                First::Started(task_id) => (
                    Some(Mode::Held {
                        task_id: task_id.clone(),
                        offers: 1,
                    }),
                    Ok(Placed::Started {
                        call_id: call_id.clone(),
                        task_id,
                    }),
                ),
                First::Busy => (
                    Some(Mode::Busy { offers: 1 }),
                    Ok(Placed::Busy {
                        call_id: call_id.clone(),
                        deadline_secs,
                    }),
                ),
            };
            match (mode, placed) {
                (Some(mode), Ok(placed)) => {
                    let address = link.address();
                    match call::spawn(
                        ctx,
                        mode,
                        self.calls.events_tx.clone(),
                        self.calls.abandon_rx.clone(),
                    ) {
                        Ok(()) => {
                            self.calls.slots.push(Slot {
                                call_id,
                                member,
                                arrived: None,
                            });
                            return placed;
                        }
                        Err(e) => EndedCall {
                            call_id: call_id.clone(),
                            member: member.clone(),
                            status: CallStatus::Failed,
                            output: format!("cannot start the call's poller thread: {e}"),
                            below: Vec::new(),
                            member_task: None,
                            door: Some(address),
                            detail: None,
                            never_held: false,
                        },
                    }
                }
                (_, Err(e)) => e,
                (None, Ok(_)) => EndedCall {
                    call_id: call_id.clone(),
                    member: member.clone(),
                    status: CallStatus::Failed,
                    output: "'call-member' could not make the call".into(),
                    below: Vec::new(),
                    member_task: None,
                    door: Some(link.address()),
                    detail: None,
                    never_held: false,
                },
            }
        };
        // Ended in its own tool call: accounted for now.
        self.calls.ledger.ended(&e);
        self.record_member_call(&e, true);
        Placed::Ended {
            call_id,
            status: if e.status == CallStatus::Rejected {
                "rejected"
            } else {
                "failed"
            },
            output: e.output,
        }
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
