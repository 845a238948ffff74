//! The smaller things a new user tripped over: each one as the user sees it.

use crate::support;

use support::Capsule;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn replies_file_errors_are_reported_in_the_replies_file_all_of_them() {
    let c = Capsule::scripted(
        &[],
        "",
        "- text: hi\n  tool_calls: 3\n- txet: x\n- tool_calls: [{nme: a}]\n",
    );
    let replies = c.dir.join("replies.yaml");
    let r = replies.display();
    let want = format!(
        "mur: 4 error(s) in {r}\n\
         {r}:2:15: [0].tool_calls: expected a list, found integer `3`\n\
         {r}:3:3: [1]: unknown key `txet` (did you mean `text`?)\n\
         {r}:4:16: [2].tool_calls[0]: missing required key `name` (the tool to call)\n\
         {r}:4:17: [2].tool_calls[0]: unknown key `nme` (did you mean `name`?)\n"
    );
    let check = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(check.status.code(), Some(2));
    assert_eq!(text(&check.stderr), want);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 2);
    assert_eq!(run.stderr(), want);
}

#[test]
fn the_usage_line_after_an_error_shows_what_is_optional() {
    let c = Capsule::new();
    let out = c
        .mur()
        .args(["run", "x", "--task", "a", "--task-file", "b"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "\nUsage: mur run [OPTIONS] [CAPSULE]\n       mur run --roster <FILE> [OPTIONS]\n"
        ),
        "{err}"
    );
    let out = c
        .mur()
        .args(["check", "x", "--roster", "r"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(
        err.contains("\nUsage: mur check [CAPSULE]\n       mur check --roster <FILE>\n"),
        "{err}"
    );
}

#[test]
fn check_with_no_argument_names_the_capsule() {
    let c = Capsule::scripted(&[], "", "- text: hi\n");
    let out = c.mur().arg("check").current_dir(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let dir = c.dir.canonicalize().unwrap();
    assert_eq!(
        text(&out.stdout),
        format!("{}: ok (capsule test)\n", dir.display())
    );
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(
        text(&out.stdout),
        format!("{}: ok (capsule test)\n", c.dir.display())
    );
}

#[test]
fn the_workdir_default_does_not_read_like_the_parent_directory() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/murmur.yaml.5")).unwrap();
    let at = page.find(".B workdir\n").expect("workdir entry");
    let entry = &page[at..at + 200];
    assert!(!entry.contains(".IR . ."), "{entry}");
    assert!(
        entry.contains("Default: the capsule directory itself\n(written \\fBworkdir: .\\fR)."),
        "{entry}"
    );
}

#[test]
fn a_reserved_key_is_refused_for_what_it_is_first() {
    let c = Capsule::scripted(&[], "", "- text: hi\n");
    let m = std::fs::read_to_string(c.dir.join("murmur.yaml"))
        .unwrap()
        .replace("inference:\n", "inference:\n  compaction: {threshold: x}\n");
    let c = c.manifest(&m);
    let out = c.mur().arg("check").arg(&c.dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let m = c.dir.join("murmur.yaml");
    assert_eq!(
        text(&out.stderr),
        format!(
            "mur: 1 error(s) in {m}\n{m}:4:27: inference.compaction: not provided by this build of mur (it would be silently ignored); remove it to run this capsule\n",
            m = m.display()
        )
    );
}

#[test]
fn a_roster_member_with_a_missing_capsule_gets_its_position_and_a_near_name() {
    let f = support::Formation::new()
        .member("worker", "", "- text: hi\n")
        .member("lead", "", "- text: hi\n")
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead}\n  w: {capsule: wroker}\n");
    let out = f.run("go");
    assert_eq!(out.code(), 2);
    let r = f.dir.join("roster.yaml");
    assert_eq!(
        out.stderr(),
        format!(
            "mur: 1 error(s) in {r}\n{r}:5:16: members.w.capsule: `wroker`: no such capsule directory or murmur.yaml, relative to the roster's directory {d} (did you mean `worker`?)\n",
            r = r.display(),
            d = f.dir.display()
        )
    );
}

fn choice<'a>(
    choices: &'a [(String, mur::manifest::DriverChoice)],
    name: &str,
) -> &'a mur::manifest::DriverChoice {
    &choices
        .iter()
        .find(|(n, _)| n == name)
        .expect("the choice")
        .1
}

/// The `.nf` … `.fi` block that follows `marker` in a man page, unescaped.
fn man_block(page: &str, marker: &str) -> String {
    let at = page
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} not found"));
    let rest = &page[at..];
    let start = rest.find("\n.nf\n").expect(".nf") + 5;
    let end = rest[start..].find("\n.fi\n").expect(".fi") + start;
    let mut out = rest[start..end].replace("\\-", "-");
    out.push('\n');
    out
}

#[test]
fn the_murmur_yaml_man_page_example_runs_as_shown_and_caps_its_output() {
    let page = include_str!("../man/murmur.yaml.5");
    let c = Capsule::new();
    let dir = c.root.path().join("ex");
    let reviewer = dir.join("reviewer");
    std::fs::create_dir_all(&reviewer).unwrap();
    for (file, marker) in [
        ("murmur.yaml", ".IR reviewer/murmur.yaml :"),
        ("prompt.md", ".IR reviewer/prompt.md ,"),
        ("replies.yaml", ".IR reviewer/replies.yaml ,"),
    ] {
        std::fs::write(reviewer.join(file), man_block(page, marker)).unwrap();
    }
    // What the page says the session prints, command by command.
    let shown = man_block(page, "Check it, then run one task");
    let mut lines = shown.lines();
    assert_eq!(lines.next(), Some("$ mur check reviewer"));
    let check_says = lines.next().unwrap();
    assert_eq!(
        lines.next(),
        Some("$ mur run reviewer --driver local --task \"List the files.\"")
    );
    let run_says = lines.next().unwrap();

    let check = c
        .mur()
        .current_dir(&dir)
        .args(["check", "reviewer"])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
    assert_eq!(text(&check.stdout), format!("{check_says}\n"));
    assert_eq!(check_says, "reviewer: ok (capsule reviewer)");
    let run = c
        .mur()
        .current_dir(&dir)
        .args([
            "run",
            "reviewer",
            "--driver",
            "local",
            "--task",
            "List the files.",
        ])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert_eq!(text(&run.stdout), format!("{run_says}\n"));

    // The model choice pointed at a local server caps each answer.
    let m = mur::manifest::parse_str(&man_block(page, ".IR reviewer/murmur.yaml :"), "x").unwrap();
    let inf = m.inference.unwrap();
    assert_eq!(choice(&inf.choices, "main").max_output_tokens, Some(512));
}

#[test]
fn the_hello_examples_local_choice_caps_each_answer() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hello/murmur.yaml");
    let m = mur::manifest::parse_str(&std::fs::read_to_string(path).unwrap(), path).unwrap();
    let inf = m.inference.unwrap();
    let local = choice(&inf.choices, "local");
    assert_eq!(local.max_output_tokens, Some(512));
    assert_eq!(local.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
}
