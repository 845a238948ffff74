//! A small YAML tree that remembers where every node and key came from.
//!
//! Built from yaml-rust2's marked event parser. Scalars keep their style and tag, so a
//! quoted `"123"` stays a string, and are only resolved (null, boolean, integer, number,
//! string) by [`Scalar::kind`] when the walker asks for a type.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};

/// The YAML core schema's tag prefix, what `!!` expands to.
const CORE_TAG: &str = "tag:yaml.org,2002:";

/// The key recorded for a mapping key that is not a scalar (already reported).
pub const COMPLEX_KEY: &str = "<complex key>";

/// A 1-based line and column in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl From<Marker> for Pos {
    fn from(m: Marker) -> Self {
        // yaml-rust2 counts lines from 1 but columns from 0.
        Pos {
            line: m.line(),
            column: m.col() + 1,
        }
    }
}

/// A node and the position it starts at.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the node starts.
    pub pos: Pos,
    /// What it holds.
    pub value: Value,
}

/// The contents of a [`Node`].
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A mapping, its entries in file order (duplicates kept, the walker reports them).
    Map(Vec<Entry>),
    /// A sequence.
    Seq(Vec<Node>),
    /// A scalar, unresolved.
    Scalar(Scalar),
}

/// One `key: value` of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key's text (a key that is not a scalar is reported while building).
    pub key: String,
    /// Where the key starts.
    pub key_pos: Pos,
    /// The value.
    pub value: Node,
}

/// A scalar as written: its text, whether it was quoted or a block, and its tag.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    /// The text after unescaping.
    pub text: String,
    /// `true` for a plain (unquoted, non-block) scalar, the only kind that resolves to
    /// anything but a string without a tag.
    pub plain: bool,
    /// The suffix of a `!!` core tag (`str`, `int`, ...), if any.
    pub core_tag: Option<String>,
}

/// What a scalar resolves to under the YAML 1.2 core schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `~`, `null`, or nothing at all.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number (decimal, `0x` hex or `0o` octal), possibly negative.
    Int(i128),
    /// A number with a fraction or exponent, or `.inf`/`.nan`.
    Float(f64),
    /// Anything else.
    Str,
}

impl Scalar {
    /// Resolves the scalar under the core schema; quoted and block scalars are strings.
    pub fn kind(&self) -> Kind {
        match self.core_tag.as_deref() {
            Some("str") => return Kind::Str,
            Some(_) => {}
            None if !self.plain => return Kind::Str,
            None => {}
        }
        resolve_plain(&self.text)
    }
}

/// Core-schema resolution of a plain scalar's text.
fn resolve_plain(t: &str) -> Kind {
    match t {
        "" | "~" | "null" | "Null" | "NULL" => return Kind::Null,
        "true" | "True" | "TRUE" => return Kind::Bool(true),
        "false" | "False" | "FALSE" => return Kind::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Kind::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Kind::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Kind::Float(f64::NAN),
        _ => {}
    }
    if let Some(hex) = t.strip_prefix("0x") {
        if let Ok(v) = i128::from_str_radix(hex, 16) {
            return Kind::Int(v);
        }
    }
    if let Some(oct) = t.strip_prefix("0o") {
        if let Ok(v) = i128::from_str_radix(oct, 8) {
            return Kind::Int(v);
        }
    }
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(v) = t.parse::<i128>() {
            return Kind::Int(v);
        }
    }
    let is_float_syntax = !digits.is_empty()
        && digits.bytes().any(|b| b.is_ascii_digit())
        && digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'));
    if is_float_syntax {
        if let Ok(v) = t.parse::<f64>() {
            return Kind::Float(v);
        }
    }
    Kind::Str
}

/// A problem found while building the tree (not a syntax error).
#[derive(Debug, Clone, PartialEq)]
pub struct TreeError {
    /// Where.
    pub pos: Pos,
    /// The key path of the enclosing node, `.`-joined, `[i]` for list items.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// Why the text could not be read as YAML at all.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    /// Where the scanner stopped.
    pub pos: Pos,
    /// The scanner's own words.
    pub message: String,
}

