//! What a test observes of a ferry process from outside: the files it wrote, the
//! files it opened (under `strace`), and inputs that would show a read.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use super::{TestEnv, describe};

/// Every file of an entry but its manifest (which records times and hosts), by
/// path relative to the entry.
pub fn entry_files(entry: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = walkdir::WalkDir::new(entry)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file() && e.file_name() != "manifest.json")
        .map(|e| {
            let relative = e.path().strip_prefix(entry).unwrap().display().to_string();
            (relative, std::fs::read(e.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Replaces a file's bytes by as many other bytes, keeping its mtime: the content
/// memo (keyed by path, size and mtime) still vouches for it, but anything that
/// reads it now reads garbage. Returns what restores it.
pub fn scramble(path: &Path) -> impl FnOnce() + use<> {
    let (bytes, modified) = (std::fs::read(path).unwrap(), std::fs::metadata(path).unwrap().modified().unwrap());
    std::fs::write(path, vec![b'#'; bytes.len()]).unwrap();
    let set_time = |path: &Path, time: SystemTime| {
        std::fs::File::options().write(true).open(path).unwrap().set_modified(time).unwrap();
    };
    set_time(path, modified);
    let path = path.to_path_buf();
    move || {
        std::fs::write(&path, &bytes).unwrap();
        set_time(&path, modified);
    }
}

/// `strace`, where the test script installed it (as root).
pub fn strace() -> Option<PathBuf> {
    let found = Command::new("strace").arg("-V").output().is_ok_and(|output| output.status.success());
    if !found {
        eprintln!("SKIPPED (in part): strace is not installed; the inputs are checked by scrambling them only");
    }
    found.then(|| PathBuf::from("strace"))
}

/// `ferry prepare --json` under `strace`, when there is one: the summary, and every
/// path the process and its threads opened.
pub fn prepare_traced(env: &TestEnv, spec: &Path, extra: &[&str]) -> (serde_json::Value, Vec<String>) {
    let Some(strace) = strace() else { return (env.prepare(spec, extra), Vec::new()) };
    let trace = env.path("prepare.strace");
    let mut command = Command::new(strace);
    command.args(["-f", "-qq", "-e", "trace=open,openat,openat2", "-o"]).arg(&trace);
    command.arg(env!("CARGO_BIN_EXE_ferry")).args(["prepare", spec.to_str().unwrap(), "--json"]).args(extra);
    let ferry = env.ferry();
    command.current_dir(env.dir.path()).envs(ferry.get_envs().filter_map(|(k, v)| Some((k, v?))));
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("SLURM_")) {
        command.env_remove(name);
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let opened = std::fs::read_to_string(&trace).unwrap().lines().map(str::to_string).collect();
    (serde_json::from_slice(&output.stdout).unwrap(), opened)
}
