//! Peer files: the machinery under share-file and fetch-peer-file (spec, "The twelve";
//! mur-tools(7), "Peer files").
//!
//! - [`open_beneath`] opens one file below a directory without following any symlink
//!   on the way (openat2 `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`; where the kernel
//!   lacks openat2, a walk of `openat(O_NOFOLLOW)` one component at a time) and
//!   refuses anything but a regular file.
//! - [`HandleStore::share`] copies it, hashing, into an immutable snapshot in the
//!   session's records and mints a [`Handle`]: an opaque capability with the file's
//!   name, size and sha256, a random id and a 256-bit secret. The store keeps only a
//!   hash of the secret; a door serves the snapshot to whoever shows the formation
//!   token and the secret ([`crate::door::files`]).
//! - [`DoorReader`] streams a handle's bytes from the issuing member's door in
//!   [`crate::door::files::CHUNK_BYTES`] ranges; [`store_fetched`] writes them into
//!   the workdir under one safe name, atomically (a temporary file, then a rename that
//!   never follows a link and, unless told, never replaces anything), checking the
//!   size as it goes (stopping at the first byte past it) and the sha256 at the end.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use ring::digest::{Context, SHA256};
use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::door::files::{FileSource, Served, CHUNK_BYTES};

/// The largest file share-file snapshots and fetch-peer-file stores unless the
/// capsule says otherwise: 1 GiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024 * 1024;

/// How many handles one session may mint: 64.
pub const DEFAULT_MAX_HANDLES: usize = 64;

/// The longest file name fetch-peer-file stores: 255 bytes (the Linux limit).
pub const MAX_NAME_BYTES: usize = 255;

/// The prefix of every handle (format version 1).
pub const HANDLE_PREFIX: &str = "mph1";

/// A peer-file handle: what share-file returns and fetch-peer-file redeems.
///
/// Its text is `mph1.<formation tag>.<member>.<id>.<size>.<sha256>.<secret>`: the
/// formation's tag (16 hex digits derived from the formation token, which it does not
/// reveal), the issuing member, the id (`pf` + a lowercase ULID), the size in bytes,
/// the sha256 (64 hex digits) and the secret (64 hex digits). No path is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    /// The formation tag ([`formation_tag`]).
    pub tag: String,
    /// The issuing member's name.
    pub member: String,
    /// The handle id, `pf…` (recorded; the secret never is).
    pub id: String,
    /// The snapshot's size in bytes.
    pub size: u64,
    /// The snapshot's sha256, lowercase hex.
    pub sha256: String,
    /// The secret, 64 lowercase hex digits.
    pub secret: String,
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Handle {
    /// The handle's text.
    pub fn text(&self) -> String {
        format!(
            "{HANDLE_PREFIX}.{}.{}.{}.{}.{}.{}",
            self.tag, self.member, self.id, self.size, self.sha256, self.secret
        )
    }

    /// Reads a handle's text.
    ///
    /// # Errors
    ///
    /// A sentence saying what is wrong (not a handle, truncated, a part malformed).
    pub fn parse(text: &str) -> Result<Handle, String> {
        const BAD: &str = "is not a peer-file handle";
        let t = text.trim();
        let parts: Vec<&str> = t.split('.').collect();
        if parts.first() != Some(&HANDLE_PREFIX) {
            return Err(format!("`handle` {BAD}: a handle starts with `{HANDLE_PREFIX}.`; pass the handle share-file returned, whole"));
        }
        if parts.len() != 7 {
            return Err(format!("`handle` {BAD}: it has {} parts, a handle has 7; it may be truncated: pass it whole", parts.len()));
        }
        let (tag, member, id, size, sha, secret) =
            (parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]);
        let member_ok = !member.is_empty()
            && member.len() <= 64
            && member
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let id_ok = id.len() == 28
            && id.starts_with("pf")
            && id[2..].bytes().all(|b| b.is_ascii_alphanumeric());
        let size_ok =
            !size.is_empty() && size.len() <= 20 && size.bytes().all(|b| b.is_ascii_digit());
        if !is_hex(tag, 16)
            || !member_ok
            || !id_ok
            || !size_ok
            || !is_hex(sha, 64)
            || !is_hex(secret, 64)
        {
            return Err(format!("`handle` {BAD}: a part of it is malformed; it may be truncated or altered: pass the handle share-file returned, whole"));
        }
        let size = size
            .parse()
            .map_err(|_| format!("`handle` {BAD}: its size does not fit 64 bits"))?;
        Ok(Handle {
            tag: tag.into(),
            member: member.into(),
            id: id.into(),
            size,
            sha256: sha.into(),
            secret: secret.into(),
        })
    }
}

/// The formation tag of a formation token: the first 16 hex digits of
/// sha256(`mur peer-file formation\0` ‖ token). It tells formations apart without
/// revealing the token.
pub fn formation_tag(token: &str) -> String {
    let mut c = Context::new(&SHA256);
    c.update(b"mur peer-file formation\0");
    c.update(token.as_bytes());
    hex(c.finish().as_ref())[..16].to_string()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha_hex(b: &[u8]) -> String {
    hex(ring::digest::digest(&SHA256, b).as_ref())
}

/// Checks a path share-file is given, relative to the export root: not empty, not
/// absolute, no NUL, no empty, `.` or `..` component. Returns its components.
///
/// # Errors
///
/// A sentence naming the path and what is wrong with it.
pub fn check_share_path(rel: &str) -> Result<Vec<&str>, String> {
    let shown = rel.escape_debug();
    if rel.is_empty() {
        return Err(
            "'share-file' needs `path`, a file's path relative to the export root; it is empty"
                .into(),
        );
    }
    if rel.contains('\0') {
        return Err(format!(
            "'share-file' cannot share `{shown}`: the path contains a NUL byte"
        ));
    }
    if rel.starts_with('/') {
        return Err(format!("'share-file' cannot share `{shown}`: the path is absolute; give it relative to the export root"));
    }
    let comps: Vec<&str> = rel.split('/').collect();
    if comps.contains(&"..") {
        return Err(format!("'share-file' cannot share `{shown}`: `..` is not allowed in the path; give a path below the export root"));
    }
    if comps.iter().any(|c| c.is_empty() || *c == ".") {
        return Err(format!("'share-file' cannot share `{shown}`: the path has an empty or `.` component; name the file plainly, e.g. `dir/file.txt`"));
    }
    if rel.len() > 4096 {
        return Err(format!(
            "'share-file' cannot share a path of {} bytes: the limit is 4096",
            rel.len()
        ));
    }
    Ok(comps)
}

/// Why a file could not be opened beneath a directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// A component is a symlink (or the path would leave the directory).
    #[error(
        "the path goes through a symlink or leaves the directory; share-file follows no symlink"
    )]
    Symlink,
    /// No such file.
    #[error("there is no such file")]
    NotFound,
    /// Not a regular file: a directory, FIFO, socket or device.
    #[error("it is not a regular file (it is {0}); only regular files can be shared")]
    NotRegular(&'static str),
    /// Any other I/O error.
    #[error("{0}")]
    Io(String),
}

