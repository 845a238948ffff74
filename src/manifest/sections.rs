//! The manifest's sections: what each key must hold, the defaults, and the rules that
//! span keys. Reads through [`super::walk`], so every problem is recorded and the walk
//! goes on.

use std::path::PathBuf;

use super::keys;
use super::suggest;
use super::types::{
    AfterTask, ArtifactRef, Capabilities, Control, Credential, DoneCheck, DriverChoice, DriverKind,
    Exports, Hook, Hooks, Inference, Install, KeepWorking, Lifecycle, Manifest, Prompt,
    TaskAcceptance, Transport,
};
use super::walk::{describe, join, Cx, Field};
use super::yaml::{Kind, Node, Value};

/// Default of a choice's `request_timeout_secs`, in seconds.
pub const DEFAULT_REQUEST_TIMEOUT_SECS: u64 = 300;
/// Default of a choice's `max_retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 4;
/// Default of a choice's `max_retry_after_secs`: the longest `Retry-After` waited for.
pub const DEFAULT_MAX_RETRY_AFTER_SECS: u64 = 60;
/// Default of `inference.compaction.threshold`, a fraction of the input budget.
pub const DEFAULT_COMPACTION_THRESHOLD: f64 = 0.8;

/// `[a-z0-9][a-z0-9._-]*`: capsule, scope and artifact names.
pub(super) fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

/// Walks the whole manifest; `None` when a required part could not be read.
pub(super) fn manifest(cx: &mut Cx, root: &Node) -> Option<Manifest> {
    let top = Field {
        node: root,
        path: "",
    };
    if !matches!(root.value, Value::Map(_)) {
        cx.err(
            root.pos,
            "",
            format!("a manifest is a mapping of keys, found {}", describe(root)),
        );
        return None;
    }
    let o = top.obj(cx, keys::ROOT)?;
    let name = o.req(cx, "name", |cx, f| {
        let s = f.str(cx)?;
        if !is_name(&s) {
            cx.err(
                f.node.pos,
                f.path,
                format!("`{s}` is not a valid name (use `[a-z0-9][a-z0-9._-]*`)"),
            );
            return None;
        }
        Some(s)
    });
    let description = o.opt_str(cx, "description");
    let transport = o
        .opt(cx, "transport", |cx, f| {
            f.one_of(
                cx,
                &[("http", Transport::Http), ("process", Transport::Process)],
            )
        })
        .unwrap_or_default();
    let prompt = o
        .opt(cx, "prompt", |cx, f| prompt(cx, f))
        .unwrap_or_default();
    let workdir = o
        .opt(cx, "workdir", |cx, f| f.rel_path(cx))
        .unwrap_or_else(|| PathBuf::from("."));
    let inference = o.opt(cx, "inference", |cx, f| inference(cx, f));
    let capabilities = o
        .opt(cx, "capabilities", |cx, f| capabilities(cx, f))
        .unwrap_or_default();
    let exports = o
        .opt(cx, "exports", |cx, f| {
            let e = f.obj(cx, keys::EXPORTS)?;
            let peer_files = e.opt(cx, "peer_files", |cx, f| f.rel_path(cx));
            e.finish();
            Some(Exports { peer_files })
        })
        .unwrap_or_default();
    let control = o
        .opt(cx, "control", |cx, f| {
            let c = f.obj(cx, keys::CONTROL)?;
            let agent_settings = c
                .opt(cx, "agent_settings", |cx, f| {
                    Some(f.list_of(cx, |cx, item| {
                        let s = item.str(cx)?;
                        if keys::AGENT_SETTINGS.contains(&s.as_str()) {
                            Some(s)
                        } else {
                            cx.err(
                                item.node.pos,
                                item.path,
                                format!(
                                    "unknown setting `{s}`{}",
                                    suggest::hint(&s, keys::AGENT_SETTINGS)
                                ),
                            );
                            None
                        }
                    }))
                })
                .unwrap_or_default();
            c.finish();
            Some(Control { agent_settings })
        })
        .unwrap_or_default();
    let lifecycle = o
        .opt(cx, "lifecycle", |cx, f| lifecycle(cx, f))
        .unwrap_or_default();
    let hooks = o.opt(cx, "hooks", |cx, f| hooks(cx, f)).unwrap_or_default();
    let task_acceptance = o
        .opt(cx, "task_acceptance", |cx, f| {
            f.one_of(
                cx,
                &[
                    ("reject", TaskAcceptance::Reject),
                    ("queue", TaskAcceptance::Queue),
                ],
            )
        })
        .unwrap_or_default();
    let after_task = o.opt(cx, "after_task", |cx, f| {
        f.one_of(
            cx,
            &[("sleep", AfterTask::Sleep), ("exit", AfterTask::Exit)],
        )
    });
    let tools = o
        .opt(cx, "tools", |cx, f| Some(f.list_of(cx, artifact)))
        .unwrap_or_default();
    let skills = o
        .opt(cx, "skills", |cx, f| Some(f.list_of(cx, artifact)))
        .unwrap_or_default();

    // Rules across sections.
    if control
        .agent_settings
        .iter()
        .any(|s| s == "inference.driver")
        && !o.has("inference")
    {
        cx.err(
            o.key_pos("control"),
            "control.agent_settings",
            "`inference.driver` needs an `inference` section to switch between",
        );
    }
    if transport == Transport::Process && capabilities.install.is_some() {
        cx.err(
            o.key_pos("capabilities"),
            "capabilities.install",
            "`capabilities.install` needs `transport: http` (under `process` the harness owns the tool list)",
        );
    }
    o.finish();

    Some(Manifest {
        name: name?,
        description,
        transport,
        prompt,
        workdir,
        inference,
        capabilities,
        exports,
        control,
        lifecycle,
        hooks,
        task_acceptance,
        after_task,
        tools,
        skills,
    })
}

