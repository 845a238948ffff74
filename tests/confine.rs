//! Confinement of the commands `mur` starts for the model (issue: a tool sees no secret
//! it was not given, reaches no host the capsule did not allow, and writes nowhere
//! outside its workdir). These run on the real kernel: Landlock and seccomp as `mur`
//! applies them.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;

use support::{Capsule, Run};

const KEY: &str = "sk-test-confine-0123456789abcdef";
const DOOR: &str = "door-token-confine-fedcba9876543210";

/// A capsule with a script choice and an unused openai choice whose credential is
/// `OPENAI_API_KEY`, granting `shell` (a `capabilities.shell` body) and `extra`.
fn capsule(shell: &str, extra: &str, script: &str) -> Capsule {
    let m = format!(
        "name: t\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {{driver: script, script: replies.yaml}}\n    o: {{driver: openai, model: m, base_url: \"http://127.0.0.1:9/v1\", credential: {{env: OPENAI_API_KEY}}}}\ncapabilities:\n  shell: {shell}\n{extra}"
    );
    Capsule::new().manifest(&m).file("replies.yaml", script)
}

/// `mur run` with the secrets in its environment and `env` on top.
fn run(c: &Capsule, env: &[(&str, &str)]) -> Run {
    let mut cmd = c.mur();
    cmd.arg("run")
        .arg(&c.dir)
        .arg("--records-dir")
        .arg(&c.records)
        .args(["--task", "t"])
        .env("OPENAI_API_KEY", KEY)
        .env("MURMUR_DOOR_TOKEN", DOOR)
        .env("UNNAMED_VAR", "kept-out")
        .env("PASSED_VAR", "passed-in");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run {
        output: cmd.output().unwrap(),
        records: c.records.clone(),
    }
}

/// Every file beneath `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let b = std::fs::read(&p).unwrap();
                if b.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    hits.push(p.display().to_string());
                }
            }
        }
    }
    hits
}

fn call(tool: &str, args: &[&str]) -> String {
    let a: Vec<String> = args
        .iter()
        .map(|s| serde_json::to_string(s).unwrap())
        .collect();
    format!(
        "    - {{name: {tool}, input: {{args: [{}]}}}}\n",
        a.join(", ")
    )
}

fn script(calls: &[String]) -> String {
    format!("- tool_calls:\n{}- text: done\n", calls.concat())
}

