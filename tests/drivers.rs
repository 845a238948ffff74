//! The network drivers against fake providers: a scripted HTTP server on 127.0.0.1
//! that answers each request with the next scripted reply and records what it got.
//! The faults are the kinds public bug reports describe: Retry-After in every form,
//! HTML error pages, reused call ids, streams that break off or carry an error event,
//! servers that answer a streaming request with plain JSON.

use crate::support;

use std::collections::VecDeque;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use mur::inference::anthropic::AnthropicDriver;
use mur::inference::openai::OpenAiDriver;
use mur::inference::retry::Backoff;
use mur::inference::{
    Arguments, Attempt, Driver, DriverError, Message, Request, Response, ToolCall, ToolSpec,
};
use mur::manifest::types::{Credential, DriverChoice, DriverKind};
use serde_json::{json, Value};

// ---------------------------------------------------------------- fake server

/// One scripted answer.
struct Reply {
    status: u16,
    content_type: &'static str,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
    /// When set, the body is sent in these pieces, each after its pause (chunked).
    chunks: Option<Vec<(Duration, String)>>,
}

fn reply(status: u16, body: Value) -> Reply {
    raw_reply(status, &body.to_string())
}

fn raw_reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: body.to_string(),
        delay: Duration::ZERO,
        chunks: None,
    }
}

/// A `text/event-stream` answer of these events (`event` name or "", data), sent at
/// once.
fn sse(events: &[(&str, Value)]) -> Reply {
    let mut body = String::from(": a comment, as servers send to keep the line open\n\n");
    for (event, data) in events {
        if !event.is_empty() {
            body.push_str(&format!("event: {event}\n"));
        }
        body.push_str(&format!("data: {data}\n\n"));
    }
    Reply {
        content_type: "text/event-stream",
        ..raw_reply(200, &body)
    }
}

impl Reply {
    fn content_type(mut self, value: &'static str) -> Self {
        self.content_type = value;
        self
    }

    /// Sends the body as these pieces, each after its pause.
    fn paced(mut self, chunks: Vec<(Duration, String)>) -> Self {
        self.chunks = Some(chunks);
        self
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// One request the fake server received.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct FakeServer {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl FakeServer {
    fn start(replies: Vec<Reply>) -> Self {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
        let port = server.server_addr().to_ip().expect("ip address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let server = Arc::clone(&server);
            let seen = Arc::clone(&seen);
            let mut replies: VecDeque<Reply> = replies.into();
            std::thread::spawn(move || {
                for mut rq in server.incoming_requests() {
                    let mut text = String::new();
                    let _ = std::io::Read::read_to_string(rq.as_reader(), &mut text);
                    seen.lock().unwrap().push(Seen {
                        path: rq.url().to_string(),
                        headers: rq
                            .headers()
                            .iter()
                            .map(|h| (h.field.to_string(), h.value.to_string()))
                            .collect(),
                        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
                    });
                    let r = replies
                        .pop_front()
                        .unwrap_or_else(|| raw_reply(500, "fake server: script exhausted"));
                    std::thread::sleep(r.delay);
                    let mut headers = vec![tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        r.content_type.as_bytes(),
                    )
                    .unwrap()];
                    for (k, v) in &r.headers {
                        headers.push(
                            tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).unwrap(),
                        );
                    }
                    if let Some(chunks) = r.chunks {
                        // tiny_http buffers a chunked body; write this one by hand,
                        // flushing each piece, the end of the body at the close.
                        let mut w = rq.into_writer();
                        let mut head = format!(
                            "HTTP/1.1 {} OK\r\nContent-Type: {}\r\nConnection: close\r\n",
                            r.status, r.content_type
                        );
                        for (k, v) in &r.headers {
                            head.push_str(&format!("{k}: {v}\r\n"));
                        }
                        head.push_str("\r\n");
                        let _ = w.write_all(head.as_bytes()).and_then(|_| w.flush());
                        for (pause, piece) in chunks {
                            std::thread::sleep(pause);
                            if w.write_all(piece.as_bytes())
                                .and_then(|_| w.flush())
                                .is_err()
                            {
                                break;
                            }
                        }
                        continue;
                    }
                    let n = r.body.len();
                    let resp = tiny_http::Response::new(
                        tiny_http::StatusCode(r.status),
                        headers,
                        std::io::Cursor::new(r.body.into_bytes()),
                        Some(n),
                        None,
                    );
                    let _ = rq.respond(resp);
                }
            })
        };
        FakeServer {
            base: format!("http://127.0.0.1:{port}"),
            seen,
            server,
            thread: Some(thread),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------- helpers

/// A capsule directory holding a key file `key.txt`.
struct Capsule {
    dir: tempfile::TempDir,
}

impl Capsule {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key.txt"), "sk-test\n").unwrap();
        Capsule { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn choice(kind: DriverKind, base_url: &str, max_retries: u32) -> DriverChoice {
    DriverChoice {
        driver: kind,
        model: Some("test-model".to_string()),
        base_url: Some(base_url.to_string()),
        credential: Some(Credential::File(PathBuf::from("key.txt"))),
        script: None,
        context_window: None,
        max_output_tokens: Some(256),
        max_input_tokens: None,
        temperature: Some(0.2),
        request_timeout_secs: 30,
        max_retries,
        max_retry_after_secs: 60,
        stream: true,
    }
}

fn openai(base_url: &str, max_retries: u32, capsule: &Capsule) -> OpenAiDriver {
    OpenAiDriver::new(
        &choice(DriverKind::Openai, base_url, max_retries),
        capsule.path(),
    )
    .unwrap()
    .with_backoff(Backoff::fast())
}

fn anthropic(base_url: &str, max_retries: u32, capsule: &Capsule) -> AnthropicDriver {
    AnthropicDriver::new(
        &choice(DriverKind::Anthropic, base_url, max_retries),
        capsule.path(),
    )
    .unwrap()
    .with_backoff(Backoff::fast())
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "ls".to_string(),
        description: "List files".to_string(),
        input_schema: json!({"type": "object", "properties": {"args": {"type": "array"}}}),
    }]
}

/// Calls the driver with a one-message conversation, returning the result and every
/// attempt reported.
fn call(
    driver: &mut dyn Driver,
    messages: &[Message],
    tools: &[ToolSpec],
) -> (Result<Response, DriverError>, Vec<Attempt>) {
    let req = Request {
        system: "You are terse.",
        messages,
        tools,
        max_output_tokens: None,
    };
    let mut attempts = Vec::new();
    let result = driver.complete(&req, &mut |a| attempts.push(a));
    (result, attempts)
}

fn hello() -> Vec<Message> {
    vec![Message::User("Say hello.".to_string())]
}

fn openai_answer(message: Value, usage: Option<Value>) -> Value {
    let mut v = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "test-model-2024",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "system_fingerprint": "fp",
    });
    if let Some(u) = usage {
        v["usage"] = u;
    }
    v
}

fn text_answer() -> Value {
    openai_answer(
        json!({"role": "assistant", "content": "Hello!"}),
        Some(
            json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                     "prompt_tokens_details": {"cached_tokens": 2}}),
        ),
    )
}

// ---------------------------------------------------------------- openai