/// `prompt`.
fn prompt(cx: &mut Cx, f: Field) -> Option<Prompt> {
    let p = f.obj(cx, keys::PROMPT)?;
    let system = p.opt_str(cx, "system");
    let system_file = p.opt(cx, "system_file", |cx, f| f.rel_path(cx));
    if p.has("system") && p.has("system_file") {
        let second = p.key_pos("system").max(p.key_pos("system_file"));
        cx.err(
            second,
            f.path,
            "give either `system` or `system_file`, not both",
        );
    }
    p.finish();
    Some(Prompt {
        system,
        system_file,
    })
}

/// `inference`.
fn inference(cx: &mut Cx, f: Field) -> Option<Inference> {
    let i = f.obj(cx, keys::INFERENCE)?;
    let choices = i.req(cx, "choices", |cx, f| {
        let entries = f.entries(cx)?;
        if entries.is_empty() {
            cx.err(f.node.pos, f.path, "declare at least one choice");
        }
        let mut out: Vec<(String, DriverChoice)> = Vec::new();
        for e in entries {
            let path = join(f.path, &e.key);
            let choice_field = Field {
                node: &e.value,
                path: &path,
            };
            if let Some(c) = choice(cx, choice_field) {
                if !out.iter().any(|(n, _)| *n == e.key) {
                    out.push((e.key.clone(), c));
                }
            }
        }
        Some(out)
    });
    let driver = i.req(cx, "driver", |cx, f| {
        let s = f.str(cx)?;
        let Some(choice_entries) = i.entry("choices").and_then(|e| match &e.value.value {
            Value::Map(m) => Some(m),
            _ => None,
        }) else {
            return Some(s); // `choices` is missing or wrong: already reported
        };
        let names: Vec<&str> = choice_entries.iter().map(|e| e.key.as_str()).collect();
        if names.contains(&s.as_str()) {
            Some(s)
        } else {
            cx.err(
                f.node.pos,
                f.path,
                format!(
                    "`{s}` is not a key of `inference.choices`{}",
                    suggest::hint(&s, &names)
                ),
            );
            None
        }
    });
    let max_turns = i.opt(cx, "max_turns", |cx, f| {
        let v = f.u32(cx)?;
        if v == 0 {
            cx.err(
                f.node.pos,
                f.path,
                "must be at least 1; leave the key out for no cap",
            );
            return None;
        }
        Some(v)
    });
    let max_session_tokens =
        i.opt_positive(cx, "max_session_tokens", "leave the key out for no ceiling");
    let compaction_declared = i.has("compaction");
    let compaction_threshold = i
        .opt(cx, "compaction", |cx, f| {
            let c = f.obj(cx, keys::COMPACTION)?;
            let t = c.opt(cx, "threshold", |cx, f| {
                let t = f.f64(cx)?;
                if t > 0.0 && t <= 1.0 {
                    Some(t)
                } else {
                    cx.err(
                        f.node.pos,
                        f.path,
                        format!("must be more than 0 and at most 1, found `{t}`"),
                    );
                    None
                }
            });
            c.finish();
            t
        })
        .unwrap_or(DEFAULT_COMPACTION_THRESHOLD);
    i.finish();
    Some(Inference {
        driver: driver?,
        choices: choices?,
        max_turns,
        max_session_tokens,
        compaction_threshold,
        compaction_declared,
    })
}

