//! Server-sent events read from a blocking body: the event-stream format of the WHATWG
//! HTML standard (§9.2 "Server-sent events"), as OpenAI and Anthropic stream answers.
//!
//! Lines end in LF, CRLF or CR. A line starting with `:` is a comment (keep-alive);
//! `field: value` sets a field (one space after the colon is dropped); `data` lines are
//! joined with LF; an empty line ends the event. An event with no `data` is not
//! reported. `id` and `retry` are ignored. As a leniency for servers that write
//! `error: {…}` instead of `event: error` + `data: {…}` (llama.cpp does), a field named
//! `error` makes the event an `error` event with that value as data. Data still pending
//! at the end of the stream is reported as a last event.
//!
//! A reader may carry a deadline ([`SseReader::set_deadline`]): every chunk of bytes
//! read is checked against it, so comments or events that arrive often but are not
//! progress cannot keep a stream alive past it, however the socket's own read timeout
//! is reset by each byte.

use std::fmt;
use std::io::{self, BufRead};
use std::time::Instant;

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event` field; `message` when the event named none.
    pub event: String,
    /// The `data` lines joined with LF.
    pub data: String,
}

/// The error inside the [`io::ErrorKind::TimedOut`] that [`SseReader::next_event`]
/// returns when bytes arrived after the reader's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlinePassed;

impl fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the stream's deadline passed")
    }
}

impl std::error::Error for DeadlinePassed {}

/// Reads [`Event`]s from a byte stream, refusing more than `limit` bytes in all.
#[derive(Debug)]
pub struct SseReader<R> {
    inner: R,
    limit: u64,
    read: u64,
    deadline: Option<Instant>,
    line: Vec<u8>,
    /// A CR ended the last line: an LF right after it belongs to it.
    after_cr: bool,
    done: bool,
}

impl<R: BufRead> SseReader<R> {
    /// A reader over `inner` that fails once more than `limit` bytes were read.
    pub fn new(inner: R, limit: u64) -> Self {
        SseReader {
            inner,
            limit,
            read: 0,
            deadline: None,
            line: Vec::new(),
            after_cr: false,
            done: false,
        }
    }

    /// Sets (or, with `None`, clears) the instant after which reading fails: once it
    /// passed, the next chunk of bytes read (a comment, an event, a part of a line)
    /// makes [`SseReader::next_event`] fail with [`DeadlinePassed`]. The caller moves
    /// it on when an event brought progress.
    pub fn set_deadline(&mut self, at: Option<Instant>) {
        self.deadline = at;
    }

    /// The next event, `None` at the end of the stream.
    ///
    /// # Errors
    ///
    /// The reader's I/O error; [`io::ErrorKind::InvalidData`] when the stream grows
    /// past the limit; [`io::ErrorKind::TimedOut`] holding [`DeadlinePassed`] when
    /// bytes arrived after the deadline ([`SseReader::set_deadline`]).
    pub fn next_event(&mut self) -> io::Result<Option<Event>> {
        let mut event = String::new();
        let mut data: Option<String> = None;
        loop {
            let Some(line) = self.next_line()? else {
                return Ok(data.map(|d| Event {
                    event: if event.is_empty() {
                        "message".into()
                    } else {
                        event
                    },
                    data: d,
                }));
            };
            if line.is_empty() {
                if let Some(d) = data.take() {
                    return Ok(Some(Event {
                        event: if event.is_empty() {
                            "message".into()
                        } else {
                            event
                        },
                        data: d,
                    }));
                }
                event.clear();
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.find(':') {
                Some(i) => {
                    let v = &line[i + 1..];
                    (&line[..i], v.strip_prefix(' ').unwrap_or(v))
                }
                None => (line.as_str(), ""),
            };
            match field {
                "event" => event = value.to_string(),
                "data" | "error" => {
                    if field == "error" {
                        event = "error".to_string();
                    }
                    match &mut data {
                        None => data = Some(value.to_string()),
                        Some(d) => {
                            d.push('\n');
                            d.push_str(value);
                        }
                    }
                }
                _ => {} // id, retry, unknown fields
            }
        }
    }

    /// The next line without its terminator, `None` at the end of the stream.
    fn next_line(&mut self) -> io::Result<Option<String>> {
        if self.done {
            return Ok(None);
        }
        self.line.clear();
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                self.done = true;
                if self.line.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(String::from_utf8_lossy(&self.line).into_owned()));
            }
            let mut used = 0;
            let mut ended = false;
            for &b in buf {
                used += 1;
                if self.after_cr {
                    self.after_cr = false;
                    if b == b'\n' {
                        continue;
                    }
                }
                match b {
                    b'\n' => {
                        ended = true;
                        break;
                    }
                    b'\r' => {
                        self.after_cr = true;
                        ended = true;
                        break;
                    }
                    _ => self.line.push(b),
                }
            }
            self.inner.consume(used);
            self.read += used as u64;
            if self.read > self.limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the stream is larger than {} bytes", self.limit),
                ));
            }
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(io::Error::new(io::ErrorKind::TimedOut, DeadlinePassed));
            }
            if ended {
                return Ok(Some(String::from_utf8_lossy(&self.line).into_owned()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str) -> Vec<(String, String)> {
        let mut r = SseReader::new(text.as_bytes(), 1 << 20);
        let mut out = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            out.push((e.event, e.data));
        }
        out
    }

    #[test]
    fn fields_comments_and_line_ends() {
        let got = events(
            ": keep-alive\n\nevent: message_start\ndata: {\"a\":1}\n\ndata:x\r\ndata: y\r\n\r\nid: 3\rdata: z\r\rdata: tail",
        );
        assert_eq!(
            got,
            [
                ("message_start".into(), "{\"a\":1}".into()),
                ("message".into(), "x\ny".into()),
                ("message".into(), "z".into()),
                ("message".into(), "tail".into()),
            ]
        );
    }

    #[test]
    fn an_event_without_data_is_not_reported() {
        assert_eq!(events("event: ping\n\n\n"), Vec::<(String, String)>::new());
    }

    #[test]
    fn an_error_field_is_an_error_event() {
        assert_eq!(
            events("error: {\"code\":500}\n\n"),
            [("error".into(), "{\"code\":500}".into())]
        );
    }

    #[test]
    fn a_passed_deadline_fails_even_on_comments() {
        let mut r = SseReader::new(": keep-alive\n\ndata: x\n\n".as_bytes(), 1 << 20);
        r.set_deadline(Some(Instant::now()));
        let e = r.next_event().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.get_ref().unwrap().is::<DeadlinePassed>());
        let mut r = SseReader::new(": keep-alive\n\ndata: x\n\n".as_bytes(), 1 << 20);
        r.set_deadline(Some(Instant::now() + std::time::Duration::from_secs(3600)));
        assert_eq!(r.next_event().unwrap().unwrap().data, "x");
    }

    #[test]
    fn the_limit_is_enforced() {
        let text = "data: ".to_string() + &"x".repeat(100) + "\n\n";
        let mut r = SseReader::new(text.as_bytes(), 50);
        let e = r.next_event().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
