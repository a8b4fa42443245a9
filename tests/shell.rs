//! The man page and shell completions: the files the wheel installs equal what the
//! binary generates from its parser, and each loads in its shell (bash, and zsh and
//! fish where installed) and completes ferry's commands and flags.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::describe;

/// The files `scripts/shell-files.sh` writes, with the `ferry` arguments that make each.
const SHELL_FILES: &[(&str, &[&str])] = &[
    ("man/man1/ferry.1", &["manpage"]),
    ("bash-completion/completions/ferry", &["completions", "bash"]),
    ("zsh/site-functions/_ferry", &["completions", "zsh"]),
    ("fish/vendor_completions.d/ferry.fish", &["completions", "fish"]),
];

fn shipped(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python/ferry.data/data/share").join(relative)
}

fn ferry(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_ferry")).args(args).output().unwrap();
    assert!(output.status.success(), "ferry {args:?}:\n{}", describe(&output));
    String::from_utf8(output.stdout).unwrap()
}

/// Runs `script` in `shell`, or None with a SKIPPED line when the shell is not installed.
fn in_shell(shell: &str, args: &[&str], script: &str) -> Option<String> {
    let output = match Command::new(shell).args(args).arg(script).output() {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("SKIPPED: {shell} is not installed; its completions are not loaded");
            return None;
        }
        Err(err) => panic!("running {shell}: {err}"),
    };
    assert!(output.status.success(), "{shell} failed on:\n{script}\n{}", describe(&output));
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Every subcommand's name (`help` has no page).
fn subcommands() -> Vec<String> {
    use clap::CommandFactory;
    ferry::cli::Cli::command().get_subcommands().map(|command| command.get_name().to_string()).collect()
}

#[test]
fn the_shipped_man_pages_and_completions_are_what_the_binary_generates() {
    let stale =
        |relative: &str| format!("{relative} is stale or missing: run scripts/shell-files.sh and commit the result");
    for (relative, args) in SHELL_FILES {
        let file = std::fs::read_to_string(shipped(relative)).unwrap_or_else(|_| panic!("{}", stale(relative)));
        assert!(file == ferry(args), "{}", stale(relative));
    }
    let commands = subcommands();
    assert!(commands.len() >= 12, "{commands:?}");
    for command in &commands {
        let relative = format!("man/man1/ferry-{command}.1");
        let file = std::fs::read_to_string(shipped(&relative)).unwrap_or_else(|_| panic!("{}", stale(&relative)));
        assert!(file == ferry(&["manpage", command]), "{}", stale(&relative));
    }
    let pages = std::fs::read_dir(shipped("man/man1")).unwrap().count();
    assert_eq!(pages, commands.len() + 1, "a page for a command that no longer exists is shipped");
}

#[test]
fn bash_completes_commands_and_flags() {
    let script = format!(
        "source {}\ncomplete -p ferry\n\
         COMP_WORDS=(ferry st); COMP_CWORD=1; _ferry ferry st ferry; echo \"words: ${{COMPREPLY[*]}}\"\n\
         COMP_WORDS=(ferry stage --ver); COMP_CWORD=2; _ferry ferry --ver stage; echo \"flags: ${{COMPREPLY[*]}}\"\n\
         COMP_WORDS=(ferry completions ''); COMP_CWORD=2; _ferry ferry '' completions; echo \"shells: ${{COMPREPLY[*]}}\"",
        shipped("bash-completion/completions/ferry").display()
    );
    let Some(out) = in_shell("bash", &["--norc", "-c"], &script) else { return };
    assert!(out.contains("-F _ferry") && out.contains("ferry"), "not registered for ferry:\n{out}");
    assert!(out.contains("words: stage status"), "{out}");
    assert!(out.contains("flags: --verify --verbose"), "{out}");
    assert!(out.contains("bash") && out.contains("fish") && out.contains("zsh"), "{out}");
}

#[test]
fn zsh_registers_the_completion_function() {
    let script = format!(
        "autoload -Uz compinit && compinit -u -D\nsource {}\nprint -r -- \"$_comps[ferry]\"",
        shipped("zsh/site-functions/_ferry").display()
    );
    let Some(out) = in_shell("zsh", &["-f", "-c"], &script) else { return };
    assert_eq!(out.trim(), "_ferry");
}

#[test]
fn fish_completes_commands_and_flags() {
    let script = format!(
        "source {}\ncomplete -C 'ferry st'\necho ---\ncomplete -C 'ferry stage --ver'",
        shipped("fish/vendor_completions.d/ferry.fish").display()
    );
    let Some(out) = in_shell("fish", &["--no-config", "-c"], &script) else { return };
    let (commands, flags) = out.split_once("---").unwrap();
    for command in ["stage", "status"] {
        assert!(commands.lines().any(|line| line.starts_with(command)), "{command} not offered:\n{out}");
    }
    assert!(flags.lines().any(|line| line.starts_with("--verify")), "--verify not offered:\n{out}");
}

#[test]
fn the_man_pages_render_and_the_main_page_refers_to_every_command() {
    if Command::new("man").arg("--version").output().is_err() {
        eprintln!("SKIPPED: man is not installed; the pages are not rendered");
        return;
    }
    let render = |page: &str| {
        let script = format!("MANWIDTH=100 man -l {} | col -b", shipped(&format!("man/man1/{page}")).display());
        in_shell("sh", &["-c"], &script).unwrap()
    };
    let main = render("ferry.1");
    for command in subcommands() {
        assert!(main.contains(&format!("ferry-{command}(1)")), "ferry-{command}(1) missing:\n{main}");
    }
    let prepare = render("ferry-prepare.1");
    assert!(prepare.contains("ferry-prepare - Build") && prepare.contains("--jobs <JOBS>"), "{prepare}");
}