/// One entry of `inference.choices`.
fn choice(cx: &mut Cx, f: Field) -> Option<DriverChoice> {
    let c = f.obj(cx, keys::CHOICE)?;
    let driver = c.req(cx, "driver", |cx, f| {
        f.one_of(
            cx,
            &[
                ("openai", DriverKind::Openai),
                ("anthropic", DriverKind::Anthropic),
                ("script", DriverKind::Script),
            ],
        )
    });
    let model = c.opt_str(cx, "model");
    let base_url = c.opt(cx, "base_url", |cx, f| {
        let s = f.str(cx)?;
        if s.starts_with("http://") || s.starts_with("https://") {
            Some(s)
        } else {
            cx.err(
                f.node.pos,
                f.path,
                format!("`{s}` is not an `http://` or `https://` URL"),
            );
            None
        }
    });
    let credential = c.opt(cx, "credential", |cx, f| credential(cx, f));
    let script = c.opt(cx, "script", |cx, f| f.rel_path(cx));
    match driver {
        Some(DriverKind::Script) if !c.has("script") => {
            c.missing(cx, "script", " (the replies file of the `script` driver)");
        }
        Some(kind @ (DriverKind::Openai | DriverKind::Anthropic)) => {
            if c.has("script") {
                cx.err(
                    c.key_pos("script"),
                    f.path,
                    "`script` is only for `driver: script`",
                );
            }
            if !c.has("model") {
                let name = if kind == DriverKind::Openai {
                    "openai"
                } else {
                    "anthropic"
                };
                c.missing(
                    cx,
                    "model",
                    &format!(" (the `{name}` driver needs a model)"),
                );
            }
        }
        Some(DriverKind::Script) | None => {}
    }
    let context_window = c.opt_positive(cx, "context_window", "leave the key out if unknown");
    let max_output_tokens = c.opt_positive(cx, "max_output_tokens", "leave the key out for none");
    let max_input_tokens = c.opt_positive(cx, "max_input_tokens", "leave the key out for none");
    let temperature = c.opt(cx, "temperature", |cx, f| {
        let t = f.f64(cx)?;
        if t.is_finite() && t >= 0.0 {
            Some(t)
        } else {
            cx.err(
                f.node.pos,
                f.path,
                format!("must be a number of at least 0, found `{t}`"),
            );
            None
        }
    });
    let request_timeout_secs = c
        .opt_positive(
            cx,
            "request_timeout_secs",
            "leave the key out for the default of 300 seconds",
        )
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT_SECS);
    let max_retries = c.opt_u32(cx, "max_retries").unwrap_or(DEFAULT_MAX_RETRIES);
    let max_retry_after_secs = c
        .opt_secs(cx, "max_retry_after_secs")
        .unwrap_or(DEFAULT_MAX_RETRY_AFTER_SECS);
    let stream = c.opt(cx, "stream", |cx, f| f.bool(cx));
    if stream.is_some() && driver == Some(DriverKind::Script) {
        cx.err(
            c.key_pos("stream"),
            f.path,
            "`stream` is only for `driver: openai` and `driver: anthropic`",
        );
    }
    c.finish();
    Some(DriverChoice {
        driver: driver?,
        model,
        base_url,
        credential,
        script,
        context_window,
        max_output_tokens,
        max_input_tokens,
        temperature,
        request_timeout_secs,
        max_retries,
        max_retry_after_secs,
        stream: stream.unwrap_or(true),
    })
}

