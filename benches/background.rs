//! Benchmark for background commands (prints figures; not a timed test).
//!
//! 1. Memory (RSS) of a process holding 1 000 concurrent background commands through
//!    `mur::exec::Supervisor` (one reaper thread each; goal < 100 MB).
//! 2. The time to stop all of them with `Supervisor::stop_all` (goal < 5 s).
//! 3. The latency from a command's exit to background-command `wait` returning,
//!    against the same exit observed by a plain `waitpid` loop, and their ratio. The
//!    command prints `date +%s%N` as its last act; the latency is the wall clock when
//!    the wait returns minus that stamp.
//!
//! Run: `cargo bench --bench background` (or scripts/bench.sh).
//! `MUR_BENCH_COMMANDS` (default 1000) and `MUR_BENCH_N` (default 30) scale it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mur::exec::Supervisor;
use mur::tools::background;

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let n_cmds = env("MUR_BENCH_COMMANDS", 1000);
    let n = env("MUR_BENCH_N", 30);
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();

    // 1 and 2.
    let sup = Supervisor::new();
    let before = rss_kb();
    let argv: Vec<String> = vec!["sleep".into(), "300".into()];
    let t = Instant::now();
    for _ in 0..n_cmds {
        sup.spawn(&argv, dir.path(), &logs).expect("spawn");
    }
    let spawn_time = t.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let holding = rss_kb();
    let t = Instant::now();
    let stopped = sup.stop_all();
    let stop_time = t.elapsed();
    assert_eq!(stopped.len(), n_cmds);
    println!("{n_cmds} concurrent background commands (`sleep 300`)");
    println!(
        "  started in            {:>9.3} s",
        spawn_time.as_secs_f64()
    );
    println!(
        "  RSS holding them      {:>9.1} MB   (process before: {:.1} MB; goal < 100 MB)",
        holding as f64 / 1024.0,
        before as f64 / 1024.0
    );
    println!(
        "  stop_all              {:>9.3} s    (goal < 5 s)",
        stop_time.as_secs_f64()
    );

    // 3.
    let (_tx, shutdown) = crossbeam_channel::bounded::<()>(0);
    let ctx = background::Context {
        supervisor: &sup,
        deadline: None,
        shutdown: &shutdown,
    };
    let cmd = "sleep 0.05; date +%s%N";
    let mut via_wait = Vec::with_capacity(n);
    let mut via_waitpid = Vec::with_capacity(n);
    for _ in 0..n {
        let r = sup
            .spawn(&["sh".into(), "-c".into(), cmd.into()], dir.path(), &logs)
            .unwrap();
        let input = serde_json::json!({"operation": "wait", "work_id": r.work_id, "wait_secs": 10});
        let a = background::call(&ctx, &input).expect("answered");
        let back = now_ns();
        let stamp: u128 = std::fs::read_to_string(&r.log_path)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(a.result.data.contains("state: exited"));
        via_wait.push((back - stamp) as f64 / 1e6);

        let out = dir.path().join("stamp");
        let mut child = Command::new("sh")
            .args(["-c", cmd])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .spawn()
            .unwrap();
        // std's wait is a plain waitpid(pid) loop, retried on EINTR.
        child.wait().unwrap();
        let back = now_ns();
        let stamp: u128 = std::fs::read_to_string(&out)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        via_waitpid.push((back - stamp) as f64 / 1e6);
    }
    let (w, p) = (median(via_wait), median(via_waitpid));
    println!("exit to wait returning ({n} runs each, interleaved; from the command's last `date`)");
    println!("  background-command wait  median {w:>8.3} ms");
    println!("  plain waitpid loop       median {p:>8.3} ms");
    println!("  ratio wait/waitpid       {:>8.2}", w / p);
}
