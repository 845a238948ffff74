//! Benchmark for `mur trace` over a long trace (prints figures; not a timed test).
//!
//! Writes a trace of 100 000 records (`MUR_BENCH_RECORDS`) shaped like a real session's
//! (a model turn, then a tool call with a result of a few hundred bytes, repeated),
//! then times `mur trace DIR` (the human view), `mur trace DIR --json` and
//! `mur trace DIR --json --type tool_call`, output to /dev/null, and reads each one's
//! peak resident set size from `wait4(2)`. Beside them, `mur --version`'s peak RSS is
//! the baseline: a view that streams stays near it whatever the trace's size.
//!
//! Run: `cargo bench --bench trace` (or scripts/bench.sh).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs `cmd` to its end (reaped by `wait4`, which `Child::wait` cannot give the
/// rusage of) with stdout to /dev/null; returns (seconds, peak RSS in KiB).
#[allow(clippy::zombie_processes)]
fn measure(cmd: &mut Command) -> (f64, i64) {
    let t = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mur");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our child's, not yet waited for; both pointers are valid.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(r, child.id() as i32, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "mur failed: {status}"
    );
    (secs, usage.ru_maxrss)
}

fn main() {
    let n: usize = std::env::var("MUR_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let ses = "ses_01bench0000000000000000000";
    let task = "tsk_01bench0000000000000000000";
    let content: String = (0..12)
        .map(|i| format!("line {i} of the tool's output, as the model saw it\n"))
        .collect();
    let mut ms = 0u64;
    let ts = |ms: &mut u64| {
        *ms += 7;
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_790_000_000_000 + *ms);
        humantime::format_rfc3339_millis(t).to_string()
    };
    let start = serde_json::json!({"ts": ts(&mut ms), "seq": 1, "session": ses, "task": null, "type": "session_start",
        "capsule": "bench", "records_dir": dir.path().display().to_string(), "driver": "script",
        "tools_declared": ["ls"], "mur_version": "0.1.0"});
    writeln!(f, "{start}").unwrap();
    let first = serde_json::json!({"ts": ts(&mut ms), "seq": 2, "session": ses, "task": task, "type": "task_start",
        "text": "Benchmark the trace view.", "origin": "command_line"});
    writeln!(f, "{first}").unwrap();
    for seq in 3..n.saturating_sub(1) as u64 + 1 {
        let turn = seq / 2;
        let rec = if seq % 2 == 1 {
            serde_json::json!({"ts": ts(&mut ms), "seq": seq, "session": ses, "task": task, "type": "inference",
                "turn": turn, "model": "bench", "input_tokens": 1000 + seq, "output_tokens": 40,
                "usage_source": "provider", "duration_ms": 350, "text": "Let me look again.",
                "tool_calls": [{"id": format!("call_{turn}"), "name": "ls", "input": {"args": ["-1"]}}]})
        } else {
            serde_json::json!({"ts": ts(&mut ms), "seq": seq, "session": ses, "task": task, "type": "tool_call",
                "turn": turn, "name": "ls", "call_id": format!("call_{turn}"), "input": {"args": ["-1"]},
                "status": "passed", "summary": "exit 0, 600 bytes of output", "duration_ms": 2,
                "content": content})
        };
        writeln!(f, "{rec}").unwrap();
    }
    let end = serde_json::json!({"ts": ts(&mut ms), "seq": n, "session": ses, "task": null, "type": "session_end",
        "exit_status": "completed", "tasks": 1});
    writeln!(f, "{end}").unwrap();
    f.flush().unwrap();
    drop(f);
    let bytes = std::fs::metadata(&path).unwrap().len();

    let mur = env!("CARGO_BIN_EXE_mur");
    let d = dir.path().to_str().unwrap();
    let (_, base_rss) = measure(Command::new(mur).arg("--version"));
    println!(
        "mur trace over {n} records ({:.1} MiB of trace.jsonl)",
        bytes as f64 / 1048576.0
    );
    println!("  baseline: mur --version                 peak RSS {base_rss:>7} KiB");
    for (label, args) in [
        ("human view", vec!["trace", d]),
        ("--json", vec!["trace", d, "--json"]),
        (
            "--json --type tool_call",
            vec!["trace", d, "--json", "--type", "tool_call"],
        ),
    ] {
        let (secs, rss) = measure(Command::new(mur).args(&args).env("NO_COLOR", "1"));
        println!(
            "  {label:<24} {secs:>7.3} s  {:>9.0} records/s  peak RSS {rss:>7} KiB  ({:.2}x baseline, trace is {:.0}x that)",
            n as f64 / secs,
            rss as f64 / base_rss as f64,
            bytes as f64 / 1024.0 / rss as f64
        );
    }
}
