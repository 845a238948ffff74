//! The operator's tools: `mur trace`, `mur sessions`, `mur gc`, `mur run --json`, the
//! `latest` links and the session line on stderr, runtime-directory housekeeping.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use support::Capsule;

const LS_THEN_ANSWER: &str = "- text: Looking.\n  tool_calls:\n    - {name: ls, input: {args: [\"-1\"]}}\n- text: \"Two files.\"\n";

fn capsule() -> Capsule {
    Capsule::scripted(&["ls", "seq", "sleep"], "", LS_THEN_ANSWER)
        .file("work/a.txt", "a\n")
        .file("work/b.txt", "b\n")
}

/// `mur run CAPSULE --task TASK EXTRA…` with the default records directory.
fn run_default(c: &Capsule, extra: &[&str]) -> Output {
    c.mur()
        .arg("run")
        .arg(&c.dir)
        .args(["--task", "How many files?"])
        .args(extra)
        .output()
        .unwrap()
}

fn mur(c: &Capsule, args: &[&str]) -> Output {
    c.mur().args(args).env_remove("NO_COLOR").output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The session id and records directory `mur run` named on stderr's last line.
fn session_line(out: &Output) -> (String, PathBuf) {
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap_or("").to_string();
    let rest = last
        .strip_prefix("mur: session ")
        .unwrap_or_else(|| panic!("no session line: {err}"));
    let (id, dir) = rest.split_once(": records in ").unwrap();
    (id.to_string(), PathBuf::from(dir))
}

fn records_root(c: &Capsule) -> PathBuf {
    c.home.join("records")
}

#[test]
fn run_names_its_session_on_stderr_and_points_the_latest_links_at_it() {
    let c = capsule();
    let first = run_default(&c, &[]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "Two files.\n");
    let (id, dir) = session_line(&first);
    assert!(id.starts_with("ses_"), "{id}");
    assert!(dir.ends_with(&id), "{}", dir.display());
    assert!(dir.join("trace.jsonl").is_file());
    let overall = records_root(&c).join("latest");
    let capsule_dir = c.dir.canonicalize().unwrap();
    let per_capsule = records_root(&c)
        .join(capsule_dir.strip_prefix("/").unwrap())
        .join("latest");
    assert_eq!(std::fs::read_link(&overall).unwrap(), dir);
    assert_eq!(std::fs::read_link(&per_capsule).unwrap(), dir);

    let second = run_default(&c, &[]);
    let (id2, dir2) = session_line(&second);
    assert_ne!(id, id2);
    assert_eq!(std::fs::read_link(&overall).unwrap(), dir2);
    assert_eq!(std::fs::read_link(&per_capsule).unwrap(), dir2);
    // No temporary link names are left beside them.
    let names: Vec<String> = std::fs::read_dir(records_root(&c))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".latest"))
        .collect();
    assert!(names.is_empty(), "{names:?}");

    // `mur trace latest` reads the newest.
    let t = mur(&c, &["trace", "latest"]);
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    assert!(text(&t.stdout).starts_with(&format!("session {id2} · capsule test")));
}

#[test]
fn the_session_line_comes_after_a_failure_too_and_with_records_dir() {
    let c = Capsule::scripted(&[], "", "- text: \"\"\n");
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 1, "{}", run.dump());
    let (_, dir) = session_line(&run.output);
    assert_eq!(dir, c.records);
}

