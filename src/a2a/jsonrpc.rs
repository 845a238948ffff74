//! JSON-RPC 2.0 envelopes and the A2A 1.0 error codes (architecture page, "Formations
//! and doors"; wire shapes as the a2a-sdk 1.3 captures show).
//!
//! A2A errors carry `error.data`, an array of `google.rpc.ErrorInfo` objects:
//! `{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TASK_NOT_FOUND",
//! "domain": "a2a-protocol.org", "metadata": {}}`. Plain JSON-RPC errors (-32700,
//! -32600, -32601, -32603) carry no data.

use serde_json::{json, Map, Value};

/// The method that creates a task.
pub const SEND_MESSAGE: &str = "SendMessage";
/// The method that reads a task.
pub const GET_TASK: &str = "GetTask";
/// The method that cancels a task.
pub const CANCEL_TASK: &str = "CancelTask";
/// The method that lists tasks (A2A 1.0 §3.1.4).
pub const LIST_TASKS: &str = "ListTasks";

/// -32700: the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// -32600: JSON, but not a JSON-RPC 2.0 request object (batches included).
pub const INVALID_REQUEST: i64 = -32600;
/// -32601: no such method (0.3's `message/send`, `tasks/get`, `tasks/cancel` included).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// -32602: the params do not fit the method.
pub const INVALID_PARAMS: i64 = -32602;
/// -32603: the server failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// -32001: no task with that id.
pub const TASK_NOT_FOUND: i64 = -32001;
/// -32002: the task is terminal and cannot be canceled.
pub const TASK_NOT_CANCELABLE: i64 = -32002;
/// -32003: push notifications are not supported (the card says
/// `pushNotifications: false`).
pub const PUSH_NOTIFICATION_NOT_SUPPORTED: i64 = -32003;
/// -32004: the operation is not supported (e.g. a message to a finished task).
pub const UNSUPPORTED_OPERATION: i64 = -32004;
/// -32005: a content type the agent does not take or produce: none of the accepted
/// output modes, a part no input mode covers, or a request body that is not
/// `application/json`.
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
/// -32009: the `A2A-Version` header is missing (read as 0.3) or not 1.x.
pub const VERSION_NOT_SUPPORTED: i64 = -32009;

/// The `@type` of an ErrorInfo detail.
pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// The `domain` of an A2A ErrorInfo detail.
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";

/// A JSON-RPC error object: `code`, `message` and optional `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The JSON-RPC code, e.g. [`TASK_NOT_FOUND`].
    pub code: i64,
    /// A human-readable message.
    pub message: String,
    /// `error.data`, omitted when `None`.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error without data.
    pub fn plain(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// An error whose data is one ErrorInfo with `reason` and `metadata`.
    pub fn a2a(code: i64, message: impl Into<String>, metadata: Map<String, Value>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: Some(json!([error_info(reason_for(code), metadata)])),
        }
    }

    /// -32001 `Task not found`.
    pub fn task_not_found() -> RpcError {
        RpcError::a2a(TASK_NOT_FOUND, "Task not found", Map::new())
    }

    /// -32002 `Task cannot be canceled`.
    pub fn task_not_cancelable() -> RpcError {
        RpcError::a2a(TASK_NOT_CANCELABLE, "Task cannot be canceled", Map::new())
    }

    /// -32602 `Invalid params`, with the reason in `metadata.parseError`.
    pub fn invalid_params(detail: impl Into<String>) -> RpcError {
        let mut m = Map::new();
        m.insert("parseError".into(), Value::String(detail.into()));
        RpcError::a2a(INVALID_PARAMS, "Invalid params", m)
    }

    /// -32602 `Validation failed` for one field, as the SDK writes it: an ErrorInfo with
    /// `metadata.errors` and a `google.rpc.BadRequest` with `fieldViolations`.
    pub fn validation(field: &str, description: &str) -> RpcError {
        RpcError {
            code: INVALID_PARAMS,
            message: "Validation failed".into(),
            data: Some(json!([
                error_info("INVALID_PARAMS", {
                    let mut m = Map::new();
                    m.insert("errors".into(), json!([{"field": field, "message": description}]));
                    m
                }),
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": field, "description": description}]
                }
            ])),
        }
    }

    /// -32009 for the version a request carried (`0.3` when the header is missing).
    pub fn version_not_supported(actual: &str) -> RpcError {
        RpcError::a2a(
            VERSION_NOT_SUPPORTED,
            format!(
                "A2A version '{actual}' is not supported by this handler. Expected version '1.0'."
            ),
            Map::new(),
        )
    }

    /// The `error` object.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("code".into(), json!(self.code));
        m.insert("message".into(), Value::String(self.message.clone()));
        if let Some(d) = &self.data {
            m.insert("data".into(), d.clone());
        }
        Value::Object(m)
    }

    /// Reads an `error` object; `None` when `code` is not an integer.
    pub fn from_value(v: &Value) -> Option<RpcError> {
        Some(RpcError {
            code: v.get("code")?.as_i64()?,
            message: v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            data: v.get("data").cloned(),
        })
    }

    /// The `reason` of the first ErrorInfo in `data`, if any.
    pub fn reason(&self) -> Option<&str> {
        self.data
            .as_ref()?
            .as_array()?
            .iter()
            .find(|d| d.get("@type").and_then(Value::as_str) == Some(ERROR_INFO_TYPE))?
            .get("reason")?
            .as_str()
    }
}

