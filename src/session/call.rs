//! One member call: its first offer (made inside the tool call), then one poller
//! thread that re-offers a busy member and reads the member's task until the call
//! ends (spec, call-member, "A busy member" and "Bound").
//!
//! | Bound | Value |
//! |---|---|
//! | the whole call | the call's deadline (`lifecycle.delegation_deadline_secs`) |
//! | re-offers | 1 s after the first refusal, doubling to 8 s, plus up to 250 ms jitter |
//! | reads | `GetTask` every 500 ms |
//! | unreachable | two offers, or two reads, in a row with no answer |
//! | a read naming another task than the one asked for | the call ends failed (protocol error) |
//! | a read showing the busy refusal of an offer answered SUBMITTED | `member_call_busy` for that offer, then offered again on the schedule above |
//! | an offer in flight when the calling task ends | its answer is awaited up to 6 s |

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, select, Receiver, Sender};
use rand::Rng;

use super::link::{Link, LinkError, SendMeta, Snapshot, State};
use super::{CallStatus, EndedCall};
use crate::fields;
use crate::records::Trace;
use crate::tools::call_member::{rejected_output, BUSY_MESSAGE};

/// The wait before the second offer.
pub const FIRST_REOFFER: Duration = Duration::from_secs(1);
/// The longest wait between offers, before jitter.
pub const MAX_REOFFER: Duration = Duration::from_secs(8);
/// Jitter added to each wait between offers, at most.
pub const MAX_JITTER_MS: u64 = 250;
/// How often a held task is read.
pub const POLL_EVERY: Duration = Duration::from_millis(500);
/// How long a calling task that ended waits for an offer in flight.
pub const IN_FLIGHT_GRACE: Duration = Duration::from_secs(6);
/// Unanswered offers or reads in a row that make a call unreachable.
pub const UNANSWERED_LIMIT: u32 = 2;
/// `noAnswerBelow` names kept per call.
pub const MAX_BELOW: usize = 8;

/// Everything one call needs.
#[derive(Clone)]
pub struct CallCtx {
    /// `mcl_…`.
    pub call_id: String,
    /// The member called.
    pub member: String,
    /// The task text, sent with every offer.
    pub text: String,
    /// The member's door.
    pub link: Arc<dyn Link>,
    /// Caller and trust class sent with every offer.
    pub meta: SendMeta,
    /// When the call ends timed_out (or rejected, if never held).
    pub deadline: Instant,
    /// The call's deadline in whole seconds, for messages.
    pub deadline_secs: u64,
    /// The calling session's trace (`member_call_busy`, `member_call_start`).
    pub trace: Trace,
    /// The calling task.
    pub task_id: String,
    /// Every roster member's name, to filter `noAnswerBelow`.
    pub roster: Arc<Vec<String>>,
}

/// What the first offer did.
#[derive(Debug)]
pub enum First {
    /// The member holds the task (id given): the call is started.
    Started(String),
    /// The member is busy: the call is outstanding and will be re-offered.
    Busy,
    /// The call ended in its own tool call (rejected or failed).
    Ended(EndedCall),
}

/// Where a poller starts.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Re-offering a busy member; `offers` made so far.
    Busy {
        /// Offers made (and refused) so far.
        offers: u32,
    },
    /// Reading the member's task.
    Held {
        /// The member's task id.
        task_id: String,
        /// Offers made so far, the one the member took included.
        offers: u32,
    },
}

impl CallCtx {
    fn ended(&self, status: CallStatus, output: impl Into<String>) -> EndedCall {
        EndedCall {
            call_id: self.call_id.clone(),
            member: self.member.clone(),
            status,
            output: output.into(),
            below: Vec::new(),
            member_task: None,
            door: Some(self.link.address()),
            detail: None,
            never_held: false,
        }
    }

    /// An ending on a door error: the model's `output`, the error's detail kept for
    /// the trace and stderr.
    fn ended_on(&self, status: CallStatus, output: String, e: &LinkError) -> EndedCall {
        let mut ended = self.ended(status, output);
        ended.detail = Some(e.detail().to_string());
        ended
    }

