//! Benchmark of the decision point (prints figures; not a timed test): a session of
//! 50 shell calls (`true`, in one turn) run by the real `mur` binary, without hooks
//! and with one allow-all `hooks.on_tool_call` hook (a `/bin/sh` script), sessions
//! interleaved so machine noise hits both alike.
//!
//! Per-call time is the interval between consecutive `tool_call` records of a session
//! (record `ts`, millisecond resolution; 49 intervals per session), and, as a check,
//! the session's wall time less that of a session with no call, over 50. Prints the
//! medians of each and their ratio.
//!
//! Run: `cargo bench --bench hooks` (or scripts/bench.sh). `MUR_BENCH_SESSIONS` sets
//! the sessions per variant (default 8).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CALLS: usize = 50;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn capsule(dir: &Path, name: &str, hooks: bool, calls: usize) -> std::path::PathBuf {
    let c = dir.join(name);
    std::fs::create_dir_all(c.join("hooks")).unwrap();
    let hook = c.join("hooks/allow");
    std::fs::write(
        &hook,
        "#!/bin/sh\ncat >/dev/null\necho '{\"decision\": \"allow\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let h = if hooks {
        "hooks:\n  on_tool_call:\n    - {command: [hooks/allow]}\n"
    } else {
        ""
    };
    std::fs::write(
        c.join("murmur.yaml"),
        format!("name: bench\ninference:\n  driver: s\n  choices:\n    s: {{driver: script, script: replies.yaml}}\ncapabilities:\n  shell: {{allow: [\"true\"]}}\n{h}"),
    )
    .unwrap();
    let mut script = String::new();
    if calls > 0 {
        script.push_str("- tool_calls:\n");
        for _ in 0..calls {
            script.push_str("    - {name: \"true\", input: {args: []}}\n");
        }
    }
    script.push_str("- text: done\n");
    std::fs::write(c.join("replies.yaml"), script).unwrap();
    c
}

/// Runs one session; returns its wall time and the intervals between its tool calls.
fn session(dir: &Path, capsule: &Path, i: usize) -> (Duration, Vec<f64>) {
    let rec = dir.join(format!(
        "rec-{}-{i}",
        capsule.file_name().unwrap().to_string_lossy()
    ));
    let t = Instant::now();
    let st = Command::new(env!("CARGO_BIN_EXE_mur"))
        .arg("run")
        .arg(capsule)
        .arg("--records-dir")
        .arg(&rec)
        .args(["--task", "t"])
        .env("MURMUR_HOME", dir.join("home"))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let wall = t.elapsed();
    assert!(st.success(), "the bench session failed");
    let text = std::fs::read_to_string(rec.join("trace.jsonl")).unwrap();
    let ts: Vec<f64> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "tool_call")
        .map(|v| {
            let at = humantime::parse_rfc3339(v["ts"].as_str().unwrap()).unwrap();
            at.duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                * 1e3
        })
        .collect();
    (wall, ts.windows(2).map(|w| w[1] - w[0]).collect())
}

fn main() {
    let sessions: usize = std::env::var("MUR_BENCH_SESSIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let dir = tempfile::tempdir().unwrap();
    let plain = capsule(dir.path(), "plain", false, CALLS);
    let hooked = capsule(dir.path(), "hooked", true, CALLS);
    let empty = capsule(dir.path(), "empty", false, 0);
    let (mut p_iv, mut h_iv) = (Vec::new(), Vec::new());
    let (mut p_wall, mut h_wall, mut e_wall) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..sessions {
        let (w, iv) = session(dir.path(), &plain, i);
        p_wall.push(w.as_secs_f64() * 1e3);
        p_iv.extend(iv);
        let (w, iv) = session(dir.path(), &hooked, i);
        h_wall.push(w.as_secs_f64() * 1e3);
        h_iv.extend(iv);
        let (w, _) = session(dir.path(), &empty, i);
        e_wall.push(w.as_secs_f64() * 1e3);
    }
    let (p, h) = (median(p_iv), median(h_iv));
    let base = median(e_wall);
    let (pw, hw) = (
        (median(p_wall) - base) / CALLS as f64,
        (median(h_wall) - base) / CALLS as f64,
    );
    println!("{CALLS} shell calls per session, {sessions} sessions per variant (interleaved)");
    println!(
        "  per-call median, no hook            {p:>7.2} ms (tool_call ts intervals, ms resolution)"
    );
    println!("  per-call median, allow-all hook     {h:>7.2} ms");
    println!("  ratio hook/no hook                  {:>7.2}", h / p);
    println!("  per call from wall time, no hook    {pw:>7.2} ms (session wall less an empty session's, / {CALLS})");
    println!("  per call from wall time, with hook  {hw:>7.2} ms");
    println!("  ratio hook/no hook                  {:>7.2}", hw / pw);
}
