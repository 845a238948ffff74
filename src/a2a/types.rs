//! A2A 1.0 wire types in ProtoJSON form: camelCase field names (the snake_case proto
//! names are accepted too), enums by proto name (`TASK_STATE_WORKING`, `ROLE_USER`),
//! empty fields omitted, unknown fields ignored.
//!
//! Parsing never fails on a spelling we do not know: an unknown task state or role
//! becomes an `Unknown(String)` variant, and an unknown field is dropped.

use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The key under `metadata` that carries `mur`'s own fields.
pub const MURMUR_METADATA_KEY: &str = "murmur";

/// How many `noAnswerBelow` entries are read from a peer's task (spec: call-member,
/// "keeps at most 8").
pub const MAX_NO_ANSWER_BELOW: usize = 8;

/// The state of a task (A2A `TaskState`), serialized by proto name.
///
/// Terminal states: [`Completed`](TaskState::Completed), [`Failed`](TaskState::Failed),
/// [`Canceled`](TaskState::Canceled), [`Rejected`](TaskState::Rejected).
/// `TASK_STATE_SUBMITTED` is not terminal. The 0.3 lowercase spellings
/// (`working`, `input-required`, …) are accepted on input; any other spelling,
/// `TASK_STATE_UNSPECIFIED` included, parses as [`Unknown`](TaskState::Unknown) and is
/// written back unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// `TASK_STATE_SUBMITTED`: accepted, not started.
    Submitted,
    /// `TASK_STATE_WORKING`.
    Working,
    /// `TASK_STATE_INPUT_REQUIRED`: waits for another message from the client.
    InputRequired,
    /// `TASK_STATE_COMPLETED` (terminal): the answer is in the artifacts.
    Completed,
    /// `TASK_STATE_FAILED` (terminal): the status message says why.
    Failed,
    /// `TASK_STATE_CANCELED` (terminal).
    Canceled,
    /// `TASK_STATE_REJECTED` (terminal): the agent did not take the task, e.g.
    /// [`BUSY_MESSAGE`](crate::a2a::BUSY_MESSAGE).
    Rejected,
    /// `TASK_STATE_AUTH_REQUIRED`.
    AuthRequired,
    /// Any other spelling, kept as sent.
    Unknown(String),
}

impl TaskState {
    /// The proto name, e.g. `TASK_STATE_WORKING`.
    pub fn as_str(&self) -> &str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
            TaskState::Unknown(s) => s,
        }
    }

    /// Parses a state in any casing: the proto name (`TASK_STATE_WORKING`), the bare
    /// name (`WORKING`, `Working`), the 0.3 spelling (`working`, `input-required`),
    /// with `-` or `_` alike, and both cancel spellings (`CANCELED`, `CANCELLED`).
    /// Anything else, `TASK_STATE_UNSPECIFIED` included, is `Unknown`, kept as sent.
    pub fn parse(s: &str) -> TaskState {
        let norm = s.trim().to_ascii_uppercase().replace('-', "_");
        let bare = norm.strip_prefix("TASK_STATE_").unwrap_or(&norm);
        match bare {
            "SUBMITTED" => TaskState::Submitted,
            "WORKING" => TaskState::Working,
            "INPUT_REQUIRED" => TaskState::InputRequired,
            "COMPLETED" => TaskState::Completed,
            "FAILED" => TaskState::Failed,
            "CANCELED" | "CANCELLED" => TaskState::Canceled,
            "REJECTED" => TaskState::Rejected,
            "AUTH_REQUIRED" => TaskState::AuthRequired,
            _ => TaskState::Unknown(s.to_string()),
        }
    }

    /// The state of a ProtoJSON enum number (`TaskState` of A2A 1.0: 1 SUBMITTED,
    /// 2 WORKING, 3 COMPLETED, 4 FAILED, 5 CANCELED, 6 INPUT_REQUIRED, 7 REJECTED,
    /// 8 AUTH_REQUIRED); 0 (UNSPECIFIED) and any other number are `Unknown`.
    pub fn from_number(n: i64) -> TaskState {
        match n {
            1 => TaskState::Submitted,
            2 => TaskState::Working,
            3 => TaskState::Completed,
            4 => TaskState::Failed,
            5 => TaskState::Canceled,
            6 => TaskState::InputRequired,
            7 => TaskState::Rejected,
            8 => TaskState::AuthRequired,
            0 => TaskState::Unknown("TASK_STATE_UNSPECIFIED".to_string()),
            n => TaskState::Unknown(n.to_string()),
        }
    }

    /// `true` for COMPLETED, FAILED, CANCELED and REJECTED: the task will not change
    /// again. An unknown state is not terminal.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for TaskState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TaskState {
    /// A string in any casing ([`TaskState::parse`]) or a ProtoJSON enum number
    /// ([`TaskState::from_number`]).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(TaskState::parse(&s)),
            Value::Number(n) => Ok(n
                .as_i64()
                .map_or_else(|| TaskState::Unknown(n.to_string()), TaskState::from_number)),
            other => Err(serde::de::Error::custom(format!(
                "a task state is a string, found {}",
                match other {
                    Value::Null => "null",
                    Value::Bool(_) => "a boolean",
                    Value::Array(_) => "an array",
                    _ => "an object",
                }
            ))),
        }
    }
}

