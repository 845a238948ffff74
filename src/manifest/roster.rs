//! `roster.yaml`: the members of a formation, its entry member and who may call whom.
//!
//! ```yaml
//! formation: review
//! entry: lead
//! members:
//!   lead:   {capsule: ./lead, calls: [worker, critic]}
//!   worker: {capsule: ./worker}
//!   critic: {door: "http://127.0.0.1:7431/", token: {env: CRITIC_TOKEN}}
//! ```
//!
//! | key | holds | default |
//! |---|---|---|
//! | `formation` | the formation's name, `[a-z0-9][a-z0-9._-]*` | required |
//! | `entry` | the member that gets `mur run --roster`'s task; a local member | required |
//! | `members.<name>` | one member; the name is `[a-z0-9][a-z0-9._-]*` | at least one |
//! | `members.<name>.capsule` | a local member: its capsule directory (or `murmur.yaml`), relative to the roster's directory | — |
//! | `members.<name>.door` | a remote member: the `http://` or `https://` URL of its A2A door | — |
//! | `members.<name>.token` | a remote member's bearer token, `{env: VAR}` or `{file: PATH}` | no `Authorization` header |
//! | `members.<name>.calls` | the members this one may call (its reachability rule), in the order `call-member`'s enum lists them | `[]`: no call-member tool |
//! | `members.<name>.listen` | a local member's door address, `HOST:PORT` | `127.0.0.1:0` (an ephemeral loopback port) |
//! | `members.<name>.request_timeout_secs` | the whole-request timeout of each HTTP request a caller makes to this member's door (card, `SendMessage`, `GetTask`, `CancelTask`), whole seconds ≥ 1 | `10` |
//!
//! A remote member's `door` is an A2A agent's base address (`http://host:port`, as A2A
//! agents are published) or its JSON-RPC endpoint: the endpoint is found from the agent
//! card ([`crate::a2a::client`], "Discovery").
//!
//! Exactly one of `capsule` and `door`. A remote member's own calls are its own
//! business, so `calls` and `listen` are local-only, and `token` remote-only. The same
//! parser as `murmur.yaml` reads it, so every problem is reported at once with
//! `file:line:column`, its key path and the nearest known key or member name.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::keys;
use super::parse::{read, walk_yaml, ManifestError};
use super::sections::{credential, is_name};
use super::suggest;
use super::types::Credential;
use super::walk::{describe, Cx, Field};
use super::yaml::Value;

/// A validated roster.
#[derive(Debug, Clone, PartialEq)]
pub struct Roster {
    /// `formation`.
    pub formation: String,
    /// `entry`: a local member's name.
    pub entry: String,
    /// `members`, in file order (the roster order).
    pub members: Vec<RosterMember>,
}

/// One member of a roster.
#[derive(Debug, Clone, PartialEq)]
pub struct RosterMember {
    /// Its name (the key under `members`).
    pub name: String,
    /// Where it runs.
    pub place: Place,
    /// `calls`: the members it may call, in the order written.
    pub calls: Vec<String>,
    /// `request_timeout_secs`: the whole-request timeout of a call to its door, in
    /// seconds (at least 1); `None`: 10 seconds
    /// ([`DEFAULT_REQUEST_TIMEOUT_SECS`]).
    pub request_timeout_secs: Option<u64>,
}

/// The request timeout of a call to a member's door unless
/// `members.<name>.request_timeout_secs` sets one, in seconds: 10.
pub const DEFAULT_REQUEST_TIMEOUT_SECS: u64 = 10;

impl RosterMember {
    /// The request timeout of a call to its door, in seconds.
    pub fn request_timeout_secs(&self) -> u64 {
        self.request_timeout_secs
            .unwrap_or(DEFAULT_REQUEST_TIMEOUT_SECS)
    }
}

/// Where a member runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Place {
    /// In this process: a capsule staged by `mur run --roster`.
    Local {
        /// The capsule path as written, relative to the roster's directory unless absolute.
        capsule: PathBuf,
        /// `listen`: the door's address; `None`: `127.0.0.1:0`.
        listen: Option<SocketAddr>,
    },
    /// Elsewhere: any A2A agent, reached at its door.
    Remote {
        /// `door`: the URL.
        door: String,
        /// `token`: where its bearer token is read from.
        token: Option<Credential>,
    },
}

impl Roster {
    /// The member called `name`.
    pub fn member(&self, name: &str) -> Option<&RosterMember> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Every member name, in roster order.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.name.as_str()).collect()
    }

    /// The members `caller` may call, in roster order (the order of `call-member`'s
    /// enum), whatever order its `calls` lists them in.
    pub fn callees_of(&self, caller: &str) -> Vec<String> {
        let Some(m) = self.member(caller) else {
            return Vec::new();
        };
        self.members
            .iter()
            .filter(|c| m.calls.contains(&c.name))
            .map(|c| c.name.clone())
            .collect()
    }
}