/// The exit code in a tool text.
fn exit_code(t: &str) -> i32 {
    t.lines()
        .find_map(|l| l.strip_prefix("exit_code: "))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_command_sees_no_credential_and_no_secret_lands_in_the_records() {
    let s = script(&[
        call("env", &[]),
        call("cat", &["/proc/self/environ"]),
        call("sh", &["-c", "cat /proc/$PPID/environ"]),
        // A secret in the model's own arguments, echoed back by the command.
        call("sh", &["-c", &format!("echo {KEY} {DOOR}")]),
    ]);
    let c = capsule("{allow: [env, cat, sh], env: [PASSED_VAR]}", "", &s);
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    let t = r.tool_texts();
    let env = &t[0];
    for bad in [
        KEY,
        DOOR,
        "OPENAI_API_KEY",
        "MURMUR_DOOR_TOKEN",
        "UNNAMED_VAR",
    ] {
        assert!(!env.contains(bad), "{bad} in {env}");
    }
    assert!(env.contains("PASSED_VAR=passed-in"), "{env}");
    assert!(env.contains("TERM=dumb"), "{env}");
    assert!(env.contains("MURMUR_SESSION=ses_"), "{env}");
    assert!(env.contains("MURMUR_WORK_ID=wrk_"), "{env}");
    let home = env
        .lines()
        .find_map(|l| l.strip_prefix("HOME="))
        .expect("HOME");
    assert!(
        home.ends_with("/home") && home.contains("/run/ses_"),
        "{env}"
    );
    assert!(!t[1].contains(KEY), "{}", t[1]);
    // mur's own environment is out of reach.
    assert_ne!(exit_code(&t[2]), 0, "{}", t[2]);
    assert!(!t[2].contains("OPENAI"), "{}", t[2]);
    // What the model produced is masked in the trace and the log.
    assert!(t[3].contains("[masked] [masked]"), "{}", t[3]);
    assert_eq!(files_containing(&c.records, KEY), Vec::<String>::new());
    assert_eq!(files_containing(&c.records, DOOR), Vec::<String>::new());
    let call_rec = &r.records("tool_call")[3];
    assert!(call_rec.to_string().contains("[masked]"), "{call_rec}");
}

#[test]
fn an_answer_holding_a_secret_is_masked_in_out() {
    let s = format!("- text: \"the key is {KEY}\"\n");
    let c = capsule("{allow: [cat]}", "", &s);
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    assert_eq!(r.result_txt(), "the key is [masked]");
    assert_eq!(files_containing(&c.records, KEY), Vec::<String>::new());
}

#[test]
fn a_path_in_shell_read_is_readable_and_nothing_beside_it() {
    let s = script(&[
        call("cat", &["../data/facts.txt"]),
        call("sh", &["-c", "echo x > ../data/new.txt"]),
        call("cat", &["../replies.yaml"]),
    ]);
    let c = capsule("{allow: [cat, sh], read: [data]}", "", &s).file("data/facts.txt", "a fact\n");
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    let t = r.tool_texts();
    assert_eq!(exit_code(&t[0]), 0, "{}", t[0]);
    assert!(t[0].contains("a fact"), "{}", t[0]);
    assert_ne!(exit_code(&t[1]), 0, "read-only: {}", t[1]);
    assert!(!c.dir.join("data/new.txt").exists());
    assert_ne!(exit_code(&t[2]), 0, "{}", t[2]);
}

#[test]
fn a_credential_named_in_shell_env_is_passed_but_still_masked_in_the_records() {
    let s = script(&[call("sh", &["-c", "echo \"key=$OPENAI_API_KEY\""])]);
    let c = capsule("{allow: [sh], env: [OPENAI_API_KEY]}", "", &s);
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    assert!(r.tool_texts()[0].contains("key=[masked]"), "{}", r.dump());
    assert_eq!(files_containing(&c.records, KEY), Vec::<String>::new());
}

#[test]
fn a_command_reads_and_writes_nothing_outside_its_workdir() {
    let outside = "../outside.txt";
    let s = script(&[
        call("cat", &["../../../../../../../../etc/shadow"]),
        call("sh", &["-c", &format!("echo x > {outside}")]),
        call("sh", &["-c", "ln -s /etc/shadow link && cat link"]),
        call("sh", &["-c", "ln -s ../murmur.yaml m && cat m"]),
        call("cat", &["/proc/1/root/etc/shadow"]),
        call("sh", &["-c", "echo x > /tmp/mur-confine-escape-$$"]),
        call(
            "sh",
            &[
                "-c",
                "echo in > in.txt && echo h > \"$HOME/h\" && echo t > \"$TMPDIR/t\" && cat in.txt \"$HOME/h\" \"$TMPDIR/t\" && ls /usr/bin >/dev/null && echo fine",
            ],
        ),
    ]);
    let c = capsule("{allow: [cat, sh]}", "", &s);
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    let t = r.tool_texts();
    for (i, what) in [
        "../../etc/shadow",
        "writing ../outside.txt",
        "a symlink to /etc/shadow",
        "a symlink to the capsule's manifest",
        "/proc/1/root",
        "writing /tmp",
    ]
    .iter()
    .enumerate()
    {
        assert_ne!(exit_code(&t[i]), 0, "{what}: {}", t[i]);
        assert!(t[i].contains("Permission denied"), "{what}: {}", t[i]);
    }
    assert!(!c.dir.join("outside.txt").exists());
    assert!(!t[3].contains("name: t"), "{}", t[3]);
    assert_eq!(exit_code(&t[6]), 0, "{}", t[6]);
    assert!(t[6].contains("in\nh\nt\nfine\n"), "{}", t[6]);
}

/// A loopback server answering one HTTP request with `hello`; returns its port.
fn loopback_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    port
}

#[test]
fn with_no_network_grant_a_loopback_server_is_out_of_reach() {
    let port = loopback_server();
    let url = format!("http://127.0.0.1:{port}/");
    let s = script(&[call("curl", &["-sS", "--max-time", "20", &url])]);
    let c = capsule("{allow: [curl]}", "", &s);
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    let t = &r.tool_texts()[0];
    assert_ne!(exit_code(t), 0, "{t}");
    assert!(!t.contains("hello"), "{t}");
}

