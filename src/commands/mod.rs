//! One module per subcommand. Commands take resolved values, print what the user
//! asked for to stdout, and return errors for `main` to print once.

/// `println!` that returns the error instead of panicking, so a reader closing
/// stdout early (`ferry status | head -1`) ends the command quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod config;
mod daemon;
mod demo;
mod exit;
mod gc;
mod inspect;
mod prepare;
mod shell;
mod stage;
mod status;
mod verify;

pub use exit::exit_code;

use std::path::PathBuf;

use crate::cache::layout::CacheLayout;
use crate::cache::liveness::Liveness;
use crate::cli::{Cli, Command};
use crate::errors::{Failure, Fault};
use crate::progress::ProgressMode;
use crate::settings::Settings;

pub fn run(cli: Cli) -> anyhow::Result<()> {
    // Generated from the parser alone: they work whatever the site configuration says.
    match cli.command {
        Command::Completions { shell: target } => return shell::completions(target),
        Command::Manpage { command } => return shell::manpage(command.as_deref()),
        _ => {}
    }
    let settings = Settings::load()?;
    let progress = match cli.quiet {
        true => ProgressMode::Hidden,
        false => ProgressMode::Auto { line_interval: settings.progress_interval().value },
    };
    let [heartbeat, stale_age] = settings.liveness()?;
    let liveness = Liveness { heartbeat: heartbeat.value, stale_age: stale_age.value };
    let cache_layout = |flag: Option<PathBuf>| CacheLayout::new(settings.cache(flag).value).with_liveness(liveness);
    let dest = |flag: Option<PathBuf>| -> anyhow::Result<PathBuf> {
        let dest = settings.dest(flag).map(|s| s.value).ok_or_else(|| {
            UserError("no destination: pass --dest DIR, run inside a Slurm job that sets SLURM_TMPDIR, or set dest in the site config".into())
        })?;
        Ok(std::path::absolute(&dest).unwrap_or(dest))
    };
    match cli.command {
        Command::Prepare { spec, cache, jobs, rebuild_tokens, json } => {
            let options = crate::prepare::PrepareOptions { jobs: settings.jobs(jobs).value, progress, rebuild_tokens };
            prepare::run(&spec, &cache_layout(cache.cache), &options, json)
        }
        Command::Stage(args) => {
            let (dest, cache) = (dest(args.dest.clone())?, cache_layout(args.cache.cache.clone()));
            let jobs = settings.stage_jobs(args.jobs).value;
            let target = stage::StageTarget::from_flags(args.spec, args.entry, args.src, args.files_from)?;
            let request = stage::StageRequest {
                target,
                verify: args.verify,
                background: args.background,
                broadcast: args.broadcast,
                json: args.json,
            };
            stage::run(request, &cache, dest, jobs, progress)
        }
        Command::Wait { dest: flag, entry, json } => stage::wait(dest(flag)?, entry.as_deref(), json),
        Command::Status { cache, dest, json } => {
            // Only a destination named on the command line must exist: one implied by
            // SLURM_TMPDIR or the site config is simply empty until something is staged.
            let named = dest.is_some();
            let dest = settings.dest(dest).map(|s| s.value);
            status::run(&cache_layout(cache.cache), dest, named, &settings.socket(None).value, json)
        }
        Command::Gc { cache, max_size, max_age, keep, dry_run, dest, json } => {
            let policy = settings.gc_policy(max_size, max_age, keep)?;
            gc::run(&cache_layout(cache.cache), dest.as_deref(), &policy, dry_run, json)
        }
        Command::Verify { fingerprint, all, dest, cache, json } => {
            verify::run(&cache_layout(cache.cache), fingerprint.as_deref(), all, dest.as_deref(), json)
        }
        Command::Inspect { entry, split, rows, cache, json, megatron_args } => match megatron_args {
            true => inspect::megatron_args(&cache_layout(cache.cache), &entry, split.as_deref()),
            false => inspect::run(&cache_layout(cache.cache), &entry, split.as_deref(), rows, json),
        },
        Command::Config { json } => config::run(&settings, json),
        Command::Daemon(args) => daemon::serve(&settings, cache_layout(args.cache.cache.clone()), args),
        Command::Request { json, socket } => daemon::request(&settings, &json, socket),
        Command::Demo { dir } => demo::run(&dir, settings.jobs(None).value, progress),
        Command::Completions { shell: target } => shell::completions(target),
        Command::Manpage { command } => shell::manpage(command.as_deref()),
    }
}

/// A failure the user can fix, with its message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UserError(pub String);

impl Failure for UserError {
    fn fault(&self) -> Fault {
        Fault::User
    }
}