#[test]
fn openai_text_answer_with_usage() {
    let server = FakeServer::start(vec![reply(200, text_answer())]);
    let capsule = Capsule::new();
    let mut d = openai(&format!("{}/v1/", server.base), 0, &capsule);
    let (result, attempts) = call(&mut d, &hello(), &[]);
    let r = result.unwrap();
    assert_eq!(r.text.as_deref(), Some("Hello!"));
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!(r.model.as_deref(), Some("test-model-2024"));
    assert_eq!(r.usage.input, 12);
    assert_eq!(r.usage.output, 3);
    assert_eq!(r.usage.cached, Some(2));
    assert!(!r.usage.estimated);
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].number, 1);
    assert_eq!(attempts[0].outcome, "ok");
    assert_eq!(attempts[0].http_status, Some(200));

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-test"));
    let b = &seen[0].body;
    assert_eq!(b["model"], "test-model");
    // A streaming request (the default) answered with plain JSON is read as JSON.
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert!(seen[0]
        .header("accept")
        .unwrap()
        .contains("text/event-stream"));
    assert_eq!(b["max_tokens"], 256);
    assert_eq!(b["temperature"], 0.2);
    assert!(b.get("tools").is_none(), "no tools key when no tools: {b}");
    assert_eq!(
        b["messages"],
        json!([{"role": "system", "content": "You are terse."},
               {"role": "user", "content": "Say hello."}])
    );
}

#[test]
fn openai_tool_calls_and_request_shape() {
    let answer = openai_answer(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_abc", "type": "function",
             "function": {"name": "ls", "arguments": "{\"args\":[\"-1\"]}"}},
            {"type": "function", "function": {"name": "session-status", "arguments": ""}},
        ]}),
        Some(json!({"prompt_tokens": 40, "completion_tokens": 9})),
    );
    let server = FakeServer::start(vec![reply(200, answer)]);
    let capsule = Capsule::new();
    let mut d = openai(&server.base, 0, &capsule);
    let conversation = vec![
        Message::User("List files.".to_string()),
        Message::Assistant {
            text: None,
            tool_calls: vec![
                ToolCall {
                    id: "call_1".to_string(),
                    name: "ls".to_string(),
                    arguments: Arguments::Json(json!({"args": []})),
                },
                ToolCall {
                    id: "call_2".to_string(),
                    name: "ls".to_string(),
                    arguments: Arguments::Invalid("{args: oops".to_string()),
                },
            ],
        },
        Message::Tool {
            call_id: "call_1".to_string(),
            name: "ls".to_string(),
            content: "a\nb".to_string(),
            is_error: false,
        },
        Message::Tool {
            call_id: "call_2".to_string(),
            name: "ls".to_string(),
            content: "error: arguments are not JSON".to_string(),
            is_error: true,
        },
    ];
    let (result, _) = call(&mut d, &conversation, &tools());
    let r = result.unwrap();
    assert_eq!(r.text, None);
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].id, "call_abc");
    assert_eq!(r.tool_calls[0].name, "ls");
    assert_eq!(
        r.tool_calls[0].arguments,
        Arguments::Json(json!({"args": ["-1"]}))
    );
    assert_eq!(r.tool_calls[1].id, "mur_call_1", "a missing id is made up");
    assert_eq!(r.tool_calls[1].name, "session-status");
    assert_eq!(r.tool_calls[1].arguments, Arguments::Json(json!({})));

    let b = &server.seen()[0].body;
    assert_eq!(
        b["tools"],
        json!([{"type": "function", "function": {
            "name": "ls", "description": "List files",
            "parameters": {"type": "object", "properties": {"args": {"type": "array"}}}}}])
    );
    let msgs = b["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 5);
    assert_eq!(msgs[2]["role"], "assistant");
    assert_eq!(msgs[2]["content"], Value::Null);
    assert_eq!(
        msgs[2]["tool_calls"][0],
        json!({"id": "call_1", "type": "function",
               "function": {"name": "ls", "arguments": "{\"args\":[]}"}})
    );
    // Text that was not JSON goes back as a JSON string, so servers that parse
    // arguments do not reject the conversation.
    assert_eq!(
        msgs[2]["tool_calls"][1]["function"]["arguments"],
        "\"{args: oops\""
    );
    assert_eq!(
        msgs[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "a\nb"})
    );
    assert_eq!(msgs[4]["tool_call_id"], "call_2");
}

#[test]
fn openai_arguments_not_json_are_invalid() {
    let answer = openai_answer(
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "ls", "arguments": "{\"args\": [\"-l\""}}]}),
        Some(json!({"prompt_tokens": 5, "completion_tokens": 5})),
    );
    let server = FakeServer::start(vec![reply(200, answer)]);
    let capsule = Capsule::new();
    let (result, _) = call(&mut openai(&server.base, 0, &capsule), &hello(), &tools());
    let r = result.unwrap();
    assert_eq!(r.text, None, "empty content is no text");
    assert_eq!(
        r.tool_calls[0].arguments,
        Arguments::Invalid("{\"args\": [\"-l\"".to_string())
    );
}

#[test]
fn openai_arguments_as_object_are_accepted() {
    let answer = openai_answer(
        json!({"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "function": {"name": "ls", "arguments": {"args": ["-a"]}}}]}),
        Some(json!({"prompt_tokens": 5, "completion_tokens": 5})),
    );
    let server = FakeServer::start(vec![reply(200, answer)]);
    let capsule = Capsule::new();
    let (result, _) = call(&mut openai(&server.base, 0, &capsule), &hello(), &tools());
    let r = result.unwrap();
    assert_eq!(r.text.as_deref(), Some("Let me look."));
    assert_eq!(
        r.tool_calls[0].arguments,
        Arguments::Json(json!({"args": ["-a"]}))
    );
}

#[test]
fn openai_content_parts_are_joined() {
    let answer = openai_answer(
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}),
        Some(json!({"prompt_tokens": 5, "completion_tokens": 2})),
    );
    let server = FakeServer::start(vec![reply(200, answer)]);
    let capsule = Capsule::new();
    let (result, _) = call(&mut openai(&server.base, 0, &capsule), &hello(), &[]);
    assert_eq!(result.unwrap().text.as_deref(), Some("Hello"));
}

#[test]
fn openai_no_usage_is_estimated() {
    let answer = openai_answer(json!({"role": "assistant", "content": "Hello there"}), None);
    let server = FakeServer::start(vec![reply(200, answer)]);
    let capsule = Capsule::new();
    let (result, _) = call(&mut openai(&server.base, 0, &capsule), &hello(), &[]);
    let u = result.unwrap().usage;
    assert!(u.estimated);
    assert!(u.input > 0);
    assert_eq!(u.output, 3, "11 bytes at 4 bytes a token");
}

#[test]
fn openai_429_with_retry_after_then_success() {
    let server = FakeServer::start(vec![
        reply(
            429,
            json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
        )
        .header("Retry-After", "0"),
        reply(200, text_answer()),
    ]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 4, &capsule), &hello(), &[]);
    assert_eq!(result.unwrap().text.as_deref(), Some("Hello!"));
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].number, 1);
    assert_eq!(attempts[0].outcome, "http_status");
    assert_eq!(attempts[0].http_status, Some(429));
    assert_eq!(attempts[0].retry_in_ms, 0, "Retry-After: 0 is honoured");
    assert!(attempts[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("Rate limit reached"));
    assert_eq!(attempts[1].number, 2);
    assert_eq!(attempts[1].outcome, "ok");
    assert_eq!(server.seen().len(), 2);
}

