//! Command-line arguments (clap derive only).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "ferry",
    version,
    about = "Tokenize corpora once into a Hugging Face-loadable cache; stage it onto Slurm nodes fast"
)]
pub struct Cli {
    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr, no progress.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Cache root [default: $FERRY_CACHE, else $SCRATCH/ferry, else ~/.cache/ferry]
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the cache entry of a pipeline spec, or return at once if it exists.
    Prepare {
        /// The pipeline spec (TOML).
        spec: PathBuf,
        #[command(flatten)]
        cache: CacheArgs,
        /// Worker threads [default: $SLURM_CPUS_PER_TASK, else all cores]
        #[arg(short, long)]
        jobs: Option<usize>,
        /// Remove the spec's token store first (unless in use) and tokenize again, as
        /// after an error saying it is damaged.
        #[arg(long)]
        rebuild_tokens: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Mirror the cache into node-local DEST as symlinks and copy the active entry's files in.
    Stage(StageArgs),
    /// Block until staging into DEST is done; exit 1 if it failed.
    Wait {
        /// The staging destination [default: $SLURM_TMPDIR/ferry]
        #[arg(long, value_name = "DIR")]
        dest: Option<PathBuf>,
        /// Only this entry (fingerprint prefix).
        #[arg(long)]
        entry: Option<String>,
        /// Print what was staged as JSON, with each staged entry's path.
        #[arg(long)]
        json: bool,
    },
    /// What the cache holds, builds in progress, and this node's staging.
    Status {
        #[command(flatten)]
        cache: CacheArgs,
        /// A staging destination to report on [default: $SLURM_TMPDIR/ferry when set]
        #[arg(long, value_name = "DIR")]
        dest: Option<PathBuf>,
        /// Print JSON (fields documented in the README).
        #[arg(long)]
        json: bool,
    },
    /// Evict entries by policy (least recently used first), never one in use; reclaim abandoned builds.
    Gc {
        #[command(flatten)]
        cache: CacheArgs,
        /// Keep the total size under SIZE (e.g. 500G, 2TiB).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
        /// Evict entries unused for longer than DURATION (e.g. 30d, 12h).
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        max_age: Option<std::time::Duration>,
        /// Keep at most N entries (the most recently used).
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
        /// Show what would be removed; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Clean this node-local destination instead of the cache.
        #[arg(long, value_name = "DIR")]
        dest: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Re-hash entry files and report every file whose size or blake3 differs from its manifest.
    Verify {
        /// The entry (fingerprint prefix).
        #[arg(required_unless_present_any = ["all", "dest"])]
        fingerprint: Option<String>,
        /// Every entry in the cache (or every staged entry with --dest).
        #[arg(long, conflicts_with = "fingerprint")]
        all: bool,
        /// Verify the staged copies in this destination instead of the cache.
        #[arg(long, value_name = "DIR")]
        dest: Option<PathBuf>,
        #[command(flatten)]
        cache: CacheArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show what an entry holds: counts, document lengths, tokens per source, and its first rows decoded.
    Inspect {
        /// The entry: a name (as in `by-name/`) or a fingerprint prefix.
        entry: String,
        /// The split whose rows are shown [default: train, else the first]
        #[arg(long)]
        split: Option<String>,
        /// How many rows to decode.
        #[arg(long, default_value_t = 2, value_name = "N")]
        rows: usize,
        #[command(flatten)]
        cache: CacheArgs,
        /// Print JSON: the counts, the histograms and the rows' ids and text.
        #[arg(long)]
        json: bool,
        /// Print Megatron's data arguments for the entry where it lies (use --cache DEST for
        /// a staged copy): with --split, the `--data-path` weights and prefixes, separated by
        /// spaces (a path with spaces needs the JSON); else a JSON for
        /// `--per-split-data-args-path`.
        #[arg(long, conflicts_with = "json")]
        megatron_args: bool,
    },
    /// Run the per-node agent: status and stage requests over a Unix socket, optional metrics.
    Daemon(DaemonArgs),
    /// Send one request (a JSON object, see the README) to the node's daemon and print its reply.
    Request {
        /// The request, e.g. '{"type": "status"}'.
        json: String,
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
    },
    /// Print the effective settings and where each comes from (flag, environment, config file, default).
    Config {
        #[arg(long)]
        json: bool,
    },
    /// Make a small Pile-style corpus, prepare it with the embedded GPT-2 tokenizer, stage it, show how to load it.
    Demo {
        /// Where the demo's corpus and cache go.
        #[arg(long, default_value = "ferry-demo")]
        dir: PathBuf,
    },
    /// Print the completion script for SHELL, e.g. `source <(ferry completions bash)`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `ferry manpage > ferry.1; man -l ferry.1`.
    Manpage {
        /// A subcommand's page instead (`ferry-COMMAND.1`), e.g. `prepare`.
        command: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct StageArgs {
    /// The pipeline spec whose entry to stage (it must be prepared).
    #[arg(required_unless_present_any = ["entry", "src"], conflicts_with_all = ["entry", "src"])]
    pub spec: Option<PathBuf>,
    /// Stage the entry with this fingerprint (a unique prefix is enough).
    #[arg(long, conflicts_with = "src")]
    pub entry: Option<String>,
    /// Drop-in mode: mirror this existing Hugging Face cache directory...
    #[arg(long, value_name = "DIR", requires = "files_from")]
    pub src: Option<PathBuf>,
    /// ...and copy the relative paths listed in FILE (one per line; - for stdin).
    #[arg(long, value_name = "FILE", requires = "src")]
    pub files_from: Option<PathBuf>,
    /// Destination [default: $SLURM_TMPDIR/ferry]
    #[arg(long, value_name = "DIR")]
    pub dest: Option<PathBuf>,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Copies in flight [default: 16 per core ($SLURM_CPUS_PER_TASK, else all cores), 16 to 64]
    #[arg(short, long)]
    pub jobs: Option<usize>,
    /// Check every file's blake3 against the manifest while copying.
    #[arg(long)]
    pub verify: bool,
    /// Return once the mirror exists; a detached process copies (see `ferry wait`).
    #[arg(long)]
    pub background: bool,
    /// Send the entry's files to every node of this Slurm job with sbcast, reading the
    /// shared copy once; `srun --ntasks-per-node=1 ferry stage` then lands them on each node.
    #[arg(long, conflicts_with_all = ["background", "src", "verify"])]
    pub broadcast: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_size(text: &str) -> Result<u64, String> {
    parse_size::parse_size(text).map_err(|err| format!("{err}; write e.g. 500G or 2TiB"))
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Socket path [default: /run/ferry/ferry.sock as root, else $XDG_RUNTIME_DIR/ferry.sock]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Serve Prometheus metrics on this loopback address (e.g. 127.0.0.1:9184).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Close connections silent for this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub idle_timeout: std::time::Duration,
    /// Open connections one user may hold; more are refused.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub connections_per_user: usize,
    /// Stagings one user may have running at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub stagings_per_user: usize,
    /// The longest a `wait` request waits before answering that the staging still runs.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    pub longest_wait: std::time::Duration,
}
