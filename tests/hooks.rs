//! The decision point, hooks and the task lifecycle end to end with the real binary:
//! `hooks.on_tool_call` (fail closed in every way), `hooks.on_task_end` with reopens
//! bounded by `lifecycle.max_task_reopens`, `lifecycle.done_check` and
//! `lifecycle.keep_working`.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Capsule, Formation};

/// Writes an executable file relative to `dir`.
fn exe(dir: &std::path::Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A capsule with shell `sh`, one on_tool_call hook `hooks/h` running `hook`, playing
/// `script`.
fn with_policy(hook: &str, timeout: Option<u64>, script: &str) -> Capsule {
    let t = timeout.map_or(String::new(), |t| format!(", timeout_secs: {t}"));
    let c = Capsule::scripted(
        &["sh"],
        &format!("hooks:\n  on_tool_call:\n    - {{command: [hooks/h]{t}}}\n"),
        script,
    );
    exe(&c.dir, "hooks/h", hook);
    c
}

const STATUS_THEN_ANSWER: &str =
    "- tool_calls:\n    - {name: session-status, input: {}}\n- text: done\n";

fn records_of(c: &Capsule, kind: &str) -> Vec<Value> {
    support::read_trace(&c.records)
        .into_iter()
        .filter(|r| r["type"] == kind)
        .collect()
}

fn refusal(text: &str) -> String {
    format!("<untrusted-content source=tool:session-status>\n{text}\n</untrusted-content>")
}

/// Runs a session-status call past `hook` and returns the text the model got, the
/// policy_decision record and the hook_run record.
/// The capsule is returned too: its temporary directory lives as long as it does.
fn decided(hook: &str, timeout: Option<u64>) -> (String, Value, Value, Capsule) {
    let c = with_policy(hook, timeout, STATUS_THEN_ANSWER);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let text = run.tool_texts()[0].clone();
    (text, run.one("policy_decision"), run.one("hook_run"), c)
}

#[test]
fn an_allowing_hook_lets_the_call_run_and_records_both_decision_and_run() {
    let hook = "#!/bin/sh\ncat > seen.json\necho '{\"decision\": \"allow\"}'\n";
    let (text, pd, hr, c) = decided(hook, None);
    assert!(text.contains("\"turns\""), "{text}");
    assert_eq!(pd["decision"], "allow");
    assert_eq!(pd["tool"], "session-status");
    assert_eq!(pd["origin"]["kind"], "model");
    assert_eq!(hr["event"], "on_tool_call");
    assert_eq!(hr["hook"], "on_tool_call[0]");
    assert_eq!(hr["decision"], "allow");
    assert_eq!(hr["exit"], 0);
    assert!(hr["duration_ms"].is_u64());
    assert_eq!(records_of(&c, "session_status").len(), 1);
    // The hook got the call on stdin, run in the workdir.
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(c.dir.join("work/seen.json")).unwrap())
            .unwrap();
    assert_eq!(seen["event"], "on_tool_call");
    assert_eq!(seen["tool"], "session-status");
    assert_eq!(seen["call_id"], pd["call_id"]);
    assert_eq!(seen["input"], serde_json::json!({}));
    assert_eq!(seen["origin"], serde_json::json!({"kind": "model"}));
}

#[test]
fn a_deny_of_session_status_names_the_hook_and_reason_and_runs_nothing() {
    let hook = "#!/bin/sh\ncat >/dev/null\necho '{\"decision\": \"deny\", \"reason\": \"no status today\"}'\n";
    let (text, pd, hr, c) = decided(hook, None);
    assert_eq!(
        text,
        refusal("denied by hook on_tool_call[0] (h): no status today; the call did not run")
    );
    assert_eq!(pd["decision"], "deny");
    assert_eq!(pd["hook"], "on_tool_call[0]");
    assert_eq!(pd["reason"], "no status today");
    assert_eq!(hr["decision"], "deny");
    assert!(records_of(&c, "session_status").is_empty(), "nothing ran");
    assert_eq!(records_of(&c, "tool_call")[0]["status"], "failed");
}