/// Reads and validates the roster at `path`.
///
/// # Errors
///
/// A [`ManifestError`] listing every problem, as [`parse_roster`]; a position-less one
/// when the file cannot be read.
pub fn load_roster(path: &Path) -> Result<Roster, ManifestError> {
    let (text, file) = read(path, "roster")?;
    let base = std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    parse_roster_in(&text, &file, base.as_deref())
}

/// Validates roster text; `file` names it in diagnostics.
///
/// # Errors
///
/// A [`ManifestError`] holding every problem, in file order: YAML syntax, unknown and
/// duplicate keys (with the nearest known key), wrong types, a member with both or
/// neither of `capsule` and `door`, an `entry` or `calls` naming no member (with the
/// nearest member name), a member calling itself, a remote entry member.
pub fn parse_roster(text: &str, file: &str) -> Result<Roster, ManifestError> {
    parse_roster_in(text, file, None)
}

/// [`parse_roster`] for a roster in the directory `base`: each local member's
/// `capsule` must also exist there (a directory with a `murmur.yaml`, or the file),
/// else it is reported at its position, with the nearest capsule directory beside it.
///
/// # Errors
///
/// As [`parse_roster`], and a `capsule` that names no capsule.
pub fn parse_roster_in(
    text: &str,
    file: &str,
    base: Option<&Path>,
) -> Result<Roster, ManifestError> {
    let (roster, diagnostics) = walk_yaml(
        text,
        file,
        "empty roster: missing required keys `formation`, `entry` and `members`",
        |cx, root| {
            walk(
                cx,
                Field {
                    node: root,
                    path: "",
                },
                base,
            )
        },
    );
    match roster {
        Some(r) if diagnostics.is_empty() => Ok(r),
        _ => Err(ManifestError { diagnostics }),
    }
}

fn name_of(cx: &mut Cx, f: Field, what: &str) -> Option<String> {
    let s = f.str(cx)?;
    if is_name(&s) {
        Some(s)
    } else {
        cx.err(
            f.node.pos,
            f.path,
            format!("`{s}` is not a valid {what} (use `[a-z0-9][a-z0-9._-]*`)"),
        );
        None
    }
}

/// A member name that must be one of `names`.
fn member_ref(cx: &mut Cx, f: Field, names: &[&str]) -> Option<String> {
    let s = f.str(cx)?;
    if names.contains(&s.as_str()) {
        return Some(s);
    }
    cx.err(
        f.node.pos,
        f.path,
        if names.is_empty() {
            format!("`{s}` is not a member of this roster: `members` names none (give it a map of member names)")
        } else {
            format!("`{s}` is not a member of this roster{}", suggest::hint(&s, names))
        },
    );
    None
}

fn walk(cx: &mut Cx, top: Field, base: Option<&Path>) -> Option<Roster> {
    if !matches!(top.node.value, Value::Map(_)) {
        cx.err(
            top.node.pos,
            "",
            format!(
                "a roster is a mapping of keys, found {}",
                describe(top.node)
            ),
        );
        return None;
    }
    let o = top.obj(cx, keys::ROSTER)?;
    let formation = o.req(cx, "formation", |cx, f| name_of(cx, f, "formation name"));
    // Member names first, so `entry` and `calls` can be checked against them.
    let member_entries = o.opt(cx, "members", |cx, f| f.entries(cx));
    if !o.has("members") {
        o.missing(cx, "members", " (the formation's members, by name)");
    }
    let names: Vec<&str> = member_entries
        .unwrap_or_default()
        .iter()
        .map(|e| e.key.as_str())
        .collect();
    let mut members = Vec::new();
    if let Some(entries) = member_entries {
        if entries.is_empty() {
            cx.err(
                o.key_pos("members"),
                "members",
                "a formation needs at least one member",
            );
        }
        for (i, e) in entries.iter().enumerate() {
            if entries[..i].iter().any(|f| f.key == e.key) {
                continue; // reported by entries()
            }
            let path = format!("members.{}", e.key);
            if !is_name(&e.key) {
                cx.err(
                    e.key_pos,
                    "members",
                    format!(
                        "`{}` is not a valid member name (use `[a-z0-9][a-z0-9._-]*`)",
                        e.key
                    ),
                );
            }
            if let Some(m) = member(
                cx,
                &e.key,
                Field {
                    node: &e.value,
                    path: &path,
                },
                &names,
                base,
            ) {
                members.push(m);
            }
        }
    }
    let entry = o.req(cx, "entry", |cx, f| {
        let s = member_ref(cx, f, &names)?;
        if members
            .iter()
            .any(|m| m.name == s && matches!(m.place, Place::Remote { .. }))
        {
            cx.err(
                f.node.pos,
                f.path,
                format!("`{s}` is a remote member (it has a `door`); the entry member must be a local capsule"),
            );
            return None;
        }
        Some(s)
    });
    o.finish();
    let formation = formation?;
    let entry = entry?;
    if members.len() != names.len() {
        return None;
    }
    Some(Roster {
        formation,
        entry,
        members,
    })
}

