# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_mur_global_optspecs
    string join \n h/help V/version
end

function __fish_mur_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_mur_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_mur_using_subcommand
    set -l cmd (__fish_mur_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c mur -n "__fish_mur_needs_command" -s h -l help -d 'Print help'
complete -c mur -n "__fish_mur_needs_command" -s V -l version -d 'Print version'
complete -c mur -n "__fish_mur_needs_command" -f -a "run" -d 'Run one task in a capsule and print the answer'
complete -c mur -n "__fish_mur_needs_command" -f -a "door" -d 'Serve one capsule as a standalone A2A agent (a door), so any A2A client, or a formation on another machine, can give it tasks'
complete -c mur -n "__fish_mur_needs_command" -f -a "check" -d 'Validate a capsule\'s murmur.yaml and print every error'
complete -c mur -n "__fish_mur_needs_command" -f -a "stage" -d 'Stage a capsule: write its runtime directory and print the tool inventory'
complete -c mur -n "__fish_mur_needs_command" -f -a "trace" -d 'Show one session\'s trace as the conversation, or its records as JSON lines'
complete -c mur -n "__fish_mur_needs_command" -f -a "sessions" -d 'List recent sessions, newest first'
complete -c mur -n "__fish_mur_needs_command" -f -a "gc" -d 'Remove old records and leftover runtime directories, printing what it frees'
complete -c mur -n "__fish_mur_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c mur -n "__fish_mur_using_subcommand run" -l roster -d 'Run the formation described by FILE (roster.yaml) and give the task to its entry member. Capsule paths in it are relative to the roster\'s directory' -r -F
complete -c mur -n "__fish_mur_using_subcommand run" -l task -d 'The task text' -r
complete -c mur -n "__fish_mur_using_subcommand run" -l task-file -d 'Read the task text from FILE' -r -F
complete -c mur -n "__fish_mur_using_subcommand run" -l deadline -d 'When the runtime ends the session: an RFC 3339 time (2026-10-20T14:00:00Z) or a duration from now (90s, 15m, 2h). Default: no deadline' -r
complete -c mur -n "__fish_mur_using_subcommand run" -l driver -d 'The driver choice (a key of inference.choices) that serves the session. Default: inference.driver' -r
complete -c mur -n "__fish_mur_using_subcommand run" -l records-dir -d 'Make DIR itself the session\'s records directory (trace.jsonl, logs/, out/) instead of `$MURMUR_HOME/records/<capsule path>/<session id>`' -r -F
complete -c mur -n "__fish_mur_using_subcommand run" -l json -d 'Print the session\'s records on stdout as JSON lines while it runs, as trace.jsonl has them, then one last line {"type": "result", ...} with the answer; no progress line. See mur-run(1), JSON OUTPUT'
complete -c mur -n "__fish_mur_using_subcommand run" -l keep-runtime -d 'Keep the runtime directory (`$MURMUR_HOME/run/<session id>`) after the session instead of removing it; `mur gc` removes it later'
complete -c mur -n "__fish_mur_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mur -n "__fish_mur_using_subcommand run" -s V -l version -d 'Print version'
complete -c mur -n "__fish_mur_using_subcommand door" -l listen -d 'The address to listen on, IP:PORT. Port 0 picks a free port. Default: 127.0.0.1:7431 (loopback only; give 0.0.0.0:PORT to serve other machines). The door speaks plain HTTP only; beyond loopback it warns at start that the token travels in clear, unless --advertise-url is an https:// URL. Serve other machines through a TLS terminator (nginx, Caddy, an ingress) in front' -r
complete -c mur -n "__fish_mur_using_subcommand door" -l advertise-url -d 'The URL the agent card advertises to clients, e.g. the TLS terminator\'s `https://agent.example.com/`. Default: `http://ADDR/` of --listen, or, listening on every address (0.0.0.0, ::), `http://HOST/` with the Host header of the card request' -r
complete -c mur -n "__fish_mur_using_subcommand door" -l token-file -d 'Read the bearer token from the first line of FILE. Default: the environment variable MURMUR_DOOR_TOKEN. The file must be private to its owner (no access for group or others: chmod 600 FILE) and the token at least 16 bytes long (openssl rand -hex 32 makes 64); mur door refuses to start otherwise (exit 2)' -r -F
complete -c mur -n "__fish_mur_using_subcommand door" -l records-dir -d 'Write the session\'s records under DIR instead of `$MURMUR_HOME/records/<capsule path>/<session id>`' -r -F
complete -c mur -n "__fish_mur_using_subcommand door" -l keep-runtime -d 'Keep the runtime directory after the session instead of removing it'
complete -c mur -n "__fish_mur_using_subcommand door" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mur -n "__fish_mur_using_subcommand door" -s V -l version -d 'Print version'
complete -c mur -n "__fish_mur_using_subcommand check" -l roster -d 'Check a formation instead: the roster.yaml and every local member\'s capsule, without starting anything' -r -F
complete -c mur -n "__fish_mur_using_subcommand check" -l sandbox -d 'Also print what the sandbox of the capsule\'s commands enforces on this host, one line per layer (`sandbox: enforced: ...`, `sandbox: not enforced on this host: ...`); see murmur.yaml(5), SANDBOX. Without it a layer the kernel lacks is still named in a warning on stderr'
complete -c mur -n "__fish_mur_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mur -n "__fish_mur_using_subcommand check" -s V -l version -d 'Print version'
complete -c mur -n "__fish_mur_using_subcommand stage" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mur -n "__fish_mur_using_subcommand stage" -s V -l version -d 'Print version'
complete -c mur -n "__fish_mur_using_subcommand trace" -l type -d 'Only records of TYPE (repeat it or separate types by commas), e.g. tool_call' -r
complete -c mur -n "__fish_mur_using_subcommand trace" -l json -d 'Print the records as JSON lines, unchanged (filtered by --type)'
complete -c mur -n "__fish_mur_using_subcommand trace" -l full -d 'Show tool results, tool inputs and member answers whole instead of cut'
complete -c mur -n "__fish_mur_using_subcommand trace" -s f -l follow -d 'Keep printing records as the session writes them, like tail -f, until its session_end (or until its mur is gone)'
complete -c mur -n "__fish_mur_using_subcommand trace" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mur -n "__fish_mur_using_subcommand trace" -s V -l version -d 'Print version'
complete -c mur -n "__fish_mur_using_subcommand sessions" -s n -l limit -d 'List at most N sessions' -r
complete -c mur -n "__fish_mur_using_subcommand sessions" -l json -d 'Print one JSON object per session per line instead of the table'
complete -c mur -n "__fish_mur_using_subcommand sessions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mur -n "__fish_mur_using_subcommand sessions" -s V -l version -d 'Print version'
complete -c mur -n "__fish_mur_using_subcommand gc" -l older-than -d 'Remove what was last written longer ago than DURATION (90s, 12h, 7d; 0 removes everything that is not running)' -r
complete -c mur -n "__fish_mur_using_subcommand gc" -l dry-run -d 'Print what would be removed and the total, remove nothing'
complete -c mur -n "__fish_mur_using_subcommand gc" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c mur -n "__fish_mur_using_subcommand gc" -s V -l version -d 'Print version'
complete -c mur -n "__fish_mur_using_subcommand help; and not __fish_seen_subcommand_from run door check stage trace sessions gc help" -f -a "run" -d 'Run one task in a capsule and print the answer'
complete -c mur -n "__fish_mur_using_subcommand help; and not __fish_seen_subcommand_from run door check stage trace sessions gc help" -f -a "door" -d 'Serve one capsule as a standalone A2A agent (a door), so any A2A client, or a formation on another machine, can give it tasks'
complete -c mur -n "__fish_mur_using_subcommand help; and not __fish_seen_subcommand_from run door check stage trace sessions gc help" -f -a "check" -d 'Validate a capsule\'s murmur.yaml and print every error'
complete -c mur -n "__fish_mur_using_subcommand help; and not __fish_seen_subcommand_from run door check stage trace sessions gc help" -f -a "stage" -d 'Stage a capsule: write its runtime directory and print the tool inventory'
complete -c mur -n "__fish_mur_using_subcommand help; and not __fish_seen_subcommand_from run door check stage trace sessions gc help" -f -a "trace" -d 'Show one session\'s trace as the conversation, or its records as JSON lines'
complete -c mur -n "__fish_mur_using_subcommand help; and not __fish_seen_subcommand_from run door check stage trace sessions gc help" -f -a "sessions" -d 'List recent sessions, newest first'
complete -c mur -n "__fish_mur_using_subcommand help; and not __fish_seen_subcommand_from run door check stage trace sessions gc help" -f -a "gc" -d 'Remove old records and leftover runtime directories, printing what it frees'
complete -c mur -n "__fish_mur_using_subcommand help; and not __fish_seen_subcommand_from run door check stage trace sessions gc help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
