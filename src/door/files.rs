//! The peer-file endpoint of a door: `GET /peer-files/<id>` serves the bytes of one
//! file a member shared with share-file, to a caller holding the door's bearer token
//! *and* the handle's secret (mur-tools(7), "Peer files").
//!
//! The wire:
//!
//! - `GET /peer-files/<id>` with `Authorization: Bearer <door token>` and
//!   `X-Mur-Handle-Secret: <secret>` (64 lowercase hex digits). A missing or wrong
//!   token is the door's usual HTTP 401; an unknown id, a wrong secret, or a door
//!   serving no peer files are all the same HTTP 404 (no oracle for ids).
//! - An optional `Range: bytes=<start>-` or `bytes=<start>-<end>` (one range). The
//!   answer carries at most [`CHUNK_BYTES`] of body: `200` with the whole file when it
//!   fits and no range was asked, else `206` with `Content-Range: bytes a-b/size`. A
//!   fetcher streams a large file as consecutive ranges on one kept-alive connection,
//!   so neither side ever holds more than one chunk. A start at or past the end is
//!   HTTP 416 with `Content-Range: bytes */size`.
//! - Every answer is an ordinary door answer: the per-address connection caps and the
//!   reserve cover it like any request; a request without the token spends the
//!   address's unauthenticated budget.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::server::{Head, Response};

/// The largest body one answer carries: 4 MiB.
pub const CHUNK_BYTES: u64 = 4 * 1024 * 1024;

/// The path prefix of the endpoint.
pub const PREFIX: &str = "/peer-files/";

/// The header carrying a handle's secret.
pub const SECRET_HEADER: &str = "x-mur-handle-secret";

/// One shared file as the door serves it: the immutable snapshot and its size.
#[derive(Debug, Clone)]
pub struct Served {
    /// The snapshot, opened read-only.
    pub file: Arc<File>,
    /// Its size in bytes (fixed when the handle was minted).
    pub size: u64,
}

/// What a door's handler knows of the files its member shared.
pub trait FileSource: Send + Sync {
    /// The file of handle `id`, when `secret` is that handle's secret; `None`
    /// otherwise (the caller cannot tell an unknown id from a wrong secret).
    fn redeem(&self, id: &str, secret: &str) -> Option<Served>;
}

/// Answers one authorized request for `path` (which starts with [`PREFIX`]).
pub(crate) fn answer(head: &Head, source: Option<&dyn FileSource>) -> Response {
    if head.method != "GET" {
        let mut r = Response::empty(405);
        r.headers.push(("Allow", "GET".into()));
        return r;
    }
    let id = &head.path[PREFIX.len()..];
    let secret = head.header(SECRET_HEADER).unwrap_or("");
    let Some(served) = source.and_then(|s| s.redeem(id, secret)) else {
        log::info!(
            target: "mur::door",
            "refused a peer-file request from {}: HTTP 404, no such handle or a wrong secret",
            head.peer
                .map_or_else(|| "an unknown peer".to_string(), |a| a.to_string())
        );
        return Response::empty(404);
    };
    let size = served.size;
    let range = match head.header("range") {
        None => None,
        Some(r) => match parse_range(r) {
            Some(r) => Some(r),
            None => {
                let mut r = Response::empty(416);
                r.headers.push(("Content-Range", format!("bytes */{size}")));
                return r;
            }
        },
    };
    let (start, end_incl) = match range {
        None => (0, size.saturating_sub(1)),
        Some((s, e)) => (s, e.unwrap_or(u64::MAX).min(size.saturating_sub(1))),
    };
    if range.is_some() && start >= size {
        let mut r = Response::empty(416);
        r.headers.push(("Content-Range", format!("bytes */{size}")));
        return r;
    }
    let want = if size == 0 {
        0
    } else {
        (end_incl - start + 1).min(CHUNK_BYTES)
    };
    let mut body = vec![0u8; want as usize];
    let mut got = 0usize;
    while got < body.len() {
        match served.file.read_at(&mut body[got..], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::warn!(target: "mur::door", "peer file {id}: read failed: {e}");
                return Response::empty(500);
            }
        }
    }
    if got != body.len() {
        log::warn!(target: "mur::door", "peer file {id}: the snapshot is shorter than its handle says");
        return Response::empty(500);
    }
    let whole = range.is_none() && want == size;
    let mut r = Response::empty(if whole { 200 } else { 206 });
    r.headers
        .push(("Content-Type", "application/octet-stream".into()));
    if !whole {
        r.headers.push((
            "Content-Range",
            format!("bytes {start}-{}/{size}", start + want - 1),
        ));
    }
    r.body = body;
    r
}

/// `bytes=<start>-[<end>]`: `(start, end)`; `None` for anything else (suffix ranges,
/// several ranges, other units, end before start).
fn parse_range(v: &str) -> Option<(u64, Option<u64>)> {
    let spec = v.trim().strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) {
        return None;
    }
    let start: u64 = a.parse().ok()?;
    if b.is_empty() {
        return Some((start, None));
    }
    if !digits(b) {
        return None;
    }
    let end: u64 = b.parse().ok()?;
    (end >= start).then_some((start, Some(end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_odd_ones_do_not() {
        assert_eq!(parse_range("bytes=0-"), Some((0, None)));
        assert_eq!(parse_range("bytes=5-9"), Some((5, Some(9))));
        for bad in [
            "bytes=-5",
            "bytes=9-5",
            "bytes=1-2,4-5",
            "items=0-",
            "bytes=a-",
            "0-1",
            "bytes=+1-",
        ] {
            assert_eq!(parse_range(bad), None, "{bad}");
        }
    }
}
