//! Site configuration: `ferry config` shows each value and its source, and the
//! precedence is flag > environment > config file > default.

mod common;

use common::{TestEnv, describe};

fn config(env: &TestEnv, vars: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
    let mut command = env.ferry();
    command
        .args(["config", "--json"])
        .args(args)
        .env_remove("FERRY_CACHE")
        .env_remove("SCRATCH")
        .env_remove("FERRY_JOBS");
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn cache_comes_from_flag_then_environment_then_config_then_default() {
    let env = TestEnv::new();
    let site = env.write("site.toml", "cache = \"$SCRATCH/site-cache\"\njobs = 6\n[gc]\nmax_age = \"30d\"\nkeep = 4\n");
    let site = site.to_str().unwrap();
    let with_all = [("FERRY_CONFIG", site), ("SCRATCH", "/scratch/u"), ("FERRY_CACHE", "/env/cache")];

    let from_env = config(&env, &with_all, &[]);
    assert_eq!(from_env["settings"]["cache"]["value"], "/env/cache");
    assert_eq!(from_env["settings"]["cache"]["source"], serde_json::json!({"kind": "env", "name": "FERRY_CACHE"}));

    let from_config = config(&env, &with_all[..2], &[]);
    assert_eq!(from_config["settings"]["cache"]["value"], "/scratch/u/site-cache");
    assert_eq!(from_config["settings"]["cache"]["source"]["kind"], "config");
    assert_eq!(from_config["settings"]["jobs"]["value"], "6");
    assert_eq!(from_config["settings"]["gc.max_age"]["value"], "30days");
    assert_eq!(from_config["settings"]["gc.keep"]["value"], "4");

    // No config, no SCRATCH: the built-in default.
    let default = config(&env, &[("HOME", "/home/u")], &[]);
    assert_eq!(default["settings"]["cache"]["value"], "/home/u/.cache/ferry");
    assert_eq!(default["settings"]["cache"]["source"]["kind"], "default");
    assert_eq!(default["config_file"], serde_json::Value::Null);

    // $SCRATCH/ferry beats the default but not the config file.
    let scratch = config(&env, &[("SCRATCH", "/scratch/u")], &[]);
    assert_eq!(scratch["settings"]["cache"]["value"], "/scratch/u/ferry");
}

#[test]
fn flags_beat_environment_and_slurm_beats_config() {
    let env = TestEnv::new();
    env.shards("data", "train", 1, 10, 1);
    let site = env.write("site.toml", "cache = \"/nonexistent/site\"\njobs = 6\n");
    let site = site.to_str().unwrap();
    let jobs = config(&env, &[("FERRY_CONFIG", site), ("SLURM_CPUS_PER_TASK", "3")], &[]);
    assert_eq!(jobs["settings"]["jobs"]["value"], "3");
    assert_eq!(jobs["settings"]["jobs"]["source"], serde_json::json!({"kind": "env", "name": "SLURM_CPUS_PER_TASK"}));
    // A real command follows the same order: the flag's cache is used, not the config's.
    let spec = env.write("spec.toml", common::gpt2_spec("cfg", "data/*.jsonl.zst", "[sequence]\nseq_len = 16\n"));
    let flag_cache = env.path("flag-cache");
    let output = env
        .ferry()
        .args(["prepare", spec.to_str().unwrap(), "--cache", flag_cache.to_str().unwrap()])
        .env("FERRY_CONFIG", site)
        .env("FERRY_CACHE", env.path("env-cache"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    assert!(flag_cache.join("entries").is_dir());
    assert!(!env.path("env-cache").exists());
}

#[test]
fn a_broken_config_file_is_named_with_its_line() {
    let env = TestEnv::new();
    let site = env.write("site.toml", "cache = \"/x\"\ncahce = \"/typo\"\n");
    let output = env.ferry().args(["config"]).env("FERRY_CONFIG", &site).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("site.toml") && stderr.contains("cahce") && stderr.contains("line 2"), "{stderr}");
}

#[test]
fn liveness_timeouts_come_from_environment_then_config_then_default() {
    let env = TestEnv::new();
    let site = env.write("site.toml", "[liveness]\nheartbeat_interval = \"2s\"\nstale_age = \"30s\"\n");
    let site = site.to_str().unwrap();
    let shown = |vars: &[(&str, &str)]| {
        let settings = config(&env, vars, &[])["settings"].clone();
        let pick = |name: &str| {
            let setting = &settings[name];
            (setting["value"].as_str().unwrap().to_string(), setting["source"]["kind"].as_str().unwrap().to_string())
        };
        (pick("liveness.heartbeat_interval"), pick("liveness.stale_age"))
    };
    let (heartbeat, stale) = shown(&[]);
    assert_eq!((heartbeat.0.as_str(), stale.0.as_str()), ("10s", "2m"), "defaults unchanged");
    assert_eq!(heartbeat.1, "default");
    let (heartbeat, stale) = shown(&[("FERRY_CONFIG", site)]);
    assert_eq!((heartbeat, stale), (("2s".into(), "config".into()), ("30s".into(), "config".into())));
    let (heartbeat, stale) = shown(&[("FERRY_CONFIG", site), ("FERRY_STALE_AGE", "5")]);
    assert_eq!((heartbeat.0.as_str(), stale), ("2s", ("5s".into(), "env".into())));

    // A stale age that live holders would exceed between two heartbeats is refused.
    let output = env.ferry().args(["config"]).env("FERRY_CONFIG", site).env("FERRY_STALE_AGE", "1s").output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("FERRY_STALE_AGE") && stderr.contains("must exceed the heartbeat interval"), "{stderr}");
}