/// `credential`: `{env: VAR}` or `{file: PATH}`.
pub(super) fn credential(cx: &mut Cx, f: Field) -> Option<Credential> {
    let c = f.obj(cx, keys::CREDENTIAL)?;
    let env = c.opt(cx, "env", |cx, f| {
        let s = f.str(cx)?;
        let mut chars = s.chars();
        let ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ok {
            Some(s)
        } else {
            cx.err(
                f.node.pos,
                f.path,
                format!("`{s}` is not an environment variable name"),
            );
            None
        }
    });
    let file = c.opt(cx, "file", |cx, f| {
        let s = f.str(cx)?;
        if s.is_empty() {
            cx.err(f.node.pos, f.path, "must not be empty");
            return None;
        }
        Some(PathBuf::from(s))
    });
    let out = match (c.has("env"), c.has("file")) {
        (true, true) => {
            let second = c.key_pos("env").max(c.key_pos("file"));
            cx.err(second, f.path, "give either `env` or `file`, not both");
            None
        }
        (false, false) => {
            // Unknown keys were reported with a suggestion; an empty map was not.
            if c.entries.is_empty() {
                cx.err(f.node.pos, f.path, "give `env: VAR` or `file: PATH`");
            }
            None
        }
        (true, false) => env.map(Credential::Env),
        (false, true) => file.map(Credential::File),
    };
    c.finish();
    out
}