/// The ErrorInfo `reason` for an A2A code (`INTERNAL_ERROR` for any other).
pub fn reason_for(code: i64) -> &'static str {
    match code {
        TASK_NOT_FOUND => "TASK_NOT_FOUND",
        TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
        PUSH_NOTIFICATION_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
        UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
        CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
        VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
        INVALID_PARAMS => "INVALID_PARAMS",
        INVALID_REQUEST => "INVALID_REQUEST",
        _ => "INTERNAL_ERROR",
    }
}

/// One ErrorInfo object.
pub fn error_info(reason: &str, metadata: Map<String, Value>) -> Value {
    json!({
        "@type": ERROR_INFO_TYPE,
        "reason": reason,
        "domain": ERROR_DOMAIN,
        "metadata": metadata,
    })
}

/// A success response: `{"result": …, "id": …, "jsonrpc": "2.0"}`.
pub fn success(id: &Value, result: Value) -> Value {
    json!({"result": result, "id": id, "jsonrpc": "2.0"})
}

/// An error response: `{"error": …, "id": …, "jsonrpc": "2.0"}`.
pub fn failure(id: &Value, error: &RpcError) -> Value {
    json!({"error": error.to_value(), "id": id, "jsonrpc": "2.0"})
}

/// A request: `{"jsonrpc": "2.0", "id": …, "method": …, "params": …}`.
pub fn request(id: &Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Why [`parse_strict`] refused a body.
#[derive(Debug)]
pub enum StrictError {
    /// Not JSON (serde_json's error, with its line and column).
    Syntax(serde_json::Error),
    /// An object names a key twice.
    Duplicate {
        /// The key, as decoded.
        key: String,
        /// Where the object is: empty for the top level, else a path such as
        /// `params` or `params.message.parts[0]`.
        path: String,
    },
}

/// A JSON body as a [`Value`], refusing an object that names a key twice (at any
/// depth) instead of keeping the last one as serde_json does: two `method` keys must
/// not let the second one run unseen.
///
/// # Errors
///
/// [`StrictError::Syntax`] for a body that is not JSON, [`StrictError::Duplicate`]
/// for the first duplicate key met.
pub fn parse_strict(body: &[u8]) -> Result<Value, StrictError> {
    use serde::de::DeserializeSeed;
    let dup = std::cell::RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = Strict {
        path: String::new(),
        dup: &dup,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match (parsed, dup.into_inner()) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some((key, path))) => Err(StrictError::Duplicate { key, path }),
        (Err(e), None) => Err(StrictError::Syntax(e)),
    }
}

/// The seed of [`parse_strict`]: the path of the value it reads, and where the first
/// duplicate is noted.
struct Strict<'a> {
    path: String,
    dup: &'a std::cell::RefCell<Option<(String, String)>>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict {
            path: format!("{}[{}]", self.path, out.len()),
            dup: self.dup,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                *self.dup.borrow_mut() = Some((key, self.path));
                return Err(serde::de::Error::custom("duplicate key"));
            }
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            let v = map.next_value_seed(Strict {
                path,
                dup: self.dup,
            })?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// A response's JSON text with its `id` written as `raw_id`, the request's id exactly
/// as sent (`123456789012345678901234567890` stays that, where a [`Value`] would
/// make it `1.2345678901234568e29`). Without `raw_id`, or for a response that is not
/// an object, the response as serde_json writes it.
pub fn response_text(answer: &Value, raw_id: Option<&serde_json::value::RawValue>) -> String {
    struct WithId<'a>(&'a Map<String, Value>, &'a serde_json::value::RawValue);
    impl serde::Serialize for WithId<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let mut m = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in self.0 {
                if k == "id" {
                    m.serialize_entry(k, self.1)?;
                } else {
                    m.serialize_entry(k, v)?;
                }
            }
            m.end()
        }
    }
    match (answer, raw_id) {
        (Value::Object(m), Some(raw)) if m.contains_key("id") => {
            serde_json::to_string(&WithId(m, raw)).unwrap_or_else(|_| answer.to_string())
        }
        _ => answer.to_string(),
    }
}

/// The text of the value at `path` (object keys) in a JSON body, exactly as sent:
/// `100000000000000000000` where a [`Value`] says `1e20`. `None` when the body or a
/// step on the path is not an object, or the key is missing.
pub fn text_at(body: &[u8], path: &[&str]) -> Option<String> {
    use serde_json::value::RawValue;
    use std::collections::HashMap;
    let (first, rest) = path.split_first()?;
    let top: HashMap<String, &RawValue> = serde_json::from_slice(body).ok()?;
    let mut raw: &RawValue = top.get(*first)?;
    for key in rest {
        let m: HashMap<String, &RawValue> = serde_json::from_str(raw.get()).ok()?;
        raw = m.get(*key)?;
    }
    Some(raw.get().to_string())
}