fn errno_open(e: rustix::io::Errno) -> OpenError {
    use rustix::io::Errno;
    match e {
        Errno::LOOP | Errno::XDEV => OpenError::Symlink,
        Errno::NOENT => OpenError::NotFound,
        Errno::NOTDIR => OpenError::NotRegular("a path through something that is not a directory"),
        other => OpenError::Io(io::Error::from(other).to_string()),
    }
}

/// Opens `comps` (checked by [`check_share_path`]) beneath the directory `base`
/// without following any symlink, and returns the file and its size. Refuses any
/// file that is not regular. The open does not block on a FIFO (`O_NONBLOCK`) and
/// never acquires a terminal (`O_NOCTTY`); `O_NONBLOCK` is cleared afterwards.
///
/// # Errors
///
/// [`OpenError`].
pub fn open_beneath(base: &Path, comps: &[&str]) -> Result<(File, u64), OpenError> {
    let dir = rustix::fs::open(
        base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_open)?;
    let rel = comps.join("/");
    let flags =
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match rustix::fs::openat2(
        &dir,
        rel.as_str(),
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(rustix::io::Errno::NOSYS) => walk_nofollow(dir, comps, flags)?,
        r => r.map_err(errno_open)?,
    };
    finish_open(fd)
}

/// The fallback without openat2: every directory component opened with
/// `O_DIRECTORY | O_NOFOLLOW` from the one before, the last with `O_NOFOLLOW`.
fn walk_nofollow(dir: OwnedFd, comps: &[&str], last: OFlags) -> Result<OwnedFd, OpenError> {
    let mut cur = dir;
    for (i, c) in comps.iter().enumerate() {
        let f = if i + 1 == comps.len() {
            last
        } else {
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
        };
        cur = rustix::fs::openat(&cur, *c, f, Mode::empty()).map_err(|e| match e {
            rustix::io::Errno::NOTDIR if i + 1 < comps.len() => {
                // O_DIRECTORY|O_NOFOLLOW on a symlink answers ENOTDIR.
                match rustix::fs::statat(&cur, *c, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st)
                        if rustix::fs::FileType::from_raw_mode(st.st_mode)
                            == rustix::fs::FileType::Symlink =>
                    {
                        OpenError::Symlink
                    }
                    _ => errno_open(e),
                }
            }
            e => errno_open(e),
        })?;
    }
    Ok(cur)
}

fn finish_open(fd: OwnedFd) -> Result<(File, u64), OpenError> {
    use rustix::fs::FileType as T;
    let st = rustix::fs::fstat(&fd).map_err(errno_open)?;
    let kind = match T::from_raw_mode(st.st_mode) {
        T::RegularFile => None,
        T::Directory => Some("a directory"),
        T::Fifo => Some("a FIFO"),
        T::Socket => Some("a socket"),
        T::CharacterDevice => Some("a character device"),
        T::BlockDevice => Some("a block device"),
        T::Symlink => Some("a symlink"),
        _ => Some("of an unknown type"),
    };
    if let Some(k) = kind {
        return Err(OpenError::NotRegular(k));
    }
    let fl = rustix::fs::fcntl_getfl(&fd).map_err(errno_open)?;
    rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK).map_err(errno_open)?;
    Ok((File::from(fd), st.st_size as u64))
}

/// Copies `src`, which declared `declared` bytes, into a new file in `dir`, hashing;
/// returns the temporary file, the size and the sha256.
///
/// # Errors
///
/// A sentence: the file is over `max` bytes, it grew or shrank while it was copied,
/// or the copy failed. Nothing is left behind in `dir`.
pub fn snapshot(
    mut src: impl Read,
    declared: u64,
    max: u64,
    dir: &Path,
) -> Result<(tempfile::NamedTempFile, u64, String), String> {
    if declared > max {
        return Err(format!(
            "the file is {declared} bytes, over the limit of {max} bytes; nothing was shared"
        ));
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".snapshot-")
        .tempfile_in(dir)
        .map_err(|e| format!("cannot create the snapshot in the records: {e}"))?;
    let (n, digest) = copy_hashed(&mut src, declared, tmp.as_file_mut()).map_err(|e| match e {
        CopyError::Read(e) => format!("reading the file failed: {e}"),
        CopyError::Over => format!("the file grew while it was copied (it was {declared} bytes); nothing was shared: share it again once it is no longer being written"),
        CopyError::Write(e) => format!("writing the snapshot failed: {e}"),
    })?;
    if n < declared {
        return Err(format!("the file shrank while it was copied (from {declared} to {n} bytes); nothing was shared: share it again once it is no longer being written"));
    }
    tmp.as_file()
        .sync_data()
        .map_err(|e| format!("writing the snapshot failed: {e}"))?;
    Ok((tmp, n, digest))
}

/// Why [`copy_hashed`] stopped.
enum CopyError {
    /// Reading the source failed.
    Read(io::Error),
    /// The source gave more than the bytes allowed.
    Over,
    /// Writing the copy failed.
    Write(io::Error),
}

