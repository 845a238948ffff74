//! A member's task store: what its door answers. Every task a session holds comes
//! through its board: the command line's task, and each `SendMessage` its door takes.
//!
//! An idle session takes a new task; a busy one refuses it with a task created straight
//! into `TASK_STATE_REJECTED`, status message `task rejected: capsule is busy`
//! (`task_acceptance: reject`, the default), or queues it first in, first out
//! (`task_acceptance: queue`). A task ended by end-without-answer reads
//! `TASK_STATE_FAILED` with the reason as its status message and
//! `metadata.murmur.noAnswer: true`. `CancelTask` ends a running task at once.
//!
//! History: a task's A2A `history` is the client's message (kept whole when a door
//! hands it over with [`Board::set_request`]) followed by the agent's earlier status
//! messages, oldest first; the current status message is in `status.message` only
//! (as a2a-sdk 1.3 keeps it). At most [`MAX_AGENT_HISTORY`] agent messages are kept
//! per task (the oldest go first).
//!
//! Retention: every unfinished task, and the [`KEEP_FINISHED`] most recent finished
//! ones while their histories together stay within [`KEEP_HISTORY_BYTES`]; past
//! either bound the oldest finished task is forgotten (`GetTask` answers -32001, and
//! `ListTasks` no longer lists it).
//!
//! Log lines (target `mur::door`, level info; no task text, status text or token):
//! a task received (id, origin, what became of it), each state change, and its end
//! with its state and how long it took from receipt.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use super::link::{Snapshot, State, StatusStamp};
use crate::a2a::types::Message;
use crate::manifest::TaskAcceptance;
use crate::tools::call_member::BUSY_MESSAGE;

/// Finished tasks kept for `GetTask`; older ones are forgotten first.
pub const KEEP_FINISHED: usize = 1000;

/// The bytes of history (the JSON of every kept client message plus the text of every
/// kept agent message) the finished tasks may hold together: 64 MiB. Past it the
/// oldest finished tasks are forgotten first, as past [`KEEP_FINISHED`].
pub const KEEP_HISTORY_BYTES: usize = 64 * 1024 * 1024;

/// Agent status messages kept in one task's history; older ones are dropped first.
pub const MAX_AGENT_HISTORY: usize = 64;

/// The log target of the board's task lines (`mur door` shows it at info).
pub const LOG_TARGET: &str = "mur::door";

/// The status message of a task refused because the session is closing.
pub const CLOSING_MESSAGE: &str = "task rejected: the member's session is closing";

/// Where a task came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `mur run`'s `--task`.
    CommandLine,
    /// Another formation member (its `SendMessage` carried `metadata.murmur.caller`).
    Member {
        /// The calling member.
        caller: String,
        /// The calling task's trust class.
        trust: String,
    },
    /// Any other A2A client of the door.
    Client,
    /// The runtime: a background command of this session exited and no
    /// background-command call returned its exit (spec, "background-command"; only
    /// under `task_acceptance: queue` with `after_task: sleep`).
    Completion {
        /// The command's work id, `wrk_<hex>`.
        work_id: String,
        /// The task that started the command, `tsk_…`.
        started_by: String,
        /// The trust class of the task that started the command, which this task
        /// inherits.
        trust: String,
    },
}

impl Origin {
    /// The formation member that sent the task, if one did.
    pub fn caller(&self) -> Option<&str> {
        match self {
            Origin::Member { caller, .. } => Some(caller),
            _ => None,
        }
    }

    /// `task_start.origin`: `command_line`, `peer`, `client` or `completion`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Origin::CommandLine => "command_line",
            Origin::Member { .. } => "peer",
            Origin::Client => "client",
            Origin::Completion { .. } => "completion",
        }
    }

    /// The task's trust class, as `call-member` passes it on in
    /// `metadata.murmur.trust`: `operator` for the command line, the caller's class for
    /// a member's task, `peer` for any other client, and the starting task's class for
    /// a completion task.
    pub fn trust(&self) -> String {
        match self {
            Origin::CommandLine => "operator".into(),
            Origin::Member { trust, .. } | Origin::Completion { trust, .. } => trust.clone(),
            Origin::Client => "peer".into(),
        }
    }
}