#[test]
fn openai_retry_after_beyond_the_cap_fails_at_once_naming_the_wait() {
    let server = FakeServer::start(vec![
        raw_reply(503, "busy").header("Retry-After", "3600"),
        reply(200, text_answer()),
    ]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 4, &capsule), &hello(), &[]);
    let Err(e @ DriverError::RetryAfterTooLong { .. }) = result else {
        panic!("expected RetryAfterTooLong, got {result:?}");
    };
    assert!(
        e.to_string().ends_with(r#": http status 503: a text body starting "busy" (4 bytes); the provider asks to wait 3600 s before retrying (Retry-After), longer than max_retry_after_secs (60 s), so the call is not retried"#),
        "{e}"
    );
    assert_eq!(attempts.len(), 1);
    assert!(!attempts[0].will_retry);
    assert_eq!(attempts[0].retry_in_ms, 0);
    assert_eq!(server.seen().len(), 1, "no early retry");
}

#[test]
fn a_retry_after_too_large_to_hold_is_named_as_sent() {
    let huge = "99999999999999999999999";
    let server = FakeServer::start(vec![
        reply(429, json!({"error": {"message": "slow down"}})).header("Retry-After", huge),
        reply(200, text_answer()),
    ]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 2, &capsule), &hello(), &[]);
    let Err(e @ DriverError::RetryAfterTooLong { .. }) = result else {
        panic!("expected RetryAfterTooLong, got {result:?}");
    };
    assert!(
        e.to_string().ends_with(&format!(r#": http status 429: "slow down"; the provider asks to wait {huge} s before retrying (Retry-After), longer than max_retry_after_secs (60 s), so the call is not retried"#)),
        "{e}"
    );
    assert_eq!(attempts.len(), 1);
    assert_eq!(server.seen().len(), 1, "the call failed at once");
}

/// `Retry-After` as `now + 1 h` in the three HTTP-date forms of RFC 9110 §5.6.7.
fn http_dates_in_an_hour() -> [String; 3] {
    let at = std::time::SystemTime::now() + Duration::from_secs(3600);
    let imf = httpdate::fmt_http_date(at); // "Sun, 06 Nov 1994 08:49:37 GMT"
    let p: Vec<&str> = imf.split([' ', ',']).filter(|s| !s.is_empty()).collect();
    let (wd, day, mon, year, time) = (p[0], p[1], p[2], p[3], p[4]);
    let weekday = [
        ("Mon", "Monday"),
        ("Tue", "Tuesday"),
        ("Wed", "Wednesday"),
        ("Thu", "Thursday"),
        ("Fri", "Friday"),
        ("Sat", "Saturday"),
        ("Sun", "Sunday"),
    ]
    .iter()
    .find(|(a, _)| *a == wd)
    .unwrap()
    .1;
    let rfc850 = format!("{weekday}, {day}-{mon}-{} {time} GMT", &year[2..]);
    let asctime = format!(
        "{wd} {mon} {:>2} {time} {year}",
        day.trim_start_matches('0')
    );
    [imf, rfc850, asctime]
}

#[test]
fn retry_after_in_every_http_date_form_is_understood() {
    for date in http_dates_in_an_hour() {
        let server = FakeServer::start(vec![
            raw_reply(429, "").header("Retry-After", &date),
            reply(200, text_answer()),
        ]);
        let capsule = Capsule::new();
        let (result, attempts) = call(&mut openai(&server.base, 4, &capsule), &hello(), &[]);
        match result {
            Err(DriverError::RetryAfterTooLong { asked, .. }) => {
                let secs: u64 = asked.trim_end_matches(" s").parse().unwrap();
                assert!((3000..=3600).contains(&secs), "{date}: {asked}");
            }
            other => panic!("{date}: expected RetryAfterTooLong, got {other:?}"),
        }
        assert_eq!(attempts.len(), 1, "{date}");
    }
}

#[test]
fn retry_after_that_does_not_parse_gets_the_normal_backoff() {
    let server = FakeServer::start(vec![
        raw_reply(429, "").header("Retry-After", "a little while"),
        reply(200, text_answer()),
    ]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 4, &capsule), &hello(), &[]);
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(attempts.len(), 2);
    assert!(attempts[0].will_retry);
    assert!(
        attempts[0].retry_in_ms <= 5,
        "Backoff::fast() jitter, not the Retry-After: {}",
        attempts[0].retry_in_ms
    );
    assert!(
        attempts[0]
            .detail
            .as_deref()
            .unwrap()
            .ends_with(r#"(Retry-After "a little while" not understood)"#),
        "{:?}",
        attempts[0].detail
    );
}

#[test]
fn retry_after_within_the_cap_is_waited_for() {
    let server = FakeServer::start(vec![
        raw_reply(429, "").header("Retry-After", "1"),
        reply(200, text_answer()),
    ]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 4, &capsule), &hello(), &[]);
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(attempts[0].retry_in_ms, 1000);
}

#[test]
fn an_html_error_page_is_summarised_not_quoted() {
    let page = format!(
        "<!DOCTYPE html>\n<html>\n<head><title>502 Bad Gateway</title>\n<style>body{{}}</style></head>\n<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center>{}</body>\n</html>\n",
        "<!-- padding -->".repeat(40)
    );
    let server = FakeServer::start(vec![raw_reply(502, &page).content_type("text/html")]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 0, &capsule), &hello(), &[]);
    let Err(DriverError::Exhausted { detail, .. }) = result else {
        panic!("expected Exhausted, got {result:?}");
    };
    assert_eq!(
        detail,
        format!(
            r#"http status 502: an HTML page titled "502 Bad Gateway" ({} bytes)"#,
            page.len()
        )
    );
    assert_eq!(attempts[0].detail.as_deref(), Some(detail.as_str()));

    // The same page with status 200 is a protocol failure, summarised too.
    let server = FakeServer::start(vec![raw_reply(200, &page).content_type("text/html")]);
    let (result, _) = call(&mut openai(&server.base, 0, &capsule), &hello(), &[]);
    let Err(DriverError::Fatal { detail, .. }) = result else {
        panic!("expected Fatal, got {result:?}");
    };
    assert!(
        detail.starts_with("response is not JSON (expected value at line 1 column 1): an HTML page titled \"502 Bad Gateway\""),
        "{detail}"
    );
    assert!(!detail.contains('<'), "{detail}");
}

