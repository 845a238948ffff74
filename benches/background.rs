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
//! 4. `mur`'s own CPU (user + system, `getrusage`) while starting 100 and 1 000
//!    commands, and while holding them idle for `MUR_BENCH_IDLE_SECS` (default 5) s,
//!    as a share of one core (goals: idle under 0.2 %, the 1 000 build-up under 10×
//!    the 100 one).
//! 5. The end-of-task sweep ([`mur::exec::procs::sweep`]) with 100 and 2 000 more
//!    idle processes on the host (`sleep`s that are not descendants), median of 20,
//!    beside a full `/proc` scan for `mur`'s descendants (what the sweep did before
//!    it walked `mur`'s own tree).
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

/// This process's CPU time (user + system), in seconds.
fn cpu_secs() -> f64 {
    // SAFETY: getrusage writes one rusage struct, which lives on this stack frame.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Starts `n` idle `sleep 600` that are not this process's descendants (their shell
/// exits, so they belong to init); returns their pids.
fn host_sleeps(n: usize, dir: &std::path::Path) -> Vec<i32> {
    let pids = dir.join("host.pids");
    let _ = std::fs::remove_file(&pids);
    let script = format!(
        "i=0; while [ $i -lt {n} ]; do sleep 600 </dev/null >/dev/null 2>&1 & echo $! >> '{}'; i=$((i+1)); done",
        pids.display()
    );
    Command::new("sh").args(["-c", &script]).status().unwrap();
    std::fs::read_to_string(&pids)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn host_procs() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        })
        .count()
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
    let idle_secs = env("MUR_BENCH_IDLE_SECS", 5) as u64;
    let argv: Vec<String> = vec!["sleep".into(), "300".into()];
    // 4, at 100 first.
    let small = Supervisor::new();
    let c = cpu_secs();
    for _ in 0..100 {
        small.spawn(&argv, dir.path(), &logs).expect("spawn");
    }
    let build_100 = cpu_secs() - c;
    std::thread::sleep(Duration::from_millis(300));
    let (c, t) = (cpu_secs(), Instant::now());
    std::thread::sleep(Duration::from_secs(idle_secs));
    let idle_100 = (cpu_secs() - c) / t.elapsed().as_secs_f64();
    small.stop_all();

    let sup = Supervisor::new();
    let before = rss_kb();
    let t = Instant::now();
    let c = cpu_secs();
    for _ in 0..n_cmds {
        sup.spawn(&argv, dir.path(), &logs).expect("spawn");
    }
    let build_n = cpu_secs() - c;
    let spawn_time = t.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let holding = rss_kb();
    let (c, t) = (cpu_secs(), Instant::now());
    std::thread::sleep(Duration::from_secs(idle_secs));
    let idle_n = (cpu_secs() - c) / t.elapsed().as_secs_f64();
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
    println!("mur's own CPU (user + system) holding `sleep 300`s");
    println!(
        "  starting 100          {:>9.3} s CPU; idle {:.3} % of a core over {idle_secs} s",
        build_100,
        idle_100 * 100.0
    );
    println!(
        "  starting {n_cmds:<5}        {:>9.3} s CPU; idle {:.3} % of a core over {idle_secs} s",
        build_n,
        idle_n * 100.0
    );
    println!(
        "  build-up ratio {n_cmds}/100  {:>7.1}×   (goal < 10×; idle goal < 0.2 %)",
        build_n / build_100.max(1e-6)
    );

    // 5.
    let sweeper = Supervisor::for_session("ses_bench");
    sweeper
        .spawn(&["true".into()], dir.path(), &logs)
        .unwrap()
        .wait_until(Instant::now() + Duration::from_secs(10));
    println!("end-of-task sweep (median of 20), host processes added as idle `sleep`s");
    let me = std::process::id() as i32;
    for extra in [100, 2000] {
        let pids = host_sleeps(extra, dir.path());
        let host = host_procs();
        let mut sweep = Vec::new();
        let mut scan = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let killed =
                mur::exec::procs::sweep(mur::exec::procs::SweepScope::Session("ses_bench"), &[]);
            sweep.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(killed.is_empty());
            let t = Instant::now();
            let d = mur::exec::procs::descendants(me, &mur::exec::procs::scan());
            scan.push(t.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(d);
        }
        for p in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let (a, b) = (median(sweep), median(scan));
        println!(
            "  +{extra:<5} ({host:>5} on the host)  sweep {a:>8.3} ms   full /proc scan {b:>8.3} ms   ratio {:>6.1}",
            b / a.max(1e-9)
        );
    }

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
