//! Checking a `script` driver's replies file the way a manifest is checked: every
//! problem at once, each at its `file:line:column` in the replies file, with its path
//! (`[2].tool_calls[0].name`) and the nearest known key.
//!
//! The format is the one [`crate::inference::script`] plays: a list of turns, each a
//! mapping of `text` (string), `tool_calls` (list of `{name, input, input_raw, id}`,
//! `name` required) and `usage` (`{input, output, cached, cache_write}`, whole numbers
//! of tokens, `input` and `output` required). Any YAML value is accepted as `input`.

use std::path::Path;

use super::parse::{read, walk_yaml, Diagnostic};
use super::suggest;
use super::walk::{describe, Cx, Field};
use super::yaml::{Entry, Kind, Value};

const TURN: &[&str] = &["text", "tool_calls", "usage"];
const CALL: &[&str] = &["name", "input", "input_raw", "id"];
const USAGE: &[&str] = &["input", "output", "cached", "cache_write"];

/// Every problem of the replies file at `path`; empty when it is a valid script.
pub fn check(path: &Path) -> Vec<Diagnostic> {
    let (text, file) = match read(path, "replies file") {
        Ok(t) => t,
        Err(e) => return e.diagnostics,
    };
    check_str(&text, &file)
}

/// Every problem of replies text named `file`; empty when it is a valid script.
pub fn check_str(text: &str, file: &str) -> Vec<Diagnostic> {
    let (_, diagnostics) = walk_yaml(
        text,
        file,
        "empty replies file: write a list of model turns, e.g. `- text: hello`",
        |cx, root| {
            turns(cx, root);
            Some(())
        },
    );
    diagnostics
}

/// A mapping's entries, each unknown key reported with the nearest of `known`.
fn entries<'n>(cx: &mut Cx, f: Field<'n, '_>, known: &[&str]) -> Option<&'n [Entry]> {
    let es = f.entries(cx)?;
    for e in es {
        if !known.contains(&e.key.as_str()) {
            cx.err(
                e.key_pos,
                f.path,
                format!("unknown key `{}`{}", e.key, suggest::hint(&e.key, known)),
            );
        }
    }
    Some(es)
}

fn is_null(f: &Field) -> bool {
    matches!(f.kind(), Some((Kind::Null, _)))
}

fn turns(cx: &mut Cx, root: &super::yaml::Node) {
    let top = Field {
        node: root,
        path: "",
    };
    let Value::Seq(items) = &root.value else {
        cx.err(
            root.pos,
            "",
            format!(
                "a replies file is a list of model turns (`- text: …`), found {}",
                describe(root)
            ),
        );
        return;
    };
    let _ = top;
    for (i, node) in items.iter().enumerate() {
        let path = format!("[{i}]");
        let f = Field { node, path: &path };
        let Some(es) = entries(cx, f, TURN) else {
            continue;
        };
        for e in es {
            let path = format!("{path}.{}", e.key);
            let v = Field {
                node: &e.value,
                path: &path,
            };
            match e.key.as_str() {
                "text" if !is_null(&v) => {
                    v.str(cx);
                }
                "tool_calls" if !is_null(&v) => {
                    for (node, p) in v.list(cx).unwrap_or_default() {
                        call(cx, Field { node, path: &p });
                    }
                }
                "usage" if !is_null(&v) => usage(cx, v),
                _ => {}
            }
        }
    }
}

fn call(cx: &mut Cx, f: Field) {
    let Some(es) = entries(cx, f, CALL) else {
        return;
    };
    if !es.iter().any(|e| e.key == "name") {
        cx.err(
            f.node.pos,
            f.path,
            "missing required key `name` (the tool to call)",
        );
    }
    for e in es {
        let path = format!("{}.{}", f.path, e.key);
        let v = Field {
            node: &e.value,
            path: &path,
        };
        match e.key.as_str() {
            "name" => {
                v.word(cx, "a tool name");
            }
            "input_raw" | "id" => {
                v.str(cx);
            }
            _ => {}
        }
    }
}

fn usage(cx: &mut Cx, f: Field) {
    let Some(es) = entries(cx, f, USAGE) else {
        return;
    };
    for required in ["input", "output"] {
        if !es.iter().any(|e| e.key == required) {
            cx.err(
                f.node.pos,
                f.path,
                format!("missing required key `{required}` (tokens)"),
            );
        }
    }
    for e in es.iter().filter(|e| USAGE.contains(&e.key.as_str())) {
        let path = format!("{}.{}", f.path, e.key);
        Field {
            node: &e.value,
            path: &path,
        }
        .u64(cx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errs(t: &str) -> Vec<String> {
        check_str(t, "replies.yaml")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_valid_script_has_no_problems() {
        let t = "- text: hi\n  tool_calls:\n    - {name: ls, input: {args: [\"-1\"]}, id: a}\n    - {name: x, input_raw: \"{oops\"}\n  usage: {input: 3, output: 4}\n- text: done\n";
        assert_eq!(errs(t), Vec::<String>::new());
    }

    #[test]
    fn every_problem_at_its_place() {
        let t = "- text: hi\n  tool_calls: 3\n- txet: x\n- tool_calls: [{nme: a}]\n- usage: {input: -1}\n";
        assert_eq!(
            errs(t),
            [
                "replies.yaml:2:15: [0].tool_calls: expected a list, found integer `3`",
                "replies.yaml:3:3: [1]: unknown key `txet` (did you mean `text`?)",
                "replies.yaml:4:16: [2].tool_calls[0]: missing required key `name` (the tool to call)",
                "replies.yaml:4:17: [2].tool_calls[0]: unknown key `nme` (did you mean `name`?)",
                "replies.yaml:5:10: [3].usage: missing required key `output` (tokens)",
                "replies.yaml:5:18: [3].usage.input: must not be negative, found `-1`",
            ]
        );
        assert_eq!(
            errs("text: hi\n"),
            ["replies.yaml:1:1: a replies file is a list of model turns (`- text: …`), found a mapping"]
        );
    }
}