#[test]
fn openai_503_until_retries_run_out() {
    let busy = || raw_reply(503, "upstream busy");
    let server = FakeServer::start(vec![busy(), busy(), busy(), reply(200, text_answer())]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 2, &capsule), &hello(), &[]);
    match result {
        Err(DriverError::Exhausted {
            attempts: n,
            detail,
            url,
        }) => {
            assert_eq!(n, 3);
            assert!(
                detail.contains("503") && detail.contains("upstream busy"),
                "{detail}"
            );
            assert!(url.ends_with("/chat/completions"));
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
    assert_eq!(attempts.len(), 3);
    assert!(attempts.iter().all(|a| a.outcome == "http_status"));
    assert!(attempts.iter().all(|a| a.http_status == Some(503)));
    assert_eq!(attempts[2].retry_in_ms, 0, "no wait after the last attempt");
    assert_eq!(server.seen().len(), 3);
}

#[test]
fn openai_401_is_fatal_at_once_with_the_provider_message() {
    let server = FakeServer::start(vec![
        reply(
            401,
            json!({"error": {"message": "Incorrect API key provided: sk-test.",
                             "type": "invalid_request_error", "code": "invalid_api_key"}}),
        ),
        reply(200, text_answer()),
    ]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 4, &capsule), &hello(), &[]);
    match result {
        Err(DriverError::Fatal { detail, .. }) => {
            assert_eq!(
                detail,
                r#"http status 401: "Incorrect API key provided: sk-test.""#
            );
        }
        other => panic!("expected Fatal, got {other:?}"),
    }
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].http_status, Some(401));
    assert_eq!(attempts[0].retry_in_ms, 0);
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn openai_long_error_message_is_cut_on_a_char_boundary() {
    let long = "é".repeat(2000);
    let server = FakeServer::start(vec![reply(400, json!({"error": {"message": long}}))]);
    let capsule = Capsule::new();
    let (result, _) = call(&mut openai(&server.base, 4, &capsule), &hello(), &[]);
    let Err(DriverError::Fatal { detail, .. }) = result else {
        panic!("expected Fatal");
    };
    assert!(detail.len() < 600, "{} bytes", detail.len());
    assert!(detail.ends_with("…\""), "{detail}");
}

#[test]
fn openai_body_not_json_is_fatal() {
    let server = FakeServer::start(vec![raw_reply(200, "<html>gateway</html>")]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 4, &capsule), &hello(), &[]);
    let Err(DriverError::Fatal { detail, .. }) = result else {
        panic!("expected Fatal, got {result:?}");
    };
    assert!(
        detail.contains("not JSON") && detail.contains("gateway"),
        "{detail}"
    );
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, "invalid_response");
}

#[test]
fn openai_connection_refused_is_a_connect_failure() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let capsule = Capsule::new();
    let mut d = openai(&format!("http://127.0.0.1:{port}/v1"), 1, &capsule);
    let (result, attempts) = call(&mut d, &hello(), &[]);
    match result {
        Err(DriverError::Exhausted { attempts: 2, .. }) => {}
        other => panic!("expected Exhausted after 2 attempts, got {other:?}"),
    }
    assert_eq!(attempts.len(), 2);
    assert!(
        attempts
            .iter()
            .all(|a| a.outcome == "connect" && a.http_status.is_none()),
        "{attempts:?}"
    );
}

#[test]
fn openai_timeout_is_its_own_outcome() {
    let server = FakeServer::start(vec![
        reply(200, text_answer()).after(Duration::from_millis(2500))
    ]);
    let capsule = Capsule::new();
    let mut c = choice(DriverKind::Openai, &server.base, 0);
    c.request_timeout_secs = 1;
    let mut d = OpenAiDriver::new(&c, capsule.path()).unwrap();
    let (result, attempts) = call(&mut d, &hello(), &[]);
    assert!(matches!(
        result,
        Err(DriverError::Exhausted { attempts: 1, .. })
    ));
    assert_eq!(attempts[0].outcome, "timeout");
    // The error names which timeout fired and its value, not ureq's `timeout: global`.
    let e = result.unwrap_err().to_string();
    assert!(
        e.contains("timeout: the answer did not start within request_timeout_secs (1 s)"),
        "{e}"
    );
    assert!(!e.contains("timeout: global"), "{e}");
}

#[test]
fn openai_missing_env_credential_names_the_variable() {
    let capsule = Capsule::new();
    let mut c = choice(DriverKind::Openai, "http://127.0.0.1:9", 0);
    c.credential = Some(Credential::Env("MUR_TEST_SURELY_UNSET_KEY".to_string()));
    let mut d = OpenAiDriver::new(&c, capsule.path()).unwrap();
    let (result, attempts) = call(&mut d, &hello(), &[]);
    match result {
        Err(DriverError::Credential(m)) => assert!(m.contains("MUR_TEST_SURELY_UNSET_KEY")),
        other => panic!("expected Credential, got {other:?}"),
    }
    assert!(attempts.is_empty());
}

#[test]
fn openai_without_credential_sends_no_authorization() {
    let server = FakeServer::start(vec![reply(200, text_answer())]);
    let capsule = Capsule::new();
    let mut c = choice(DriverKind::Openai, &server.base, 0);
    c.credential = None;
    c.max_output_tokens = None;
    c.temperature = None;
    let mut d = OpenAiDriver::new(&c, capsule.path()).unwrap();
    assert_eq!(d.url(), format!("{}/chat/completions", server.base));
    call(&mut d, &hello(), &[]).0.unwrap();
    let seen = &server.seen()[0];
    assert_eq!(seen.header("authorization"), None);
    assert!(seen.body.get("max_tokens").is_none());
    assert!(seen.body.get("temperature").is_none());
}

#[test]
fn openai_without_model_is_refused() {
    let mut c = choice(DriverKind::Openai, "http://127.0.0.1:9", 0);
    c.model = None;
    assert!(matches!(
        OpenAiDriver::new(&c, Path::new(".")),
        Err(DriverError::Fatal { .. })
    ));
}

#[test]
fn openai_odd_bodies_never_panic() {
    let bodies = [
        json!({}),
        json!({"choices": []}),
        json!({"choices": [{}]}),
        json!({"choices": [{"message": {"tool_calls": [null, 3, {"function": 7}]}}]}),
        json!({"choices": [{"message": {"content": 42}}], "usage": {"prompt_tokens": -1}}),
        json!({"error": {"message": "oops"}}),
        json!([1, 2]),
    ];
    for body in bodies {
        let server = FakeServer::start(vec![reply(200, body.clone())]);
        let capsule = Capsule::new();
        let (result, _) = call(&mut openai(&server.base, 0, &capsule), &hello(), &[]);
        if let Ok(r) = result {
            assert!(r.text.is_none(), "{body}: {r:?}");
        }
    }
}

// ---------------------------------------------------------------- anthropic

fn anthropic_answer() -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"args": ["-1"]}},
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 20,
                  "cache_read_input_tokens": 30, "cache_creation_input_tokens": 5},
    })
}

