# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_ferry_global_optspecs
    string join \n v/verbose q/quiet h/help V/version
end

function __fish_ferry_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_ferry_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_ferry_using_subcommand
    set -l cmd (__fish_ferry_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c ferry -n "__fish_ferry_needs_command" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_needs_command" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_needs_command" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_needs_command" -s V -l version -d 'Print version'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "prepare" -d 'Build the cache entry of a pipeline spec, or return at once if it exists'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "stage" -d 'Mirror the cache into node-local DEST as symlinks and copy the active entry\'s files in'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "wait" -d 'Block until staging into DEST is done; exit 1 if it failed'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "status" -d 'What the cache holds, builds in progress, and this node\'s staging'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "gc" -d 'Evict entries by policy (least recently used first), never one in use; reclaim abandoned builds'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "verify" -d 'Re-hash entry files and report every file whose size or blake3 differs from its manifest'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "inspect" -d 'Show what an entry holds: counts, document lengths, tokens per source, and its first rows decoded'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "daemon" -d 'Run the per-node agent: status and stage requests over a Unix socket, optional metrics'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "request" -d 'Send one request (a JSON object, see the README) to the node\'s daemon and print its reply'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "config" -d 'Print the effective settings and where each comes from (flag, environment, config file, default)'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "demo" -d 'Make a small Pile-style corpus, prepare it with the embedded GPT-2 tokenizer, stage it, show how to load it'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "completions" -d 'Print the completion script for SHELL, e.g. `source <(ferry completions bash)`'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "manpage" -d 'Print the man page (roff): `ferry manpage > ferry.1; man -l ferry.1`'
complete -c ferry -n "__fish_ferry_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ferry -n "__fish_ferry_using_subcommand prepare" -l cache -d 'Cache root [default: $FERRY_CACHE, else $SCRATCH/ferry, else ~/.cache/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand prepare" -s j -l jobs -d 'Worker threads [default: $SLURM_CPUS_PER_TASK, else all cores]' -r
complete -c ferry -n "__fish_ferry_using_subcommand prepare" -l rebuild-tokens -d 'Remove the spec\'s token store first (unless in use) and tokenize again, as after an error saying it is damaged'
complete -c ferry -n "__fish_ferry_using_subcommand prepare" -l json -d 'Print the result as JSON'
complete -c ferry -n "__fish_ferry_using_subcommand prepare" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand prepare" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand prepare" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l entry -d 'Stage the entry with this fingerprint (a unique prefix is enough)' -r
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l src -d 'Drop-in mode: mirror this existing Hugging Face cache directory...' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l files-from -d '...and copy the relative paths listed in FILE (one per line; - for stdin)' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l dest -d 'Destination [default: $SLURM_TMPDIR/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l cache -d 'Cache root [default: $FERRY_CACHE, else $SCRATCH/ferry, else ~/.cache/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand stage" -s j -l jobs -d 'Copies in flight [default: 16 per core ($SLURM_CPUS_PER_TASK, else all cores), 16 to 64]' -r
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l verify -d 'Check every file\'s blake3 against the manifest while copying'
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l background -d 'Return once the mirror exists; a detached process copies (see `ferry wait`)'
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l broadcast -d 'Send the entry\'s files to every node of this Slurm job with sbcast, reading the shared copy once; `srun --ntasks-per-node=1 ferry stage` then lands them on each node'
complete -c ferry -n "__fish_ferry_using_subcommand stage" -l json -d 'Print the result as JSON'
complete -c ferry -n "__fish_ferry_using_subcommand stage" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand stage" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand stage" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand wait" -l dest -d 'The staging destination [default: $SLURM_TMPDIR/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand wait" -l entry -d 'Only this entry (fingerprint prefix)' -r
complete -c ferry -n "__fish_ferry_using_subcommand wait" -l json -d 'Print what was staged as JSON, with each staged entry\'s path'
complete -c ferry -n "__fish_ferry_using_subcommand wait" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand wait" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand wait" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand status" -l cache -d 'Cache root [default: $FERRY_CACHE, else $SCRATCH/ferry, else ~/.cache/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand status" -l dest -d 'A staging destination to report on [default: $SLURM_TMPDIR/ferry when set]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand status" -l json -d 'Print JSON (fields documented in the README)'
complete -c ferry -n "__fish_ferry_using_subcommand status" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand status" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand status" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand gc" -l cache -d 'Cache root [default: $FERRY_CACHE, else $SCRATCH/ferry, else ~/.cache/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand gc" -l max-size -d 'Keep the total size under SIZE (e.g. 500G, 2TiB)' -r
complete -c ferry -n "__fish_ferry_using_subcommand gc" -l max-age -d 'Evict entries unused for longer than DURATION (e.g. 30d, 12h)' -r
complete -c ferry -n "__fish_ferry_using_subcommand gc" -l keep -d 'Keep at most N entries (the most recently used)' -r
complete -c ferry -n "__fish_ferry_using_subcommand gc" -l dest -d 'Clean this node-local destination instead of the cache' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand gc" -l dry-run -d 'Show what would be removed; change nothing'
complete -c ferry -n "__fish_ferry_using_subcommand gc" -l json
complete -c ferry -n "__fish_ferry_using_subcommand gc" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand gc" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand gc" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand verify" -l dest -d 'Verify the staged copies in this destination instead of the cache' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand verify" -l cache -d 'Cache root [default: $FERRY_CACHE, else $SCRATCH/ferry, else ~/.cache/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand verify" -l all -d 'Every entry in the cache (or every staged entry with --dest)'
complete -c ferry -n "__fish_ferry_using_subcommand verify" -l json
complete -c ferry -n "__fish_ferry_using_subcommand verify" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand verify" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand verify" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand inspect" -l split -d 'The split whose rows are shown [default: train, else the first]' -r
complete -c ferry -n "__fish_ferry_using_subcommand inspect" -l rows -d 'How many rows to decode' -r
complete -c ferry -n "__fish_ferry_using_subcommand inspect" -l cache -d 'Cache root [default: $FERRY_CACHE, else $SCRATCH/ferry, else ~/.cache/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand inspect" -l json -d 'Print JSON: the counts, the histograms and the rows\' ids and text'
complete -c ferry -n "__fish_ferry_using_subcommand inspect" -l megatron-args -d 'Print Megatron\'s data arguments for the entry where it lies (use --cache DEST for a staged copy): with --split, the `--data-path` weights and prefixes, separated by spaces (a path with spaces needs the JSON); else a JSON for `--per-split-data-args-path`'
complete -c ferry -n "__fish_ferry_using_subcommand inspect" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand inspect" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand inspect" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -l socket -d 'Socket path [default: /run/ferry/ferry.sock as root, else $XDG_RUNTIME_DIR/ferry.sock]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -l metrics -d 'Serve Prometheus metrics on this loopback address (e.g. 127.0.0.1:9184)' -r
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -l cache -d 'Cache root [default: $FERRY_CACHE, else $SCRATCH/ferry, else ~/.cache/ferry]' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -l idle-timeout -d 'Close connections silent for this long' -r
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -l connections-per-user -d 'Open connections one user may hold; more are refused' -r
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -l stagings-per-user -d 'Stagings one user may have running at once' -r
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -l longest-wait -d 'The longest a `wait` request waits before answering that the staging still runs' -r
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand daemon" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand request" -l socket -r -F
complete -c ferry -n "__fish_ferry_using_subcommand request" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand request" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand request" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand config" -l json
complete -c ferry -n "__fish_ferry_using_subcommand config" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand config" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand config" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand demo" -l dir -d 'Where the demo\'s corpus and cache go' -r -F
complete -c ferry -n "__fish_ferry_using_subcommand demo" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand demo" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand demo" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand completions" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand completions" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand completions" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand manpage" -s v -l verbose -d 'More log output (-v: debug, -vv: trace). RUST_LOG overrides'
complete -c ferry -n "__fish_ferry_using_subcommand manpage" -s q -l quiet -d 'Only errors on stderr, no progress'
complete -c ferry -n "__fish_ferry_using_subcommand manpage" -s h -l help -d 'Print help'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "prepare" -d 'Build the cache entry of a pipeline spec, or return at once if it exists'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "stage" -d 'Mirror the cache into node-local DEST as symlinks and copy the active entry\'s files in'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "wait" -d 'Block until staging into DEST is done; exit 1 if it failed'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "status" -d 'What the cache holds, builds in progress, and this node\'s staging'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "gc" -d 'Evict entries by policy (least recently used first), never one in use; reclaim abandoned builds'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "verify" -d 'Re-hash entry files and report every file whose size or blake3 differs from its manifest'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "inspect" -d 'Show what an entry holds: counts, document lengths, tokens per source, and its first rows decoded'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "daemon" -d 'Run the per-node agent: status and stage requests over a Unix socket, optional metrics'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "request" -d 'Send one request (a JSON object, see the README) to the node\'s daemon and print its reply'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "config" -d 'Print the effective settings and where each comes from (flag, environment, config file, default)'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "demo" -d 'Make a small Pile-style corpus, prepare it with the embedded GPT-2 tokenizer, stage it, show how to load it'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "completions" -d 'Print the completion script for SHELL, e.g. `source <(ferry completions bash)`'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "manpage" -d 'Print the man page (roff): `ferry manpage > ferry.1; man -l ferry.1`'
complete -c ferry -n "__fish_ferry_using_subcommand help; and not __fish_seen_subcommand_from prepare stage wait status gc verify inspect daemon request config demo completions manpage help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
