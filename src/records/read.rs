//! Reading a `trace.jsonl` back as a stream: one line at a time, in constant memory,
//! whatever the trace's length, and tailing it while its session still writes.
//!
//! A line that does not end in a newline is not a record yet: while the session runs it
//! is the writer's next line on its way; once the file stops growing it is a record cut
//! short (a `mur` killed mid-write, a full disk). [`TraceLines`] keeps it apart and
//! hands it out only when asked ([`TraceLines::partial`]), so a reader shows it as cut
//! instead of failing on it.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// One complete line of a trace: its number (from 1) and its text without the newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLine {
    /// The line number, counting from 1.
    pub number: u64,
    /// The text of the line, without its newline (bytes that are not UTF-8 replaced).
    pub text: String,
}

/// A streaming reader of `trace.jsonl`.
pub struct TraceLines {
    reader: BufReader<File>,
    buf: Vec<u8>,
    number: u64,
}

impl TraceLines {
    /// Opens `path` for reading from its first line.
    ///
    /// Errors: the file cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<TraceLines> {
        Ok(TraceLines {
            reader: BufReader::with_capacity(64 * 1024, File::open(path)?),
            buf: Vec::new(),
            number: 0,
        })
    }

    /// The next complete line, or `None` at the end of what is written so far. A later
    /// call returns the lines written meanwhile (the file is read, never mapped), so
    /// calling again after a pause tails the file.
    ///
    /// Errors: the file cannot be read.
    pub fn next_line(&mut self) -> std::io::Result<Option<TraceLine>> {
        self.reader.read_until(b'\n', &mut self.buf)?;
        if self.buf.last() != Some(&b'\n') {
            return Ok(None);
        }
        self.buf.pop();
        self.number += 1;
        let text = match String::from_utf8(std::mem::take(&mut self.buf)) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        Ok(Some(TraceLine {
            number: self.number,
            text,
        }))
    }

    /// The bytes after the last newline (a line not finished, or cut short), if any,
    /// as a line with the number it would have.
    pub fn partial(&self) -> Option<TraceLine> {
        if self.buf.is_empty() {
            return None;
        }
        Some(TraceLine {
            number: self.number + 1,
            text: String::from_utf8_lossy(&self.buf).into_owned(),
        })
    }
}

/// The fields every record has, read without building the whole record.
#[derive(Debug, serde::Deserialize)]
pub struct Head {
    /// The record type.
    #[serde(rename = "type")]
    pub kind: String,
}

/// The record type of a line, or `None` when the line is not a JSON object with a
/// string `type`.
pub fn kind_of(line: &str) -> Option<String> {
    serde_json::from_str::<Head>(line).ok().map(|h| h.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lines_then_partial_then_the_rest_once_written() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("trace.jsonl");
        std::fs::write(&p, "{\"type\":\"a\"}\n{\"type\":\"b\"}\n{\"ty").unwrap();
        let mut r = TraceLines::open(&p).unwrap();
        assert_eq!(r.next_line().unwrap().unwrap().text, "{\"type\":\"a\"}");
        assert_eq!(r.next_line().unwrap().unwrap().number, 2);
        assert_eq!(r.next_line().unwrap(), None);
        assert_eq!(r.partial().unwrap().text, "{\"ty");
        assert_eq!(r.partial().unwrap().number, 3);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"pe\":\"c\"}\n").unwrap();
        let l = r.next_line().unwrap().unwrap();
        assert_eq!((l.number, l.text.as_str()), (3, "{\"type\":\"c\"}"));
        assert_eq!(r.partial(), None);
        assert_eq!(kind_of(&l.text).as_deref(), Some("c"));
        assert_eq!(kind_of("{\"ty"), None);
    }
}
