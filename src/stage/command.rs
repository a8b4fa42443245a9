//! The one way a `ferry stage` child process is started: the detached copy of
//! `--background`, and the daemon's staging for a client. A stage runs in a process
//! of its own (the daemon's as the requesting user, which a thread of a root
//! daemon could not be), so its options travel as the command line that the CLI
//! parses back (a test checks the round trip).

use std::ffi::OsString;
use std::path::Path;

/// What the started stage copies.
pub enum StageSource<'a> {
    /// A published entry (a fingerprint or its prefix) of the cache at `cache`.
    Entry { entry: &'a str, cache: &'a Path },
    /// The files listed in `files_from`, relative to `src`.
    DropIn { src: &'a Path, files_from: &'a Path },
}

/// A `ferry stage` command line.
pub struct StageCommand<'a> {
    pub source: StageSource<'a>,
    pub dest: &'a Path,
    pub verify: bool,
    /// Copy threads; `None` leaves the choice to the started process's settings.
    pub jobs: Option<usize>,
    /// Only errors on stderr.
    pub quiet: bool,
    /// The report as JSON on stdout.
    pub json: bool,
}

impl StageCommand<'_> {
    /// The process: `ferry` (the executable at `ferry`) with these arguments.
    pub fn command(&self, ferry: &Path) -> std::process::Command {
        let mut command = std::process::Command::new(ferry);
        command.args(self.args());
        command
    }

    /// The arguments after the program name.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        if self.quiet {
            args.push("-q".into());
        }
        args.extend(["stage".into(), "--dest".into(), self.dest.into()]);
        if let Some(jobs) = self.jobs {
            args.extend(["--jobs".into(), jobs.to_string().into()]);
        }
        match self.source {
            StageSource::Entry { entry, cache } => {
                args.extend(["--entry".into(), entry.into(), "--cache".into(), cache.into()]);
            }
            StageSource::DropIn { src, files_from } => {
                args.extend(["--src".into(), src.into(), "--files-from".into(), files_from.into()]);
            }
        }
        if self.verify {
            args.push("--verify".into());
        }
        if self.json {
            args.push("--json".into());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_command_line_parses_back_to_the_same_stage() {
        let command = StageCommand {
            source: StageSource::Entry { entry: "abcd", cache: Path::new("/c") },
            dest: Path::new("/d"),
            verify: true,
            jobs: Some(3),
            quiet: true,
            json: true,
        };
        let mut argv = vec![OsString::from("ferry")];
        argv.extend(command.args());
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        assert!(cli.quiet);
        let crate::cli::Command::Stage(args) = cli.command else { panic!("not a stage command") };
        assert_eq!(args.entry.as_deref(), Some("abcd"));
        assert_eq!(args.cache.cache.as_deref(), Some(Path::new("/c")));
        assert_eq!(args.dest.as_deref(), Some(Path::new("/d")));
        assert_eq!(args.jobs, Some(3));
        assert!(args.verify);
        assert!(args.json);
    }
}
