//! End to end on a real (one-node) Slurm cluster started by scripts/test.sh:
//! `sbatch scripts/job.sh` prepares, stages with `srun`, shows status and trains
//! from `$SLURM_TMPDIR`; `srun --ntasks=2 ferry prepare` shares the shards.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestEnv, describe, gpt2_spec, python};

/// The cluster's config, when the test script started one (as root).
fn slurm() -> Option<PathBuf> {
    common::provided("FERRY_SLURM_CONF", "FERRY_REQUIRE_SLURM", "a Slurm cluster")
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `sbatch --wait` with ferry on PATH and the test's cache; returns the job's output.
fn sbatch(env: &TestEnv, conf: &Path, args: &[&str]) -> String {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_ferry")).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let out = env.path("job.out");
    let output = Command::new("sbatch")
        .args(["--wait", "--parsable", "--output", out.to_str().unwrap(), "--chdir", env.dir.path().to_str().unwrap()])
        .args(args)
        .env("SLURM_CONF", conf)
        .env("PATH", path)
        .env("FERRY_CACHE", env.cache())
        .env("FERRY_PROGRESS_INTERVAL", "1")
        .env("PYTHON", python().unwrap_or_else(|| PathBuf::from("python3")))
        .env("FERRY_TRAINER", repo().join("scripts/train_example.py"))
        .output()
        .unwrap();
    let log = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(output.status.success(), "job failed: {}\njob output:\n{log}", describe(&output));
    log
}

#[test]
fn job_script_prepares_once_stages_and_trains_from_slurm_tmpdir() {
    let Some(conf) = slurm() else { return };
    if python().is_none() {
        return;
    }
    let env = TestEnv::new();
    env.shards("data", "train", 3, 200, 1);
    let spec = env.write("pile.toml", gpt2_spec("e2e-gpt2-128", "data/*.jsonl.zst", "[sequence]\nseq_len = 128\n"));
    let log = sbatch(&env, &conf, &[repo().join("scripts/job.sh").to_str().unwrap(), spec.to_str().unwrap()]);

    // The trainer step read only node-local files.
    let trainer: serde_json::Value = log
        .lines()
        .find_map(|line| serde_json::from_str::<serde_json::Value>(line).ok().filter(|v| v.get("trainer").is_some()))
        .unwrap_or_else(|| panic!("no trainer report in the job output:\n{log}"));
    assert_eq!(trainer["all_files_in_slurm_tmpdir"], true, "{trainer}");
    let tmpdir = trainer["slurm_tmpdir"].as_str().unwrap();
    assert!(trainer["files"].as_array().unwrap().iter().all(|f| f.as_str().unwrap().starts_with(tmpdir)), "{trainer}");
    assert!(trainer["rows"].as_u64().unwrap() > 0);

    // Built once: one token store and its view, every shard tokenized by the job's prepare.
    let manifests: Vec<serde_json::Value> = std::fs::read_dir(env.cache().join("entries"))
        .unwrap()
        .flatten()
        .map(|entry| serde_json::from_slice(&std::fs::read(entry.path().join("manifest.json")).unwrap()).unwrap())
        .collect();
    let mut kinds: Vec<&str> = manifests.iter().map(|manifest| manifest["kind"].as_str().unwrap()).collect();
    kinds.sort();
    assert_eq!(kinds, ["tokens", "view"]);
    for manifest in &manifests {
        assert_eq!(manifest["build"]["shards_tokenized_here"], manifest["build"]["shards_total"]);
    }

    // `ferry status` inside the job showed this node's staging complete.
    let staging = log
        .lines()
        .skip_while(|l| !l.starts_with("staging into"))
        .nth(1)
        .unwrap_or_else(|| panic!("no staging status:\n{log}"));
    assert!(staging.contains("e2e-gpt2-128") && staging.contains("done") && staging.contains("(100%)"), "{staging}");
    assert!(staging.contains(tmpdir.rsplit('/').next().unwrap()) || log.contains(tmpdir), "{log}");
}

#[test]
fn srun_with_two_tasks_shares_the_shards_of_one_prepare() {
    let Some(conf) = slurm() else { return };
    let env = TestEnv::new();
    // Shards long enough that the tasks' start-up skew cannot decide the split.
    env.shards("data", "train", 8, 2000, 2);
    let spec = env.write("spec.toml", gpt2_spec("two-tasks", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let command = format!(
        "srun --ntasks=2 --cpus-per-task=1 --output=prepare-%t.json --error=prepare-%t.err ferry prepare {} --json",
        spec.display()
    );
    sbatch(&env, &conf, &["--ntasks=2", "--cpus-per-task=1", "--wrap", &command]);
    let results: Vec<serde_json::Value> = (0..2)
        .map(|task| {
            let text = std::fs::read_to_string(env.path(&format!("prepare-{task}.json"))).unwrap();
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("task {task} output: {e}\n{text}"))
        })
        .collect();
    for result in &results {
        assert!(result["shards_tokenized_here"].as_u64().unwrap() > 0, "both tasks tokenized shards: {results:?}");
    }
    assert_eq!(results.iter().map(|r| r["shards_tokenized_here"].as_u64().unwrap()).sum::<u64>(), 8);
    assert_eq!(results.iter().filter(|r| r["built"] == true).count(), 1);
    assert_eq!(results[0]["fingerprint"], results[1]["fingerprint"]);
}
