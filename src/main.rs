//! The `ferry` binary: parse arguments, set up logging, run the command, exit
//! with 0 (ok), 1 (a failure the user can fix) or 2 (an internal error). The
//! error is printed once, each cause joined with ": ".

#![warn(clippy::too_many_lines)]

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
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
