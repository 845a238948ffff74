//! Where an unclosed flow collection opened. yaml-rust2 reports an unclosed `[` or `{`
//! where it gave up, often the end of the file; [`unclosed_before`] finds the opener,
//! so the error points at the construct the user left open.
//!
//! A light scan, not a parser: in block context only a `[`, `{`, `'` or `"` that
//! starts a value (after the indentation, a `- ` or a `key: `) counts; inside a flow
//! collection quotes, brackets and ` #` comments are tracked.

use super::yaml::Pos;

/// The innermost flow collection opened before `upto` and not closed by then: its
/// position and its opening character.
pub fn unclosed_before(text: &str, upto: Pos) -> Option<(Pos, char)> {
    let mut stack: Vec<(Pos, char)> = Vec::new();
    let mut quote: Option<char> = None;
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if lineno > upto.line {
            break;
        }
        let chars: Vec<char> = line.chars().collect();
        let end = if lineno == upto.line {
            (upto.column.saturating_sub(1)).min(chars.len())
        } else {
            chars.len()
        };
        let mut c = 0;
        // Block context: find where values start on this line.
        if stack.is_empty() && quote.is_none() {
            c = value_start(&chars);
            if c >= end {
                continue;
            }
            match chars[c] {
                '[' | '{' => {}
                '\'' | '"' => {}
                _ => {
                    // `key: value`: the value may open a flow collection.
                    match find_value_after_key(&chars, c) {
                        Some(v) if v < end && matches!(chars[v], '[' | '{' | '\'' | '"') => c = v,
                        _ => continue,
                    }
                }
            }
        }
        let mut prev_space = true;
        while c < end {
            let ch = chars[c];
            if let Some(q) = quote {
                if q == '"' && ch == '\\' {
                    c += 2;
                    continue;
                }
                if ch == q {
                    if q == '\'' && chars.get(c + 1) == Some(&'\'') {
                        c += 2;
                        continue;
                    }
                    quote = None;
                }
                c += 1;
                prev_space = false;
                continue;
            }
            match ch {
                '\'' | '"' => quote = Some(ch),
                '[' | '{' => stack.push((
                    Pos {
                        line: lineno,
                        column: c + 1,
                    },
                    ch,
                )),
                ']' | '}' => {
                    stack.pop();
                    if stack.is_empty() {
                        break;
                    }
                }
                '#' if prev_space => break,
                _ => {}
            }
            prev_space = ch == ' ' || ch == '\t';
            c += 1;
        }
    }
    stack.pop()
}

/// The index of the first character after the indentation and any `- ` markers.
fn value_start(chars: &[char]) -> usize {
    let mut c = 0;
    loop {
        while c < chars.len() && chars[c] == ' ' {
            c += 1;
        }
        if c + 1 < chars.len() && chars[c] == '-' && chars[c + 1] == ' ' {
            c += 2;
        } else {
            return c;
        }
    }
}

/// The index of the value after the first `: ` (or `:` ending the line) from `from`.
fn find_value_after_key(chars: &[char], from: usize) -> Option<usize> {
    let mut c = from;
    while c < chars.len() {
        if chars[c] == ':' && chars.get(c + 1).is_none_or(|n| *n == ' ') {
            let mut v = c + 1;
            while v < chars.len() && chars[v] == ' ' {
                v += 1;
            }
            return (v < chars.len()).then_some(v);
        }
        if chars[c] == '#' && c > 0 && chars[c - 1] == ' ' {
            return None;
        }
        c += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize, column: usize) -> Pos {
        Pos { line, column }
    }

    #[test]
    fn finds_the_open_bracket() {
        let t = "name: a\ntools: [acme/x\n";
        assert_eq!(unclosed_before(t, at(3, 1)), Some((at(2, 8), '[')));
        let t = "a:\n  b: {c: [1, 2], d: 'x]'\ne: f\n";
        assert_eq!(unclosed_before(t, at(3, 2)), Some((at(2, 6), '{')));
        let t = "a: it's [not flow\nb: [1]\nc: x # [no\n";
        assert_eq!(unclosed_before(t, at(4, 1)), None);
        let t = "- [a, b]\n- {c: d}\n";
        assert_eq!(unclosed_before(t, at(3, 1)), None);
    }
}