fn member(
    cx: &mut Cx,
    name: &str,
    f: Field,
    names: &[&str],
    base: Option<&Path>,
) -> Option<RosterMember> {
    let m = f.obj(cx, keys::ROSTER_MEMBER)?;
    let capsule = m.opt(cx, "capsule", |cx, f| {
        let s = f.str(cx)?;
        if s.trim().is_empty() {
            cx.err(f.node.pos, f.path, "must not be empty");
            return None;
        }
        if let Some(base) = base {
            if let Some(problem) = missing_capsule(base, &s) {
                cx.err(f.node.pos, f.path, problem);
                return None;
            }
        }
        Some(PathBuf::from(s))
    });
    let door = m.opt(cx, "door", |cx, f| {
        let s = f.word(cx, "a door URL")?;
        if !(s.starts_with("http://") || s.starts_with("https://")) {
            cx.err(
                f.node.pos,
                f.path,
                format!("`{s}` is not an http:// or https:// URL"),
            );
            return None;
        }
        Some(s)
    });
    let token = m.opt(cx, "token", credential);
    let listen = m.opt(cx, "listen", |cx, f| {
        let s = f.str(cx)?;
        match s.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                cx.err(
                    f.node.pos,
                    f.path,
                    format!("`{s}` is not an address `HOST:PORT` with an IP host, e.g. `127.0.0.1:7431`"),
                );
                None
            }
        }
    });
    let request_timeout_secs = m.opt_positive(
        cx,
        "request_timeout_secs",
        "leave the key out for the default of 10 seconds",
    );
    let calls = m
        .opt(cx, "calls", |cx, f| {
            Some(f.list_of(cx, |cx, item| {
                let s = member_ref(cx, item, names)?;
                if s == name {
                    cx.err(
                        item.node.pos,
                        item.path,
                        format!("`{s}` cannot call itself"),
                    );
                    return None;
                }
                Some(s)
            }))
        })
        .unwrap_or_default();
    let place = match (capsule, door, m.has("capsule"), m.has("door")) {
        (_, _, true, true) => {
            cx.err(
                m.key_pos("door"),
                &m.path,
                "give either `capsule` (a local member) or `door` (a remote one), not both",
            );
            None
        }
        (_, _, false, false) => {
            m.missing(cx, "capsule", " (a local member), or `door` (a remote one)");
            None
        }
        (Some(capsule), None, _, _) => {
            if m.has("token") {
                cx.err(
                    m.key_pos("token"),
                    &m.path,
                    "`token` is for a remote member (with `door`); a local member's door uses the formation token",
                );
            }
            Some(Place::Local { capsule, listen })
        }
        (None, Some(door), _, _) => {
            for key in ["calls", "listen"] {
                if m.has(key) {
                    cx.err(
                        m.key_pos(key),
                        &m.path,
                        format!("`{key}` is for a local member (with `capsule`); a remote member's own calls and address are its own"),
                    );
                }
            }
            Some(Place::Remote { door, token })
        }
        _ => None,
    };
    m.finish();
    Some(RosterMember {
        name: name.to_string(),
        place: place?,
        calls,
        request_timeout_secs,
    })
}

