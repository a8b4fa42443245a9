//! `ferry completions SHELL` and `ferry manpage`: generated from the argument parser,
//! so they never drift from the commands. The wheel ships both (see
//! `scripts/shell-files.sh`).

use std::io::Write;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

pub fn completions(shell: Shell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "ferry", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(())
}

/// `ferry.1`, or `ferry-COMMAND.1` for a subcommand: the main page lists the
/// subcommands as `ferry-COMMAND(1)`, as git's pages do.
pub fn manpage(subcommand: Option<&str>) -> anyhow::Result<()> {
    let mut command = Cli::command();
    // Gives subcommands their display names (`ferry-prepare`) and usage (`ferry prepare`).
    command.build();
    let page_of = match subcommand {
        None => command,
        Some(name) => command
            .find_subcommand(name)
            .cloned()
            .ok_or_else(|| super::UserError(format!("ferry has no command {name:?}; `ferry --help` lists them")))?,
    };
    let mut page = Vec::new();
    clap_mangen::Man::new(page_of).render(&mut page)?;
    std::io::stdout().lock().write_all(&page)?;
    Ok(())
}
