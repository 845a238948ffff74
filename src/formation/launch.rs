//! `mur run --roster` and `mur door`: starting members, their sessions and doors.
//!
//! A formation runs in one process: one session thread and one door per local
//! member, every door on loopback behind the formation token (32 random bytes, hex,
//! minted per launch). The entry member gets the command line's task; the others
//! sleep until called. When the entry member's task ends the formation ends: every
//! running task is canceled, commands stopped, doors closed, every member's
//! `session_end` written. The launch's exit status is the entry task's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crossbeam_channel::select;

use super::board::{Board, Origin};
use super::link::{is_loopback, Link};
use super::wire::{host_of, HttpLink, MemberHandler};
use super::{delegation_deadline, mint_token};
use crate::door::{Door, DoorLimits};
use crate::exit::ExitStatus;
use crate::manifest::roster::{load_roster, Place, Roster, DEFAULT_REQUEST_TIMEOUT_SECS};
use crate::manifest::{AfterTask, Credential};
use crate::progress::Progress;
use crate::session::{self, MemberRole, Outcome, SessionEnd, SessionSpec};
use crate::signals::ShutdownHandle;
use crate::staging::{self, Loaded, StageError};
use crate::tools::peer_file::{self, formation_tag, HandleStore, PeerDoor};

/// The default door address of `mur door`: `127.0.0.1:7431`.
pub const DEFAULT_DOOR_LISTEN: &str = "127.0.0.1:7431";

/// The default door address of a formation member: an ephemeral loopback port.
pub const MEMBER_LISTEN: &str = "127.0.0.1:0";

/// Why a launch did not run.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The roster, a capsule or an option is wrong (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// Something failed at run time (exit status 1).
    #[error("{0}")]
    Runtime(String),
    /// A capsule could not be staged (`member`: the formation member's); the exit
    /// status is the cause's ([`StageError::code`]): 1 for a file that cannot be
    /// written, 2 for a capsule this build cannot stage.
    #[error("{}{source}", member.as_deref().map(|m| format!("member `{m}`: ")).unwrap_or_default())]
    Stage {
        /// The formation member, `None` for `mur run`/`mur door` of one capsule.
        member: Option<String>,
        /// The cause.
        source: StageError,
    },
}

impl LaunchError {
    /// The exit code of `mur` for this error, decided here and nowhere else
    /// ([`crate::exit`]): `Usage` 2, `Runtime` 1, `Stage` its cause's.
    pub fn code(&self) -> u8 {
        match self {
            LaunchError::Usage(_) => crate::exit::EXIT_USAGE,
            LaunchError::Runtime(_) => crate::exit::EXIT_FAILED,
            LaunchError::Stage { source, .. } => source.code(),
        }
    }
}

/// What `mur run --roster` was given, validated.
pub struct LaunchOptions {
    /// The roster file.
    pub roster: PathBuf,
    /// The entry member's task.
    pub task: String,
    /// The formation's deadline, inherited by every member.
    pub deadline: Option<SystemTime>,
    /// `--records-dir`: each member's records go to `DIR/<member>/`.
    pub records_dir: Option<PathBuf>,
    /// `--driver`: the entry member's driver choice.
    pub driver: Option<String>,
}

/// A local member ready to start.
struct Prepared {
    name: String,
    loaded: Loaded,
    callees: Vec<String>,
    listen: SocketAddr,
}