/// A non-loopback address of this machine (where a server bound to 0.0.0.0 answers),
/// or an address of a private network when the machine has none.
fn other_address() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|u| u.connect("192.0.2.1:9").map(|_| u))
        .and_then(|u| u.local_addr())
        .map(|a| a.ip().to_string())
        .ok()
        .filter(|ip| ip != "0.0.0.0" && !ip.starts_with("127."))
        .unwrap_or_else(|| "10.255.255.1".to_string())
}

#[test]
fn with_localhost_granted_a_loopback_call_works_and_another_address_fails() {
    let l = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    let other = other_address();
    let s = script(&[
        call("curl", &["-sS", "--max-time", "20", &format!("http://127.0.0.1:{port}/")]),
        call("curl", &["-sS", "--max-time", "20", &format!("http://localhost:{port}/")]),
        call("curl", &["-sS", "--max-time", "20", &format!("http://{other}:{port}/")]),
        // UDP (DNS) is refused outright.
        call("sh", &["-c", "exec 3>/dev/null; curl -sS --max-time 5 --dns-servers 127.0.0.1 http://example.invalid/ 2>&1 || perl -MIO::Socket::INET -e 'IO::Socket::INET->new(PeerAddr => \"127.0.0.1:53\", Proto => \"udp\") or die \"udp: $!\\n\"'"]),
    ]);
    let c = capsule(
        "{allow: [curl, sh]}",
        "  network: {allow: [localhost]}\n",
        &s,
    );
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    assert!(
        !r.stderr()
            .contains("capabilities.sandbox: this kernel does not enforce"),
        "{}",
        r.stderr()
    );
    let t = r.tool_texts();
    for i in [0, 1] {
        assert_eq!(exit_code(&t[i]), 0, "{}", t[i]);
        assert!(t[i].contains("\nhello"), "{}", t[i]);
    }
    assert_ne!(exit_code(&t[2]), 0, "{other}: {}", t[2]);
    assert!(!t[2].contains("hello"), "{}", t[2]);
    assert!(t[3].contains("udp: Operation not permitted"), "{}", t[3]);
}

#[test]
fn a_host_other_than_the_loopback_is_not_filtered_and_staging_says_so() {
    let s = script(&[call("curl", &["--version"])]);
    let c = capsule(
        "{allow: [curl]}",
        "  network: {allow: [api.example.com]}\n",
        &s,
    );
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    assert!(
        r.stderr()
            .contains("per-host filtering of capabilities.network.allow for commands"),
        "{}",
        r.stderr()
    );
    let c = capsule(
        "{allow: [curl]}",
        "  network: {allow: [api.example.com]}\n  sandbox: required\n",
        &s,
    );
    let r = run(&c, &[]);
    assert_eq!(r.code(), 2, "{}", r.dump());
}

#[test]
fn a_command_cannot_ptrace_mur() {
    // Attach to mur itself: the command's parent.
    let s = script(&[call("sh", &["-c", "strace -p $PPID"])]);
    let c = capsule("{allow: [sh, strace]}", "", &s);
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    let t = &r.tool_texts()[0];
    assert_ne!(exit_code(t), 0, "{t}");
    assert!(t.contains("Operation not permitted"), "{t}");
}