/// Copies `src` into `dst` while hashing it, stopping at the first byte past `limit`;
/// returns the bytes copied and their sha256 (lowercase hex). One pass, a 256 KiB
/// buffer: memory does not grow with the file.
fn copy_hashed(
    src: &mut impl Read,
    limit: u64,
    dst: &mut File,
) -> Result<(u64, String), CopyError> {
    let mut ctx = Context::new(&SHA256);
    let mut buf = vec![0u8; 256 * 1024];
    let mut n: u64 = 0;
    loop {
        let k = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        n += k as u64;
        if n > limit {
            return Err(CopyError::Over);
        }
        ctx.update(&buf[..k]);
        dst.write_all(&buf[..k]).map_err(CopyError::Write)?;
    }
    Ok((n, hex(ctx.finish().as_ref())))
}

/// One handle this session minted.
struct Issued {
    secret_sha: String,
    file: Arc<File>,
    size: u64,
}

/// What share-file minted: the handle and where the snapshot lies.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The handle.
    pub handle: Handle,
    /// The file's name (its last path component).
    pub name: String,
    /// The snapshot, in the records' `peer-files/`.
    pub snapshot: PathBuf,
}

/// The handles one member minted: the door's [`FileSource`], and the minting.
pub struct HandleStore {
    tag: String,
    member: String,
    dir: Mutex<PathBuf>,
    max_handles: usize,
    issued: Mutex<std::collections::HashMap<String, Issued>>,
}

impl HandleStore {
    /// A store for `member` of the formation whose token has tag `tag`, keeping
    /// snapshots in `dir` (created when missing), minting at most `max_handles`.
    pub fn new(tag: String, member: String, dir: PathBuf, max_handles: usize) -> HandleStore {
        HandleStore {
            tag,
            member,
            dir: Mutex::new(dir),
            max_handles,
            issued: Mutex::new(Default::default()),
        }
    }

    /// Moves where later snapshots are kept (a formation knows a member's records
    /// directory only once it is staged, after its door started).
    pub fn set_dir(&self, dir: PathBuf) {
        *self.dir.lock() = dir;
    }

    /// share-file: opens `rel` beneath `root` (see [`open_beneath`]), snapshots it
    /// (at most `max` bytes) and mints a handle.
    ///
    /// # Errors
    ///
    /// A sentence for the model: what was wrong and how to fix it.
    pub fn share(&self, root: &Path, rel: &str, max: u64) -> Result<Shared, String> {
        let comps = check_share_path(rel)?;
        if self.issued.lock().len() >= self.max_handles {
            return Err(format!(
                "'share-file' minted no handle: this session has minted {} handles, the limit",
                self.max_handles
            ));
        }
        let (file, size) = open_beneath(root, &comps)
            .map_err(|e| format!("'share-file' cannot share `{}`: {e}", rel.escape_debug()))?;
        let dir = self.dir.lock().clone();
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("'share-file' cannot create the snapshot directory: {e}"))?;
        let (tmp, size, sha) = snapshot(&file, size, max, &dir)
            .map_err(|e| format!("'share-file' cannot share `{}`: {e}", rel.escape_debug()))?;
        let id = format!("pf{}", ulid::Ulid::new().to_string().to_lowercase());
        let mut secret = [0u8; 32];
        rand::Rng::fill(&mut rand::rngs::OsRng, &mut secret);
        let secret = hex(&secret);
        let path = dir.join(&id);
        let file = tmp
            .persist_noclobber(&path)
            .map_err(|e| format!("'share-file' cannot keep the snapshot: {}", e.error))?;
        let mut issued = self.issued.lock();
        if issued.len() >= self.max_handles {
            let _ = std::fs::remove_file(&path);
            return Err(format!(
                "'share-file' minted no handle: this session has minted {} handles, the limit",
                self.max_handles
            ));
        }
        issued.insert(
            id.clone(),
            Issued {
                secret_sha: sha_hex(secret.as_bytes()),
                file: Arc::new(file),
                size,
            },
        );
        Ok(Shared {
            handle: Handle {
                tag: self.tag.clone(),
                member: self.member.clone(),
                id,
                size,
                sha256: sha,
                secret,
            },
            name: comps.last().copied().unwrap_or_default().to_string(),
            snapshot: path,
        })
    }
}

impl FileSource for HandleStore {
    fn redeem(&self, id: &str, secret: &str) -> Option<Served> {
        let issued = self.issued.lock();
        let i = issued.get(id)?;
        // Compare hashes: no timing signal about the secret itself.
        let given = sha_hex(secret.as_bytes());
        let same = given
            .bytes()
            .zip(i.secret_sha.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
        same.then(|| Served {
            file: i.file.clone(),
            size: i.size,
        })
    }
}

/// A door a session may fetch peer files from: a formation member's, or a remote
/// `mur door` the roster names.
#[derive(Clone)]
pub struct PeerDoor {
    /// The member's roster name.
    pub member: String,
    /// The door's base URL (never shown to the model).
    pub url: String,
    /// The bearer token for it (never shown to the model).
    pub token: String,
    /// [`formation_tag`] of `token`: the tag of the handles that door mints.
    pub tag: String,
}

/// A session's peer-file side: what share-file mints into and where fetch-peer-file
/// may fetch from. Built by the formation launch (or `mur door`); `None` in a plain
/// `mur run`.
#[derive(Clone, Default)]
pub struct PeerFiles {
    /// The store share-file mints into, when `exports.peer_files` is declared; the
    /// session's door serves it.
    pub store: Option<Arc<HandleStore>>,
    /// `exports.peer_files` as declared: the export root, relative to the workdir.
    pub export_root: PathBuf,
    /// The doors fetch-peer-file may redeem handles at, when
    /// `capabilities.peer_fetch` is granted.
    pub doors: Vec<PeerDoor>,
    /// The largest file either tool handles, in bytes ([`DEFAULT_MAX_FILE_BYTES`]).
    pub max_file_bytes: u64,
    /// `capabilities.network.allow`: a door is fetched from only when it lists the
    /// door's host (`localhost` for a loopback door), as for call-member.
    pub network_allow: Vec<String>,
}

impl PeerFiles {
    /// The egress check of `door` (W-RUN-008 when `network_allow` does not list its
    /// host): `Err` with the refusal.
    ///
    /// # Errors
    ///
    /// The refusal text, naming what to add to `capabilities.network.allow`.
    pub fn egress(&self, door: &PeerDoor) -> Result<(), String> {
        let host = door
            .url
            .parse::<ureq::http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_string))
            .unwrap_or_default();
        let h = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = h == "localhost"
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let need = if loopback { "localhost" } else { h };
        if self.network_allow.iter().any(|a| a == need) {
            Ok(())
        } else {
            Err(format!("W-RUN-008: capabilities.network.allow does not list {need}, so {}'s door cannot be reached from this capsule; nothing was fetched", door.member))
        }
    }

    /// The door that minted `h`: the one whose token has the handle's tag, its roster
    /// name equal to the handle's member when several share the tag (the formation's
    /// own members all do).
    pub fn door_of(&self, h: &Handle) -> Option<&PeerDoor> {
        let same: Vec<&PeerDoor> = self.doors.iter().filter(|d| d.tag == h.tag).collect();
        same.iter()
            .find(|d| d.member == h.member)
            .copied()
            .or_else(|| (same.len() == 1).then(|| same[0]))
    }
}

