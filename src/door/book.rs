//! [`TaskBook`]: a thread-safe store of A2A tasks with state transitions, timestamps
//! and a wait for the terminal state, for [`super::TaskHandler`] implementations.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::CancelError;
use crate::a2a::types::{Artifact, Message, Role, Task, TaskState, TaskStatus};

/// How many tasks a book keeps unless told otherwise. Defaults to 10 000.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// The name of the artifact [`TaskBook::complete`] writes.
pub const ANSWER_ARTIFACT: &str = "response";

/// Why a transition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// No task with that id.
    #[error("task {0} not found")]
    NotFound(String),
    /// The task is already terminal; terminal tasks do not change state.
    #[error("task {id} is already {state}")]
    Terminal {
        /// The task id.
        id: String,
        /// Its terminal state.
        state: TaskState,
    },
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, Task>,
    /// Task ids, oldest first, for eviction.
    order: VecDeque<String>,
}

/// A thread-safe task store. Every change wakes [`TaskBook::wait_terminal`] callers.
///
/// It keeps at most `capacity` tasks: past that, the oldest *terminal* tasks are
/// forgotten (`GetTask` then answers -32001). Tasks that are not terminal are never
/// forgotten, so a handler bounds those itself (e.g. one running task per capsule).
pub struct TaskBook {
    inner: Mutex<Inner>,
    changed: Condvar,
    capacity: usize,
}

impl Default for TaskBook {
    fn default() -> TaskBook {
        TaskBook::new()
    }
}

impl TaskBook {
    /// An empty book keeping up to [`DEFAULT_CAPACITY`] tasks.
    pub fn new() -> TaskBook {
        TaskBook::with_capacity(DEFAULT_CAPACITY)
    }

    /// An empty book keeping up to `capacity` tasks (at least 1).
    pub fn with_capacity(capacity: usize) -> TaskBook {
        TaskBook {
            inner: Mutex::new(Inner::default()),
            changed: Condvar::new(),
            capacity: capacity.max(1),
        }
    }

    /// Creates a task for `message` in `state` (with an agent status message when
    /// `status_text` is given), stamps it now, and stores it.
    ///
    /// The task id is a new `tsk_…` id; the context id is the message's, or a new
    /// `ctx_…` id. The message joins the history with both ids filled in.
    pub fn create(&self, message: Message, state: TaskState, status_text: Option<&str>) -> Task {
        let id = crate::ids::task_id();
        let context_id = message
            .context_id
            .clone()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| format!("ctx_{}", ulid::Ulid::new().to_string().to_lowercase()));
        let mut message = message;
        message.context_id = Some(context_id.clone());
        message.task_id = Some(id.clone());
        let mut task = Task {
            id: id.clone(),
            context_id,
            status: TaskStatus::now(state),
            artifacts: Vec::new(),
            history: vec![message],
            metadata: None,
        };
        if let Some(t) = status_text {
            task.status.message = Some(agent_message(&task, t));
        }
        self.insert(task.clone());
        task
    }

    /// Creates a task straight into `TASK_STATE_REJECTED` with `reason` as its status
    /// message, e.g. [`BUSY_MESSAGE`](crate::a2a::BUSY_MESSAGE).
    pub fn reject(&self, message: Message, reason: &str) -> Task {
        self.create(message, TaskState::Rejected, Some(reason))
    }

    /// Stores a task built by the caller, replacing one with the same id.
    pub fn insert(&self, task: Task) {
        let mut inner = self.inner.lock();
        if inner.tasks.insert(task.id.clone(), task.clone()).is_none() {
            inner.order.push_back(task.id);
        }
        self.evict(&mut inner);
        drop(inner);
        self.changed.notify_all();
    }

    /// The task now, `None` when there is none.
    pub fn get(&self, id: &str) -> Option<Task> {
        self.inner.lock().tasks.get(id).cloned()
    }

    /// How many tasks are stored.
    pub fn len(&self) -> usize {
        self.inner.lock().tasks.len()
    }

    /// `true` when no task is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves a task to `state`, stamped now, with an agent status message when
    /// `status_text` is given. The previous status message, if any, joins the history.
    ///
    /// # Errors
    ///
    /// [`TransitionError::NotFound`], or [`TransitionError::Terminal`] when the task is
    /// already terminal.
    pub fn transition(
        &self,
        id: &str,
        state: TaskState,
        status_text: Option<&str>,
    ) -> Result<Task, TransitionError> {
        self.change(id, |task| {
            let message = status_text.map(|t| agent_message(task, t));
            set_status(task, state, message);
        })
    }

    /// Completes a task with `answer` as one text artifact named
    /// [`ANSWER_ARTIFACT`].
    ///
    /// # Errors
    ///
    /// As [`TaskBook::transition`].
    pub fn complete(&self, id: &str, answer: &str) -> Result<Task, TransitionError> {
        self.change(id, |task| {
            task.artifacts.push(Artifact::text(ANSWER_ARTIFACT, answer));
            set_status(task, TaskState::Completed, None);
        })
    }

    /// Fails a task with `reason` as its status message.
    ///
    /// # Errors
    ///
    /// As [`TaskBook::transition`].
    pub fn fail(&self, id: &str, reason: &str) -> Result<Task, TransitionError> {
        self.transition(id, TaskState::Failed, Some(reason))
    }

    /// Applies `f` to a task that is not terminal yet (artifacts, metadata, a status of
    /// the caller's making) and wakes waiters.
    ///
    /// # Errors
    ///
    /// As [`TaskBook::transition`].
    pub fn update(&self, id: &str, f: impl FnOnce(&mut Task)) -> Result<Task, TransitionError> {
        self.change(id, f)
    }

    /// Cancels a task that is not terminal: CANCELED with `reason` as its status
    /// message.
    ///
    /// # Errors
    ///
    /// [`CancelError::NotFound`], or [`CancelError::NotCancelable`] with the task when
    /// it is terminal.
    pub fn cancel(&self, id: &str, reason: &str) -> Result<Task, CancelError> {
        match self.transition(id, TaskState::Canceled, Some(reason)) {
            Ok(t) => Ok(t),
            Err(TransitionError::NotFound(_)) => Err(CancelError::NotFound),
            Err(TransitionError::Terminal { .. }) => match self.get(id) {
                Some(t) => Err(CancelError::NotCancelable(Box::new(t))),
                None => Err(CancelError::NotFound),
            },
        }
    }

    /// Every stored task as a [`super::TaskIndex`], for [`super::TaskHandler::list`].
    pub fn list(&self) -> Vec<super::TaskIndex> {
        self.inner
            .lock()
            .tasks
            .values()
            .map(|t| super::TaskIndex {
                id: t.id.clone(),
                context_id: t.context_id.clone(),
                state: t.status.state.clone(),
                timestamp: t.status.timestamp.clone().unwrap_or_default(),
            })
            .collect()
    }

    /// Blocks until the task is terminal or `timeout` passes; the task then, `None`
    /// when there is no such task.
    pub fn wait_terminal(&self, id: &str, timeout: Duration) -> Option<Task> {
        let deadline = Instant::now() + timeout;
        let mut inner = self.inner.lock();
        loop {
            let task = inner.tasks.get(id)?;
            if task.is_terminal() || Instant::now() >= deadline {
                return Some(task.clone());
            }
            // A timed-out wait loops once more and returns the task as it is.
            let _ = self.changed.wait_until(&mut inner, deadline);
        }
    }

    fn change(&self, id: &str, f: impl FnOnce(&mut Task)) -> Result<Task, TransitionError> {
        let mut inner = self.inner.lock();
        let task = inner
            .tasks
            .get_mut(id)
            .ok_or_else(|| TransitionError::NotFound(id.to_string()))?;
        if task.is_terminal() {
            return Err(TransitionError::Terminal {
                id: id.to_string(),
                state: task.status.state.clone(),
            });
        }
        f(task);
        let out = task.clone();
        if out.is_terminal() {
            self.evict(&mut inner);
        }
        drop(inner);
        self.changed.notify_all();
        Ok(out)
    }

    /// Forgets the oldest terminal tasks while over capacity.
    fn evict(&self, inner: &mut Inner) {
        if inner.tasks.len() <= self.capacity {
            return;
        }
        let mut excess = inner.tasks.len() - self.capacity;
        let Inner { tasks, order } = inner;
        order.retain(|id| {
            if excess > 0 && tasks.get(id).is_none_or(Task::is_terminal) {
                tasks.remove(id);
                excess -= 1;
                false
            } else {
                true
            }
        });
    }
}