#[test]
fn anthropic_tool_use_request_and_usage() {
    let server = FakeServer::start(vec![reply(200, anthropic_answer())]);
    let capsule = Capsule::new();
    let mut c = choice(DriverKind::Anthropic, &format!("{}/", server.base), 0);
    c.max_output_tokens = None;
    let mut d = AnthropicDriver::new(&c, capsule.path()).unwrap();
    let conversation = vec![
        Message::User("List files.".to_string()),
        Message::Assistant {
            text: Some("Two calls.".to_string()),
            tool_calls: vec![
                ToolCall {
                    id: "toolu_a".to_string(),
                    name: "ls".to_string(),
                    arguments: Arguments::Json(json!({})),
                },
                ToolCall {
                    id: "toolu_b".to_string(),
                    name: "ls".to_string(),
                    arguments: Arguments::Invalid("nope".to_string()),
                },
            ],
        },
        Message::Tool {
            call_id: "toolu_a".to_string(),
            name: "ls".to_string(),
            content: "a".to_string(),
            is_error: false,
        },
        Message::Tool {
            call_id: "toolu_b".to_string(),
            name: "ls".to_string(),
            content: "b".to_string(),
            is_error: true,
        },
    ];
    let (result, attempts) = call(&mut d, &conversation, &tools());
    let r = result.unwrap();
    assert_eq!(r.text.as_deref(), Some("Looking."));
    assert_eq!(
        r.tool_calls,
        vec![ToolCall {
            id: "toolu_1".to_string(),
            name: "ls".to_string(),
            arguments: Arguments::Json(json!({"args": ["-1"]})),
        }]
    );
    assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(r.model.as_deref(), Some("claude-test"));
    assert_eq!(r.usage.input, 135, "input + cache read + cache write");
    assert_eq!(r.usage.output, 20);
    assert_eq!(r.usage.cached, Some(30));
    assert_eq!(r.usage.cache_write, Some(5));
    assert!(!r.usage.estimated);
    assert_eq!(attempts.len(), 1);

    let seen = &server.seen()[0];
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.header("x-api-key"), Some("sk-test"));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(seen.header("authorization"), None);
    let b = &seen.body;
    assert_eq!(b["max_tokens"], 4096);
    assert_eq!(b["system"], "You are terse.");
    assert_eq!(b["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(
        b["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "List files."}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Two calls."},
                {"type": "tool_use", "id": "toolu_a", "name": "ls", "input": {}},
                {"type": "tool_use", "id": "toolu_b", "name": "ls",
                 "input": {"invalid_arguments": "nope"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "b", "is_error": true},
            ]},
        ])
    );
}

#[test]
fn anthropic_overloaded_is_retried() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let server = FakeServer::start(vec![
        reply(529, overloaded.clone()),
        reply(200, overloaded),
        reply(200, anthropic_answer()),
    ]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut anthropic(&server.base, 2, &capsule), &hello(), &[]);
    assert!(result.is_ok(), "{result:?}");
    let outcomes: Vec<_> = attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["overloaded", "overloaded", "ok"]);
    assert_eq!(attempts[0].http_status, Some(529));
}

#[test]
fn anthropic_bad_request_is_fatal_with_the_provider_message() {
    let server = FakeServer::start(vec![reply(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error",
               "message": "messages: roles must alternate"}}),
    )]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut anthropic(&server.base, 3, &capsule), &hello(), &[]);
    match result {
        Err(DriverError::Fatal { detail, .. }) => {
            assert!(detail.contains("roles must alternate"), "{detail}")
        }
        other => panic!("expected Fatal, got {other:?}"),
    }
    assert_eq!(attempts.len(), 1);
}

#[test]
fn anthropic_no_usage_is_estimated() {
    let server = FakeServer::start(vec![reply(
        200,
        json!({"content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn"}),
    )]);
    let capsule = Capsule::new();
    let (result, _) = call(&mut anthropic(&server.base, 0, &capsule), &hello(), &[]);
    let r = result.unwrap();
    assert_eq!(r.text.as_deref(), Some("Hi"));
    assert!(r.usage.estimated);
}

// ---------------------------------------------------------------- streaming

/// One Chat Completions stream chunk with this delta (and finish reason).
fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test-model-2024",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn openai_stream() -> Reply {
    sse(&[
        ("", chunk(json!({"role": "assistant", "content": ""}), None)),
        ("", chunk(json!({"content": "Hel"}), None)),
        ("", chunk(json!({"content": "lo!"}), None)),
        (
            "",
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                                  "function": {"name": "ls", "arguments": ""}}]}),
                None,
            ),
        ),
        (
            "",
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"args\":"}}]}),
                None,
            ),
        ),
        (
            "",
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_1",
                                  "function": {"name": "session-status", "arguments": "{}"}}]}),
                None,
            ),
        ),
        (
            "",
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": " [\"-1\"]}"}}]}),
                None,
            ),
        ),
        ("", chunk(json!({}), Some("tool_calls"))),
        (
            "",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
                   "usage": {"prompt_tokens": 21, "completion_tokens": 7}}),
        ),
        ("", json!("[DONE]")),
    ])
}

#[test]
fn openai_stream_is_assembled_with_the_streams_usage() {
    // `[DONE]` is not JSON: sse() writes the string's JSON, so replace it by hand.
    let mut r = openai_stream();
    r.body = r.body.replace("data: \"[DONE]\"", "data: [DONE]");
    let server = FakeServer::start(vec![r]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 0, &capsule), &hello(), &tools());
    let r = result.unwrap();
    assert_eq!(r.text.as_deref(), Some("Hello!"));
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall {
                id: "call_0".into(),
                name: "ls".into(),
                arguments: Arguments::Json(json!({"args": ["-1"]})),
            },
            ToolCall {
                id: "call_1".into(),
                name: "session-status".into(),
                arguments: Arguments::Json(json!({})),
            },
        ]
    );
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(r.model.as_deref(), Some("test-model-2024"));
    assert_eq!((r.usage.input, r.usage.output), (21, 7));
    assert!(!r.usage.estimated, "usage comes from the stream");
    assert_eq!(attempts.len(), 1);
}

#[test]
fn openai_stream_error_event_is_retried_like_a_529() {
    let overloaded = sse(&[
        ("", chunk(json!({"content": "Hel"}), None)),
        (
            "",
            json!({"error": {"message": "The server is overloaded", "type": "server_error", "code": "overloaded"}}),
        ),
    ]);
    let failed = sse(&[(
        "",
        json!({"error": {"message": "upstream died", "type": "server_error"}}),
    )]);
    let mut ok = openai_stream();
    ok.body = ok.body.replace("data: \"[DONE]\"", "data: [DONE]");
    let server = FakeServer::start(vec![overloaded, failed, ok]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 3, &capsule), &hello(), &[]);
    assert_eq!(result.unwrap().text.as_deref(), Some("Hello!"));
    let outcomes: Vec<_> = attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["overloaded", "stream_error", "ok"]);
    assert!(attempts[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("The server is overloaded"));
}

#[test]
fn openai_stream_error_about_the_request_is_not_retried() {
    let bad = sse(&[(
        "",
        json!({"error": {"message": "maximum context length exceeded", "code": "context_length_exceeded"}}),
    )]);
    let server = FakeServer::start(vec![bad]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 3, &capsule), &hello(), &[]);
    assert!(
        matches!(result, Err(DriverError::Fatal { .. })),
        "{result:?}"
    );
    assert_eq!(attempts.len(), 1);
}

#[test]
fn a_stream_that_breaks_off_is_retried() {
    let cut = sse(&[("", chunk(json!({"content": "Hel"}), None))]);
    let server = FakeServer::start(vec![cut, reply(200, text_answer())]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 1, &capsule), &hello(), &[]);
    assert_eq!(result.unwrap().text.as_deref(), Some("Hello!"));
    assert_eq!(attempts[0].outcome, "io");
    assert!(
        attempts[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("the stream ended before the answer was complete"),
        "{attempts:?}"
    );
}

