//! Reading the tail of a command's log for the model.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// How many bytes of output the model is shown at most: 16384.
pub const TAIL_BYTES: u64 = 16384;

/// The tail of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    /// The text shown: the last bytes, starting on a UTF-8 character boundary, with
    /// invalid UTF-8 replaced by U+FFFD.
    pub text: String,
    /// Bytes in the log.
    pub total_bytes: u64,
    /// Whether `text` holds the whole log.
    pub all: bool,
}

impl Tail {
    /// `all`, or `last 16384 bytes`.
    pub fn shown(&self) -> String {
        if self.all {
            "all".to_string()
        } else {
            format!("last {TAIL_BYTES} bytes")
        }
    }
}

/// Reads the last `max` bytes of `path`. A tail that starts in the middle of a
/// multi-byte character skips that character's continuation bytes.
///
/// Errors: the log cannot be opened or read.
pub fn tail(path: &Path, max: u64) -> std::io::Result<Tail> {
    let mut f = File::open(path)?;
    let total = f.metadata()?.len();
    let start = total.saturating_sub(max);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity((total - start) as usize);
    f.take(max).read_to_end(&mut buf)?;
    let mut skip = 0;
    if start > 0 {
        while skip < buf.len() && skip < 3 && (buf[skip] & 0b1100_0000) == 0b1000_0000 {
            skip += 1;
        }
    }
    let text = String::from_utf8_lossy(&buf[skip..]);
    Ok(Tail {
        // A secret of the runtime's is never shown (crate::secrets).
        text: crate::secrets::mask(&text).into_owned(),
        total_bytes: total,
        all: start == 0,
    })
}

/// Rewrites the log at `path` with every secret of the runtime's masked
/// ([`crate::secrets`]), when one occurs in it. Nothing is read when no secret is
/// registered.
///
/// Errors: the log cannot be read or written.
pub fn mask_log(path: &Path) -> std::io::Result<()> {
    if !crate::secrets::any() {
        return Ok(());
    }
    let bytes = std::fs::read(path)?;
    if let Some(masked) = crate::secrets::mask_bytes(&bytes) {
        std::fs::write(path, masked)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_starts_on_a_character_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        // "é" is 2 bytes; cut so the window starts on its second byte.
        std::fs::write(&p, "aé bc").unwrap();
        let t = tail(&p, 4).unwrap();
        assert_eq!(t.text, " bc");
        assert!(!t.all);
        assert_eq!(t.total_bytes, 6);
        let t = tail(&p, 100).unwrap();
        assert_eq!(t.text, "aé bc");
        assert!(t.all);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, b"ok\xff\xfeend").unwrap();
        assert_eq!(tail(&p, 100).unwrap().text, "ok\u{fffd}\u{fffd}end");
    }
}
