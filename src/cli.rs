//! The command line (clap derive). Parsed arguments are turned into validated
//! configuration before any thread starts.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Run LLM agents with tools, supervise their processes, record every event.
///
/// A capsule is a directory with a murmur.yaml. mur run stages it, runs one task and
/// prints the answer on stdout. Every event of the session is written to trace.jsonl in
/// its records directory, private to the user (directories 0700, files 0600). A
/// record keeps at most 64 KiB of any one string, the whole text going to a file in
/// blobs/ beside the trace that the record names; a session's records are limited to
/// 256 MiB, past which a records_limit record is written, strings are cut to 4 KiB and
/// no more blob files are written.
///
/// Signals: SIGINT, SIGTERM, SIGHUP (a dropped ssh session, a closed terminal) and
/// SIGQUIT (Ctrl-\) each end mur cleanly: every command still running is stopped
/// (SIGTERM to its process group, SIGKILL 2 s later), session_end is written and the
/// exit status is 130. A second such signal while that shutdown is under way (a
/// command that ignores SIGTERM holds it up for its 2 s grace) cuts it short, as most
/// supervisors do: every process group of mur's commands is sent SIGKILL at once, mur
/// says so on stderr and exits 130 without waiting (session_end may then be missing,
/// and the runtime directory is removed by the next start). A mur started with SIGHUP
/// or SIGQUIT ignored (nohup mur ..., a background job of a non-interactive shell) keeps
/// ignoring it.
#[derive(Debug, Parser)]
#[command(name = "mur", version, propagate_version = true)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `mur`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one task in a capsule and print the answer.
    ///
    /// The task comes from --task, --task-file, or standard input when neither is
    /// given. The answer is written to stdout and to out/result.txt in the session's
    /// records directory. Exit status: 0 completed, 1 failed, no answer or a runtime
    /// failure (a file that cannot be written), 2 usage or
    /// manifest error, 3 deadline or ceiling, 130 interrupted.
    ///
    /// With --roster, runs a formation instead: every local member of roster.yaml is
    /// staged and gets its own session and door on loopback (behind a token minted for
    /// this launch); the entry member gets the task and may hand work to the members
    /// the roster lets it call with call-member. The formation ends when the entry
    /// member's task ends, and the exit status is that task's. Each member's records go
    /// to its own records directory (`DIR/<member>` with --records-dir).
    ///
    /// $ mur run examples/hello --task "How many files are there?"
    ///
    /// $ mur run --roster examples/formation/roster.yaml --task "Review notes.txt"
    ///
    /// After the answer, one line on stderr names the session and its records
    /// directory: `mur: session ses_...: records in DIR`; `mur trace latest` shows it.
    #[command(
        after_long_help = RUN_JSON_OUTPUT,
        override_usage = "mur run [OPTIONS] [CAPSULE]\n       mur run --roster <FILE> [OPTIONS]"
    )]
    Run(RunArgs),
    /// Serve one capsule as a standalone A2A agent (a door), so any A2A client, or a
    /// formation on another machine, can give it tasks.
    ///
    /// Each SendMessage becomes a task of one long-lived session; a task arriving while
    /// one runs is refused with TASK_STATE_REJECTED and the status message "task
    /// rejected: capsule is busy" (or queued under task_acceptance: queue, where a
    /// background command's exit no tool result returned also arrives as a
    /// completion task). Every
    /// JSON-RPC request needs "Authorization: Bearer TOKEN"; the agent card at
    /// /.well-known/agent-card.json is public. The token is the first line of
    /// --token-file, else the environment variable MURMUR_DOOR_TOKEN; with neither,
    /// the door refuses to start (there is no unauthenticated mode). Prints "door: URL"
    /// on stdout once it listens; SIGINT, SIGTERM, SIGHUP or SIGQUIT ends it cleanly with
    /// session_end.
    ///
    /// Serves SendMessage, GetTask, ListTasks (filters, pages of 1 to 100, history
    /// length) and CancelTask; a task's history is the client's message and the agent's
    /// earlier status messages. It keeps every unfinished task and the 1000 most recent
    /// finished ones within 64 MiB of history. A missing or wrong token is HTTP 401
    /// with a JSON body saying which, two Authorization headers HTTP 400; a body that
    /// is not application/json is HTTP 415. A request naming a key twice (at any
    /// depth) is -32600 naming it; a numeric id is echoed as sent; a ListTasks
    /// pageToken is keyed (HMAC-SHA256, a random key per door start), so one this door
    /// did not give out is -32602.
    ///
    /// Logs to stderr at info unless RUST_LOG says otherwise (target mur::door): one
    /// line per task when it is received, at each state change, and at its end with
    /// its state and duration; one line per refused request (401, 415, parse and other
    /// JSON-RPC errors) with the peer's address. No line holds the token or a task's
    /// text; values a client chose (a method, a Content-Type) are cut at 200
    /// characters and escaped (\0, \n, \u{1b}), never stripped.
    ///
    /// Limits per client address (one address may be many clients: loopback for a
    /// whole formation, a reverse proxy, a NAT): at most 256 connections in all, 64 per
    /// address whatever their state, 64 per address still sending a request head (5 s
    /// for a head, 10 s for a whole request, 5 s idle between keep-alive requests), and
    /// 32 requests a second (bursts of 64) without the token per address, past which
    /// the answer is 429 with Retry-After: 1. A 401 closes its connection. A connection
    /// past a cap is not refused at once: up to 32 more are read on probation, and a
    /// request carrying the token is served on one (then closed) while anything else
    /// gets 503 with Retry-After: 1, so a client with the token is served while
    /// another client on its address holds every slot. A full reserve makes room by
    /// closing its oldest connection still sending a head (503).
    ///
    /// $ MURMUR_DOOR_TOKEN=$(cat token) mur door examples/formation/critic --listen 0.0.0.0:7431
    Door(DoorArgs),
    /// Validate a capsule's murmur.yaml and print every error.
    ///
    /// Prints each error of the manifest as FILE:LINE:COLUMN: KEY.PATH: MESSAGE, all at
    /// once. Once the manifest itself is valid, it checks the files it points at (the
    /// workdir, prompt.system_file, each script replies file) and prints those errors as
    /// FILE: KEY.PATH: MESSAGE. Exit status 0 when the capsule is valid, 2 otherwise.
    ///
    /// $ mur check examples/hello
    #[command(override_usage = "mur check [CAPSULE]\n       mur check --roster <FILE>")]
    Check(CheckArgs),
    /// Stage a capsule: write its runtime directory and print the tool inventory.
    ///
    /// $ mur stage examples/hello
    Stage(StageArgs),
    /// Show one session's trace as the conversation, or its records as JSON lines.
    ///
    /// SESSION is `latest` (the default: the newest session, by the link
    /// $MURMUR_HOME/records/latest), a session id or an unambiguous prefix of one (with
    /// or without `ses_`, looked up under $MURMUR_HOME/records), or a records directory
    /// (or its trace.jsonl) anywhere, such as one given to `mur run --records-dir`.
    ///
    /// The view shows the task, each model turn's text and tool calls with their
    /// inputs, each tool result as the model saw it (cut to 12 lines and 2000 bytes;
    /// --full shows it whole), member calls and their answers, continuations, the task's
    /// and the session's end, each with the time since the session started
    /// (+MM:SS.mmm) and its duration. Colour only on a terminal, never with NO_COLOR
    /// set. A record of a type this build does not know is shown raw; a last line cut
    /// short (a killed mur) is shown as such. Exit status 0, or 2 when SESSION names no
    /// session's records.
    ///
    /// $ mur trace
    ///
    /// $ mur trace ses_01j9 --type tool_call --full
    ///
    /// $ mur trace latest --json --type inference | jq .output_tokens
    Trace(TraceArgs),
    /// List recent sessions, newest first.
    ///
    /// One row per session found under $MURMUR_HOME/records: id, capsule, start (UTC),
    /// duration, status (session_end's exit_status; `running` while its mur runs;
    /// `unfinished` when its mur ended without session_end), turns (model calls
    /// that answered; a failed model call is not a turn), tokens (input plus output)
    /// and the records directory. Sessions run with --records-dir outside
    /// $MURMUR_HOME are not listed (read them with mur trace DIR).
    ///
    /// $ mur sessions
    ///
    /// $ mur sessions examples/hello --json
    Sessions(SessionsArgs),
    /// Remove old records and leftover runtime directories, printing what it frees.
    ///
    /// Removes each session's records directory under $MURMUR_HOME/records whose
    /// trace.jsonl was last written longer ago than --older-than, each runtime directory
    /// under $MURMUR_HOME/run (kept with --keep-runtime, written by mur stage, or left
    /// by a mur that was killed) last changed longer ago than that, the directories left
    /// empty and the `latest` links whose session is gone. A running session's records
    /// and runtime directory are never removed. Prints one line per directory and the
    /// total freed.
    ///
    /// $ mur gc --older-than 7d --dry-run
    Gc(GcArgs),
    /// Generate man pages or shell completions from this binary's own CLI definition.
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// The JSON OUTPUT section of mur-run(1): the schema of `mur run --json`.
pub const RUN_JSON_OUTPUT: &str = "JSON OUTPUT

