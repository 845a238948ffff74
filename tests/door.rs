//! The door (A2A 1.0 JSON-RPC server) and the A2A client, against each other and against
//! the official Python SDK (a2a-sdk 1.3).
//!
//! Response shapes follow the SDK wire captures kept with the design notes. The SDK
//! tests need `MUR_TEST_VENV`: a venv with `a2a-sdk[http-server]` and `uvicorn` (see
//! scripts/test.sh); they fail, not skip, when it is unset.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use mur::a2a::types::{AgentCard, AgentSkill, Message, Task, TaskState};
use mur::a2a::{A2aClient, ClientError, BUSY_MESSAGE};
use mur::door::{CancelError, Door, DoorLimits, TaskBook, TaskHandler, TaskIndex};
use support::sdk;

const TOKEN: &str = "s3cret-formation-token";

/// Completes a task after `delay` with the artifact `echo: <text>`. A text starting
/// with `slow` stays WORKING; the first `busy` offers are rejected busy.
struct Echo {
    book: Arc<TaskBook>,
    delay: Duration,
    busy: AtomicUsize,
}

impl Echo {
    fn new(delay_ms: u64, busy: usize) -> Arc<Echo> {
        Arc::new(Echo {
            book: Arc::new(TaskBook::new()),
            delay: Duration::from_millis(delay_ms),
            busy: AtomicUsize::new(busy),
        })
    }
}

impl TaskHandler for Echo {
    fn submit(&self, message: Message) -> Task {
        if self
            .busy
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return self.book.reject(message, BUSY_MESSAGE);
        }
        let text = message.text_content();
        let task = self.book.create(message, TaskState::Submitted, None);
        let (book, id, delay) = (self.book.clone(), task.id.clone(), self.delay);
        std::thread::spawn(move || {
            let _ = book.transition(&id, TaskState::Working, Some("working"));
            if text.starts_with("slow") {
                return;
            }
            std::thread::sleep(delay);
            let _ = book.complete(&id, &format!("echo: {text}"));
        });
        task
    }

    fn get(&self, task_id: &str) -> Option<Task> {
        self.book.get(task_id)
    }

    fn cancel(&self, task_id: &str) -> Result<Task, CancelError> {
        self.book.cancel(task_id, "canceled by client request")
    }

    fn wait_terminal(&self, task_id: &str, timeout: Duration) -> Option<Task> {
        self.book.wait_terminal(task_id, timeout)
    }

    fn list(&self) -> Option<Vec<TaskIndex>> {
        Some(self.book.list())
    }

    fn card(&self) -> AgentCard {
        let mut card = AgentCard::new("echo", "echoes the text it is sent");
        card.skills.push(AgentSkill {
            id: "echo".into(),
            name: "Echo".into(),
            description: "Replies with the text it was sent.".into(),
            tags: vec!["echo".into()],
            examples: vec![],
        });
        card
    }
}

fn door_with(handler: Arc<Echo>, limits: DoorLimits) -> Door {
    Door::start(
        "127.0.0.1:0".parse().unwrap(),
        TOKEN.to_string(),
        handler,
        limits,
    )
    .expect("door starts")
}

fn door() -> Door {
    door_with(Echo::new(300, 0), DoorLimits::default())
}

/// One raw HTTP exchange on a fresh connection (`Connection: close`): status,
/// lowercased headers, body.
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

fn read_response(s: &mut TcpStream) -> Raw {
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no http head in {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Raw {
        status,
        headers,
        body: body.to_string(),
    }
}

fn raw(addr: SocketAddr, request: &[u8]) -> Raw {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    read_response(&mut s)
}

/// POST / with the given token and version headers (`None`: header left out).
fn post(addr: SocketAddr, token: Option<&str>, version: Option<&str>, body: &str) -> Raw {
    let mut req = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(v) = version {
        req.push_str(&format!("A2A-Version: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    raw(addr, req.as_bytes())
}

/// A JSON-RPC call with the right token and version: HTTP 200 and the JSON body.
fn rpc(addr: SocketAddr, body: &Value) -> Value {
    let r = post(addr, Some(TOKEN), Some("1.0"), &body.to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()
}

fn get_task(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": "g1", "method": "GetTask", "params": {"id": id}})
}

fn send(text: &str, immediately: bool) -> Value {
    json!({"jsonrpc": "2.0", "id": "s1", "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"acceptedOutputModes": ["text/plain"], "returnImmediately": immediately}
    }})
}

/// Asserts a JSON-RPC error response with `code`, echoing `id`, and (for A2A codes)
/// one ErrorInfo with `reason`.
fn assert_error(v: &Value, id: &Value, code: i64, reason: Option<&str>) {
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(&v["id"], id, "{v}");
    assert!(v.get("result").is_none(), "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert!(v["error"]["message"].is_string(), "{v}");
    match reason {
        Some(r) => {
            let info = &v["error"]["data"][0];
            assert_eq!(
                info["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
                "{v}"
            );
            assert_eq!(info["reason"], r, "{v}");
            assert_eq!(info["domain"], "a2a-protocol.org", "{v}");
            assert!(info["metadata"].is_object(), "{v}");
        }
        None => assert!(v["error"].get("data").is_none(), "{v}"),
    }
}

fn poll_until_terminal(client: &A2aClient, id: &str) -> Task {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let t = client.get_task(id).expect("GetTask");
        if t.is_terminal() || Instant::now() > end {
            return t;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn card_is_public_with_cache_headers_and_the_door_url() {
    let d = door();
    let r = raw(
        d.local_addr(),
        b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("cache-control"), Some("public, max-age=300"));
    let etag = r.header("etag").expect("etag").to_string();
    assert!(etag.starts_with("W/\""), "{etag}");
    let card = r.json();
    assert_eq!(card["name"], "echo");
    assert_eq!(
        card["supportedInterfaces"],
        json!([{"url": d.url(), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}])
    );
    assert_eq!(card["capabilities"]["streaming"], false);
    assert_eq!(card["defaultInputModes"], json!(["text/plain"]));
    assert_eq!(card["skills"][0]["id"], "echo");
    let again = raw(
        d.local_addr(),
        format!(
            "GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(again.status, 304);
    assert_eq!(again.body, "");
    // Last-Modified beside the ETag, the same on every read of an unchanged card, and
    // If-Modified-Since answered with 304 when nothing changed since.
    let modified = r
        .header("last-modified")
        .expect("last-modified")
        .to_string();
    assert!(modified.ends_with(" GMT"), "{modified}");
    assert_eq!(again.header("last-modified"), Some(modified.as_str()));
    let since = raw(
        d.local_addr(),
        format!(
            "GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: {modified}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(since.status, 304);
    let old = raw(
        d.local_addr(),
        b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(old.status, 200);
    assert_eq!(old.header("last-modified"), Some(modified.as_str()));
    // The client reads the same card.
    let c = A2aClient::new(d.url(), "");
    assert_eq!(
        c.agent_card().unwrap().jsonrpc_url(),
        Some(d.url().as_str())
    );
}

#[test]
fn send_with_return_immediately_then_get_task_until_completed() {
    let d = door();
    let v = rpc(d.local_addr(), &send("hi", true));
    assert_eq!(v["id"], "s1");
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED", "{v}");
    let id = task["id"].as_str().unwrap().to_string();
    assert_eq!(task["history"][0]["taskId"], id.as_str());
    assert_eq!(task["history"][0]["role"], "ROLE_USER");
    assert!(task["contextId"].is_string());

    let c = A2aClient::new(d.url(), TOKEN);
    let done = poll_until_terminal(&c, &id);
    assert_eq!(done.status.state, TaskState::Completed);
    assert_eq!(done.answer_text(), "echo: hi");
    assert!(done.status.timestamp.is_some());

    // GetTask returns the bare task; historyLength (and its snake alias) trims.
    let v = rpc(d.local_addr(), &get_task(&id));
    assert_eq!(v["result"]["id"], id.as_str());
    assert_eq!(v["result"]["history"].as_array().unwrap().len(), 2);
    for key in ["historyLength", "history_length"] {
        let v = rpc(
            d.local_addr(),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id, key: 1}}),
        );
        assert_eq!(v["result"]["history"].as_array().unwrap().len(), 1, "{key}");
        assert_eq!(v["result"]["history"][0]["parts"][0]["text"], "working");
    }
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id, "historyLength": 0}}),
    );
    assert!(v["result"].get("history").is_none(), "{v}");
}

#[test]
fn blocking_send_returns_the_terminal_task() {
    let d = door();
    let c = A2aClient::new(d.url(), TOKEN);
    let start = Instant::now();
    let t = c.send_message("blocking", None, false).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(250));
    assert_eq!(t.status.state, TaskState::Completed);
    assert_eq!(t.answer_text(), "echo: blocking");
}

#[test]
fn blocking_send_is_bounded_by_send_wait() {
    let limits = DoorLimits {
        send_wait: Duration::from_millis(300),
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(300, 0), limits);
    let c = A2aClient::new(d.url(), TOKEN);
    let t = c.send_message("slow forever", None, false).unwrap();
    assert_eq!(t.status.state, TaskState::Working);
}

#[test]
fn cancel_is_idempotent_and_a_finished_task_is_not_cancelable() {
    let d = door();
    let c = A2aClient::new(d.url(), TOKEN);
    let t = c.send_message("slow job", None, true).unwrap();
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": "c1", "method": "CancelTask", "params": {"id": t.id}}),
    );
    assert_eq!(v["result"]["status"]["state"], "TASK_STATE_CANCELED", "{v}");
    assert_eq!(
        v["result"]["status"]["message"]["parts"][0]["text"],
        "canceled by client request"
    );
    // A second cancel of a canceled task answers the task as it is, byte for byte.
    let again = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": "c1", "method": "CancelTask", "params": {"id": t.id}}),
    );
    assert_eq!(again, v);
    assert_eq!(
        c.cancel_task(&t.id).unwrap().status.state,
        TaskState::Canceled
    );
    // A task that finished any other way still cannot be canceled.
    let done = c.send_message("quick", None, false).unwrap();
    assert_eq!(done.status.state, TaskState::Completed);
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": "e2", "method": "CancelTask", "params": {"id": done.id}}),
    );
    assert_error(&v, &json!("e2"), -32002, Some("TASK_NOT_CANCELABLE"));
    assert_eq!(v["error"]["message"], "Task cannot be canceled");
    let e = c.cancel_task(&done.id).unwrap_err();
    assert_eq!(e.rpc_code(), Some(-32002), "{e}");
}

#[test]
fn unknown_task_is_task_not_found_as_the_sdk_writes_it() {
    let d = door();
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": "e1", "method": "GetTask", "params": {"id": "no-such-task"}}),
    );
    assert_eq!(
        v,
        json!({"error": {"code": -32001, "message": "Task not found", "data": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TASK_NOT_FOUND",
            "domain": "a2a-protocol.org", "metadata": {}}]}, "id": "e1", "jsonrpc": "2.0"})
    );
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": "nope"}}),
    );
    assert_error(&v, &json!(3), -32001, Some("TASK_NOT_FOUND"));
}

