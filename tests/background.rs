//! background-command and process supervision, end to end: moving to the background,
//! status / wait / stop with their exact texts, refusals, the session's end, and the
//! faults a supervisor must survive (spec, "background-command").

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{Capsule, Run};

const GRACE: &str = "lifecycle:\n  shell_grace_secs: 1\n";

/// A result's parts: the `key: value` lines before the blank line, the output after
/// it, and the notes after the fence.
struct Parts {
    head: Vec<String>,
    body: String,
    notes: Vec<String>,
}

fn parts(text: &str) -> Parts {
    let (inside, notes) = text
        .split_once("</untrusted-content>")
        .unwrap_or_else(|| panic!("no fence: {text}"));
    let inside = inside.split_once('\n').unwrap().1;
    let (head, body) = inside.split_once("\n\n").unwrap_or((inside, ""));
    Parts {
        head: head.lines().map(str::to_string).collect(),
        body: body.to_string(),
        notes: notes
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    }
}

/// The value of `key: value` in a result's head.
fn field(text: &str, key: &str) -> String {
    let p = parts(text);
    p.head
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .to_string()
}

/// A whole-seconds line (`elapsed_secs`, `waited_secs`) as a number.
fn secs(text: &str, key: &str) -> u64 {
    let v = field(text, key);
    v.parse()
        .unwrap_or_else(|_| panic!("{key} is not a whole number: {v}"))
}

/// The head with `elapsed_secs`/`waited_secs` values (as `N`) and paths masked, for
/// exact comparison of the line structure; [`secs`] reads the values, which tests bound
/// from below (the command's clock starts before its spawn) and never pin to a wall time.
fn shape(text: &str) -> Vec<String> {
    parts(text)
        .head
        .iter()
        .map(|l| {
            let (k, v) = l.split_once(": ").unwrap();
            match k {
                "work_id" => format!("{k}: W"),
                "output" => format!("{k}: LOG"),
                "elapsed_secs" | "waited_secs" => format!("{k}: N"),
                _ => format!("{k}: {v}"),
            }
        })
        .collect()
}

