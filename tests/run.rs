//! `mur run` end to end: the example capsule, the agent loop, shell tools,
//! session-status, the deadline and the records.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::Capsule;

#[test]
fn hello_example_completes_offline() {
    let c = Capsule::new();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hello");
    let run = c.run_at(Path::new(example), "How many files are there?", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.stdout(),
        "There are 3 files: alpha.txt, beta.txt and gamma.txt, with 6 lines in all.\n"
    );
    let kinds: Vec<String> = run
        .trace()
        .iter()
        .map(|r| r["type"].as_str().unwrap().to_string())
        .collect();
    for k in [
        "session_start",
        "task_start",
        "inference",
        "tool_call",
        "session_status",
        "task_end",
        "session_end",
    ] {
        assert!(kinds.contains(&k.to_string()), "no {k} record: {kinds:?}");
    }
    assert_eq!(kinds.last().unwrap(), "session_end");
    assert_eq!(
        run.one("session_start")["tools_declared"],
        json!(["ls", "wc", "session-status"])
    );
    assert_eq!(run.one("task_end")["exit_status"], "completed");
    assert_eq!(run.one("session_end")["exit_status"], "completed");
    let texts = run.tool_texts();
    assert!(
        texts[0].starts_with("<untrusted-content source=tool:ls>\nwork_id: wrk_"),
        "{}",
        texts[0]
    );
    assert!(
        texts[0].contains("exit_code: 0\nstatus: ok\n"),
        "{}",
        texts[0]
    );
    assert!(
        texts[0].ends_with("\n\nalpha.txt\nbeta.txt\ngamma.txt\n</untrusted-content>"),
        "{}",
        texts[0]
    );
    assert!(texts[1].contains(" 6 total\n"), "{}", texts[1]);
    assert_eq!(
        run.result_txt(),
        "There are 3 files: alpha.txt, beta.txt and gamma.txt, with 6 lines in all."
    );
    // sequence numbers are consecutive from 1
    let seqs: Vec<u64> = run
        .trace()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[test]
fn staging_writes_one_tool_manifest_per_tool_and_nothing_for_absent_grants() {
    let c = Capsule::scripted(&["ls"], "", "- text: hi\n");
    let out = c.mur().arg("stage").arg(&c.dir).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = std::fs::read_dir(c.home.join("run"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut tools: Vec<String> = std::fs::read_dir(run_dir.join("tools"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    tools.sort();
    assert_eq!(tools, ["ls", "session-status"]);
    let m: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(run_dir.join("tools/session-status/murmur.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(m["version"], "0.0.0");
    assert_eq!(m["runtime"], "tool");
    assert_eq!(m["implementation"], "native");
    assert_eq!(m["input_schema"], json!({"type":"object","properties":{}}));
    assert!(run_dir.join("murmur.yaml").is_file());
}

#[test]
fn reserved_artifact_names_are_refused_with_e_cap_013() {
    for name in [
        "murmur/delegate-task",
        "ana/pull-artifact",
        "x/session-status",
    ] {
        let c = Capsule::scripted(&[], &format!("tools: [{name}]\n"), "- text: hi\n");
        let run = c.run("t", &[]);
        assert_eq!(run.code(), 2, "{}", run.dump());
        assert!(run.stderr().contains("E-CAP-013"), "{}", run.stderr());
        assert!(run.stderr().contains(name), "{}", run.stderr());
        assert!(!c.records.join("trace.jsonl").exists());
    }
}

#[test]
fn grants_of_tools_this_build_lacks_are_refused_at_staging_naming_them() {
    let c = Capsule::scripted(
        &[],
        "control:\n  agent_settings: [inference.driver]\n",
        "- text: hi\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 2, "{}", run.dump());
    assert!(
        run.stderr()
            .contains("control.agent_settings: [inference.driver] grants `switch-driver`"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_call_to_an_absent_tool_names_the_missing_declaration() {
    let c = Capsule::scripted(
        &["ls"],
        "",
        "- tool_calls:\n    - {name: delegate-task, input: {task: x}}\n    - {name: rm, input: {args: [x]}}\n- text: done\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    assert_eq!(
        t[0],
        "<untrusted-content source=tool:delegate-task>\ntool `delegate-task` does not exist in this session: it exists only when the capsule declares capabilities.spawn.allow; the tools are: ls, session-status\n</untrusted-content>"
    );
    assert!(t[1].contains("tool `rm` does not exist in this session: a shell binary is a tool only when capabilities.shell.allow lists it"), "{}", t[1]);
    let calls = run.records("tool_call");
    assert!(calls.iter().all(|r| r["status"] == "failed"));
}

#[test]
fn malformed_tool_calls_get_tool_errors_not_a_crash() {
    let script = r#"
- tool_calls:
    - {name: ls, input_raw: "{not json", id: a}
    - {name: ls, input: {args: ["-1", {x: 1}]}, id: b}
    - {name: ls, input: {args: "-1"}, id: c}
    - {name: ls, input: {args: []}, id: c}
    - {name: session-status, input: {verbose: true}, id: d}
- text: survived
"#;
    let c = Capsule::scripted(&["ls"], "", script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.stdout(), "survived\n");
    let t = run.tool_texts();
    assert!(
        t[0].contains("the arguments of this call to `ls` are not JSON (key must be a string at line 1 column 2): `{not json`; send one JSON object matching the tool's input schema: {"),
        "{}",
        t[0]
    );
    assert!(
        t[1].contains("`args[1]` must be a string, got an object"),
        "{}",
        t[1]
    );
    assert!(
        t[2].contains("`args` must be an array of strings, got a string"),
        "{}",
        t[2]
    );
    // A repeated id does not stop the call: it runs under a new id.
    assert!(!t[3].contains("error"), "{}", t[3]);
    assert!(
        t[4].contains("session-status takes no input; unknown key `verbose`"),
        "{}",
        t[4]
    );
    let ids: Vec<String> = run
        .records("tool_call")
        .iter()
        .map(|r| r["call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["a", "b", "c", "c-2", "d"]);
    let calls = run.records("tool_call");
    assert_eq!(calls[3]["status"], "passed");
    assert_eq!(calls[3]["model_call_id"], "c");
}

#[test]
fn shell_result_reports_signal_as_128_plus_and_keeps_full_log() {
    // sh is allowed here only to make a process kill itself; mur runs it as argv.
    let script = r#"
- tool_calls:
    - {name: sh, input: {args: ["-c", "echo out; echo err >&2; kill -9 $$"]}}
    - {name: sh, input: {args: ["-c", "head -c 20000 /dev/zero | tr '\\0' x; echo; echo END"]}}
    - {name: no-such-binary-here, input: {}}
- text: ok
"#;
    let c = Capsule::scripted(&["sh", "no-such-binary-here"], "", script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    assert!(
        t[0].contains("exit_code: 137\nsignal: SIGKILL\nstatus: error\n"),
        "{}",
        t[0]
    );
    assert!(
        t[0].contains("\n\nout\nerr\n</untrusted-content>"),
        "{}",
        t[0]
    );
    assert!(
        t[1].contains("output_bytes: 20005\noutput_shown: last 16384 bytes\n\n"),
        "{}",
        t[1]
    );
    assert!(
        t[1].ends_with("xxxx\nEND\n</untrusted-content>"),
        "{}",
        t[1]
    );
    let log = run.records("tool_call")[1]["work_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        std::fs::metadata(c.records.join(format!("logs/{log}.log")))
            .unwrap()
            .len(),
        20005
    );
    assert!(
        t[2].contains("cannot start `no-such-binary-here`"),
        "{}",
        t[2]
    );
    assert_eq!(run.records("tool_call")[2]["status"], "failed");
}

#[test]
fn session_status_reports_none_and_unknown_as_the_spec_says() {
    let script = "- tool_calls:\n    - {name: session-status, input: {}}\n  usage: {input: 100, output: 20}\n- text: done\n";
    let c = Capsule::scripted(&[], "", script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let st = &run.one("session_status")["status"];
    assert_eq!(st["time"]["deadline"], "none");
    assert!(st["time"]["elapsed_secs"].is_u64());
    assert!(st["time"]["task_elapsed_secs"].is_u64());
    assert_eq!(st["turns"], json!({"used": 1, "cap": "none"}));
    assert_eq!(st["keep_working"], "none");
    assert_eq!(st["done_check"], "none");
    assert_eq!(
        st["context"],
        json!({"used_tokens": 120, "window_tokens": "none", "budget_tokens": "none", "budget_basis": "none", "measured_by": "actual"})
    );
    assert_eq!(
        st["tokens"],
        json!({"input": 100, "output": 20, "cached": "unknown", "cache_write": "unknown", "unreported_calls": 0})
    );
    assert_eq!(
        st["spend"],
        json!({"tokens": 120, "ceiling": "none", "machine": "none"})
    );
    assert!(st.get("quota").is_none());
    let text = &run.tool_texts()[0];
    assert_eq!(
        text,
        &format!("<untrusted-content source=tool:session-status>\n{st}\n</untrusted-content>")
    );
}

#[test]
fn session_status_reports_limits_and_the_window() {
    let manifest = r#"name: t
workdir: work
inference:
  driver: s
  choices:
    s: {driver: script, script: replies.yaml, context_window: 8000, max_output_tokens: 1000}
  max_turns: 7
  max_session_tokens: 5000
"#;
    let c = Capsule::new().manifest(manifest).file(
        "replies.yaml",
        "- tool_calls:\n    - {name: session-status}\n- text: done\n",
    );
    let run = c.run("t", &["--deadline", "1h"]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let st = &run.one("session_status")["status"];
    assert_eq!(st["turns"], json!({"used": 1, "cap": 7}));
    assert_eq!(st["context"]["window_tokens"], 8000);
    assert_eq!(st["context"]["budget_tokens"], 7000);
    assert_eq!(
        st["context"]["budget_basis"],
        "context_window_less_output_cap"
    );
    assert_eq!(st["context"]["measured_by"], "estimate");
    assert_eq!(st["tokens"]["input"], "unknown");
    assert_eq!(st["tokens"]["unreported_calls"], 1);
    assert_eq!(st["spend"]["ceiling"], 5000);
    let left = st["time"]["deadline"]["left_secs"].as_u64().unwrap();
    assert!((3590..=3600).contains(&left), "{left}");
    assert!(st["time"]["deadline"]["at"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
}

#[test]
fn max_turns_ends_the_task_with_exit_3() {
    let script = "- tool_calls: [{name: session-status}]\n- tool_calls: [{name: session-status}]\n- text: never\n";
    let c = Capsule::scripted(&[], "", script);
    let m = std::fs::read_to_string(c.dir.join("murmur.yaml"))
        .unwrap()
        .replace("inference:\n", "inference:\n  max_turns: 2\n");
    let c = c.manifest(&m);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 3, "{}", run.dump());
    assert_eq!(run.one("task_end")["exit_status"], "max_turns");
    assert_eq!(run.one("session_end")["exit_status"], "max_turns");
    assert_eq!(run.records("inference").len(), 2);
}

#[test]
fn max_session_tokens_ends_the_task_with_spend_ceiling() {
    let script = "- tool_calls: [{name: session-status}]\n  usage: {input: 900, output: 200}\n- text: never\n";
    let c = Capsule::scripted(&[], "", script);
    let m = std::fs::read_to_string(c.dir.join("murmur.yaml"))
        .unwrap()
        .replace("inference:\n", "inference:\n  max_session_tokens: 1000\n");
    let c = c.manifest(&m);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 3, "{}", run.dump());
    assert_eq!(run.one("task_end")["exit_status"], "spend_ceiling");
    assert!(
        run.stderr()
            .contains("inference.max_session_tokens (1000) reached: 1100 tokens spent"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_script_that_runs_out_fails_the_task_clearly() {
    let c = Capsule::scripted(&[], "", "- tool_calls: [{name: session-status}]\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    assert_eq!(run.one("task_end")["exit_status"], "failed");
    assert!(run.one("task_failed")["error"]
        .as_str()
        .unwrap()
        .contains("the script has 1 turn(s) and turn 2 was asked for"));
    assert!(
        run.stderr().contains("turn 2 was asked for"),
        "{}",
        run.stderr()
    );
    assert!(run.result_txt().starts_with("failed: "));
}

#[test]
fn deadline_stops_a_running_command_with_its_group_and_exits_3() {
    let script = "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"sleep 300 & echo $! > child.pid; sleep 300\"]}}\n- text: never\n";
    let c = Capsule::scripted(&["sh"], "", script);
    let start = Instant::now();
    let run = c.run("t", &["--deadline", "2s"]);
    // The deadline, not the commands' own 300 s, ended the run.
    assert!(start.elapsed() < Duration::from_secs(120));
    assert_eq!(run.code(), 3, "{}", run.dump());
    assert_eq!(run.one("task_end")["exit_status"], "deadline");
    assert_eq!(run.one("session_end")["exit_status"], "deadline");
    let pid: i32 = std::fs::read_to_string(c.dir.join("work/child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid),
        "grandchild {pid} survived"
    );
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.contains(") Z "))
        .unwrap_or(true)
}

#[test]
fn the_deadline_notice_rides_on_the_first_tool_result_inside_the_margin_once() {
    let script = "- tool_calls:\n    - {name: nosuch}\n    - {name: session-status}\n    - {name: session-status}\n- text: done\n";
    let c = Capsule::scripted(&[], "lifecycle:\n  deadline_notice_secs: 600\n", script);
    let run = c.run("t", &["--deadline", "120s"]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    assert!(
        !t[0].contains("Session deadline"),
        "a refused call carries no notice: {}",
        t[0]
    );
    let line = t[1].lines().last().unwrap();
    let re = regex_like(line);
    assert!(re, "{line}");
    assert!(!t[2].contains("Session deadline"));
    let n = run.one("deadline_notice");
    assert!(line.contains(n["at"].as_str().unwrap()));
}

/// `Session deadline: the runtime ends this session at <RFC 3339>, in <n> seconds.`
fn regex_like(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("Session deadline: the runtime ends this session at ")
    else {
        return false;
    };
    let Some((at, rest)) = rest.split_once(", in ") else {
        return false;
    };
    let Some(n) = rest.strip_suffix(" seconds.") else {
        return false;
    };
    at.len() == 20 && at.ends_with('Z') && n.parse::<u64>().is_ok_and(|n| (110..=120).contains(&n))
}

#[test]
fn deadline_notice_0_sends_none() {
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  deadline_notice_secs: 0\n",
        "- tool_calls: [{name: session-status}]\n- text: done\n",
    );
    let run = c.run("t", &["--deadline", "10s"]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert!(run.records("deadline_notice").is_empty());
    assert!(!run.tool_texts()[0].contains("Session deadline"));
}

#[test]
fn sigterm_to_mur_stops_the_command_and_still_writes_session_end() {
    let script = "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"echo $$ > leader.pid; sleep 300\"]}}\n- text: never\n";
    let c = Capsule::scripted(&["sh"], "", script);
    let mut child = c
        .mur()
        .arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .args(["--task", "t"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pidfile = c.dir.join("work/leader.pid");
    let start = Instant::now();
    while !pidfile.exists() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let trace = support::read_trace(&c.records);
    assert_eq!(trace.last().unwrap()["type"], "session_end");
    assert_eq!(trace.last().unwrap()["exit_status"], "canceled");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid));
}

/// Starts `mur run` on a capsule whose one command sleeps (its pid in
/// work/leader.pid), with `ignore` set to SIG_IGN in mur's own disposition; returns the
/// child once the command runs.
fn mur_with_a_sleeping_command(
    c: &Capsule,
    ignore: Option<nix::sys::signal::Signal>,
) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = c.mur();
    cmd.arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .args(["--task", "t"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Some(sig) = ignore {
        // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and
        // exec.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn)
                    .map(|_| ())
                    .map_err(std::io::Error::from)
            });
        }
    }
    let child = cmd.spawn().unwrap();
    let pidfile = c.dir.join("work/leader.pid");
    let start = Instant::now();
    while !pidfile.exists() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    child
}

fn signal(child: &std::process::Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

const SLEEPING_SCRIPT: &str = "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"echo $$ > leader.pid; sleep 300\"]}}\n- text: never\n";

#[test]
fn sighup_and_sigquit_to_mur_stop_the_command_and_write_session_end() {
    for sig in [
        nix::sys::signal::Signal::SIGHUP,
        nix::sys::signal::Signal::SIGQUIT,
    ] {
        let c = Capsule::scripted(&["sh"], "", SLEEPING_SCRIPT);
        let mut child = mur_with_a_sleeping_command(&c, None);
        signal(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "{sig}: {status:?}");
        let trace = support::read_trace(&c.records);
        let end = trace.last().unwrap();
        assert_eq!(end["type"], "session_end", "{sig}");
        assert_eq!(end["exit_status"], "canceled", "{sig}");
        let task_end = trace.iter().find(|r| r["type"] == "task_end").unwrap();
        assert_eq!(
            task_end["error"],
            format!("interrupted by {sig}"),
            "{task_end}"
        );
        let pid: i32 = std::fs::read_to_string(c.dir.join("work/leader.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid));
    }
}

#[test]
fn a_mur_started_with_sighup_ignored_keeps_ignoring_it() {
    let c = Capsule::scripted(&["sh"], "", SLEEPING_SCRIPT);
    let mut child = mur_with_a_sleeping_command(&c, Some(nix::sys::signal::Signal::SIGHUP));
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let status = child.wait().unwrap();
    // SIGTERM, not SIGHUP, is what ended it (the first signal handled is recorded).
    assert_eq!(status.code(), Some(130), "{status:?}");
    let trace = support::read_trace(&c.records);
    let task_end = trace.iter().find(|r| r["type"] == "task_end").unwrap();
    assert_eq!(task_end["error"], "interrupted by SIGTERM", "{task_end}");
}

#[test]
fn task_from_stdin_and_from_file() {
    let c = Capsule::scripted(&[], "", "- text: fine\n");
    let mut child = c
        .mur()
        .arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"task from stdin")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        support::read_trace(&c.records)
            .iter()
            .find(|r| r["type"] == "task_start")
            .unwrap()["text"],
        "task from stdin"
    );
    let run = c.run("x", &[]);
    assert_eq!(run.code(), 2, "a records dir holding a trace is refused");
    assert!(run
        .stderr()
        .contains("already holds a session's trace.jsonl"));
}

#[test]
fn every_trace_line_parses_and_carries_the_envelope() {
    let c = Capsule::scripted(&["ls"], "", "- tool_calls: [{name: ls}]\n- text: done\n");
    let run = c.run("t", &[]);
    let session = run.one("session_start")["session"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(session.starts_with("ses_") && session.len() == 30);
    for r in run.trace() {
        assert!(r["ts"].as_str().unwrap().ends_with('Z'));
        assert_eq!(r["session"], Value::String(session.clone()));
        assert!(r.get("task").is_some());
    }
}

#[test]
fn default_records_dir_is_under_murmur_home() {
    let c = Capsule::scripted(&[], "", "- text: done\n");
    let out = c
        .mur()
        .arg("run")
        .arg(&c.dir)
        .args(["--task", "t"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let rel = c.dir.strip_prefix("/").unwrap();
    let base = c.home.join("records").join(rel);
    // Beside the session, the capsule's `latest` link to it.
    let sessions: Vec<_> = std::fs::read_dir(&base)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != "latest")
        .collect();
    assert_eq!(sessions.len(), 1);
    let s = sessions.into_iter().next().unwrap().unwrap().path();
    assert!(s.file_name().unwrap().to_str().unwrap().starts_with("ses_"));
    assert_eq!(
        std::fs::read_to_string(s.join("out/result.txt")).unwrap(),
        "done"
    );
}

#[test]
fn a_capsule_path_with_dot_dot_parts_keeps_records_beneath_the_records_root() {
    let c = Capsule::scripted(&[], "", "- text: done\n");
    // `/../../../..<dir>` is the capsule directory itself.
    let dotted = format!("/../../../..{}", c.dir.display());
    let out = c
        .mur()
        .arg("run")
        .arg(&dotted)
        .args(["--task", "t"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = c
        .home
        .join("records")
        .join(c.dir.strip_prefix("/").unwrap());
    let sessions: Vec<_> = std::fs::read_dir(&base)
        .unwrap_or_else(|e| panic!("{}: {e}", base.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("ses_"))
        .collect();
    assert_eq!(sessions.len(), 1);
    let s = sessions[0].path();
    assert!(s.join("trace.jsonl").is_file());
    // Nothing landed beside the capsule or anywhere outside the records root.
    let escaped: Vec<_> = std::fs::read_dir(&c.dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("ses_"))
        .collect();
    assert!(escaped.is_empty(), "{escaped:?}");
}

#[test]
fn records_runtime_directories_and_logs_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let script =
        "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"echo hi\"]}}\n- text: done\n";
    let c = Capsule::scripted(&["sh"], "", script);
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    // The runtime directory is removed at the session's end; its parent stays.
    let out = c
        .mur()
        .arg("run")
        .arg(&c.dir)
        .args(["--task", "t"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = c
        .home
        .join("records")
        .join(c.dir.strip_prefix("/").unwrap());
    let s = std::fs::read_dir(&base)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().starts_with("ses_"))
        .unwrap()
        .path();
    assert_eq!(mode(&c.home.join("records")), 0o700);
    assert_eq!(mode(&s), 0o700);
    assert_eq!(mode(&s.join("logs")), 0o700);
    assert_eq!(mode(&s.join("out")), 0o700);
    assert_eq!(mode(&s.join("trace.jsonl")), 0o600);
    assert_eq!(mode(&s.join("out/result.txt")), 0o600);
    let logs: Vec<_> = std::fs::read_dir(s.join("logs")).unwrap().collect();
    assert_eq!(logs.len(), 1);
    assert_eq!(mode(&logs[0].as_ref().unwrap().path()), 0o600);
    assert_eq!(mode(&c.home.join("run")), 0o700);
}

#[test]
fn a_large_task_is_cut_in_its_record_and_kept_whole_beside_the_trace() {
    let c = Capsule::scripted(&[], "", "- text: done\n");
    let text: String = (0..100_000).map(|i| format!("{i:09}\n")).collect();
    let file = c.root.path().join("task.txt");
    std::fs::write(&file, &text).unwrap();
    let out = c
        .mur()
        .arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .arg("--task-file")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = support::read_trace(&c.records);
    let start = trace.iter().find(|r| r["type"] == "task_start").unwrap();
    assert_eq!(start["text"].as_str().unwrap(), &text[..64 * 1024]);
    let cut = &start["truncated"][0];
    assert_eq!(cut["field"], "text");
    assert_eq!(cut["bytes"], text.len());
    let blob = c.records.join(cut["file"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(blob).unwrap(), text);
    // No line holds more than one cut string (its newlines escaped) and the rest.
    let raw = std::fs::read_to_string(c.records.join("trace.jsonl")).unwrap();
    let long: Vec<(usize, String)> = raw
        .lines()
        .filter(|l| l.len() > 80 * 1024)
        .map(|l| (l.len(), l[..120].to_string()))
        .collect();
    assert!(long.is_empty(), "{long:?}");
}

#[test]
fn mur_check_prints_every_error_with_position_and_nearest_key() {
    let c = Capsule::new().manifest(
        "name: t\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: r.yaml}\n  max_turnz: 3\ncapabilities:\n  shel: {allow: [rm]}\n",
    );
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = c.dir.join("murmur.yaml").display().to_string();
    assert!(
        err.contains(&format!(
            "{file}:6:3: inference: unknown key `max_turnz` (did you mean `max_turns`?)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:8:3: capabilities: unknown key `shel` (did you mean `shell`?)"
        )),
        "{err}"
    );
    // a manifest with errors never runs
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 2);
    assert!(!c.records.join("trace.jsonl").exists());
    let ok = Capsule::scripted(&["ls"], "", "- text: hi\n");
    let out = ok.mur().arg("check").arg(&ok.dir).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn deadline_in_the_past_or_without_offset_is_a_usage_error() {
    let c = Capsule::scripted(&[], "", "- text: hi\n");
    for (d, msg) in [
        ("2020-01-01T00:00:00Z", "has already passed"),
        ("0s", "is zero"),
        ("-5m", "is neither an RFC 3339 time"),
        ("2026-12-20T14:00:00", "with its offset"),
        ("8000y", "after the year 9999"),
    ] {
        let run = c.run("t", &["--deadline", d]);
        assert_eq!(run.code(), 2, "{d}: {}", run.dump());
        assert!(run.stderr().contains(msg), "{d}: {}", run.stderr());
        assert!(!c.records.join("trace.jsonl").exists());
    }
    let run = c.run("t", &["--deadline", "2999-01-01T02:00:00+02:00"]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.one("session_start")["deadline"], "2999-01-01T00:00:00Z");
}

#[test]
fn an_empty_answer_fails_the_task() {
    let c = Capsule::scripted(&[], "", "- text: \"  \"\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    assert_eq!(run.one("task_end")["exit_status"], "failed");
    assert!(
        run.stderr().contains("no text and no tool call"),
        "{}",
        run.stderr()
    );
}

#[test]
fn session_status_refuses_input_that_is_not_an_object() {
    let c = Capsule::scripted(&[], "", "- tool_calls:\n    - {name: session-status, input: hello}\n    - {name: session-status, input: [1]}\n- text: done\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    assert!(
        t[0].contains("session-status takes no input: send {}, not a string"),
        "{}",
        t[0]
    );
    assert!(t[1].contains("not an array"), "{}", t[1]);
    assert!(run.records("session_status").is_empty());
}

#[test]
fn a_shell_binary_cannot_take_a_runtime_tool_name() {
    let c = Capsule::scripted(&["session-status", "ls"], "", "- text: hi\n");
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "capabilities.shell.allow[0]: `session-status` is the name of a runtime-provided tool"
        ),
        "{err}"
    );
}

#[test]
fn check_refuses_what_could_not_run() {
    let c = Capsule::new().manifest(
        "name: t\nworkdir: nodir\nprompt: {system_file: missing.md}\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: replies.yaml}\n",
    ).file("replies.yaml", "- tool_call: []\n");
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("workdir: ") && err.contains("nodir is not a directory"),
        "{err}"
    );
    assert!(
        err.contains("prompt.system_file: ") && err.contains("missing.md is not a readable file"),
        "{err}"
    );
    assert!(
        err.contains("replies.yaml:1:3: [0]: unknown key `tool_call` (did you mean `tool_calls`?)"),
        "{err}"
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 2);
    assert!(
        !c.records.exists(),
        "nothing is written for a capsule that cannot run"
    );
}

#[test]
fn repeated_call_ids_never_take_a_genuine_later_id_and_every_call_runs() {
    let script = "- tool_calls:\n    - {name: session-status, id: a}\n    - {name: session-status, id: a}\n    - {name: session-status, id: a-2}\n- text: done\n";
    let c = Capsule::scripted(&[], "", script);
    let run = c.run("t", &[]);
    let calls = run.records("tool_call");
    let ids: Vec<&str> = calls
        .iter()
        .map(|r| r["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "a-3", "a-2"]);
    let st: Vec<&str> = calls
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(st, ["passed", "passed", "passed"]);
}

#[test]
fn huge_token_counts_from_a_provider_do_not_crash_the_session() {
    let script = "- tool_calls: [{name: session-status}]\n  usage: {input: 18446744073709551615, output: 1}\n- text: done\n  usage: {input: 18446744073709551615, output: 18446744073709551615}\n";
    let c = Capsule::scripted(&[], "", script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.one("session_status")["status"]["spend"]["tokens"],
        json!(u64::MAX)
    );
    assert_eq!(run.trace().last().unwrap()["type"], "session_end");
}

#[test]
fn manifest_bombs_and_deep_nesting_are_refused_not_crashed() {
    let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x]\n");
    let mut prev = 'a';
    for l in ['b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'] {
        bomb.push_str(&format!(
            "{l}: &{l} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
        prev = l;
    }
    let deep: String = (0..3000)
        .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
        .collect();
    let flow = format!("name: t\nx: {}{}\n", "[".repeat(100), "]".repeat(100));
    for (text, msg) in [
        (bomb, "expands to more than 100000 values"),
        (deep, "indented deeper than 256 columns"),
        (flow, "nested deeper than 64 levels"),
    ] {
        let c = Capsule::new().manifest(&text);
        let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg), "{err}");
    }
}

#[test]
fn the_runtime_directory_is_removed_when_mur_run_ends() {
    let c = Capsule::scripted(&[], "", "- text: done\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0);
    let rd = run.one("session_start")["runtime_dir"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!std::path::Path::new(&rd).exists());
}

#[test]
fn keys_this_build_does_not_provide_are_refused_not_ignored() {
    let c = Capsule::scripted(&[], "", "- text: hi\n");
    let m = std::fs::read_to_string(c.dir.join("murmur.yaml"))
        .unwrap()
        .replace(
            "inference:\n",
            "inference:\n  compaction: {threshold: 0.5}\n",
        );
    let c = c.manifest(&m);
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("inference.compaction is not provided by this build of mur"));
}

#[test]
fn mur_run_refuses_after_task_sleep_instead_of_hanging() {
    let c = Capsule::scripted(&[], "after_task: sleep\n", "- text: hi\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 2, "{}", run.dump());
    assert!(
        run.stderr().contains(
            "after_task: sleep keeps a session waiting for tasks that only a door brings"
        ),
        "{}",
        run.stderr()
    );
    assert!(
        !c.home.join("run").exists()
            || std::fs::read_dir(c.home.join("run"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn a_shell_binary_missing_from_path_is_warned_about() {
    let c = Capsule::scripted(&["ls", "no-such-binary-xyz"], "", "- text: hi\n");
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: ")
            && err.contains("capabilities.shell.allow: `no-such-binary-xyz` is not found on PATH"),
        "{err}"
    );
    assert!(!err.contains("`ls`"), "{err}");
}

#[test]
fn a_refused_records_dir_leaves_no_runtime_directory() {
    let c = Capsule::scripted(&[], "", "- text: hi\n");
    std::fs::create_dir_all(&c.records).unwrap();
    std::fs::write(c.records.join("trace.jsonl"), "").unwrap();
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 2);
    assert!(
        !c.home.join("run").exists()
            || std::fs::read_dir(c.home.join("run"))
                .unwrap()
                .next()
                .is_none()
    );
}

// --- session-status and the deadline notice, against known values (issue 17) --------

#[test]
fn session_status_time_follows_a_known_elapsed_time_and_the_deadline_given() {
    // The task sleeps 2 s, then reads session-status.
    let script = "- tool_calls:\n    - {name: sleep, input: {args: [\"2\"]}}\n- tool_calls:\n    - {name: session-status}\n- text: done\n";
    let c = Capsule::scripted(&["sleep"], "", script);
    let before = std::time::SystemTime::now();
    let run = c.run("t", &["--deadline", "1h"]);
    let after = std::time::SystemTime::now();
    assert_eq!(run.code(), 0, "{}", run.dump());
    let wall = after.duration_since(before).unwrap().as_secs();
    let t = &run.one("session_status")["status"]["time"];
    let elapsed = t["elapsed_secs"].as_u64().unwrap();
    let task = t["task_elapsed_secs"].as_u64().unwrap();
    // At least the 2 s slept inside the task; the task inside the session; the session
    // inside the run the test timed.
    assert!(task >= 2, "{t}");
    assert!(elapsed >= task && elapsed <= wall, "{t} (run: {wall}s)");
    // --deadline 1h: an hour from when mur read it, whole seconds rounded down.
    let at = humantime::parse_rfc3339(t["deadline"]["at"].as_str().unwrap()).unwrap();
    let hour = Duration::from_secs(3600);
    assert!(
        at + Duration::from_secs(1) > before + hour && at <= after + hour,
        "{t}"
    );
    let left = t["deadline"]["left_secs"].as_u64().unwrap();
    assert!(left <= 3600 - 2 && left + wall + 2 >= 3600, "{t}");
}

#[test]
fn budget_basis_is_max_input_tokens_only_when_the_ceiling_is_the_smaller() {
    for (ceiling, budget, basis) in [
        (6999, 6999, "max_input_tokens"),
        (7000, 7000, "context_window_less_output_cap"),
        (7001, 7000, "context_window_less_output_cap"),
    ] {
        let manifest = format!(
            "name: t\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {{driver: script, script: replies.yaml, context_window: 8000, max_output_tokens: 1000, max_input_tokens: {ceiling}}}\n"
        );
        let c = Capsule::new().manifest(&manifest).file(
            "replies.yaml",
            "- tool_calls:\n    - {name: session-status}\n- text: done\n",
        );
        let run = c.run("t", &[]);
        assert_eq!(run.code(), 0, "{}", run.dump());
        let ctx = &run.one("session_status")["status"]["context"];
        assert_eq!(ctx["window_tokens"], 8000, "{ctx}");
        assert_eq!(ctx["budget_tokens"], budget, "ceiling {ceiling}: {ctx}");
        assert_eq!(ctx["budget_basis"], basis, "ceiling {ceiling}: {ctx}");
    }
}

#[test]
fn a_command_that_could_not_start_carries_no_deadline_notice_the_next_result_does() {
    let script = "- tool_calls:\n    - {name: no-such-binary-here}\n    - {name: session-status}\n- text: done\n";
    let c = Capsule::scripted(
        &["no-such-binary-here"],
        "lifecycle:\n  deadline_notice_secs: 600\n",
        script,
    );
    let run = c.run("t", &["--deadline", "120s"]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let calls = run.records("tool_call");
    assert_eq!(calls[0]["status"], "failed");
    let t = run.tool_texts();
    assert!(
        t[0].contains("cannot start `no-such-binary-here`"),
        "{}",
        t[0]
    );
    assert!(!t[0].contains("Session deadline"), "{}", t[0]);
    assert!(regex_like(t[1].lines().last().unwrap()), "{}", t[1]);
    assert_eq!(run.one("deadline_notice")["call_id"], calls[1]["call_id"]);
}

/// A staging that cannot write (here `$MURMUR_HOME` is a regular file, as a full or
/// read-only disk would be) is a runtime failure, exit 1, not the usage/manifest
/// status 2; the message names the path and the cause, once.
#[test]
fn a_staging_that_cannot_write_exits_1_not_2() {
    let c = Capsule::scripted(&[], "", "- text: hi\n");
    let home = c.root.path().join("home-is-a-file");
    std::fs::write(&home, "not a directory").unwrap();
    let run = c
        .mur()
        .env("MURMUR_HOME", &home)
        .arg("run")
        .arg(&c.dir)
        .args(["--records-dir"])
        .arg(&c.records)
        .args(["--task", "t"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.starts_with("mur: cannot write "), "{err}");
    assert!(err.contains(&home.display().to_string()), "{err}");
    assert_eq!(err.matches("mur: ").count(), 1, "{err}");
    let stage = c
        .mur()
        .env("MURMUR_HOME", &home)
        .arg("stage")
        .arg(&c.dir)
        .output()
        .unwrap();
    assert_eq!(
        stage.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&stage.stderr)
    );
    // A capsule this build cannot stage is still the capsule's fault: 2.
    let reserved = Capsule::new().manifest("name: test\nworkdir: work\n");
    let run = reserved.run("t", &[]);
    assert_eq!(run.code(), 2, "{}", run.dump());
}
