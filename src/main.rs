//! The `ferry` binary: parse arguments, set up logging, run the command, exit
//! with 0 (ok), 1 (a failure the user can fix) or 2 (an internal error). The
//! error is printed once, each cause joined with ": ".

#![warn(clippy::too_many_lines)]

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// mimalloc rather than glibc's allocator: a build's threads allocate and free
/// many small strings while reading a tokenizer, and buffers pass from the
/// reading thread to the workers. On a 2-core machine, `prepare` over 108 MB ran
/// 10-25% faster on one thread, and glibc's arenas per thread held up to 30 MiB
/// more (README, "Performance").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, v3), which `libmimalloc-sys`
/// has no constant for.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // Freed memory goes back to the system at once, not a second later: peak RSS
    // stays within a build's bound of 64 MiB per worker (mimalloc's default kept
    // 250 MiB at the peak where glibc kept 140 MiB).
    // SAFETY: called before any other thread exists, as `mi_option_set` requires.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    let cli = ferry::cli::Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    match std::panic::catch_unwind(|| ferry::commands::run(cli)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(err)) => {
            let code = ferry::commands::exit_code(&err);
            // Code 0 is a reader that closed our stdout (`ferry status | head`): nothing to say.
            if code != 0 {
                eprintln!("error: {err:#}");
            }
            ExitCode::from(code)
        }
        Err(_) => {
            eprintln!("error: internal error (a bug in ferry); please report it with the command and -v output");
            ExitCode::from(2)
        }
    }
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("ferry={default},warn")));
    // Colors only on a terminal: Slurm logs are files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi)
        .init();
}

#[cfg(test)]
mod tests {
    /// The index `main` sets is `mimalloc.h`'s purge delay: before it is set, it
    /// reads that option's default, 1000 ms in mimalloc v3 (`options.c`).
    #[test]
    fn the_option_main_sets_is_the_purge_delay() {
        // SAFETY: reading an option has no precondition.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) }, 1000);
    }
}
