//! The A2A side of a member: [`MemberHandler`] serves a member's [`Board`] behind its
//! door, and [`HttpLink`] reaches a door with the A2A client.
//!
//! A formation member's `SendMessage` carries `metadata.murmur.caller` (the calling
//! member's name) and `metadata.murmur.trust` (`{"class": …, "origin": "peer"}`); the
//! bearer token proves it comes from the formation. A task without a caller came from
//! an ordinary A2A client, and end-without-answer refuses to end it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::board::{Board, Origin};
use super::link::{Link, LinkError, SendMeta, Snapshot, State, StatusStamp};
use crate::a2a::types::{
    AgentCard, AgentSkill, Artifact, Message, MurmurMetadata, NoAnswerBelow, Task, TaskState,
    TaskStatus,
};
use crate::a2a::{A2aClient, ClientError};
use crate::door::{CancelError, TaskHandler, TaskIndex};

/// A member's door handler: the A2A face of its [`Board`].
pub struct MemberHandler {
    /// The member's tasks.
    pub board: Arc<Board>,
    /// The agent card (the door fills in its URL).
    pub card: AgentCard,
    /// The files the member shared (share-file), served at `/peer-files/`; `None`
    /// when it declares no `exports.peer_files`.
    pub files: Option<Arc<crate::tools::peer_file::HandleStore>>,
}

impl MemberHandler {
    /// A handler for `board`, with a card naming the member and what its capsule says
    /// it does.
    pub fn new(board: Arc<Board>, name: &str, description: &str) -> MemberHandler {
        let mut card = AgentCard::new(name, description);
        card.skills.push(AgentSkill {
            id: "task".into(),
            name: "task".into(),
            description: "Takes one task as text and answers it in text.".into(),
            tags: vec!["mur".into()],
            examples: Vec::new(),
        });
        MemberHandler {
            board,
            card,
            files: None,
        }
    }
}

fn state_of(s: &State) -> TaskState {
    TaskState::parse(s.wire())
}

/// A board snapshot as an A2A task (`metadata.murmur` for a no-answer task).
///
/// The status carries the snapshot's stamp (timestamp and message id), and the answer
/// artifact an id made from the task id, so two reads of an unchanged task, above all
/// a terminal one, are byte-identical. A snapshot without a stamp is stamped now.
pub fn to_task(s: &Snapshot) -> Task {
    to_task_with_history(s, Vec::new())
}

/// [`to_task`] with `history` (the board's, oldest first) as the task's `history`, each
/// message's `taskId` and `contextId` set to the task's.
pub fn to_task_with_history(s: &Snapshot, history: Vec<Message>) -> Task {
    let stamp = s.stamp.clone().unwrap_or_else(StatusStamp::now);
    let status = TaskStatus {
        state: state_of(&s.state),
        message: s.message.as_ref().map(|m| {
            let mut msg = Message::agent(m.clone());
            msg.message_id = stamp.message_id.clone();
            msg
        }),
        timestamp: Some(stamp.timestamp),
    };
    let mut t = Task {
        id: s.id.clone(),
        context_id: s.context_id.clone().unwrap_or_else(|| s.id.clone()),
        status,
        artifacts: s
            .answer
            .as_ref()
            .map(|a| {
                let mut art = Artifact::text("answer", a.clone());
                art.artifact_id = format!("art_{}", s.id.strip_prefix("tsk_").unwrap_or(&s.id));
                vec![art]
            })
            .unwrap_or_default(),
        history: Vec::new(),
        metadata: None,
    };
    t.history = history
        .into_iter()
        .map(|mut m| {
            m.task_id = Some(t.id.clone());
            m.context_id = Some(t.context_id.clone());
            m
        })
        .collect();
    t.set_murmur(&MurmurMetadata {
        no_answer: s.no_answer,
        no_answer_below: s
            .no_answer_below
            .iter()
            .map(|(m, st)| NoAnswerBelow {
                member: m.clone(),
                status: st.clone(),
            })
            .collect(),
    });
    t
}