    /// An ending of a member that was busy at every offer and never took the task
    /// (spec: "Ends rejected, never held" and "Ends abandoned, never held"): the output
    /// is the sentence alone, `member_call.never_held` says how it ended.
    fn ended_never_held(&self, status: CallStatus, output: String) -> EndedCall {
        EndedCall {
            never_held: true,
            ..self.ended(status, output)
        }
    }

    /// The call's end for an offer the member answered with a terminal state (spec,
    /// "What a call returns" and "A busy member"): `TASK_STATE_REJECTED` ends it
    /// rejected, any other terminal state failed.
    fn offer_ending(&self, snap: &Snapshot) -> EndedCall {
        let m = &self.member;
        let mut e = match &snap.state {
            State::Rejected => self.ended(
                CallStatus::Rejected,
                rejected_output(m, snap.message.as_deref()),
            ),
            State::Other(_) => return self.ending_of(snap),
            s => {
                let state = match snap.message.as_deref().filter(|t| !t.trim().is_empty()) {
                    Some(msg) => format!("{} (status message: {msg})", s.wire()),
                    None => s.wire().to_string(),
                };
                self.ended(
                    CallStatus::Failed,
                    format!("{m} ended the task as soon as it was offered, with the state {state}, so no answer can be read from it; the call ended failed"),
                )
            }
        };
        e.member_task = Some(snap.id.clone());
        e
    }

    fn record_busy(&self, offer: u32) {
        self.trace.record(
            Some(&self.task_id),
            "member_call_busy",
            fields! {"call_id" => self.call_id, "member" => self.member, "offer" => offer},
        );
    }

    fn record_start(&self, member_task: &str, offers: u32) {
        self.trace.record(
            Some(&self.task_id),
            "member_call_start",
            fields! {"call_id" => self.call_id, "member" => self.member, "member_task" => member_task, "offer" => offers},
        );
    }

    /// The call's end for a terminal task state `snap` (a read or an offer's answer).
    fn ending_of(&self, snap: &Snapshot) -> EndedCall {
        let m = &self.member;
        let msg = snap.message.clone().filter(|s| !s.trim().is_empty());
        let mut e = match &snap.state {
            State::Completed => {
                let mut e = self.ended(
                    CallStatus::Completed,
                    snap.answer.clone().unwrap_or_default(),
                );
                e.below = self.below(snap);
                e
            }
            State::Failed if snap.no_answer => {
                let mut e = self.ended(
                    CallStatus::NoAnswer,
                    msg.unwrap_or_else(|| format!("{m} ended its task without an answer")),
                );
                e.below = self.below(snap);
                e
            }
            State::Failed => self.ended(
                CallStatus::Failed,
                msg.unwrap_or_else(|| format!("{m}'s task failed without a status message")),
            ),
            State::Canceled => self.ended(
                CallStatus::Canceled,
                msg.unwrap_or_else(|| format!("{m}'s task was canceled")),
            ),
            State::Rejected => self.ended(
                CallStatus::Rejected,
                rejected_output(m, snap.message.as_deref()),
            ),
            State::Other(s) => self.ended(
                CallStatus::Failed,
                format!("{m}'s door reported the task state `{s}`, which a member call cannot wait on; the call ended failed"),
            ),
            State::Submitted | State::Working => {
                self.ended(CallStatus::Failed, format!("{m}'s task is not finished"))
            }
        };
        e.member_task = Some(snap.id.clone());
        e
    }

    fn below(&self, snap: &Snapshot) -> Vec<(String, String)> {
        snap.no_answer_below
            .iter()
            .filter(|(n, s)| s != "completed" && self.roster.iter().any(|r| r == n))
            .take(MAX_BELOW)
            .cloned()
            .collect()
    }