#[test]
fn a_denied_shell_call_starts_no_process() {
    let hook =
        "#!/bin/sh\ncat >/dev/null\necho '{\"decision\": \"deny\", \"reason\": \"no shell\"}'\n";
    let script =
        "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"touch ran\"]}}\n- text: done\n";
    let c = with_policy(hook, None, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.tool_texts()[0],
        "<untrusted-content source=tool:sh>\ndenied by hook on_tool_call[0] (h): no shell; the call did not run\n</untrusted-content>"
    );
    assert!(!c.dir.join("work/ran").exists(), "the command ran");
}

/// Every way a hook can fail is a deny whose reason says which.
#[test]
fn a_failing_hook_fails_closed_in_every_way() {
    let cases: &[(&str, Option<u64>, &str)] = &[
        (
            "#!/bin/sh\ncat >/dev/null\necho '{\"decision\": \"allow\"}'\nexit 1\n",
            None,
            "the hook failed closed: it exited with status 1",
        ),
        (
            "#!/bin/sh\ncat >/dev/null\n",
            None,
            "the hook failed closed: it printed nothing; it must print one JSON object on stdout",
        ),
        (
            "#!/bin/sh\ncat >/dev/null\necho '{\"decision\": \"allow\"}'\necho '{\"decision\": \"allow\"}'\n",
            None,
            "the hook failed closed: it printed more than one JSON value; it must print exactly one object: `{\"decision\": \"allow\"}\n{\"decision\": \"allow\"}`",
        ),
        (
            "#!/bin/sh\ncat >/dev/null\necho '{\"decision\": \"maybe\"}'\n",
            None,
            "the hook failed closed: it answered decision `maybe`; the decision must be \"allow\" or \"deny\"",
        ),
        (
            "#!/bin/sh\ncat >/dev/null\necho 'allow'\n",
            None,
            "the hook failed closed: its output is not JSON (expected value at line 1 column 1): `allow`",
        ),
        (
            "#!/bin/sh\ncat >/dev/null\necho '{\"reason\": \"x\"}'\n",
            None,
            "the hook failed closed: its answer has no `decision`; answer {\"decision\": \"allow\"} or {\"decision\": \"deny\", \"reason\": \"…\"}",
        ),
        (
            "#!/bin/sh\nkill -9 $$\n",
            None,
            "the hook failed closed: it was killed by SIGKILL",
        ),
    ];
    for (hook, timeout, reason) in cases {
        let (text, pd, hr, c) = decided(hook, *timeout);
        assert_eq!(
            text,
            refusal(&format!(
                "denied by hook on_tool_call[0] (h): {reason}; the call did not run"
            )),
            "{hook}"
        );
        assert_eq!(pd["decision"], "deny", "{hook}");
        assert_eq!(pd["reason"], *reason, "{hook}");
        assert_eq!(hr["decision"], "deny", "{hook}");
        assert!(records_of(&c, "session_status").is_empty(), "{hook}");
    }
}