/// Checks the file name fetch-peer-file stores under: one component, 1 to
/// [`MAX_NAME_BYTES`] bytes, no `/`, `\`, NUL or control character, not `.` or `..`.
///
/// # Errors
///
/// A sentence naming the name and what is wrong with it.
pub fn check_fetch_name(name: &str) -> Result<(), String> {
    let shown = name.escape_debug();
    let why = if name.is_empty() {
        "it is empty"
    } else if name == "." || name == ".." {
        "`.` and `..` are not file names"
    } else if name.contains('/') || name.contains('\\') {
        "it contains `/` or `\\`; the file is stored directly in the workdir under one plain name"
    } else if name.contains('\0') {
        "it contains a NUL byte"
    } else if name.chars().any(char::is_control) {
        "it contains a control character"
    } else if name.len() > MAX_NAME_BYTES {
        "it is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(format!("'fetch-peer-file' cannot store the file as `{shown}`: {why}; give `name` as a plain file name such as `report.csv`"))
}

/// What fetch-peer-file stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The file's path relative to the workdir (its name).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256.
    pub sha256: String,
}

/// Writes `src` into `workdir/<name>` atomically: a temporary file in the workdir,
/// checked against `size` (the first byte past it stops the fetch) and `sha256`,
/// then renamed into place. The rename never follows a link; without `overwrite` it
/// replaces nothing (not even a dangling symlink); with it, it replaces a file or a
/// link itself, never a directory.
///
/// # Errors
///
/// A sentence for the model. The workdir is then as it was.
pub fn store_fetched(
    workdir: &Path,
    name: &str,
    overwrite: bool,
    size: u64,
    sha256: &str,
    max: u64,
    mut src: impl Read,
) -> Result<Stored, String> {
    check_fetch_name(name)?;
    if size > max {
        return Err(format!("'fetch-peer-file' fetched nothing: the file is {size} bytes, over this capsule's limit of {max} bytes"));
    }
    let target = workdir.join(name);
    let existing = std::fs::symlink_metadata(&target);
    match &existing {
        Ok(_) if !overwrite => {
            return Err(format!("'fetch-peer-file' fetched nothing: `{}` exists in the workdir; pass another `name`, or `overwrite: true` to replace it", name.escape_debug()))
        }
        Ok(m) if m.is_dir() => {
            return Err(format!("'fetch-peer-file' fetched nothing: `{}` is a directory in the workdir; pass another `name`", name.escape_debug()))
        }
        _ => {}
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".mur-fetch-")
        .tempfile_in(workdir)
        .map_err(|e| format!("'fetch-peer-file' cannot write into the workdir: {e}"))?;
    let (n, got) = copy_hashed(&mut src, size, tmp.as_file_mut()).map_err(|e| match e {
        CopyError::Read(e) => format!("'fetch-peer-file' fetched nothing: {e}"),
        CopyError::Over => format!("'fetch-peer-file' fetched nothing: the peer sent more than the {size} bytes the handle names; the partial file was removed"),
        CopyError::Write(e) => format!("'fetch-peer-file' fetched nothing: writing into the workdir failed: {e}"),
    })?;
    if n < size {
        return Err(format!("'fetch-peer-file' fetched nothing: the peer sent {n} of the {size} bytes the handle names; the partial file was removed"));
    }
    if got != sha256 {
        return Err("'fetch-peer-file' fetched nothing: the bytes the peer sent do not have the sha256 the handle names; the file was removed".into());
    }
    tmp.as_file()
        .sync_data()
        .map_err(|e| format!("'fetch-peer-file' fetched nothing: {e}"))?;
    let r = if overwrite {
        tmp.persist(&target).map(drop)
    } else {
        tmp.persist_noclobber(&target).map(drop)
    };
    r.map_err(|e| {
        if e.error.kind() == io::ErrorKind::AlreadyExists {
            format!("'fetch-peer-file' fetched nothing: `{}` appeared in the workdir meanwhile; pass another `name`, or `overwrite: true`", name.escape_debug())
        } else {
            format!("'fetch-peer-file' fetched nothing: storing the file failed: {}", e.error)
        }
    })?;
    Ok(Stored {
        name: name.into(),
        size,
        sha256: got,
    })
}

/// Streams a handle's bytes from the issuing member's door: consecutive `Range`
/// requests of at most [`CHUNK_BYTES`] on one agent (one kept-alive connection).
/// Each answer must be 200 (the whole file, first request only) or 206 with a
/// `Content-Range` that starts where the last one ended and names the handle's size;
/// a 404 reads as an unknown or revoked handle. Never buffers more than one chunk.
pub struct DoorReader {
    agent: ureq::Agent,
    url: String,
    auth: String,
    secret: String,
    size: u64,
    offset: u64,
    chunk: Vec<u8>,
    pos: usize,
    done: bool,
    asked: bool,
}