#[test]
fn openai_stream_false_asks_for_one_json_body() {
    let server = FakeServer::start(vec![reply(200, text_answer())]);
    let capsule = Capsule::new();
    let mut c = choice(DriverKind::Openai, &server.base, 0);
    c.stream = false;
    let mut d = OpenAiDriver::new(&c, capsule.path()).unwrap();
    assert_eq!(
        call(&mut d, &hello(), &[]).0.unwrap().text.as_deref(),
        Some("Hello!")
    );
    let b = &server.seen()[0].body;
    assert_eq!(b["stream"], false);
    assert!(b.get("stream_options").is_none());
}

/// A driver whose `request_timeout_secs` is 3.
fn three_second_driver(base: &str, capsule: &Capsule) -> OpenAiDriver {
    let mut c = choice(DriverKind::Openai, base, 0);
    c.request_timeout_secs = 3;
    OpenAiDriver::new(&c, capsule.path()).unwrap()
}

#[test]
fn a_long_stream_is_not_cut_by_the_request_timeout() {
    // request_timeout_secs bounds each silence, not the whole stream: ten pieces
    // 0.4 s apart take 4 s, more than the 3 s timeout, and still arrive whole.
    let mut pieces: Vec<(Duration, String)> = (0..10)
        .map(|i| {
            (
                Duration::from_millis(400),
                format!(
                    "data: {}\n\n",
                    chunk(json!({"content": format!("{i}")}), None)
                ),
            )
        })
        .collect();
    pieces.push((
        Duration::ZERO,
        format!(
            "data: {}\n\ndata: [DONE]\n\n",
            chunk(json!({}), Some("stop"))
        ),
    ));
    let slow = raw_reply(200, "")
        .content_type("text/event-stream")
        .paced(pieces);
    let server = FakeServer::start(vec![slow]);
    let capsule = Capsule::new();
    let mut d = three_second_driver(&server.base, &capsule);
    let (result, _) = call(&mut d, &hello(), &[]);
    assert_eq!(result.unwrap().text.as_deref(), Some("0123456789"));
}

#[test]
fn a_silent_stream_times_out_naming_the_setting() {
    let silent = raw_reply(200, "")
        .content_type("text/event-stream")
        .paced(vec![
            (
                Duration::ZERO,
                format!("data: {}\n\n", chunk(json!({"content": "a"}), None)),
            ),
            (Duration::from_secs(9), "data: [DONE]\n\n".to_string()),
        ]);
    let server = FakeServer::start(vec![silent]);
    let capsule = Capsule::new();
    let mut d = three_second_driver(&server.base, &capsule);
    let (result, attempts) = call(&mut d, &hello(), &[]);
    assert!(
        matches!(result, Err(DriverError::Exhausted { attempts: 1, .. })),
        "{result:?}"
    );
    assert_eq!(attempts[0].outcome, "timeout");
    assert_eq!(
        attempts[0].detail.as_deref(),
        Some("timeout: the answer sent nothing for request_timeout_secs (3 s)")
    );
}

/// A driver of `kind` whose `request_timeout_secs` is 2.
fn two_second_choice(kind: DriverKind, base: &str, max_retries: u32) -> DriverChoice {
    let mut c = choice(kind, base, max_retries);
    c.request_timeout_secs = 2;
    c
}

/// A stream that starts with `first`, then sends `keepalive` every 0.3 s for 30 s.
fn kept_alive(first: String, keepalive: &str) -> Reply {
    let mut pieces = vec![(Duration::ZERO, first)];
    pieces.extend((0..100).map(|_| (Duration::from_millis(300), keepalive.to_string())));
    raw_reply(200, "")
        .content_type("text/event-stream")
        .paced(pieces)
}

#[test]
fn keep_alive_comments_do_not_keep_a_stream_past_the_request_timeout() {
    // One piece of content, then only `: keepalive` comments, each well within the
    // socket's read timeout: the stream made no progress for 2 s, so it times out,
    // and is retried as a timeout.
    let first = || format!("data: {}\n\n", chunk(json!({"content": "x"}), None));
    let server = FakeServer::start(vec![
        kept_alive(first(), ": keepalive\n\n"),
        kept_alive(first(), ": keepalive\n\n"),
    ]);
    let capsule = Capsule::new();
    let c = two_second_choice(DriverKind::Openai, &server.base, 1);
    let mut d = OpenAiDriver::new(&c, capsule.path())
        .unwrap()
        .with_backoff(Backoff::fast());
    let started = std::time::Instant::now();
    let (result, attempts) = call(&mut d, &hello(), &[]);
    assert!(
        matches!(result, Err(DriverError::Exhausted { attempts: 2, .. })),
        "{result:?}"
    );
    let outcomes: Vec<_> = attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["timeout", "timeout"]);
    assert!(attempts[0].will_retry);
    assert_eq!(
        attempts[1].detail.as_deref(),
        Some("timeout: the answer made no progress for request_timeout_secs (2 s), only keep-alives arrived")
    );
    // Each stream would run 30 s; the bound is wide on purpose.
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn bare_openai_chunks_are_keep_alives_too() {
    // A chunk with only a role (or no choices and no usage) brings nothing.
    let first = format!(
        "data: {}\n\n",
        chunk(json!({"role": "assistant", "content": ""}), None)
    );
    let bare = format!(
        "data: {}\n\ndata: {}\n\n",
        chunk(json!({"role": "assistant"}), None),
        json!({"id": "chatcmpl-1", "choices": []})
    );
    let server = FakeServer::start(vec![kept_alive(first, &bare)]);
    let capsule = Capsule::new();
    let c = two_second_choice(DriverKind::Openai, &server.base, 0);
    let mut d = OpenAiDriver::new(&c, capsule.path()).unwrap();
    let (result, attempts) = call(&mut d, &hello(), &[]);
    assert!(
        matches!(result, Err(DriverError::Exhausted { attempts: 1, .. })),
        "{result:?}"
    );
    assert_eq!(attempts[0].outcome, "timeout");
    assert_eq!(
        attempts[0].detail.as_deref(),
        Some("timeout: the answer made no progress for request_timeout_secs (2 s), only keep-alives arrived")
    );
}

#[test]
fn anthropic_pings_do_not_keep_a_stream_past_the_request_timeout() {
    let start = format!(
        "event: message_start\ndata: {}\n\n",
        json!({"type": "message_start", "message": {"model": "claude-test", "usage": {"input_tokens": 3}}})
    );
    let ping = format!("event: ping\ndata: {}\n\n", json!({"type": "ping"}));
    let server = FakeServer::start(vec![kept_alive(start, &ping)]);
    let capsule = Capsule::new();
    let c = two_second_choice(DriverKind::Anthropic, &server.base, 0);
    let mut d = AnthropicDriver::new(&c, capsule.path()).unwrap();
    let (result, attempts) = call(&mut d, &hello(), &[]);
    let Err(e @ DriverError::Exhausted { attempts: 1, .. }) = result else {
        panic!("expected a timeout, got {result:?}");
    };
    assert!(
        e.to_string().contains(
            "timeout: the answer made no progress for request_timeout_secs (2 s), only keep-alives arrived"
        ),
        "{e}"
    );
    assert_eq!(attempts[0].outcome, "timeout");
}

