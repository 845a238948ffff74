//! The secrets `mur` holds, and masking them out of what it writes.
//!
//! A secret is a value the runtime itself holds for its own use: a driver's credential
//! (read from the variable or file `credential:` names), the door's bearer token, a
//! formation token, a remote member's token. Each is registered here when `mur` reads
//! or mints it ([`register`]); everything `mur` writes under a records directory passes
//! through [`mask`] (or [`mask_json_line`] for a trace line) first, so the value never
//! lands in clear in `trace.jsonl`, a command's log or `out/`:
//! every occurrence becomes [`MASK`].
//!
//! What the model produced is masked too: a secret in a tool call's arguments or in a
//! command's output is written masked to the trace and the log, and the tail of the
//! output shown to the model is masked as well (the model never needs a credential of
//! the runtime's; a command that was given one by name through
//! `capabilities.shell.env` gets it in its environment, not through the model).
//!
//! Values shorter than [`MIN_LEN`] bytes are not registered: masking a three-letter
//! token would garble ordinary text and say which three letters it was.

use std::borrow::Cow;

use parking_lot::RwLock;

/// What a secret's value is replaced with: `[masked]`.
pub const MASK: &str = "[masked]";

/// The shortest value that is registered, in bytes: 8.
pub const MIN_LEN: usize = 8;

struct Entry {
    /// The value as it is.
    raw: String,
    /// The value as it appears inside a JSON string (escaped).
    json: String,
}

static SECRETS: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

/// Registers `value` (trimmed) as a secret for the rest of the process. Values shorter
/// than [`MIN_LEN`] bytes, and values already known, are ignored.
pub fn register(value: &str) {
    let v = value.trim();
    if v.len() < MIN_LEN {
        return;
    }
    let mut all = SECRETS.write();
    if all.iter().any(|e| e.raw == v) {
        return;
    }
    let quoted = serde_json::to_string(v).unwrap_or_default();
    let json = quoted
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(v)
        .to_string();
    all.push(Entry {
        raw: v.to_string(),
        json,
    });
    // Longest first, so a secret that contains another is masked whole.
    all.sort_by_key(|e| std::cmp::Reverse(e.raw.len()));
}

/// Whether any secret is registered (when none is, masking is free).
pub fn any() -> bool {
    !SECRETS.read().is_empty()
}

/// `text` with every registered secret replaced by [`MASK`]; borrowed when there was
/// none in it.
pub fn mask(text: &str) -> Cow<'_, str> {
    let all = SECRETS.read();
    let mut out = Cow::Borrowed(text);
    for e in all.iter() {
        if out.contains(e.raw.as_str()) {
            out = Cow::Owned(out.replace(e.raw.as_str(), MASK));
        }
    }
    out
}

/// `bytes` with every registered secret replaced by [`MASK`], or `None` when none
/// occurs in them. Works on bytes that are not UTF-8 (a command's raw output).
pub fn mask_bytes(bytes: &[u8]) -> Option<Vec<u8>> {
    let all = SECRETS.read();
    let mut out: Option<Vec<u8>> = None;
    for e in all.iter() {
        let cur = out.as_deref().unwrap_or(bytes);
        if let Some(r) = replace_bytes(cur, e.raw.as_bytes(), MASK.as_bytes()) {
            out = Some(r);
        }
    }
    out
}

/// Every string in `fields` (at any depth) with every registered secret masked. Free
/// when no secret is registered.
pub fn mask_fields(fields: &mut serde_json::Map<String, serde_json::Value>) {
    if !any() {
        return;
    }
    for v in fields.values_mut() {
        mask_value(v);
    }
}

/// Every string in `v` (at any depth) with every registered secret masked.
pub fn mask_value(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            if let Cow::Owned(m) = mask(s) {
                *s = m;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(mask_value),
        Value::Object(o) => o.values_mut().for_each(mask_value),
        _ => {}
    }
}

/// One serialized JSON line with every secret masked where it appears inside a string
/// (in its escaped form), so the line stays valid JSON.
pub fn mask_json_line(line: Vec<u8>) -> Vec<u8> {
    let all = SECRETS.read();
    let mut line = line;
    for e in all.iter() {
        if let Some(r) = replace_bytes(&line, e.json.as_bytes(), MASK.as_bytes()) {
            line = r;
        }
    }
    line
}

/// `hay` with every `needle` replaced by `with`, or `None` when there is none.
fn replace_bytes(hay: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 0;
    let mut last = 0;
    let mut found = false;
    while i + needle.len() <= hay.len() {
        if &hay[i..i + needle.len()] == needle {
            out.extend_from_slice(&hay[last..i]);
            out.extend_from_slice(with);
            i += needle.len();
            last = i;
            found = true;
        } else {
            i += 1;
        }
    }
    if !found {
        return None;
    }
    out.extend_from_slice(&hay[last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_values_are_masked_in_text_bytes_and_json() {
        register("sk-test-0123456789abcdef");
        register("quote\"d-secret-value");
        register("short");
        let t = mask("key=sk-test-0123456789abcdef; again sk-test-0123456789abcdef");
        assert_eq!(t, "key=[masked]; again [masked]");
        assert_eq!(mask("short and plain"), "short and plain");
        let b = mask_bytes(b"\xffsk-test-0123456789abcdef\xfe").unwrap();
        assert_eq!(b, b"\xff[masked]\xfe");
        assert!(mask_bytes(b"nothing here").is_none());
        let line =
            serde_json::to_vec(&serde_json::json!({"a": "x quote\"d-secret-value y"})).unwrap();
        let masked = mask_json_line(line);
        let v: serde_json::Value = serde_json::from_slice(&masked).unwrap();
        assert_eq!(v["a"], "x [masked] y");
        let mut f = serde_json::Map::new();
        f.insert(
            "deep".into(),
            serde_json::json!({"list": ["sk-test-0123456789abcdef!", 3]}),
        );
        mask_fields(&mut f);
        assert_eq!(f["deep"]["list"][0], "[masked]!");
    }
}
