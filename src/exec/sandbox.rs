//! Confinement of the commands `mur` starts for the model: the environment they get,
//! and the sandbox they run in (Landlock, seccomp). See murmur.yaml(5), SANDBOX.
//!
//! # The environment
//!
//! Built, never inherited ([`base_env`]): `PATH` (`mur`'s own, or
//! `/usr/local/bin:/usr/bin:/bin` when unset), `HOME` (the session's `home/` in its
//! runtime directory), `TMPDIR` (the session's `tmp/`), `TERM=dumb`, `LANG`, `LANGUAGE`,
//! every `LC_*`, `TZ`, `USER` and `LOGNAME` when `mur` has them, `MURMUR_SESSION` and
//! `MURMUR_WORK_ID`; then each name in `capabilities.shell.env` that `mur`'s
//! environment sets. Nothing else: a driver's credential variable, `MURMUR_DOOR_TOKEN`
//! or any other variable reaches a command only when the capsule names it.
//!
//! # The sandbox
//!
//! Built once per session, before any command ([`Confinement::new`]): the Landlock
//! ruleset is created and filled and the seccomp programs are compiled; then a
//! dedicated *launcher thread* restricts itself with them (`prctl(PR_SET_NO_NEW_PRIVS)`,
//! `landlock_restrict_self`, `seccomp(SECCOMP_SET_MODE_FILTER)`, all without
//! thread-sync flags, so they bind that one thread) and from then on starts every
//! command of the session ([`Confinement::spawn`]). Landlock domains, seccomp filters
//! and no_new_privs are properties of a thread that every process it starts inherits,
//! so each command is born confined, while the rest of `mur` stays unrestricted.
//!
//! Decided against, after measuring (benches/confine.rs): a `pre_exec` hook making the
//! same calls between fork and exec (async-signal-safe, but any `pre_exec` makes the
//! standard library `fork` instead of `posix_spawn`: about 200 µs more per command on
//! the machine measured, 1.2× an unconfined spawn), and a re-exec of `mur` as a
//! launcher (a second `exec` per command). With the launcher thread the program is
//! also resolved on the command's `PATH` beforehand ([`Confinement::program`]), so
//! `posix_spawn` is used: a confined command costs what an unconfined one does.
//!
//! - File system (Landlock ABI ≥ 1): read, write, create, remove beneath the workdir,
//!   the session's `home/` and `tmp/`; read and execute beneath [`SYSTEM_READ`] (those
//!   that exist), the directory of each binary of `capabilities.shell.allow` as found
//!   on `PATH`, and each path of `capabilities.shell.read`; read and write of the
//!   devices in [`DEVICES_RW`]; nothing else. Truncation is confined from ABI 3, device
//!   ioctls from ABI 5; renaming or linking across directories needs ABI 2 (below it,
//!   Landlock refuses every such rename).
//! - Network: with `capabilities.network.allow` absent or empty, the seccomp filter
//!   refuses `socket(2)` for `AF_INET`, `AF_INET6` and `AF_PACKET` (every TCP, UDP, DNS
//!   and raw packet), and from Landlock ABI 4 the ruleset refuses every TCP `bind` and
//!   `connect` too. With loopback names only, [`super::loopback`]: TCP to the loopback
//!   through `mur`, nothing else. Unix sockets stay open: from ABI 6 abstract ones
//!   created outside the command are out of reach; a socket file is reachable where the
//!   file system rules let it be seen. With another host listed, commands get the
//!   host's network: the list is not enforced per host for commands (staging warns).
//! - Processes: from ABI 6 a command cannot signal a process outside its own sandbox;
//!   the seccomp filter refuses `ptrace` altogether (with [`DENIED_SYSCALLS`]). No
//!   `/proc/<pid>` is readable (a kernel tested let a confined command read `mur`'s
//!   `/proc/<pid>/environ` although Landlock documents a ptrace scope; `mur` does not
//!   rely on it: [`harden_self`], and `/proc` left out of [`SYSTEM_READ`] but for a few
//!   global files).
//!
//! `capabilities.sandbox` says what happens where the kernel lacks a feature:
//! `best_effort` (the default) runs without it after one warning at staging,
//! `required` refuses to stage, `off` runs commands unconfined (the environment is
//! still built).

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use crossbeam_channel::{bounded, unbounded, Sender};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope, ABI,
};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