/// Who wrote a message (A2A `Role`): `ROLE_USER` or `ROLE_AGENT` on the wire; `user`
/// and `agent` are accepted; any other spelling is kept as [`Role::Unknown`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    /// `ROLE_USER`: the client.
    User,
    /// `ROLE_AGENT`: the agent serving the task.
    Agent,
    /// Any other spelling, kept as sent.
    Unknown(String),
}

impl Role {
    /// The proto name, e.g. `ROLE_USER`.
    pub fn as_str(&self) -> &str {
        match self {
            Role::User => "ROLE_USER",
            Role::Agent => "ROLE_AGENT",
            Role::Unknown(s) => s,
        }
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "ROLE_USER" | "user" => Role::User,
            "ROLE_AGENT" | "agent" => Role::Agent,
            _ => Role::Unknown(s),
        })
    }
}

/// One part of a message or artifact (A2A `Part`). A text part is `{"text": "…"}`;
/// the other kinds (`data`, `url`, `raw`) are carried but `mur` reads only text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// The text of a text part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Structured data of a data part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// A file by URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A file inline, base64 (ProtoJSON bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// The media type, e.g. `text/plain`.
    #[serde(default, alias = "media_type", skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// A file name for a file part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Part {
    /// A text part, `{"text": text}`.
    pub fn text(text: impl Into<String>) -> Part {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }

    /// What the part carries: `text`, `data`, `url` or `raw` (the first present, in
    /// that order); `None` for a part with none of them.
    pub fn kind(&self) -> Option<&'static str> {
        if self.text.is_some() {
            Some("text")
        } else if self.data.is_some() {
            Some("data")
        } else if self.url.is_some() {
            Some("url")
        } else if self.raw.is_some() {
            Some("raw")
        } else {
            None
        }
    }

    /// The part's media type: its `mediaType` when it has a non-empty one, else
    /// `text/plain` for text, `application/json` for data and
    /// `application/octet-stream` for a file (`url` or `raw`). Empty for a part that
    /// carries nothing.
    pub fn effective_media_type(&self) -> &str {
        match self.media_type.as_deref().filter(|m| !m.trim().is_empty()) {
            Some(m) => m.trim(),
            None => match self.kind() {
                Some("text") => "text/plain",
                Some("data") => "application/json",
                Some(_) => "application/octet-stream",
                None => "",
            },
        }
    }
}