#[test]
fn trace_shows_the_conversation() {
    let c = capsule();
    let run = c.run("How many files?", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = mur(&c, &["trace", c.records.to_str().unwrap()]);
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    let out = text(&t.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("session ses_"), "{out}");
    for want in [
        "           │ How many files?",
        "           │ Looking.",
        "           → ls {\"args\":[\"-1\"]} [call_1_1]",
        "           │ a.txt",
        "           │ b.txt",
        "           │ Two files.",
    ] {
        assert!(lines.contains(&want), "no line {want:?} in:\n{out}");
    }
    let order = [
        " task tsk_",
        " model turn 1 · script",
        " tool ls [call_1_1] passed · ",
        " model turn 2 · script",
        " task end completed · 2 turn(s) · ",
        " session end completed · 1 task(s) · ",
    ];
    let mut at = 0;
    for o in order {
        let i = lines[at..]
            .iter()
            .position(|l| l.starts_with("+00:") && l.contains(o))
            .unwrap_or_else(|| panic!("no {o:?} after line {at}:\n{out}"));
        at += i + 1;
    }
    // Not a terminal: no colour codes.
    assert!(!out.contains('\x1b'), "{out}");
}

#[test]
fn long_tool_results_are_cut_unless_full() {
    let script =
        "- tool_calls:\n    - {name: seq, input: {args: [\"1\", \"100\"]}}\n- text: done\n";
    let c = Capsule::scripted(&["seq"], "", script);
    let run = c.run("count", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let dir = c.records.to_str().unwrap();
    let cut = text(&mur(&c, &["trace", dir]).stdout);
    assert!(cut.contains("(--full shows all)"), "{cut}");
    assert!(!cut.contains("│ 100\n"), "{cut}");
    let full = text(&mur(&c, &["trace", dir, "--full"]).stdout);
    assert!(full.contains("           │ 100\n"), "{full}");
    assert!(!full.contains("(--full shows all)"), "{full}");
}

#[test]
fn json_prints_the_records_unchanged_and_type_filters() {
    let c = capsule();
    let run = c.run("How many files?", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let dir = c.records.to_str().unwrap();
    let raw = std::fs::read_to_string(c.records.join("trace.jsonl")).unwrap();
    let all = mur(&c, &["trace", dir, "--json"]);
    assert_eq!(text(&all.stdout), raw);
    let some = text(
        &mur(
            &c,
            &["trace", dir, "--json", "--type", "tool_call,task_end"],
        )
        .stdout,
    );
    let want: String = raw
        .lines()
        .filter(|l| l.contains("\"type\":\"tool_call\"") || l.contains("\"type\":\"task_end\""))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(some, want);
    assert_eq!(some.lines().count(), 2);
    // --type filters the human view too; times still count from the session's start.
    let human = text(&mur(&c, &["trace", dir, "--type", "task_end"]).stdout);
    assert_eq!(human.lines().count(), 1, "{human}");
    assert!(human.contains("task end completed"), "{human}");
    let ts = |kind: &str| {
        let r = run.one(kind);
        humantime::parse_rfc3339(r["ts"].as_str().unwrap()).unwrap()
    };
    let since = ts("task_end").duration_since(ts("session_start")).unwrap();
    let want = format!("+00:{:02}.{:03} ", since.as_secs(), since.subsec_millis());
    assert!(human.starts_with(&want), "{want:?} in {human}");
    let took = ts("task_end").duration_since(ts("task_start")).unwrap();
    assert!(
        human.contains(&format!(" · {} ms", took.as_millis())) || took.as_millis() >= 1000,
        "{human}"
    );
}

#[test]
fn a_session_id_prefix_is_enough_when_unambiguous() {
    let c = capsule();
    let (id1, _) = session_line(&run_default(&c, &[]));
    let (id2, _) = session_line(&run_default(&c, &[]));
    // The shortest prefix that tells them apart, and one that does not.
    let common = id1
        .chars()
        .zip(id2.chars())
        .take_while(|(a, b)| a == b)
        .count();
    let unique = &id2[..common + 1];
    let t = mur(&c, &["trace", unique]);
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    assert!(text(&t.stdout).starts_with(&format!("session {id2} ")));
    // Without the ses_ prefix too.
    let t = mur(&c, &["trace", &id2[4..]]);
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));

    let shared = &id1[..common];
    let t = mur(&c, &["trace", shared]);
    assert_eq!(t.status.code(), Some(2));
    assert_eq!(
        text(&t.stderr),
        format!("mur: session id prefix {shared} is ambiguous: it matches 2 sessions ({id2}, {id1}); give more characters\n")
    );
}

#[test]
fn bad_session_arguments_get_one_clear_error() {
    let c = capsule();
    let root = records_root(&c);
    let t = mur(&c, &["trace", "latest"]);
    assert_eq!(t.status.code(), Some(2));
    assert_eq!(
        text(&t.stderr),
        format!("mur: no latest session: {}/latest does not exist yet (mur run and mur door point it at the newest session's records)\n", root.display())
    );
    let t = mur(&c, &["trace", "ses_0123456789"]);
    assert_eq!(t.status.code(), Some(2));
    assert_eq!(
        text(&t.stderr),
        format!("mur: no session ses_0123456789 under {} (mur sessions lists them; a session run with --records-dir is read by its directory)\n", root.display())
    );
    let empty = c.root.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let t = mur(&c, &["trace", empty.to_str().unwrap()]);
    assert_eq!(t.status.code(), Some(2));
    assert_eq!(
        text(&t.stderr),
        format!("mur: {} is not a records directory: it has no trace.jsonl (a session's records directory holds trace.jsonl, logs/ and out/)\n", empty.display())
    );
    let t = mur(&c, &["trace", "./no/such/dir"]);
    assert_eq!(t.status.code(), Some(2));
    assert_eq!(
        text(&t.stderr),
        "mur: ./no/such/dir: no such records directory (give a records directory, a session id or latest)\n"
    );
}

fn write_trace(dir: &Path, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("trace.jsonl"), body).unwrap();
}