/// An A2A task as a snapshot.
pub fn from_task(t: &Task) -> Snapshot {
    let m = t.murmur();
    Snapshot {
        id: t.id.clone(),
        context_id: Some(t.context_id.clone()).filter(|c| !c.is_empty() && *c != t.id),
        state: State::from_task_state(&t.status.state),
        message: t.status.message_text(),
        answer: (t.status.state == TaskState::Completed).then(|| t.answer_text()),
        no_answer: m.no_answer,
        no_answer_below: m
            .no_answer_below
            .into_iter()
            .map(|b| (b.member, b.status))
            .collect(),
        stamp: t.status.timestamp.clone().map(|timestamp| StatusStamp {
            timestamp,
            message_id: t
                .status
                .message
                .as_ref()
                .map(|m| m.message_id.clone())
                .unwrap_or_default(),
        }),
    }
}

fn origin_of(msg: &Message) -> Origin {
    let murmur = msg
        .metadata
        .as_ref()
        .and_then(|m| m.get("murmur"))
        .and_then(Value::as_object);
    let caller = murmur
        .and_then(|m| m.get("caller"))
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty());
    match caller {
        Some(c) => Origin::Member {
            caller: c.chars().take(100).collect(),
            trust: murmur
                .and_then(|m| m.get("trust"))
                .and_then(|t| t.get("class"))
                .and_then(Value::as_str)
                .unwrap_or("peer")
                .chars()
                .take(100)
                .collect(),
        },
        None => Origin::Client,
    }
}

impl TaskHandler for MemberHandler {
    fn submit(&self, message: Message) -> Task {
        let text = message.text_content();
        if text.trim().is_empty() {
            let mut status = TaskStatus::now(TaskState::Rejected);
            status.message = Some(Message::agent(
                "task rejected: the message has no text part; a member takes its task as text",
            ));
            let id = crate::ids::task_id();
            return Task {
                id: id.clone(),
                context_id: id,
                status,
                artifacts: Vec::new(),
                history: Vec::new(),
                metadata: None,
            };
        }
        let origin = origin_of(&message);
        let snap = self.board.submit(&text, origin);
        if let Some(c) = message.context_id.as_deref().filter(|c| !c.is_empty()) {
            self.board.set_context(&snap.id, c);
        }
        self.board.set_request(&snap.id, message);
        self.get(&snap.id).unwrap_or_else(|| to_task(&snap))
    }

    fn get(&self, task_id: &str) -> Option<Task> {
        self.board
            .get_with_history(task_id)
            .map(|(s, h)| to_task_with_history(&s, h))
    }

    fn cancel(&self, task_id: &str) -> Result<Task, CancelError> {
        match self.board.cancel(task_id) {
            Ok(s) => Ok(self.get(&s.id).unwrap_or_else(|| to_task(&s))),
            Err(_) => match self.get(task_id) {
                Some(t) => Err(CancelError::NotCancelable(Box::new(t))),
                None => Err(CancelError::NotFound),
            },
        }
    }

    fn wait_terminal(&self, task_id: &str, timeout: Duration) -> Option<Task> {
        let s = self.board.wait_terminal(task_id, timeout)?;
        Some(self.get(&s.id).unwrap_or_else(|| to_task(&s)))
    }

    fn list(&self) -> Option<Vec<TaskIndex>> {
        Some(
            self.board
                .list()
                .into_iter()
                .map(|l| TaskIndex {
                    context_id: l.context_id.unwrap_or_else(|| l.id.clone()),
                    id: l.id,
                    state: state_of(&l.state),
                    timestamp: l.timestamp,
                })
                .collect(),
        )
    }

    fn card(&self) -> AgentCard {
        self.card.clone()
    }

    fn files(&self) -> Option<&dyn crate::door::files::FileSource> {
        self.files
            .as_deref()
            .map(|s| s as &dyn crate::door::files::FileSource)
    }
}

/// A member reached over A2A JSON-RPC at its door URL, with its bearer token.
pub struct HttpLink {
    client: A2aClient,
    host: String,
}

/// The request timeout of a call to a member's door unless `request_timeout_secs`
/// sets one: 10 seconds.
pub const DEFAULT_REQUEST_TIMEOUT: Duration =
    Duration::from_secs(crate::manifest::roster::DEFAULT_REQUEST_TIMEOUT_SECS);

