//! One module per subcommand. Commands take resolved values, print what the user
//! asked for to stdout, and return errors for `main` to print once.

mod demo;
mod gc;
mod prepare;
mod stage;
mod status;
mod verify;

use crate::cli::{Cli, Command};
use crate::progress::ProgressMode;
use crate::settings;

pub fn run(cli: Cli) -> anyhow::Result<()> {
    let progress = if cli.quiet { ProgressMode::Hidden } else { ProgressMode::Auto };
    match cli.command {
        Command::Prepare { spec, cache, jobs, json } => {
            prepare::run(&spec, &settings::cache_root(cache.cache), settings::workers(jobs), progress, json)
        }
        Command::Stage(args) => stage::run(args, progress),
        Command::Wait { dest, entry } => stage::wait(dest, entry.as_deref()),
        Command::Status { cache, dest, json } => status::run(&settings::cache_root(cache.cache), dest, json),
        Command::Gc { cache, max_size, max_age, keep, dry_run, dest, json } => {
            let policy = crate::gc::GcPolicy { max_size, max_age, keep };
            gc::run(&settings::cache_root(cache.cache), dest.as_deref(), &policy, dry_run, json)
        }
        Command::Verify { fingerprint, all, dest, cache, json } => {
            verify::run(&settings::cache_root(cache.cache), fingerprint.as_deref(), all, dest.as_deref(), json)
        }
        Command::Demo { dir } => demo::run(&dir, progress),
    }
}

/// 1 for failures the user can fix (bad spec, bad input, no space), 2 otherwise.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(err) = cause.downcast_ref::<crate::prepare::PrepareError>() {
            return if err.is_user_error() { 1 } else { 2 };
        }
        if let Some(err) = cause.downcast_ref::<crate::stage::StageError>() {
            return if err.is_user_error() { 1 } else { 2 };
        }
        if cause.is::<crate::spec::SpecError>() || cause.is::<UserError>() {
            return 1;
        }
    }
    2
}

/// A failure the user can fix, with its message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UserError(pub String);