#[test]
fn a_busy_handler_rejects_straight_into_rejected() {
    let d = door_with(Echo::new(50, 1), DoorLimits::default());
    let c = A2aClient::new(d.url(), TOKEN);
    let t = c.send_message("first", None, true).unwrap();
    assert_eq!(t.status.state, TaskState::Rejected);
    assert!(t.is_busy_rejection());
    assert!(t.is_terminal());
    let again = c.get_task(&t.id).unwrap();
    assert!(again.is_busy_rejection());
    let t = c.send_message("second", None, true).unwrap();
    assert!(!t.is_terminal());
}

#[test]
fn a_missing_or_wrong_token_is_a_401_whose_body_says_which() {
    let d = door();
    let addr = d.local_addr();
    let body = get_task("x").to_string();
    let missing = "no bearer token: send the header Authorization: Bearer <token>";
    let wrong = "the bearer token is not this door's token";
    let cases: Vec<(Raw, &str, &str, &str)> = vec![
        (post(addr, None, Some("1.0"), &body), missing, "BEARER_TOKEN_MISSING", "Bearer"),
        (post(addr, Some(""), Some("1.0"), &body), missing, "BEARER_TOKEN_MISSING", "Bearer"),
        (
            post(addr, Some("wrong"), Some("1.0"), &body),
            wrong,
            "BEARER_TOKEN_WRONG",
            "Bearer error=\"invalid_token\"",
        ),
        (
            post(addr, Some(&format!("{TOKEN}x")), Some("1.0"), &body),
            wrong,
            "BEARER_TOKEN_WRONG",
            "Bearer error=\"invalid_token\"",
        ),
        // Auth comes before anything else: a malformed body or a missing version
        // reveals nothing either.
        (post(addr, None, None, "{not json"), missing, "BEARER_TOKEN_MISSING", "Bearer"),
        (
            raw(
                addr,
                format!("POST / HTTP/1.1\r\nAuthorization: Basic {TOKEN}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}")
                    .as_bytes(),
            ),
            missing,
            "BEARER_TOKEN_MISSING",
            "Bearer",
        ),
    ];
    for (r, message, reason, challenge) in cases {
        assert_eq!(r.status, 401);
        assert_eq!(r.header("www-authenticate"), Some(challenge));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(!r.body.contains(TOKEN), "{}", r.body);
        assert_eq!(
            r.json(),
            json!({"error": {"code": 401, "status": "UNAUTHENTICATED", "message": message,
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason, "domain": "mur", "metadata": {}}]}})
        );
    }
    let c = A2aClient::new(d.url(), "wrong");
    let e = c.get_task("x").unwrap_err();
    assert_eq!(e.http_status(), Some(401), "{e}");
}

#[test]
fn malformed_json_is_a_parse_error_with_null_id() {
    let d = door();
    let r = post(
        d.local_addr(),
        Some(TOKEN),
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":"e6","method":"GetTask","params":{"id":"#,
    );
    assert_eq!(r.status, 200);
    assert_error(&r.json(), &Value::Null, -32700, None);
    for body in ["", "\u{0}\u{1}", "[1,", "{\"a\":\"\\ud800\"}x"] {
        let r = post(d.local_addr(), Some(TOKEN), Some("1.0"), body);
        assert_error(&r.json(), &Value::Null, -32700, None);
    }
}

#[test]
fn a_lone_surrogate_escape_is_a_parse_error_that_says_so() {
    let d = door();
    for (body, column) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"\ud800"}}"#,
            60,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x\udc00"}}"#,
            61,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"\uD800\u0041"}}"#,
            60,
        ),
    ] {
        let r = post(d.local_addr(), Some(TOKEN), Some("1.0"), body);
        let v = r.json();
        assert_error(&v, &Value::Null, -32700, None);
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with("Invalid JSON: unpaired UTF-16 surrogate escape \\u"),
            "{msg}"
        );
        assert!(msg.contains(&format!("at line 1 column {column}")), "{msg}");
        assert!(!msg.contains("end of hex escape"), "{msg}");
    }
    // A pair is fine.
    let v = rpc(
        d.local_addr(),
        &serde_json::from_str(
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"\ud83d\ude00"}}"#,
        )
        .unwrap(),
    );
    assert_error(&v, &json!(1), -32001, Some("TASK_NOT_FOUND"));
}

#[test]
fn batches_and_invalid_requests_are_invalid_request() {
    let d = door();
    let a = d.local_addr();
    assert_error(&rpc(a, &json!([get_task("x")])), &Value::Null, -32600, None);
    assert_error(&rpc(a, &json!([])), &Value::Null, -32600, None);
    assert_error(&rpc(a, &json!("GetTask")), &Value::Null, -32600, None);
    assert_error(
        &rpc(
            a,
            &json!({"jsonrpc": "1.0", "id": "v", "method": "GetTask", "params": {"id": "x"}}),
        ),
        &json!("v"),
        -32600,
        None,
    );
    assert_error(
        &rpc(a, &json!({"id": "v", "method": "GetTask"})),
        &json!("v"),
        -32600,
        None,
    );
    assert_error(
        &rpc(a, &json!({"jsonrpc": "2.0", "id": "m", "params": {}})),
        &json!("m"),
        -32600,
        None,
    );
    assert_error(
        &rpc(a, &json!({"jsonrpc": "2.0", "id": "m", "method": 7})),
        &json!("m"),
        -32600,
        None,
    );
    for bad_id in [json!(true), json!({"a": 1}), json!([1])] {
        assert_error(
            &rpc(
                a,
                &json!({"jsonrpc": "2.0", "id": bad_id, "method": "GetTask", "params": {"id": "x"}}),
            ),
            &Value::Null,
            -32600,
            None,
        );
    }
}

#[test]
fn unknown_and_v03_methods_are_method_not_found() {
    let d = door();
    for m in [
        "message/send",
        "tasks/get",
        "tasks/cancel",
        "Nope",
        "sendMessage",
    ] {
        let v = rpc(
            d.local_addr(),
            &json!({"jsonrpc": "2.0", "id": "e4", "method": m, "params": {}}),
        );
        assert_error(&v, &json!("e4"), -32601, None);
        assert_eq!(v["error"]["message"], "Method not found");
    }
    // Known A2A 1.0 methods the door does not serve are unsupported operations.
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {}}),
    );
    assert_error(&v, &json!(1), -32004, Some("UNSUPPORTED_OPERATION"));
}

