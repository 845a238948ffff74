//! A builder harness that writes a capsule into a temporary directory and runs the real
//! `mur` binary against it, with `MURMUR_HOME` in the same temporary directory.

pub mod sdk;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A temporary directory for a test: `sub/` (not created yet), `home/` and `records/`.
fn scratch(sub: &str) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join(sub);
    let home = root.path().join("home");
    let records = root.path().join("records");
    (root, dir, home, records)
}

/// The `mur` binary with `MURMUR_HOME` set to `home` and the environment that would
/// change its behaviour (`RUST_LOG`, `MURMUR_DELEGATION_TIMEOUT_SECS`) removed.
fn mur_command(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mur"));
    c.env("MURMUR_HOME", home)
        .env_remove("RUST_LOG")
        .env_remove("MURMUR_DELEGATION_TIMEOUT_SECS");
    c
}

/// A capsule under construction, and the place its sessions write to.
pub struct Capsule {
    pub root: tempfile::TempDir,
    pub dir: PathBuf,
    pub home: PathBuf,
    pub records: PathBuf,
}

/// What a run left behind.
pub struct Run {
    pub output: Output,
    pub records: PathBuf,
}

impl Capsule {
    /// An empty capsule directory with a `work/` workdir.
    pub fn new() -> Capsule {
        let (root, dir, home, records) = scratch("capsule");
        std::fs::create_dir_all(dir.join("work")).unwrap();
        Capsule {
            root,
            dir,
            home,
            records,
        }
    }

    /// Writes `murmur.yaml`.
    pub fn manifest(self, yaml: &str) -> Capsule {
        std::fs::write(self.dir.join("murmur.yaml"), yaml).unwrap();
        self
    }

    /// A script-driver capsule with the given shell allowlist and extra manifest text
    /// (appended at the top level), playing `script`.
    pub fn scripted(shell: &[&str], extra: &str, script: &str) -> Capsule {
        let allow = shell.join(", ");
        let caps = if shell.is_empty() {
            String::new()
        } else {
            format!("capabilities:\n  shell:\n    allow: [{allow}]\n")
        };
        let m = format!(
            "name: test\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {{driver: script, script: replies.yaml}}\n{caps}{extra}"
        );
        Capsule::new().manifest(&m).file("replies.yaml", script)
    }

    /// Writes a file relative to the capsule directory.
    pub fn file(self, rel: &str, text: &str) -> Capsule {
        let p = self.dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    /// A `mur` command with `MURMUR_HOME` set to this capsule's home.
    pub fn mur(&self) -> Command {
        mur_command(&self.home)
    }

    /// `mur run CAPSULE --records-dir RECORDS --task TASK EXTRA…`.
    pub fn run(&self, task: &str, extra: &[&str]) -> Run {
        self.run_at(&self.dir, task, extra)
    }

    /// `mur run DIR --records-dir RECORDS --task TASK EXTRA…`: another capsule
    /// directory (an example's) with this one's home and records.
    pub fn run_at(&self, dir: &Path, task: &str, extra: &[&str]) -> Run {
        let output = self
            .mur()
            .arg("run")
            .arg(dir)
            .arg("--records-dir")
            .arg(&self.records)
            .args(["--task", task])
            .args(extra)
            .output()
            .expect("run mur");
        Run {
            output,
            records: self.records.clone(),
        }
    }
}

impl Run {
    pub fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// Every record of trace.jsonl; panics if a line does not parse.
    pub fn trace(&self) -> Vec<Value> {
        read_trace(&self.records)
    }
    /// The records of one type.
    pub fn records(&self, kind: &str) -> Vec<Value> {
        self.trace()
            .into_iter()
            .filter(|r| r["type"] == kind)
            .collect()
    }
    /// The one record of a type.
    pub fn one(&self, kind: &str) -> Value {
        let r = self.records(kind);
        assert_eq!(
            r.len(),
            1,
            "expected one {kind} record, got {}: {}",
            r.len(),
            self.dump()
        );
        r.into_iter().next().unwrap()
    }
    /// The text the model was given for each tool call, in order.
    pub fn tool_texts(&self) -> Vec<String> {
        self.records("tool_call")
            .iter()
            .map(|r| r["content"].as_str().unwrap().to_string())
            .collect()
    }
    pub fn result_txt(&self) -> String {
        std::fs::read_to_string(self.records.join("out/result.txt")).unwrap()
    }
    /// Everything useful for a failed assertion.
    pub fn dump(&self) -> String {
        let trace = std::fs::read_to_string(self.records.join("trace.jsonl")).unwrap_or_default();
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}\ntrace:\n{}",
            self.output.status,
            self.stdout(),
            self.stderr(),
            trace
        )
    }
}