/// `capabilities`.
fn capabilities(cx: &mut Cx, f: Field) -> Option<Capabilities> {
    let c = f.obj(cx, keys::CAPABILITIES)?;
    let allow_list = |cx: &mut Cx,
                      f: Field,
                      item: &dyn Fn(&mut Cx, Field) -> Option<String>|
     -> Option<Vec<String>> {
        let a = f.obj(cx, keys::ALLOW)?;
        let v = a.req(cx, "allow", |cx, f| Some(f.list_of(cx, item)));
        a.finish();
        v
    };
    let (shell_allow, shell_env, shell_read) = c
        .opt(cx, "shell", |cx, f| {
            let sh = f.obj(cx, keys::SHELL)?;
            let allow = sh.req(cx, "allow", |cx, f| {
                Some(f.list_of(cx, |cx, item| {
                    let s = item.word(cx, "a binary name")?;
                    if s.contains('/') {
                        cx.err(
                            item.node.pos,
                            item.path,
                            format!("`{s}` must be a bare binary name, without `/`"),
                        );
                        return None;
                    }
                    if super::reserved::RESERVED.contains(&s.as_str()) {
                        cx.err(
                            item.node.pos,
                            item.path,
                            format!("`{s}` is the name of a runtime-provided tool; a shell binary cannot take it (rename or wrap the binary)"),
                        );
                        return None;
                    }
                    Some(s)
                }))
            });
            let env = sh
                .opt(cx, "env", |cx, f| {
                    Some(f.list_of(cx, |cx, item| {
                        let s = item.word(cx, "an environment variable name")?;
                        let valid = !s.starts_with(|ch: char| ch.is_ascii_digit())
                            && s.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
                        if !valid {
                            cx.err(
                                item.node.pos,
                                item.path,
                                format!("`{s}` is not an environment variable name (letters, digits and `_`, not starting with a digit)"),
                            );
                            return None;
                        }
                        Some(s)
                    }))
                })
                .unwrap_or_default();
            let read = sh
                .opt(cx, "read", |cx, f| {
                    Some(f.list_of(cx, |cx, item| item.word(cx, "a path").map(PathBuf::from)))
                })
                .unwrap_or_default();
            sh.finish();
            allow.map(|a| (a, env, read))
        })
        .unwrap_or_default();
    let peer_fetch = c
        .opt(cx, "peer_fetch", |cx, f| match &f.node.value {
            Value::Map(_) => {
                let m = f.obj(cx, keys::PEER_FETCH)?;
                m.finish();
                Some(true)
            }
            Value::Scalar(s) if matches!(s.kind(), Kind::Bool(_)) => f.bool(cx),
            _ => {
                f.mismatch(cx, "`true`, `false` or a mapping");
                None
            }
        })
        .unwrap_or(false);
    let spawn_allow = c
        .opt(cx, "spawn", |cx, f| {
            allow_list(cx, f, &|cx, item| item.word(cx, "a sub-capsule"))
        })
        .unwrap_or_default();
    let plan_submit = c
        .opt(cx, "plan", |cx, f| {
            let p = f.obj(cx, keys::PLAN)?;
            let v = p.req(cx, "submit", |cx, f| f.bool(cx));
            p.finish();
            v
        })
        .unwrap_or(false);
    let install = c.opt(cx, "install", |cx, f| {
        let i = f.obj(cx, keys::INSTALL)?;
        let pattern = |cx: &mut Cx, item: Field| item.word(cx, "a name pattern");
        let skill = i
            .opt(cx, "skill", |cx, f| Some(f.list_of(cx, pattern)))
            .unwrap_or_default();
        let tool = i
            .opt(cx, "tool", |cx, f| Some(f.list_of(cx, pattern)))
            .unwrap_or_default();
        let from = i
            .opt(cx, "from", |cx, f| {
                let v = f.list_of(cx, |cx, item| {
                    let s = item.str(cx)?;
                    if keys::INSTALL_FROM.contains(&s.as_str()) {
                        Some(s)
                    } else {
                        cx.err(
                            item.node.pos,
                            item.path,
                            format!(
                                "unknown value `{s}`{}",
                                suggest::hint(&s, keys::INSTALL_FROM)
                            ),
                        );
                        None
                    }
                });
                if matches!(&f.node.value, Value::Seq(s) if s.is_empty()) {
                    cx.err(
                        f.node.pos,
                        f.path,
                        "name at least one of `stores`, `sources` (or leave the key out for `[stores]`)",
                    );
                }
                Some(v)
            })
            .unwrap_or_else(|| vec!["stores".to_string()]);
        i.finish();
        Some(Install { skill, tool, from })
    });
    let network_allow = c
        .opt(cx, "network", |cx, f| {
            allow_list(cx, f, &|cx, item| {
                let s = item.word(cx, "a host")?;
                if s.contains('/') {
                    cx.err(
                        item.node.pos,
                        item.path,
                        format!("`{s}` must be a host name, not a URL"),
                    );
                    return None;
                }
                Some(s)
            })
        })
        .unwrap_or_default();
    let sandbox = c
        .opt(cx, "sandbox", |cx, f| {
            let w = f.str(cx)?;
            let m = crate::exec::sandbox::Mode::from_word(&w);
            if m.is_none() {
                cx.err(
                    f.node.pos,
                    f.path,
                    format!(
                        "unknown value `{w}`{}",
                        suggest::hint(&w, crate::exec::sandbox::Mode::WORDS)
                    ),
                );
            }
            m
        })
        .unwrap_or_default();
    c.finish();
    Some(Capabilities {
        shell_allow,
        shell_env,
        shell_read,
        sandbox,
        peer_fetch,
        spawn_allow,
        plan_submit,
        install,
        network_allow,
    })
}