#[test]
fn missing_or_old_version_header_is_version_not_supported() {
    let d = door();
    let body = json!({"jsonrpc": "2.0", "id": "e3", "method": "GetTask", "params": {"id": "x"}})
        .to_string();
    let v = post(d.local_addr(), Some(TOKEN), None, &body).json();
    assert_error(&v, &json!("e3"), -32009, Some("VERSION_NOT_SUPPORTED"));
    assert_eq!(
        v["error"]["message"],
        "A2A version '0.3' is not supported by this handler. Expected version '1.0'."
    );
    let v = post(d.local_addr(), Some(TOKEN), Some("2.0"), &body).json();
    assert_error(&v, &json!("e3"), -32009, Some("VERSION_NOT_SUPPORTED"));
    // 1.x passes the version check and reaches the task lookup.
    let v = post(d.local_addr(), Some(TOKEN), Some("1.0.2"), &body).json();
    assert_error(&v, &json!("e3"), -32001, Some("TASK_NOT_FOUND"));
}

#[test]
fn bad_params_are_invalid_params() {
    let d = door();
    let a = d.local_addr();
    let v = rpc(
        a,
        &json!({"jsonrpc": "2.0", "id": "e5", "method": "GetTask", "params": {"id": 5}}),
    );
    assert_error(&v, &json!("e5"), -32602, Some("INVALID_PARAMS"));
    assert_eq!(v["error"]["message"], "Invalid params");
    assert!(v["error"]["data"][0]["metadata"]["parseError"].is_string());

    let v = rpc(
        a,
        &json!({"jsonrpc": "2.0", "id": "e8", "method": "SendMessage", "params": {
            "message": {"messageId": "m-bad-1", "role": "ROLE_USER", "parts": []}}}),
    );
    assert_error(&v, &json!("e8"), -32602, Some("INVALID_PARAMS"));
    assert_eq!(v["error"]["message"], "Validation failed");
    assert_eq!(
        v["error"]["data"][1],
        json!({"@type": "type.googleapis.com/google.rpc.BadRequest",
               "fieldViolations": [{"field": "message.parts", "description": "Field must contain at least one element."}]})
    );
    for params in [
        json!([1]),
        json!({"message": "hello"}),
        json!({}),
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}, "configuration": {"returnImmediately": "yes"}}),
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}, "configuration": {"historyLength": -1}}),
    ] {
        let v = rpc(
            a,
            &json!({"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": params}),
        );
        assert_error(&v, &json!(9), -32602, Some("INVALID_PARAMS"));
    }
    let v = rpc(
        a,
        &json!({"jsonrpc": "2.0", "id": 9, "method": "GetTask", "params": {"id": "x", "historyLength": "all"}}),
    );
    assert_error(&v, &json!(9), -32602, Some("INVALID_PARAMS"));
}

#[test]
fn a_message_to_a_finished_task_is_unsupported_and_modes_must_fit() {
    let d = door_with(Echo::new(0, 0), DoorLimits::default());
    let c = A2aClient::new(d.url(), TOKEN);
    let t = c.send_message("x", None, false).unwrap();
    assert!(t.is_terminal());
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": "e9", "method": "SendMessage", "params": {"message": {
            "messageId": "m-after-done", "taskId": t.id, "role": "ROLE_USER", "parts": [{"text": "more"}]}}}),
    );
    assert_error(&v, &json!("e9"), -32004, Some("UNSUPPORTED_OPERATION"));
    assert_eq!(
        v["error"]["message"],
        format!("Task {} is in terminal state: TASK_STATE_COMPLETED", t.id)
    );
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": "e10", "method": "SendMessage", "params": {"message": {
            "messageId": "m", "taskId": "no-such", "role": "ROLE_USER", "parts": [{"text": "more"}]}}}),
    );
    assert_error(&v, &json!("e10"), -32001, Some("TASK_NOT_FOUND"));
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "id": "e11", "method": "SendMessage", "params": {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
            "configuration": {"acceptedOutputModes": ["image/png"]}}}),
    );
    assert_error(
        &v,
        &json!("e11"),
        -32005,
        Some("CONTENT_TYPE_NOT_SUPPORTED"),
    );
}

#[test]
fn ids_are_echoed_unchanged() {
    let d = door();
    for id in [
        json!("abc"),
        json!(""),
        json!(42),
        json!(-7),
        json!(12345678901234567890u64),
        json!(1.5),
        Value::Null,
    ] {
        let v = rpc(
            d.local_addr(),
            &json!({"jsonrpc": "2.0", "id": id, "method": "GetTask", "params": {"id": "x"}}),
        );
        assert_eq!(v["id"], id);
        assert_eq!(v["error"]["code"], -32001);
    }
    // A request without an id is answered with id null.
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}),
    );
    assert_eq!(v["id"], Value::Null);
    assert!(v.as_object().unwrap().contains_key("id"));
}

#[test]
fn a_notification_is_served_and_answered_with_id_null_as_the_sdk_does() {
    // The a2a-sdk 1.3 server answers a request without `id` (a JSON-RPC notification)
    // like any other, with `id: null`, and serves it: so does the door.
    let d = door_with(Echo::new(0, 0), DoorLimits::default());
    let mut req = send("note", true);
    req.as_object_mut().unwrap().remove("id");
    let v = rpc(d.local_addr(), &req);
    assert_eq!(v["jsonrpc"], "2.0");
    assert!(v.as_object().unwrap().contains_key("id"), "{v}");
    assert_eq!(v["id"], Value::Null);
    let id = v["result"]["task"]["id"]
        .as_str()
        .expect("a task")
        .to_string();
    let v = rpc(
        d.local_addr(),
        &json!({"jsonrpc": "2.0", "method": "GetTask", "params": {"id": id}}),
    );
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["result"]["id"], id.as_str());
    let v = rpc(d.local_addr(), &json!({"jsonrpc": "2.0", "method": "Nope"}));
    assert_error(&v, &Value::Null, -32601, None);
}

#[test]
fn a_body_over_the_limit_is_413_with_a_jsonrpc_error() {
    let limits = DoorLimits {
        max_body_bytes: 1024,
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(0, 0), limits);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{{"id":"{}"}}}}"#,
        "x".repeat(300_000)
    );
    let r = post(d.local_addr(), Some(TOKEN), Some("1.0"), &big);
    assert_eq!(r.status, 413);
    assert_error(&r.json(), &Value::Null, -32600, None);
    assert_eq!(r.json()["error"]["message"], "Payload too large");
    // Without a token, still 401 first.
    assert_eq!(post(d.local_addr(), None, Some("1.0"), &big).status, 401);
    // The door still serves.
    let v = rpc(d.local_addr(), &get_task("x"));
    assert_eq!(v["error"]["code"], -32001);
}

#[test]
fn a_client_sending_headers_slowly_is_dropped_and_others_are_served() {
    let limits = DoorLimits {
        read_timeout: Duration::from_millis(800),
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(0, 0), limits);
    let addr = d.local_addr();
    // Two slow clients: one stalls mid-head, one trickles a byte at a time and never
    // finishes.
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Le")
        .unwrap();
    let trickler = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let start = Instant::now();
        // Trickles for far longer than the door's 800 ms read timeout: the door's 408
        // ends it (a write then fails, or the answer is waiting).
        let head = b"POST / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        for b in head.iter().chain(std::iter::repeat(&b'a')) {
            if s.write_all(&[*b]).is_err() || start.elapsed() > Duration::from_secs(60) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            let mut peek = [0u8; 1];
            s.set_nonblocking(true).unwrap();
            let answered = matches!(s.peek(&mut peek), Ok(n) if n > 0);
            s.set_nonblocking(false).unwrap();
            if answered {
                break;
            }
        }
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let r = read_response(&mut s);
        (r.status, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100));
    // A third client is served at once, on its own thread.
    let v = rpc(addr, &get_task("x"));
    assert_eq!(v["error"]["code"], -32001);

    // Both slow clients get 408 from the door's own clock; the bounds are the
    // sockets' (30 s) and the trickler's (60 s), far past the door's 800 ms.
    stalled
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let r = read_response(&mut stalled);
    assert_eq!(r.status, 408);
    let (status, took) = trickler.join().unwrap();
    assert_eq!(status, 408);
    assert!(took < Duration::from_secs(60), "{took:?}");
}