    /// The first offer, made inside the tool call. Writes `member_call_busy` or
    /// `member_call_start`.
    pub fn first_offer(&self) -> First {
        match self.link.send(&self.text, &self.meta) {
            Err(e) => {
                First::Ended(self.ended_on(CallStatus::Failed, first_failure(&self.member, &e), &e))
            }
            Ok(snap) => match classify(&snap) {
                Offer::Busy => {
                    self.record_busy(1);
                    First::Busy
                }
                Offer::Held => {
                    self.record_start(&snap.id, 1);
                    First::Started(snap.id)
                }
                Offer::Ended => First::Ended(self.offer_ending(&snap)),
            },
        }
    }
}

/// The output of a first offer that got no task: `<member>'s door could not be
/// reached: …` or `<member>'s door answered …` (never the address).
fn first_failure(member: &str, e: &LinkError) -> String {
    match e {
        LinkError::Unreachable { .. } => format!("{member}'s door could not be reached: {e}"),
        LinkError::Failed { .. } => format!("{member}'s door {e}"),
    }
}

enum Offer {
    Busy,
    Held,
    Ended,
}

/// A door's answer to an offer: busy refusal, held (a state that is not terminal), or
/// ended (any terminal state, `TASK_STATE_COMPLETED` included: the spec's "another
/// terminal state", which ends the call failed).
fn classify(snap: &Snapshot) -> Offer {
    match &snap.state {
        _ if is_busy_refusal(snap) => Offer::Busy,
        State::Submitted | State::Working => Offer::Held,
        _ => Offer::Ended,
    }
}

/// `TASK_STATE_REJECTED` with exactly the status message `task rejected: capsule is
/// busy`: the only refusal offered again. A door may answer an offer SUBMITTED and
/// show this refusal only on a later `GetTask` (an a2a-sdk agent creates every task
/// SUBMITTED before its executor runs); that is the same refusal of the same offer.
fn is_busy_refusal(snap: &Snapshot) -> bool {
    snap.state == State::Rejected && snap.message.as_deref() == Some(BUSY_MESSAGE)
}

/// Starts the poller thread of an outstanding call. It sends exactly one
/// [`EndedCall`] on `events`; `abandon` disconnects when the calling task ends.
///
/// Errors: the thread cannot be started.
pub fn spawn(
    ctx: CallCtx,
    mode: Mode,
    events: Sender<EndedCall>,
    abandon: Receiver<()>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("call-{}", ctx.member))
        .stack_size(256 * 1024)
        .spawn(move || {
            // A poller that panics still ends its call: the guard sends a failed ending
            // as the thread unwinds, so the continuation never waits on a dead thread.
            let guard = CrashGuard {
                ended: Some(ctx.ended(CallStatus::Failed, crashed_output(&ctx.member))),
                events: events.clone(),
            };
            let ended = poll(&ctx, mode, &abandon);
            guard.disarm();
            let _ = events.send(ended);
        })?;
    Ok(())
}

/// What the model is shown for a call whose poller thread crashed.
pub fn crashed_output(member: &str) -> String {
    format!("the call to {member} failed: mur's poller thread for it crashed, so its end cannot be known; {member} may still be working on the task")
}

/// Sends its failed ending when dropped while its thread panics; disarmed once the
/// poller has its own ending to send.
struct CrashGuard {
    ended: Option<EndedCall>,
    events: Sender<EndedCall>,
}

impl CrashGuard {
    fn disarm(mut self) {
        self.ended = None;
    }
}

impl Drop for CrashGuard {
    fn drop(&mut self) {
        if let Some(e) = self.ended.take() {
            if std::thread::panicking() {
                log::error!("member call {}: its poller thread panicked", e.call_id);
                let _ = self.events.send(e);
            }
        }
    }
}

fn jitter() -> Duration {
    Duration::from_millis(rand::thread_rng().gen_range(0..=MAX_JITTER_MS))
}