/// Why `capsule` (as written, relative to `base`) names no capsule, with the nearest
/// capsule directory beside where it points; `None` when it is one.
fn missing_capsule(base: &Path, capsule: &str) -> Option<String> {
    let p = base.join(capsule);
    if p.is_file() || p.join("murmur.yaml").is_file() {
        return None;
    }
    if p.is_dir() {
        return Some(format!(
            "`{capsule}` has no murmur.yaml ({} is a directory, not a capsule)",
            p.display()
        ));
    }
    // Capsule directories beside the one named, by the name as written.
    let written = Path::new(capsule);
    let (prefix, last) = match (written.parent(), written.file_name()) {
        (Some(pa), Some(l)) => (pa.to_path_buf(), l.to_string_lossy().into_owned()),
        _ => (PathBuf::new(), capsule.to_string()),
    };
    let siblings: Vec<String> = std::fs::read_dir(base.join(&prefix))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join("murmur.yaml").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let known: Vec<&str> = siblings.iter().map(String::as_str).collect();
    let hint = suggest::nearest(&last, &known)
        .map(|n| {
            let shown = prefix.join(n).display().to_string();
            format!(" (did you mean `{shown}`?)")
        })
        .unwrap_or_default();
    Some(format!(
        "`{capsule}`: no such capsule directory or murmur.yaml, relative to the roster's directory {}{hint}",
        base.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        parse_roster(text, "roster.yaml")
            .unwrap_err()
            .diagnostics
            .iter()
            .map(|d| d.to_string())
            .collect()
    }

    #[test]
    fn the_architecture_example_parses() {
        let r = parse_roster(
            "formation: review\nentry: lead\nmembers:\n  lead:   {capsule: ./lead, calls: [critic, worker]}\n  worker: {capsule: ./worker}\n  critic: {door: \"http://127.0.0.1:7431/\", token: {env: CRITIC_TOKEN}}\n",
            "roster.yaml",
        )
        .unwrap();
        assert_eq!(r.entry, "lead");
        assert_eq!(r.names(), ["lead", "worker", "critic"]);
        // roster order, not the order of `calls`
        assert_eq!(r.callees_of("lead"), ["worker", "critic"]);
        assert!(r.callees_of("worker").is_empty());
        assert_eq!(
            r.member("critic").unwrap().place,
            Place::Remote {
                door: "http://127.0.0.1:7431/".into(),
                token: Some(Credential::Env("CRITIC_TOKEN".into()))
            }
        );
    }

    #[test]
    fn every_problem_is_reported_with_position_path_and_hint() {
        let e = errors(
            "formation: review\nentry: leed\nmembers:\n  lead: {capsule: ./lead, calls: [wroker, lead]}\n  worker: {capsule: ./w, door: \"http://x/\"}\n  critic: {capsul: ./c}\n",
        );
        assert_eq!(
            e,
            [
                "roster.yaml:2:8: entry: `leed` is not a member of this roster (did you mean `lead`?)",
                "roster.yaml:4:35: members.lead.calls[0]: `wroker` is not a member of this roster (did you mean `worker`?)",
                "roster.yaml:4:43: members.lead.calls[1]: `lead` cannot call itself",
                "roster.yaml:5:26: members.worker: give either `capsule` (a local member) or `door` (a remote one), not both",
                "roster.yaml:6:11: members.critic: missing required key `capsule` (a local member), or `door` (a remote one)",
                "roster.yaml:6:12: members.critic: unknown key `capsul` (did you mean `capsule`?)",
            ]
        );
    }

    #[test]
    fn a_remote_entry_and_remote_calls_are_refused() {
        let e = errors(
            "formation: f\nentry: far\nmembers:\n  far: {door: \"http://h:1/\", calls: [near]}\n  near: {capsule: n}\n",
        );
        assert_eq!(
            e,
            [
                "roster.yaml:2:8: entry: `far` is a remote member (it has a `door`); the entry member must be a local capsule",
                "roster.yaml:4:30: members.far: `calls` is for a local member (with `capsule`); a remote member's own calls and address are its own",
            ]
        );
    }

    #[test]
    fn request_timeout_secs_is_read_for_any_member_and_must_be_at_least_1() {
        let r = parse_roster(
            "formation: f\nentry: lead\nmembers:\n  lead: {capsule: l, calls: [far], request_timeout_secs: 4}\n  far: {door: \"http://h:1\", request_timeout_secs: 120}\n",
            "roster.yaml",
        )
        .unwrap();
        assert_eq!(r.member("far").unwrap().request_timeout_secs(), 120);
        assert_eq!(r.member("lead").unwrap().request_timeout_secs(), 4);
        let r = parse_roster(
            "formation: f\nentry: lead\nmembers:\n  lead: {capsule: l}\n",
            "roster.yaml",
        )
        .unwrap();
        assert_eq!(
            r.member("lead").unwrap().request_timeout_secs(),
            DEFAULT_REQUEST_TIMEOUT_SECS
        );
        let e = errors(
            "formation: f\nentry: lead\nmembers:\n  lead: {capsule: l}\n  far: {door: \"http://h:1\", request_timeout_secs: 0, request_timeout: 3}\n",
        );
        assert_eq!(
            e,
            [
                "roster.yaml:5:51: members.far.request_timeout_secs: must be at least 1; leave the key out for the default of 10 seconds",
                "roster.yaml:5:54: members.far: unknown key `request_timeout` (did you mean `request_timeout_secs`?)",
            ]
        );
    }

    #[test]
    fn missing_keys_and_syntax() {
        assert_eq!(
            errors("formation: f\n"),
            [
                "roster.yaml:1:1: missing required key `members` (the formation's members, by name)",
                "roster.yaml:1:1: missing required key `entry`",
            ]
        );
        assert!(errors("formation: [\n")[0].starts_with("roster.yaml:"));
    }
}