/// One message of a conversation (A2A `Message`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The sender's id for this message.
    #[serde(alias = "message_id", default)]
    pub message_id: String,
    /// Who wrote it.
    pub role: Role,
    /// The content; a valid request carries at least one part.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// The conversation it belongs to.
    #[serde(default, alias = "context_id", skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task it belongs to; a client sets it only to continue a task.
    #[serde(default, alias = "task_id", skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Message {
    /// A message with one text part and a fresh message id (`msg_` + ULID).
    pub fn text(role: Role, text: impl Into<String>) -> Message {
        Message {
            message_id: format!("msg_{}", ulid::Ulid::new().to_string().to_lowercase()),
            role,
            parts: vec![Part::text(text)],
            context_id: None,
            task_id: None,
            metadata: None,
        }
    }

    /// A `ROLE_USER` message with one text part.
    pub fn user(text: impl Into<String>) -> Message {
        Message::text(Role::User, text)
    }

    /// A `ROLE_AGENT` message with one text part.
    pub fn agent(text: impl Into<String>) -> Message {
        Message::text(Role::Agent, text)
    }

    /// Its text parts joined with newlines (other parts skipped).
    pub fn text_content(&self) -> String {
        join_text(&self.parts)
    }
}

/// An output of a task (A2A `Artifact`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Unique within the task.
    #[serde(alias = "artifact_id", default)]
    pub artifact_id: String,
    /// A human-readable name, e.g. `response`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Artifact {
    /// An artifact with one text part and a fresh id (`art_` + ULID).
    pub fn text(name: impl Into<String>, text: impl Into<String>) -> Artifact {
        Artifact {
            artifact_id: format!("art_{}", ulid::Ulid::new().to_string().to_lowercase()),
            name: Some(name.into()),
            description: None,
            parts: vec![Part::text(text)],
            metadata: None,
        }
    }
}

/// The status of a task (A2A `TaskStatus`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// An agent message about the state, e.g. why the task failed or was rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When the state was entered: RFC 3339 UTC, e.g. `2026-11-30T15:48:54.031120Z`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

impl TaskStatus {
    /// A status in `state` stamped now, without a message.
    pub fn now(state: TaskState) -> TaskStatus {
        TaskStatus {
            state,
            message: None,
            timestamp: Some(timestamp_now()),
        }
    }

    /// The text of the status message, if there is one with text.
    pub fn message_text(&self) -> Option<String> {
        self.message
            .as_ref()
            .map(Message::text_content)
            .filter(|t| !t.is_empty())
    }
}

/// A unit of work (A2A `Task`). `GetTask` and `CancelTask` return it bare;
/// `SendMessage` returns it as `{"task": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The task id, chosen by the server.
    pub id: String,
    /// The conversation id, chosen by the server unless the message named one.
    #[serde(alias = "context_id", default)]
    pub context_id: String,
    /// The current status.
    pub status: TaskStatus,
    /// The outputs; a completed task's answer is the text of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// The messages exchanged, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// Free-form metadata; `mur`'s own fields live under `murmur` (see
    /// [`MurmurMetadata`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Task {
    /// The answer: the text parts of every artifact, in order, joined with newlines.
    /// Empty when there are no text parts.
    pub fn answer_text(&self) -> String {
        let parts: Vec<&str> = self
            .artifacts
            .iter()
            .flat_map(|a| a.parts.iter())
            .filter_map(|p| p.text.as_deref())
            .collect();
        parts.join("\n")
    }

    /// The state (shorthand for `status.state`).
    pub fn state(&self) -> &TaskState {
        &self.status.state
    }

    /// `true` once the task is in a terminal state.
    pub fn is_terminal(&self) -> bool {
        self.status.state.is_terminal()
    }

    /// `true` when the task was rejected with exactly
    /// [`BUSY_MESSAGE`](crate::a2a::BUSY_MESSAGE) (surrounding whitespace ignored).
    pub fn is_busy_rejection(&self) -> bool {
        self.status.state == TaskState::Rejected
            && self.status.message_text().as_deref().map(str::trim)
                == Some(crate::a2a::BUSY_MESSAGE)
    }

    /// `mur`'s metadata (`metadata.murmur`), tolerant of a peer's shapes: a missing or
    /// malformed value reads as the default.
    pub fn murmur(&self) -> MurmurMetadata {
        self.metadata
            .as_ref()
            .and_then(|m| m.get(MURMUR_METADATA_KEY))
            .map(MurmurMetadata::from_value)
            .unwrap_or_default()
    }

    /// Sets `metadata.murmur`, keeping any other metadata; a default value removes it.
    pub fn set_murmur(&mut self, murmur: &MurmurMetadata) {
        let meta = self.metadata.get_or_insert_with(Map::new);
        if murmur == &MurmurMetadata::default() {
            meta.remove(MURMUR_METADATA_KEY);
        } else {
            meta.insert(MURMUR_METADATA_KEY.to_string(), murmur.to_value());
        }
        if meta.is_empty() {
            self.metadata = None;
        }
    }

    /// A copy with only the last `n` history messages (`historyLength`); `None` keeps
    /// all of it.
    pub fn with_history_length(mut self, n: Option<usize>) -> Task {
        if let Some(n) = n {
            let len = self.history.len();
            if len > n {
                self.history.drain(..len - n);
            }
        }
        self
    }
}