/// The W-RUN-008 warnings for a member that may call `callees` but whose
/// `capabilities.network.allow` does not list the host of their doors.
pub fn egress_warnings(
    member: &str,
    allow: &[String],
    callees: &[(String, String)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (callee, host) in callees {
        let need = if is_loopback(host) {
            "localhost"
        } else {
            host.as_str()
        };
        if !allow.iter().any(|h| h == need) {
            out.push(format!("W-RUN-008: member `{member}`: capabilities.network.allow does not list {need}, where the door of `{callee}` is, so every call-member call from `{member}` to `{callee}` fails; add `{need}` to capabilities.network.allow"));
        }
    }
    out
}

fn read_token(c: &Credential, base: &Path, member: &str) -> Result<String, LaunchError> {
    let t = match c {
        Credential::Env(v) => std::env::var(v).map_err(|_| {
            LaunchError::Usage(format!(
                "member `{member}`: token: environment variable {v} is not set"
            ))
        })?,
        Credential::File(p) => {
            let p = base.join(p);
            std::fs::read_to_string(&p).map_err(|e| {
                LaunchError::Usage(format!(
                    "member `{member}`: token file {}: {e}",
                    p.display()
                ))
            })?
        }
    };
    let t = t.lines().next().unwrap_or("").trim().to_string();
    crate::secrets::register(&t);
    Ok(t)
}

/// Checks a formation without starting anything (`mur check --roster`): the roster and
/// every local member's capsule, as `mur run --roster` would before it stages them.
/// Returns the local members' names, in roster order.
///
/// Errors: [`LaunchError::Usage`] with every diagnostic of the roster, or the first
/// member whose capsule does not validate.
pub fn check_roster(roster: &Path) -> Result<Vec<String>, LaunchError> {
    let opts = LaunchOptions {
        roster: roster.to_path_buf(),
        task: String::new(),
        deadline: None,
        records_dir: None,
        driver: None,
    };
    let (_, _, prepared) = prepare(&opts)?;
    Ok(prepared.into_iter().map(|p| p.name).collect())
}

/// Loads the roster and every local capsule, and prints the W-RUN-008 warnings.
fn prepare(opts: &LaunchOptions) -> Result<(Roster, PathBuf, Vec<Prepared>), LaunchError> {
    let roster = load_roster(&opts.roster)
        .map_err(|e| LaunchError::Usage(staging::errors_in(&opts.roster, &e.diagnostics)))?;
    let base = std::path::absolute(&opts.roster)
        .map_err(|e| LaunchError::Usage(format!("{}: {e}", opts.roster.display())))?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let mut prepared = Vec::new();
    for m in &roster.members {
        let Place::Local { capsule, listen } = &m.place else {
            continue;
        };
        let callees = roster.callees_of(&m.name);
        let loaded = staging::load_capsule(&base.join(capsule), &callees)
            .map_err(|e| LaunchError::Usage(format!("member `{}`: {e}", m.name)))?;
        let hosts: Vec<(String, String)> = callees
            .iter()
            .filter_map(|c| roster.member(c))
            .map(|c| {
                let host = match &c.place {
                    Place::Local { .. } => "localhost".to_string(),
                    Place::Remote { door, .. } => host_of(door),
                };
                (c.name.clone(), host)
            })
            .collect();
        for w in egress_warnings(&m.name, &loaded.manifest.capabilities.network_allow, &hosts) {
            eprintln!("mur: warning: {w}");
        }
        let listen = listen.unwrap_or_else(|| MEMBER_LISTEN.parse().expect("a valid address"));
        prepared.push(Prepared {
            name: m.name.clone(),
            loaded,
            callees,
            listen,
        });
    }
    Ok((roster, base, prepared))
}

/// Fires `out` when either `a` or `b` fires.
fn relay(a: &ShutdownHandle, b: &ShutdownHandle) -> ShutdownHandle {
    let out = ShutdownHandle::new();
    let (ra, rb, o) = (a.receiver(), b.receiver(), out.clone());
    let spawned = std::thread::Builder::new()
        .name("shutdown-relay".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            select! {
                recv(ra) -> _ => {},
                recv(rb) -> _ => {},
            }
            o.fire(0);
        });
    if spawned.is_err() {
        out.fire(0);
    }
    out
}

/// Starts a session thread whose crash fails its tasks instead of leaving their
/// callers waiting.
fn spawn_session(
    name: &str,
    spec: SessionSpec,
    board: Arc<Board>,
    inbox: crossbeam_channel::Receiver<super::board::Incoming>,
    after: AfterTask,
    shutdown: &ShutdownHandle,
    progress: Progress,
) -> Result<JoinHandle<Result<SessionEnd, String>>, LaunchError> {
    let rx = shutdown.receiver();
    let member = name.to_string();
    std::thread::Builder::new()
        .name(format!("session-{name}"))
        .spawn(move || {
            let b = board.clone();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                session::serve(spec, board, inbox, after, rx, progress)
            }));
            match r {
                Ok(Ok(end)) => Ok(end),
                Ok(Err(e)) => {
                    b.fail_all(&format!("{member}'s session could not run: {e}"));
                    Err(e.to_string())
                }
                Err(_) => {
                    b.fail_all(&format!("{member}'s session crashed"));
                    Err(format!("member `{member}`: its session crashed"))
                }
            }
        })
        .map_err(|e| LaunchError::Runtime(format!("cannot start the session of `{name}`: {e}")))
}