const START: &str = r#"{"ts":"2026-10-20T14:00:00.000Z","seq":1,"session":"ses_x","task":null,"type":"session_start","capsule":"c","records_dir":"r","driver":"s","tools_declared":[],"mur_version":"9.9.9"}"#;

#[test]
fn a_half_written_last_line_is_shown_as_cut_never_a_crash() {
    let c = capsule();
    let d = c.root.path().join("cut");
    let task = r#"{"ts":"2026-10-20T14:00:01.500Z","seq":2,"session":"ses_x","task":"tsk_1","type":"task_start","text":"hello","origin":"command_line"}"#;
    write_trace(
        &d,
        &format!("{START}\n{task}\n{{\"ts\":\"2026-10-20T14:00:02"),
    );
    let t = mur(&c, &["trace", d.to_str().unwrap()]);
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    let out = text(&t.stdout);
    assert!(
        out.contains("+00:01.500 task tsk_1 from command_line\n"),
        "{out}"
    );
    assert!(
        out.ends_with("line 3 is cut short (26 bytes, no newline: the writing mur was killed or the disk filled): {\"ts\":\"2026-10-20T14:00:02\n"),
        "{out}"
    );
    let j = mur(&c, &["trace", d.to_str().unwrap(), "--json"]);
    assert_eq!(j.status.code(), Some(0));
    assert_eq!(text(&j.stdout), format!("{START}\n{task}\n"));
    assert_eq!(
        text(&j.stderr),
        "mur: trace: line 3 is cut short (26 bytes, no newline: the writing mur was killed or the disk filled); not printed\n"
    );
}

#[test]
fn unknown_record_types_and_lines_that_are_not_json_are_shown_raw() {
    let c = capsule();
    let d = c.root.path().join("future");
    let future = r#"{"ts":"2026-10-20T14:00:03.000Z","seq":2,"session":"ses_x","task":null,"type":"hologram_projected","depth":3}"#;
    write_trace(&d, &format!("{START}\n{future}\nnot json at all\n"));
    let t = mur(&c, &["trace", d.to_str().unwrap()]);
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    let out = text(&t.stdout);
    assert!(
        out.contains(&format!(
            "+00:03.000 hologram_projected (unknown record type, shown raw)\n           {future}\n"
        )),
        "{out}"
    );
    assert!(
        out.contains("line 3 is not a record: not json at all\n"),
        "{out}"
    );
}