#[test]
fn a_kernel_without_landlock_gets_one_warning_and_required_refuses() {
    let s = script(&[call("cat", &["/etc/hostname"])]);
    let c = capsule("{allow: [cat]}", "", &s);
    let r = run(&c, &[("MUR_TEST_LANDLOCK_ABI", "0")]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    let err = r.stderr();
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("capabilities.sandbox: this kernel does not enforce"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", r.stderr());
    assert!(warnings[0].contains("file system confinement (no Landlock)"));
    assert!(warnings[0].contains("Landlock TCP bind/connect rules (ABI 4, this kernel has 0)"));
    let c = capsule("{allow: [cat]}", "  sandbox: required\n", &s);
    let r = run(&c, &[("MUR_TEST_LANDLOCK_ABI", "0")]);
    assert_eq!(r.code(), 2, "{}", r.dump());
    assert!(
        r.stderr()
            .contains("capabilities.sandbox is `required`, so the capsule is refused"),
        "{}",
        r.stderr()
    );
    // mur check says the same.
    let out = c
        .mur()
        .arg("check")
        .arg(&c.dir)
        .env("MUR_TEST_LANDLOCK_ABI", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn without_tcp_rules_the_socket_filter_still_keeps_the_network_out() {
    let port = loopback_server();
    let url = format!("http://127.0.0.1:{port}/");
    let s = script(&[
        call("curl", &["-sS", "--max-time", "20", &url]),
        call("cat", &["/etc/shadow"]),
    ]);
    let c = capsule("{allow: [curl, cat]}", "", &s);
    let r = run(&c, &[("MUR_TEST_LANDLOCK_ABI", "3")]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    assert!(
        r.stderr()
            .contains("Landlock TCP bind/connect rules (ABI 4, this kernel has 3)"),
        "{}",
        r.stderr()
    );
    let t = r.tool_texts();
    assert_ne!(exit_code(&t[0]), 0, "{}", t[0]);
    assert_ne!(exit_code(&t[1]), 0, "{}", t[1]);
}

#[test]
fn without_seccomp_the_warning_names_it() {
    let s = script(&[call("cat", &["/etc/hostname"])]);
    let c = capsule("{allow: [cat]}", "", &s);
    let r = run(&c, &[("MUR_TEST_NO_SECCOMP", "1")]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    assert!(
        r.stderr().contains("the seccomp system call filter"),
        "{}",
        r.stderr()
    );
}

#[test]
fn mur_check_prints_what_is_enforced_on_this_host() {
    let c = capsule("{allow: [cat]}", "", &script(&[]));
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("sandbox:"));
    let out = c
        .mur()
        .args(["check", "--sandbox"])
        .arg(&c.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let o = String::from_utf8_lossy(&out.stdout);
    assert!(o.contains("sandbox: enforced: environment: built"), "{o}");
    assert!(
        o.contains("sandbox: enforced: file system: Landlock ABI "),
        "{o}"
    );
    assert!(o.contains("sandbox: enforced: network: none"), "{o}");
    assert!(
        o.contains("sandbox: enforced: system calls: seccomp refuses ptrace"),
        "{o}"
    );
}

#[test]
fn bad_sandbox_keys_are_refused_with_a_hint() {
    let c = capsule(
        "{allow: [cat], env: [\"1BAD\"]}",
        "  sandbox: strict\n",
        &script(&[]),
    );
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("capabilities.sandbox: unknown value `strict`"),
        "{e}"
    );
    assert!(
        e.contains("`1BAD` is not an environment variable name"),
        "{e}"
    );
}

#[test]
fn sandbox_off_runs_unconfined_but_still_builds_the_environment() {
    let s = script(&[call("cat", &["../murmur.yaml"]), call("env", &[])]);
    let c = capsule("{allow: [cat, env]}", "  sandbox: off\n", &s);
    let r = run(&c, &[("MUR_TEST_LANDLOCK_ABI", "0")]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    // No warning: nothing was asked of the kernel.
    assert!(
        !r.stderr().contains("capabilities.sandbox"),
        "{}",
        r.stderr()
    );
    let t = r.tool_texts();
    assert_eq!(exit_code(&t[0]), 0, "{}", t[0]);
    assert!(t[0].contains("name: t"), "{}", t[0]);
    assert!(!t[1].contains("OPENAI_API_KEY"), "{}", t[1]);
    assert!(t[1].contains("TERM=dumb"), "{}", t[1]);
}

#[test]
fn a_secret_in_a_field_long_enough_to_be_cut_is_masked_in_the_line_and_the_blob() {
    // The key straddles the 64 KiB cut of the arguments' string.
    let pad = "x".repeat(64 * 1024 - 10);
    let arg = format!(": {pad}{KEY}; echo ok");
    let s = script(&[call("sh", &["-c", &arg])]);
    let c = capsule("{allow: [sh]}", "", &s);
    let r = run(&c, &[]);
    assert_eq!(r.code(), 0, "{}", r.dump());
    assert!(c.records.join("blobs").is_dir(), "no blob was written");
    assert_eq!(files_containing(&c.records, KEY), Vec::<String>::new());
    assert_eq!(
        files_containing(&c.records, &KEY[..12]),
        Vec::<String>::new()
    );
}