/// `mur run --roster`: runs the formation until the entry member's task ends and
/// returns that task's outcome. `signal` is the process's SIGINT/SIGTERM handle.
///
/// # Errors
///
/// [`LaunchError::Usage`] for a roster or capsule that does not validate or stage, a
/// remote token that cannot be read, a door that cannot listen;
/// [`LaunchError::Runtime`] when the entry member's session could not run.
pub fn run_roster(opts: LaunchOptions, signal: &ShutdownHandle) -> Result<Outcome, LaunchError> {
    let (roster, base, prepared) = prepare(&opts)?;
    // Checked before anything is staged or bound.
    if let Some(d) = &opts.records_dir {
        for p in &prepared {
            staging::fresh_records_dir(&d.join(&p.name))
                .map_err(|e| LaunchError::Usage(format!("member `{}`: {e}", p.name)))?;
        }
    }
    let mut runtime_dirs = staging::RuntimeDirs::default();
    let token = mint_token();
    let home = staging::murmur_home();
    let roster_names = Arc::new(
        roster
            .names()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    );
    // Boards and doors first: every link needs its door's URL.
    let mut boards = Vec::new();
    let mut doors: Vec<Door> = Vec::new();
    let mut links: Vec<(String, Arc<dyn Link>)> = Vec::new();
    let mut stores = Vec::new();
    let mut peer_doors: Vec<PeerDoor> = Vec::new();
    for p in &prepared {
        let (board, inbox) = Board::new(p.loaded.manifest.task_acceptance);
        let board = Arc::new(board);
        let mut handler = MemberHandler::new(
            board.clone(),
            &p.name,
            p.loaded
                .manifest
                .description
                .as_deref()
                .unwrap_or("A mur formation member"),
        );
        // share-file's store, served by the member's door (mur-tools(7), "Peer files").
        let store = p.loaded.manifest.exports.peer_files.as_ref().map(|_| {
            Arc::new(HandleStore::new(
                formation_tag(&token),
                p.name.clone(),
                PathBuf::new(),
                peer_file::DEFAULT_MAX_HANDLES,
            ))
        });
        handler.files = store.clone();
        stores.push(store);
        let door = Door::start(
            p.listen,
            token.clone(),
            Arc::new(handler),
            DoorLimits::default(),
        )
        .map_err(|e| LaunchError::Usage(format!("member `{}`: door: {e}", p.name)))?;
        log::info!("member {} door at {}", p.name, door.url());
        peer_doors.push(PeerDoor {
            member: p.name.clone(),
            url: loopback_url(door.local_addr()),
            token: token.clone(),
            tag: formation_tag(&token),
        });
        // A door listening on every address (0.0.0.0, ::) is called on loopback.
        // Its own door: the URL is the endpoint, no card to read.
        links.push((
            p.name.clone(),
            Arc::new(member_link(
                &roster,
                &p.name,
                &loopback_url(door.local_addr()),
                &token,
                false,
            )),
        ));
        boards.push((board, inbox));
        doors.push(door);
    }
    for m in &roster.members {
        if let Place::Remote { door, token: t } = &m.place {
            let secret = match t {
                Some(c) => read_token(c, &base, &m.name)?,
                None => String::new(),
            };
            peer_doors.push(PeerDoor {
                member: m.name.clone(),
                url: door.clone(),
                token: secret.clone(),
                tag: formation_tag(&secret),
            });
            links.push((
                m.name.clone(),
                Arc::new(member_link(&roster, &m.name, door, &secret, true)),
            ));
        }
    }
    let link_of = |n: &str| links.iter().find(|(m, _)| m == n).map(|(_, l)| l.clone());
    let formation_end = ShutdownHandle::new();
    let shutdown = relay(signal, &formation_end);
    let mut threads = Vec::new();
    let mut entry_board = None;
    let mut entry_thread = None;
    for ((p, (board, inbox)), store) in prepared.into_iter().zip(boards).zip(stores) {
        let is_entry = p.name == roster.entry;
        let m = &p.loaded.manifest;
        let choice = match (&opts.driver, &m.inference) {
            (Some(d), Some(_)) if is_entry => d.clone(),
            (_, Some(i)) => i.driver.clone(),
            (_, None) => String::new(),
        };
        if is_entry {
            if let Some(i) = &m.inference {
                if i.choice(&choice).is_none() {
                    let names: Vec<&str> = i.choices.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(LaunchError::Usage(format!(
                        "--driver `{choice}` is not a key of inference.choices of `{}` ({})",
                        p.name,
                        names.join(", ")
                    )));
                }
            }
        }
        let system_prompt = staging::system_prompt(&p.loaded.dir, m)
            .map_err(|e| LaunchError::Usage(format!("member `{}`: {e}", p.name)))?;
        let staged = staging::stage_member(&home, &p.loaded.dir, &p.loaded.text, m, &p.callees)
            .map_err(|source| LaunchError::Stage {
                member: Some(p.name.clone()),
                source,
            })?;
        runtime_dirs.hold(&staged.runtime_dir);
        let records_dir = match &opts.records_dir {
            Some(d) => d.join(&p.name),
            None => staging::default_records_dir(&home, &p.loaded.dir, &staged.session_id),
        };
        let callees = p
            .callees
            .iter()
            .filter_map(|c| link_of(c).map(|l| (c.clone(), l)))
            .collect();
        let call_deadline = delegation_deadline(m.lifecycle.delegation_deadline_secs);
        let peer_files = peer_files_of(m, store, &records_dir, &peer_doors);
        let spec = SessionSpec {
            manifest: p.loaded.manifest,
            staged,
            records_dir,
            deadline: opts.deadline,
            choice,
            system_prompt,
            member: Some(MemberRole {
                name: p.name.clone(),
                callees,
                roster: roster_names.clone(),
                call_deadline,
            }),
            peer_files,
        };
        let (after, progress) = if is_entry {
            (AfterTask::Exit, Progress::start())
        } else {
            (AfterTask::Sleep, Progress::none())
        };
        let handle = spawn_session(
            &p.name,
            spec,
            board.clone(),
            inbox,
            after,
            &shutdown,
            progress,
        )?;
        if is_entry {
            entry_board = Some(board);
            entry_thread = Some(handle);
        } else {
            threads.push((p.name, handle));
        }
    }
    let (Some(entry_board), Some(entry_thread)) = (entry_board, entry_thread) else {
        return Err(LaunchError::Usage(format!(
            "the entry member `{}` is not a local member",
            roster.entry
        )));
    };
    let first = entry_board.submit(&opts.task, Origin::CommandLine);
    let entry = entry_thread.join();
    // The entry task ended: the formation ends.
    formation_end.fire(0);
    for (name, t) in threads {
        match t.join() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("mur: member `{name}`: {e}"),
            Err(_) => eprintln!("mur: member `{name}`: its session thread panicked"),
        }
    }
    for d in doors {
        d.shutdown();
    }
    // Each member killed only what was positively its own; whatever is left (a process
    // that cleared or forged MURMUR_SESSION and left its group) dies with the formation.
    for s in crate::exec::procs::sweep(crate::exec::procs::SweepScope::All, &[]) {
        eprintln!(
            "mur: killed pid {} ({}), left running by a formation member's command{}",
            s.pid,
            s.argv.join(" "),
            s.work_id.map(|w| format!(" {w}")).unwrap_or_default()
        );
    }
    let end = match entry {
        Ok(Ok(end)) => end,
        Ok(Err(e)) => return Err(LaunchError::Runtime(e)),
        Err(_) => {
            return Err(LaunchError::Runtime(format!(
                "the entry member `{}`'s session panicked",
                roster.entry
            )))
        }
    };
    let records_dir = opts.records_dir.clone().unwrap_or_default();
    Ok(end.tasks.into_iter().last().unwrap_or(Outcome {
        task_id: first.id,
        status: ExitStatus::Canceled,
        answer: None,
        error: Some("interrupted by a signal before the task started".into()),
        records_dir,
    }))
}