/// System paths a command may read and execute beneath (those that exist).
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
    "/etc/magic",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/loadavg",
    "/proc/stat",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/dev/random",
    "/dev/urandom",
    "/dev/zero",
];

/// Devices a command may read and write.
pub const DEVICES_RW: &[&str] = &["/dev/null", "/dev/full", "/dev/tty"];

/// System calls the seccomp filter refuses (`EPERM`) whatever the capsule says.
pub const DENIED_SYSCALLS: &[&str] = &[
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "acct",
    "iopl",
    "ioperm",
];

/// `capabilities.sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// `off`: commands run unconfined (their environment is still built).
    Off,
    /// `best_effort` (default): every layer the kernel has; one warning names the rest.
    #[default]
    BestEffort,
    /// `required`: a kernel that lacks a layer makes staging refuse the capsule.
    Required,
}

impl Mode {
    /// The manifest's words for the modes, in order.
    pub const WORDS: &'static [&'static str] = &["off", "best_effort", "required"];

    /// The mode for a manifest word.
    pub fn from_word(w: &str) -> Option<Mode> {
        match w {
            "off" => Some(Mode::Off),
            "best_effort" => Some(Mode::BestEffort),
            "required" => Some(Mode::Required),
            _ => None,
        }
    }
}

/// Makes `mur` itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`): its `/proc/<pid>/`
/// entries that need ptrace access (`environ`, `mem`, `fd/`, `maps`…) are then out of
/// reach of every process without `CAP_SYS_PTRACE`, which a confined command never has,
/// so a command cannot read the credentials in `mur`'s environment through `/proc`.
/// No core dump of `mur` is written either (it would hold the same secrets).
pub fn harden_self() {
    // SAFETY: PR_SET_DUMPABLE takes no pointer.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// What the kernel `mur` runs on offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// The Landlock ABI version, 0 when Landlock is unavailable.
    pub landlock_abi: i32,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
}

/// Probes the kernel. In debug builds (tests) `MUR_TEST_LANDLOCK_ABI=N` caps the ABI
/// used at `N` (0: no Landlock) and `MUR_TEST_NO_SECCOMP=1` acts as if seccomp were
/// missing, to exercise the warning and the refusal; release builds ignore both.
pub fn host() -> Host {
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    let mut abi = if v < 0 { 0 } else { v as i32 };
    // SAFETY: PR_GET_SECCOMP takes no pointer.
    let mut seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP) } >= 0;
    if cfg!(debug_assertions) {
        if let Some(cap) = std::env::var("MUR_TEST_LANDLOCK_ABI")
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
        {
            abi = abi.min(cap.max(0));
        }
        if std::env::var_os("MUR_TEST_NO_SECCOMP").is_some() {
            seccomp = false;
        }
    }
    Host {
        landlock_abi: abi,
        seccomp,
    }
}

/// What the sandbox will enforce for a capsule on a host, and what it cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The capsule's mode.
    pub mode: Mode,
    /// The host.
    pub host: Host,
    /// Whether commands get no network (`capabilities.network.allow` empty).
    pub no_network: bool,
    /// Whether commands get the loopback only (`capabilities.network.allow` lists
    /// loopback names only, and the kernel can enforce it).
    pub loopback_only: bool,
    /// One line per layer enforced.
    pub enforced: Vec<String>,
    /// One phrase per layer the capsule would get on a full kernel but not here.
    pub missing: Vec<String>,
}