/// One offer on its own thread, so an abandon can be seen while it is in flight.
/// Returns the answer (or `None` when the grace after an abandon passed) and whether
/// the calling task ended meanwhile.
fn offer(ctx: &CallCtx, abandon: &Receiver<()>) -> (Option<Result<Snapshot, LinkError>>, bool) {
    let (tx, rx) = bounded(1);
    let link = ctx.link.clone();
    let text = ctx.text.clone();
    let meta = ctx.meta.clone();
    let spawned = std::thread::Builder::new()
        .name("offer".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let _ = tx.send(link.send(&text, &meta));
        });
    if let Err(e) = spawned {
        return (
            Some(Err(LinkError::failed(format!(
                "could not be used: cannot start an offer: {e}"
            )))),
            false,
        );
    }
    let lost = || Err(LinkError::unreachable("the offer thread ended"));
    select! {
        recv(rx) -> r => (Some(r.unwrap_or_else(|_| lost())), false),
        recv(abandon) -> _ => select! {
            recv(rx) -> r => (Some(r.unwrap_or_else(|_| lost())), true),
            recv(after(IN_FLIGHT_GRACE)) -> _ => (None, true),
        },
    }
}

fn poll(ctx: &CallCtx, mut mode: Mode, abandon: &Receiver<()>) -> EndedCall {
    let m = ctx.member.clone();
    let never_held = |ctx: &CallCtx| {
        ctx.ended_never_held(
            CallStatus::Abandoned,
            format!("the calling task ended before {m} took the task; {m} was busy and was never handed it"),
        )
    };
    let mut wait = FIRST_REOFFER;
    let mut unanswered = 0u32;
    loop {
        match mode.clone() {
            Mode::Busy { offers } => {
                let left = ctx.deadline.saturating_duration_since(Instant::now());
                select! {
                    recv(abandon) -> _ => return never_held(ctx),
                    recv(after(left.min(wait + jitter()))) -> _ => {}
                }
                if Instant::now() >= ctx.deadline {
                    return ctx.ended_never_held(
                        CallStatus::Rejected,
                        format!("{m} stayed busy with other work for the whole {}s this call may wait and never took the task; it was offered the task {offers} times. Nothing was done on it.", ctx.deadline_secs),
                    );
                }
                let (answer, abandoned) = offer(ctx, abandon);
                let Some(answer) = answer else {
                    return ctx.ended(
                        CallStatus::Abandoned,
                        format!("the calling task ended while an offer to {m} was in flight; {m} may hold the task"),
                    );
                };
                let offers = offers + 1;
                match answer {
                    Err(e @ LinkError::Unreachable { .. }) => {
                        unanswered += 1;
                        if abandoned {
                            return never_held(ctx);
                        }
                        if unanswered >= UNANSWERED_LIMIT {
                            return ctx.ended_on(
                                CallStatus::Unreachable,
                                format!("{m}'s door stopped answering: {e}"),
                                &e,
                            );
                        }
                        mode = Mode::Busy { offers };
                    }
                    Err(e @ LinkError::Failed { .. }) => {
                        return ctx.ended_on(CallStatus::Failed, format!("{m}'s door {e}"), &e)
                    }
                    Ok(snap) => {
                        unanswered = 0;
                        match classify(&snap) {
                            Offer::Busy => {
                                ctx.record_busy(offers);
                                if abandoned {
                                    return never_held(ctx);
                                }
                                wait = (wait * 2).min(MAX_REOFFER);
                                mode = Mode::Busy { offers };
                            }
                            Offer::Held => {
                                ctx.record_start(&snap.id, offers);
                                if abandoned {
                                    let _ = ctx.link.cancel(&snap.id);
                                    let mut e = ctx.ended(
                                        CallStatus::Abandoned,
                                        format!("the calling task ended just after {m} took the task; a cancel was sent to {m}"),
                                    );
                                    e.member_task = Some(snap.id);
                                    return e;
                                }
                                mode = Mode::Held {
                                    task_id: snap.id,
                                    offers,
                                };
                            }
                            Offer::Ended => return ctx.offer_ending(&snap),
                        }
                    }
                }
            }
            Mode::Held { task_id, offers } => {
                let left = ctx.deadline.saturating_duration_since(Instant::now());
                select! {
                    recv(abandon) -> _ => {
                        let mut e = ctx.ended(
                            CallStatus::Abandoned,
                            format!("the calling task ended while {m} worked on the task; {m}'s task was left running"),
                        );
                        e.member_task = Some(task_id);
                        return e;
                    }
                    recv(after(left.min(POLL_EVERY))) -> _ => {}
                }
                match ctx.link.get(&task_id) {
                    Ok(snap) if snap.id != task_id => {
                        let mut ended = ctx.ended(
                            CallStatus::Failed,
                            format!("{m}'s door broke the protocol: GetTask for task {task_id} answered task {}; the call ended failed", snap.id),
                        );
                        ended.member_task = Some(task_id);
                        return ended;
                    }
                    Ok(snap) if is_busy_refusal(&snap) => {
                        // The offer it took is turned away busy after all: offered
                        // again on the busy schedule, as a refusal of the answer is.
                        ctx.record_busy(offers);
                        if offers > 1 {
                            wait = (wait * 2).min(MAX_REOFFER);
                        }
                        mode = Mode::Busy { offers };
                        unanswered = 0;
                        continue;
                    }
                    Ok(snap) if snap.state.is_terminal() => return ctx.ending_of(&snap),
                    Ok(_) => unanswered = 0,
                    Err(e @ LinkError::Unreachable { .. }) => {
                        unanswered += 1;
                        if unanswered >= UNANSWERED_LIMIT {
                            let mut ended = ctx.ended_on(
                                CallStatus::Unreachable,
                                format!("{m}'s door stopped answering: {e}"),
                                &e,
                            );
                            ended.member_task = Some(task_id);
                            return ended;
                        }
                    }
                    Err(e @ LinkError::Failed { .. }) => {
                        let mut ended =
                            ctx.ended_on(CallStatus::Failed, format!("{m}'s door {e}"), &e);
                        ended.member_task = Some(task_id);
                        return ended;
                    }
                }
                if Instant::now() >= ctx.deadline {
                    let mut e = ctx.ended(
                        CallStatus::TimedOut,
                        format!("{m} did not answer within {}s. It was not cancelled and may still be working on the task.", ctx.deadline_secs),
                    );
                    e.member_task = Some(task_id);
                    return e;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A door whose every answer panics (a bug in a link, a poisoned lock).
    struct Panicking;

    impl Link for Panicking {
        fn send(&self, _: &str, _: &SendMeta) -> Result<Snapshot, LinkError> {
            panic!("send")
        }
        fn get(&self, _: &str) -> Result<Snapshot, LinkError> {
            panic!("get")
        }
        fn cancel(&self, _: &str) -> Result<(), LinkError> {
            Ok(())
        }
        fn host(&self) -> String {
            "localhost".into()
        }
        fn address(&self) -> String {
            "local".into()
        }
    }

    #[test]
    fn a_poller_that_panics_ends_its_call_failed() {
        let dir = tempfile::tempdir().unwrap();
        let trace = Trace::open(&dir.path().join("trace.jsonl"), "ses_test").unwrap();
        let ctx = CallCtx {
            call_id: "mcl_test".into(),
            member: "worker".into(),
            text: "t".into(),
            link: Arc::new(Panicking),
            meta: SendMeta {
                caller: "lead".into(),
                trust: "operator".into(),
            },
            // No deadline to save the call: only the poller's own end can.
            deadline: Instant::now() + Duration::from_secs(24 * 3600),
            deadline_secs: 24 * 3600,
            trace,
            task_id: "tsk_test".into(),
            roster: Arc::new(vec!["lead".into(), "worker".into()]),
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        // The receiver's owner keeps a sender, as the session's calls do.
        let _kept = tx.clone();
        let (_abandon_tx, abandon_rx) = bounded::<()>(0);
        let mode = Mode::Held {
            task_id: "tsk_member".into(),
            offers: 1,
        };
        spawn(ctx, mode, tx, abandon_rx).unwrap();
        let ended = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the crashed poller's call ended");
        assert_eq!(ended.call_id, "mcl_test");
        assert_eq!(ended.status, CallStatus::Failed);
        assert_eq!(ended.output, crashed_output("worker"));
    }
}