/// A task handed to the session.
#[derive(Debug)]
pub struct Incoming {
    /// `tsk_…`.
    pub id: String,
    /// The task text.
    pub text: String,
    /// Where it came from.
    pub origin: Origin,
    /// Disconnects when the task is cancelled (`CancelTask`).
    pub cancel: Receiver<()>,
}

/// How a task ended, as the session reports it to its board.
#[derive(Debug, Clone, PartialEq)]
pub struct Final {
    /// Completed, failed or canceled.
    pub state: State,
    /// The status message (for a no-answer task: the reason).
    pub message: Option<String>,
    /// The answer of a completed task.
    pub answer: Option<String>,
    /// Ended by end-without-answer.
    pub no_answer: bool,
    /// Members further down this task had no answer from, `(member, status)`.
    pub no_answer_below: Vec<(String, String)>,
}

struct Rec {
    snap: Snapshot,
    cancel: Option<Sender<()>>,
    /// The client's message, when a door handed it over.
    request: Option<Message>,
    /// Earlier agent status messages: (message id, text), oldest first.
    said: VecDeque<(String, String)>,
    /// Bytes of `request` (as JSON) and `said`.
    bytes: usize,
    /// When the board took the task.
    received: Instant,
}

impl Rec {
    fn new(snap: Snapshot, cancel: Option<Sender<()>>) -> Rec {
        Rec {
            snap,
            cancel,
            request: None,
            said: VecDeque::new(),
            bytes: 0,
            received: Instant::now(),
        }
    }

    /// Sets the status; the status message it replaces joins the history, and a change
    /// of state is logged (its end, with the time since receipt, when terminal).
    fn set_status(&mut self, state: State, message: Option<String>) {
        let old_state = self.snap.state.clone();
        if self.snap.message.is_some() && self.snap.message != message {
            let id = self
                .snap
                .stamp
                .as_ref()
                .map(|s| s.message_id.clone())
                .unwrap_or_default();
            let text = self.snap.message.clone().unwrap_or_default();
            self.bytes += text.len();
            self.said.push_back((id, text));
            while self.said.len() > MAX_AGENT_HISTORY {
                if let Some((_, t)) = self.said.pop_front() {
                    self.bytes -= t.len();
                }
            }
        }
        self.snap.set_status(state, message);
        if self.snap.state != old_state {
            if self.snap.state.is_terminal() {
                log::info!(
                    target: LOG_TARGET,
                    "task {} ended {} after {:.3}s",
                    self.snap.id,
                    self.snap.state.wire(),
                    self.received.elapsed().as_secs_f64()
                );
            } else {
                log::info!(target: LOG_TARGET, "task {} {}", self.snap.id, self.snap.state.wire());
            }
        }
    }

    /// The A2A history: the client's message, then the earlier agent messages.
    fn history(&self) -> Vec<Message> {
        let mut h: Vec<Message> = self.request.iter().cloned().collect();
        h.extend(self.said.iter().map(|(id, text)| {
            let mut m = Message::agent(text.clone());
            m.message_id.clone_from(id);
            m
        }));
        h
    }
}

/// One task as [`Board::list`] indexes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// `tsk_…`.
    pub id: String,
    /// The state now.
    pub state: State,
    /// When its status was last set: RFC 3339 UTC with microseconds (sorts as text).
    pub timestamp: String,
    /// The client's `contextId`, when it gave one.
    pub context_id: Option<String>,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, Rec>,
    finished: VecDeque<String>,
    /// Bytes of history held by the tasks in `finished`.
    finished_bytes: usize,
    running: Option<String>,
    queued: VecDeque<String>,
    closed: bool,
    /// [`KEEP_FINISHED`] and [`KEEP_HISTORY_BYTES`] (smaller in tests).
    keep: (usize, usize),
}