With --json, stdout carries JSON lines only, for CI and scripts, and the progress line \
is off. First every record of the session, each line exactly as trace.jsonl has it, \
written while the session runs: {\"ts\": RFC 3339 UTC with ms, \"seq\": 1, 2, ..., \
\"session\": \"ses_...\", \"task\": \"tsk_...\" or null, \"type\": the record type, ...its \
fields} (session_start, task_start, inference, tool_call, ..., task_end, session_end; \
see mur trace and the README's Records section). Then one last line:

{\"type\": \"result\", \"session\": \"ses_...\", \"task\": \"tsk_...\", \"exit_status\": \
\"completed\" (or failed, no_answer, canceled, deadline, max_turns, spend_ceiling), \
\"exit_code\": the exit status of mur, \"answer\": the answer or null, \"error\": why \
there is none or null, \"records_dir\": the records directory}

The answer is not printed on its own. Diagnostics and the session line stay on \
stderr. With --roster the entry member's records are printed when the formation ends. \
A record type this build does not write yet may appear in later versions: skip the \
types you do not know.";

/// `mur run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The capsule directory (or its murmur.yaml). Default: the current directory.
    #[arg(value_name = "CAPSULE", conflicts_with = "roster")]
    pub capsule: Option<PathBuf>,
    /// Run the formation described by FILE (roster.yaml) and give the task to its entry
    /// member. Capsule paths in it are relative to the roster's directory.
    #[arg(long, value_name = "FILE")]
    pub roster: Option<PathBuf>,
    /// The task text.
    #[arg(long, value_name = "TEXT", conflicts_with = "task_file")]
    pub task: Option<String>,
    /// Read the task text from FILE.
    #[arg(long, value_name = "FILE")]
    pub task_file: Option<PathBuf>,
    /// When the runtime ends the session: an RFC 3339 time (2026-10-20T14:00:00Z) or a
    /// duration from now (90s, 15m, 2h). Default: no deadline.
    #[arg(long, value_name = "RFC3339|DURATION", allow_hyphen_values = true)]
    pub deadline: Option<String>,
    /// The driver choice (a key of inference.choices) that serves the session.
    /// Default: inference.driver.
    #[arg(long, value_name = "CHOICE")]
    pub driver: Option<String>,
    /// Make DIR itself the session's records directory (trace.jsonl, logs/, out/) instead of
    /// `$MURMUR_HOME/records/<capsule path>/<session id>`.
    #[arg(long, value_name = "DIR")]
    pub records_dir: Option<PathBuf>,
    /// Print the session's records on stdout as JSON lines while it runs, as
    /// trace.jsonl has them, then one last line {"type": "result", ...} with the answer;
    /// no progress line. See mur-run(1), JSON OUTPUT.
    #[arg(long)]
    pub json: bool,
    /// Keep the runtime directory (`$MURMUR_HOME/run/<session id>`) after the session
    /// instead of removing it; `mur gc` removes it later.
    #[arg(long)]
    pub keep_runtime: bool,
}

/// `mur trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// `latest`, a session id (or an unambiguous prefix), or a records directory.
    #[arg(value_name = "SESSION|RECORDS_DIR|latest", default_value = "latest")]
    pub session: String,
    /// Print the records as JSON lines, unchanged (filtered by --type).
    #[arg(long)]
    pub json: bool,
    /// Only records of TYPE (repeat it or separate types by commas), e.g. tool_call.
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    pub types: Vec<String>,
    /// Show tool results, tool inputs and member answers whole instead of cut.
    #[arg(long)]
    pub full: bool,
    /// Keep printing records as the session writes them, like tail -f, until its
    /// session_end (or until its mur is gone).
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// `mur sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Only this capsule's sessions: its directory (or murmur.yaml), or its name.
    #[arg(value_name = "CAPSULE")]
    pub capsule: Option<String>,
    /// Print one JSON object per session per line instead of the table.
    #[arg(long)]
    pub json: bool,
    /// List at most N sessions.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 20)]
    pub limit: usize,
}

