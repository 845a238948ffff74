//! `mur generate`: man pages and shell completions from this binary's own clap
//! definition.
//!
//! The pages are `mur.1` plus one `mur-SUBCOMMAND.1` per non-hidden subcommand,
//! recursively (`mur-run.1`, `mur-check.1`, …), so a subcommand added to
//! [`crate::cli`] gets its page without touching this file. `mur.1` carries the EXIT
//! STATUS and ENVIRONMENT sections written here from [`crate::exit`]. The output is
//! deterministic (no date), so CI can regenerate it and diff it against `man/`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use clap::CommandFactory;
use clap_mangen::Man;

use crate::cli::{Cli, GenerateArgs, GenerateWhat, Shell};
use crate::exit;

/// The manual the pages belong to (the centre of the page header).
const MANUAL: &str = "mur manual";

/// The date in the pages' footer: the date of the release the pages describe. A fixed
/// string rather than the build date, so regenerating gives identical files; bump it
/// with the version.
pub const MAN_DATE: &str = "2026-11-30";

/// Runs `mur generate man DIR` or `mur generate completions SHELL`.
pub fn run(args: &GenerateArgs) -> io::Result<()> {
    match &args.what {
        GenerateWhat::Man { dir } => man_pages(dir),
        GenerateWhat::Completions { shell } => {
            let stdout = io::stdout();
            let mut out = stdout.lock();
            completions(*shell, &mut out)?;
            out.flush()
        }
    }
}

/// Writes `mur.1` and one page per non-hidden subcommand, recursively, into `dir`
/// (created when missing).
pub fn man_pages(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let source = format!("mur {}", env!("CARGO_PKG_VERSION"));
    write_page(dir, &cmd, &source, true)
}

/// Writes the page of `cmd` (its display name, e.g. `mur-run`), then the pages of its
/// visible subcommands.
fn write_page(dir: &Path, cmd: &clap::Command, source: &str, top: bool) -> io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_page(dir, sub, source, false)?;
    }
    let man = Man::new(cmd.clone())
        .manual(MANUAL)
        .date(MAN_DATE)
        .source(source.to_owned());
    let path = dir.join(man.get_filename());
    let mut w = BufWriter::new(File::create(&path)?);
    man.render_title(&mut w)?;
    man.render_name_section(&mut w)?;
    man.render_synopsis_section(&mut w)?;
    man.render_description_section(&mut w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut w)?;
    }
    if cmd.get_name() == "run" {
        w.write_all(titled_section(crate::cli::RUN_JSON_OUTPUT).as_bytes())?;
    } else if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        man.render_extra_section(&mut w)?;
    }
    if top {
        w.write_all(exit_status_section().as_bytes())?;
        w.write_all(ENVIRONMENT.as_bytes())?;
        w.write_all(FILES.as_bytes())?;
    }
    w.write_all(see_also(cmd, top).as_bytes())?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut w)?;
    }
    w.flush()
}

/// A section from help text whose first paragraph is its title (`mur run`'s JSON
/// OUTPUT, also shown by `mur run --help`): one `.SH`, then a `.PP` per paragraph.
fn titled_section(text: &str) -> String {
    let mut paras = text.split("\n\n");
    let title = paras.next().unwrap_or_default().trim();
    let mut s = format!(".SH \"{title}\"\n");
    for (i, p) in paras.enumerate() {
        if i > 0 {
            s.push_str(".PP\n");
        }
        let roff = p.trim().replace('\\', "\\e").replace('-', "\\-");
        for line in roff.lines() {
            let line = line.trim_start();
            if line.starts_with('.') || line.starts_with('\'') {
                s.push_str("\\&");
            }
            s.push_str(line);
            s.push('\n');
        }
    }
    s
}

/// The EXIT STATUS section, from the constants of [`crate::exit`].
fn exit_status_section() -> String {
    let rows = [
        (
            exit::EXIT_COMPLETED,
            "The task completed with an answer;\nfor \\fBmur check\\fR, the manifest is valid.",
        ),
        (
            exit::EXIT_FAILED,
            "The task failed or ended without an answer\n(\\fIfailed\\fR, \\fIno_answer\\fR, \\fIcanceled\\fR);\nor mur itself failed at run time: a file it must write\n(under \\fB$MURMUR_HOME\\fR, the records) cannot be written\n(a read-only or full disk), a thread cannot start.",
        ),
        (
            exit::EXIT_USAGE,
            "Usage error, or a manifest or roster that does not validate or stage.",
        ),
        (
            exit::EXIT_LIMIT,
            "The deadline passed, or a ceiling was hit:\n\\fIdeadline\\fR (the \\fB\\-\\-deadline\\fR passed),\n\\fImax_turns\\fR (the \\fIinference.max_turns\\fR cap ran out) or\n\\fIspend_ceiling\\fR (the \\fIinference.max_session_tokens\\fR ceiling was reached).",
        ),
        (
            exit::EXIT_INTERRUPTED,
            "Interrupted by SIGINT, SIGTERM, SIGHUP or SIGQUIT\n(SIGHUP and SIGQUIT only when not ignored at start, as under nohup);\nevery command still running was stopped and \\fIsession_end\\fR written;\nor by a second such signal during that shutdown,\nwhich kills every process group at once and exits without waiting.",
        ),
    ];
    let mut s = String::from(
        ".SH \"EXIT STATUS\"\n\
         The exit status of \\fBmur run\\fR is decided by its task\n\
         (for \\fB\\-\\-roster\\fR, the entry member's task);\n\
         its word is written as \\fIexit_status\\fR\n\
         in the \\fItask_end\\fR and \\fIsession_end\\fR records.\n",
    );
    for (code, text) in rows {
        s.push_str(&format!(".TP\n.B {code}\n{text}\n"));
    }
    s
}