/// An agent message in the task's context.
fn agent_message(task: &Task, text: &str) -> Message {
    let mut m = Message::text(Role::Agent, text);
    m.context_id = Some(task.context_id.clone());
    m.task_id = Some(task.id.clone());
    m
}

fn set_status(task: &mut Task, state: TaskState, message: Option<Message>) {
    if let Some(old) = task.status.message.take() {
        task.history.push(old);
    }
    task.status = TaskStatus {
        state,
        message,
        timestamp: Some(crate::a2a::types::timestamp_now()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_task_moves_to_terminal_and_stays_there() {
        let book = TaskBook::new();
        let t = book.create(Message::user("hi"), TaskState::Submitted, None);
        assert!(t.id.starts_with("tsk_"));
        assert_eq!(t.history[0].task_id.as_deref(), Some(t.id.as_str()));
        book.transition(&t.id, TaskState::Working, Some("working"))
            .unwrap();
        let done = book.complete(&t.id, "answer").unwrap();
        assert_eq!(done.answer_text(), "answer");
        assert_eq!(
            done.history.len(),
            2,
            "the working message joined the history"
        );
        assert!(matches!(
            book.fail(&t.id, "x"),
            Err(TransitionError::Terminal { .. })
        ));
        assert!(matches!(
            book.cancel(&t.id, "x"),
            Err(CancelError::NotCancelable(_))
        ));
        assert_eq!(book.cancel("nope", "x"), Err(CancelError::NotFound));
    }

    #[test]
    fn wait_terminal_wakes_on_completion_and_times_out_otherwise() {
        let book = Arc::new(TaskBook::new());
        let t = book.create(Message::user("hi"), TaskState::Working, None);
        let waited = book
            .wait_terminal(&t.id, Duration::from_millis(30))
            .unwrap();
        assert_eq!(waited.status.state, TaskState::Working);
        let b = book.clone();
        let id = t.id.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            b.complete(&id, "ok").unwrap();
        });
        // Completed, not the Working a wait to the 60 s timeout would return.
        let done = book.wait_terminal(&t.id, Duration::from_secs(60)).unwrap();
        assert_eq!(done.status.state, TaskState::Completed);
        h.join().unwrap();
        assert!(book.wait_terminal("nope", Duration::ZERO).is_none());
    }

    #[test]
    fn only_terminal_tasks_are_evicted() {
        let book = TaskBook::with_capacity(2);
        let live = book.create(Message::user("1"), TaskState::Working, None);
        let done = book.reject(Message::user("2"), "no");
        let third = book.create(Message::user("3"), TaskState::Working, None);
        assert!(book.get(&live.id).is_some());
        assert!(book.get(&done.id).is_none());
        assert!(book.get(&third.id).is_some());
        assert_eq!(book.len(), 2);
    }
}