#[test]
fn follow_on_an_ended_session_prints_it_and_ends() {
    let c = capsule();
    let run = c.run("How many files?", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let t = mur(&c, &["trace", c.records.to_str().unwrap(), "--follow"]);
    assert_eq!(t.status.code(), Some(0));
    assert!(text(&t.stdout).contains(" session end completed"));
    assert_eq!(
        text(&t.stderr),
        "mur: trace: the session has ended (its trace ends with session_end); nothing more to follow\n"
    );
}

#[test]
fn follow_on_a_session_whose_mur_died_stops_instead_of_waiting_forever() {
    let c = capsule();
    let d = c.root.path().join("dead");
    write_trace(&d, &format!("{START}\n"));
    let t = mur(&c, &["trace", d.to_str().unwrap(), "-f"]);
    assert_eq!(t.status.code(), Some(0));
    assert_eq!(
        text(&t.stderr),
        "mur: trace: the session is not running and its trace has no session_end (its mur was killed?); stopped following\n"
    );
}

#[test]
fn follow_tails_a_running_session_until_its_end() {
    let script = "- tool_calls:\n    - {name: sleep, input: {args: [\"2\"]}}\n- text: rested\n";
    let c = Capsule::scripted(&["sleep"], "", script);
    let mut child = c
        .mur()
        .arg("run")
        .arg(&c.dir)
        .args(["--task", "rest"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let latest = records_root(&c).join("latest");
    let t0 = std::time::Instant::now();
    while !latest.exists() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = mur(&c, &["trace", "latest", "--follow"]);
    let status = child.wait().unwrap();
    assert!(status.success());
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    let out = text(&t.stdout);
    assert!(out.contains(" tool sleep [call_1_1] passed"), "{out}");
    assert!(out.contains("│ rested"), "{out}");
    assert!(
        out.lines()
            .last()
            .unwrap()
            .contains(" session end completed"),
        "{out}"
    );
}

#[test]
fn sessions_lists_the_newest_first_with_their_figures() {
    let c = capsule();
    let (id1, d1) = session_line(&run_default(&c, &[]));
    let other = Capsule::scripted(&[], "", "- text: no\n");
    // The other capsule's session, in the same home.
    let out = other
        .mur()
        .env("MURMUR_HOME", &c.home)
        .arg("run")
        .arg(&other.dir)
        .args(["--task", "x"])
        .output()
        .unwrap();
    let (id2, _) = session_line(&out);
    let t = mur(&c, &["sessions"]);
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    let table = text(&t.stdout);
    let rows: Vec<&str> = table.lines().collect();
    assert!(
        rows[0].starts_with("SESSION ") && rows[0].ends_with("TURNS  TOKENS  RECORDS"),
        "{table}"
    );
    assert_eq!(rows.len(), 3, "{table}");
    assert!(rows[1].starts_with(&id2), "{table}");
    assert!(rows[2].starts_with(&id1), "{table}");
    assert!(rows[2].contains(" completed "), "{table}");
    assert!(rows[2].ends_with(&d1.display().to_string()), "{table}");

    let j = mur(&c, &["sessions", "--json"]);
    let v: Vec<Value> = text(&j.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v.len(), 2);
    assert_eq!(v[1]["session"], id1.as_str());
    assert_eq!(v[1]["capsule"], "test");
    assert_eq!(v[1]["status"], "completed");
    assert_eq!(v[1]["turns"], 2);
    assert_eq!(v[1]["tasks"], 1);
    let trace = support::read_trace(&d1);
    let tokens: u64 = trace
        .iter()
        .filter(|r| r["type"] == "inference")
        .map(|r| r["input_tokens"].as_u64().unwrap() + r["output_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(v[1]["tokens"], tokens);
    assert_eq!(v[1]["records_dir"], d1.display().to_string());
    assert!(v[1]["duration_secs"].as_f64().unwrap() >= 0.0);

    // One capsule only, by its directory.
    let only = text(&mur(&c, &["sessions", c.dir.to_str().unwrap(), "--json"]).stdout);
    assert_eq!(only.lines().count(), 1, "{only}");
    assert!(only.contains(&id1));
    let limited = text(&mur(&c, &["sessions", "-n", "1"]).stdout);
    assert_eq!(limited.lines().count(), 2, "{limited}");
}

fn age_by(path: &Path, by: Duration) {
    let f = std::fs::File::options()
        .write(true)
        .open(path)
        .or_else(|_| std::fs::File::open(path))
        .unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

#[test]
fn gc_removes_old_records_but_never_a_running_sessions() {
    let c = capsule();
    let (_, old) = session_line(&run_default(&c, &[]));
    let (_, recent) = session_line(&run_default(&c, &[]));
    age_by(&old.join("trace.jsonl"), Duration::from_secs(3 * 86_400));
    // A "running" session: a trace whose writer holds its lock, also old.
    let running = old.parent().unwrap().join("ses_01zzzzzzzzzzzzzzzzzzzzzzzz");
    std::fs::create_dir_all(&running).unwrap();
    let trace = mur::records::Trace::open(
        &running.join("trace.jsonl"),
        "ses_01zzzzzzzzzzzzzzzzzzzzzzzz",
    )
    .unwrap();
    age_by(
        &running.join("trace.jsonl"),
        Duration::from_secs(3 * 86_400),
    );

    let dry = mur(&c, &["gc", "--older-than", "1d", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry.stderr));
    assert!(text(&dry.stdout).starts_with(&format!("would remove {} (", old.display())));
    assert!(old.exists());

    let g = mur(&c, &["gc", "--older-than", "1d"]);
    assert_eq!(g.status.code(), Some(0), "{}", text(&g.stderr));
    let out = text(&g.stdout);
    assert!(
        out.starts_with(&format!("removed {} (", old.display())),
        "{out}"
    );
    assert!(
        out.lines()
            .last()
            .unwrap()
            .starts_with("freed 1 session record(s) and 0 runtime director(ies), ")
            && out.ends_with("; 1 running session(s) left alone\n"),
        "{out}"
    );
    assert!(!old.exists());
    assert!(recent.exists());
    assert!(running.exists());
    trace.close();
    drop(trace);

    let bad = mur(&c, &["gc", "--older-than", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).starts_with("mur: --older-than `soon`: "),
        "{}",
        text(&bad.stderr)
    );
}

fn runtime_dirs(c: &Capsule) -> Vec<PathBuf> {
    std::fs::read_dir(c.home.join("run"))
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
fn runtime_directories_go_at_the_end_unless_kept_and_leftovers_at_the_next_start() {
    let c = capsule();
    assert_eq!(run_default(&c, &[]).status.code(), Some(0));
    assert_eq!(runtime_dirs(&c), Vec::<PathBuf>::new());

    let kept = run_default(&c, &["--keep-runtime"]);
    let (id, _) = session_line(&kept);
    let k = c.home.join("run").join(&id);
    assert!(k.join("murmur.yaml").is_file());
    assert!(k.join(".keep").is_file());

    // A leftover of a mur that was killed: its lock file, nobody holding it.
    let dead = c.home.join("run").join("ses_01deaddeaddeaddeaddeaddead");
    std::fs::create_dir_all(&dead).unwrap();
    std::fs::write(dead.join(".lock"), "").unwrap();
    age_by(&dead.join(".lock"), Duration::from_secs(600));
    assert_eq!(run_default(&c, &[]).status.code(), Some(0));
    assert!(
        !dead.exists(),
        "the next start removes a killed session's runtime directory"
    );
    assert!(k.exists(), "a kept one stays");

    age_by(&k, Duration::from_secs(3 * 86_400));
    let g = mur(&c, &["gc", "--older-than", "2d"]);
    assert!(
        text(&g.stdout).contains(&format!("removed {} (", k.display())),
        "{}",
        text(&g.stdout)
    );
    assert!(!k.exists());
}

#[test]
fn run_json_prints_the_records_then_the_result() {
    let c = capsule();
    let run = c.run("How many files?", &["--json"]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let out = run.stdout();
    let raw = std::fs::read_to_string(c.records.join("trace.jsonl")).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let n = raw.lines().count();
    assert_eq!(lines.len(), n + 1, "{out}");
    assert_eq!(lines[..n].join("\n") + "\n", raw);
    let last: Value = serde_json::from_str(lines[n]).unwrap();
    assert_eq!(last["type"], "result");
    assert_eq!(last["answer"], "Two files.");
    assert_eq!(last["exit_status"], "completed");
    assert_eq!(last["exit_code"], 0);
    assert_eq!(last["error"], Value::Null);
    assert_eq!(last["session"], run.one("session_start")["session"]);
    assert_eq!(last["task"], run.one("task_start")["task"]);
    assert_eq!(last["records_dir"], c.records.display().to_string());

    let failed = Capsule::scripted(&[], "", "- text: \"\"\n");
    let run = failed.run("t", &["--json"]);
    assert_eq!(run.code(), 1);
    let last: Value = serde_json::from_str(run.stdout().lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "result");
    assert_eq!(last["answer"], Value::Null);
    assert_eq!(last["exit_code"], 1);
    assert!(
        last["error"].as_str().unwrap().contains("no answer"),
        "{last}"
    );
    // Why, on stderr as without --json, before the session line.
    let err = run.stderr();
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines[lines.len() - 2].starts_with("mur: task failed: "),
        "{err}"
    );
}

#[test]
fn trace_shows_member_calls_and_their_answers_and_a_formation_directory_names_its_members() {
    let f = support::Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member(
            "lead",
            "capabilities:\n  network:\n    allow: [localhost]\n",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: count}}\n- text: waiting\n- text: \"worker says 3\"\n",
        )
        .member("worker", "", "- text: \"3 lines\"\n");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = f.records.join("lead");
    // The session line names the entry member's session.
    let (id, dir) = session_line(&run.output);
    assert_eq!(dir, lead);
    assert_eq!(
        std::fs::read_link(f.home.join("records").join("latest")).unwrap(),
        lead,
        "after a formation, latest is the entry member's session"
    );
    assert_eq!(
        run.member("lead").one("session_start")["session"],
        id.as_str()
    );
    let t = f.mur().args(["trace"]).arg(&lead).output().unwrap();
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    let out = text(&t.stdout);
    let has = |pat: &str| out.lines().any(|l| l.contains(pat));
    assert!(has(" call worker [mcl_"), "{out}");
    assert!(has(" answer from worker [mcl_"), "{out}");
    assert!(out.contains("           │ 3 lines\n"), "{out}");
    assert!(has(" continued with 1 answer(s)"), "{out}");
    let t = f.mur().args(["trace"]).arg(&f.records).output().unwrap();
    assert_eq!(t.status.code(), Some(2));
    assert!(
        text(&t.stderr).ends_with(&format!(
            "; it holds the records of lead, worker: give one of them, e.g. {}\n",
            lead.display()
        )),
        "{}",
        text(&t.stderr)
    );
}

#[test]
fn run_json_with_a_roster_prints_the_entry_members_records_then_the_result() {
    let f = support::Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead}\n")
        .member("lead", "", "- text: \"done\"\n");
    let out = f
        .mur()
        .arg("run")
        .arg("--roster")
        .arg(f.dir.join("roster.yaml"))
        .arg("--records-dir")
        .arg(&f.records)
        .args(["--task", "go", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let raw = std::fs::read_to_string(f.records.join("lead/trace.jsonl")).unwrap();
    let stdout = text(&out.stdout);
    let (records, last) = stdout.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(format!("{records}\n"), raw);
    let last: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last["type"], "result");
    assert_eq!(last["answer"], "done");
}

#[test]
fn sessions_counts_as_turns_only_the_model_calls_that_answered() {
    // Turn 1 answers with a tool call; turn 2 is not in the script, so the second
    // model call fails: one turn, not two.
    let c = Capsule::scripted(
        &["ls"],
        "",
        "- text: Looking.\n  tool_calls:\n    - {name: ls, input: {args: [\"-1\"]}}\n",
    );
    let run = run_default(&c, &[]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run.stderr));
    let (id, dir) = session_line(&run);
    let inference = support::read_trace(&dir)
        .into_iter()
        .filter(|r| r["type"] == "inference")
        .collect::<Vec<_>>();
    assert_eq!(inference.len(), 2);
    assert!(inference[1]["error"].is_string(), "{:?}", inference[1]);
    let j = mur(&c, &["sessions", "--json"]);
    let v: Value = serde_json::from_str(text(&j.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(v["session"], id.as_str());
    assert_eq!(v["status"], "failed");
    assert_eq!(v["turns"], 1);
    let table = text(&mur(&c, &["sessions"]).stdout);
    let row = table.lines().nth(1).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    // …  STATUS  TURNS  TOKENS  RECORDS
    let n = cols.len();
    assert_eq!(cols[n - 3], "1", "{table}");
    assert_eq!(cols[n - 4], "failed", "{table}");
}

#[test]
fn trace_shows_background_command_and_other_session_records_readably() {
    let c = capsule();
    let d = c.root.path().join("bg");
    let recs = [
        r#"{"ts":"2026-10-20T14:00:05.000Z","seq":2,"session":"ses_x","task":"tsk_1","type":"background_command","operation":"wait","work_id":"wrk_01","argv":["sh","-c","sleep 9; make"],"state":"running","elapsed_secs":12,"wait_secs":5,"waited_secs":5,"exit_code":null,"status":null,"output_bytes":0}"#,
        r#"{"ts":"2026-10-20T14:00:06.000Z","seq":3,"session":"ses_x","task":"tsk_1","type":"background_command","operation":"status","work_id":"wrk_01","argv":["make"],"state":"exited","elapsed_secs":13,"exit_code":2,"status":"error","output_bytes":40}"#,
        r#"{"ts":"2026-10-20T14:00:07.000Z","seq":4,"session":"ses_x","task":"tsk_1","type":"deadline_notice","at":"2026-10-20T14:05:00Z","left_secs":293,"call_id":"call_9"}"#,
        r#"{"ts":"2026-10-20T14:00:08.000Z","seq":5,"session":"ses_x","task":null,"type":"survivor_killed","pid":4242,"argv":["sleep","100"],"comm":"sleep","work_id":"wrk_01","signal":"SIGKILL"}"#,
        r#"{"ts":"2026-10-20T14:00:09.000Z","seq":6,"session":"ses_x","task":"tsk_2","type":"completion_dropped","work_id":"wrk_01","reason":"background-command returned the exit of wrk_01 before this completion task started"}"#,
    ];
    write_trace(&d, &format!("{START}\n{}\n", recs.join("\n")));
    let t = mur(&c, &["trace", d.to_str().unwrap()]);
    assert_eq!(t.status.code(), Some(0), "{}", text(&t.stderr));
    let out = text(&t.stdout);
    for want in [
        "+00:05.000 work wait wrk_01 running · 12 s elapsed · waited 5 of 5 s · sh -c \"sleep 9; make\"\n",
        "+00:06.000 work status wrk_01 exited · exit code 2 (error) · 13 s elapsed · make\n",
        "+00:07.000 deadline notice with tool call [call_9]: 293 s left, deadline 2026-10-20T14:05:00Z\n",
        "+00:08.000 killed survivor pid 4242 (sleep) of wrk_01 with SIGKILL · sleep 100\n",
        "+00:09.000 dropped completion task for wrk_01: background-command returned the exit of wrk_01 before this completion task started\n",
    ] {
        assert!(out.contains(want), "want {want:?} in:\n{out}");
    }
    assert!(!out.contains('{'), "a record shown raw:\n{out}");
}