/// Opens `n` connections that each send the start of a head, then one more byte of it
/// every `every`, until `stop` is set or the door closes them; returns how many the
/// door answered and with what.
fn tricklers(
    addr: SocketAddr,
    n: usize,
    every: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<u16>> {
    tricklers_reading(addr, n, every, stop, Duration::from_millis(200))
}

/// [`tricklers`], each waiting up to `read_for` for the door's answer once stopped.
fn tricklers_reading(
    addr: SocketAddr,
    n: usize,
    every: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
    read_for: Duration,
) -> std::thread::JoinHandle<Vec<u16>> {
    let mut conns: Vec<TcpStream> = (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"POST / HTTP/1.1\r\nX").unwrap();
            s
        })
        .collect();
    std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(30);
        while !stop.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::sleep(every);
            for s in &mut conns {
                let _ = s.write_all(b"a");
            }
        }
        conns
            .iter_mut()
            .filter_map(|s| {
                s.set_read_timeout(Some(read_for)).ok()?;
                let mut b = [0u8; 12];
                s.read_exact(&mut b).ok()?;
                std::str::from_utf8(&b[9..12]).ok()?.parse().ok()
            })
            .collect()
    })
}

#[test]
fn slowloris_32_trickling_connections_do_not_stall_the_card_or_get_task() {
    let d = door();
    let addr = d.local_addr();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // 32 unauthenticated connections from this client, one byte per second each.
    let slow = tricklers(addr, 32, Duration::from_secs(1), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let client = A2aClient::new(d.url(), TOKEN);
    let sent = client.send_message("hello", None, true).unwrap();
    // Five rounds while the 32 trickle; each is served, well inside the tricklers'
    // own seconds (a loaded machine may be slow, never stalled).
    for _ in 0..5 {
        let t = Instant::now();
        let card = raw(
            addr,
            b"GET /.well-known/agent-card.json HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(card.status, 200);
        let got = client.get_task(&sent.id).unwrap();
        assert_eq!(got.id, sent.id);
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "card and GetTask took {:?} under 32 trickling connections",
            t.elapsed()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::SeqCst);
    slow.join().unwrap();
}

#[test]
fn slowloris_connections_past_the_caps_get_503_at_once() {
    // Per address: connections without a whole request head.
    let limits = DoorLimits {
        max_pending_heads_per_ip: 4,
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(0, 0), limits);
    let addr = d.local_addr();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = tricklers(addr, 4, Duration::from_millis(200), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let r = raw(addr, b"GET /.well-known/agent-card.json HTTP/1.1\r\n\r\n");
    // 503 rather than the 408 a wait for the head would end in.
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    stop.store(true, Ordering::SeqCst);
    assert_eq!(slow.join().unwrap(), Vec::<u16>::new());
    // Once they are gone, the address is served again.
    std::thread::sleep(Duration::from_millis(500));
    let r = raw(
        addr,
        b"GET /.well-known/agent-card.json HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);

    // Globally: connections open at once.
    let limits = DoorLimits {
        max_connections: 3,
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(0, 0), limits);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = tricklers(d.local_addr(), 3, Duration::from_millis(200), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let r = raw(
        d.local_addr(),
        b"GET /.well-known/agent-card.json HTTP/1.1\r\n\r\n",
    );
    assert_eq!(r.status, 503);
    stop.store(true, Ordering::SeqCst);
    slow.join().unwrap();
}

/// Opens a keep-alive connection and sends one complete unauthenticated card GET on
/// it; the connection stays open, idle, holding a slot (the hog of issue 21).
fn hog_connection(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let mut len = 0;
    loop {
        let mut l = String::new();
        reader.read_line(&mut l).unwrap();
        if l == "\r\n" {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut b = vec![0; len];
    reader.read_exact(&mut b).unwrap();
    s
}

/// A GetTask with the token on a fresh connection: the HTTP status.
fn get_task_status(addr: SocketAddr) -> u16 {
    post(addr, Some(TOKEN), Some("1.0"), &get_task("x").to_string()).status
}

#[test]
fn connections_sending_whole_requests_count_against_the_per_address_cap() {
    // Idle connections are kept far longer than the test takes on a loaded machine.
    let limits = DoorLimits {
        max_connections_per_ip: 6,
        idle_timeout: Duration::from_secs(120),
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(0, 0), limits);
    let addr = d.local_addr();
    // Six keep-alive connections that sent a whole (unauthenticated) request each.
    let _hog: Vec<TcpStream> = (0..6).map(|_| hog_connection(addr)).collect();
    // A seventh connection without the token is refused although it sends its head
    // at once; one with the token on the same address is still served.
    let r = raw(
        addr,
        b"GET /.well-known/agent-card.json HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    let r = post(addr, Some(TOKEN), Some("1.0"), &get_task("x").to_string());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32001);
    assert_eq!(r.header("connection"), Some("close"));
}

#[test]
fn a_hog_and_slowloris_on_one_address_do_not_lock_out_a_client_with_the_token() {
    // Heads and idle connections are waited for far longer than the test takes on a
    // loaded machine, so no slot frees itself meanwhile.
    let limits = DoorLimits {
        max_connections_per_ip: 8,
        max_pending_heads_per_ip: 4,
        reserve_connections: 4,
        head_timeout: Duration::from_secs(120),
        read_timeout: Duration::from_secs(120),
        idle_timeout: Duration::from_secs(120),
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(0, 0), limits);
    let addr = d.local_addr();
    let _hog: Vec<TcpStream> = (0..4).map(|_| hog_connection(addr)).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Four trickle in regular slots, four more fill the reserve.
    let slow = tricklers(addr, 8, Duration::from_millis(200), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    // Each GetTask evicts the oldest trickler of the reserve and is served.
    let client = A2aClient::new(d.url(), TOKEN);
    let sent = client.send_message("hello", None, true).unwrap();
    for _ in 0..3 {
        assert_eq!(get_task_status(addr), 200);
        assert_eq!(client.get_task(&sent.id).unwrap().id, sent.id);
    }
    // Without the token, the same address is refused.
    let r = raw(
        addr,
        b"GET /.well-known/agent-card.json HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 503);
    stop.store(true, Ordering::SeqCst);
    // The evicted tricklers were told 503; the others had no answer yet.
    let answers = slow.join().unwrap();
    assert!(!answers.is_empty(), "no trickler was evicted");
    assert!(answers.iter().all(|s| *s == 503), "{answers:?}");
}

#[test]
fn a_401_closes_its_connection() {
    let d = door();
    let mut s = TcpStream::connect(d.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = get_task("x").to_string();
    let one = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // Two pipelined: only the first is answered, and the door closes.
    s.write_all(format!("{one}{one}").as_bytes()).unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.body.matches("UNAUTHENTICATED").count(), 1, "{}", r.body);
}

#[test]
fn unauthenticated_requests_past_the_rate_get_429_and_the_token_is_still_served() {
    let limits = DoorLimits {
        unauthenticated_per_sec: 1,
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(0, 0), limits);
    let addr = d.local_addr();
    let card = || {
        raw(
            addr,
            b"GET /.well-known/agent-card.json HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
    };
    // A bucket of two, refilled at one a second: ten in a row cannot all pass.
    let statuses: Vec<u16> = (0..10).map(|_| card().status).collect();
    assert_eq!(&statuses[..2], &[200, 200], "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    let limited = loop {
        let r = card();
        if r.status == 429 {
            break r;
        }
    };
    assert_eq!(limited.header("retry-after"), Some("1"));
    assert_eq!(limited.header("connection"), Some("close"));
    // Requests with the token are not counted.
    for _ in 0..5 {
        assert_eq!(get_task_status(addr), 200);
    }
}

#[test]
fn a_trickler_is_dropped_at_the_head_deadline() {
    let limits = DoorLimits {
        head_timeout: Duration::from_millis(700),
        ..DoorLimits::default()
    };
    let d = door_with(Echo::new(0, 0), limits);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = tricklers_reading(
        d.local_addr(),
        3,
        Duration::from_millis(100),
        stop.clone(),
        Duration::from_secs(30),
    );
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    // Each waits for the door's answer (up to 30 s): 408 at the 700 ms head deadline.
    assert_eq!(slow.join().unwrap(), vec![408, 408, 408]);
}

#[test]
fn bare_lf_line_endings_are_answered_at_once() {
    let d = door();
    let a = d.local_addr();
    let r = raw(
        a,
        b"GET /.well-known/agent-card.json HTTP/1.1\nHost: x\nConnection: close\n\n",
    );
    assert_eq!(r.status, 200);
    assert!(r.json()["name"].is_string());
    let body = get_task("x").to_string();
    let req = format!(
        "POST / HTTP/1.1\nAuthorization: Bearer {TOKEN}\nA2A-Version: 1.0\r\nContent-Type: application/json\nContent-Length: {}\nConnection: close\n\n{body}",
        body.len()
    );
    let r = raw(a, req.as_bytes());
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["code"], -32001);
    // Leading empty lines, in either ending, are skipped.
    let r = raw(
        a,
        b"\n\r\nGET /.well-known/agent-card.json HTTP/1.1\nConnection: close\n\r\n",
    );
    assert_eq!(r.status, 200);
    // A bare CR inside a line is refused at once.
    let r = raw(
        a,
        b"GET /.well-known/agent-card.json HTTP/1.1\rHost: x\nConnection: close\n\n",
    );
    // 400, not the 408 that waiting for the rest of the head would end in.
    assert_eq!(r.status, 400);
}

#[test]
fn a_body_nested_to_the_json_limit_is_answered_not_a_crash() {
    let d = door();
    for depth in [120, 127, 128, 100_000] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{{"id":"x","n":{}{}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let r = post(d.local_addr(), Some(TOKEN), Some("1.0"), &body);
        assert_eq!(r.status, 200, "{depth}");
        let code = r.json()["error"]["code"].as_i64().unwrap();
        assert!(code == -32001 || code == -32700, "{depth}: {code}");
        // The same depth in a message's metadata, kept in the task's history and sent
        // back: parsed, cloned, stored and serialized on a connection thread.
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"text":"hi"}}],"metadata":{{"n":{}{}}}}},"configuration":{{"returnImmediately":true}}}}}}"#,
            "[".repeat(depth.min(120)),
            "]".repeat(depth.min(120))
        );
        let r = post(d.local_addr(), Some(TOKEN), Some("1.0"), &body);
        assert_eq!(r.status, 200, "{depth}");
        assert!(r.json()["result"]["task"]["id"].is_string(), "{}", r.body);
    }
    let v = rpc(d.local_addr(), &get_task("x"));
    assert_eq!(v["error"]["code"], -32001);
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let d = door();
    let mut s = TcpStream::connect(d.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = get_task("x").to_string();
    let one = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // Two pipelined, then a third after the answers.
    s.write_all(format!("{one}{one}").as_bytes()).unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    for _ in 0..2 {
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let mut len = 0;
        loop {
            let mut l = String::new();
            reader.read_line(&mut l).unwrap();
            if l == "\r\n" {
                break;
            }
            if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut b = vec![0; len];
        reader.read_exact(&mut b).unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["error"]["code"], -32001);
    }
    s.write_all(one.as_bytes()).unwrap();
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
}

#[test]
fn other_paths_and_methods_and_garbage_are_answered_plainly() {
    let d = door();
    let a = d.local_addr();
    assert_eq!(
        raw(a, b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n").status,
        404
    );
    assert_eq!(
        raw(a, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").status,
        405
    );
    assert_eq!(
        raw(a, b"POST /?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n").status,
        411
    );
    assert_eq!(raw(a, b"BLAH\r\n\r\n").status, 400);
    assert_eq!(
        raw(
            a,
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"
        )
        .status,
        501
    );
    let huge = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(40 * 1024));
    assert_eq!(raw(a, huge.as_bytes()).status, 431);
    // The RPC path with a query string is still the RPC path.
    let body = get_task("x").to_string();
    let r = raw(
        a,
        format!("POST /?q=1 HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes(),
    );
    assert_eq!(r.json()["error"]["code"], -32001);
}

#[test]
fn shutdown_joins_while_a_blocking_send_waits() {
    let d = door();
    let url = d.url();
    let h = std::thread::spawn(move || {
        A2aClient::new(url, TOKEN).send_message("slow forever", None, false)
    });
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    d.shutdown();
    // Far below the blocking send's own 300 s wait.
    assert!(start.elapsed() < Duration::from_secs(120));
    let t = h.join().unwrap().unwrap();
    assert_eq!(t.status.state, TaskState::Working);
}

#[test]
fn client_errors_are_classified() {
    let d = door();
    // Not a JSON-RPC endpoint, called as one (with discovery the card would name the
    // door's real endpoint).
    let c = A2aClient::with_config(mur::a2a::ClientConfig {
        discover: false,
        ..mur::a2a::ClientConfig::new(format!("http://{}/nope", d.local_addr()), TOKEN)
    });
    let e = c.get_task("x").unwrap_err();
    assert_eq!(e.http_status(), Some(404), "{e}");
    let addr = d.local_addr();
    drop(d);
    let c = A2aClient::new(format!("http://{addr}/"), TOKEN);
    assert!(matches!(
        c.get_task("x").unwrap_err(),
        ClientError::Unreachable { .. }
    ));
}

// --- the official SDK --------------------------------------------------------------

#[test]
fn sdk_client_drives_the_door() {
    let py = sdk::venv_python();
    let d = door();
    let out = Command::new(py)
        .arg(sdk::script("a2a_sdk_client.py"))
        .arg(d.url())
        .arg(TOKEN)
        .output()
        .expect("run a2a_sdk_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let steps: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{stderr}")))
        .collect();
    let step = |name: &str| {
        steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no step {name} in:\n{stdout}\n{stderr}"))
            .clone()
    };
    assert_eq!(step("done")["ok"], true, "{stdout}\n{stderr}");
    assert!(out.status.success());
    assert_eq!(step("card")["interfaces"][0]["url"], d.url().as_str());
    assert_eq!(step("send")["state"], "TASK_STATE_SUBMITTED");
    let poll = step("poll");
    assert_eq!(poll["state"], "TASK_STATE_COMPLETED");
    assert_eq!(poll["answer"], "echo: hello");
    assert_eq!(step("history_length")["history"], 1);
    assert_eq!(step("cancel")["state"], "TASK_STATE_CANCELED");
    assert_eq!(step("cancel_finished")["error"], "TaskNotCancelableError");
    assert_eq!(step("get_unknown")["error"], "TaskNotFoundError");
}

#[test]
fn client_against_the_sdk_server() {
    let server = sdk::Server::start(TOKEN, &["--busy", "1", "--delay", "0.2"], Stdio::inherit());
    let c = A2aClient::new(server.url.clone(), TOKEN);
    let card = c.agent_card().unwrap();
    assert_eq!(card.jsonrpc_url(), Some(server.endpoint.as_str()));

    // The first offer is turned away busy, straight into REJECTED.
    let t = c
        .send_message("hello", Some(json!({"murmur": {"trust": "peer"}})), true)
        .unwrap();
    assert_eq!(t.status.state, TaskState::Rejected);
    assert!(t.is_busy_rejection(), "{t:?}");

    let t = c.send_message("hello", None, true).unwrap();
    assert!(!t.is_terminal(), "{t:?}");
    let done = poll_until_terminal(&c, &t.id);
    assert_eq!(done.status.state, TaskState::Completed);
    assert_eq!(done.answer_text(), "echo: hello");

    let t = c.send_message("fail now", None, true).unwrap();
    let failed = poll_until_terminal(&c, &t.id);
    assert_eq!(failed.status.state, TaskState::Failed);
    assert_eq!(
        failed.status.message_text().as_deref(),
        Some("failed: asked to fail")
    );
    assert!(!failed.murmur().no_answer);

    let t = c.send_message("slow job", None, true).unwrap();
    let canceled = c.cancel_task(&t.id).unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    assert_eq!(c.cancel_task(&t.id).unwrap_err().rpc_code(), Some(-32002));
    assert_eq!(
        c.get_task("no-such-task").unwrap_err().rpc_code(),
        Some(-32001)
    );

    let blocking = c.send_message("wait for me", None, false).unwrap();
    assert_eq!(blocking.answer_text(), "echo: wait for me");

    let wrong = A2aClient::new(server.url.clone(), "wrong");
    assert_eq!(wrong.get_task("x").unwrap_err().http_status(), Some(401));
}

#[test]
fn sdk_server_fail_mode_fails_every_task() {
    let server = sdk::Server::start(TOKEN, &["--mode", "fail", "--delay", "0"], Stdio::inherit());
    let c = A2aClient::new(server.url.clone(), TOKEN);
    let t = c.send_message("anything", None, false).unwrap();
    assert_eq!(t.status.state, TaskState::Failed, "{t:?}");
}

fn list(addr: SocketAddr, params: Value) -> Value {
    rpc(
        addr,
        &json!({"jsonrpc": "2.0", "id": "l1", "method": "ListTasks", "params": params}),
    )
}

#[test]
fn list_tasks_filters_sorts_and_pages_with_a_cursor() {
    let d = door_with(Echo::new(0, 0), DoorLimits::default());
    let a = d.local_addr();
    let c = A2aClient::new(d.url(), TOKEN);
    let mut ids = Vec::new();
    for i in 0..5 {
        let ctx = if i % 2 == 0 { "even" } else { "odd" };
        let v = rpc(
            a,
            &json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {
                "message": {"messageId": format!("m{i}"), "contextId": ctx, "role": "ROLE_USER", "parts": [{"text": format!("t{i}")}]}}}),
        );
        ids.push(v["result"]["task"]["id"].as_str().unwrap().to_string());
    }
    let slow = c.send_message("slow one", None, true).unwrap();
    // The handler moves it to WORKING on a thread of its own: wait for that, so a
    // loaded machine does not list it still SUBMITTED.
    let end = Instant::now() + Duration::from_secs(30);
    while c.get_task(&slow.id).unwrap().status.state != TaskState::Working && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }

    // Everything, most recently updated first, artifacts left out by default.
    let all = list(a, json!({}));
    let r = &all["result"];
    assert_eq!(r["totalSize"], 6, "{all}");
    assert_eq!(r["pageSize"], 50);
    assert_eq!(r["nextPageToken"], "");
    let tasks = r["tasks"].as_array().unwrap();
    let stamps: Vec<&str> = tasks
        .iter()
        .map(|t| t["status"]["timestamp"].as_str().unwrap())
        .collect();
    let mut sorted = stamps.clone();
    sorted.sort_by(|x, y| y.cmp(x));
    assert_eq!(stamps, sorted, "newest first");
    assert!(tasks.iter().all(|t| t.get("artifacts").is_none()), "{all}");
    assert_eq!(
        tasks[0]["id"],
        slow.id.as_str(),
        "the slow task changed last"
    );

    // Pages of two, each token continuing where the last page ended, no overlap.
    let mut seen = Vec::new();
    let mut token = String::new();
    for page in 0..3 {
        let v = list(a, json!({"pageSize": 2, "pageToken": token}));
        let r = &v["result"];
        assert_eq!(r["pageSize"], 2);
        assert_eq!(r["totalSize"], 6);
        for t in r["tasks"].as_array().unwrap() {
            seen.push(t["id"].as_str().unwrap().to_string());
        }
        token = r["nextPageToken"].as_str().unwrap().to_string();
        assert_eq!(token.is_empty(), page == 2, "{v}");
    }
    let listed: Vec<String> = tasks
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(seen, listed);

    // Filters: context, state, time; artifacts and history on request.
    let v = list(
        a,
        json!({"contextId": "odd", "includeArtifacts": true, "historyLength": 1}),
    );
    let odd = v["result"]["tasks"].as_array().unwrap();
    assert_eq!(odd.len(), 2, "{v}");
    assert!(odd.iter().all(|t| t["contextId"] == "odd"));
    assert_eq!(odd[0]["artifacts"][0]["parts"][0]["text"], "echo: t3");
    assert_eq!(odd[0]["history"].as_array().unwrap().len(), 1, "{v}");
    let v = list(a, json!({"status": "TASK_STATE_WORKING"}));
    assert_eq!(v["result"]["totalSize"], 1, "{v}");
    assert_eq!(v["result"]["tasks"][0]["id"], slow.id.as_str());
    let v = list(a, json!({"statusTimestampAfter": "2999-01-01T00:00:00Z"}));
    assert_eq!(v["result"]["tasks"], json!([]), "{v}");
    assert_eq!(v["result"]["nextPageToken"], "");
    let v = list(
        a,
        json!({"statusTimestampAfter": "2000-01-01T02:00:00+02:00", "historyLength": 0}),
    );
    assert_eq!(v["result"]["totalSize"], 6, "{v}");
    assert!(v["result"]["tasks"][0].get("history").is_none(), "{v}");

    // What does not parse is -32602, naming the field.
    for (params, field) in [
        (json!({"pageSize": 0}), "pageSize"),
        (json!({"pageSize": 101}), "pageSize"),
        (json!({"pageSize": "ten"}), "pageSize"),
        (json!({"pageToken": "not-a-token"}), "pageToken"),
        (json!({"status": "TASK_STATE_PONDERING"}), "status"),
        (
            json!({"statusTimestampAfter": "2026-10-27T10:00:00"}),
            "statusTimestampAfter",
        ),
        (json!({"includeArtifacts": "yes"}), "includeArtifacts"),
        (json!({"historyLength": -1}), "historyLength"),
    ] {
        let v = list(a, params.clone());
        assert_error(&v, &json!("l1"), -32602, Some("INVALID_PARAMS"));
        let why = v["error"]["data"][0]["metadata"]["parseError"]
            .as_str()
            .unwrap();
        assert!(why.contains(field), "{params}: {why}");
    }
    let _ = ids;
}