/// Parses `text` into one [`Node`]; `None` for an empty stream (no document).
///
/// # Errors
///
/// A [`SyntaxError`] when the text is not YAML; on success also returns the
/// [`TreeError`]s found while building (non-scalar keys, unknown aliases, a second
/// document, unsupported tags), which the caller reports alongside its own.
pub fn parse(text: &str) -> Result<(Option<Node>, Vec<TreeError>), SyntaxError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // The YAML parser recurses per level of nesting: refuse absurd indentation before
    // it can exhaust the stack.
    for (i, line) in text.lines().enumerate() {
        let indent = line.bytes().take_while(|b| *b == b' ').count();
        if indent > MAX_INDENT {
            return Err(SyntaxError {
                pos: Pos {
                    line: i + 1,
                    column: 1,
                },
                message: format!(
                    "indented deeper than {MAX_INDENT} columns; a manifest needs only a few levels"
                ),
            });
        }
    }
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    // Event by event rather than `Parser::load`, so the input is refused as soon as it
    // crosses MAX_NODES: nothing past that point is read, let alone checked.
    loop {
        let (ev, mark) = parser.next_token().map_err(|e: ScanError| SyntaxError {
            pos: (*e.marker()).into(),
            message: e.info().to_string(),
        })?;
        let end = ev == Event::StreamEnd;
        builder.on_event(ev, mark);
        if builder.over_budget {
            return Ok((None, builder.errors));
        }
        if end {
            break;
        }
    }
    Ok((builder.root, builder.errors))
}

/// A container being built.
#[derive(Debug)]
enum Frame {
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<Entry>,
        /// A key waiting for its value.
        pending_key: Option<(String, Pos)>,
    },
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node>,
    },
}

/// The event receiver that assembles the tree.
#[derive(Debug, Default)]
struct Builder {
    stack: Vec<Frame>,
    root: Option<Node>,
    documents: usize,
    /// Anchored nodes by anchor id (a redefined anchor gets a new id).
    anchors: HashMap<usize, Node>,
    errors: Vec<TreeError>,
    /// Nodes built so far, aliases counted at their expanded size.
    nodes: usize,
    /// While > 0, the builder is inside a collection nested deeper than
    /// [`MAX_DEPTH`] and skips its events.
    skip_depth: usize,
    /// Whether the node budget was exceeded (reported once).
    over_budget: bool,
}

/// The deepest indentation, in columns, a manifest line may have.
pub const MAX_INDENT: usize = 256;
/// The deepest nesting of collections a manifest may use.
pub const MAX_DEPTH: usize = 64;
/// The most nodes a manifest may expand to, aliases counted at their expanded size
/// (guards against "billion laughs" alias bombs).
pub const MAX_NODES: usize = 100_000;

fn node_count(n: &Node) -> usize {
    match &n.value {
        Value::Seq(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|e| node_count(&e.value)).sum::<usize>(),
        _ => 1,
    }
}

impl Builder {
    /// The key path of the innermost open container, for tree errors.
    fn path(&self) -> String {
        let mut out = String::new();
        for frame in &self.stack {
            match frame {
                Frame::Map { pending_key, .. } => {
                    if let Some((k, _)) = pending_key {
                        if !out.is_empty() {
                            out.push('.');
                        }
                        out.push_str(k);
                    }
                }
                Frame::Seq { items, .. } => out.push_str(&format!("[{}]", items.len())),
            }
        }
        out
    }

    fn error(&mut self, pos: Pos, message: String) {
        let path = self.path();
        self.errors.push(TreeError { pos, path, message });
    }

