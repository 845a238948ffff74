//! Benchmark for peer files (prints figures; not a timed test).
//!
//! A 256 MiB handoff between two members over their doors: a capsule behind
//! `mur door` (one process) shares the file with share-file, and a formation member
//! (another `mur` process) fetches it with fetch-peer-file over that door, into its
//! workdir on the same disk. Reported: the fetch's own duration (its `tool_call`
//! record's `duration_ms`: the HTTP ranges, sha256 and the write) against `cp` of the
//! same file on the same disk (the ratio), the share's duration (snapshot copy plus
//! sha256), and the peak RSS of both `mur` processes (wait4's `ru_maxrss`), which must
//! stay far below the file size: both sides stream.
//!
//! `MUR_BENCH_MIB` sets the file size in MiB (default 256). Run:
//! `cargo bench --bench peer_files` (or scripts/bench.sh).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const TOKEN: &str = "bench-door-token";

fn wait4(pid: u32) -> (i32, i64) {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our child's, not yet waited for; both pointers are valid.
    let r = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    assert_eq!(r, pid as i32, "wait4");
    (status, usage.ru_maxrss)
}

fn trace(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("trace.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn tool_call<'a>(t: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    t.iter()
        .find(|r| r["type"] == "tool_call" && r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} tool_call"))
}

// Both children are reaped with wait4 (for their peak RSS), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn main() {
    let mib: u64 = std::env::var("MUR_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let mur = env!("CARGO_BIN_EXE_mur");
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path();
    let home = top.join("home");
    // The sharing capsule, behind mur door.
    let b = top.join("b");
    std::fs::create_dir_all(b.join("work/out")).unwrap();
    std::fs::write(b.join("murmur.yaml"), "name: b\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: replies.yaml}\nexports:\n  peer_files: out\n").unwrap();
    std::fs::write(b.join("replies.yaml"), "- tool_calls:\n    - {id: share, name: share-file, input: {path: big.bin}}\n- text: shared\n").unwrap();
    {
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(b.join("work/out/big.bin")).unwrap());
        let block: Vec<u8> = (0..1024 * 1024)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect();
        for i in 0..mib {
            let mut blk = block.clone();
            blk[0] = i as u8;
            f.write_all(&blk).unwrap();
        }
    }
    let big = b.join("work/out/big.bin");
    let b_records = top.join("b-records");
    let mut door = Command::new(mur)
        .env("MURMUR_HOME", &home)
        .env("MURMUR_DOOR_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .arg("door")
        .arg(&b)
        .args(["--listen", "127.0.0.1:0", "--records-dir"])
        .arg(&b_records)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mur door");
    let mut line = String::new();
    BufReader::new(door.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().strip_prefix("door: ").unwrap().to_string();
    let client = mur::a2a::A2aClient::new(url.clone(), TOKEN);
    let t = client.send_message("share", None, false).unwrap();
    assert_eq!(
        t.status.state,
        mur::a2a::types::TaskState::Completed,
        "{t:?}"
    );
    let bt = trace(&b_records);
    let share = tool_call(&bt, "share-file");
    let share_ms = share["duration_ms"].as_u64().unwrap();
    let handle = share["content"]
        .as_str()
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("handle: "))
        .unwrap()
        .to_string();

    // The fetching formation.
    let f = top.join("f");
    let lead = f.join("lead");
    std::fs::create_dir_all(lead.join("work")).unwrap();
    std::fs::write(f.join("roster.yaml"), format!("formation: f\nentry: lead\nmembers:\n  lead: {{capsule: lead, calls: [b]}}\n  b: {{door: \"{url}\", token: {{env: B_TOKEN}}}}\n")).unwrap();
    std::fs::write(lead.join("murmur.yaml"), "name: lead\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: replies.yaml}\ncapabilities:\n  peer_fetch: true\n  network: {allow: [localhost]}\n").unwrap();
    std::fs::write(lead.join("replies.yaml"), format!("- tool_calls:\n    - {{id: fetch, name: fetch-peer-file, input: {{handle: \"{handle}\", name: big.bin}}}}\n- text: done\n")).unwrap();
    let f_records = top.join("f-records");
    let t0 = Instant::now();
    let child = Command::new(mur)
        .env("MURMUR_HOME", &home)
        .env("B_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .arg("run")
        .arg("--roster")
        .arg(f.join("roster.yaml"))
        .arg("--records-dir")
        .arg(&f_records)
        .args(["--task", "fetch"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (status, fetch_rss_kib) = wait4(child.id());
    let run_secs = t0.elapsed().as_secs_f64();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "formation failed"
    );
    let lt = trace(&f_records.join("lead"));
    let fetch = tool_call(&lt, "fetch-peer-file");
    assert_eq!(fetch["status"], "passed", "{fetch}");
    let fetch_ms = fetch["duration_ms"].as_u64().unwrap();
    assert_eq!(
        std::fs::metadata(lead.join("work/big.bin")).unwrap().len(),
        mib * 1024 * 1024
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(door.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (_, door_rss_kib) = wait4(door.id());

    // cp of the same file on the same disk.
    let t1 = Instant::now();
    let st = Command::new("cp")
        .arg(&big)
        .arg(top.join("cp.bin"))
        .status()
        .unwrap();
    assert!(st.success());
    let cp_ms = t1.elapsed().as_secs_f64() * 1000.0;

    println!("peer-file handoff of {mib} MiB between two mur processes over a door (loopback):");
    println!(
        "  fetch-peer-file (ranges, sha256, write): {fetch_ms} ms ({:.0} MiB/s)",
        mib as f64 / (fetch_ms.max(1) as f64 / 1000.0)
    );
    println!(
        "  cp of the same file:                     {cp_ms:.0} ms ({:.0} MiB/s)",
        mib as f64 / (cp_ms.max(1.0) / 1000.0)
    );
    println!(
        "  ratio fetch / cp:                        {:.2}x",
        fetch_ms as f64 / cp_ms.max(1.0)
    );
    println!(
        "  share-file (snapshot copy, sha256):      {share_ms} ms ({:.2}x cp)",
        share_ms as f64 / cp_ms.max(1.0)
    );
    println!("  whole fetching formation run:            {run_secs:.2} s");
    println!(
        "  peak RSS, fetching mur:                  {} MiB ({:.3} of the file)",
        fetch_rss_kib / 1024,
        fetch_rss_kib as f64 / 1024.0 / mib as f64
    );
    println!(
        "  peak RSS, serving mur door:              {} MiB ({:.3} of the file)",
        door_rss_kib / 1024,
        door_rss_kib as f64 / 1024.0 / mib as f64
    );
}