#[test]
fn push_notification_config_methods_are_not_supported_while_the_card_says_so() {
    let d = door();
    let card = A2aClient::new(d.url(), "").agent_card().unwrap();
    assert!(!card.capabilities.push_notifications);
    for method in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        let v = rpc(
            d.local_addr(),
            &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": {"taskId": "t", "id": "c"}}),
        );
        assert_eq!(
            v,
            json!({"error": {"code": -32003, "message": "Push notifications are not supported by the agent",
                "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "PUSH_NOTIFICATION_NOT_SUPPORTED", "domain": "a2a-protocol.org", "metadata": {}}]},
                "id": 7, "jsonrpc": "2.0"}),
            "{method}"
        );
    }
}

#[test]
fn a_body_that_is_not_application_json_is_415_before_it_is_parsed() {
    let d = door();
    let a = d.local_addr();
    let body = get_task("x").to_string();
    let with = |ct: Option<&str>, body: &str| {
        let mut req = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nA2A-Version: 1.0\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(ct) = ct {
            req.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        raw(a, req.as_bytes())
    };
    for (ct, shown) in [
        (Some("text/plain"), "Content-Type 'text/plain'"),
        (
            Some("application/x-www-form-urlencoded"),
            "Content-Type 'application/x-www-form-urlencoded'",
        ),
        (None, "no Content-Type"),
    ] {
        // Not parsed: a body that is not even JSON gets the same answer.
        for b in [body.as_str(), "{not json"] {
            let r = with(ct, b);
            assert_eq!(r.status, 415, "{ct:?}");
            let v = r.json();
            assert_error(&v, &Value::Null, -32005, Some("CONTENT_TYPE_NOT_SUPPORTED"));
            assert_eq!(
                v["error"]["message"],
                format!("Unsupported media type: the request has {shown}; send the JSON-RPC request as Content-Type: application/json")
            );
        }
    }
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let r = with(Some(ct), &body);
        assert_eq!(r.status, 200, "{ct}");
        assert_eq!(r.json()["error"]["code"], -32001, "{ct}");
    }
}