/// One member's task store, shared by its session, its door and in-process callers.
pub struct Board {
    acceptance: TaskAcceptance,
    inner: Mutex<Inner>,
    changed: Condvar,
    inbox: Sender<Incoming>,
}

impl Board {
    /// A board and the receiver its session takes tasks from.
    pub fn new(acceptance: TaskAcceptance) -> (Board, Receiver<Incoming>) {
        Board::with_retention(acceptance, KEEP_FINISHED, KEEP_HISTORY_BYTES)
    }

    fn with_retention(
        acceptance: TaskAcceptance,
        finished: usize,
        bytes: usize,
    ) -> (Board, Receiver<Incoming>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (
            Board {
                acceptance,
                inner: Mutex::new(Inner {
                    keep: (finished, bytes),
                    ..Inner::default()
                }),
                changed: Condvar::new(),
                inbox: tx,
            },
            rx,
        )
    }

    /// `SendMessage`: takes, queues or refuses a task, and returns it as it stands.
    pub fn submit(&self, text: &str, origin: Origin) -> Snapshot {
        let id = crate::ids::task_id();
        let mut g = self.inner.lock();
        let busy = g.running.is_some() || !g.queued.is_empty();
        let refuse = if g.closed {
            Some(CLOSING_MESSAGE)
        } else if busy && self.acceptance == TaskAcceptance::Reject {
            Some(BUSY_MESSAGE)
        } else {
            None
        };
        let mut snap = Snapshot {
            id: id.clone(),
            state: State::Submitted,
            message: None,
            answer: None,
            no_answer: false,
            no_answer_below: Vec::new(),
            stamp: Some(StatusStamp::now()),
            context_id: None,
        };
        if let Some(m) = refuse {
            snap.set_status(State::Rejected, Some(m.to_string()));
            log::info!(
                target: LOG_TARGET,
                "task {id} received from {}; ended TASK_STATE_REJECTED: {m}",
                origin_label(&origin)
            );
            g.tasks.insert(id.clone(), Rec::new(snap.clone(), None));
            Self::forget_old(&mut g, id);
            return snap;
        }
        let (cancel_tx, cancel_rx) = bounded(0);
        log::info!(
            target: LOG_TARGET,
            "task {id} received from {}; {}",
            origin_label(&origin),
            if busy { "queued" } else { "TASK_STATE_SUBMITTED" }
        );
        if busy {
            g.queued.push_back(id.clone());
        } else {
            g.running = Some(id.clone());
        }
        g.tasks
            .insert(id.clone(), Rec::new(snap.clone(), Some(cancel_tx)));
        let incoming = Incoming {
            id: id.clone(),
            text: text.to_string(),
            origin,
            cancel: cancel_rx,
        };
        if self.inbox.send(incoming).is_err() {
            // The session is gone: the task can never run.
            g.running = None;
            g.queued.retain(|q| q != &id);
            if let Some(r) = g.tasks.get_mut(&id) {
                r.set_status(State::Rejected, Some(CLOSING_MESSAGE.into()));
                r.cancel = None;
                snap = r.snap.clone();
            }
            Self::forget_old(&mut g, id);
        }
        snap
    }

    /// The session starts `id`: `TASK_STATE_WORKING`. Returns `false` when the task
    /// was cancelled while queued (the session skips it).
    pub fn start(&self, id: &str) -> bool {
        let mut g = self.inner.lock();
        g.queued.retain(|q| q != id);
        let Some(r) = g.tasks.get_mut(id) else {
            return false;
        };
        if r.snap.state.is_terminal() {
            return false;
        }
        let message = r.snap.message.clone();
        r.set_status(State::Working, message);
        g.running = Some(id.to_string());
        self.changed.notify_all();
        true
    }