impl DoorReader {
    /// A reader of `handle` from the door at `door_url` (its base URL, e.g.
    /// `http://127.0.0.1:8080/`) with bearer `token`; `timeout` bounds each request.
    pub fn new(
        door_url: &str,
        token: &str,
        handle: &Handle,
        timeout: std::time::Duration,
    ) -> DoorReader {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("mur/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        DoorReader {
            agent,
            url: format!(
                "{}/peer-files/{}",
                door_url.trim_end_matches('/'),
                handle.id
            ),
            auth: format!("Bearer {token}"),
            secret: handle.secret.clone(),
            size: handle.size,
            offset: 0,
            chunk: Vec::new(),
            pos: 0,
            done: false,
            asked: false,
        }
    }

    fn next_chunk(&mut self) -> io::Result<()> {
        let fail = |m: String| io::Error::other(m);
        let mut resp = self
            .agent
            .get(&self.url)
            .header("Authorization", &self.auth)
            .header(crate::door::files::SECRET_HEADER, &self.secret)
            .header("Range", format!("bytes={}-", self.offset))
            .call()
            .map_err(|e| fail(format!("the issuing member's door did not answer: {e}")))?;
        let status = resp.status().as_u16();
        match status {
            200 | 206 => {}
            404 => return Err(fail("the issuing member's door does not know this handle (it may have ended, or the handle was altered)".into())),
            401 => return Err(fail("the issuing member's door refused this formation's token: the handle is from another formation".into())),
            416 if self.offset >= self.size => {
                self.done = true;
                return Ok(());
            }
            s => return Err(fail(format!("the issuing member's door answered HTTP {s}"))),
        }
        let start = if status == 200 {
            0
        } else {
            let cr = resp
                .headers()
                .get("content-range")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            parse_content_range(cr, self.size)
                .ok_or_else(|| fail(format!("the issuing member's door answered a range that does not fit the handle (`{}`)", cr.escape_debug())))?
        };
        if start != self.offset {
            return Err(fail(
                "the issuing member's door answered bytes from the wrong offset".into(),
            ));
        }
        // At most one chunk, plus one byte to see a door that sends more.
        let limit = CHUNK_BYTES.min(self.size.saturating_sub(self.offset)) + 1;
        let mut body = Vec::new();
        resp.body_mut()
            .as_reader()
            .take(limit)
            .read_to_end(&mut body)
            .map_err(|e| {
                fail(format!(
                    "reading from the issuing member's door failed: {e}"
                ))
            })?;
        if status == 200 {
            // The whole file: nothing more to ask for.
            self.offset = body.len() as u64;
            self.done = true;
        } else {
            self.offset += body.len() as u64;
        }
        self.chunk = body;
        self.pos = 0;
        Ok(())
    }
}

/// `bytes a-b/size` with `size` the handle's: `a`.
fn parse_content_range(v: &str, size: u64) -> Option<u64> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    if total.parse::<u64>().ok()? != size {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    (b >= a).then_some(a)
}

impl Read for DoorReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos < self.chunk.len() {
                let n = out.len().min(self.chunk.len() - self.pos);
                out[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if self.done || (self.asked && self.offset >= self.size) {
                return Ok(0);
            }
            self.asked = true;
            self.chunk.clear();
            self.pos = 0;
            self.next_chunk()?;
            if self.chunk.is_empty() {
                self.done = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::symlink;

    /// Every entry below `dir`: its kind and content (files), target (links).
    fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        fn walk(base: &Path, d: &Path, out: &mut BTreeMap<PathBuf, String>) {
            let Ok(rd) = std::fs::read_dir(d) else { return };
            for e in rd.flatten() {
                let p = e.path();
                let m = std::fs::symlink_metadata(&p).unwrap();
                let rel = p.strip_prefix(base).unwrap().to_path_buf();
                if m.file_type().is_symlink() {
                    out.insert(rel, format!("link {:?}", std::fs::read_link(&p).unwrap()));
                } else if m.is_dir() {
                    out.insert(rel, "dir".into());
                    walk(base, &p, out);
                } else if m.is_file() {
                    out.insert(
                        rel,
                        format!("file {}", sha_hex(&std::fs::read(&p).unwrap())),
                    );
                } else {
                    out.insert(rel, "other".into());
                }
            }
        }
        walk(dir, dir, &mut out);
        out
    }

    struct Fx {
        _tmp: tempfile::TempDir,
        top: PathBuf,
        root: PathBuf,
        work: PathBuf,
        store: HandleStore,
    }

    fn fx() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().to_path_buf();
        let root = top.join("work/export");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(top.join("outside")).unwrap();
        std::fs::write(top.join("outside/secret.txt"), "secret").unwrap();
        std::fs::write(root.join("a.txt"), "hello").unwrap();
        std::fs::write(root.join("sub/b.txt"), "bee").unwrap();
        let store = HandleStore::new(
            formation_tag("tok"),
            "alice".into(),
            top.join("records/peer-files"),
            DEFAULT_MAX_HANDLES,
        );
        Fx {
            work: top.join("work"),
            _tmp: tmp,
            top,
            root,
            store,
        }
    }

    #[test]
    fn share_snapshots_and_the_handle_round_trips() {
        let f = fx();
        let s = f.store.share(&f.root, "sub/b.txt", 1 << 20).unwrap();
        assert_eq!(s.name, "b.txt");
        assert_eq!(s.handle.size, 3);
        assert_eq!(s.handle.sha256, sha_hex(b"bee"));
        let text = s.handle.text();
        assert!(!text.contains("sub") && !text.contains('/'), "{text}");
        assert_eq!(Handle::parse(&text).unwrap(), s.handle);
        // A later change to the file does not change what the handle gives.
        std::fs::write(f.root.join("sub/b.txt"), "changed").unwrap();
        let served = f.store.redeem(&s.handle.id, &s.handle.secret).unwrap();
        let mut got = [0u8; 8];
        let n = std::os::unix::fs::FileExt::read_at(&*served.file, &mut got, 0).unwrap();
        assert_eq!(&got[..n], b"bee");
        assert!(f.store.redeem(&s.handle.id, &"0".repeat(64)).is_none());
        assert!(f.store.redeem("pfnope", &s.handle.secret).is_none());
    }