#[test]
fn message_id_is_required_and_parts_must_carry_what_the_card_takes() {
    let d = door();
    let a = d.local_addr();
    let send_parts = |message: Value| {
        rpc(
            a,
            &json!({"jsonrpc": "2.0", "id": "p", "method": "SendMessage", "params": {
                "message": message, "configuration": {"returnImmediately": true}}}),
        )
    };
    let violation = |v: &Value, field: &str, description: &str| {
        assert_error(v, &json!("p"), -32602, Some("INVALID_PARAMS"));
        assert_eq!(v["error"]["message"], "Validation failed", "{v}");
        assert_eq!(
            v["error"]["data"][1]["fieldViolations"],
            json!([{"field": field, "description": description}]),
            "{v}"
        );
    };
    let v = send_parts(json!({"role": "ROLE_USER", "parts": [{"text": "hi"}]}));
    violation(&v, "message.messageId", "Field is required.");
    let v = send_parts(json!({"messageId": "", "role": "ROLE_USER", "parts": [{"text": "hi"}]}));
    violation(&v, "message.messageId", "Field is required.");
    let v = send_parts(
        json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}, {"mediaType": "text/plain"}]}),
    );
    violation(
        &v,
        "message.parts[1]",
        "Part must carry one of text, data, url or raw.",
    );
    for (part, kind, media) in [
        (json!({"data": {"k": 1}}), "data", "application/json"),
        (
            json!({"url": "https://example.org/a.png", "mediaType": "image/png"}),
            "url",
            "image/png",
        ),
        (json!({"raw": "dGNr"}), "raw", "application/octet-stream"),
    ] {
        let v = send_parts(
            json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "see this"}, part]}),
        );
        assert_error(&v, &json!("p"), -32005, Some("CONTENT_TYPE_NOT_SUPPORTED"));
        assert_eq!(
            v["error"]["message"],
            format!("Incompatible content types: message part 1 is a {kind} part ({media}); this agent takes text/plain")
        );
    }
    // A text part is read as text whatever its mediaType says.
    let v = send_parts(
        json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "# hi", "mediaType": "text/markdown"}]}),
    );
    assert!(v["result"]["task"]["id"].is_string(), "{v}");
}