fn pid_in(c: &Capsule, file: &str) -> i32 {
    let p = c.dir.join("work").join(file);
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(&p) {
            if let Ok(n) = s.trim().parse() {
                return n;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no pid in {file}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Gone from /proc (reaped): not even a zombie. Gives the reaper of the last parent
/// (init, for a process orphaned by a test) a moment.
fn gone(pid: i32) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn bg_records(run: &Run) -> Vec<Value> {
    run.records("background_command")
}

#[test]
fn the_tool_exists_only_with_an_inference_block_a_shell_allowlist_and_a_grace() {
    let with = Capsule::scripted(&["sh"], GRACE, "- text: hi\n");
    let run = with.run("t", &[]);
    assert_eq!(
        run.one("session_start")["tools_declared"],
        json!(["sh", "session-status", "background-command"])
    );
    let without_grace = Capsule::scripted(
        &["sh"],
        "",
        "- tool_calls: [{name: background-command, input: {operation: status, work_id: wrk_0a}}]\n- text: hi\n",
    );
    let run = without_grace.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.one("session_start")["tools_declared"],
        json!(["sh", "session-status"])
    );
    assert!(run.tool_texts()[0].contains("tool `background-command` does not exist in this session: it exists only when the capsule declares an inference: block, a non-empty capabilities.shell.allow and lifecycle.shell_grace_secs"), "{}", run.tool_texts()[0]);
    let without_shell = Capsule::scripted(&[], GRACE, "- text: hi\n");
    let run = without_shell.run("t", &[]);
    assert_eq!(
        run.one("session_start")["tools_declared"],
        json!(["session-status"])
    );
    // The manifest staging writes carries the spec's schema.
    let out = with.mur().arg("stage").arg(&with.dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let runtime = text
        .lines()
        .find_map(|l| l.strip_prefix("runtime directory: "))
        .unwrap();
    let m: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(Path::new(runtime).join("tools/background-command/murmur.yaml"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        m["input_schema"],
        json!({"type":"object","properties":{"operation":{"type":"string","enum":["status","wait","stop"]},"work_id":{"type":"string"},"wait_secs":{"type":"integer","minimum":0}},"required":["operation","work_id"]})
    );
    assert_eq!(m["implementation"], "native");
}

#[test]
fn a_command_past_the_grace_moves_to_the_background_and_wait_returns_its_exit() {
    let script = r#"
- tool_calls:
    - {id: slow, name: sh, input: {args: ["-c", "echo start; sleep 2; echo end; exit 101"]}}
- tool_calls:
    - {name: background-command, input: {operation: status, work_id: "${result.slow.work_id}"}}
    - {name: background-command, input: {operation: wait, work_id: "${result.slow.work_id}"}}
    - {name: background-command, input: {operation: status, work_id: "${result.slow.work_id}"}}
- text: done
"#;
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    let moved = parts(&t[0]);
    // The call moved after the 1 s grace, on the command's own clock.
    assert!(secs(&t[0], "elapsed_secs") >= 1, "{}", t[0]);
    assert_eq!(
        shape(&t[0]),
        [
            "work_id: W",
            "state: running",
            "elapsed_secs: N",
            "output: LOG",
            "output_bytes: 6",
            "output_shown: all"
        ]
    );
    assert_eq!(moved.body, "start\n");
    let wid = field(&t[0], "work_id");
    assert!(mur::ids::is_work_id(&wid) && wid.len() == 36, "{wid}");
    assert_eq!(
        moved.notes,
        [format!("The command is still running after lifecycle.shell_grace_secs (1 s) and has moved to the background: call background-command with work_id {wid} and operation status, wait or stop.")]
    );
    let log = field(&t[0], "output");
    assert!(Path::new(&log).is_absolute());
    assert_eq!(
        log,
        run.records
            .join(format!("logs/{wid}.log"))
            .display()
            .to_string()
    );
    // Each reading of the clock is at least the one before it.
    assert!(secs(&t[1], "elapsed_secs") >= secs(&t[0], "elapsed_secs"));
    assert_eq!(
        shape(&t[1]),
        [
            "work_id: W",
            "state: running",
            "elapsed_secs: N",
            "output: LOG",
            "output_bytes: 6",
            "output_shown: all"
        ]
    );
    // `sleep 2` ran inside the command: its elapsed time, taken from a clock started
    // before the spawn, is at least 2 s however slow the machine is.
    assert!(secs(&t[2], "elapsed_secs") >= 2, "{}", t[2]);
    assert!(secs(&t[2], "elapsed_secs") >= secs(&t[1], "elapsed_secs"));
    assert!(secs(&t[2], "waited_secs") <= secs(&t[2], "elapsed_secs"));
    assert_eq!(
        shape(&t[2]),
        [
            "work_id: W",
            "state: exited",
            "elapsed_secs: N",
            "waited_secs: N",
            "exit_code: 101",
            "status: error",
            "output: LOG",
            "output_bytes: 10",
            "output_shown: all"
        ]
    );
    assert_eq!(parts(&t[2]).body, "start\nend\n");
    assert!(parts(&t[2]).notes.is_empty(), "{}", t[2]);
    assert_eq!(shape(&t[3])[1], "state: exited");
    assert!(!t[3].contains("waited_secs"));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "start\nend\n");
    // Passed whatever the exit code; one background_command record per answered call.
    assert_eq!(run.records("tool_call")[2]["status"], "passed");
    let recs = bg_records(&run);
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[1]["operation"], "wait");
    assert_eq!(recs[1]["wait_secs"], 600);
    assert_eq!(recs[1]["exit_code"], 101);
    assert_eq!(recs[1]["work_id"], wid);
    assert_eq!(run.one("task_end")["runningCommands"], json!([]));
}

#[test]
fn without_a_grace_no_command_moves_to_the_background() {
    let script = "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"sleep 2; echo done\"]}}\n- text: ok\n";
    let c = Capsule::scripted(&["sh"], "", script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = &run.tool_texts()[0];
    assert!(t.contains("exit_code: 0\nstatus: ok\n"), "{t}");
    assert!(t.ends_with("\n\ndone\n</untrusted-content>"), "{t}");
}

#[test]
fn wait_0_returns_at_once_wait_secs_bounds_the_wait_and_stop_reports_stopped() {
    let script = r#"
- tool_calls:
    - {id: s, name: sh, input: {args: ["-c", "echo hi; sleep 30"]}}
- tool_calls:
    - {name: background-command, input: {operation: wait, work_id: "${result.s.work_id}", wait_secs: 0}}
    - {name: background-command, input: {operation: wait, work_id: "${result.s.work_id}", wait_secs: 1}}
    - {name: background-command, input: {operation: stop, work_id: "${result.s.work_id}"}}
    - {name: background-command, input: {operation: status, work_id: "${result.s.work_id}"}}
    - {name: background-command, input: {operation: stop, work_id: "${result.s.work_id}"}}
- text: done
"#;
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    let calls = run.records("tool_call");
    // wait_secs 0 returns at once, long before the 30 s command ends; wait_secs 1
    // waits its whole second (more only on a slow machine) and the command still runs.
    assert_eq!(shape(&t[1])[3], "waited_secs: N");
    assert_eq!(shape(&t[1])[1], "state: running");
    assert!(calls[1]["duration_ms"].as_u64().unwrap() < 20_000);
    assert!(secs(&t[2], "waited_secs") >= 1, "{}", t[2]);
    assert!(calls[2]["duration_ms"].as_u64().unwrap() >= 1000);
    assert_eq!(shape(&t[2])[1], "state: running");
    let stop = shape(&t[3]);
    assert_eq!(stop[1], "state: stopped");
    assert_eq!(
        stop[3..],
        [
            "exit_code: 143",
            "status: error",
            "output: LOG",
            "output_bytes: 3",
            "output_shown: all"
        ]
    );
    assert_eq!(parts(&t[3]).body, "hi\n");
    // sh exits on SIGTERM: no SIGKILL 2 s later was needed.
    assert!(calls[3]["duration_ms"].as_u64().unwrap() < 20_000);
    assert_eq!(shape(&t[4])[1], "state: stopped");
    // A command that already ended is sent nothing: the text stays the same.
    assert_eq!(shape(&t[5]), shape(&t[4]));
    assert!(calls[5]["duration_ms"].as_u64().unwrap() < 20_000);
    assert_eq!(bg_records(&run).len(), 5);
}

#[test]
fn exit_code_is_128_plus_the_signal_for_a_signal_kill() {
    let script = r#"
- tool_calls:
    - {id: s, name: sh, input: {args: ["-c", "sleep 1.5; kill -9 $$"]}}
- tool_calls:
    - {name: background-command, input: {operation: wait, work_id: "${result.s.work_id}", wait_secs: 20}}
- text: done
"#;
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = &run.tool_texts()[1];
    assert_eq!(field(t, "state"), "exited");
    assert_eq!(field(t, "exit_code"), "137");
    assert_eq!(field(t, "status"), "error");
}

#[test]
fn refusals_have_the_spec_texts_and_write_no_record() {
    let script = r#"
- tool_calls:
    - {id: s, name: sh, input: {args: ["-c", "sleep 30"]}}
- tool_calls:
    - {name: background-command, input: {operation: status, work_id: wrk_00000000000000000000000000000abc}}
    - {name: background-command, input: {operation: status, work_id: job-7}}
    - {name: background-command, input: {operation: status}}
    - {name: background-command, input: {operation: kill, work_id: "${result.s.work_id}"}}
    - {name: background-command, input: {work_id: "${result.s.work_id}"}}
    - {name: background-command, input: {operation: wait, work_id: "${result.s.work_id}", wait_secs: 1.5}}
    - {name: background-command, input: {operation: wait, work_id: "${result.s.work_id}", wait_secs: "10"}}
    - {name: background-command, input: {operation: wait, work_id: "${result.s.work_id}", wait_secs: -2}}
    - {name: background-command, input: {operation: status, work_id: "${result.s.work_id}", pid: 3}}
    - {name: background-command, input_raw: "[1]"}
    - {name: background-command, input: {operation: status, work_id: "${result.s.work_id}"}}
- text: done
"#;
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let calls = run.records("tool_call");
    let data = |i: usize| -> String {
        let t = calls[i]["content"].as_str().unwrap();
        parts(t).head.join("\n")
    };
    let form = "background-command takes {\"operation\": \"status\" | \"wait\" | \"stop\", \"work_id\": \"wrk_<hex>\", \"wait_secs\": integer}";
    let expected = [
        "no background command with work id `wrk_00000000000000000000000000000abc` in this session".to_string(),
        "`job-7` is not a work id: a work id has the form wrk_<hex> (wrk_ followed by hexadecimal digits)".into(),
        "`work_id` is missing: give the work id a shell call returned, of the form wrk_<hex>".into(),
        "`kill` is not an operation of background-command: the accepted operations are status, wait, stop".into(),
        "`operation` is missing: the accepted operations are status, wait, stop".into(),
        "`wait_secs` must be a whole number of seconds (0 or more), got `1.5`".into(),
        "`wait_secs` must be a whole number of seconds (0 or more), got `\"10\"`".into(),
        "`wait_secs` must be a whole number of seconds (0 or more), got `-2`".into(),
        format!("unknown input key `pid`; {form}"),
        format!("{form}; got an array"),
    ];
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(data(i + 1), *e, "call {}", i + 1);
        assert_eq!(calls[i + 1]["status"], "failed");
    }
    // Only the last call was answered.
    let recs = bg_records(&run);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["operation"], "status");
}

#[test]
fn a_work_id_from_another_session_is_unknown() {
    let first = Capsule::scripted(
        &["sh"],
        GRACE,
        "- tool_calls: [{name: sh, input: {args: [\"-c\", \"sleep 5\"]}}]\n- text: ok\n",
    );
    let run = first.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let wid = field(&run.tool_texts()[0], "work_id");
    let second = Capsule::scripted(
        &["sh"],
        GRACE,
        &format!("- tool_calls: [{{name: background-command, input: {{operation: status, work_id: {wid}}}}}]\n- text: ok\n"),
    );
    let run2 = second.run("t", &[]);
    assert_eq!(
        parts(&run2.tool_texts()[0]).head.join("\n"),
        format!("no background command with work id `{wid}` in this session")
    );
    assert!(bg_records(&run2).is_empty());
}

#[test]
fn a_command_still_running_at_the_answer_is_stopped_and_named_in_running_commands() {
    let script = "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"echo $$ > leader.pid; sleep 300\"]}}\n- text: done\n";
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let wid = field(&run.tool_texts()[0], "work_id");
    let end = run.one("task_end");
    assert_eq!(end["runningCommands"][0]["work_id"], wid);
    assert_eq!(end["runningCommands"][0]["argv"][0], "sh");
    assert!(gone(pid_in(&c, "leader.pid")));
    assert_eq!(run.trace().last().unwrap()["type"], "session_end");
}

#[test]
fn the_deadline_ends_a_wait_and_the_session() {
    let script = r#"
- tool_calls:
    - {id: s, name: sh, input: {args: ["-c", "echo $$ > leader.pid; sleep 300"]}}
- tool_calls:
    - {name: background-command, input: {operation: wait, work_id: "${result.s.work_id}"}}
- text: never
"#;
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let run = c.run("t", &["--deadline", "3s"]);
    assert_eq!(run.code(), 3, "{}", run.dump());
    let rec = &bg_records(&run)[0];
    assert_eq!(rec["phase"], "background_wait");
    assert_eq!(rec["cut_by"], "deadline");
    let end = run.one("task_end");
    assert_eq!(end["exit_status"], "deadline");
    assert_eq!(end["phase"], "background_wait");
    assert_eq!(end["runningCommands"].as_array().unwrap().len(), 1);
    assert!(gone(pid_in(&c, "leader.pid")));
}

/// Starts `mur run` in the background and returns the child.
fn spawn_mur(c: &Capsule) -> std::process::Child {
    c.mur()
        .arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .args(["--task", "t"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn sigterm(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

#[test]
fn a_cancel_ends_a_wait_at_once_recorded_as_phase_background_wait() {
    let script = r#"
- tool_calls:
    - {id: s, name: sh, input: {args: ["-c", "echo $$ > leader.pid; sleep 300"]}}
- tool_calls:
    - {name: background-command, input: {operation: wait, work_id: "${result.s.work_id}"}}
- text: never
"#;
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let mut child = spawn_mur(&c);
    let leader = pid_in(&c, "leader.pid");
    await_records(&c, "tool_call", 1);
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    sigterm(child.id());
    let status = child.wait().unwrap();
    // The wait (600 s) ended at the cancel, not at its own end.
    assert!(t.elapsed() < Duration::from_secs(120));
    assert_eq!(status.code(), Some(130));
    let trace = support::read_trace(&c.records);
    let rec = trace
        .iter()
        .find(|r| r["type"] == "background_command")
        .expect("a background_command record");
    assert_eq!(rec["phase"], "background_wait");
    assert_eq!(rec["cut_by"], "cancel");
    let end = trace.iter().find(|r| r["type"] == "task_end").unwrap();
    assert_eq!(end["exit_status"], "canceled");
    assert_eq!(end["phase"], "background_wait");
    assert_eq!(trace.last().unwrap()["type"], "session_end");
    assert!(gone(leader));
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_2_seconds_later() {
    let script = r#"
- tool_calls:
    - {id: s, name: sh, input: {args: ["-c", "trap '' TERM; echo $$ > leader.pid; while :; do sleep 0.2; done"]}}
- tool_calls:
    - {name: background-command, input: {operation: stop, work_id: "${result.s.work_id}"}}
- text: done
"#;
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = &run.tool_texts()[1];
    assert_eq!(field(t, "state"), "stopped");
    assert_eq!(field(t, "exit_code"), "137");
    let ms = run.records("tool_call")[1]["duration_ms"].as_u64().unwrap();
    // SIGKILL comes 2 s after SIGTERM, never earlier; a slow machine may add to it.
    assert!(ms >= 1900, "{ms}");
    assert!(gone(pid_in(&c, "leader.pid")));
}

#[test]
fn a_shell_that_backgrounds_a_job_and_exits_0_returns_and_names_the_job() {
    // No grace: the call returns at the leader's exit, not when the job closes the log.
    // The shell waits until its job has become `sleep` (a forked child is `sh` until
    // its exec), so the name the note shows does not depend on the scheduler.
    let script = "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"sleep 300 & echo $! > job.pid; until [ \\\"$(cat /proc/$!/comm)\\\" = sleep ]; do :; done; echo bye\"]}}\n- text: done\n";
    let c = with_proc(&["sh"], "", script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let job = pid_in(&c, "job.pid");
    let t = &run.tool_texts()[0];
    assert!(t.contains("exit_code: 0\nstatus: ok\n"), "{t}");
    assert_eq!(
        parts(t).notes,
        [format!("Processes left holding its output: {job} (sleep). They can still write to its log; the session's end kills them.")]
    );
    assert!(gone(job), "the job outlived the session");
}

#[test]
fn a_grandchild_chain_three_levels_deep_is_stopped_with_the_group() {
    let chain = r#"sh -c 'sh -c "echo \$\$ > g3.pid; sleep 300" & echo $$ > g2.pid; wait' & echo $$ > g1.pid; wait"#;
    let script = format!(
        "- tool_calls:\n    - {{id: s, name: sh, input: {{args: [\"-c\", {}]}}}}\n- tool_calls:\n    - {{name: background-command, input: {{operation: stop, work_id: \"${{result.s.work_id}}\"}}}}\n- text: done\n",
        serde_json::to_string(chain).unwrap()
    );
    let c = Capsule::scripted(&["sh"], GRACE, &script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = &run.tool_texts()[1];
    assert_eq!(field(t, "state"), "stopped");
    for f in ["g1.pid", "g2.pid", "g3.pid"] {
        assert!(gone(pid_in(&c, f)), "{f} survived");
    }
    assert!(run.records("survivor_killed").is_empty());
}

#[test]
fn a_setsid_escape_is_named_killed_at_the_session_end_and_recorded() {
    let cmd = r#"setsid sh -c 'echo $$ > esc.pid; exec sleep 300' & while [ ! -s esc.pid ]; do sleep 0.05; done; echo ok"#;
    let script = format!(
        "- tool_calls:\n    - {{name: sh, input: {{args: [\"-c\", {}]}}}}\n- text: done\n",
        serde_json::to_string(cmd).unwrap()
    );
    let c = Capsule::scripted(&["sh"], "", &script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let esc = pid_in(&c, "esc.pid");
    let t = &run.tool_texts()[0];
    assert_eq!(
        parts(t).notes,
        [format!("Processes left holding its output: {esc} (sleep). They can still write to its log; the session's end kills them.")]
    );
    let wid = field(t, "work_id");
    let s = run.one("survivor_killed");
    assert_eq!(s["pid"], esc);
    assert_eq!(s["argv"], json!(["sleep", "300"]));
    assert_eq!(s["work_id"], wid);
    assert_eq!(s["signal"], "SIGKILL");
    assert!(gone(esc));
    assert_eq!(run.trace().last().unwrap()["type"], "session_end");
}

#[test]
fn a_double_fork_escape_is_killed_at_the_session_end() {
    // The leader waits until the escapee has left the group (it writes its pid after
    // setsid), then exits.
    let cmd = r#"(setsid sh -c 'echo $$ > df.pid; exec sleep 300' &); while [ ! -s df.pid ]; do sleep 0.05; done; exit 0"#;
    let script = format!(
        "- tool_calls:\n    - {{name: sh, input: {{args: [\"-c\", {}]}}}}\n- text: done\n",
        serde_json::to_string(cmd).unwrap()
    );
    let c = Capsule::scripted(&["sh"], "", &script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let pid = pid_in(&c, "df.pid");
    let s = run.one("survivor_killed");
    assert_eq!(s["pid"], pid);
    assert!(gone(pid));
}

#[test]
fn a_command_writing_1_gib_keeps_memory_flat_and_the_log_holds_it_all() {
    let script = r#"
- tool_calls:
    - {name: sh, input: {args: ["-c", "head -c 1073741824 /dev/zero"]}}
    - {name: sh, input: {args: ["-c", "grep VmHWM /proc/$PPID/status"]}}
- text: done
"#;
    let c = with_proc(&["sh"], "", script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    let log = field(&t[0], "output");
    assert_eq!(field(&t[0], "output_bytes"), "1073741824");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 1 << 30);
    let hwm: u64 = parts(&t[1])
        .body
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(hwm < 64 * 1024, "mur's peak RSS {hwm} kB");
    std::fs::remove_file(&log).unwrap();
}

#[test]
fn binary_output_and_a_tail_that_starts_inside_a_character() {
    let script = r#"
- tool_calls:
    - {name: sh, input: {args: ["-c", "printf 'ok\\377\\376\\000end'"]}}
    - {name: sh, input: {args: ["-c", "printf '\\303\\251'; head -c 16383 /dev/zero | tr '\\000' a"]}}
    - {name: cat, input: {}}
- text: done
"#;
    let c = Capsule::scripted(&["sh", "cat"], GRACE, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    assert_eq!(field(&t[0], "output_bytes"), "8");
    assert_eq!(parts(&t[0]).body, "ok\u{fffd}\u{fffd}\u{0}end\n");
    assert_eq!(
        std::fs::read(field(&t[0], "output")).unwrap(),
        b"ok\xff\xfe\x00end"
    );
    assert_eq!(field(&t[1], "output_bytes"), "16385");
    assert_eq!(field(&t[1], "output_shown"), "last 16384 bytes");
    assert_eq!(parts(&t[1]).body, format!("{}\n", "a".repeat(16383)));
    // A command that reads stdin gets an empty one and ends.
    assert_eq!(field(&t[2], "exit_code"), "0");
    assert_eq!(field(&t[2], "output_bytes"), "0");
}

#[test]
fn two_hundred_short_commands_leave_no_zombie() {
    let mut script = String::from("- tool_calls:\n");
    for _ in 0..200 {
        script.push_str("    - {name: \"true\"}\n");
    }
    script.push_str("    - {name: sh, input: {args: [\"-c\", \"cat /proc/$PPID/task/*/children; echo; echo $$\"]}}\n- text: done\n");
    let c = with_proc(&["\"true\"", "sh"], GRACE, &script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    assert_eq!(t.len(), 201);
    let body = parts(&t[200]).body;
    let mut lines = body.split('\n').filter(|l| !l.trim().is_empty());
    let children: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let me = lines.next().unwrap().trim();
    // mur's only child is the shell asking.
    assert_eq!(children, [me], "{body}");
}

#[test]
fn a_hundred_concurrent_background_commands_are_all_reaped() {
    use mur::exec::Supervisor;
    use mur::tools::shell::{call, ShellContext};
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let sup = Supervisor::new();
    let (_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let ctx = ShellContext {
        workdir: dir.path(),
        logs_dir: &logs,
        supervisor: &sup,
        deadline: None,
        shutdown: &shutdown,
        grace: Some(Duration::from_millis(20)),
    };
    for i in 0..100 {
        let (r, _) = call(&ctx, "sh", vec!["-c".into(), format!("sleep 4; echo {i}")]);
        assert!(r.data.contains("state: running\n"), "{}", r.data);
    }
    let all = sup.all();
    assert_eq!(all.len(), 100);
    assert_eq!(sup.running().len(), 100);
    for c in &all {
        let (e, _) = c
            .wait_until(Instant::now() + Duration::from_secs(20))
            .expect("exited");
        assert_eq!(e.exit_code(), 0);
        let _ = c.reaped().recv_timeout(Duration::from_secs(5));
    }
    for c in &all {
        assert!(
            !Path::new(&format!("/proc/{}", c.pgid)).exists(),
            "{} left in /proc",
            c.pgid
        );
    }
    let exits: Vec<_> = sup.events().try_iter().collect();
    assert_eq!(exits.len(), 100);
}

#[test]
fn sigterm_to_mur_with_20_background_commands_stops_them_all() {
    let mut script = String::from("- tool_calls:\n");
    for _ in 0..20 {
        script.push_str(
            "    - {name: sh, input: {args: [\"-c\", \"echo $$ >> pids; exec sleep 300\"]}}\n",
        );
    }
    script.push_str(
        "    - {name: sh, input: {args: [\"-c\", \"touch ready; sleep 300\"]}}\n- text: never\n",
    );
    let c = Capsule::scripted(&["sh"], GRACE, &script);
    let mut child = spawn_mur(&c);
    let ready = c.dir.join("work/ready");
    let start = Instant::now();
    while !ready.exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = Instant::now();
    sigterm(child.id());
    let status = child.wait().unwrap();
    // Far below the commands' own 300 s.
    assert!(t.elapsed() < Duration::from_secs(120));
    assert_eq!(status.code(), Some(130));
    let trace = support::read_trace(&c.records);
    assert_eq!(trace.last().unwrap()["type"], "session_end");
    let end = trace.iter().find(|r| r["type"] == "task_end").unwrap();
    // The 21st was still in the foreground: it was stopped there, not left running.
    assert_eq!(end["runningCommands"].as_array().unwrap().len(), 20);
    let pids: Vec<i32> = std::fs::read_to_string(c.dir.join("work/pids"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 20);
    for p in pids {
        assert!(gone(p), "{p} survived");
    }
}

#[test]
fn background_example_runs_offline() {
    let c = Capsule::new();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/background");
    let run = c.run_at(Path::new(example), "Build, then stop the server", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.stdout(),
        "The build finished (exit 0) and the server was stopped.\n"
    );
    let states: Vec<String> = bg_records(&run)
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["operation"].as_str().unwrap(),
                r["state"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(states, ["status running", "wait exited", "stop stopped"]);
    assert_eq!(run.one("task_end")["runningCommands"], json!([]));
}

/// Polls the door's trace until it holds `n` records of type `kind`.
fn await_records(c: &Capsule, kind: &str, n: usize) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let trace = if c.records.join("trace.jsonl").exists() {
            support::read_trace(&c.records)
        } else {
            Vec::new()
        };
        let got: Vec<Value> = trace.into_iter().filter(|r| r["type"] == kind).collect();
        if got.len() >= n {
            return got;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "waited 90 s for {n} {kind} records, got {}",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const COMPLETION_LAST_LINE: &str = "The whole output is in the log named on the output line. Act on this result if it calls for anything, then answer this task in text without calling a tool.";

#[test]
fn under_queue_and_sleep_an_unreturned_exit_arrives_as_a_completion_task() {
    use mur::a2a::types::TaskState;
    let script = r#"
- tool_calls: [{id: a, name: sh, input: {args: ["-c", "sleep 2; echo built-a; exit 3"]}}]
- text: A started
- text: A handled
- tool_calls: [{id: b, name: sh, input: {args: ["-c", "sleep 2; echo b"]}}]
- tool_calls: [{name: background-command, input: {operation: wait, work_id: "${result.b.work_id}"}}]
- text: B done
- tool_calls: [{id: d, name: sh, input: {args: ["-c", "while [ ! -e go ]; do sleep 0.05; done; echo d-out"]}}]
- tool_calls: [{name: sh, input: {args: ["-c", "touch go; sleep 0.5"]}}]
- text: D done
- text: E done
- text: D handled
- tool_calls: [{id: c, name: sh, input: {args: ["-c", "sleep 30"]}}]
- text: C started
"#;
    let c = Capsule::scripted(
        &["sh"],
        "task_acceptance: queue\nlifecycle:\n  shell_grace_secs: 1\n",
        script,
    );
    let (mut door, client) = support::spawn_door(&c);

    // A: the command outlives its task; its exit arrives as a task of its own.
    let ta = client.send_message("a", None, true).unwrap();
    let ends = await_records(&c, "task_end", 2);
    assert_eq!(ends[0]["task"], ta.id.as_str());
    assert_eq!(ends[0]["exit_status"], "completed");
    assert_eq!(ends[0]["runningCommands"].as_array().unwrap().len(), 1);
    assert_eq!(ends[0]["stopped_commands"], json!([]));
    let starts = await_records(&c, "task_start", 2);
    let ca = &starts[1];
    assert_eq!(ca["origin"], "completion");
    let calls = await_records(&c, "tool_call", 1);
    let wid_a = field(calls[0]["content"].as_str().unwrap(), "work_id");
    let log_a = field(calls[0]["content"].as_str().unwrap(), "output");
    assert_eq!(ca["work_id"], wid_a.as_str());
    assert_eq!(ca["started_by"], ta.id.as_str());
    let text = ca["text"].as_str().unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    assert_eq!(
        first,
        format!("[background-command] Command {wid_a} ([\"sh\",\"-c\",\"sleep 2; echo built-a; exit 3\"]), started by task {}, exited with exit_code 3 (status error) and no background-command call returned its exit, so its result arrives as this task:", ta.id)
    );
    assert!(rest.starts_with("<untrusted-content source=tool:background-command>\n"));
    let p = parts(rest);
    let elapsed = field(rest, "elapsed_secs");
    assert_eq!(
        p.head,
        [
            format!("work_id: {wid_a}"),
            "state: exited".into(),
            format!("elapsed_secs: {elapsed}"),
            "exit_code: 3".into(),
            "status: error".into(),
            format!("output: {log_a}"),
            "output_bytes: 8".into(),
            "output_shown: all".into(),
        ]
    );
    assert_eq!(p.body, "built-a\n");
    assert_eq!(p.notes, [COMPLETION_LAST_LINE]);
    assert_eq!(ends[1]["task"], ca["task"]);
    assert_eq!(ends[1]["exit_status"], "completed");
    let got = client.get_task(ca["task"].as_str().unwrap()).unwrap();
    assert_eq!(got.status.state, TaskState::Completed);
    assert_eq!(got.answer_text(), "A handled");
    assert_eq!(client.get_task(&ta.id).unwrap().answer_text(), "A started");

    // B: background-command wait returned the exit, so no completion task comes.
    let tb = client.send_message("b", None, true).unwrap();
    await_records(&c, "task_end", 3);
    assert_eq!(client.get_task(&tb.id).unwrap().answer_text(), "B done");

    // D exits while its own task runs; E, sent while D runs, is queued first, so D's
    // completion task runs after E.
    let td = client.send_message("d", None, true).unwrap();
    await_records(&c, "task_start", 4);
    let te = client.send_message("e", None, true).unwrap();
    assert_eq!(te.status.state, TaskState::Submitted);
    let ends = await_records(&c, "task_end", 6);
    let starts = await_records(&c, "task_start", 6);
    let origins: Vec<&str> = starts
        .iter()
        .map(|r| r["origin"].as_str().unwrap())
        .collect();
    assert_eq!(
        origins,
        [
            "client",
            "completion",
            "client",
            "client",
            "client",
            "completion"
        ]
    );
    assert_eq!(starts[3]["task"], td.id.as_str());
    assert_eq!(starts[4]["task"], te.id.as_str());
    assert_eq!(starts[5]["started_by"], td.id.as_str());
    assert!(starts[5]["text"]
        .as_str()
        .unwrap()
        .contains("exited with exit_code 0 (status ok)"));
    assert_eq!(ends[5]["exit_status"], "completed");

    // C: a command still running at the session's end is stopped and yields none.
    let tc = client.send_message("c", None, true).unwrap();
    await_records(&c, "task_end", 7);
    let calls = await_records(&c, "tool_call", 6);
    let wid_c = field(
        calls.last().unwrap()["content"].as_str().unwrap(),
        "work_id",
    );
    assert_eq!(client.get_task(&tc.id).unwrap().answer_text(), "C started");
    sigterm(door.id());
    assert_eq!(door.wait().unwrap().code(), Some(0));
    let trace = support::read_trace(&c.records);
    let starts: Vec<&Value> = trace.iter().filter(|r| r["type"] == "task_start").collect();
    assert_eq!(starts.len(), 7, "{trace:#?}");
    let end = trace.last().unwrap();
    assert_eq!(end["type"], "session_end");
    assert_eq!(end["stopped_commands"], json!([wid_c]));
    assert!(trace.iter().all(|r| r["type"] != "completion_dropped"));
}

/// The zombie children of `pid`, from `/proc/<child>/stat`.
fn zombie_children(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let rest: Vec<&str> = stat[close + 2..].split(' ').collect();
        if rest.len() > 1 && rest[0] == "Z" && rest[1] == pid.to_string() {
            out.push(stat.clone());
        }
    }
    out
}

#[test]
fn a_setsid_escapee_that_exits_mid_session_is_reaped_at_once() {
    // The escapee exits after 1 s; the session's second command runs until the test
    // lets it go, so the escapee's end is seen while the session still runs, however
    // slow the machine is.
    let cmd = r#"setsid sh -c 'echo $$ > esc.pid; sleep 1' & while [ ! -s esc.pid ]; do sleep 0.05; done"#;
    let hold = "while [ ! -e go ]; do sleep 0.05; done";
    let script = format!(
        "- tool_calls:\n    - {{name: sh, input: {{args: [\"-c\", {}]}}}}\n- tool_calls:\n    - {{name: sh, input: {{args: [\"-c\", {}]}}}}\n- text: done\n",
        serde_json::to_string(cmd).unwrap(),
        serde_json::to_string(hold).unwrap()
    );
    let c = Capsule::scripted(&["sh"], "", &script);
    let mut mur = spawn_mur(&c);
    let esc = pid_in(&c, "esc.pid");
    assert!(gone(esc), "{esc} is left");
    assert!(
        mur.try_wait().unwrap().is_none(),
        "the session ended too early"
    );
    assert_eq!(zombie_children(mur.id()), Vec::<String>::new());
    std::fs::write(c.dir.join("work/go"), "").unwrap();
    assert_eq!(mur.wait().unwrap().code(), Some(0));
    let run = Run {
        output: std::process::Output {
            status: std::process::ExitStatus::default(),
            stdout: Vec::new(),
            stderr: Vec::new(),
        },
        records: c.records.clone(),
    };
    assert!(run.records("survivor_killed").is_empty(), "{}", run.dump());
}

#[test]
fn a_canceled_task_under_queue_and_sleep_stops_its_commands_and_gets_no_completion() {
    use mur::a2a::types::TaskState;
    let script = r#"
- tool_calls: [{id: s, name: sh, input: {args: ["-c", "sleep 30"]}}]
- tool_calls: [{name: background-command, input: {operation: wait, work_id: "${result.s.work_id}"}}]
- text: never
"#;
    let c = Capsule::scripted(
        &["sh"],
        "task_acceptance: queue\nlifecycle:\n  shell_grace_secs: 1\n",
        script,
    );
    let (mut door, client) = support::spawn_door(&c);
    let t = client.send_message("t", None, true).unwrap();
    await_records(&c, "tool_call", 1);
    std::thread::sleep(Duration::from_millis(300));
    let canceled = client.cancel_task(&t.id).unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    let ends = await_records(&c, "task_end", 1);
    let calls = await_records(&c, "tool_call", 1);
    let wid = field(calls[0]["content"].as_str().unwrap(), "work_id");
    assert_eq!(ends[0]["exit_status"], "canceled");
    assert_eq!(ends[0]["phase"], "background_wait");
    assert_eq!(ends[0]["stopped_commands"], json!([wid]));
    std::thread::sleep(Duration::from_millis(500));
    sigterm(door.id());
    assert_eq!(door.wait().unwrap().code(), Some(0));
    let trace = support::read_trace(&c.records);
    assert_eq!(
        trace.iter().filter(|r| r["type"] == "task_start").count(),
        1,
        "{trace:#?}"
    );
    assert_eq!(trace.last().unwrap()["stopped_commands"], json!([]));
}

#[test]
fn a_process_that_forges_its_session_and_leaves_its_group_dies_with_mur_run() {
    let cmd = r#"MURMUR_SESSION=ses_other setsid sh -c 'echo $$ > forged.pid; exec sleep 60' >/dev/null 2>&1 & env -i /bin/sh -c "setsid sh -c 'echo \$\$ > bare.pid; exec sleep 61'" >/dev/null 2>&1 & while [ ! -s forged.pid ] || [ ! -s bare.pid ]; do sleep 0.05; done; echo ok"#;
    let script = format!(
        "- tool_calls:\n    - {{name: sh, input: {{args: [\"-c\", {}]}}}}\n- text: done\n",
        serde_json::to_string(cmd).unwrap()
    );
    let c = Capsule::scripted(&["sh"], "", &script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    for f in ["forged.pid", "bare.pid"] {
        let pid = pid_in(&c, f);
        assert!(gone(pid), "{f}: {pid} outlived mur run");
    }
    let killed: Vec<i64> = run
        .records("survivor_killed")
        .iter()
        .map(|r| r["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(killed.len(), 2, "{}", run.dump());
}

#[test]
fn a_stop_that_cannot_reach_a_command_that_left_its_group_says_so() {
    // The command moves itself into mur's own process group.
    let script = r#"
- tool_calls:
    - {id: pg, name: perl, input: {args: ["-e", "setpgrp(0, getpgrp(getppid())) or die; open(my $f, '>', 'moved.pid') or die; print $f $$; close $f; sleep 60"]}}
- tool_calls:
    - {name: background-command, input: {operation: stop, work_id: "${result.pg.work_id}"}}
- text: done
"#;
    // perl, not python3: a python3 found through a version manager's shim lives
    // outside the paths the sandbox lets a command read.
    let c = Capsule::scripted(&["perl"], GRACE, script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = &run.tool_texts()[1];
    assert_eq!(field(t, "state"), "running", "{t}");
    assert!(
        t.contains("\nThe stop did not reach the command: its process left its process group "),
        "{t}"
    );
    let pid = pid_in(&c, "moved.pid");
    assert!(gone(pid), "the command outlived the session");
}

#[test]
fn a_log_that_hits_the_file_size_limit_is_a_wait_error_and_status_error_despite_exit_0() {
    // mur runs under RLIMIT_FSIZE = 256 KiB, which its commands inherit: the command
    // writes 1 MiB into its log, the write past the limit fails (EFBIG, SIGXFSZ being
    // ignored), and the command itself exits 0.
    const LIMIT: u64 = 256 * 1024;
    let script = r#"
- tool_calls:
    - {id: big, name: sh, input: {args: ["-c", "trap '' XFSZ; sleep 2; yes | head -c 1048576; exit 0"]}}
- tool_calls:
    - {name: background-command, input: {operation: wait, work_id: "${result.big.work_id}"}}
- text: done
"#;
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let mut cmd = c.mur();
    cmd.arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .args(["--task", "t"]);
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_FSIZE, LIMIT, LIMIT)
                .map_err(std::io::Error::from)
        });
    }
    let run = Run {
        output: cmd.output().unwrap(),
        records: c.records.clone(),
    };
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = run.tool_texts();
    assert_eq!(field(&t[1], "state"), "exited", "{}", t[1]);
    assert_eq!(field(&t[1], "exit_code"), "0", "{}", t[1]);
    assert_eq!(field(&t[1], "status"), "error", "{}", t[1]);
    assert_eq!(
        field(&t[1], "wait_error"),
        format!("writing the log failed: it reached the file-size limit (RLIMIT_FSIZE) of {LIMIT} bytes, and output past it was lost")
    );
    assert_eq!(field(&t[1], "output_bytes"), LIMIT.to_string());
    assert_eq!(field(&t[1], "output_shown"), "last 16384 bytes");
    // The line sits where the spec puts it: after status, before output.
    let head = parts(&t[1]).head;
    let at = |k: &str| {
        head.iter()
            .position(|l| l.starts_with(&format!("{k}: ")))
            .unwrap()
    };
    assert!(at("status") < at("wait_error") && at("wait_error") < at("output"));
}

#[test]
fn an_escapee_that_clears_its_environment_dies_at_its_door_tasks_end() {
    // `setsid -f env -i …`: a new session and process group, no MURMUR_SESSION, and its
    // parent gone at once (mur adopts it). The task's end must kill it, while the door
    // runs on.
    let cmd = r#"setsid -f env -i /bin/sh -c 'echo $$ > esc.pid; exec sleep 600'; while [ ! -s esc.pid ]; do sleep 0.05; done; echo ok"#;
    let script = format!(
        "- tool_calls:\n    - {{name: sh, input: {{args: [\"-c\", {}]}}}}\n- text: done\n",
        serde_json::to_string(cmd).unwrap()
    );
    let c = Capsule::scripted(&["sh"], "", &script);
    let (mut door, client) = support::spawn_door(&c);
    let t = client.send_message("t", None, false).unwrap();
    let ends = await_records(&c, "task_end", 1);
    assert_eq!(ends[0]["task"], json!(t.id), "{ends:#?}");
    let esc = pid_in(&c, "esc.pid");
    assert!(gone(esc), "{esc} outlived its task");
    assert!(door.try_wait().unwrap().is_none(), "the door ended");
    let killed = await_records(&c, "survivor_killed", 1);
    assert_eq!(killed[0]["pid"], json!(esc), "{killed:#?}");
    assert_eq!(killed[0]["task"], json!(t.id), "{killed:#?}");
    sigterm(door.id());
    assert_eq!(door.wait().unwrap().code(), Some(0));
}

/// A panic in the session while a command runs: the command's group is killed, the
/// task and the session end `failed`, recorded, and `mur run` exits 1.
#[test]
fn a_session_panic_kills_its_commands_and_fails_the_task_and_session() {
    let script = "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"echo $$ > leader.pid; sleep 300\"]}}\n- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"echo CRASH-ME\"]}}\n- text: done\n";
    let c = Capsule::scripted(&["sh"], GRACE, script);
    let output = c
        .mur()
        .env("MUR_DEBUG_PANIC_AFTER_TOOL", "CRASH-ME")
        .arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .args(["--task", "t"])
        .output()
        .unwrap();
    let run = Run {
        output,
        records: c.records.clone(),
    };
    assert_eq!(run.code(), 1, "{}", run.dump());
    assert!(
        gone(pid_in(&c, "leader.pid")),
        "the command outlived the panic"
    );
    let failed = run.one("task_failed");
    assert_eq!(failed["error"], "test's session crashed");
    assert_eq!(
        failed["panic"],
        "MUR_DEBUG_PANIC_AFTER_TOOL matched a tool result"
    );
    let end = run.one("task_end");
    assert_eq!(end["exit_status"], "failed");
    assert_eq!(end["stopped_commands"].as_array().unwrap().len(), 1);
    let last = run.trace().last().unwrap().clone();
    assert_eq!(last["type"], "session_end");
    assert_eq!(last["exit_status"], "failed");
    assert!(
        run.stderr()
            .contains("mur: task failed: test's session crashed"),
        "{}",
        run.stderr()
    );
}

/// Whatever owns processes kills them when it goes: a supervisor dropped as its
/// thread panics stops the group it started (TERM, then KILL after the grace).
#[test]
fn a_supervisor_dropped_by_a_panic_kills_its_process_groups() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    let crashed = std::thread::spawn(move || {
        let sup = mur::exec::Supervisor::new();
        let argv: Vec<String> = ["sh", "-c", "trap '' TERM; sleep 300"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let c = sup.spawn(&argv, &logs, &logs).expect("spawn");
        tx.send(c.pgid).unwrap();
        panic!("the owner of the supervisor crashed");
    })
    .join();
    assert!(crashed.is_err());
    let pgid = rx.recv().unwrap();
    assert!(gone(pgid), "the command outlived its supervisor");
}

/// The second SIGINT/SIGTERM while the first one's shutdown is under way (here a
/// command that ignores SIGTERM holds it up) kills every process group at once and
/// ends `mur` with 130, saying so.
#[test]
fn a_second_signal_kills_every_group_at_once_and_exits_130() {
    let script = "- tool_calls:\n    - {name: sh, input: {args: [\"-c\", \"trap 'echo TERM >> got' TERM; echo $$ > leader.pid; while :; do sleep 0.1; done\"]}}\n- text: never\n";
    let c = Capsule::scripted(&["sh"], "lifecycle:\n  shell_grace_secs: 600\n", script);
    let child = c
        .mur()
        .arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .args(["--task", "t"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let leader = pid_in(&c, "leader.pid");
    sigterm(child.id());
    // The first signal's stop reached the command, which ignores it.
    let got = c.dir.join("work").join("got");
    let start = Instant::now();
    while !got.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no TERM reached the command"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("mur: second SIGINT: killed "), "{err}");
    assert!(gone(leader), "the command outlived the second signal");
}

/// A script-driver capsule like [`Capsule::scripted`] whose commands may also read
/// `/proc` (the sandbox leaves it out by default), for commands that look at `mur`.
fn with_proc(shell: &[&str], extra: &str, script: &str) -> Capsule {
    let m = format!(
        "name: test\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {{driver: script, script: replies.yaml}}\ncapabilities:\n  shell:\n    allow: [{}]\n    read: [/proc]\n{extra}",
        shell.join(", ")
    );
    Capsule::new().manifest(&m).file("replies.yaml", script)
}
