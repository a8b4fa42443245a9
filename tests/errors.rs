//! Every command given a path that does not exist fails as the user's error
//! (exit 1) with one line that names the path once and repeats no cause.

mod common;

use common::{TestEnv, describe};

/// Runs ferry and checks the failure: exit 1, the path named exactly once,
/// no ": "-separated part of the message twice.
fn assert_names_missing_path(env: &TestEnv, args: &[&str], vars: &[(&str, &str)], path: &str) {
    let output = env.ferry().args(args).envs(vars.iter().copied()).output().expect("run ferry");
    assert_eq!(output.status.code(), Some(1), "ferry {args:?}: {}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert_eq!(line.matches(path).count(), 1, "ferry {args:?} should name {path} once: {line}");
    let parts: Vec<&str> = line.trim_start_matches("error: ").split(": ").collect();
    for (index, part) in parts.iter().enumerate() {
        assert!(!parts[index + 1..].contains(part), "ferry {args:?} repeats {part:?}: {line}");
    }
}

#[test]
fn prepare_of_a_missing_spec_names_it() {
    let env = TestEnv::new();
    let spec = env.path("missing-spec.toml");
    assert_names_missing_path(&env, &["prepare", spec.to_str().unwrap()], &[], spec.to_str().unwrap());
}

#[test]
fn stage_from_a_missing_cache_names_it() {
    let env = TestEnv::new();
    let (cache, dest) = (env.path("missing-cache"), env.path("dest"));
    let args = ["stage", "--entry", "abc", "--dest", dest.to_str().unwrap(), "--cache", cache.to_str().unwrap()];
    assert_names_missing_path(&env, &args, &[], cache.to_str().unwrap());
}

/// `ferry <args> --dest <a missing folder>` names the folder.
fn assert_names_missing_dest(args: &[&str]) {
    let env = TestEnv::new();
    let dest = env.path("missing-dest");
    let args: Vec<&str> = args.iter().copied().chain(["--dest", dest.to_str().unwrap()]).collect();
    assert_names_missing_path(&env, &args, &[], dest.to_str().unwrap());
}

#[test]
fn status_of_a_missing_destination_names_it() {
    assert_names_missing_dest(&["status"]);
    assert_names_missing_dest(&["status", "--json"]);
}

#[test]
fn status_in_a_job_with_nothing_staged_yet_reports_an_empty_node() {
    // SLURM_TMPDIR/ferry does not exist until a stage runs: that is an empty node, not an error.
    let env = TestEnv::new();
    let tmpdir = env.path("job-tmp");
    std::fs::create_dir_all(&tmpdir).unwrap();
    let output = env.ferry().args(["status", "--json"]).env("SLURM_TMPDIR", &tmpdir).output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["staging"].as_array().map(Vec::len), Some(0), "{report}");
}

#[test]
fn gc_of_a_missing_destination_names_it() {
    assert_names_missing_dest(&["gc"]);
}

#[test]
fn verify_of_a_missing_destination_names_it() {
    assert_names_missing_dest(&["verify"]);
}

#[test]
fn wait_on_a_missing_destination_names_it() {
    assert_names_missing_dest(&["wait"]);
}

#[test]
fn verify_in_a_missing_cache_names_it() {
    let env = TestEnv::new();
    let cache = env.path("missing-cache");
    let args = ["verify", "abc", "--cache", cache.to_str().unwrap()];
    assert_names_missing_path(&env, &args, &[], cache.to_str().unwrap());
}

#[test]
fn config_with_a_missing_site_config_names_it() {
    let env = TestEnv::new();
    let config = env.path("missing-config.toml");
    let vars = [("FERRY_CONFIG", config.to_str().unwrap())];
    assert_names_missing_path(&env, &["config"], &vars, config.to_str().unwrap());
}

#[test]
fn request_to_a_missing_socket_names_it() {
    let env = TestEnv::new();
    let socket = env.path("missing.sock");
    let args = ["request", r#"{"type": "status"}"#, "--socket", socket.to_str().unwrap()];
    assert_names_missing_path(&env, &args, &[], socket.to_str().unwrap());
}

#[test]
fn daemon_with_a_socket_under_a_file_names_the_file() {
    let env = TestEnv::new();
    let file = env.write("not-a-dir", "a file where a directory should be");
    let socket = file.join("ferry.sock");
    let args = ["daemon", "--socket", socket.to_str().unwrap()];
    assert_names_missing_path(&env, &args, &[], file.to_str().unwrap());
}

#[test]
fn a_closed_stdout_ends_status_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let env = TestEnv::new();
    let root = env.cache();
    std::fs::create_dir_all(&root).unwrap();
    for args in [&["status"][..], &["status", "--json"][..]] {
        let mut child = env.ferry().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // Read nothing and close the pipe at once, as `| head -c 0` would.
        drop(child.stdout.take());
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "ferry {args:?}: {stderr}");
        assert!(!stderr.contains("error"), "ferry {args:?}: {stderr}");
    }
}