#[test]
fn a_hanging_hook_is_stopped_at_its_timeout_and_denies() {
    let hook = "#!/bin/sh\necho $$ > hook.pid\nexec sleep 300\n";
    let started = Instant::now();
    let (text, _pd, hr, c) = decided(hook, Some(1));
    assert_eq!(
        text,
        refusal("denied by hook on_tool_call[0] (h): the hook failed closed: it did not finish within 1 s and was stopped; the call did not run")
    );
    assert_eq!(hr["timed_out"], true);
    assert_eq!(hr["exit"], Value::Null);
    // Stopped, not waited out (a wide bound: the sleep is 300 s).
    assert!(started.elapsed() < Duration::from_secs(120));
    let pid: i32 = std::fs::read_to_string(c.dir.join("work/hook.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid), "the hook {pid} still runs");
}

fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_hook_that_forks_a_grandchild_and_exits_is_answered_and_the_grandchild_killed() {
    let hook = "#!/bin/sh\ncat >/dev/null\nsleep 300 &\necho $! > grandchild.pid\necho '{\"decision\": \"allow\"}'\n";
    let started = Instant::now();
    let (text, pd, _hr, c) = decided(hook, Some(60));
    assert!(text.contains("\"turns\""), "{text}");
    assert_eq!(pd["decision"], "allow");
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "the call waited for the grandchild"
    );
    let pid: i32 = std::fs::read_to_string(c.dir.join("work/grandchild.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid), "the grandchild {pid} still runs");
}

#[test]
fn hooks_run_in_order_and_the_first_deny_wins() {
    let c = Capsule::scripted(
        &[],
        "hooks:\n  on_tool_call:\n    - {command: [hooks/a]}\n    - {command: [hooks/b]}\n    - {command: [hooks/c]}\n",
        STATUS_THEN_ANSWER,
    );
    exe(
        &c.dir,
        "hooks/a",
        "#!/bin/sh\ncat >/dev/null\necho '{\"decision\":\"allow\"}'\n",
    );
    exe(
        &c.dir,
        "hooks/b",
        "#!/bin/sh\ncat >/dev/null\necho '{\"decision\":\"deny\",\"reason\":\"b says no\"}'\n",
    );
    exe(
        &c.dir,
        "hooks/c",
        "#!/bin/sh\ntouch c-ran\necho '{\"decision\":\"allow\"}'\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.tool_texts()[0],
        refusal("denied by hook on_tool_call[1] (b): b says no; the call did not run")
    );
    let runs = run.records("hook_run");
    let names: Vec<&str> = runs.iter().map(|r| r["hook"].as_str().unwrap()).collect();
    assert_eq!(names, ["on_tool_call[0]", "on_tool_call[1]"]);
    assert!(!c.dir.join("work/c-ran").exists());
    assert_eq!(run.one("policy_decision")["hooks_run"], 2);
}

#[test]
fn a_hook_missing_from_path_is_a_staging_error() {
    let c = Capsule::scripted(
        &[],
        "hooks:\n  on_tool_call:\n    - {command: [no-such-hook-binary-xyz]}\n  on_task_end:\n    - {command: [hooks/missing]}\n",
        "- text: hi\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 2, "{}", run.dump());
    let err = run.stderr();
    assert!(
        err.contains("hooks.on_tool_call[0].command: `no-such-hook-binary-xyz` is not found on PATH; install it, or give its path relative to the capsule directory"),
        "{err}"
    );
    assert!(err.contains("hooks.on_task_end[0].command: "), "{err}");
    assert!(!run.records.join("trace.jsonl").exists(), "nothing ran");
}

#[test]
fn with_no_hooks_there_is_no_policy_decision_record() {
    let c = Capsule::scripted(&[], "", STATUS_THEN_ANSWER);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert!(run.records("policy_decision").is_empty());
}

#[test]
fn with_only_task_end_hooks_allowed_calls_still_write_a_policy_decision() {
    let c = Capsule::scripted(
        &[],
        "hooks:\n  on_task_end:\n    - {command: [hooks/end]}\n",
        STATUS_THEN_ANSWER,
    );
    exe(
        &c.dir,
        "hooks/end",
        "#!/bin/sh\ncat >/dev/null\necho '{}'\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let pd = run.one("policy_decision");
    assert_eq!(pd["decision"], "allow");
    assert_eq!(pd["hooks_run"], 0);
}

// ---- on_task_end ----

/// A task-end hook that reopens every time, with its stdin kept per run.
const ALWAYS_REOPEN: &str =
    "#!/bin/sh\nn=$(ls | grep -c '^end-')\ncat > end-$n.json\necho '{\"reopen\": \"try again\"}'\n";

#[test]
fn a_reopen_loop_is_stopped_by_max_task_reopens() {
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  max_task_reopens: 2\nhooks:\n  on_task_end:\n    - {command: [hooks/end]}\n",
        "- text: one\n- text: two\n- text: three\n- text: four\n",
    );
    exe(&c.dir, "hooks/end", ALWAYS_REOPEN);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.result_txt(), "three");
    let reopened = run.records("task_reopened");
    assert_eq!(reopened.len(), 2, "{}", run.dump());
    assert_eq!(reopened[0]["by"], "on_task_end");
    assert_eq!(reopened[0]["attempt"], 2);
    assert_eq!(reopened[1]["attempt"], 3);
    assert_eq!(reopened[0]["message"], "try again");
    let runs = run.records("hook_run");
    assert_eq!(runs.len(), 3);
    assert_eq!(
        runs[2]["reason"],
        "not reopened: lifecycle.max_task_reopens (2) reached"
    );
    let end = run.one("task_end");
    assert_eq!(end["exit_status"], "completed");
    assert_eq!(end["turns"], 3);
    // Each run was told the attempt and the reopens used.
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(c.dir.join("work/end-2.json")).unwrap())
            .unwrap();
    assert_eq!(seen["attempt"], 3);
    assert_eq!(seen["reopens_used"], 2);
    assert_eq!(seen["reopens_left"], 0);
    assert_eq!(seen["exit_status"], "completed");
    assert_eq!(seen["answer"], "three");
}

#[test]
fn a_reopened_task_gets_the_message_as_a_new_user_turn() {
    let c = Capsule::scripted(
        &[],
        "hooks:\n  on_task_end:\n    - {command: [hooks/end]}\n",
        "- text: first\n- text: second\n",
    );
    exe(
        &c.dir,
        "hooks/end",
        "#!/bin/sh\nif [ -e once ]; then cat >/dev/null; echo '{}'; else touch once; cat >/dev/null; echo '{\"reopen\": \"Check the spelling.\"}'; fi\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.result_txt(), "second");
    let inf = run.records("inference");
    assert_eq!(inf.len(), 2);
    let trace = std::fs::read_to_string(run.records.join("trace.jsonl")).unwrap();
    assert!(trace.contains("Check the spelling."), "{trace}");
}

#[test]
fn a_failing_task_end_hook_never_lets_a_task_end_completed() {
    let c = Capsule::scripted(
        &[],
        "hooks:\n  on_task_end:\n    - {command: [hooks/end]}\n",
        "- text: fine\n",
    );
    exe(
        &c.dir,
        "hooks/end",
        "#!/bin/sh\ncat >/dev/null\necho '{\"reopn\": \"x\"}'\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    let end = run.one("task_end");
    assert_eq!(end["exit_status"], "failed");
    assert_eq!(
        end["error"],
        "hook on_task_end[0] (end) failed, so the task is not reported completed: its answer has the unknown key `reopn`; answer {} or {\"reopen\": \"<message>\"}"
    );
}

#[test]
fn task_end_hooks_run_for_a_task_that_ends_by_deadline_and_cannot_reopen_it() {
    let c = Capsule::scripted(
        &["sleep"],
        "hooks:\n  on_task_end:\n    - {command: [hooks/end]}\n",
        "- tool_calls:\n    - {name: sleep, input: {args: [\"30\"]}}\n- text: never\n",
    );
    exe(&c.dir, "hooks/end", ALWAYS_REOPEN);
    let run = c.run("t", &["--deadline", "2s"]);
    assert_eq!(run.code(), 3, "{}", run.dump());
    assert_eq!(run.one("task_end")["exit_status"], "deadline");
    let hr = run.one("hook_run");
    assert_eq!(hr["decision"], "reopen");
    assert_eq!(
        hr["reason"],
        "not reopened: a task that ended deadline cannot go on"
    );
    assert!(run.records("task_reopened").is_empty());
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(c.dir.join("work/end-0.json")).unwrap())
            .unwrap();
    assert_eq!(seen["exit_status"], "deadline");
}

#[test]
fn task_end_hooks_run_for_a_task_stopped_by_sigterm() {
    let c = Capsule::scripted(
        &["sh"],
        "hooks:\n  on_task_end:\n    - {command: [hooks/end]}\n",
        "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"touch started; sleep 300\"]}}\n- text: never\n",
    );
    exe(&c.dir, "hooks/end", ALWAYS_REOPEN);
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
    let marker = c.dir.join("work/started");
    let start = Instant::now();
    while !marker.exists() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let trace = support::read_trace(&c.records);
    let hr: Vec<&Value> = trace.iter().filter(|r| r["type"] == "hook_run").collect();
    assert_eq!(hr.len(), 1, "{trace:?}");
    assert_eq!(
        hr[0]["reason"],
        "not reopened: a task that ended canceled cannot go on"
    );
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(c.dir.join("work/end-0.json")).unwrap())
            .unwrap();
    assert_eq!(seen["exit_status"], "canceled");
    assert_eq!(seen["reason"], "interrupted by SIGTERM");
}

// ---- done_check ----

#[test]
fn done_check_reopens_with_the_exit_and_output_then_completes_when_it_passes() {
    let c = Capsule::scripted(
        &["touch"],
        "lifecycle:\n  done_check: {command: [./check.sh], limit: 2}\n",
        "- text: done?\n- tool_calls:\n    - {name: touch, input: {args: [fixed]}}\n- text: now done\n",
    );
    exe(
        &c.dir,
        "work/check.sh",
        "#!/bin/sh\nif [ -e fixed ]; then echo ok; else echo 'test foo failed'; exit 3; fi\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.result_txt(), "now done");
    let r = run.one("task_reopened");
    assert_eq!(r["by"], "done_check");
    let msg = r["message"].as_str().unwrap();
    assert!(
        msg.starts_with("[done_check] The task is not done: the check `./check.sh`: it exited with status 3. Its output, the last 4096 bytes at most:\n<untrusted-content source=done_check>\ntest foo failed\n</untrusted-content>\nKeep working on the task"),
        "{msg}"
    );
    let checks = run.records("done_check");
    assert_eq!(checks.len(), 2);
    assert_eq!(checks[0]["passed"], false);
    assert_eq!(checks[0]["exit"], 3);
    assert_eq!(checks[1]["passed"], true);
}

#[test]
fn done_check_at_its_limit_fails_the_task_with_the_last_output_never_completed() {
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  done_check: {command: [sh, -c, \"echo still broken; exit 1\"], limit: 1}\n",
        "- text: done\n- text: done again\n- tool_calls:\n    - {name: session-status, input: {}}\n- text: unreachable\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    let end = run.one("task_end");
    assert_eq!(end["exit_status"], "failed");
    assert_eq!(
        end["error"],
        "lifecycle.done_check failed with its limit (1) of reopens used: the check `sh -c echo still broken; exit 1`: it exited with status 1; its last output:\nstill broken\n"
    );
    assert_eq!(run.records("task_reopened").len(), 1);
    assert_eq!(run.records("done_check").len(), 2);
}

#[test]
fn a_done_check_whose_command_does_not_exist_fails_the_check_not_the_runtime() {
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  done_check: {command: [./missing-check], limit: 0}\n",
        "- text: done\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    let err = run.one("task_end")["error"].as_str().unwrap().to_string();
    assert!(
        err.starts_with("lifecycle.done_check failed with its limit (0) of reopens used: the check `./missing-check`: it could not be started: "),
        "{err}"
    );
    // A bare name that is not on PATH is refused at staging.
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  done_check: {command: [no-such-check-xyz], limit: 1}\n",
        "- text: done\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 2, "{}", run.dump());
    assert!(run
        .stderr()
        .contains("lifecycle.done_check.command: `no-such-check-xyz` is not found on PATH"));
}

// ---- keep_working ----

#[test]
fn keep_working_answers_an_early_end_until_the_done_line_or_the_limit() {
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  keep_working: {limit: 3, message: Keep going.}\n",
        "- text: halfway\n- tool_calls:\n    - {name: session-status, input: {}}\n- text: \"all done\\n[done]\"\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.result_txt(), "all done");
    let kw = run.one("keep_working");
    assert_eq!(kw["used"], 1);
    assert_eq!(kw["left"], 2);
    let st = run.one("session_status")["status"].clone();
    assert_eq!(
        st["keep_working"],
        serde_json::json!({"used": 1, "left": 2})
    );
    assert_eq!(st["done_check"], "none");
    assert!(
        run.records("task_reopened").is_empty(),
        "keep_working is no reopen"
    );
    // The limit: after it the answer stands.
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  keep_working: {limit: 1, message: Keep going.}\n",
        "- text: a\n- text: b\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.result_txt(), "b");
}

#[test]
fn session_status_reports_done_check_counts_and_none_when_unset() {
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  done_check: {command: [sh, -c, \"test -e ../work/ok || { touch ../work/ok; exit 1; }\"], limit: 2}\n",
        "- text: first\n- tool_calls:\n    - {name: session-status, input: {}}\n- text: second\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let st = run.one("session_status")["status"].clone();
    assert_eq!(st["done_check"], serde_json::json!({"used": 1, "left": 1}));
    assert_eq!(st["keep_working"], "none");
}

// ---- formations ----

#[test]
fn a_denied_call_member_sends_nothing_to_the_member() {
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: ./lead, calls: [worker]}\n  worker: {capsule: ./worker}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\nhooks:\n  on_tool_call:\n    - {command: [hooks/policy]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: hi}}\n- text: lead done\n",
        )
        .member("worker", "", "- text: worker answer\n");
    exe(
        &f.dir.join("lead"),
        "hooks/policy",
        "#!/bin/sh\nin=$(cat)\ncase \"$in\" in *'\"tool\":\"call-member\"'*) echo '{\"decision\":\"deny\",\"reason\":\"no delegation\"}';; *) echo '{\"decision\":\"allow\"}';; esac\n",
    );
    let run = f.run("t");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    assert_eq!(
        lead.tool_texts()[0],
        "<untrusted-content source=tool:call-member>\ndenied by hook on_tool_call[0] (policy): no delegation; the call did not run\n</untrusted-content>"
    );
    assert!(lead.records("member_call").is_empty());
    let worker = run.member("worker");
    assert!(worker.records("task_start").is_empty(), "{}", run.dump());
}

#[test]
fn task_end_hooks_see_end_without_answer_as_no_answer() {
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: ./lead, calls: [worker]}\n  worker: {capsule: ./worker, calls: [lead]}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: hi}}\n- text: waiting\n- text: lead done\n",
        )
        .member(
            "worker",
            "capabilities:\n  network: {allow: [localhost]}\nhooks:\n  on_task_end:\n    - {command: [hooks/end]}\n",
            "- tool_calls:\n    - {name: end-without-answer, input: {reason: nothing to say}}\n",
        );
    exe(
        &f.dir.join("worker"),
        "hooks/end",
        "#!/bin/sh\ncat > ../work/end.json\necho '{}'\n",
    );
    let run = f.run("t");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let worker = run.member("worker");
    assert_eq!(worker.one("task_end")["exit_status"], "no_answer");
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(f.dir.join("worker/work/end.json")).unwrap())
            .unwrap();
    assert_eq!(seen["exit_status"], "no_answer");
    assert_eq!(seen["reason"], "nothing to say");
    assert_eq!(worker.one("hook_run")["decision"], "none");
}

