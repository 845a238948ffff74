//! The manifest parser through its public API: valid manifests, and the exact text of
//! every kind of diagnostic.

use std::path::PathBuf;

use mur::manifest::{
    parse_str, AfterTask, ArtifactRef, Capabilities, Control, Credential, DoneCheck, DriverChoice,
    DriverKind, Exports, Hook, Hooks, Inference, Install, KeepWorking, Lifecycle, Manifest, Prompt,
    TaskAcceptance, Transport,
};

/// The diagnostics of `text` (named `murmur.yaml`), one displayed line each.
fn errors(text: &str) -> Vec<String> {
    match parse_str(text, "murmur.yaml") {
        Ok(m) => panic!("expected errors, parsed {m:#?}"),
        Err(e) => e.diagnostics.iter().map(ToString::to_string).collect(),
    }
}

fn ok(text: &str) -> Manifest {
    parse_str(text, "murmur.yaml").unwrap_or_else(|e| panic!("{e}"))
}

const FULL: &str = r#"
name: reviewer
description: reviews pull requests
transport: http
prompt: {system_file: prompt.md}
workdir: work
inference:
  driver: main
  choices:
    main:
      driver: openai
      model: qwen2.5-7b-instruct
      base_url: "http://127.0.0.1:8080/v1"
      credential: {env: OPENAI_API_KEY}
      context_window: 32768
      max_output_tokens: 4096
      max_input_tokens: 28000
      temperature: 0.2
      request_timeout_secs: 120
      max_retries: 0
      max_retry_after_secs: 5
      stream: false
    claude:
      driver: anthropic
      model: claude-x
      credential: {file: secrets/key}
    local: {driver: script, script: replies.yaml}
  max_turns: 40
  max_session_tokens: 2000000
  compaction: {threshold: 0.5}
capabilities:
  shell: {allow: [ls, cat, grep, cargo]}
  peer_fetch: true
  spawn: {allow: [acme/helper]}
  plan: {submit: true}
  install:
    skill: ["acme/*"]
    tool: [acme/lint]
    from: [stores, sources]
  network: {allow: [localhost, api.example.com]}
exports:
  peer_files: out
control:
  agent_settings: [inference.driver]
lifecycle:
  shell_grace_secs: 10
  deadline_notice_secs: 0
  delegation_deadline_secs: 900
  keep_working: {limit: 2, message: keep going}
  done_check: {command: [cargo, test], limit: 3}
  max_task_reopens: 5
hooks:
  on_tool_call:
    - {command: [hooks/policy, --strict], timeout_secs: 5}
  on_task_end:
    - command: [review]
task_acceptance: queue
after_task: sleep
tools: [acme/lint@1.2.0]
skills: [acme/style-guide]
"#;

