//! Benchmark for the confinement of commands (prints figures; not a timed test).
//!
//! The per-call cost of a command started through `mur::exec::Supervisor` under the
//! session's sandbox (built environment, Landlock ruleset, seccomp filters), against
//! the same command unconfined and against a raw `std::process::Command` spawn, each
//! measured from the spawn to the exit observed (`true`, so the figure is the spawn's
//! own cost). Rounds alternate between the kinds so a load change hits all of them.
//! The one-time cost of building a session's confinement is printed too.
//!
//! Run: `cargo bench --bench confine` (or scripts/bench.sh). `MUR_BENCH_N` (default
//! 300) sets the rounds.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use mur::exec::sandbox::{Confinement, Mode, Spec};
use mur::exec::Supervisor;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time_supervised(
    sup: &Supervisor,
    argv: &[String],
    dir: &std::path::Path,
    logs: &std::path::Path,
) -> f64 {
    let t = Instant::now();
    let r = sup.spawn(argv, dir, logs).expect("spawn");
    let _ = r.exited().recv();
    let _ = r.reaped().recv();
    t.elapsed().as_secs_f64() * 1e6
}

fn main() {
    let n: usize = std::env::var("MUR_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    let logs = root.path().join("logs");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&logs).unwrap();
    let spec = |network_allow: Vec<String>| Spec {
        mode: Mode::BestEffort,
        workdir: work.clone(),
        home: root.path().join("home"),
        tmp: root.path().join("tmp"),
        read: Vec::new(),
        env_names: Vec::new(),
        network_allow,
    };
    let t = Instant::now();
    let conf = Confinement::new(&spec(Vec::new())).expect("confinement");
    let build_us = t.elapsed().as_secs_f64() * 1e6;
    println!("confine: this host: {:?}", conf.plan().host);
    for line in &conf.plan().enforced {
        println!("confine: enforced: {line}");
    }
    for line in &conf.plan().missing {
        println!("confine: not enforced: {line}");
    }
    let lo = Confinement::new(&spec(vec!["localhost".into()])).expect("confinement");
    let plain = Supervisor::new();
    let confined = Supervisor::for_session("ses_bench").confined(Arc::new(conf));
    let loopback = Supervisor::for_session("ses_bench").confined(Arc::new(lo));
    let argv: Vec<String> = vec!["true".into()];
    let (mut raw, mut sup, mut con, mut lop) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut forked = Vec::new();
    // Warm-up.
    for _ in 0..10 {
        time_supervised(&confined, &argv, &work, &logs);
        time_supervised(&plain, &argv, &work, &logs);
    }
    for _ in 0..n {
        let t = Instant::now();
        Command::new("true")
            .current_dir(&work)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("true");
        raw.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        let mut c = Command::new("true");
        c.current_dir(&work)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: an empty closure: it only makes std fork instead of posix_spawn.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, || Ok(()));
        }
        c.status().expect("true");
        forked.push(t.elapsed().as_secs_f64() * 1e6);
        sup.push(time_supervised(&plain, &argv, &work, &logs));
        con.push(time_supervised(&confined, &argv, &work, &logs));
        lop.push(time_supervised(&loopback, &argv, &work, &logs));
    }
    let (raw, sup, con, lop) = (median(raw), median(sup), median(con), median(lop));
    let forked = median(forked);
    println!("confine: building a session's confinement (once): {build_us:.0} µs");
    println!("confine: raw spawn of `true` (std::process::Command), median of {n}: {raw:.0} µs");
    println!("confine: raw spawn with an empty pre_exec (fork, not posix_spawn): {forked:.0} µs");
    println!("confine: supervised, unconfined: {sup:.0} µs");
    println!("confine: supervised, confined (no network): {con:.0} µs");
    println!("confine: supervised, confined (loopback only, with its guard thread): {lop:.0} µs");
    println!(
        "confine: ratio confined / raw spawn: {:.2} (goal <= 1.3); confined / unconfined supervised: {:.2}; loopback / raw: {:.2}",
        con / raw,
        con / sup,
        lop / raw
    );
}