    /// A `TASK_STATE_WORKING` status message for a running task (e.g. `waiting on
    /// call-member: 2 call(s) outstanding`).
    pub fn status(&self, id: &str, message: &str) {
        let mut g = self.inner.lock();
        if let Some(r) = g.tasks.get_mut(id) {
            if !r.snap.state.is_terminal() {
                let state = r.snap.state.clone();
                r.set_status(state, Some(message.to_string()));
            }
        }
        self.changed.notify_all();
    }

    /// The session ended `id`. A task already terminal (e.g. failed by
    /// [`Board::fail_all`]) keeps its status.
    pub fn finish(&self, id: &str, f: Final) {
        let mut g = self.inner.lock();
        if let Some(r) = g.tasks.get_mut(id).filter(|r| !r.snap.state.is_terminal()) {
            r.snap.answer = f.answer;
            r.set_status(f.state, f.message);
            r.snap.no_answer = f.no_answer;
            r.snap.no_answer_below = f.no_answer_below;
            r.cancel = None;
        }
        if g.running.as_deref() == Some(id) {
            g.running = None;
        }
        Self::forget_old(&mut g, id.to_string());
        self.changed.notify_all();
    }

    /// `GetTask`.
    pub fn get(&self, id: &str) -> Option<Snapshot> {
        self.inner.lock().tasks.get(id).map(|r| r.snap.clone())
    }

    /// `GetTask` with the task's history (see the module doc): the client's message
    /// first, then the agent's earlier status messages, oldest first.
    pub fn get_with_history(&self, id: &str) -> Option<(Snapshot, Vec<Message>)> {
        self.inner
            .lock()
            .tasks
            .get(id)
            .map(|r| (r.snap.clone(), r.history()))
    }

    /// Keeps the client's A2A message that made task `id`, for the task's history.
    /// Its `taskId` and `contextId` are filled in as the task answers them. Returns
    /// the task as it stands.
    pub fn set_request(&self, id: &str, message: Message) -> Option<Snapshot> {
        let mut g = self.inner.lock();
        let r = g.tasks.get_mut(id)?;
        let mut message = message;
        message.task_id = Some(id.to_string());
        message.context_id = Some(r.snap.context_id.clone().unwrap_or_else(|| id.to_string()));
        let size = serde_json::to_vec(&message).map_or(0, |v| v.len());
        if let Some(old) = r.request.replace(message) {
            r.bytes -= serde_json::to_vec(&old).map_or(0, |v| v.len());
        }
        r.bytes += size;
        let snap = r.snap.clone();
        let finished = snap.state.is_terminal() && g.finished.iter().any(|f| f == id);
        if finished {
            g.finished_bytes += size;
            Self::trim(&mut g);
        }
        Some(snap)
    }

    /// Every task the board still keeps, in no particular order (for `ListTasks`).
    pub fn list(&self) -> Vec<Listed> {
        self.inner
            .lock()
            .tasks
            .values()
            .map(|r| Listed {
                id: r.snap.id.clone(),
                state: r.snap.state.clone(),
                timestamp: r
                    .snap
                    .stamp
                    .as_ref()
                    .map(|s| s.timestamp.clone())
                    .unwrap_or_default(),
                context_id: r.snap.context_id.clone(),
            })
            .collect()
    }

    /// Keeps the A2A `contextId` a client gave the message that made task `id`, so
    /// every read of the task answers it. Returns the task as it stands.
    pub fn set_context(&self, id: &str, context_id: &str) -> Option<Snapshot> {
        let mut g = self.inner.lock();
        let r = g.tasks.get_mut(id)?;
        r.snap.context_id = Some(context_id.to_string());
        Some(r.snap.clone())
    }