    #[test]
    fn share_refuses_escapes_links_and_odd_names_and_changes_nothing() {
        let f = fx();
        symlink(f.top.join("outside"), f.root.join("out")).unwrap();
        symlink(f.top.join("outside/secret.txt"), f.root.join("leak.txt")).unwrap();
        symlink(f.root.join("a.txt"), f.root.join("inner-link.txt")).unwrap();
        symlink(f.top.join("nowhere"), f.root.join("dangling")).unwrap();
        std::fs::create_dir_all(f.root.join("..%2fx")).ok();
        let before = tree(&f.top);
        for (path, want) in [
            ("out/secret.txt", "symlink"),
            ("leak.txt", "symlink"),
            ("inner-link.txt", "symlink"),
            ("dangling", "symlink"),
            ("../outside/secret.txt", "`..` is not allowed"),
            ("a/../../x", "`..` is not allowed"),
            ("/abs", "absolute"),
            ("a\0b", "NUL"),
            (".", "`.` component"),
            ("..", "`..` is not allowed"),
            ("..\\x", "no such file"),
            ("..%2fx", "not a regular file (it is a directory)"),
            ("sub", "not a regular file (it is a directory)"),
            ("", "empty"),
            ("a.txt/", "empty or `.` component"),
        ] {
            let e = f.store.share(&f.root, path, 1 << 20).unwrap_err();
            assert!(e.contains(want), "{path:?}: {e}");
        }
        assert_eq!(tree(&f.top), before, "nothing changed");
        // The fallback walk refuses the same links.
        for p in ["out/secret.txt", "leak.txt", "dangling"] {
            let comps: Vec<&str> = p.split('/').collect();
            let dir = rustix::fs::open(&f.root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
                .unwrap();
            let last = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK;
            assert!(
                matches!(walk_nofollow(dir, &comps, last), Err(OpenError::Symlink)),
                "{p}"
            );
        }
    }

    #[test]
    fn share_refuses_a_fifo_and_a_device() {
        let f = fx();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            f.root.join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let before = tree(&f.top);
        let e = f.store.share(&f.root, "fifo", 1 << 20).unwrap_err();
        assert!(e.contains("it is a FIFO"), "{e}");
        // A device: /dev/null, reached as a root of its own.
        let e = f
            .store
            .share(Path::new("/dev"), "null", 1 << 20)
            .unwrap_err();
        assert!(e.contains("a character device"), "{e}");
        assert_eq!(tree(&f.top), before);
    }

    /// A reader that yields `n` bytes whatever it was declared as.
    struct Yields(u64);
    impl Read for Yields {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            let k = (b.len() as u64).min(self.0) as usize;
            b[..k].fill(b'x');
            self.0 -= k as u64;
            Ok(k)
        }
    }

    #[test]
    fn a_file_growing_or_shrinking_while_copied_is_refused_and_leaves_nothing() {
        let f = fx();
        std::fs::create_dir_all(f.top.join("records/peer-files")).unwrap();
        let before = tree(&f.top);
        let e = snapshot(Yields(10), 5, 100, &f.top.join("records/peer-files")).unwrap_err();
        assert!(e.contains("grew while it was copied"), "{e}");
        let e = snapshot(Yields(3), 5, 100, &f.top.join("records/peer-files")).unwrap_err();
        assert!(
            e.contains("shrank while it was copied (from 5 to 3 bytes)"),
            "{e}"
        );
        let e = snapshot(Yields(3), 500, 100, &f.top.join("records/peer-files")).unwrap_err();
        assert!(e.contains("over the limit of 100 bytes"), "{e}");
        assert_eq!(tree(&f.top), before);
    }

    #[test]
    fn the_handle_limit_holds() {
        let mut f = fx();
        f.store.max_handles = 2;
        f.store.share(&f.root, "a.txt", 100).unwrap();
        f.store.share(&f.root, "a.txt", 100).unwrap();
        let e = f.store.share(&f.root, "a.txt", 100).unwrap_err();
        assert_eq!(
            e,
            "'share-file' minted no handle: this session has minted 2 handles, the limit"
        );
        assert_eq!(
            std::fs::read_dir(f.top.join("records/peer-files"))
                .unwrap()
                .count(),
            2
        );
    }