/// `mur door`: serves one capsule as a standalone A2A agent at `listen` behind
/// `token`, its card advertising `advertise_url` when given, until `signal` fires.
/// Prints `door: <url>` on stdout once it listens, and logs a warning when it listens
/// beyond loopback over plain HTTP ([`crate::door::exposure_warning`]).
///
/// # Errors
///
/// [`LaunchError::Usage`] for a capsule that does not validate or stage, or an address
/// that cannot be bound; [`LaunchError::Runtime`] when the session could not run.
pub fn run_door(
    capsule: &Path,
    listen: SocketAddr,
    token: String,
    advertise_url: Option<String>,
    records_dir: Option<PathBuf>,
    signal: &ShutdownHandle,
) -> Result<SessionEnd, LaunchError> {
    if let Some(u) = &advertise_url {
        crate::door::check_advertised_url(u)
            .map_err(|e| LaunchError::Usage(format!("--advertise-url: {e}")))?;
    }
    let loaded = staging::load_capsule(capsule, &[]).map_err(LaunchError::Usage)?;
    let m = &loaded.manifest;
    let choice = m
        .inference
        .as_ref()
        .map(|i| i.driver.clone())
        .unwrap_or_default();
    let system_prompt = staging::system_prompt(&loaded.dir, m).map_err(LaunchError::Usage)?;
    let records_dir = records_dir
        .map(|d| staging::fresh_records_dir(&d))
        .transpose()
        .map_err(LaunchError::Usage)?;
    let home = staging::murmur_home();
    let staged = staging::stage(&home, &loaded.dir, &loaded.text, m).map_err(|source| {
        LaunchError::Stage {
            member: None,
            source,
        }
    })?;
    let mut runtime_dirs = staging::RuntimeDirs::default();
    runtime_dirs.hold(&staged.runtime_dir);
    let records_dir = records_dir
        .unwrap_or_else(|| staging::default_records_dir(&home, &loaded.dir, &staged.session_id));
    let (board, inbox) = Board::new(m.task_acceptance);
    let board = Arc::new(board);
    if m.capabilities.peer_fetch {
        return Err(LaunchError::Usage("capabilities.peer_fetch grants fetch-peer-file, which redeems handles from the members of a formation; `mur door` serves one capsule with no formation to fetch from: remove the grant, or run the capsule as a formation member".into()));
    }
    let mut handler = MemberHandler::new(
        board.clone(),
        &m.name,
        m.description.as_deref().unwrap_or("A mur capsule"),
    );
    // Handles minted behind `mur door` carry its token's tag and its capsule's name.
    let store = m.exports.peer_files.as_ref().map(|_| {
        Arc::new(HandleStore::new(
            formation_tag(&token),
            m.name.clone(),
            PathBuf::new(),
            peer_file::DEFAULT_MAX_HANDLES,
        ))
    });
    handler.files = store.clone();
    let peer_files = peer_files_of(m, store, &records_dir, &[]);
    if let Some(w) = crate::door::exposure_warning(listen, advertise_url.as_deref()) {
        log::warn!(target: "mur::door", "{w}");
    }
    let limits = DoorLimits {
        advertised_url: advertise_url,
        ..DoorLimits::default()
    };
    let door = Door::start(listen, token, Arc::new(handler), limits)
        .map_err(|e| LaunchError::Usage(format!("door: {e}")))?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "door: {}", door.url());
        let _ = out.flush();
    }
    let spec = SessionSpec {
        manifest: loaded.manifest,
        staged,
        records_dir,
        deadline: None,
        choice,
        system_prompt,
        member: None,
        peer_files,
    };
    let t = spawn_session(
        "door",
        spec,
        board,
        inbox,
        AfterTask::Sleep,
        signal,
        Progress::none(),
    )?;
    let end = t.join();
    door.shutdown();
    match end {
        Ok(Ok(end)) => Ok(end),
        Ok(Err(e)) => Err(LaunchError::Runtime(e)),
        Err(_) => Err(LaunchError::Runtime("the session thread panicked".into())),
    }
}