impl Plan {
    /// The plan for a capsule with `mode` and `network_allow` on `host`.
    pub fn new(mode: Mode, network_allow: &[String], host: Host) -> Plan {
        let no_network = network_allow.is_empty();
        let loopback_names = !no_network
            && network_allow
                .iter()
                .all(|h| super::loopback::is_loopback_name(h));
        let loopback_only = loopback_names
            && mode != Mode::Off
            && host.landlock_abi >= 4
            && host.seccomp
            && super::loopback::notify_filter().is_some();
        let mut enforced = Vec::new();
        let mut missing = Vec::new();
        if mode == Mode::Off {
            enforced.push("environment: built (documented base + capabilities.shell.env)".into());
            return Plan {
                mode,
                host,
                no_network,
                loopback_only: false,
                enforced,
                missing,
            };
        }
        enforced.push("environment: built (documented base + capabilities.shell.env)".into());
        let abi = host.landlock_abi;
        if abi >= 1 {
            enforced.push(format!(
                "file system: Landlock ABI {abi}: read-write beneath the workdir, the session's home/ and tmp/; read-only system paths; nothing else"
            ));
        } else {
            missing.push("file system confinement (no Landlock)".to_string());
        }
        if no_network {
            if host.seccomp {
                enforced.push(
                    "network: none (seccomp refuses AF_INET, AF_INET6, AF_PACKET sockets: TCP, UDP, DNS)"
                        .into(),
                );
            } else {
                missing.push("network denial by socket family (no seccomp)".to_string());
            }
            if abi >= 4 {
                enforced.push("network: Landlock refuses every TCP bind and connect".into());
            } else {
                missing.push(format!(
                    "Landlock TCP bind/connect rules (ABI 4, this kernel has {abi})"
                ));
            }
        } else if loopback_only {
            enforced.push(
                "network: loopback only: TCP connect and bind to 127.0.0.0/8 and ::1, made by mur on the command's behalf; every other address refused; UDP, raw and other IP sockets refused"
                    .into(),
            );
        } else if loopback_names {
            enforced.push("network: the host's network".into());
            missing.push(format!(
                "loopback-only network (needs Landlock ABI 4 and seccomp; this kernel has Landlock ABI {}{})",
                host.landlock_abi,
                if host.seccomp { "" } else { ", no seccomp" }
            ));
        } else {
            enforced.push(format!(
                "network: the host's network (capabilities.network.allow lists {})",
                network_allow.join(", ")
            ));
            missing.push(
                "per-host filtering of capabilities.network.allow for commands (mur filters only the loopback: with another host listed, commands reach every host)"
                    .to_string(),
            );
        }
        if abi >= 6 {
            enforced.push(
                "processes: Landlock scopes signals and abstract unix sockets to the command's own sandbox"
                    .into(),
            );
        } else {
            missing.push(format!(
                "Landlock signal and abstract unix socket scoping (ABI 6, this kernel has {abi})"
            ));
        }
        if host.seccomp {
            enforced.push(format!(
                "system calls: seccomp refuses {}",
                DENIED_SYSCALLS.join(", ")
            ));
        } else {
            missing.push("the seccomp system call filter".to_string());
        }
        Plan {
            mode,
            host,
            no_network,
            loopback_only,
            enforced,
            missing,
        }
    }

    /// The warning staging prints when a layer is missing under `best_effort`, or the
    /// refusal under `required`: `capabilities.sandbox: this kernel does not enforce …`.
    pub fn shortfall(&self) -> Option<String> {
        if self.missing.is_empty() || self.mode == Mode::Off {
            return None;
        }
        let tail = match self.mode {
            Mode::Required => "; capabilities.sandbox is `required`, so the capsule is refused (run it on a kernel with these features, or set capabilities.sandbox: best_effort)",
            _ => "; commands run without it (set capabilities.sandbox: required to refuse instead)",
        };
        Some(format!(
            "capabilities.sandbox: this kernel does not enforce {}{tail}",
            self.missing.join(", ")
        ))
    }
}

/// What a session's confinement is built from.
#[derive(Debug, Clone)]
pub struct Spec {
    /// `capabilities.sandbox`.
    pub mode: Mode,
    /// The accessible workdir (read-write).
    pub workdir: PathBuf,
    /// The session's `HOME` (read-write), created if missing.
    pub home: PathBuf,
    /// The session's `TMPDIR` (read-write), created if missing.
    pub tmp: PathBuf,
    /// More paths to read and execute beneath: the directories of the allowed
    /// binaries, `capabilities.shell.read`.
    pub read: Vec<PathBuf>,
    /// `capabilities.shell.env`: names passed from `mur`'s environment.
    pub env_names: Vec<String>,
    /// `capabilities.network.allow`.
    pub network_allow: Vec<String>,
}

/// A session's confinement, built once and applied to each command it starts.
pub struct Confinement {
    env: Vec<(OsString, OsString)>,
    path: Vec<PathBuf>,
    plan: Plan,
    launcher: Option<Sender<Job>>,
}

/// One spawn asked of the launcher thread.
struct Job {
    cmd: Command,
    reply: Sender<io::Result<std::process::Child>>,
}

impl std::fmt::Debug for Confinement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confinement")
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