#[test]
fn mur_door_keeps_history_lists_tasks_and_logs_one_line_per_event_without_secrets() {
    let token = "door-secret-token-4711";
    let c = support::Capsule::scripted(
        &[],
        "",
        "- text: \"first answer\"\n- text: \"second answer\"\n",
    );
    let log_path = c.root.path().join("door.log");
    let mut child = c
        .mur()
        .arg("door")
        .arg(&c.dir)
        .args(["--listen", "127.0.0.1:0", "--records-dir"])
        .arg(&c.records)
        .env("MURMUR_DOOR_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().strip_prefix("door: ").unwrap().to_string();
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let call = |body: Value| {
        let r = post(addr, Some(token), Some("1.0"), &body.to_string());
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };

    // SendMessage (blocking) answers the finished task with its history: the client's
    // message as sent, with the task's ids filled in.
    let v = call(
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m-hist-1", "contextId": "ctx-a", "role": "ROLE_USER",
            "parts": [{"text": "what is first?"}], "metadata": {"k": "v"}}}}),
    );
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    let id = task["id"].as_str().unwrap().to_string();
    assert_eq!(
        task["history"][0],
        json!({"messageId": "m-hist-1", "role": "ROLE_USER", "parts": [{"text": "what is first?"}],
            "contextId": "ctx-a", "taskId": id, "metadata": {"k": "v"}}),
        "{v}"
    );
    // GetTask trims it: 0 = none, 1 = the last message.
    let v = call(
        json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": id, "historyLength": 0}}),
    );
    assert!(v["result"].get("history").is_none(), "{v}");
    let v = call(json!({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": id}}));
    let full = v["result"]["history"].as_array().unwrap().len();
    assert!(full >= 1, "{v}");
    let v = call(
        json!({"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": id, "historyLength": 1}}),
    );
    assert_eq!(v["result"]["history"].as_array().unwrap().len(), 1, "{v}");

    // A second task in another context; ListTasks sees both, filters by context.
    let v = call(
        json!({"jsonrpc": "2.0", "id": 5, "method": "SendMessage", "params": {
        "message": {"messageId": "m-hist-2", "role": "ROLE_USER", "parts": [{"text": "and second?"}]}}}),
    );
    let second = v["result"]["task"]["id"].as_str().unwrap().to_string();
    let v = call(json!({"jsonrpc": "2.0", "id": 6, "method": "ListTasks", "params": {}}));
    let listed: Vec<&str> = v["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![second.as_str(), id.as_str()], "{v}");
    let v = call(
        json!({"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {"contextId": "ctx-a"}}),
    );
    assert_eq!(v["result"]["totalSize"], 1, "{v}");

    // Refused requests: a wrong token, a missing one, a body that is not JSON.
    assert_eq!(post(addr, Some("not-it"), Some("1.0"), "{}").status, 401);
    assert_eq!(post(addr, None, Some("1.0"), "{}").status, 401);
    let r = post(addr, Some(token), Some("1.0"), "{broken");
    assert_eq!(r.json()["error"]["code"], -32700);
    // A method or a path the door does not serve.
    assert_eq!(
        raw(addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").status,
        405
    );
    assert_eq!(
        raw(
            addr,
            b"GET /v1/chat?k=secret HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        .status,
        404
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains(token), "{log}");
    assert!(!log.contains("what is first?"), "no task text: {log}");
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    for t in [&id, &second] {
        assert_eq!(
            lines(&format!(
                "task {t} received from client; TASK_STATE_SUBMITTED"
            )),
            1,
            "{log}"
        );
        assert_eq!(lines(&format!("task {t} TASK_STATE_WORKING")), 1, "{log}");
        let ended: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&format!("task {t} ended TASK_STATE_COMPLETED after ")))
            .collect();
        assert_eq!(ended.len(), 1, "{log}");
        let secs = ended[0].rsplit("after ").next().unwrap();
        assert!(
            secs.ends_with('s') && secs.trim_end_matches('s').parse::<f64>().is_ok(),
            "{secs}"
        );
        // Received, working, ended: in that order.
        let at = |needle: &str| log.find(needle).unwrap();
        assert!(at(&format!("task {t} received")) < at(&format!("task {t} TASK_STATE_WORKING")));
        assert!(at(&format!("task {t} TASK_STATE_WORKING")) < at(&format!("task {t} ended")));
    }
    assert_eq!(lines("HTTP 401, bearer token wrong"), 1, "{log}");
    assert_eq!(lines("HTTP 401, bearer token missing"), 1, "{log}");
    assert_eq!(lines("refused a request from 127.0.0.1:"), 5, "{log}");
    assert_eq!(
        lines(": HTTP 405 Method Not Allowed, GET / (allowed: POST)"),
        1,
        "{log}"
    );
    assert_eq!(lines(": HTTP 404 Not Found, GET /v1/chat"), 1, "{log}");
    assert!(!log.contains("secret"), "no query string: {log}");
    assert_eq!(lines(" -32700 Invalid JSON: "), 1, "{log}");
    assert!(
        log.lines()
            .all(|l| l.contains(" INFO ") || l.contains(" WARN ") || l.contains(" ERROR ")),
        "{log}"
    );
}

#[test]
fn a_key_named_twice_is_an_invalid_request_naming_it_not_last_wins() {
    let d = door();
    let a = d.local_addr();
    let call = |body: &str| {
        let r = post(a, Some(TOKEN), Some("1.0"), body);
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    };
    let v = call(
        r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","method":"ListTasks","params":{"id":"x"}}"#,
    );
    assert_error(&v, &json!(1), -32600, None);
    assert_eq!(v["error"]["message"], "Invalid request: duplicate key \"method\" in the request object; a JSON-RPC request must name each key once");
    let v = call(r#"{"jsonrpc":"2.0","id":"p","method":"GetTask","params":{"id":"x","id":"y"}}"#);
    assert_error(&v, &json!("p"), -32600, None);
    assert_eq!(v["error"]["message"], "Invalid request: duplicate key \"id\" in `params`; a JSON-RPC request must name each key once");
    let v = call(
        r#"{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"a","text":"b"}]}}}"#,
    );
    assert_eq!(v["error"]["message"], "Invalid request: duplicate key \"text\" in `params.message.parts[0]`; a JSON-RPC request must name each key once");
    // The id itself doubled: which one to echo is not known, so null.
    let v = call(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"GetTask","params":{"id":"x"}}"#);
    assert_error(&v, &Value::Null, -32600, None);
    // Two Authorization headers, even two right ones: 400, whichever came first.
    let body = get_task("x").to_string();
    for second in [TOKEN, "wrong"] {
        let req = format!(
            "POST / HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nAuthorization: Bearer {TOKEN}\r\nAuthorization: Bearer {second}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let r = raw(a, req.as_bytes());
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.body, "the request has 2 Authorization headers; send exactly one: Authorization: Bearer <token>\n");
    }
}

#[test]
fn a_numeric_id_and_a_number_out_of_range_are_written_as_sent() {
    let d = door();
    let a = d.local_addr();
    for id in ["123456789012345678901234567890", "1e2", "-0", "12.50"] {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"GetTask","params":{{"id":"x"}}}}"#);
        let r = post(a, Some(TOKEN), Some("1.0"), &body);
        assert!(
            r.body.contains(&format!("\"id\":{id},")),
            "{id}: {}",
            r.body
        );
        assert_eq!(r.json()["error"]["code"], -32001, "{}", r.body);
    }
    let r = post(
        a,
        Some(TOKEN),
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":100000000000000000000}}"#,
    );
    assert_eq!(r.json()["error"]["data"][0]["metadata"]["parseError"], "Failed to parse pageSize field: expected an integer from 1 to 100, got 100000000000000000000", "{}", r.body);
    let r = post(
        a,
        Some(TOKEN),
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x","history_length":1E+20}}"#,
    );
    assert_eq!(
        r.json()["error"]["data"][0]["metadata"]["parseError"],
        "Failed to parse historyLength field: expected a non-negative integer, got 1E+20",
        "{}",
        r.body
    );
    let r = post(
        a,
        Some(TOKEN),
        Some("1.0"),
        r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"a"}]},"configuration":{"historyLength":-1.0e3}}}"#,
    );
    assert_eq!(
        r.json()["error"]["data"][0]["metadata"]["parseError"],
        "Failed to parse historyLength field: expected a non-negative integer, got -1.0e3",
        "{}",
        r.body
    );
}

#[test]
fn a_page_token_this_door_did_not_give_out_is_refused() {
    let d = door_with(Echo::new(0, 0), DoorLimits::default());
    let a = d.local_addr();
    let mut ids = Vec::new();
    for i in 0..3 {
        let v = rpc(a, &send(&format!("t{i}"), false));
        ids.push(v["result"]["task"]["id"].as_str().unwrap().to_string());
    }
    let page = list(a, json!({"pageSize": 1}));
    let token = page["result"]["nextPageToken"]
        .as_str()
        .unwrap()
        .to_string();
    let next = list(a, json!({"pageSize": 1, "pageToken": token}));
    assert!(next["result"]["tasks"][0]["id"].is_string(), "{next}");
    // The token's readable part, rewritten to point elsewhere, or alone (the hex of
    // `<timestamp> <task id>`, as tokens used to be): refused.
    let (payload, tag) = token.split_once('.').expect("payload.tag");
    let ts = "2099-01-01T00:00:00.000000Z";
    let forged_payload: String = format!("{ts} {}", ids[0])
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    for forged in [
        payload.to_string(),
        format!("{forged_payload}.{tag}"),
        forged_payload.clone(),
    ] {
        let v = list(a, json!({"pageSize": 1, "pageToken": forged}));
        assert_eq!(v["error"]["code"], -32602, "{v}");
        assert_eq!(
            v["error"]["data"][0]["metadata"]["parseError"],
            "Failed to parse pageToken field: not a nextPageToken this agent gave out",
            "{v}"
        );
    }
    // Another door's token is not this door's.
    let other = door_with(Echo::new(0, 0), DoorLimits::default());
    let v = list(
        other.local_addr(),
        json!({"pageSize": 1, "pageToken": token}),
    );
    assert_eq!(v["error"]["code"], -32602, "{v}");
}