/// The connect timeout of a call to a member's door: 3 seconds, or the request timeout
/// when that is shorter.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl HttpLink {
    /// A link to the door at `url` with bearer `token` (empty: none), the default
    /// timeouts, the endpoint discovered from the agent card.
    pub fn new(url: &str, token: &str) -> HttpLink {
        HttpLink::with(url, token, DEFAULT_REQUEST_TIMEOUT, "", true)
    }

    /// A link with a request timeout; `setting` names how it is set, for a timeout
    /// error (e.g. `members.critic.request_timeout_secs in roster.yaml`); `discover`:
    /// whether the endpoint is found from the agent card (a remote member) or `url` is
    /// the endpoint (a local member's own door).
    pub fn with(
        url: &str,
        token: &str,
        request_timeout: Duration,
        setting: &str,
        discover: bool,
    ) -> HttpLink {
        let mut config = crate::a2a::ClientConfig::new(url, token);
        config.request_timeout = request_timeout;
        config.connect_timeout = CONNECT_TIMEOUT;
        config.request_timeout_setting = setting.to_string();
        config.discover = discover;
        HttpLink {
            client: A2aClient::with_config(config),
            host: host_of(url),
        }
    }
}

/// The host of an `http(s)://host[:port]/…` URL, lowercase, without brackets.
pub fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    host.to_ascii_lowercase()
}

/// A client error as a link error: the model's reason without the URL, the detail
/// with it.
fn link_error(e: ClientError) -> LinkError {
    let detail = e.to_string();
    match e {
        ClientError::Unreachable { detail: reason, .. } => {
            LinkError::Unreachable { reason, detail }
        }
        other => LinkError::Failed {
            reason: other.reason(),
            detail,
        },
    }
}

impl HttpLink {
    /// A task a door answered as a snapshot, its status message and answer (text the
    /// peer chose, on its way to a model) scrubbed of this client's token and the
    /// door's address ([`A2aClient::scrub`]).
    fn snapshot(&self, t: &Task) -> Snapshot {
        let mut s = from_task(t);
        s.message = s.message.map(|m| self.client.scrub(&m));
        s.answer = s.answer.map(|a| self.client.scrub(&a));
        s
    }
}

impl Link for HttpLink {
    fn send(&self, text: &str, meta: &SendMeta) -> Result<Snapshot, LinkError> {
        let mut murmur = Map::new();
        murmur.insert("caller".into(), json!(meta.caller));
        murmur.insert(
            "trust".into(),
            json!({"class": meta.trust, "origin": "peer"}),
        );
        let metadata = json!({ "murmur": murmur });
        self.client
            .send_message(text, Some(metadata), true)
            .map(|t| self.snapshot(&t))
            .map_err(link_error)
    }

    fn get(&self, task_id: &str) -> Result<Snapshot, LinkError> {
        self.client
            .get_task_with_history(task_id, Some(0))
            .map(|t| self.snapshot(&t))
            .map_err(link_error)
    }

    fn cancel(&self, task_id: &str) -> Result<(), LinkError> {
        self.client
            .cancel_task(task_id)
            .map(|_| ())
            .map_err(link_error)
    }

    fn host(&self) -> String {
        self.host.clone()
    }

    fn address(&self) -> String {
        match self.client.endpoint() {
            Some(e) if e != self.client.url() => {
                format!("{} (JSON-RPC endpoint {e})", self.client.url())
            }
            _ => self.client.url().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        assert_eq!(host_of("http://127.0.0.1:7431/"), "127.0.0.1");
        assert_eq!(host_of("https://Example.org/a2a"), "example.org");
        assert_eq!(host_of("http://[::1]:80/"), "::1");
        assert_eq!(host_of("http://u:p@h:1"), "h");
    }

    #[test]
    fn a_no_answer_snapshot_round_trips_through_the_wire_task() {
        let s = Snapshot {
            id: "tsk_1".into(),
            state: State::Failed,
            message: Some("critic gave none".into()),
            answer: None,
            no_answer: true,
            no_answer_below: vec![("critic".into(), "no_answer".into())],
            stamp: Some(StatusStamp::now()),
            context_id: None,
        };
        let t = to_task(&s);
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["status"]["state"], "TASK_STATE_FAILED");
        assert_eq!(v["metadata"]["murmur"]["noAnswer"], true);
        assert_eq!(
            v["metadata"]["murmur"]["noAnswerBelow"],
            json!([{"member": "critic", "status": "no_answer"}])
        );
        assert_eq!(from_task(&t), s);
        assert_eq!(
            to_task(&s),
            t,
            "an unchanged snapshot reads the same every time"
        );
    }
}