    #[test]
    fn forged_and_truncated_handles_do_not_parse() {
        let f = fx();
        let t = f.store.share(&f.root, "a.txt", 100).unwrap().handle.text();
        for bad in [
            &t[..t.len() - 1],
            &t[..20],
            "",
            "mph2.x",
            &t.replace("mph1.", "mph1.zz"),
            &format!("{t}.x"),
        ] {
            assert!(Handle::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fetch_names_that_are_not_one_plain_name_are_refused() {
        for bad in [
            "../x",
            "a/../../x",
            "/abs",
            "a\0b",
            ".",
            "..",
            "..\\x",
            "",
            "a/b",
            "x\ny",
        ] {
            let e = check_fetch_name(bad).unwrap_err();
            assert!(
                e.starts_with("'fetch-peer-file' cannot store the file as"),
                "{bad:?}: {e}"
            );
        }
        // A literal name is just a name.
        check_fetch_name("..%2fx").unwrap();
        check_fetch_name("report.csv").unwrap();
    }

    fn store(
        f: &Fx,
        name: &str,
        overwrite: bool,
        body: &[u8],
        size: u64,
        sha: &str,
    ) -> Result<Stored, String> {
        store_fetched(&f.work, name, overwrite, size, sha, 1 << 20, body)
    }

    #[test]
    fn store_fetched_writes_atomically_and_refuses_what_it_must() {
        let f = fx();
        symlink(f.top.join("outside/secret.txt"), f.work.join("link")).unwrap();
        symlink(f.top.join("outside/new.txt"), f.work.join("dangling")).unwrap();
        std::fs::write(f.work.join("exists.txt"), "old").unwrap();
        let sha = sha_hex(b"data");
        let before = tree(&f.top);
        for (name, want) in [
            ("exists.txt", "exists in the workdir"),
            ("link", "exists in the workdir"),
            ("dangling", "exists in the workdir"),
            ("export", "exists in the workdir"),
            ("../x", "cannot store the file as"),
        ] {
            let e = store(&f, name, false, b"data", 4, &sha).unwrap_err();
            assert!(e.contains(want), "{name}: {e}");
        }
        // More bytes than the handle says; fewer; different bytes.
        let e = store(&f, "new.txt", false, b"data!", 4, &sha).unwrap_err();
        assert!(e.contains("sent more than the 4 bytes"), "{e}");
        let e = store(&f, "new.txt", false, b"dat", 4, &sha).unwrap_err();
        assert!(e.contains("sent 3 of the 4 bytes"), "{e}");
        let e = store(&f, "new.txt", false, b"DATA", 4, &sha).unwrap_err();
        assert!(e.contains("do not have the sha256"), "{e}");
        let e = store_fetched(&f.work, "new.txt", false, 4, &sha, 3, &b"data"[..]).unwrap_err();
        assert!(e.contains("over this capsule's limit of 3 bytes"), "{e}");
        let e = store(&f, "export", true, b"data", 4, &sha).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        assert_eq!(tree(&f.top), before, "nothing changed");

        // Overwrite replaces the link itself, never its target.
        let s = store(&f, "dangling", true, b"data", 4, &sha).unwrap();
        assert_eq!(
            s,
            Stored {
                name: "dangling".into(),
                size: 4,
                sha256: sha.clone()
            }
        );
        assert!(!f.top.join("outside/new.txt").exists());
        store(&f, "link", true, b"data", 4, &sha).unwrap();
        assert_eq!(
            std::fs::read_to_string(f.top.join("outside/secret.txt")).unwrap(),
            "secret"
        );
        assert_eq!(std::fs::read(f.work.join("link")).unwrap(), b"data");
        assert!(!std::fs::symlink_metadata(f.work.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());
        store(&f, "fresh.txt", false, b"data", 4, &sha).unwrap();
        assert_eq!(std::fs::read(f.work.join("fresh.txt")).unwrap(), b"data");
        // No temporary file is left.
        assert!(std::fs::read_dir(&f.work)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with(".mur-fetch-")));
    }

    /// A door whose handler serves `store`'s files and refuses every task.
    struct FilesOnly(Arc<HandleStore>);
    impl crate::door::TaskHandler for FilesOnly {
        fn submit(&self, _m: crate::a2a::types::Message) -> crate::a2a::types::Task {
            crate::a2a::types::Task {
                id: "t".into(),
                context_id: "t".into(),
                status: crate::a2a::types::TaskStatus::now(crate::a2a::types::TaskState::Rejected),
                artifacts: Vec::new(),
                history: Vec::new(),
                metadata: None,
            }
        }
        fn get(&self, _id: &str) -> Option<crate::a2a::types::Task> {
            None
        }
        fn cancel(&self, _id: &str) -> Result<crate::a2a::types::Task, crate::door::CancelError> {
            Err(crate::door::CancelError::NotFound)
        }
        fn wait_terminal(
            &self,
            _id: &str,
            _t: std::time::Duration,
        ) -> Option<crate::a2a::types::Task> {
            None
        }
        fn card(&self) -> crate::a2a::types::AgentCard {
            crate::a2a::types::AgentCard::new("alice", "files")
        }
        fn files(&self) -> Option<&dyn FileSource> {
            Some(&*self.0)
        }
    }

    const T: std::time::Duration = std::time::Duration::from_secs(20);

    #[test]
    fn a_handle_is_fetched_over_the_door_in_chunks_and_only_with_token_and_secret() {
        let f = fx();
        // Over one chunk, so the fetch takes several ranges.
        let big: Vec<u8> = (0..(CHUNK_BYTES as usize * 2 + 12345))
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(f.root.join("big.bin"), &big).unwrap();
        let store = Arc::new(f.store);
        let shared = store.share(&f.root, "big.bin", 1 << 30).unwrap();
        let door = crate::door::Door::start(
            "127.0.0.1:0".parse().unwrap(),
            "tok".into(),
            Arc::new(FilesOnly(store.clone())),
            crate::door::DoorLimits::default(),
        )
        .unwrap();
        let h = Handle::parse(&shared.handle.text()).unwrap();
        let got = store_fetched(
            &f.work,
            "copy.bin",
            false,
            h.size,
            &h.sha256,
            1 << 30,
            DoorReader::new(&door.url(), "tok", &h, T),
        )
        .unwrap();
        assert_eq!(got.size, big.len() as u64);
        assert_eq!(std::fs::read(f.work.join("copy.bin")).unwrap(), big);

        let before = tree(&f.top);
        // Another formation's token: the door refuses it.
        let e = store_fetched(
            &f.work,
            "x.bin",
            false,
            h.size,
            &h.sha256,
            1 << 30,
            DoorReader::new(&door.url(), "other", &h, T),
        )
        .unwrap_err();
        assert!(e.contains("the handle is from another formation"), "{e}");
        // A forged secret or id: the door knows no such handle.
        for forged in [
            Handle {
                secret: "0".repeat(64),
                ..h.clone()
            },
            Handle {
                id: format!("pf{}", "0".repeat(26)),
                ..h.clone()
            },
        ] {
            let e = store_fetched(
                &f.work,
                "x.bin",
                false,
                forged.size,
                &forged.sha256,
                1 << 30,
                DoorReader::new(&door.url(), "tok", &forged, T),
            )
            .unwrap_err();
            assert!(e.contains("does not know this handle"), "{e}");
        }
        // A handle whose size or hash was altered: the bytes do not match it.
        let e = store_fetched(
            &f.work,
            "x.bin",
            false,
            h.size - 1,
            &h.sha256,
            1 << 30,
            DoorReader::new(
                &door.url(),
                "tok",
                &Handle {
                    size: h.size - 1,
                    ..h.clone()
                },
                T,
            ),
        )
        .unwrap_err();
        assert!(
            e.contains("does not fit the handle") || e.contains("sent more"),
            "{e}"
        );
        let e = store_fetched(
            &f.work,
            "x.bin",
            false,
            h.size,
            &"0".repeat(64),
            1 << 30,
            DoorReader::new(&door.url(), "tok", &h, T),
        )
        .unwrap_err();
        assert!(e.contains("do not have the sha256"), "{e}");
        assert_eq!(tree(&f.top), before, "nothing changed");
        door.shutdown();
    }

    /// A fake door answering every request with `answer`.
    fn fake_door(answer: Vec<u8>) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let mut s = s;
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(&answer);
            }
        });
        url
    }

    #[test]
    fn a_door_sending_more_or_other_bytes_than_the_handle_names_leaves_nothing() {
        let f = fx();
        let h = Handle {
            tag: formation_tag("tok"),
            member: "alice".into(),
            id: format!("pf{}", "a".repeat(26)),
            size: 4,
            sha256: sha_hex(b"data"),
            secret: "1".repeat(64),
        };
        let before = tree(&f.top);
        let more = fake_door(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\ndata-more".to_vec(),
        );
        let e = store_fetched(
            &f.work,
            "x",
            false,
            4,
            &h.sha256,
            100,
            DoorReader::new(&more, "tok", &h, T),
        )
        .unwrap_err();
        assert!(e.contains("sent more than the 4 bytes"), "{e}");
        let other = fake_door(
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nDATA".to_vec(),
        );
        let e = store_fetched(
            &f.work,
            "x",
            false,
            4,
            &h.sha256,
            100,
            DoorReader::new(&other, "tok", &h, T),
        )
        .unwrap_err();
        assert!(e.contains("do not have the sha256"), "{e}");
        let range = fake_door(b"HTTP/1.1 206 Partial\r\nContent-Range: bytes 0-3/99\r\nContent-Length: 4\r\nConnection: close\r\n\r\ndata".to_vec());
        let e = store_fetched(
            &f.work,
            "x",
            false,
            4,
            &h.sha256,
            100,
            DoorReader::new(&range, "tok", &h, T),
        )
        .unwrap_err();
        assert!(e.contains("does not fit the handle"), "{e}");
        assert_eq!(tree(&f.top), before, "nothing changed");
    }

    /// One raw request to `addr`: the status line's code and the headers.
    fn raw(addr: std::net::SocketAddr, req: &str) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let code = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (code, text)
    }

    #[test]
    fn the_endpoint_wants_the_token_then_the_secret_and_only_get() {
        let f = fx();
        let store = Arc::new(f.store);
        let h = store.share(&f.root, "a.txt", 100).unwrap().handle;
        let door = crate::door::Door::start(
            "127.0.0.1:0".parse().unwrap(),
            "tok".into(),
            Arc::new(FilesOnly(store.clone())),
            crate::door::DoorLimits::default(),
        )
        .unwrap();
        let a = door.local_addr();
        let path = format!("/peer-files/{}", h.id);
        let (c, t) = raw(a, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Mur-Handle-Secret: {}\r\n\r\n", h.secret));
        assert_eq!(c, 401, "{t}");
        assert!(!t.contains("hello"));
        let (c, _) = raw(a, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer other\r\nX-Mur-Handle-Secret: {}\r\n\r\n", h.secret));
        assert_eq!(c, 401);
        let (c, t) = raw(a, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer tok\r\nX-Mur-Handle-Secret: {}\r\n\r\n", "f".repeat(64)));
        assert_eq!(c, 404, "{t}");
        let (c, t) = raw(a, &format!("GET /peer-files/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer tok\r\nX-Mur-Handle-Secret: {}\r\n\r\n", h.secret));
        assert_eq!(c, 404, "{t}");
        let (c, t) = raw(a, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer tok\r\nX-Mur-Handle-Secret: {}\r\n\r\n", h.secret));
        assert_eq!(c, 200, "{t}");
        assert!(t.ends_with("\r\n\r\nhello"), "{t}");
        let (c, t) = raw(a, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer tok\r\nRange: bytes=1-2\r\nX-Mur-Handle-Secret: {}\r\n\r\n", h.secret));
        assert_eq!(c, 206, "{t}");
        assert!(
            t.contains("Content-Range: bytes 1-2/5") && t.ends_with("\r\n\r\nel"),
            "{t}"
        );
        let (c, t) = raw(a, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer tok\r\nRange: bytes=5-\r\nX-Mur-Handle-Secret: {}\r\n\r\n", h.secret));
        assert_eq!(c, 416, "{t}");
        assert!(t.contains("Content-Range: bytes */5"), "{t}");
        let (c, _) = raw(a, &format!("POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\nAuthorization: Bearer tok\r\n\r\n"));
        assert_eq!(c, 405);
        door.shutdown();
    }

    #[test]
    fn requests_without_the_token_spend_the_addresss_unauthenticated_budget() {
        let f = fx();
        let door = crate::door::Door::start(
            "127.0.0.1:0".parse().unwrap(),
            "tok".into(),
            Arc::new(FilesOnly(Arc::new(f.store))),
            crate::door::DoorLimits {
                unauthenticated_per_sec: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let req = "GET /peer-files/pf0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        // Twenty at once: a bucket of two refilled once a second cannot answer them
        // all; the first two are the 401 any request without the token gets.
        let codes: Vec<u16> = (0..20).map(|_| raw(door.local_addr(), req).0).collect();
        assert_eq!(&codes[..2], &[401, 401], "{codes:?}");
        assert!(codes.contains(&429), "{codes:?}");
        assert!(codes.iter().all(|c| *c == 401 || *c == 429), "{codes:?}");
        door.shutdown();
    }
}