/// `metadata.murmur` of a member's task (spec: end-without-answer, "How the task
/// ends"; call-member, "How the answer arrives").
///
/// Wire shape: `{"noAnswer": true, "noAnswerBelow": [{"member": "critic", "status":
/// "timed_out"}]}`; empty fields omitted. A bare string in `noAnswerBelow` is read as a
/// member whose status is `unknown`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MurmurMetadata {
    /// The member ended its task with end-without-answer (its state is FAILED).
    pub no_answer: bool,
    /// Members further down that gave this task no answer; at most
    /// [`MAX_NO_ANSWER_BELOW`] are read.
    pub no_answer_below: Vec<NoAnswerBelow>,
}

/// One member further down that gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoAnswerBelow {
    /// The roster member name.
    pub member: String,
    /// How its call ended: `no_answer`, `failed`, `canceled`, `rejected`, `timed_out`,
    /// `unreachable`, …
    pub status: String,
}

impl MurmurMetadata {
    /// Reads the value of `metadata.murmur`; never fails.
    pub fn from_value(v: &Value) -> MurmurMetadata {
        let no_answer = v
            .get("noAnswer")
            .or_else(|| v.get("no_answer"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let below = v
            .get("noAnswerBelow")
            .or_else(|| v.get("no_answer_below"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|e| match e {
                        Value::String(s) => Some(NoAnswerBelow {
                            member: s.clone(),
                            status: "unknown".to_string(),
                        }),
                        Value::Object(o) => Some(NoAnswerBelow {
                            member: o.get("member")?.as_str()?.to_string(),
                            status: o
                                .get("status")
                                .and_then(Value::as_str)
                                .unwrap_or("unknown")
                                .to_string(),
                        }),
                        _ => None,
                    })
                    .take(MAX_NO_ANSWER_BELOW)
                    .collect()
            })
            .unwrap_or_default();
        MurmurMetadata {
            no_answer,
            no_answer_below: below,
        }
    }

    /// The wire value, empty fields omitted.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        if self.no_answer {
            m.insert("noAnswer".into(), Value::Bool(true));
        }
        if !self.no_answer_below.is_empty() {
            m.insert(
                "noAnswerBelow".into(),
                serde_json::to_value(&self.no_answer_below).unwrap_or(Value::Null),
            );
        }
        Value::Object(m)
    }
}

/// A door the agent can be reached at (A2A `AgentInterface`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// The RPC URL.
    pub url: String,
    /// `JSONRPC` for a `mur` door.
    #[serde(alias = "protocol_binding", default)]
    pub protocol_binding: String,
    /// `1.0`.
    #[serde(
        alias = "protocol_version",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub protocol_version: String,
}

/// What the agent supports (A2A `AgentCapabilities`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// Server-sent event streams; `false` for a `mur` door.
    #[serde(default)]
    pub streaming: bool,
    /// Push notifications; `false` for a `mur` door.
    #[serde(alias = "push_notifications", default)]
    pub push_notifications: bool,
}