/// Reads and parses every line of `dir/trace.jsonl`.
pub fn read_trace(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace.jsonl");
    text.lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("trace line does not parse: {e}: {l}"))
        })
        .collect()
}

/// A formation under construction: `roster.yaml` and one capsule directory per local
/// member in a temporary directory.
pub struct Formation {
    /// Held, never read: the temporary directory lives as long as the formation.
    #[allow(dead_code)]
    pub root: tempfile::TempDir,
    pub dir: PathBuf,
    pub home: PathBuf,
    pub records: PathBuf,
}

/// What a formation run left behind; `member(name)` views one member's records.
pub struct FormationRun {
    pub output: Output,
    pub records: PathBuf,
}

impl Formation {
    pub fn new() -> Formation {
        let (root, dir, home, records) = scratch("formation");
        std::fs::create_dir_all(&dir).unwrap();
        Formation {
            root,
            dir,
            home,
            records,
        }
    }

    /// Writes `roster.yaml`.
    pub fn roster(self, yaml: &str) -> Formation {
        std::fs::write(self.dir.join("roster.yaml"), yaml).unwrap();
        self
    }

    /// A script-driver member capsule `name` with extra manifest text (top level),
    /// playing `script`. Its workdir is `work/`.
    pub fn member(self, name: &str, extra: &str, script: &str) -> Formation {
        let d = self.dir.join(name);
        std::fs::create_dir_all(d.join("work")).unwrap();
        std::fs::write(
            d.join("murmur.yaml"),
            format!("name: {name}\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {{driver: script, script: replies.yaml}}\n{extra}"),
        )
        .unwrap();
        std::fs::write(d.join("replies.yaml"), script).unwrap();
        self
    }

    pub fn mur(&self) -> Command {
        let mut c = mur_command(&self.home);
        c.env_remove("MUR_DEBUG_PANIC_ON_TASK");
        c
    }

    /// `mur run --roster roster.yaml --records-dir RECORDS --task TASK` with `env`.
    pub fn run_with(&self, task: &str, env: &[(&str, &str)]) -> FormationRun {
        self.run_roster(&self.dir.join("roster.yaml"), task, env)
    }

    /// `mur run --roster ROSTER --records-dir RECORDS --task TASK` with `env`: another
    /// roster (an example's) with this formation's home and records.
    pub fn run_roster(&self, roster: &Path, task: &str, env: &[(&str, &str)]) -> FormationRun {
        let mut c = self.mur();
        c.arg("run")
            .arg("--roster")
            .arg(roster)
            .arg("--records-dir")
            .arg(&self.records)
            .args(["--task", task]);
        for (k, v) in env {
            c.env(k, v);
        }
        FormationRun {
            output: c.output().expect("run mur"),
            records: self.records.clone(),
        }
    }

    pub fn run(&self, task: &str) -> FormationRun {
        self.run_with(task, &[])
    }
}

impl FormationRun {
    pub fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// One member's records, as a [`Run`].
    pub fn member(&self, name: &str) -> Run {
        Run {
            output: self.output.clone(),
            records: self.records.join(name),
        }
    }
    /// Every member's trace, for a failed assertion.
    pub fn dump(&self) -> String {
        let mut s = format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}\n",
            self.output.status,
            self.stdout(),
            self.stderr()
        );
        if let Ok(rd) = std::fs::read_dir(&self.records) {
            for e in rd.flatten() {
                let t = std::fs::read_to_string(e.path().join("trace.jsonl")).unwrap_or_default();
                s.push_str(&format!("--- {}\n{t}", e.file_name().to_string_lossy()));
            }
        }
        s
    }
}

/// A `mur door` serving `c` on an ephemeral loopback port, its client, and the child.
pub fn spawn_door(c: &Capsule) -> (std::process::Child, mur::a2a::A2aClient) {
    use std::io::{BufRead, BufReader};
    let mut child = c
        .mur()
        .arg("door")
        .arg(&c.dir)
        .args(["--listen", "127.0.0.1:0", "--records-dir"])
        .arg(&c.records)
        .env("MURMUR_DOOR_TOKEN", "door-token-for-tests")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().strip_prefix("door: ").unwrap().to_string();
    (child, mur::a2a::A2aClient::new(url, "door-token-for-tests"))
}
