//! Benchmark of one call-member round trip (prints figures; not a timed test).
//!
//! A two-member formation on the script driver: `lead` calls `worker`, whose own work
//! is one shell command (`sleep 0.3`). From the records:
//!
//! - round trip: from the start of lead's call-member tool call to its
//!   `task_continued` (the answer is in lead's conversation);
//! - the member's own work: worker's `task_start` to its `task_end`;
//! - overhead = round trip - own work (doors, HTTP, the 500 ms `GetTask` poll,
//!   ending lead's turn), median of runs.
//!
//! Run: `cargo bench --bench formation` (or scripts/bench.sh).

use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::Value;

fn ts(r: &Value) -> SystemTime {
    humantime::parse_rfc3339(r["ts"].as_str().unwrap_or_default()).unwrap_or(SystemTime::UNIX_EPOCH)
}

fn trace(dir: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("trace.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn one<'a>(t: &'a [Value], kind: &str) -> &'a Value {
    t.iter()
        .find(|r| r["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} record"))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::var("MUR_BENCH_FORMATION_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let root = tempfile::tempdir().unwrap();
    let d = root.path();
    std::fs::write(
        d.join("roster.yaml"),
        "formation: bench\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n",
    )
    .unwrap();
    let capsule = |name: &str, extra: &str, script: &str| {
        let c = d.join(name);
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(c.join("murmur.yaml"), format!("name: {name}\ninference:\n  driver: s\n  choices:\n    s: {{driver: script, script: replies.yaml}}\n{extra}")).unwrap();
        std::fs::write(c.join("replies.yaml"), script).unwrap();
    };
    capsule(
        "lead",
        "capabilities:\n  network: {allow: [localhost]}\n",
        "- tool_calls:\n    - {name: call-member, input: {member: worker, task: work}}\n- text: waiting\n- text: done\n",
    );
    capsule(
        "worker",
        "capabilities:\n  shell: {allow: [sleep]}\n",
        "- tool_calls:\n    - {name: sleep, input: {args: [\"0.3\"]}}\n- text: worked\n",
    );
    let (mut trips, mut works, mut overheads) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let rec = d.join(format!("records-{i}"));
        let st = Command::new(env!("CARGO_BIN_EXE_mur"))
            .env("MURMUR_HOME", d.join("home"))
            .arg("run")
            .arg("--roster")
            .arg(d.join("roster.yaml"))
            .arg("--records-dir")
            .arg(&rec)
            .args(["--task", "go"])
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        let lead = trace(&rec.join("lead"));
        let worker = trace(&rec.join("worker"));
        let call = lead
            .iter()
            .find(|r| r["type"] == "tool_call" && r["name"] == "call-member")
            .unwrap();
        let call_start =
            ts(call) - Duration::from_millis(call["duration_ms"].as_u64().unwrap_or(0));
        let trip = ts(one(&lead, "task_continued"))
            .duration_since(call_start)
            .unwrap_or_default();
        let work = ts(one(&worker, "task_end"))
            .duration_since(ts(one(&worker, "task_start")))
            .unwrap_or_default();
        trips.push(trip);
        works.push(work);
        overheads.push(trip.saturating_sub(work));
    }
    let (trip, work, over) = (median(trips), median(works), median(overheads));
    println!("call-member round trip, median of {n} runs (worker's own work: sleep 0.3 s)");
    println!(
        "  round trip (call to continuation): {:>6.1} ms",
        trip.as_secs_f64() * 1e3
    );
    println!(
        "  member's own work (task_start..task_end): {:>6.1} ms",
        work.as_secs_f64() * 1e3
    );
    println!(
        "  overhead: {:>6.1} ms ({:.2}x the member's work time)",
        over.as_secs_f64() * 1e3,
        over.as_secs_f64() / work.as_secs_f64().max(1e-9)
    );
}