#[test]
fn full_manifest_parses_to_the_expected_struct() {
    let expected = Manifest {
        name: "reviewer".into(),
        description: Some("reviews pull requests".into()),
        transport: Transport::Http,
        prompt: Prompt {
            system: None,
            system_file: Some(PathBuf::from("prompt.md")),
        },
        workdir: PathBuf::from("work"),
        inference: Some(Inference {
            driver: "main".into(),
            choices: vec![
                (
                    "main".into(),
                    DriverChoice {
                        driver: DriverKind::Openai,
                        model: Some("qwen2.5-7b-instruct".into()),
                        base_url: Some("http://127.0.0.1:8080/v1".into()),
                        credential: Some(Credential::Env("OPENAI_API_KEY".into())),
                        script: None,
                        context_window: Some(32768),
                        max_output_tokens: Some(4096),
                        max_input_tokens: Some(28000),
                        temperature: Some(0.2),
                        request_timeout_secs: 120,
                        max_retries: 0,
                        max_retry_after_secs: 5,
                        stream: false,
                    },
                ),
                (
                    "claude".into(),
                    DriverChoice {
                        driver: DriverKind::Anthropic,
                        model: Some("claude-x".into()),
                        base_url: None,
                        credential: Some(Credential::File(PathBuf::from("secrets/key"))),
                        script: None,
                        context_window: None,
                        max_output_tokens: None,
                        max_input_tokens: None,
                        temperature: None,
                        request_timeout_secs: 300,
                        max_retries: 4,
                        max_retry_after_secs: 60,
                        stream: true,
                    },
                ),
                (
                    "local".into(),
                    DriverChoice {
                        driver: DriverKind::Script,
                        model: None,
                        base_url: None,
                        credential: None,
                        script: Some(PathBuf::from("replies.yaml")),
                        context_window: None,
                        max_output_tokens: None,
                        max_input_tokens: None,
                        temperature: None,
                        request_timeout_secs: 300,
                        max_retries: 4,
                        max_retry_after_secs: 60,
                        stream: true,
                    },
                ),
            ],
            max_turns: Some(40),
            max_session_tokens: Some(2_000_000),
            compaction_threshold: 0.5,
            compaction_declared: true,
        }),
        capabilities: Capabilities {
            shell_allow: vec!["ls".into(), "cat".into(), "grep".into(), "cargo".into()],
            peer_fetch: true,
            spawn_allow: vec!["acme/helper".into()],
            plan_submit: true,
            install: Some(Install {
                skill: vec!["acme/*".into()],
                tool: vec!["acme/lint".into()],
                from: vec!["stores".into(), "sources".into()],
            }),
            network_allow: vec!["localhost".into(), "api.example.com".into()],
            ..Default::default()
        },
        exports: Exports {
            peer_files: Some(PathBuf::from("out")),
        },
        control: Control {
            agent_settings: vec!["inference.driver".into()],
        },
        lifecycle: Lifecycle {
            shell_grace_secs: Some(10),
            deadline_notice_secs: Some(0),
            delegation_deadline_secs: Some(900),
            keep_working: Some(KeepWorking {
                limit: 2,
                message: "keep going".into(),
            }),
            done_check: Some(DoneCheck {
                command: vec!["cargo".into(), "test".into()],
                limit: 3,
            }),
            max_task_reopens: Some(5),
        },
        hooks: Hooks {
            on_tool_call: vec![Hook {
                command: vec!["hooks/policy".into(), "--strict".into()],
                timeout_secs: Some(5),
            }],
            on_task_end: vec![Hook {
                command: vec!["review".into()],
                timeout_secs: None,
            }],
        },
        task_acceptance: TaskAcceptance::Queue,
        after_task: Some(AfterTask::Sleep),
        tools: vec![ArtifactRef {
            scope: "acme".into(),
            name: "lint".into(),
            version: Some("1.2.0".into()),
        }],
        skills: vec![ArtifactRef {
            scope: "acme".into(),
            name: "style-guide".into(),
            version: None,
        }],
    };
    assert_eq!(ok(FULL), expected);
}

#[test]
fn minimal_manifest_gets_the_defaults() {
    let m = ok("name: bare\n");
    assert_eq!(m.name, "bare");
    assert_eq!(m.workdir, PathBuf::from("."));
    assert_eq!(m.transport, Transport::Http);
    assert_eq!(m.task_acceptance, TaskAcceptance::Reject);
    assert_eq!(m.after_task, None);
    assert_eq!(m.inference, None);
    assert_eq!(m.capabilities, Capabilities::default());
    assert_eq!(m.prompt, Prompt::default());
}

#[test]
fn install_from_defaults_to_stores_and_compaction_to_0_8() {
    let m = ok("name: a\ncapabilities: {install: {tool: [acme/x]}}\n\
                inference: {driver: s, choices: {s: {driver: script, script: r.yaml}}}\n");
    assert_eq!(
        m.capabilities.install.unwrap().from,
        vec!["stores".to_string()]
    );
    assert_eq!(m.inference.unwrap().compaction_threshold, 0.8);
}

#[test]
fn peer_fetch_accepts_false_and_an_empty_map() {
    assert!(
        !ok("name: a\ncapabilities: {peer_fetch: false}\n")
            .capabilities
            .peer_fetch
    );
    assert!(
        ok("name: a\ncapabilities: {peer_fetch: {}}\n")
            .capabilities
            .peer_fetch
    );
}

#[test]
fn misspelt_nested_key_gives_position_path_and_suggestion() {
    let text = "name: a\nlifecycle:\n  deadline_notice_secs: 60\n  shell_grace_sec: 10\n";
    assert_eq!(
        errors(text),
        ["murmur.yaml:4:3: lifecycle: unknown key `shell_grace_sec` (did you mean `shell_grace_secs`?)"]
    );
}