/// The documented base environment (without `MURMUR_WORK_ID`, which is per command),
/// then the names of `names` that `mur`'s environment sets.
pub fn base_env(home: &Path, tmp: &Path, names: &[String]) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let path = std::env::var_os("PATH")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    env.push(("PATH".into(), path));
    env.push(("HOME".into(), home.as_os_str().to_owned()));
    env.push(("TMPDIR".into(), tmp.as_os_str().to_owned()));
    env.push(("TERM".into(), "dumb".into()));
    for (k, v) in std::env::vars_os() {
        let Some(name) = k.to_str() else { continue };
        let pass = matches!(name, "LANG" | "LANGUAGE" | "TZ" | "USER" | "LOGNAME")
            || name.starts_with("LC_");
        if pass {
            env.push((k, v));
        }
    }
    for n in names {
        if let Some(v) = std::env::var_os(n) {
            env.retain(|(k, _)| k != n.as_str());
            env.push((n.into(), v));
        }
    }
    env
}

impl Confinement {
    /// Builds the confinement of a session on this host: the environment, and unless
    /// the mode is `off` the launcher thread, which builds the Landlock ruleset and the
    /// seccomp programs, restricts itself with them, and from then on starts the
    /// session's commands (see the module docs). Creates `home` and `tmp`.
    ///
    /// Errors: a directory cannot be created, the ruleset cannot be built (a path
    /// that cannot be opened is skipped, not an error), a filter cannot be compiled or
    /// installed, a thread cannot be started, or the mode is `required` and the host
    /// lacks a layer.
    pub fn new(spec: &Spec) -> Result<Confinement, String> {
        for d in [&spec.home, &spec.tmp] {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        let plan = Plan::new(spec.mode, &spec.network_allow, host());
        if spec.mode == Mode::Required {
            if let Some(s) = plan.shortfall() {
                return Err(s);
            }
        }
        let env = base_env(&spec.home, &spec.tmp, &spec.env_names);
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| std::env::split_paths(v).collect())
            .unwrap_or_default();
        if spec.mode == Mode::Off {
            return Ok(Confinement {
                env,
                path,
                plan,
                launcher: None,
            });
        }
        let ruleset = if plan.host.landlock_abi >= 1 {
            Some(
                ruleset(spec, &plan)
                    .map_err(|e| format!("cannot build the Landlock ruleset: {e}"))?,
            )
        } else {
            None
        };
        let filters = if plan.host.seccomp {
            filters(plan.no_network, plan.loopback_only)?
        } else {
            Vec::new()
        };
        let notify = if plan.loopback_only {
            super::loopback::notify_filter()
        } else {
            None
        };
        let launcher = launcher(ruleset, filters, notify)?;
        Ok(Confinement {
            env,
            path,
            plan,
            launcher: Some(launcher),
        })
    }

    /// What this confinement enforces and lacks.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The environment every command gets (before `MURMUR_WORK_ID`).
    pub fn env(&self) -> &[(OsString, OsString)] {
        &self.env
    }

    /// The program to start for `binary`: its path in the first directory of the
    /// built `PATH` that holds it as an executable file, or `binary` itself when none
    /// does (the spawn then fails as it would have). Resolving it here, with the
    /// command's `PATH` rather than `mur`'s, lets the standard library use
    /// `posix_spawn` instead of `fork`.
    pub fn program(&self, binary: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        if binary.contains('/') {
            return PathBuf::from(binary);
        }
        self.path
            .iter()
            .map(|d| d.join(binary))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| PathBuf::from(binary))
    }

    /// Sets `cmd`'s environment: cleared, then the built one.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.env_clear();
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
    }

    /// Starts `cmd`: on the launcher thread, so it inherits the sandbox; directly
    /// when the mode is `off`.
    ///
    /// Errors: the spawn's own, or the launcher is gone.
    pub fn spawn(&self, cmd: Command) -> io::Result<std::process::Child> {
        let Some(tx) = &self.launcher else {
            let mut cmd = cmd;
            return cmd.spawn();
        };
        let (reply, rx) = bounded(1);
        tx.send(Job { cmd, reply })
            .map_err(|_| io::Error::other("the sandbox's launcher thread is gone"))?;
        rx.recv()
            .map_err(|_| io::Error::other("the sandbox's launcher thread is gone"))?
    }
}