#[test]
fn door_log_lines_show_client_values_escaped_never_stripped_or_split() {
    let token = "door-secret-token-4711";
    let c = support::Capsule::scripted(&[], "", "- text: \"answer\"\n");
    let log_path = c.root.path().join("door.log");
    let mut child = c
        .mur()
        .arg("door")
        .arg(&c.dir)
        .args(["--listen", "127.0.0.1:0", "--records-dir"])
        .arg(&c.records)
        .env("MURMUR_DOOR_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line
        .trim()
        .trim_start_matches("door: http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let forged = "X\n[2026-12-01T09:00:00.000Z INFO  mur::door] task tsk_forged ended TASK_STATE_COMPLETED after 1.000s";
    for method in ["Get\u{0}Task", forged] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": "x"}});
        let r = post(addr, Some(token), Some("1.0"), &body.to_string());
        assert_eq!(r.json()["error"]["code"], -32601, "{}", r.body);
    }
    let ct = "POST / HTTP/1.1\r\nContent-Type: text/\x1b[31mred\r\nAuthorization: Bearer door-secret-token-4711\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    assert_eq!(raw(addr, ct.as_bytes()).status, 415);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("refused Get\\0Task from 127.0.0.1:"), "{log}");
    assert!(
        log.contains(
            "refused X\\n[2026-12-01T09:00:00.000Z INFO  mur::door] task tsk_forged ended"
        ),
        "{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.starts_with("[2026-12-01T09:00:00.000Z")),
        "{log}"
    );
    assert!(log.contains("Content-Type 'text/\\u{1b}[31mred'"), "{log}");
    assert!(!log.contains('\u{0}') && !log.contains('\u{1b}'), "{log}");
}

/// `mur door` on a scripted capsule with `args` and `MURMUR_DOOR_TOKEN` as given:
/// whether it started (printed its URL; it is then stopped with SIGTERM), its exit
/// code and its stderr.
fn door_run(
    c: &support::Capsule,
    args: &[&std::ffi::OsStr],
    env_token: Option<&str>,
) -> (bool, i32, String) {
    static STARTS: AtomicUsize = AtomicUsize::new(0);
    let records = c
        .root
        .path()
        .join(format!("records-{}", STARTS.fetch_add(1, Ordering::SeqCst)));
    let mut cmd = c.mur();
    cmd.arg("door")
        .arg(&c.dir)
        .args(["--records-dir"])
        .arg(&records)
        .args(args)
        .env_remove("MURMUR_DOOR_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !args.iter().any(|a| *a == "--listen") {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    if let Some(t) = env_token {
        cmd.env("MURMUR_DOOR_TOKEN", t);
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let started = line.starts_with("door: ");
    if started {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        started,
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`door_run`]: `None` when the door started, else its exit code and stderr.
fn door_start(
    c: &support::Capsule,
    args: &[&std::ffi::OsStr],
    env_token: Option<&str>,
) -> Option<(i32, String)> {
    match door_run(c, args, env_token) {
        (true, _, _) => None,
        (false, code, err) => Some((code, err)),
    }
}

#[test]
fn a_token_file_open_to_others_or_a_short_token_is_refused_with_how_to_fix_it() {
    use std::os::unix::fs::PermissionsExt;
    let c = support::Capsule::scripted(&[], "", "- text: hi\n");
    let file = c.root.path().join("door.token");
    std::fs::write(&file, "0123456789abcdef0123456789abcdef\n").unwrap();
    let arg = [std::ffi::OsStr::new("--token-file"), file.as_os_str()];
    for mode in [0o644, 0o640, 0o604, 0o620] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, err) = door_start(&c, &arg, None).expect("refused");
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!(
                "--token-file {} can be read or written by other users (mode {mode:04o}); make it private with `chmod 600 {}`",
                file.display(),
                file.display()
            )),
            "{err}"
        );
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(door_start(&c, &arg, None), None);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(door_start(&c, &arg, None), None);

    // Shorter than 16 bytes, from the file or the environment.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&file, "short-token\n").unwrap();
    let (code, err) = door_start(&c, &arg, None).expect("refused");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "--token-file {}: the bearer token is 11 bytes, shorter than the 16 a door accepts; make one with `openssl rand -hex 32`",
            file.display()
        )),
        "{err}"
    );
    let (code, err) = door_start(&c, &[], Some("fifteen-bytes!!")).expect("refused");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "MURMUR_DOOR_TOKEN: the bearer token is 15 bytes, shorter than the 16 a door accepts"
        ),
        "{err}"
    );
    assert_eq!(door_start(&c, &[], Some("sixteen-bytes!!!")), None);
}

/// The `supportedInterfaces[0].url` of the card `door` serves to a request with `host`.
fn card_url(addr: SocketAddr, host: &str) -> String {
    let r = raw(
        addr,
        format!("GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(r.status, 200);
    r.json()["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_card_advertises_the_url_it_is_given_or_the_host_it_was_asked_at() {
    let d = door_with(
        Echo::new(0, 0),
        DoorLimits {
            advertised_url: Some("https://agent.example.com/a2a/".into()),
            ..DoorLimits::default()
        },
    );
    assert_eq!(
        card_url(d.local_addr(), "anything"),
        "https://agent.example.com/a2a/"
    );
    // Bound to every address: the host the client asked, never 0.0.0.0.
    let any = Door::start(
        "0.0.0.0:0".parse().unwrap(),
        TOKEN.into(),
        Echo::new(0, 0),
        DoorLimits::default(),
    )
    .unwrap();
    let port = any.local_addr().port();
    let local: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert_eq!(
        card_url(local, "203.0.113.9:7431"),
        "http://203.0.113.9:7431/"
    );
    assert_eq!(
        card_url(local, "agent.example.com"),
        "http://agent.example.com/"
    );
    // A Host that is no plain host[:port] is not echoed.
    assert_eq!(
        card_url(local, "evil/x?y"),
        format!("http://0.0.0.0:{port}/")
    );
    // Bound to one address, that address whatever the Host.
    let d = door();
    assert_eq!(
        card_url(d.local_addr(), "elsewhere:1"),
        format!("http://{}/", d.local_addr())
    );
    for (bad, why) in [
        (
            "ftp://agent.example.com/",
            "must start with http:// or https://",
        ),
        ("agent.example.com", "must start with http:// or https://"),
        ("https://", "is not a URL"),
    ] {
        let e = Door::start(
            "127.0.0.1:0".parse().unwrap(),
            TOKEN.into(),
            Echo::new(0, 0),
            DoorLimits {
                advertised_url: Some(bad.into()),
                ..DoorLimits::default()
            },
        )
        .err()
        .unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
}

#[test]
fn mur_door_beyond_loopback_warns_that_the_token_travels_in_clear() {
    let c = support::Capsule::scripted(&[], "", "- text: hi\n");
    let token = Some("door-token-for-tests");
    let os = |v: &'static str| std::ffi::OsStr::new(v);
    let warning = "beyond loopback, over plain HTTP: the bearer token and every task travel in clear; put a TLS terminator (a reverse proxy) in front and give its address with --advertise-url https://…, or listen on 127.0.0.1";
    let (started, _, err) = door_run(&c, &[os("--listen"), os("0.0.0.0:0")], token);
    assert!(started, "{err}");
    assert!(err.contains(warning), "{err}");
    let (started, _, err) = door_run(&c, &[], token);
    assert!(started, "{err}");
    assert!(!err.contains("plain HTTP"), "{err}");
    let (started, _, err) = door_run(
        &c,
        &[
            os("--listen"),
            os("0.0.0.0:0"),
            os("--advertise-url"),
            os("https://agent.example.com/"),
        ],
        token,
    );
    assert!(started, "{err}");
    assert!(!err.contains("plain HTTP"), "{err}");
    let (started, code, err) = door_run(&c, &[os("--advertise-url"), os("ftp://x/")], token);
    assert!(!started);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "--advertise-url: advertised URL `ftp://x/` must start with http:// or https://"
        ),
        "{err}"
    );
}