#[test]
fn far_off_key_lists_the_known_keys_of_its_level() {
    assert_eq!(
        errors("name: a\nprompt: {text: hi}\n"),
        ["murmur.yaml:2:10: prompt: unknown key `text` (expected one of `system`, `system_file`)"]
    );
}

#[test]
fn every_error_is_reported_in_file_order() {
    let text = "\
name: Bad Name
transport: htp
workdir: 5
capabilities:
  shell: {allow: [rm, /bin/sh, rm, \"a b\"]}
lifecycle: {deadline_notice_secs: -5}
tools: [acme/lint@1.0, Acme]
";
    assert_eq!(
        errors(text),
        [
            "murmur.yaml:1:7: name: `Bad Name` is not a valid name (use `[a-z0-9][a-z0-9._-]*`)",
            "murmur.yaml:2:12: transport: unknown value `htp` (did you mean `http`?)",
            "murmur.yaml:3:10: workdir: expected a string, found integer `5` (quote it to make it a string: \"5\")",
            "murmur.yaml:5:23: capabilities.shell.allow[1]: `/bin/sh` must be a bare binary name, without `/`",
            "murmur.yaml:5:32: capabilities.shell.allow[2]: duplicate entry",
            "murmur.yaml:5:36: capabilities.shell.allow[3]: a binary name `a b` must not contain whitespace",
            "murmur.yaml:6:35: lifecycle.deadline_notice_secs: must not be negative, found `-5`",
            "murmur.yaml:7:24: tools[1]: `Acme` is not `scope/name[@version]` (scope and name are `[a-z0-9][a-z0-9._-]*`)",
        ]
    );
}

#[test]
fn tab_indentation_is_named() {
    assert_eq!(
        errors("name: a\nlifecycle:\n\tshell_grace_secs: 10\n"),
        ["murmur.yaml:3:1: YAML indentation must use spaces, not tabs"]
    );
}

#[test]
fn other_syntax_errors_carry_the_scanner_position() {
    assert_eq!(
        errors("name: a\ntools: [acme/x\n"),
        ["murmur.yaml:2:8: invalid YAML: this `[` is never closed; close it with `]` (the parser gave up at 3:1: while parsing a flow sequence, expected ',' or ']')"]
    );
}

#[test]
fn an_unclosed_bracket_is_reported_where_it_opened_not_at_the_end() {
    // An unclosed `[` on line 25 of a longer manifest: the scanner gives up at 26:1.
    let mut text = String::from("name: a\n");
    for i in 2..25 {
        text.push_str(&format!("# comment line {i}\n"));
    }
    text.push_str("tools: [acme/x, acme/y\n");
    assert_eq!(
        errors(&text),
        ["murmur.yaml:25:8: invalid YAML: this `[` is never closed; close it with `]` (the parser gave up at 26:1: while parsing a flow sequence, expected ',' or ']')"]
    );
    // One that is followed by more keys, where the scanner trips on the next `:`.
    assert_eq!(
        errors("name: a\ncapabilities:\n  shell:\n    allow: [ls, cat\nworkdir: .\n"),
        ["murmur.yaml:4:12: invalid YAML: this `[` is never closed; close it with `]` (the parser gave up at 5:8: illegal placement of ':' indicator)"]
    );
}

#[test]
fn wrong_type_says_expected_and_found() {
    assert_eq!(
        errors("name: a\ncapabilities: [shell]\nlifecycle: {max_task_reopens: many}\n"),
        [
            "murmur.yaml:2:15: capabilities: expected a mapping, found a list",
            "murmur.yaml:3:31: lifecycle.max_task_reopens: expected a whole number, found string `many`",
        ]
    );
}

#[test]
fn duration_string_asks_for_integer_seconds() {
    assert_eq!(
        errors("name: a\nlifecycle:\n  shell_grace_secs: 10s\n  delegation_deadline_secs: 1.5\n"),
        [
            "murmur.yaml:3:21: lifecycle.shell_grace_secs: expected an integer number of seconds, found string `10s`; write `shell_grace_secs: 10`",
            "murmur.yaml:4:29: lifecycle.delegation_deadline_secs: expected an integer number of seconds, found number `1.5`",
        ]
    );
    assert_eq!(
        errors("name: a\nlifecycle: {deadline_notice_secs: 5m}\n"),
        ["murmur.yaml:2:35: lifecycle.deadline_notice_secs: expected an integer number of seconds, found string `5m`; write `deadline_notice_secs: 300`"]
    );
}

#[test]
fn unknown_driver_kind_and_choice_name() {
    let text = "\
name: a
inference:
  driver: mian
  choices:
    main: {driver: opanai, model: m}
    local: {driver: script}
    remote: {driver: anthropic, script: r.yaml}
";
    assert_eq!(
        errors(text),
        [
            "murmur.yaml:3:11: inference.driver: `mian` is not a key of `inference.choices` (did you mean `main`?)",
            "murmur.yaml:5:20: inference.choices.main.driver: unknown value `opanai` (did you mean `openai`?)",
            "murmur.yaml:6:12: inference.choices.local: missing required key `script` (the replies file of the `script` driver)",
            "murmur.yaml:7:13: inference.choices.remote: missing required key `model` (the `anthropic` driver needs a model)",
            "murmur.yaml:7:33: inference.choices.remote: `script` is only for `driver: script`",
        ]
    );
}

#[test]
fn misspelt_grant_is_an_error_not_a_smaller_grant() {
    let err = parse_str(
        "name: a\ncapabilities: {shel: {allow: [rm]}}\n",
        "murmur.yaml",
    )
    .expect_err("a misspelt grant must not load");
    assert_eq!(
        err.to_string(),
        "murmur.yaml:2:16: capabilities: unknown key `shel` (did you mean `shell`?)"
    );
}

#[test]
fn duplicate_key_is_an_error() {
    assert_eq!(
        errors("name: a\ncapabilities:\n  shell: {allow: [ls]}\n  shell: {allow: [rm]}\n"),
        ["murmur.yaml:4:3: capabilities: duplicate key `shell` (first given at line 3)"]
    );
}

#[test]
fn quoted_number_stays_a_string() {
    let m = ok("name: \"123\"\ndescription: '42'\ninference: {driver: '1', choices: {'1': {driver: openai, model: \"4\"}}}\n");
    assert_eq!(m.name, "123");
    assert_eq!(m.description.as_deref(), Some("42"));
    assert_eq!(
        m.inference.unwrap().choices[0].1.model.as_deref(),
        Some("4")
    );
}

#[test]
fn empty_file_names_the_required_key() {
    assert_eq!(
        errors(""),
        ["murmur.yaml:1:1: empty manifest: missing required key `name`"]
    );
    assert_eq!(
        errors("description: x\n"),
        ["murmur.yaml:1:1: missing required key `name`"]
    );
}

#[test]
fn cross_key_rules() {
    let text = "\
name: a
transport: process
prompt: {system: hi, system_file: p.md}
capabilities: {install: {tool: [acme/x], from: [store]}}
control: {agent_settings: [inference.drivr, inference.driver]}
exports: {peer_files: ../up}
";
    assert_eq!(
        errors(text),
        [
            "murmur.yaml:3:22: prompt: give either `system` or `system_file`, not both",
            "murmur.yaml:4:1: capabilities.install: `capabilities.install` needs `transport: http` (under `process` the harness owns the tool list)",
            "murmur.yaml:4:49: capabilities.install.from[0]: unknown value `store` (did you mean `stores`?)",
            "murmur.yaml:5:1: control.agent_settings: `inference.driver` needs an `inference` section to switch between",
            "murmur.yaml:5:28: control.agent_settings[0]: unknown setting `inference.drivr` (did you mean `inference.driver`?)",
            "murmur.yaml:6:23: exports.peer_files: `../up` must not leave its directory (`..`)",
        ]
    );
}

#[test]
fn stream_is_only_for_network_drivers() {
    let text = "\
name: a
inference:
  driver: m
  choices:
    m: {driver: script, script: r.yaml, stream: false}
    n: {driver: openai, model: x, stream: \"no\", max_retry_after_secs: 10s}
";
    assert_eq!(
        errors(text),
        [
            "murmur.yaml:5:41: inference.choices.m: `stream` is only for `driver: openai` and `driver: anthropic`",
            "murmur.yaml:6:43: inference.choices.n.stream: expected `true` or `false`, found string `no`",
            "murmur.yaml:6:71: inference.choices.n.max_retry_after_secs: expected an integer number of seconds, found string `10s`; write `max_retry_after_secs: 10`",
        ]
    );
}

#[test]
fn values_out_of_range() {
    let text = "\
name: a
inference:
  driver: m
  choices:
    m: {driver: openai, model: x, credential: {env: A, file: b}, request_timeout_secs: 0}
  compaction: {threshold: 1.5}
capabilities: {peer_fetch: yes}
";
    assert_eq!(
        errors(text),
        [
            "murmur.yaml:5:56: inference.choices.m.credential: give either `env` or `file`, not both",
            "murmur.yaml:5:88: inference.choices.m.request_timeout_secs: must be at least 1; leave the key out for the default of 300 seconds",
            "murmur.yaml:6:27: inference.compaction: not provided by this build of mur (it would be silently ignored); remove it to run this capsule",
            "murmur.yaml:7:28: capabilities.peer_fetch: expected `true`, `false` or a mapping, found string `yes`",
        ]
    );
}

#[test]
fn manifest_error_displays_one_diagnostic_per_line() {
    let err = parse_str("name: a\nfoo: 1\nbar: 2\n", "m.yaml").unwrap_err();
    let text = err.to_string();
    assert_eq!(text.lines().count(), 2);
    assert!(text.starts_with("m.yaml:2:1: unknown key `foo`"));
}

#[test]
fn unreadable_file_has_no_position() {
    let err = mur::manifest::load(std::path::Path::new("no/such/murmur.yaml")).unwrap_err();
    assert_eq!(err.diagnostics.len(), 1);
    assert!(
        err.to_string()
            .starts_with("no/such/murmur.yaml: cannot read the manifest: "),
        "{err}"
    );
}

#[test]
fn key_at_the_wrong_level_is_pointed_home() {
    assert_eq!(
        errors("name: a\nmax_turns: 3\nlifecycle: {allow: [ls]}\n"),
        [
            "murmur.yaml:2:1: unknown key `max_turns` (`max_turns` belongs under `inference`)",
            "murmur.yaml:3:13: lifecycle: unknown key `allow` (`allow` belongs under `capabilities.shell` or `capabilities.spawn` or `capabilities.network`)",
        ]
    );
}

#[test]
fn empty_value_is_reported_at_its_key() {
    assert_eq!(
        errors("name: a\ndescription:\ntransport: http\n"),
        ["murmur.yaml:2:1: description: expected a string, found nothing (null)"]
    );
}

#[test]
fn complex_key_is_reported_once() {
    assert_eq!(
        errors("name: a\n[x]: 1\n"),
        ["murmur.yaml:2:1: a key must be a plain string"]
    );
}

#[test]
fn second_document_is_refused() {
    assert_eq!(
        errors("name: a\n---\nname: b\n"),
        ["murmur.yaml:2:1: a manifest is one YAML document; remove the second `---`"]
    );
}

#[test]
fn a_reserved_key_says_it_is_not_provided_before_asking_for_its_fields() {
    assert_eq!(
        errors("name: a\ninference:\n  compaction: {threshold: x}\n  max_turns: -1\n"),
        [
            "murmur.yaml:3:3: inference: missing required key `choices`",
            "murmur.yaml:3:3: inference: missing required key `driver`",
            "murmur.yaml:3:27: inference.compaction: not provided by this build of mur (it would be silently ignored); remove it to run this capsule",
            "murmur.yaml:4:14: inference.max_turns: must not be negative, found `-1`",
        ]
    );
}

#[test]
fn lifecycle_and_hooks_keys_are_checked_field_by_field() {
    assert_eq!(
        errors("name: a\nlifecycle:\n  keep_working: {}\n  done_check: {limit: x}\n"),
        [
            "murmur.yaml:3:17: lifecycle.keep_working: missing required key `limit`",
            "murmur.yaml:3:17: lifecycle.keep_working: missing required key `message`",
            "murmur.yaml:4:15: lifecycle.done_check: missing required key `command`",
            "murmur.yaml:4:23: lifecycle.done_check.limit: expected a whole number, found string `x`",
        ]
    );
    assert_eq!(
        errors("name: a\nhooks:\n  on_tool_call:\n    - {command: policy, timeout_secs: 0}\n    - {comand: [x]}\n  on_task_ends: []\n"),
        [
            "murmur.yaml:4:17: hooks.on_tool_call[0].command: expected a list of words (argv), found string `policy`; write e.g. `command: [cargo, test]`",
            "murmur.yaml:4:39: hooks.on_tool_call[0].timeout_secs: must be at least 1; leave the key out for the default of 30 seconds",
            "murmur.yaml:5:7: hooks.on_tool_call[1]: missing required key `command`",
            "murmur.yaml:5:8: hooks.on_tool_call[1]: unknown key `comand` (did you mean `command`?)",
            "murmur.yaml:6:3: hooks: unknown key `on_task_ends` (did you mean `on_task_end`?)",
        ]
    );
}

#[test]
fn a_roster_member_whose_capsule_is_missing_is_reported_at_its_position_with_a_near_name() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("worker")).unwrap();
    std::fs::write(d.path().join("worker/murmur.yaml"), "name: worker\n").unwrap();
    std::fs::create_dir_all(d.path().join("empty")).unwrap();
    let roster = d.path().join("roster.yaml");
    std::fs::write(
        &roster,
        "formation: f\nentry: lead\nmembers:\n  lead: {capsule: ./workr}\n  e: {capsule: empty}\n",
    )
    .unwrap();
    let errs: Vec<String> = mur::manifest::roster::load_roster(&roster)
        .unwrap_err()
        .diagnostics
        .iter()
        .map(ToString::to_string)
        .collect();
    let (r, base) = (roster.display(), d.path().display());
    assert_eq!(
        errs,
        [
            format!("{r}:4:19: members.lead.capsule: `./workr`: no such capsule directory or murmur.yaml, relative to the roster's directory {base} (did you mean `./worker`?)"),
            format!("{r}:5:16: members.e.capsule: `empty` has no murmur.yaml ({base}/empty is a directory, not a capsule)"),
        ]
    );
}

/// A minimal manifest whose `capabilities.shell.allow` holds `n` distinct names, then
/// `tail` (more YAML lines at the top level).
fn long_allow_list(n: usize, dup: bool) -> String {
    let mut s = String::from(
        "name: t\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: r.yaml}\ncapabilities:\n  shell:\n    allow:\n",
    );
    for i in 0..n {
        s.push_str(&format!("      - b{i}\n"));
    }
    if dup {
        s.push_str("      - b7\n");
    }
    s
}

#[test]
fn duplicate_checks_of_long_lists_and_mappings_are_linear() {
    // 90 000 list entries and 45 000 keys: 4·10^9 and 10^9 comparisons for the old
    // pairwise checks (minutes in a debug build); linear checks take a few seconds.
    // The bound is far above a loaded machine's reading of the latter.
    let n = 90_000;
    let start = std::time::Instant::now();
    let e = errors(&long_allow_list(n, true));
    assert_eq!(
        e,
        vec![format!(
            "murmur.yaml:{}:9: capabilities.shell.allow[{n}]: duplicate entry",
            9 + n
        )]
    );
    // The same for the keys of a mapping (here the top level, keys unknown).
    let n = 45_000;
    let mut map = String::from(
        "name: t\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: r.yaml}\n",
    );
    for i in 0..n {
        map.push_str(&format!("k{i}: v\n"));
    }
    map.push_str("k3: again\n");
    let e = errors(&map);
    let dups: Vec<&String> = e.iter().filter(|l| l.contains("duplicate key")).collect();
    assert_eq!(e.len(), n + 2, "{:?} … {:?}", &e[..2], &e[e.len() - 2..]);
    assert_eq!(
        *dups[0],
        format!(
            "murmur.yaml:{}:1: duplicate key `k3` (first given at line 9)",
            6 + n
        )
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_manifest_over_the_value_limit_is_refused_where_it_crosses_it() {
    // The list crosses 100 000 values at its 99 993rd item; a syntax error far below
    // is never reached, so refusing costs no more than reading up to the limit.
    let mut text = long_allow_list(150_000, false);
    text.push_str("broken: [\n");
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{:?}", e);
    assert!(
        e[0].contains("the manifest expands to more than 100000 values"),
        "{e:?}"
    );
    let line: usize = e[0].split(':').nth(1).unwrap().parse().unwrap();
    assert!(line < 100_020, "{e:?}");
}