/// Starts the launcher thread: it restricts itself (no_new_privs, CAP_SYS_PTRACE
/// dropped from its bounding set, the Landlock ruleset, the seccomp programs, and
/// under a loopback-only network the notify filter whose listener goes to a guard
/// thread started here, unconfined), then spawns every job it is sent. Landlock
/// domains, seccomp filters and no_new_privs belong to a thread and are inherited by
/// the processes it starts; the rest of `mur` stays unrestricted.
///
/// Errors: a thread cannot be started, or the thread cannot restrict itself.
fn launcher(
    ruleset: Option<OwnedFd>,
    filters: Vec<Vec<seccompiler::sock_filter>>,
    notify: Option<Vec<libc::sock_filter>>,
) -> Result<Sender<Job>, String> {
    let (tx, rx) = unbounded::<Job>();
    let (ready_tx, ready_rx) = bounded::<Result<Option<OwnedFd>, String>>(1);
    std::thread::Builder::new()
        .name("sandbox-launcher".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            // SAFETY: raw system calls on the calling thread, with buffers that live
            // through them.
            let restricted =
                unsafe { restrict_thread(ruleset.as_ref(), &filters, notify.as_deref()) };
            drop(ruleset);
            let ok = restricted.is_ok();
            let _ = ready_tx.send(restricted);
            if !ok {
                return;
            }
            for job in rx {
                let mut cmd = job.cmd;
                let _ = job.reply.send(cmd.spawn());
            }
        })
        .map_err(|e| format!("cannot start the sandbox's launcher thread: {e}"))?;
    let listener = ready_rx
        .recv()
        .map_err(|_| "the sandbox's launcher thread ended before it was ready".to_string())??;
    if let Some(l) = listener {
        std::thread::Builder::new()
            .name("netguard".into())
            .stack_size(64 * 1024)
            .spawn(move || super::loopback::serve(l))
            .map_err(|e| format!("cannot start the loopback guard thread: {e}"))?;
    }
    Ok(tx)
}

/// Restricts the calling thread; returns the notify listener when `notify` is given.
///
/// # Safety
///
/// The programs must be valid for the kernel; the thread keeps the restrictions for
/// the rest of its life.
unsafe fn restrict_thread(
    ruleset: Option<&OwnedFd>,
    filters: &[Vec<seccompiler::sock_filter>],
    notify: Option<&[libc::sock_filter]>,
) -> Result<Option<OwnedFd>, String> {
    let err = |what: &str| format!("cannot {what}: {}", io::Error::last_os_error());
    // SAFETY: raw system calls with pointers into live buffers.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(err("set no_new_privs"));
        }
        // A root command loses CAP_SYS_PTRACE (see harden_self); an unprivileged
        // thread never had it, and this fails harmlessly.
        libc::prctl(libc::PR_CAPBSET_DROP, 19, 0, 0, 0); // CAP_SYS_PTRACE
        if let Some(fd) = ruleset {
            if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
                return Err(err("apply the Landlock ruleset"));
            }
        }
        for f in filters {
            let prog = libc::sock_fprog {
                len: f.len() as u16,
                filter: f.as_ptr() as *mut libc::sock_filter,
            };
            let r = libc::syscall(
                libc::SYS_seccomp,
                1u32,
                0u32,
                &prog as *const libc::sock_fprog,
            );
            if r != 0 {
                return Err(err("install the seccomp filter"));
            }
        }
        if let Some(f) = notify {
            let prog = libc::sock_fprog {
                len: f.len() as u16,
                filter: f.as_ptr() as *mut libc::sock_filter,
            };
            let lfd = libc::syscall(
                libc::SYS_seccomp,
                1u32,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32,
                &prog as *const libc::sock_fprog,
            );
            if lfd < 0 {
                return Err(err("install the loopback guard's filter"));
            }
            return Ok(Some(OwnedFd::from_raw_fd(lfd as RawFd)));
        }
    }
    Ok(None)
}