/// A skill listed on the card (A2A `AgentSkill`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// A stable id.
    pub id: String,
    /// A human-readable name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Example prompts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// The agent card served at `GET /.well-known/agent-card.json` (A2A `AgentCard`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// The agent's name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Where it can be reached; a door fills in its own URL.
    #[serde(alias = "supported_interfaces", default)]
    pub supported_interfaces: Vec<AgentInterface>,
    /// The agent's version.
    #[serde(default)]
    pub version: String,
    /// What it supports.
    #[serde(default)]
    pub capabilities: AgentCapabilities,
    /// Media types it accepts, e.g. `text/plain`.
    #[serde(alias = "default_input_modes", default)]
    pub default_input_modes: Vec<String>,
    /// Media types it answers in.
    #[serde(alias = "default_output_modes", default)]
    pub default_output_modes: Vec<String>,
    /// Its skills.
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
    /// Security schemes by name (ProtoJSON `SecurityScheme`), kept as JSON.
    #[serde(
        alias = "security_schemes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub security_schemes: Option<Value>,
    /// Which schemes a request must satisfy, kept as JSON.
    #[serde(
        alias = "security_requirements",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub security_requirements: Option<Value>,
}

impl AgentCard {
    /// A card with the given name and description, version `1.0.0`, no streaming,
    /// `text/plain` in and out, and no interfaces or skills yet.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> AgentCard {
        AgentCard {
            name: name.into(),
            description: description.into(),
            supported_interfaces: Vec::new(),
            version: "1.0.0".to_string(),
            capabilities: AgentCapabilities::default(),
            default_input_modes: vec!["text/plain".to_string()],
            default_output_modes: vec!["text/plain".to_string()],
            skills: Vec::new(),
            security_schemes: None,
            security_requirements: None,
        }
    }

    /// The URL of the first JSON-RPC interface, if any.
    pub fn jsonrpc_url(&self) -> Option<&str> {
        self.supported_interfaces
            .iter()
            .find(|i| i.protocol_binding.eq_ignore_ascii_case("JSONRPC"))
            .map(|i| i.url.as_str())
    }
}

/// Now as an RFC 3339 UTC timestamp with microseconds, the form A2A peers write.
pub fn timestamp_now() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}