/// `lifecycle`.
fn lifecycle(cx: &mut Cx, f: Field) -> Option<Lifecycle> {
    let l = f.obj(cx, keys::LIFECYCLE)?;
    let shell_grace_secs = l.opt_positive(
        cx,
        "shell_grace_secs",
        "leave the key out to never move a command to the background",
    );
    let deadline_notice_secs = l.opt_secs(cx, "deadline_notice_secs");
    let delegation_deadline_secs = l.opt_positive(
        cx,
        "delegation_deadline_secs",
        "leave the key out for the default of 600 seconds",
    );
    let keep_working = l.opt(cx, "keep_working", |cx, f| {
        let k = f.obj(cx, keys::KEEP_WORKING)?;
        let limit = k.req(cx, "limit", |cx, f| f.u32(cx));
        let message = k.req(cx, "message", |cx, f| {
            let s = f.str(cx)?;
            if s.trim().is_empty() {
                cx.err(f.node.pos, f.path, "must not be empty");
                return None;
            }
            Some(s)
        });
        k.finish();
        Some(KeepWorking {
            limit: limit?,
            message: message?,
        })
    });
    let done_check = l.opt(cx, "done_check", |cx, f| {
        let d = f.obj(cx, keys::DONE_CHECK)?;
        let command = d.req(cx, "command", argv);
        let limit = d.req(cx, "limit", |cx, f| f.u32(cx));
        d.finish();
        Some(DoneCheck {
            command: command?,
            limit: limit?,
        })
    });
    let max_task_reopens = l.opt_u32(cx, "max_task_reopens");
    l.finish();
    Some(Lifecycle {
        shell_grace_secs,
        deadline_notice_secs,
        delegation_deadline_secs,
        keep_working,
        done_check,
        max_task_reopens,
    })
}

/// An argv: a non-empty list of strings (`command: [cargo, test]`).
fn argv(cx: &mut Cx, f: Field) -> Option<Vec<String>> {
    if let Value::Scalar(_) = f.node.value {
        cx.err(
            f.node.pos,
            f.path,
            format!(
                "expected a list of words (argv), found {}; write e.g. `command: [cargo, test]`",
                describe(f.node)
            ),
        );
        return None;
    }
    let argv: Vec<String> = f
        .list(cx)?
        .into_iter()
        .filter_map(|(node, path)| Field { node, path: &path }.str(cx))
        .collect();
    if matches!(&f.node.value, Value::Seq(s) if s.is_empty()) {
        cx.err(f.node.pos, f.path, "must name a command to run");
        return None;
    }
    Some(argv)
}

/// `hooks`.
fn hooks(cx: &mut Cx, f: Field) -> Option<Hooks> {
    let h = f.obj(cx, keys::HOOKS)?;
    let on_tool_call = h
        .opt(cx, "on_tool_call", |cx, f| Some(f.list_of(cx, hook)))
        .unwrap_or_default();
    let on_task_end = h
        .opt(cx, "on_task_end", |cx, f| Some(f.list_of(cx, hook)))
        .unwrap_or_default();
    h.finish();
    Some(Hooks {
        on_tool_call,
        on_task_end,
    })
}

/// One hook: `{command: [argv…], timeout_secs: N}`.
fn hook(cx: &mut Cx, f: Field) -> Option<Hook> {
    let h = f.obj(cx, keys::HOOK)?;
    let command = h.req(cx, "command", argv);
    let timeout_secs = h.opt_positive(
        cx,
        "timeout_secs",
        "leave the key out for the default of 30 seconds",
    );
    h.finish();
    Some(Hook {
        command: command?,
        timeout_secs,
    })
}

/// One `tools` or `skills` entry, `scope/name[@version]`.
fn artifact(cx: &mut Cx, f: Field) -> Option<ArtifactRef> {
    let s = f.str(cx)?;
    let (full, version) = match s.split_once('@') {
        Some((full, v)) => (full, Some(v)),
        None => (s.as_str(), None),
    };
    let version_ok = version.is_none_or(|v| {
        !v.is_empty()
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
    });
    match full.split_once('/') {
        Some((scope, name)) if is_name(scope) && is_name(name) && version_ok => Some(ArtifactRef {
            scope: scope.to_string(),
            name: name.to_string(),
            version: version.map(str::to_string),
        }),
        _ => {
            cx.err(
                f.node.pos,
                f.path,
                format!(
                    "`{s}` is not `scope/name[@version]` (scope and name are `[a-z0-9][a-z0-9._-]*`)"
                ),
            );
            None
        }
    }
}