#[test]
fn every_tool_of_the_inventory_passes_the_decision_point() {
    let c = Capsule::scripted(
        &["sh"],
        "lifecycle:\n  shell_grace_secs: 5\nhooks:\n  on_tool_call:\n    - {command: [hooks/deny]}\n",
        "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"touch ran\"]}}\n    - {name: session-status, input: {}}\n    - {name: background-command, input: {operation: status, work_id: wrk_0123456789abcdef0123456789abcdef}}\n- text: done\n",
    );
    exe(
        &c.dir,
        "hooks/deny",
        "#!/bin/sh\ncat >/dev/null\necho '{\"decision\":\"deny\",\"reason\":\"locked down\"}'\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let denied: Vec<String> = run
        .records("policy_decision")
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["tool"].as_str().unwrap(),
                r["decision"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        denied,
        ["sh deny", "session-status deny", "background-command deny"]
    );
    for (t, name) in run
        .tool_texts()
        .iter()
        .zip(["sh", "session-status", "background-command"])
    {
        assert_eq!(
            *t,
            format!("<untrusted-content source=tool:{name}>\ndenied by hook on_tool_call[0] (deny): locked down; the call did not run\n</untrusted-content>")
        );
    }
    assert!(!c.dir.join("work/ran").exists());
    assert!(run.records("background_command").is_empty());
}

// ---- a hook's run-inference ----

const REVIEWER: &str = "#!/bin/sh\nin=$(cat)\ncase \"$in\" in\n  *'\"inference\":{\"text\":\"DENY'*) echo '{\"decision\":\"deny\",\"reason\":\"the reviewer model said no\"}';;\n  *'\"inference\"'*) echo '{\"decision\":\"allow\"}';;\n  *) echo '{\"run_inference\":{\"prompt\":\"Is this call safe?\",\"system\":\"You review tool calls.\"}}';;\nesac\n";

#[test]
fn a_hook_may_ask_for_one_inference_call_which_counts_in_turns_used() {
    let c = with_policy(
        REVIEWER,
        None,
        "- tool_calls:\n    - {name: session-status, input: {}}\n- text: DENY it\n- tool_calls:\n    - {name: session-status, input: {}}\n- text: fine\n- text: done\n",
    );
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let texts = run.tool_texts();
    assert_eq!(
        texts[0],
        refusal(
            "denied by hook on_tool_call[0] (h): the reviewer model said no; the call did not run"
        )
    );
    // The second call was allowed after the reviewer said "fine"; its status counts
    // every inference so far, the hook's included.
    let st = run.one("session_status")["status"].clone();
    assert_eq!(st["turns"]["used"], 4, "{st}");
    let inf = run.records("inference");
    assert_eq!(inf.len(), 5);
    assert_eq!(inf[1]["hook"], "on_tool_call[0]");
    assert_eq!(inf[1]["text"], "DENY it");
    assert_eq!(inf[0].get("hook"), None);
    let decisions: Vec<String> = run
        .records("hook_run")
        .iter()
        .map(|r| r["decision"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        decisions,
        ["run_inference", "deny", "run_inference", "allow"]
    );
    assert_eq!(run.one("task_end")["turns"], 5);
}

#[test]
fn a_hook_asking_for_a_second_inference_call_fails_closed() {
    let hook = "#!/bin/sh\ncat >/dev/null\necho '{\"run_inference\":{\"prompt\":\"again\"}}'\n";
    let c = with_policy(hook, None, "- tool_calls:\n    - {name: session-status, input: {}}\n- text: model says\n- text: done\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.tool_texts()[0],
        refusal("denied by hook on_tool_call[0] (h): the hook failed closed: it asked for a second inference call; a hook gets one per run; the call did not run")
    );
}

#[test]
fn a_hook_inference_is_refused_once_max_turns_is_used_up() {
    let c = with_policy(
        REVIEWER,
        None,
        "- tool_calls:\n    - {name: session-status, input: {}}\n- text: never asked\n",
    )
    .manifest_append("  max_turns: 1\n");
    let run = c.run("t", &[]);
    let seen = std::fs::read_to_string(c.dir.join("murmur.yaml")).unwrap();
    assert!(seen.contains("max_turns: 1"), "{seen}");
    assert_eq!(run.code(), 3, "{}", run.dump());
    // The hook got the error instead of a text and allowed: the call ran.
    assert_eq!(run.records("session_status").len(), 1, "{}", run.dump());
    assert_eq!(run.records("inference").len(), 1);
    assert_eq!(run.one("task_end")["exit_status"], "max_turns");
}

trait Append {
    fn manifest_append(self, under_inference: &str) -> Self;
}

impl Append for Capsule {
    /// Adds `under_inference` to the manifest's `inference:` section.
    fn manifest_append(self, under_inference: &str) -> Capsule {
        let m = std::fs::read_to_string(self.dir.join("murmur.yaml")).unwrap();
        let m = m.replace("inference:\n", &format!("inference:\n{under_inference}"));
        self.manifest(&m)
    }
}

#[test]
fn a_hook_still_running_at_the_deadline_is_stopped_and_denies() {
    let c = with_policy("#!/bin/sh\nexec sleep 300\n", Some(120), STATUS_THEN_ANSWER);
    let started = Instant::now();
    let run = c.run("t", &["--deadline", "2s"]);
    assert_eq!(run.code(), 3, "{}", run.dump());
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(
        run.tool_texts()[0],
        refusal("denied by hook on_tool_call[0] (h): the hook failed closed: the session's deadline passed while it ran; it was stopped; the call did not run")
    );
    assert_eq!(run.one("task_end")["exit_status"], "deadline");
}

#[test]
fn a_denied_end_without_answer_does_not_end_the_task() {
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: ./lead, calls: [worker]}\n  worker: {capsule: ./worker, calls: [lead]}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: hi}}\n- text: waiting\n- text: lead done\n",
        )
        .member(
            "worker",
            "capabilities:\n  network: {allow: [localhost]}\nhooks:\n  on_tool_call:\n    - {command: [hooks/policy]}\n",
            "- tool_calls:\n    - {name: end-without-answer, input: {reason: nothing to say}}\n- text: an answer after all\n",
        );
    exe(
        &f.dir.join("worker"),
        "hooks/policy",
        "#!/bin/sh\ncat >/dev/null\necho '{\"decision\":\"deny\",\"reason\":\"answer the lead\"}'\n",
    );
    let run = f.run("t");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let worker = run.member("worker");
    assert_eq!(
        worker.tool_texts()[0],
        "<untrusted-content source=tool:end-without-answer>\ndenied by hook on_tool_call[0] (policy): answer the lead; the call did not run\n</untrusted-content>"
    );
    assert_eq!(worker.one("task_end")["exit_status"], "completed");
    assert_eq!(run.member("lead").one("member_call")["status"], "completed");
}