/// `mur gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Remove what was last written longer ago than DURATION (90s, 12h, 7d; 0 removes
    /// everything that is not running).
    #[arg(long, value_name = "DURATION", default_value = "30d")]
    pub older_than: String,
    /// Print what would be removed and the total, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `mur door`.
#[derive(Debug, Args)]
pub struct DoorArgs {
    /// The capsule directory (or its murmur.yaml).
    #[arg(value_name = "CAPSULE")]
    pub capsule: PathBuf,
    /// The address to listen on, IP:PORT. Port 0 picks a free port. Default:
    /// 127.0.0.1:7431 (loopback only; give 0.0.0.0:PORT to serve other machines). The
    /// door speaks plain HTTP only; beyond loopback it warns at start that the token
    /// travels in clear, unless --advertise-url is an https:// URL. Serve other
    /// machines through a TLS terminator (nginx, Caddy, an ingress) in front.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7431")]
    pub listen: std::net::SocketAddr,
    /// The URL the agent card advertises to clients, e.g. the TLS terminator's
    /// `https://agent.example.com/`. Default: `http://ADDR/` of --listen, or, listening on
    /// every address (0.0.0.0, ::), `http://HOST/` with the Host header of the card
    /// request.
    #[arg(long, value_name = "URL")]
    pub advertise_url: Option<String>,
    /// Read the bearer token from the first line of FILE. Default: the environment
    /// variable MURMUR_DOOR_TOKEN. The file must be private to its owner (no access for
    /// group or others: chmod 600 FILE) and the token at least 16 bytes long (openssl
    /// rand -hex 32 makes 64); mur door refuses to start otherwise (exit 2).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Write the session's records under DIR instead of
    /// `$MURMUR_HOME/records/<capsule path>/<session id>`.
    #[arg(long, value_name = "DIR")]
    pub records_dir: Option<PathBuf>,
    /// Keep the runtime directory after the session instead of removing it.
    #[arg(long)]
    pub keep_runtime: bool,
}