/// The Landlock ruleset of a session, created and filled; its fd is close-on-exec.
fn ruleset(spec: &Spec, plan: &Plan) -> Result<OwnedFd, landlock::RulesetError> {
    let abi = match plan.host.landlock_abi {
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    };
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?;
    if (plan.no_network || plan.loopback_only) && plan.host.landlock_abi >= 4 {
        rs = rs.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    if plan.host.landlock_abi >= 6 {
        rs = rs.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    }
    let mut created = rs.create()?;
    let rw: Vec<&Path> = vec![&spec.workdir, &spec.home, &spec.tmp];
    for p in rw {
        created = add(created, p, all)?;
    }
    for p in DEVICES_RW {
        created = add(created, Path::new(p), all)?;
    }
    for p in SYSTEM_READ
        .iter()
        .map(Path::new)
        .chain(spec.read.iter().map(PathBuf::as_path))
    {
        created = add(created, p, read)?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or(landlock::RulesetError::CreateRuleset(
        landlock::CreateRulesetError::MissingHandledAccess,
    ))
}

/// Adds a rule for `path` when it can be opened; a missing path is skipped. A file
/// gets only the file rights of `access`.
fn add(
    rs: landlock::RulesetCreated,
    path: &Path,
    access: landlock::BitFlags<AccessFs>,
) -> Result<landlock::RulesetCreated, landlock::RulesetError> {
    let Ok(fd) = landlock::PathFd::new(path) else {
        return Ok(rs);
    };
    let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
    let access = if is_dir {
        access
    } else {
        access & AccessFs::from_file(ABI::V7)
    };
    rs.add_rule(landlock::PathBeneath::new(fd, access))
}

/// The seccomp programs: the refused system calls (`EPERM`), `socket(2)` of the IP
/// and packet families when there is no network, `clone(2)` with a namespace flag
/// (`EPERM`); and `clone3(2)` answered `ENOSYS` (its flags are out of a filter's reach;
/// the C library falls back to `clone`).
fn filters(no_network: bool, loopback: bool) -> Result<Vec<Vec<seccompiler::sock_filter>>, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => TargetArch::x86_64,
        "aarch64" => TargetArch::aarch64,
        "riscv64" => TargetArch::riscv64,
        other => return Err(format!("no seccomp filter for the {other} architecture")),
    };
    let e = |err: seccompiler::BackendError| format!("cannot build the seccomp filter: {err}");
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = Default::default();
    for name in DENIED_SYSCALLS {
        if let Some(nr) = syscall_nr(name) {
            rules.insert(nr, Vec::new());
        }
    }
    if no_network {
        let mut socket = Vec::new();
        for fam in [libc::AF_INET, libc::AF_INET6, libc::AF_PACKET] {
            let c = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, fam as u64)
                .map_err(e)?;
            socket.push(SeccompRule::new(vec![c]).map_err(e)?);
        }
        rules.insert(libc::SYS_socket, socket);
    }
    if loopback {
        // TCP only: every IP socket of another type or protocol is refused, as are
        // packet sockets and TCP Fast Open sends (which connect without connect(2)).
        let cond = |arg: u8, op: SeccompCmpOp, v: u64| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, v).map_err(e)
        };
        let mut socket = Vec::new();
        socket.push(
            SeccompRule::new(vec![cond(0, SeccompCmpOp::Eq, libc::AF_PACKET as u64)?])
                .map_err(e)?,
        );
        for fam in [libc::AF_INET, libc::AF_INET6] {
            let fam = fam as u64;
            for ty in [
                libc::SOCK_DGRAM,
                libc::SOCK_RAW,
                libc::SOCK_RDM,
                libc::SOCK_SEQPACKET,
                6,
                10,
            ] {
                socket.push(
                    SeccompRule::new(vec![
                        cond(0, SeccompCmpOp::Eq, fam)?,
                        cond(1, SeccompCmpOp::MaskedEq(0xf), ty as u64)?,
                    ])
                    .map_err(e)?,
                );
            }
            socket.push(
                SeccompRule::new(vec![
                    cond(0, SeccompCmpOp::Eq, fam)?,
                    cond(2, SeccompCmpOp::Gt, libc::IPPROTO_TCP as u64)?,
                ])
                .map_err(e)?,
            );
            socket.push(
                SeccompRule::new(vec![
                    cond(0, SeccompCmpOp::Eq, fam)?,
                    cond(2, SeccompCmpOp::Ge, 1)?,
                    cond(2, SeccompCmpOp::Lt, libc::IPPROTO_TCP as u64)?,
                ])
                .map_err(e)?,
            );
        }
        rules.insert(libc::SYS_socket, socket);
        let fastopen = libc::MSG_FASTOPEN as u64;
        for (nr, arg) in [
            (libc::SYS_sendto, 3u8),
            (libc::SYS_sendmsg, 2),
            (libc::SYS_sendmmsg, 3),
        ] {
            rules.insert(
                nr,
                vec![SeccompRule::new(vec![cond(
                    arg,
                    SeccompCmpOp::MaskedEq(fastopen),
                    fastopen,
                )?])
                .map_err(e)?],
            );
        }
    }
    let mut clone_rules = Vec::new();
    for flag in [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ] {
        let f = flag as u64;
        let c = SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f)
            .map_err(e)?;
        clone_rules.push(SeccompRule::new(vec![c]).map_err(e)?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(e)?;
    let mut clone3 = std::collections::BTreeMap::new();
    clone3.insert(libc::SYS_clone3, Vec::new());
    let enosys = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(e)?;
    let a: seccompiler::BpfProgram = deny.try_into().map_err(e)?;
    let b: seccompiler::BpfProgram = enosys.try_into().map_err(e)?;
    Ok(vec![a, b])
}