#[test]
fn mur_trace_knows_the_records_of_hooks_and_attempts() {
    let c = Capsule::scripted(
        &[],
        "lifecycle:\n  keep_working: {limit: 1, message: more}\n  done_check: {command: [\"true\"], limit: 1}\nhooks:\n  on_tool_call:\n    - {command: [hooks/allow]}\n",
        STATUS_THEN_ANSWER,
    );
    exe(
        &c.dir,
        "hooks/allow",
        "#!/bin/sh\ncat >/dev/null\necho '{\"decision\":\"allow\"}'\n",
    );
    let c = c.file("replies.yaml", "- tool_calls:\n    - {name: session-status, input: {}}\n- text: early\n- text: \"done\\n[done]\"\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let out = c
        .mur()
        .args(["trace", c.records.to_str().unwrap()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for kind in ["policy_decision", "hook_run", "done_check", "keep_working"] {
        assert!(text.contains(kind), "{kind} missing: {text}");
    }
    assert!(!text.contains("unknown record type"), "{text}");
}

#[test]
fn hooks_and_done_check_get_the_built_environment_without_the_runtimes_secrets() {
    let c = Capsule::scripted(
        &["sh"],
        "hooks:\n  on_tool_call:\n    - {command: [hooks/h]}\nlifecycle:\n  done_check: {command: [./check.sh], limit: 0}\n",
        STATUS_THEN_ANSWER,
    );
    exe(
        &c.dir,
        "hooks/h",
        "#!/bin/sh\nenv > hook.env\ncat >/dev/null\necho '{\"decision\": \"allow\"}'\n",
    );
    exe(&c.dir, "work/check.sh", "#!/bin/sh\nenv > check.env\n");
    let out = c
        .mur()
        .arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .args(["--task", "t"])
        .env("OPENAI_API_KEY", "sk-never-for-a-hook-0123456789")
        .env("MURMUR_DOOR_TOKEN", "door-token-never-for-a-hook-0123")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for f in ["work/hook.env", "work/check.env"] {
        let env = std::fs::read_to_string(c.dir.join(f)).unwrap();
        assert!(!env.contains("never-for-a-hook"), "{f}: {env}");
        assert!(env.lines().any(|l| l.starts_with("PATH=")), "{f}: {env}");
        assert!(env.lines().any(|l| l == "TERM=dumb"), "{f}: {env}");
    }
}