/// The ENVIRONMENT section.
const ENVIRONMENT: &str = r#".SH ENVIRONMENT
.TP
.B MURMUR_HOME
The directory holding records and runtime directories.
Default: \fI$HOME/.murmur\fR; a relative path is made absolute.
.TP
.B MURMUR_DELEGATION_TIMEOUT_SECS
The bound, in whole seconds, of one member call or delegation
when the manifest does not set \fIlifecycle.delegation_deadline_secs\fR.
Default: 600.
.TP
.B MURMUR_DOOR_TOKEN
The bearer token of \fBmur door\fR when \fB\-\-token\-file\fR is not given;
see \fBmur\-door\fR(1).
.TP
.B RUST_LOG
The diagnostic log filter for standard error, in env_logger syntax
(\fIwarn\fR, \fIinfo\fR, \fImur=debug\fR, \&...).
Unset: warnings and errors only.
Session events go to \fItrace.jsonl\fR whatever this says.
.TP
.B NO_COLOR
When set to a non\-empty value, log output on standard error and
\fBmur trace\fR's view are never coloured.
Unset: coloured only when the stream is a terminal.
"#;

/// The FILES section.
const FILES: &str = r#".SH FILES
.TP
.I CAPSULE/murmur.yaml
The capsule manifest; see \fBmurmur.yaml\fR(5).
.TP
.I roster.yaml
The members of a formation; see \fBroster.yaml\fR(5).
.TP
.I $MURMUR_HOME/records/PATH/SESSION/
A session's records:
\fItrace.jsonl\fR, \fIlogs/wrk_*.log\fR, \fIout/result.txt\fR.
PATH is the capsule directory's absolute path without its leading slash.
.TP
.I $MURMUR_HOME/records/latest
A symlink to the records directory of the newest session started
(after \fBmur run \-\-roster\fR, the entry member's;
\fBmur trace latest\fR reads it); \fI$MURMUR_HOME/records/PATH/latest\fR
is the newest of that capsule. Each is replaced atomically.
.TP
.I $MURMUR_HOME/run/SESSION/
The runtime directory written at staging, removed when the session ends
(kept with \fB\-\-keep\-runtime\fR and by \fBmur stage\fR, marked \fI.keep\fR).
Its \fI.lock\fR is held while the session runs; one that nobody holds
(a \fBmur\fR that was killed) is removed by the next \fBmur run\fR or
\fBmur door\fR; \fBmur gc\fR removes old kept ones.
.PP
This build has no artifact store (no \fI$MURMUR_HOME/store/\fR):
it uses nothing under \fI$MURMUR_HOME\fR
but the two directories above.
"#;

/// The SEE ALSO section: the other pages of the manual.
fn see_also(cmd: &clap::Command, top: bool) -> String {
    let mut refs = Vec::new();
    if top {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_display_name().unwrap_or_else(|| sub.get_name());
            refs.push(format!(".BR {} (1)", name.replace('-', "\\-")));
        }
    } else {
        refs.push(".BR mur (1)".to_owned());
    }
    refs.push(".BR murmur.yaml (5)".to_owned());
    refs.push(".BR roster.yaml (5)".to_owned());
    refs.push(".BR mur\\-tools (7)".to_owned());
    let last = refs.len() - 1;
    let mut s = String::from(".SH \"SEE ALSO\"\n");
    for (i, r) in refs.into_iter().enumerate() {
        s.push_str(&r);
        s.push_str(if i == last { "\n" } else { " ,\n" });
    }
    s
}

/// Writes the completion script for `shell` to `out`.
pub fn completions(shell: Shell, out: &mut dyn Write) -> io::Result<()> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut cmd = visible_command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "mur", &mut buf);
    out.write_all(&buf)
}

/// The clap definition without hidden subcommands (`generate`): clap_complete would
/// otherwise offer them. Only the root has hidden subcommands.
fn visible_command() -> clap::Command {
    let full = Cli::command();
    let mut cmd = clap::Command::new("mur")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .subcommand_required(true);
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    cmd.subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_subcommand_gets_a_page() {
        let dir = tempfile::tempdir().unwrap();
        man_pages(dir.path()).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for page in ["mur.1", "mur-run.1", "mur-check.1", "mur-stage.1"] {
            assert!(names.iter().any(|n| n == page), "{page} missing: {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("generate")), "{names:?}");
        let top = std::fs::read_to_string(dir.path().join("mur.1")).unwrap();
        assert!(top.contains(".SH \"EXIT STATUS\""));
        assert!(top.contains(".B MURMUR_DELEGATION_TIMEOUT_SECS"));
    }

    #[test]
    fn completions_name_the_subcommands_but_not_generate() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            completions(shell, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("stage"), "{shell:?}");
            assert!(!text.contains("generate"), "{shell:?}");
        }
    }
}