/// A session's peer-file side: `store` (share-file, snapshots in the records'
/// `peer-files/`) and, with `capabilities.peer_fetch`, the formation's doors.
fn peer_files_of(
    m: &crate::manifest::Manifest,
    store: Option<Arc<HandleStore>>,
    records_dir: &Path,
    doors: &[PeerDoor],
) -> Option<peer_file::PeerFiles> {
    if let Some(s) = &store {
        s.set_dir(records_dir.join("peer-files"));
    }
    let doors = if m.capabilities.peer_fetch {
        doors.to_vec()
    } else {
        Vec::new()
    };
    (store.is_some() || !doors.is_empty()).then(|| peer_file::PeerFiles {
        store,
        export_root: m.exports.peer_files.clone().unwrap_or_default(),
        doors,
        max_file_bytes: peer_file::DEFAULT_MAX_FILE_BYTES,
        network_allow: m.capabilities.network_allow.clone(),
    })
}

/// The link to member `name`'s door at `url`, with its roster request timeout;
/// `discover`: find the endpoint from the agent card (a remote member's address).
fn member_link(roster: &Roster, name: &str, url: &str, token: &str, discover: bool) -> HttpLink {
    let secs = roster
        .member(name)
        .map_or(DEFAULT_REQUEST_TIMEOUT_SECS, |m| m.request_timeout_secs());
    let setting = format!("members.{name}.request_timeout_secs in roster.yaml");
    HttpLink::with(url, token, Duration::from_secs(secs), &setting, discover)
}

/// The URL a member's door is called at: its own address, or loopback when it listens
/// on every address (`0.0.0.0`, `::`), which is no address to call.
fn loopback_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => {
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
        }
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => {
            std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        }
        ip => ip,
    };
    format!("http://{}/", SocketAddr::new(ip, addr.port()))
}