/// `mur check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The capsule directory (or its murmur.yaml). Default: the current directory.
    #[arg(value_name = "CAPSULE", default_value = ".", conflicts_with = "roster")]
    pub capsule: PathBuf,
    /// Check a formation instead: the roster.yaml and every local member's capsule,
    /// without starting anything.
    #[arg(long, value_name = "FILE")]
    pub roster: Option<PathBuf>,
    /// Also print what the sandbox of the capsule's commands enforces on this host,
    /// one line per layer (`sandbox: enforced: ...`, `sandbox: not enforced on this
    /// host: ...`); see murmur.yaml(5), SANDBOX. Without it a layer the kernel lacks is
    /// still named in a warning on stderr.
    ///
    /// $ mur check --sandbox examples/hello
    #[arg(long, conflicts_with = "roster")]
    pub sandbox: bool,
}

/// `mur stage`.
#[derive(Debug, Args)]
pub struct StageArgs {
    /// The capsule directory (or its murmur.yaml). Default: the current directory.
    #[arg(value_name = "CAPSULE", default_value = ".")]
    pub capsule: PathBuf,
}

/// `mur generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// What to generate.
    #[command(subcommand)]
    pub what: GenerateWhat,
}

/// What `mur generate` writes.
#[derive(Debug, Subcommand)]
pub enum GenerateWhat {
    /// Man pages: mur.1 and one mur-SUBCOMMAND.1 per subcommand, into DIR.
    Man {
        /// The output directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// A shell completion script, on stdout.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// Shells with completion scripts.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    /// GNU bash.
    Bash,
    /// Z shell.
    Zsh,
    /// fish.
    Fish,
}