fn join_text(parts: &[Part]) -> String {
    let t: Vec<&str> = parts.iter().filter_map(|p| p.text.as_deref()).collect();
    t.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_captured_completed_task_parses_and_answers() {
        let v = json!({
            "id": "a353", "contextId": "9d67",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-30T15:48:54.031120Z"},
            "artifacts": [{"artifactId": "5c73", "name": "reply", "parts": [{"text": "echo: hello"}]}],
            "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}], "extensions": []}],
            "somethingNew": 1
        });
        let t: Task = serde_json::from_value(v).unwrap();
        assert!(t.is_terminal());
        assert_eq!(t.answer_text(), "echo: hello");
        assert_eq!(t.history[0].role, Role::User);
    }

    #[test]
    fn an_unknown_state_does_not_break_parsing() {
        let t: Task = serde_json::from_value(json!({
            "id": "x", "context_id": "c", "status": {"state": "TASK_STATE_PONDERING"}
        }))
        .unwrap();
        assert_eq!(
            t.status.state,
            TaskState::Unknown("TASK_STATE_PONDERING".into())
        );
        assert!(!t.is_terminal());
        assert_eq!(
            serde_json::to_value(&t).unwrap()["status"]["state"],
            "TASK_STATE_PONDERING"
        );
    }

    #[test]
    fn states_parse_in_any_casing_and_both_cancel_spellings() {
        for (spelling, state) in [
            ("TASK_STATE_COMPLETED", TaskState::Completed),
            ("task_state_completed", TaskState::Completed),
            ("Completed", TaskState::Completed),
            ("COMPLETED", TaskState::Completed),
            ("TASK_STATE_CANCELED", TaskState::Canceled),
            ("TASK_STATE_CANCELLED", TaskState::Canceled),
            ("CANCELLED", TaskState::Canceled),
            ("canceled", TaskState::Canceled),
            ("Cancelled", TaskState::Canceled),
            ("input-required", TaskState::InputRequired),
            ("TASK_STATE_INPUT_REQUIRED", TaskState::InputRequired),
            ("auth_required", TaskState::AuthRequired),
            ("rejected", TaskState::Rejected),
            ("Working", TaskState::Working),
            ("submitted", TaskState::Submitted),
            ("FAILED", TaskState::Failed),
        ] {
            assert_eq!(TaskState::parse(spelling), state, "{spelling}");
            let t: TaskStatus = serde_json::from_value(json!({"state": spelling})).unwrap();
            assert_eq!(t.state, state, "{spelling}");
        }
        for s in ["TASK_STATE_UNSPECIFIED", "unknown", "", "TASK_STATE_"] {
            assert_eq!(TaskState::parse(s), TaskState::Unknown(s.into()), "{s:?}");
        }
        let t: TaskStatus = serde_json::from_value(json!({"state": 3})).unwrap();
        assert_eq!(t.state, TaskState::Completed);
        let t: TaskStatus = serde_json::from_value(json!({"state": 0})).unwrap();
        assert_eq!(t.state, TaskState::Unknown("TASK_STATE_UNSPECIFIED".into()));
        let e = serde_json::from_value::<TaskStatus>(json!({"state": null})).unwrap_err();
        assert!(
            e.to_string()
                .contains("a task state is a string, found null"),
            "{e}"
        );
    }

    #[test]
    fn empty_fields_are_omitted_and_names_are_camel_case() {
        let mut m = Message::user("hi");
        m.task_id = Some("t".into());
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["role"], "ROLE_USER");
        assert_eq!(v["taskId"], "t");
        assert!(v.get("contextId").is_none());
        assert_eq!(v["parts"], json!([{"text": "hi"}]));
        let t = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: None,
            },
            artifacts: vec![],
            history: vec![],
            metadata: None,
        };
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}})
        );
    }

    #[test]
    fn murmur_metadata_round_trips_and_tolerates_strings() {
        let mut t: Task = serde_json::from_value(json!({
            "id": "x", "contextId": "c", "status": {"state": "TASK_STATE_FAILED"},
            "metadata": {"other": 1, "murmur": {"noAnswer": true, "noAnswerBelow": ["critic", {"member": "w", "status": "timed_out"}, 5]}}
        }))
        .unwrap();
        let m = t.murmur();
        assert!(m.no_answer);
        assert_eq!(m.no_answer_below.len(), 2);
        assert_eq!(m.no_answer_below[1].status, "timed_out");
        t.set_murmur(&MurmurMetadata::default());
        assert_eq!(
            serde_json::to_value(&t.metadata).unwrap(),
            json!({"other": 1})
        );
        t.set_murmur(&m);
        assert_eq!(t.murmur(), m);
    }

    #[test]
    fn busy_rejection_needs_the_exact_message() {
        let mut t: Task = serde_json::from_value(json!({
            "id": "x", "contextId": "c", "status": {"state": "TASK_STATE_REJECTED",
            "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "task rejected: capsule is busy"}]}}
        }))
        .unwrap();
        assert!(t.is_busy_rejection());
        t.status.message = Some(Message::agent("task rejected: session closing"));
        assert!(!t.is_busy_rejection());
    }

    #[test]
    fn history_length_keeps_the_last_messages() {
        let mut t: Task = serde_json::from_value(
            json!({"id": "x", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}),
        )
        .unwrap();
        t.history = vec![Message::user("1"), Message::agent("2"), Message::agent("3")];
        let t2 = t.clone().with_history_length(Some(1));
        assert_eq!(t2.history[0].text_content(), "3");
        assert_eq!(t.with_history_length(None).history.len(), 3);
    }
}
