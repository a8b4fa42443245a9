//! `ferry prepare` at cluster scale: racing processes, kills, Slurm task splits,
//! claims of live and dead owners, bad input, progress in logs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{TestEnv, describe, entry_data_files, finished_json as finish, gpt2_spec};

fn spawn_prepare(env: &TestEnv, spec: &Path, cache: &Path, extra_env: &[(&str, String)]) -> Child {
    let mut command = env.ferry();
    command.args(["prepare", spec.to_str().unwrap(), "--json", "--jobs", "1", "--cache", cache.to_str().unwrap()]);
    for (name, value) in extra_env {
        command.env(name, value);
    }
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn shard_records(cache: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(cache.join("building"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".done.json"))
        .map(|e| e.path().to_path_buf())
        .collect()
}

fn entries(cache: &Path) -> Vec<String> {
    std::fs::read_dir(cache.join("entries"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn eight_racing_prepares_build_one_entry_and_tokenize_each_shard_once() {
    let env = TestEnv::new();
    env.shards("data", "train", 8, 300, 1);
    let spec = env.write("spec.toml", gpt2_spec("race", "data/*.jsonl.zst", "[sequence]\nseq_len = 128\n"));
    let cache = env.cache();
    let children: Vec<Child> = (0..8).map(|_| spawn_prepare(&env, &spec, &cache, &[])).collect();
    let results: Vec<serde_json::Value> = children.into_iter().map(finish).collect();
    let fingerprints: Vec<&str> = results.iter().map(|r| r["fingerprint"].as_str().unwrap()).collect();
    assert!(fingerprints.iter().all(|f| *f == fingerprints[0]), "{fingerprints:?}");
    assert_eq!(results.iter().filter(|r| r["built"] == true).count(), 1, "exactly one publisher: {results:?}");
    let tokenized: u64 = results.iter().map(|r| r["shards_tokenized_here"].as_u64().unwrap()).sum();
    assert_eq!(tokenized, 8, "every shard tokenized once in total: {results:?}");
    let store = results[0]["token_store"]["fingerprint"].as_str().unwrap();
    let mut published = entries(&cache);
    published.sort();
    let mut expected = vec![fingerprints[0][..16].to_string(), store[..16].to_string()];
    expected.sort();
    assert_eq!(published, expected, "one token store and one view");
    assert!(!cache.join("building").join(&fingerprints[0][..16]).exists());
    assert!(!cache.join("building").join(&store[..16]).exists());
}

#[test]
fn killed_build_publishes_nothing_and_resumes_only_unfinished_shards() {
    let env = TestEnv::new();
    env.shards("data", "train", 6, 1500, 2);
    let spec = env.write("spec.toml", gpt2_spec("resume", "data/*.jsonl.zst", "[sequence]\nseq_len = 256\n"));
    let cache = env.cache();
    let mut child = spawn_prepare(&env, &spec, &cache, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while shard_records(&cache).len() < 2 {
        assert!(Instant::now() < deadline, "no shard finished");
        assert!(child.try_wait().unwrap().is_none(), "the build finished before it could be killed");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let done_before = shard_records(&cache).len();
    assert!(done_before < 6, "killed part-way");
    assert!(entries(&cache).is_empty(), "no partial entry in entries/");

    let resumed = finish(spawn_prepare(&env, &spec, &cache, &[]));
    assert_eq!(resumed["built"], true);
    assert_eq!(
        resumed["shards_tokenized_here"].as_u64().unwrap() as usize,
        6 - done_before,
        "only unfinished shards redone"
    );

    let clean_cache = env.path("clean-cache");
    let clean = finish(spawn_prepare(&env, &spec, &clean_cache, &[]));
    assert_eq!(clean["fingerprint"], resumed["fingerprint"]);
    let files = entry_data_files(Path::new(resumed["entry"].as_str().unwrap()));
    assert_eq!(
        files,
        entry_data_files(Path::new(clean["entry"].as_str().unwrap())),
        "byte-identical to an uninterrupted build"
    );
}

#[test]
fn slurm_tasks_share_the_shards_and_one_publishes() {
    let env = TestEnv::new();
    // Shards long enough that the tasks' start-up skew cannot decide the split.
    env.shards("data", "train", 9, 2500, 3);
    let spec = env.write("spec.toml", gpt2_spec("tasks", "data/*.jsonl.zst", "[sequence]\nseq_len = 128\n"));
    let cache = env.cache();
    let children: Vec<Child> = (0..3)
        .map(|task| {
            let vars = [
                ("SLURM_PROCID", task.to_string()),
                ("SLURM_NTASKS", "3".to_string()),
                ("SLURM_JOB_ID", "77".to_string()),
            ];
            spawn_prepare(&env, &spec, &cache, &vars)
        })
        .collect();
    let results: Vec<serde_json::Value> = children.into_iter().map(finish).collect();
    for result in &results {
        assert!(result["shards_tokenized_here"].as_u64().unwrap() > 0, "every task did some shards: {results:?}");
    }
    assert_eq!(results.iter().map(|r| r["shards_tokenized_here"].as_u64().unwrap()).sum::<u64>(), 9);
    assert_eq!(results.iter().filter(|r| r["built"] == true).count(), 1);
    assert_eq!(entries(&cache).len(), 2, "one token store and one view");
}

/// A claim file on shard 0 of the spec's token store build, owned by `pid` on this host.
fn plant_claim(env: &TestEnv, spec: &Path, pid: u32) -> PathBuf {
    // The fingerprint is known without building: a prepare of an unrelated cache would build,
    // so compute it from a dry build in another cache and reuse its short form.
    let probe = finish(spawn_prepare(env, spec, &env.path("probe-cache"), &[]));
    let short = &probe["token_store"]["fingerprint"].as_str().unwrap()[..16];
    let claims = env.cache().join("building").join(short).join("claims");
    std::fs::create_dir_all(&claims).unwrap();
    let owner = serde_json::json!({"host": ferry::fsutil::host_name(), "pid": pid, "job_id": null, "task": null});
    let path = claims.join("train.000000");
    std::fs::write(&path, owner.to_string()).unwrap();
    path
}

#[test]
fn claim_of_a_dead_process_is_taken_over() {
    let env = TestEnv::new();
    env.shards("data", "train", 2, 50, 4);
    let spec = env.write("spec.toml", gpt2_spec("dead", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    plant_claim(&env, &spec, dead_pid);
    let result = finish(spawn_prepare(&env, &spec, &env.cache(), &[]));
    assert_eq!(result["built"], true);
    assert_eq!(result["shards_tokenized_here"], 2, "the dead task's shard was taken over");
}

#[test]
fn claim_of_a_live_process_is_never_stolen() {
    let env = TestEnv::new();
    env.shards("data", "train", 2, 50, 5);
    let spec = env.write("spec.toml", gpt2_spec("live", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    // This test process is alive: its claim must be respected.
    let claim = plant_claim(&env, &spec, std::process::id());
    let mut child = spawn_prepare(&env, &spec, &env.cache(), &[]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(child.try_wait().unwrap().is_none(), "prepare waits for the live owner");
    assert!(entries(&env.cache()).is_empty());
    assert!(
        std::fs::read_to_string(&claim).unwrap().contains(&std::process::id().to_string()),
        "the claim is untouched"
    );
    // The owner goes away without finishing: the waiting prepare takes the shard.
    std::fs::remove_file(&claim).unwrap();
    let result = finish(child);
    assert_eq!(result["built"], true);
}

/// Runs prepare on a spec over `files` (name -> bytes) and returns (exit code, stderr).
fn prepare_inputs(files: &[(&str, Vec<u8>)], extra_spec: &str) -> (Option<i32>, String, TestEnv) {
    let env = TestEnv::new();
    for (name, bytes) in files {
        env.write(&format!("data/{name}"), bytes);
    }
    let spec = env.write("spec.toml", gpt2_spec("bad", "data/*", &format!("[sequence]\nseq_len = 8\n{extra_spec}")));
    let output = env.run(&["prepare", spec.to_str().unwrap(), "--json"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "no panic: {stderr}");
    (output.status.code(), stderr, env)
}

fn good_lines(count: usize) -> Vec<u8> {
    (0..count).flat_map(|i| format!("{{\"text\": \"a good document number {i}\"}}\n").into_bytes()).collect()
}

fn assert_fails_naming(files: &[(&str, Vec<u8>)], extra_spec: &str, needles: &[&str]) {
    let (code, stderr, env) = prepare_inputs(files, extra_spec);
    assert_eq!(code, Some(1), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "stderr names {needle:?}: {stderr}");
    }
    assert!(entries(&env.cache()).is_empty(), "nothing published");
}

fn with_line(line: &[u8]) -> Vec<u8> {
    let mut bytes = good_lines(3);
    bytes.extend_from_slice(line);
    bytes.extend(good_lines(2));
    bytes
}

#[test]
fn each_bad_record_kind_fails_naming_file_and_line() {
    assert_fails_naming(
        &[("a.jsonl", with_line(b"{\"text\": \"unterminated\n"))],
        "",
        &["a.jsonl", "line 4", "malformed JSON", "on_bad_record"],
    );
    assert_fails_naming(
        &[("b.jsonl", with_line(b"{\"text\": \"caf\xe9\"}\n"))],
        "",
        &["b.jsonl", "line 4", "invalid UTF-8"],
    );
    assert_fails_naming(
        &[("c.jsonl", with_line(b"{\"body\": \"x\"}\n"))],
        "",
        &["c.jsonl", "line 4", "no text field \"text\""],
    );
    assert_fails_naming(&[("d.jsonl", with_line(b"{\"text\": [1, 2]}\n"))], "", &["d.jsonl", "line 4", "not a string"]);
}

#[test]
fn damaged_files_fail_naming_the_file() {
    let body = good_lines(3000);
    let zst = zstd::encode_all(&body[..], 3).unwrap();
    assert_fails_naming(&[("cut.jsonl.zst", zst[..zst.len() / 2].to_vec())], "", &["cut.jsonl.zst", "truncated"]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &body).unwrap();
    let gz = gz.finish().unwrap();
    assert_fails_naming(&[("cut.jsonl.gz", gz[..gz.len() / 2].to_vec())], "", &["cut.jsonl.gz", "truncated"]);

    // An unreadable input: a link to a file that is gone.
    let env = TestEnv::new();
    env.write("data/ok.jsonl", good_lines(3));
    std::os::unix::fs::symlink(env.path("missing.jsonl"), env.path("data/gone.jsonl")).unwrap();
    let spec = env.write("spec.toml", gpt2_spec("gone", "data/*", ""));
    let output = env.run(&["prepare", spec.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("gone.jsonl"), "{}", describe(&output));
}

#[test]
fn spec_level_mistakes_fail_with_what_to_do() {
    // A glob that matches nothing.
    let env = TestEnv::new();
    let spec = env.write("spec.toml", gpt2_spec("none", "nowhere/*.jsonl.zst", ""));
    let output = env.run(&["prepare", spec.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("matches no file"), "{}", describe(&output));
    // An empty split: every document filtered out.
    assert_fails_naming(
        &[("e.jsonl", good_lines(5))],
        "[filter]\nmin_chars = 1000\n",
        &["split \"train\" has no documents", "5 filtered"],
    );
    // An invalid tokenizer file.
    let env = TestEnv::new();
    env.write("data/a.jsonl", good_lines(3));
    env.write("tok.json", "{\"model\": 42}");
    let spec =
        env.write("spec.toml", gpt2_spec("tok", "data/*", "").replace("builtin = \"gpt2\"", "path = \"tok.json\""));
    let output = env.run(&["prepare", spec.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("tok.json"), "{}", describe(&output));
}

#[test]
fn skip_policy_counts_bad_records_per_reason_in_the_manifest() {
    let mut bytes = good_lines(4);
    bytes.extend_from_slice(b"{broken\n{\"text\": \"caf\xe9\"}\n{\"no\": 1}\n{\"text\": 5}\n{broken again\n");
    bytes.extend(good_lines(4));
    let (code, stderr, env) = prepare_inputs(&[("mixed.jsonl", bytes)], "[source]\non_bad_record = \"skip\"\n");
    assert_eq!(code, Some(0), "{stderr}");
    let entry = std::fs::read_dir(env.cache().join("entries")).unwrap().next().unwrap().unwrap().path();
    let manifest = common::read_manifest(&entry);
    let skipped = &manifest["splits"]["train"]["skipped_records"];
    assert_eq!(skipped["malformed_json"], 2, "{skipped}");
    assert_eq!(skipped["invalid_utf8"], 1);
    assert_eq!(skipped["missing_text"], 1);
    assert_eq!(skipped["non_string_text"], 1);
    assert_eq!(manifest["splits"]["train"]["documents"], 8);
}

#[test]
fn random_bytes_and_truncated_files_give_errors_never_panics() {
    let mut rng = fastrand::Rng::with_seed(9);
    let body = good_lines(500);
    let zst = zstd::encode_all(&body[..], 3).unwrap();
    for round in 0..12 {
        let random: Vec<u8> = (0..rng.usize(1..5000)).map(|_| rng.u8(..)).collect();
        let name = ["r.jsonl", "r.jsonl.zst", "r.jsonl.gz", "r.parquet"][round % 4];
        let (code, stderr, _env) = prepare_inputs(&[(name, random)], "");
        assert_eq!(code, Some(1), "random bytes as {name}: {stderr}");
        let cut = rng.usize(1..zst.len());
        let (code, stderr, _env) = prepare_inputs(&[("t.jsonl.zst", zst[..cut].to_vec())], "");
        assert!(code == Some(1) || (code == Some(0) && cut == zst.len()), "truncated at {cut}: {stderr}");
    }
}

#[test]
fn slurm_logs_get_periodic_progress_lines_and_a_summary() {
    let env = TestEnv::new();
    env.shards("data", "train", 4, 1500, 6);
    let spec = env.write("spec.toml", gpt2_spec("logs", "data/*.jsonl.zst", ""));
    let output = env
        .ferry()
        .args(["prepare", spec.to_str().unwrap(), "--jobs", "1"])
        .env("FERRY_PROGRESS_INTERVAL", "0.2")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line =
        stderr.lines().find(|l| l.starts_with("prepare: ")).unwrap_or_else(|| panic!("no progress line: {stderr}"));
    for part in ["/4 shards", "docs/s", "tokens/s", "B/s", "ETA"] {
        assert!(line.contains(part), "{line}");
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("documents") && stdout.contains("tokens") && stdout.contains("skipped"),
        "summary: {stdout}"
    );
}