    /// `CancelTask`: a queued task ends canceled at once; a running one is told to
    /// stop and this waits up to 5 seconds for it to end.
    ///
    /// Errors: the task is unknown or already terminal (the message says which).
    pub fn cancel(&self, id: &str) -> Result<Snapshot, String> {
        let mut g = self.inner.lock();
        let queued = g.queued.iter().any(|q| q == id);
        let Some(r) = g.tasks.get_mut(id) else {
            return Err(format!("task {id} not found"));
        };
        if r.snap.state.is_terminal() {
            return Err(format!(
                "task {id} is {} and cannot be canceled",
                r.snap.state.wire()
            ));
        }
        r.cancel = None; // disconnects the session's cancel receiver
        if queued {
            r.set_status(State::Canceled, Some("canceled before it started".into()));
            let snap = r.snap.clone();
            g.queued.retain(|q| q != id);
            Self::forget_old(&mut g, id.to_string());
            self.changed.notify_all();
            return Ok(snap);
        }
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let snap = g.tasks.get(id).map(|r| r.snap.clone());
            match snap {
                Some(s) if s.state.is_terminal() => return Ok(s),
                Some(s) if Instant::now() >= until => return Ok(s),
                None => return Err(format!("task {id} not found")),
                _ => {
                    self.changed.wait_until(&mut g, until);
                }
            }
        }
    }

    /// Waits until `id` is terminal or `timeout` passes; the task as it then stands.
    pub fn wait_terminal(&self, id: &str, timeout: Duration) -> Option<Snapshot> {
        let until = Instant::now() + timeout;
        let mut g = self.inner.lock();
        loop {
            let s = g.tasks.get(id)?.snap.clone();
            if s.state.is_terminal() || Instant::now() >= until {
                return Some(s);
            }
            self.changed.wait_until(&mut g, until);
        }
    }

    /// Refuses every later task (`task rejected: …closing`) and cancels the queued ones.
    pub fn close(&self) {
        let mut g = self.inner.lock();
        g.closed = true;
        let queued: Vec<String> = g.queued.drain(..).collect();
        for id in queued {
            if let Some(r) = g.tasks.get_mut(&id) {
                r.set_status(
                    State::Canceled,
                    Some("the member's session closed before the task started".into()),
                );
                r.cancel = None;
            }
        }
        self.changed.notify_all();
    }

    /// The session is gone without ending its tasks (it crashed): the running and
    /// queued tasks end `TASK_STATE_FAILED` with `message`, and later ones are refused.
    pub fn fail_all(&self, message: &str) {
        let mut g = self.inner.lock();
        g.closed = true;
        let mut ids: Vec<String> = g.queued.drain(..).collect();
        ids.extend(g.running.take());
        for id in ids {
            if let Some(r) = g.tasks.get_mut(&id) {
                if !r.snap.state.is_terminal() {
                    r.set_status(State::Failed, Some(message.to_string()));
                }
                r.cancel = None;
            }
        }
        self.changed.notify_all();
    }

    fn forget_old(g: &mut Inner, id: String) {
        if g.finished.contains(&id) {
            return;
        }
        g.finished_bytes += g.tasks.get(&id).map_or(0, |r| r.bytes);
        g.finished.push_back(id);
        Self::trim(g);
    }

    /// Forgets the oldest finished tasks while over [`KEEP_FINISHED`] or
    /// [`KEEP_HISTORY_BYTES`].
    fn trim(g: &mut Inner) {
        let (keep, bytes) = g.keep;
        while g.finished.len() > keep || (g.finished_bytes > bytes && !g.finished.is_empty()) {
            if let Some(old) = g.finished.pop_front() {
                let bytes = g.tasks.remove(&old).map_or(0, |r| r.bytes);
                g.finished_bytes = g.finished_bytes.saturating_sub(bytes);
            }
        }
    }
}

