//! What one record may store, and how much one session may write.
//!
//! A string anywhere in a record's fields longer than [`MAX_STRING_BYTES`] (64 KiB) is
//! cut to that many bytes (at a character boundary), and its full text goes to a file
//! beside the trace, `blobs/<seq>-<n>.txt`. The record then carries
//! `"truncated": [{"field": PATH, "bytes": FULL_LENGTH, "file": "blobs/…"}]`, one entry
//! per cut string, PATH naming it in the record (`text`, `input.args[1]`).
//!
//! A session's records (trace lines and blob files) are limited to
//! [`SESSION_LIMIT_BYTES`] (256 MiB). The record that crosses it is followed by one
//! `records_limit` record (`limit_bytes`, `used_bytes`); after it no blob file is
//! written any more, strings are cut to [`OVER_LIMIT_STRING_BYTES`] (4 KiB) with
//! `"file": null` in their `truncated` entry, and every record is still written, so a
//! trace keeps its `task_end` and `session_end` records. The trace past the limit then
//! grows only by small records: a few KiB per event.

use serde_json::{Map, Value};

/// The longest string a record stores whole, in bytes: 64 KiB.
pub const MAX_STRING_BYTES: usize = 64 * 1024;
/// The longest string a record stores once the session is past its limit: 4 KiB.
pub const OVER_LIMIT_STRING_BYTES: usize = 4 * 1024;
/// What one session's records may take, trace and blob files together: 256 MiB.
pub const SESSION_LIMIT_BYTES: u64 = 256 * 1024 * 1024;

/// One string cut out of a record: where it was and its full text.
pub(super) struct Cut {
    /// The field's path in the record, e.g. `text` or `input.args[1]`.
    pub path: String,
    /// The full string.
    pub full: String,
}

/// Cuts every string in `fields` longer than `max` bytes to `max` bytes; returns the
/// strings cut, in field order.
pub(super) fn cut_fields(fields: &mut Map<String, Value>, max: usize) -> Vec<Cut> {
    let mut out = Vec::new();
    for (k, v) in fields.iter_mut() {
        cut(v, k.clone(), max, &mut out);
    }
    out
}

fn cut(v: &mut Value, path: String, max: usize, out: &mut Vec<Cut>) {
    match v {
        Value::String(s) if s.len() > max => {
            let mut end = max;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            let full = std::mem::take(s);
            *s = full[..end].to_string();
            out.push(Cut { path, full });
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                cut(item, format!("{path}[{i}]"), max, out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                cut(item, format!("{path}.{k}"), max, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_strings_are_cut_at_a_char_boundary_wherever_they_are() {
        let mut f = Map::new();
        f.insert("text".into(), json!("ééé"));
        f.insert("input".into(), json!({"args": ["-c", "abcdef"], "n": 1}));
        f.insert("short".into(), json!("ab"));
        let cuts = cut_fields(&mut f, 3);
        assert_eq!(f["text"], "é");
        assert_eq!(f["input"]["args"][1], "abc");
        assert_eq!(f["input"]["args"][0], "-c");
        assert_eq!(f["short"], "ab");
        let paths: Vec<&str> = cuts.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["text", "input.args[1]"]);
        assert_eq!(cuts[0].full, "ééé");
        assert_eq!(cuts[1].full, "abcdef");
    }

    fn lines(dir: &std::path::Path) -> Vec<Value> {
        std::fs::read_to_string(dir.join("trace.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_long_string_is_kept_whole_in_a_blob_file_named_in_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let t = crate::records::Trace::open(&dir.path().join("trace.jsonl"), "ses_x").unwrap();
        let big = "x".repeat(MAX_STRING_BYTES + 10);
        t.record(
            None,
            "task_start",
            crate::fields! {"text" => big.clone(), "n" => 1},
        );
        t.close();
        let r = &lines(dir.path())[0];
        assert_eq!(r["text"].as_str().unwrap().len(), MAX_STRING_BYTES);
        assert_eq!(
            r["truncated"],
            json!([{"field": "text", "bytes": MAX_STRING_BYTES + 10, "file": "blobs/000001-0.txt"}])
        );
        let blob = dir.path().join("blobs/000001-0.txt");
        assert_eq!(std::fs::read_to_string(&blob).unwrap(), big);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&blob).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn past_the_session_limit_records_are_small_and_still_written() {
        let dir = tempfile::tempdir().unwrap();
        let limit = 4 * MAX_STRING_BYTES as u64;
        let t =
            crate::records::Trace::open_with_limit(&dir.path().join("trace.jsonl"), "ses_x", limit)
                .unwrap();
        let big = "y".repeat(2 * MAX_STRING_BYTES);
        for _ in 0..10 {
            t.record(
                Some("tsk_1"),
                "task_start",
                crate::fields! {"text" => big.clone()},
            );
        }
        t.record(
            None,
            "session_end",
            crate::fields! {"exit_status" => "completed"},
        );
        t.close();
        let recs = lines(dir.path());
        let kinds: Vec<&str> = recs.iter().map(|r| r["type"].as_str().unwrap()).collect();
        // Two records with blobs (a 64 KiB line and a 128 KiB blob each) cross 256 KiB.
        assert_eq!(
            kinds,
            [
                "task_start",
                "task_start",
                "records_limit",
                "task_start",
                "task_start",
                "task_start",
                "task_start",
                "task_start",
                "task_start",
                "task_start",
                "task_start",
                "session_end"
            ]
        );
        assert_eq!(recs[2]["limit_bytes"], limit);
        let seqs: Vec<u64> = recs.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..=12).collect::<Vec<u64>>());
        for r in &recs[3..11] {
            assert_eq!(r["text"].as_str().unwrap().len(), OVER_LIMIT_STRING_BYTES);
            assert_eq!(r["truncated"][0]["file"], Value::Null);
            assert_eq!(r["truncated"][0]["bytes"], 2 * MAX_STRING_BYTES);
        }
        let blobs = std::fs::read_dir(dir.path().join("blobs")).unwrap().count();
        assert_eq!(blobs, 2);
        assert_eq!(recs[11]["exit_status"], "completed");
    }
}
