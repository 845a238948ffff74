//! Benchmark for `mur run` (prints figures; not a timed test).
//!
//! 1. The median wall time of a raw spawn+wait of a binary, against the same binary
//!    called as a `mur` shell tool (`mur::tools::shell::call`: process group, log
//!    file, reaper thread, tail), and their ratio (goal <= 1.3).
//! 2. `mur run`'s cold start to its first model request on the script driver: from
//!    the process spawn to the `ts` of the first `inference` record, median of runs.
//!
//! Run: `cargo bench --bench run` (or scripts/bench.sh).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use mur::exec::Supervisor;
use mur::tools::shell::{call, ShellContext};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::var("MUR_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let binary = "true";

    // Interleave the two so machine noise hits both alike.
    let sup = Supervisor::new();
    let (_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let ctx = ShellContext {
        workdir: dir.path(),
        logs_dir: &logs,
        supervisor: &sup,
        deadline: None,
        shutdown: &shutdown,
        grace: None,
    };
    let mut raw = Vec::with_capacity(n);
    let mut tool = Vec::with_capacity(n);
    let mut floor = Vec::with_capacity(n);
    for i in 0..n {
        // The floor: what a call must do without mur's bookkeeping: its own process
        // group, a fresh log file for stdout and stderr, a wait.
        let t = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(format!("floor-{i}.log")))
            .unwrap();
        let log2 = log.try_clone().unwrap();
        let st = Command::new(binary)
            .current_dir(dir.path())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .status()
            .unwrap();
        floor.push(t.elapsed());
        assert!(st.success());
        let t = Instant::now();
        let st = Command::new(binary)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        raw.push(t.elapsed());
        assert!(st.success());
        let t = Instant::now();
        let (r, _) = call(&ctx, binary, Vec::new());
        tool.push(t.elapsed());
        assert!(r.data.contains("exit_code: 0"));
    }
    let (raw_m, tool_m, floor_m) = (median(raw), median(tool), median(floor));
    println!("spawn+wait of `{binary}` ({n} runs each, interleaved)");
    println!(
        "  raw std::process     median {:>9.3} ms",
        raw_m.as_secs_f64() * 1e3
    );
    println!(
        "  as a mur shell tool  median {:>9.3} ms",
        tool_m.as_secs_f64() * 1e3
    );
    println!(
        "  own group + new log  median {:>9.3} ms   (the floor: no mur bookkeeping)",
        floor_m.as_secs_f64() * 1e3
    );
    println!(
        "  ratio tool/raw       {:>9.2}   (goal <= 1.20); floor/raw {:.2}, tool/floor {:.2}",
        tool_m.as_secs_f64() / raw_m.as_secs_f64(),
        floor_m.as_secs_f64() / raw_m.as_secs_f64(),
        tool_m.as_secs_f64() / floor_m.as_secs_f64()
    );

    // Cold start.
    let mur = env!("CARGO_BIN_EXE_mur");
    let capsule = dir.path().join("capsule");
    std::fs::create_dir_all(&capsule).unwrap();
    std::fs::write(
        capsule.join("murmur.yaml"),
        "name: bench\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: replies.yaml}\ncapabilities:\n  shell: {allow: [ls]}\n",
    )
    .unwrap();
    std::fs::write(capsule.join("replies.yaml"), "- text: done\n").unwrap();
    let runs = 30;
    let mut cold = Vec::new();
    let mut whole = Vec::new();
    for i in 0..runs {
        let rec = dir.path().join(format!("rec{i}"));
        let wall = SystemTime::now();
        let t = Instant::now();
        let st = Command::new(mur)
            .args(["run"])
            .arg(&capsule)
            .arg("--records-dir")
            .arg(&rec)
            .args(["--task", "t"])
            .env("MURMUR_HOME", dir.path().join("home"))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        whole.push(t.elapsed());
        assert!(st.success());
        cold.push(
            first_inference(&rec)
                .duration_since(wall)
                .unwrap_or_default(),
        );
    }
    println!("mur run on the script driver ({runs} runs)");
    println!(
        "  cold start to first model request  median {:>7.1} ms (record ts, ms resolution)",
        median(cold).as_secs_f64() * 1e3
    );
    println!(
        "  whole run (one turn, exit 0)       median {:>7.1} ms",
        median(whole).as_secs_f64() * 1e3
    );
}

fn first_inference(rec: &Path) -> SystemTime {
    let text = std::fs::read_to_string(rec.join("trace.jsonl")).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["type"] == "inference" {
            // the record is written when the answer came: the request went out
            // duration_ms before it.
            let ts = humantime::parse_rfc3339(v["ts"].as_str().unwrap()).unwrap();
            return ts - Duration::from_millis(v["duration_ms"].as_u64().unwrap());
        }
    }
    panic!("no inference record");
}
