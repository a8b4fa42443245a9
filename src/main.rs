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
/// more (README, "Every core, even with one shard").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` and `mi_option_allow_thp` (`mimalloc.h`,
/// v3), which `libmimalloc-sys` has no constants for.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;
/// How long freed memory stays with the process before it goes back to the system.
const PURGE_DELAY_MS: std::ffi::c_long = 100;

fn main() -> ExitCode {
    tune_allocator();
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

/// Sets mimalloc up for a build's memory bound; called first, before any other
/// thread exists, as `mi_option_set` requires.
fn tune_allocator() {
    // Freed memory goes back to the system a tenth of a second later, not a second
    // (mimalloc's default kept 250 MiB at the peak where glibc kept 140 MiB) nor at
    // once: given back at once, memory freed and taken again a moment later (a
    // large tokenizer's temporary maps, a batch's texts and ids) was zeroed by the
    // kernel again, page by page. Building 80 KB with GPT-4o's tokenizer touched
    // 58,000 fresh pages given back at once and 40,000 at 0.1 s, with a third less
    // system time; what larger builds gain, and what the delay adds to their peaks
    // within the bound of 100 MiB + 64 MiB per worker, is in the README
    // ("Every core, even with one shard"), with the bench-rss figures it is measured by.
    // Half a second was tried too: a 100 MB GPT-4o build on 2 threads then touched
    // 42,000-44,000 fresh pages rather than 49,000-52,000 and peaked 20-30 MiB
    // higher. Its CPU time moved within this 2-core host's noise: the medians of
    // three sets of 5-10 alternated runs were 0%, 4% and 12% lower, their fastest
    // runs as fast; Llama-3's were the same.
    // SAFETY: no other thread exists yet (see above).
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    // No transparent huge pages for mimalloc's memory: it is built with `no_thp`,
    // so it never advises them, and this option tells the rest of mimalloc the
    // same. A huge page is zeroed whole (2 MiB) at its first touch and split when
    // part of it goes back, which happened over and over while freed memory went
    // back at once. Measured then, without them, `prepare` on
    // 108 MB (GPT-2, Llama-3, Qwen2, GPT-4o; 1 and 2 threads) peaked 20-44 MiB
    // lower; its CPU time moved within this 2-core host's noise (medians from 10%
    // less to 11% more), though loading GPT-4o's tokenizer alone took a fifth more
    // CPU (more, smaller page faults).
    // SAFETY: as above.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
    // The kernel is told too, for all memory but the encoder's large tables, which
    // ask for huge pages (see `huge_pages`).
    ferry::huge_pages::only_where_advised();
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
    /// The index `tune_allocator` sets for the purge delay is `mimalloc.h`'s: before
    /// it is set, it reads that option's default, 1000 ms in mimalloc v3 (`options.c`).
    #[test]
    fn the_option_main_sets_is_the_purge_delay() {
        // SAFETY: reading an option has no precondition.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) }, 1000);
    }

    /// The index `tune_allocator` sets for huge pages is `mi_option_allow_thp`.
    #[test]
    fn the_option_set_for_huge_pages_is_allow_thp() {
        // SAFETY: reading an option has no precondition.
        let default = |option| unsafe { libmimalloc_sys::mi_option_get(option) };
        // Its default is 1 on Linux; two further on is `arena_max_object_size`,
        // whose default (2 GiB, in KiB) no other option has.
        assert_eq!(default(super::MI_OPTION_ALLOW_THP), 1);
        assert_eq!(default(super::MI_OPTION_ALLOW_THP + 2), 2 << 20);
    }
}
