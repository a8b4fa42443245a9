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
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a small Pile-style corpus, prepare it with the embedded GPT-2 tokenizer, show how to load it.
    Demo {
        /// Where the demo's corpus and cache go.
        #[arg(long, default_value = "ferry-demo")]
        dir: PathBuf,
    },
}