#[test]
fn progress_between_keep_alives_keeps_a_stream_going() {
    // Content every 0.9 s with pings between, 3.6 s in all against a 2 s timeout:
    // each piece of content moves the deadline on.
    let mut pieces = vec![(
        Duration::ZERO,
        format!(
            "event: message_start\ndata: {}\n\nevent: content_block_start\ndata: {}\n\n",
            json!({"type": "message_start", "message": {"model": "claude-test", "usage": {"input_tokens": 3}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        ),
    )];
    let ping = format!("event: ping\ndata: {}\n\n", json!({"type": "ping"}));
    for i in 0..4 {
        pieces.push((Duration::from_millis(450), ping.clone()));
        pieces.push((
            Duration::from_millis(450),
            format!(
                "event: content_block_delta\ndata: {}\n\n",
                json!({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": format!("{i}")}})
            ),
        ));
    }
    pieces.push((
        Duration::ZERO,
        format!(
            "event: message_delta\ndata: {}\n\nevent: message_stop\ndata: {}\n\n",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
            json!({"type": "message_stop"})
        ),
    ));
    let slow = raw_reply(200, "")
        .content_type("text/event-stream")
        .paced(pieces);
    let server = FakeServer::start(vec![slow]);
    let capsule = Capsule::new();
    let c = two_second_choice(DriverKind::Anthropic, &server.base, 0);
    let mut d = AnthropicDriver::new(&c, capsule.path()).unwrap();
    let (result, _) = call(&mut d, &hello(), &[]);
    assert_eq!(result.unwrap().text.as_deref(), Some("0123"));
}

#[test]
fn a_stream_past_the_body_cap_is_cut_and_not_retried() {
    // A model that writes forever: 17 MiB of content in 64 KiB pieces.
    let piece = format!(
        "data: {}\n\n",
        chunk(json!({"content": "y".repeat(64 * 1024)}), None)
    );
    let pieces = (0..17 * 16)
        .map(|_| (Duration::ZERO, piece.clone()))
        .collect();
    let endless = raw_reply(200, "")
        .content_type("text/event-stream")
        .paced(pieces);
    let server = FakeServer::start(vec![endless, reply(200, text_answer())]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut openai(&server.base, 2, &capsule), &hello(), &[]);
    let Err(e @ DriverError::Fatal { .. }) = result else {
        panic!("expected a fatal error, got {result:?}");
    };
    assert!(
        e.to_string().ends_with(": the streamed answer is larger than 16777216 bytes (16 MiB), the most mur reads of one answer, so it was cut off and is not retried"),
        "{e}"
    );
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, "io");
    assert_eq!(server.seen().len(), 1, "not retried");
}

fn anthropic_stream() -> Reply {
    sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                   "role": "assistant", "model": "claude-test", "content": [],
                   "stop_reason": null,
                   "usage": {"input_tokens": 100, "output_tokens": 1,
                             "cache_read_input_tokens": 30, "cache_creation_input_tokens": 5}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": "Look"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": "ing."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
                   "content_block": {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "input_json_delta", "partial_json": "{\"args\": [\"-"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
                   "delta": {"type": "input_json_delta", "partial_json": "1\"]}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                   "usage": {"output_tokens": 20}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

#[test]
fn anthropic_stream_is_assembled_with_the_streams_usage() {
    let server = FakeServer::start(vec![anthropic_stream()]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut anthropic(&server.base, 0, &capsule), &hello(), &[]);
    let r = result.unwrap();
    assert_eq!(r.text.as_deref(), Some("Looking."));
    assert_eq!(
        r.tool_calls,
        vec![ToolCall {
            id: "toolu_1".into(),
            name: "ls".into(),
            arguments: Arguments::Json(json!({"args": ["-1"]})),
        }]
    );
    assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(r.model.as_deref(), Some("claude-test"));
    assert_eq!(r.usage.input, 135, "input + cache read + cache write");
    assert_eq!(r.usage.output, 20, "the last cumulative count");
    assert!(!r.usage.estimated);
    assert_eq!(attempts.len(), 1);
    assert_eq!(server.seen()[0].body["stream"], true);
}

#[test]
fn anthropic_overloaded_event_in_the_stream_is_retried() {
    let overloaded = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"model": "claude-test", "usage": {"input_tokens": 3}}}),
        ),
        (
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    let server = FakeServer::start(vec![overloaded, anthropic_stream()]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut anthropic(&server.base, 2, &capsule), &hello(), &[]);
    assert_eq!(result.unwrap().text.as_deref(), Some("Looking."));
    let outcomes: Vec<_> = attempts.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["overloaded", "ok"]);
    assert_eq!(attempts[0].http_status, Some(200));
}

#[test]
fn anthropic_stream_without_message_stop_is_retried() {
    let mut cut = anthropic_stream();
    let end = cut.body.find("event: message_delta").unwrap();
    cut.body.truncate(end);
    let server = FakeServer::start(vec![cut, anthropic_stream()]);
    let capsule = Capsule::new();
    let (result, attempts) = call(&mut anthropic(&server.base, 1, &capsule), &hello(), &[]);
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(attempts[0].outcome, "io");
}

// ---------------------------------------------------------------- mur run

/// A capsule whose model is the fake server at `base`, with these extra choice keys
/// and a shell allowlist of `ls`.
fn network_capsule(driver: &str, base: &str, extra: &str) -> support::Capsule {
    support::Capsule::new().manifest(&format!(
        "name: t\nworkdir: work\ninference:\n  driver: m\n  choices:\n    m:\n      driver: {driver}\n      model: test-model\n      base_url: \"{base}\"\n{extra}capabilities:\n  shell: {{allow: [ls]}}\n"
    ))
}

#[test]
fn mur_run_never_pastes_an_error_page_and_warns_of_each_retry() {
    let page = "<html><head><title>503 Service Temporarily Unavailable</title></head><body><h1>503</h1><script>alert(1)</script></body></html>";
    let server = FakeServer::start(vec![
        raw_reply(503, page)
            .content_type("text/html")
            .header("Retry-After", "soon"),
        raw_reply(503, page).content_type("text/html"),
    ]);
    let c = network_capsule("openai", &server.base, "      max_retries: 1\n");
    let run = c.run("hi", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    let result = run.result_txt();
    let stderr = run.stderr();
    for text in [&result, &stderr] {
        assert!(!text.contains("<h1>") && !text.contains("alert"), "{text}");
    }
    assert!(
        result.contains(&format!(
            r#"http status 503: an HTML page titled "503 Service Temporarily Unavailable" ({} bytes)"#,
            page.len()
        )),
        "{result}"
    );
    assert!(
        stderr.contains(r#"Retry-After "soon" is neither delay seconds nor an HTTP date; using the normal backoff"#),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "turn 1: model attempt 1 of 2 failed (HTTP 503: http status 503: an HTML page titled"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("attempt 2 in "), "{stderr}");
}

#[test]
fn mur_run_retry_after_beyond_the_cap_ends_the_task_naming_the_wait() {
    let server = FakeServer::start(vec![
        reply(429, json!({"error": {"message": "Rate limit reached"}}))
            .header("Retry-After", "7200"),
        reply(200, text_answer()),
    ]);
    let c = network_capsule("openai", &server.base, "      max_retry_after_secs: 120\n");
    let run = c.run("hi", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    assert!(
        run.result_txt().contains(r#"http status 429: "Rate limit reached"; the provider asks to wait 7200 s before retrying (Retry-After), longer than max_retry_after_secs (120 s), so the call is not retried"#),
        "{}",
        run.result_txt()
    );
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn mur_run_a_stream_of_pings_times_out_and_is_retried_as_a_timeout() {
    let start = format!(
        "event: message_start\ndata: {}\n\n",
        json!({"type": "message_start", "message": {"model": "claude-test", "usage": {"input_tokens": 3}}})
    );
    let ping = format!("event: ping\ndata: {}\n\n", json!({"type": "ping"}));
    let server = FakeServer::start(vec![
        kept_alive(start.clone(), &ping),
        kept_alive(start, &ping),
    ]);
    let c = network_capsule(
        "anthropic",
        &server.base,
        "      request_timeout_secs: 2\n      max_retries: 1\n",
    );
    let run = c.run("hi", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    let detail = "timeout: the answer made no progress for request_timeout_secs (2 s), only keep-alives arrived";
    assert!(
        run.result_txt()
            .contains(&format!("{detail} (gave up after 2 attempts)")),
        "{}",
        run.result_txt()
    );
    let attempts = run.records("inference_attempt");
    let outcomes: Vec<_> = attempts.iter().map(|r| r["outcome"].clone()).collect();
    assert_eq!(
        outcomes,
        [json!("timeout"), json!("timeout")],
        "{attempts:?}"
    );
    assert_eq!(attempts[0]["detail"], detail);
    // The retry warning names the outcome once.
    let stderr = run.stderr();
    assert!(
        stderr.contains(&format!(
            "model attempt 1 of 2 failed ({detail}); attempt 2 in "
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("timeout: timeout:"), "{stderr}");
}

/// Providers that count call ids from `call_0` in every turn; and one turn that
/// repeats an id. Every call runs, and the history sent back never holds an id twice.
#[test]
fn mur_run_call_ids_are_unique_across_the_conversation() {
    let ls = |ids: &[&str]| {
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "ls", "arguments": "{\"args\": []}"}}))
            .collect();
        reply(
            200,
            openai_answer(
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
                Some(json!({"prompt_tokens": 5, "completion_tokens": 5})),
            ),
        )
    };
    let server = FakeServer::start(vec![
        ls(&["call_0"]),
        ls(&["call_0", "call_0"]),
        reply(200, text_answer()),
    ]);
    let c = network_capsule("openai", &server.base, "").file("work/a.txt", "");
    let run = c.run("list", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let calls = run.records("tool_call");
    let ids: Vec<&str> = calls
        .iter()
        .map(|r| r["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_0", "call_0-2", "call_0-3"]);
    assert!(calls.iter().all(|r| r["status"] == "passed"), "{calls:?}");
    assert_eq!(calls[1]["model_call_id"], "call_0");
    let last = &server.seen()[2].body["messages"];
    let sent: Vec<&str> = last
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| {
            let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
            calls
                .into_iter()
                .map(|c| c["id"].as_str().unwrap().to_string())
                .chain(m["tool_call_id"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .map(|s| Box::leak(s.into_boxed_str()) as &str)
        .collect();
    assert_eq!(
        sent,
        ["call_0", "call_0", "call_0-2", "call_0-3", "call_0-2", "call_0-3"],
        "each call, then its result"
    );
}

/// Anthropic gets a refused call back as `is_error: true`; the invalid-JSON error
/// names the parse problem, its position and the tool's schema.
#[test]
fn mur_run_anthropic_tool_error_is_flagged_and_bad_json_is_explained() {
    let turn = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": "{\"args\": [\"-1\""},
            {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {"args": []}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    });
    let done = json!({"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
                      "usage": {"input_tokens": 10, "output_tokens": 1}});
    let server = FakeServer::start(vec![reply(200, turn), reply(200, done)]);
    let c = network_capsule("anthropic", &server.base, "");
    let run = c.run("list", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let texts = run.tool_texts();
    assert!(
        texts[0].contains("the arguments of this call to `ls` are not JSON (EOF while parsing a list at line 1 column 14): `{\"args\": [\"-1\"`; send one JSON object matching the tool's input schema: {"),
        "{}",
        texts[0]
    );
    assert!(
        texts[0].contains("\"args\""),
        "the schema is given: {}",
        texts[0]
    );
    let sent = &server.seen()[1].body["messages"][2]["content"];
    assert_eq!(sent[0]["tool_use_id"], "toolu_1");
    assert_eq!(sent[0]["is_error"], true);
    assert_eq!(sent[1]["tool_use_id"], "toolu_2");
    assert!(sent[1].get("is_error").is_none(), "{sent}");
}

// ------------------------------------------------- session-status, end to end

/// `mur run` of a capsule whose choice is the anthropic driver at `server`, with
/// `choice_extra` (flow-mapping keys) on the choice; its first turn calls
/// session-status. Returns the run and the object reported.
fn anthropic_status_run(server: &FakeServer, choice_extra: &str) -> (support::Run, Value) {
    let manifest = format!(
        "name: t\nworkdir: work\ninference:\n  driver: a\n  choices:\n    a: {{driver: anthropic, model: claude-test, base_url: \"{}\", credential: {{file: key.txt}}{choice_extra}}}\n",
        server.base
    );
    let c = support::Capsule::new()
        .manifest(&manifest)
        .file("key.txt", "sk-test\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let st = run.one("session_status")["status"].clone();
    (run, st)
}

fn status_then_done() -> Vec<Reply> {
    let call = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "session-status", "input": {}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 300, "output_tokens": 20},
    });
    let done = json!({
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "done"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 400, "output_tokens": 5},
    });
    vec![reply(200, call), reply(200, done)]
}

#[test]
fn budget_tokens_subtracts_the_output_cap_the_anthropic_driver_sent_when_the_choice_sets_none() {
    let server = FakeServer::start(status_then_done());
    let (_run, st) = anthropic_status_run(&server, ", context_window: 10000");
    // The request carried the driver's default cap ...
    let sent = server.seen()[0].body["max_tokens"].as_u64().unwrap();
    assert_eq!(sent, mur::inference::anthropic::DEFAULT_MAX_TOKENS);
    // ... and the budget is the window less that cap, not less nothing.
    assert_eq!(
        st["context"],
        json!({"used_tokens": 320, "window_tokens": 10000, "budget_tokens": 10000 - sent,
               "budget_basis": "context_window_less_output_cap", "measured_by": "actual"})
    );
}

#[test]
fn budget_tokens_is_the_input_ceiling_when_it_is_below_the_window_less_the_sent_cap() {
    let server = FakeServer::start(status_then_done());
    let (_run, st) = anthropic_status_run(
        &server,
        ", context_window: 10000, max_output_tokens: 1000, max_input_tokens: 8999",
    );
    assert_eq!(server.seen()[0].body["max_tokens"], 1000);
    assert_eq!(st["context"]["budget_tokens"], 8999);
    assert_eq!(st["context"]["budget_basis"], "max_input_tokens");
}