/// The number of a system call of [`DENIED_SYSCALLS`] on this architecture, `None`
/// when it has none.
fn syscall_nr(name: &str) -> Option<i64> {
    Some(match name {
        "ptrace" => libc::SYS_ptrace,
        "process_vm_readv" => libc::SYS_process_vm_readv,
        "process_vm_writev" => libc::SYS_process_vm_writev,
        "mount" => libc::SYS_mount,
        "umount2" => libc::SYS_umount2,
        "pivot_root" => libc::SYS_pivot_root,
        "move_mount" => libc::SYS_move_mount,
        "open_tree" => libc::SYS_open_tree,
        "fsopen" => libc::SYS_fsopen,
        "fsmount" => libc::SYS_fsmount,
        "fsconfig" => libc::SYS_fsconfig,
        "fspick" => libc::SYS_fspick,
        "mount_setattr" => libc::SYS_mount_setattr,
        "kexec_load" => libc::SYS_kexec_load,
        "kexec_file_load" => libc::SYS_kexec_file_load,
        "bpf" => libc::SYS_bpf,
        "perf_event_open" => libc::SYS_perf_event_open,
        "init_module" => libc::SYS_init_module,
        "finit_module" => libc::SYS_finit_module,
        "delete_module" => libc::SYS_delete_module,
        "reboot" => libc::SYS_reboot,
        "swapon" => libc::SYS_swapon,
        "swapoff" => libc::SYS_swapoff,
        "unshare" => libc::SYS_unshare,
        "setns" => libc::SYS_setns,
        "keyctl" => libc::SYS_keyctl,
        "add_key" => libc::SYS_add_key,
        "request_key" => libc::SYS_request_key,
        "open_by_handle_at" => libc::SYS_open_by_handle_at,
        "userfaultfd" => libc::SYS_userfaultfd,
        "io_uring_setup" => libc::SYS_io_uring_setup,
        "io_uring_enter" => libc::SYS_io_uring_enter,
        "io_uring_register" => libc::SYS_io_uring_register,
        "acct" => libc::SYS_acct,
        #[cfg(target_arch = "x86_64")]
        "iopl" => libc::SYS_iopl,
        #[cfg(target_arch = "x86_64")]
        "ioperm" => libc::SYS_ioperm,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_landlock_is_named_in_the_shortfall() {
        let host = Host {
            landlock_abi: 0,
            seccomp: true,
        };
        let p = Plan::new(Mode::BestEffort, &[], host);
        let s = p.shortfall().unwrap();
        assert!(s.contains("file system confinement (no Landlock)"), "{s}");
        assert!(
            s.ends_with("(set capabilities.sandbox: required to refuse instead)"),
            "{s}"
        );
        let r = Plan::new(Mode::Required, &[], host).shortfall().unwrap();
        assert!(r.contains("so the capsule is refused"), "{r}");
        assert!(Plan::new(Mode::Off, &[], host).shortfall().is_none());
        let full = Host {
            landlock_abi: 7,
            seccomp: true,
        };
        assert!(Plan::new(Mode::Required, &[], full).shortfall().is_none());
    }

    #[test]
    fn the_environment_is_built_from_the_base_and_named_variables() {
        let env = base_env(Path::new("/h"), Path::new("/t"), &["PATH".to_string()]);
        let names: Vec<&str> = env.iter().filter_map(|(k, _)| k.to_str()).collect();
        assert!(names.contains(&"HOME") && names.contains(&"TMPDIR"));
        assert!(
            names.iter().all(|n| {
                matches!(
                    *n,
                    "PATH"
                        | "HOME"
                        | "TMPDIR"
                        | "TERM"
                        | "LANG"
                        | "LANGUAGE"
                        | "TZ"
                        | "USER"
                        | "LOGNAME"
                ) || n.starts_with("LC_")
            }),
            "{names:?}"
        );
    }
}