    /// Hands a finished node to the enclosing container, or makes it the root.
    fn push(&mut self, node: Node, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => {
                if self.documents == 1 {
                    self.root = Some(node);
                }
            }
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries,
                pending_key,
                ..
            }) => match pending_key.take() {
                Some((key, key_pos)) => {
                    let mut value = node;
                    // An empty value is marked where the parser noticed it, often the
                    // next line; its key is where a reader looks.
                    if matches!(&value.value, Value::Scalar(s) if s.plain && s.text.is_empty()) {
                        value.pos = key_pos;
                    }
                    entries.push(Entry {
                        key,
                        key_pos,
                        value,
                    });
                }
                None => match node.value {
                    Value::Scalar(s) => *pending_key = Some((s.text, node.pos)),
                    _ => {
                        let pos = node.pos;
                        self.error(pos, "a key must be a plain string".into());
                        // Keep the map's shape with a placeholder key.
                        if let Some(Frame::Map { pending_key, .. }) = self.stack.last_mut() {
                            *pending_key = Some((COMPLEX_KEY.into(), pos));
                        }
                    }
                },
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let pos = Pos::from(mark);
        if self.skip_depth > 0 {
            match ev {
                Event::SequenceStart(..) | Event::MappingStart(..) => self.skip_depth += 1,
                Event::SequenceEnd | Event::MappingEnd => {
                    self.skip_depth -= 1;
                    if self.skip_depth == 0 {
                        self.push(
                            Node {
                                pos,
                                value: Value::Scalar(Scalar {
                                    text: String::new(),
                                    plain: true,
                                    core_tag: None,
                                }),
                            },
                            0,
                        );
                    }
                }
                _ => {}
            }
            return;
        }
        if matches!(ev, Event::SequenceStart(..) | Event::MappingStart(..))
            && self.stack.len() >= MAX_DEPTH
        {
            self.error(
                pos,
                format!("nested deeper than {MAX_DEPTH} levels; a manifest needs only a few"),
            );
            self.skip_depth = 1;
            return;
        }
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            if !self.over_budget {
                self.over_budget = true;
                self.error(pos, format!("the manifest expands to more than {MAX_NODES} values (aliases counted at their expanded size)"));
            }
            if let Event::Alias(_) = ev {
                return;
            }
        }
        match ev {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents == 2 {
                    self.error(
                        pos,
                        "a manifest is one YAML document; remove the second `---`".into(),
                    );
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let mut core_tag = None;
                if let Some(tag) = tag {
                    if tag.handle == CORE_TAG
                        && matches!(
                            tag.suffix.as_str(),
                            "str" | "int" | "float" | "bool" | "null"
                        )
                    {
                        core_tag = Some(tag.suffix);
                    } else {
                        self.error(
                            pos,
                            format!("unsupported YAML tag `{}{}`", tag.handle, tag.suffix),
                        );
                    }
                }
                let scalar = Scalar {
                    text,
                    plain: style == TScalarStyle::Plain,
                    core_tag,
                };
                self.push(
                    Node {
                        pos,
                        value: Value::Scalar(scalar),
                    },
                    anchor,
                );
            }
            Event::SequenceStart(anchor, _) => self.stack.push(Frame::Seq {
                pos,
                anchor,
                items: Vec::new(),
            }),
            Event::MappingStart(anchor, _) => self.stack.push(Frame::Map {
                pos,
                anchor,
                entries: Vec::new(),
                pending_key: None,
            }),
            Event::SequenceEnd | Event::MappingEnd => {
                // The parser marks a block collection's start after its first item
                // was scanned; the first item's own position is the honest one.
                let (node, anchor) = match self.stack.pop() {
                    Some(Frame::Seq { pos, anchor, items }) => (
                        Node {
                            pos: items.first().map_or(pos, |n| n.pos.min(pos)),
                            value: Value::Seq(items),
                        },
                        anchor,
                    ),
                    Some(Frame::Map {
                        pos,
                        anchor,
                        entries,
                        ..
                    }) => (
                        Node {
                            pos: entries.first().map_or(pos, |e| e.key_pos.min(pos)),
                            value: Value::Map(entries),
                        },
                        anchor,
                    ),
                    None => return,
                };
                self.push(node, anchor);
            }
            Event::Alias(id) => match self.anchors.get(&id) {
                Some(node) => {
                    let size = node_count(node);
                    self.nodes += size;
                    if self.nodes > MAX_NODES {
                        if !self.over_budget {
                            self.over_budget = true;
                            self.error(pos, format!("the manifest expands to more than {MAX_NODES} values (aliases counted at their expanded size)"));
                        }
                        return;
                    }
                    let mut node = node.clone();
                    node.pos = pos;
                    self.push(node, 0);
                }
                None => {
                    self.error(pos, "alias to an unknown anchor".into());
                    let null = Node {
                        pos,
                        value: Value::Scalar(Scalar {
                            text: String::new(),
                            plain: true,
                            core_tag: None,
                        }),
                    };
                    self.push(null, 0);
                }
            },
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse(text).unwrap().0.unwrap()
    }

    #[test]
    fn positions_are_one_based() {
        let n = root("a: 1\nb:\n  c: x\n");
        let Value::Map(entries) = &n.value else {
            panic!("not a map")
        };
        assert_eq!(entries[0].key_pos, Pos { line: 1, column: 1 });
        assert_eq!(entries[0].value.pos, Pos { line: 1, column: 4 });
        let Value::Map(inner) = &entries[1].value.value else {
            panic!("not a map")
        };
        assert_eq!(inner[0].key_pos, Pos { line: 3, column: 3 });
        assert_eq!(n.pos, Pos { line: 1, column: 1 });
        assert_eq!(entries[1].value.pos, Pos { line: 3, column: 3 });
    }

    #[test]
    fn flow_collections_start_at_their_bracket() {
        let n = root(
            "a: {b: [1, 2]}
",
        );
        let Value::Map(entries) = &n.value else {
            panic!("not a map")
        };
        assert_eq!(entries[0].value.pos, Pos { line: 1, column: 4 });
        let Value::Map(inner) = &entries[0].value.value else {
            panic!("not a map")
        };
        assert_eq!(inner[0].value.pos, Pos { line: 1, column: 8 });
    }

    #[test]
    fn scalar_resolution() {
        let s = |text: &str, plain| Scalar {
            text: text.into(),
            plain,
            core_tag: None,
        };
        assert_eq!(s("123", true).kind(), Kind::Int(123));
        assert_eq!(s("123", false).kind(), Kind::Str);
        assert_eq!(s("-4", true).kind(), Kind::Int(-4));
        assert_eq!(s("0x1f", true).kind(), Kind::Int(31));
        assert_eq!(s("0.5", true).kind(), Kind::Float(0.5));
        assert_eq!(s("1e3", true).kind(), Kind::Float(1000.0));
        assert_eq!(s("~", true).kind(), Kind::Null);
        assert_eq!(s("", true).kind(), Kind::Null);
        assert_eq!(s("True", true).kind(), Kind::Bool(true));
        assert_eq!(s("yes", true).kind(), Kind::Str);
        assert_eq!(s("10s", true).kind(), Kind::Str);
        assert_eq!(s("e", true).kind(), Kind::Str);
        assert_eq!(s("1.2.3", true).kind(), Kind::Str);
    }

    #[test]
    fn str_tag_keeps_a_number_a_string() {
        let n = root("a: !!str 5\n");
        let Value::Map(entries) = &n.value else {
            panic!("not a map")
        };
        let Value::Scalar(s) = &entries[0].value.value else {
            panic!("not a scalar")
        };
        assert_eq!(s.kind(), Kind::Str);
    }

    #[test]
    fn aliases_are_expanded() {
        let n = root("a: &x [1, 2]\nb: *x\n");
        let Value::Map(entries) = &n.value else {
            panic!("not a map")
        };
        assert_eq!(entries[0].value.value, entries[1].value.value);
    }

    #[test]
    fn empty_text_has_no_document() {
        assert_eq!(parse("").unwrap().0, None);
        assert_eq!(parse("# only a comment\n").unwrap().0, None);
    }

    #[test]
    fn syntax_error_has_a_position() {
        let e = parse("a:\n\tb: 1\n").unwrap_err();
        assert_eq!(e.pos.line, 2);
    }
}