/// How a log line names where a task came from (no secret: a member's name at most).
fn origin_label(origin: &Origin) -> String {
    match origin {
        Origin::Member { caller, .. } => format!("member {}", caller.escape_debug()),
        other => other.as_str().replace('_', " "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_member_rejects_then_takes_after_finish() {
        let (b, rx) = Board::new(TaskAcceptance::Reject);
        let t1 = b.submit("one", Origin::CommandLine);
        assert_eq!(t1.state, State::Submitted);
        let t2 = b.submit("two", Origin::Client);
        assert_eq!(t2.state, State::Rejected);
        assert_eq!(
            t2.message.as_deref(),
            Some("task rejected: capsule is busy")
        );
        let inc = rx.try_recv().unwrap();
        assert!(b.start(&inc.id));
        b.finish(
            &inc.id,
            Final {
                state: State::Failed,
                message: Some("no one knew".into()),
                answer: None,
                no_answer: true,
                no_answer_below: vec![],
            },
        );
        let g = b.get(&t1.id).unwrap();
        assert!(g.no_answer);
        assert_eq!(b.submit("three", Origin::Client).state, State::Submitted);
    }

    fn done(b: &Board, id: &str) {
        b.finish(
            id,
            Final {
                state: State::Completed,
                message: None,
                answer: Some("ok".into()),
                no_answer: false,
                no_answer_below: vec![],
            },
        );
    }

    #[test]
    fn history_is_the_request_then_earlier_status_messages_and_is_bounded() {
        let (b, rx) = Board::new(TaskAcceptance::Reject);
        let t = b.submit("hi", Origin::Client);
        let mut m = Message::user("hi");
        m.message_id = "m-1".into();
        b.set_request(&t.id, m);
        let inc = rx.try_recv().unwrap();
        assert!(b.start(&inc.id));
        for i in 0..(MAX_AGENT_HISTORY + 5) {
            b.status(&inc.id, &format!("step {i}"));
        }
        done(&b, &inc.id);
        let (snap, h) = b.get_with_history(&t.id).unwrap();
        assert_eq!(snap.state, State::Completed);
        assert_eq!(h.len(), 1 + MAX_AGENT_HISTORY);
        assert_eq!(h[0].message_id, "m-1");
        assert_eq!(h[0].task_id.as_deref(), Some(t.id.as_str()));
        // The oldest agent messages went first; the last status message before the
        // end is the newest in history.
        assert_eq!(h[1].text_content(), "step 5");
        assert_eq!(
            h.last().unwrap().text_content(),
            format!("step {}", MAX_AGENT_HISTORY + 4)
        );
        assert!(h[1..]
            .iter()
            .all(|m| m.role == crate::a2a::types::Role::Agent));
    }

    #[test]
    fn finished_tasks_are_forgotten_oldest_first_past_the_history_bytes() {
        let (b, rx) = Board::with_retention(TaskAcceptance::Queue, 100, 3600);
        let mut ids = Vec::new();
        for i in 0..4 {
            let t = b.submit("x", Origin::Client);
            b.set_request(&t.id, Message::user("y".repeat(1000 + i)));
            let inc = rx.try_recv().unwrap();
            assert!(b.start(&inc.id));
            done(&b, &inc.id);
            ids.push(t.id);
        }
        // About 1 KB each: the fourth pushed the first out; the rest stay.
        assert!(b.get(&ids[0]).is_none());
        for id in &ids[1..] {
            assert!(b.get(id).is_some(), "{id}");
        }
        assert_eq!(b.list().len(), 3);
        let (b, _rx) = Board::with_retention(TaskAcceptance::Reject, 2, usize::MAX);
        let t: Vec<_> = (0..3).map(|_| b.submit("x", Origin::Client)).collect();
        // One running, two refused busy (finished): within two finished, all stay.
        assert_eq!(b.list().len(), 3);
        let _fourth = b.submit("x", Origin::Client);
        assert!(b.get(&t[1].id).is_none(), "the oldest finished went first");
        assert!(
            b.get(&t[0].id).is_some(),
            "a running task is never forgotten"
        );
    }

    #[test]
    fn queue_mode_queues_and_cancel_of_a_queued_task_is_immediate() {
        let (b, _rx) = Board::new(TaskAcceptance::Queue);
        let _t1 = b.submit("one", Origin::CommandLine);
        let t2 = b.submit("two", Origin::Client);
        assert_eq!(t2.state, State::Submitted);
        let c = b.cancel(&t2.id).unwrap();
        assert_eq!(c.state, State::Canceled);
        assert!(!b.start(&t2.id));
        assert!(b.cancel("tsk_nope").is_err());
    }
}
