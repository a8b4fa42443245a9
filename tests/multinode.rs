//! On a real Slurm cluster of three nodes on one machine (scripts/slurm/multinode.sh,
//! started by scripts/test.sh as root): each node its own host name, network
//! namespace and `SLURM_TMPDIR`, all sharing one `$SCRATCH` that holds the cache.
//! Staging lands on every node's own disk; one build splits across hosts; a node
//! killed mid-build is taken over once its heartbeat is stale; `gc` on one node
//! keeps an entry another node is staging.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestEnv, describe, entry_data_files, gpt2_spec, python};

/// The cluster's config, when the test script started one.
fn cluster() -> Option<PathBuf> {
    common::provided("FERRY_MULTINODE_CONF", "FERRY_REQUIRE_MULTINODE", "a multi-node Slurm cluster")
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A test tree inside the cluster's shared `$SCRATCH`, which every node sees.
fn scratch_env(conf: &Path) -> TestEnv {
    TestEnv { dir: tempfile::tempdir_in(conf.parent().unwrap().join("scratch")).expect("temp dir in scratch") }
}

/// A node's network namespace, as the cluster script recorded it.
fn namespace(conf: &Path, node: &str) -> String {
    let network = std::fs::read_to_string(conf.parent().unwrap().join("network")).expect("the cluster's network file");
    network
        .lines()
        .filter_map(|line| line.strip_prefix("netns "))
        .find(|name| name.ends_with(&format!("-{node}")))
        .unwrap_or_else(|| panic!("no namespace for {node} in:\n{network}"))
        .to_string()
}

/// A Slurm client command with ferry on PATH, the test's cache, and `vars`.
fn slurm_command(program: &str, env: &TestEnv, conf: &Path, vars: &[(&str, &str)]) -> Command {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_ferry")).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new(program);
    command
        .current_dir(env.dir.path())
        .env("SLURM_CONF", conf)
        .env("PATH", path)
        .env("FERRY_CACHE", env.cache())
        .env("RUST_LOG", "ferry=info")
        .env("FERRY_PROGRESS_INTERVAL", "1")
        .env("PYTHON", python().unwrap_or_else(|| PathBuf::from("python3")));
    for (name, value) in vars {
        command.env(name, value);
    }
    command
}

/// `sbatch --wait` of `script` (written into the test tree); returns the job's output.
fn sbatch(env: &TestEnv, conf: &Path, args: &[&str], script: &str, vars: &[(&str, &str)]) -> String {
    let child = sbatch_spawn(env, conf, args, script, vars);
    sbatch_finish(env, child)
}

fn sbatch_spawn(env: &TestEnv, conf: &Path, args: &[&str], script: &str, vars: &[(&str, &str)]) -> Child {
    let script = env.write("job.sh", format!("#!/bin/bash\nset -euo pipefail\n{script}"));
    let out = env.path("job.out");
    slurm_command("sbatch", env, conf, vars)
        // Whole nodes: a test that kills or freezes a node's ferry processes must meet only its own.
        .args(["--wait", "--parsable", "--exclusive", "--output", out.to_str().unwrap()])
        .args(args)
        .arg(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sbatch")
}

fn sbatch_finish(env: &TestEnv, child: Child) -> String {
    let output = child.wait_with_output().unwrap();
    let log = std::fs::read_to_string(env.path("job.out")).unwrap_or_default();
    assert!(output.status.success(), "job failed: {}\njob output:\n{log}", describe(&output));
    log
}

/// `srun` of one task on `node`, in a job of its own.
fn srun_on(node: &str, env: &TestEnv, conf: &Path, args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut command = slurm_command("srun", env, conf, vars);
    command.args(["--nodes=1", "--ntasks=1", "--exclusive", "--nodelist", node]).args(args);
    command
}

fn run_ok(mut command: Command) -> String {
    let output = command.output().unwrap();
    assert!(output.status.success(), "{command:?} failed: {}", describe(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json_file(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

/// The processes named `ferry` in a node's network namespace.
fn ferry_processes(namespace: &str) -> Vec<u32> {
    let output = Command::new("ip").args(["netns", "pids", namespace]).output().expect("ip netns pids");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|pid| pid.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "ferry"))
        .collect()
}

fn signal(pids: &[u32], name: &str) {
    for pid in pids {
        let _ = Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status();
    }
}

/// The only entry directory of a cache.
fn only_entry(cache: &Path) -> PathBuf {
    let entries: Vec<PathBuf> =
        std::fs::read_dir(cache.join("entries")).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0].clone()
}

/// The same spec built by one process into a cache of its own: the reference bytes.
fn one_process_build(env: &TestEnv, spec: &Path) -> Vec<(String, Vec<u8>)> {
    let solo = env.path("solo-cache");
    let output = env.ferry().args(["prepare", spec.to_str().unwrap()]).env("FERRY_CACHE", &solo).output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    entry_data_files(&only_entry(&solo))
}

#[test]
fn every_node_stages_into_its_own_slurm_tmpdir_and_trains_from_it() {
    let Some(conf) = cluster() else { return };
    if python().is_none() {
        return;
    }
    let env = scratch_env(&conf);
    env.shards("data", "train", 3, 200, 11);
    let spec = env.write("spec.toml", gpt2_spec("three-nodes", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let script = format!(
        "ferry prepare {spec} --json > prepare.json\n\
         srun --ntasks-per-node=1 --output=stage-%N.out ferry stage {spec}\n\
         HF_DATASETS_OFFLINE=1 srun --ntasks-per-node=1 --output=train-%N.json \"$PYTHON\" {trainer} --data-name three-nodes\n\
         srun --ntasks-per-node=1 --output=status-%N.json ferry status --json\n",
        spec = spec.display(),
        trainer = repo().join("scripts/train_example.py").display()
    );
    sbatch(&env, &conf, &["--nodes=3"], &script, &[]);
    assert_eq!(json_file(&env.path("prepare.json"))["built"], true);

    let nodes_dir = conf.parent().unwrap().join("nodes");
    for node in ["node1", "node2", "node3"] {
        // The trainer on this node read only files under this node's own SLURM_TMPDIR.
        let trainer = json_file(&env.path(&format!("train-{node}.json")));
        let tmpdir = trainer["slurm_tmpdir"].as_str().unwrap();
        assert!(Path::new(tmpdir).starts_with(nodes_dir.join(node).join("tmp")), "{node}: {trainer}");
        assert_eq!(trainer["all_files_in_slurm_tmpdir"], true, "{node}: {trainer}");
        let files = trainer["files"].as_array().unwrap();
        assert!(!files.is_empty() && trainer["rows"].as_u64().unwrap() > 0, "{node}: {trainer}");
        assert!(files.iter().all(|f| f.as_str().unwrap().starts_with(&format!("{tmpdir}/"))), "{node}: {trainer}");

        // `ferry status` on this node shows its own staging, done, by a process on this host.
        let status = json_file(&env.path(&format!("status-{node}.json")));
        assert!(status["dest"].as_str().unwrap().starts_with(tmpdir), "{node}: {status}");
        let staging = status["staging"].as_array().unwrap();
        assert_eq!(staging.len(), 1, "{node}: {status}");
        assert_eq!(staging[0]["name"], "three-nodes", "{node}: {status}");
        assert_eq!(staging[0]["host"], node, "{node}: {status}");
        assert_eq!(staging[0]["phase"], "done", "{node}: {status}");
    }
}

#[test]
fn one_build_splits_across_three_hosts_with_one_publisher() {
    let Some(conf) = cluster() else { return };
    let env = scratch_env(&conf);
    // Shards long enough that the tasks' start-up skew cannot decide the split.
    env.shards("data", "train", 12, 1500, 12);
    let spec = env.write("spec.toml", gpt2_spec("split-hosts", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let script =
        format!("srun --output=prepare-%N-%t.json --error=prepare-%N-%t.err ferry prepare {} --json\n", spec.display());
    sbatch(&env, &conf, &["--nodes=3", "--ntasks=6", "--cpus-per-task=1"], &script, &[]);

    let mut per_host = std::collections::BTreeMap::<String, u64>::new();
    let mut results = Vec::new();
    for file in std::fs::read_dir(env.dir.path()).unwrap().flatten() {
        let name = file.file_name().to_string_lossy().into_owned();
        let Some(node) = name.strip_prefix("prepare-").and_then(|rest| rest.strip_suffix(".json")) else { continue };
        let node = node.split('-').next().unwrap().to_string();
        let result = json_file(&file.path());
        *per_host.entry(node).or_default() += result["shards_tokenized_here"].as_u64().unwrap();
        results.push(result);
    }
    assert_eq!(results.len(), 6, "{results:?}");
    assert_eq!(per_host.len(), 3, "{per_host:?}");
    assert!(per_host.values().all(|&shards| shards > 0), "every host tokenized shards: {per_host:?}");
    assert_eq!(per_host.values().sum::<u64>(), 12, "each shard tokenized once: {per_host:?}");
    assert_eq!(results.iter().filter(|r| r["built"] == true).count(), 1, "one publisher: {results:?}");
    assert!(results.iter().all(|r| r["fingerprint"] == results[0]["fingerprint"]), "{results:?}");
    assert!(entry_data_files(&only_entry(&env.cache())) == one_process_build(&env, &spec), "byte-identical entry");
}

/// Claim files (shards being tokenized) held by a process on `node`.
fn claims_held_by(cache: &Path, node: &str) -> usize {
    let Ok(builds) = std::fs::read_dir(cache.join("building")) else { return 0 };
    builds
        .flatten()
        .filter_map(|build| std::fs::read_dir(build.path().join("claims")).ok())
        .flatten()
        .flatten()
        .filter(|claim| claim.file_name().to_string_lossy().starts_with("train."))
        .filter_map(|claim| std::fs::read(claim.path()).ok())
        .filter_map(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .filter(|owner| owner["host"] == node)
        .count()
}

/// Waits until `node` holds a shard claim, then SIGKILLs every ferry process in its namespace.
fn kill_node_mid_build(conf: &Path, cache: &Path, node: &str) -> Vec<u32> {
    let namespace = namespace(conf, node);
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        if claims_held_by(cache, node) > 0 {
            let pids = ferry_processes(&namespace);
            if !pids.is_empty() {
                signal(&pids, "KILL");
                return pids;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{node} never held a shard claim");
}

#[test]
fn a_node_killed_mid_build_is_taken_over_and_its_leases_expire() {
    let Some(conf) = cluster() else { return };
    let env = scratch_env(&conf);
    env.shards("data", "train", 9, 2500, 13);
    let spec = env.write("spec.toml", gpt2_spec("node-dies", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    // srun must not end the step when one task dies: the survivors carry on.
    let script = format!(
        "srun --kill-on-bad-exit=0 --output=prepare-%N.json --error=prepare-%N.err ferry prepare {} --json || true\n",
        spec.display()
    );
    let short = [("FERRY_HEARTBEAT_INTERVAL", "1s"), ("FERRY_STALE_AGE", "4s")];
    // Without a takeover the survivors would wait for the dead node forever: a time limit ends the job.
    let job_args = ["--nodes=3", "--ntasks=3", "--cpus-per-task=1", "--time=6"];
    let job = sbatch_spawn(&env, &conf, &job_args, &script, &short);
    let killed = kill_node_mid_build(&conf, &env.cache(), "node2");
    sbatch_finish(&env, job);
    assert!(!killed.is_empty());

    // The survivors took the dead node's shards over and one of them published.
    let survivors = [json_file(&env.path("prepare-node1.json")), json_file(&env.path("prepare-node3.json"))];
    assert_eq!(survivors.iter().filter(|r| r["built"] == true).count(), 1, "{survivors:?}");
    let logs: String = ["node1", "node3"]
        .iter()
        .map(|node| std::fs::read_to_string(env.path(&format!("prepare-{node}.err"))).unwrap())
        .collect();
    assert!(logs.contains("taking over from a dead owner"), "no takeover in the survivors' logs:\n{logs}");
    let entry = only_entry(&env.cache());
    assert!(entry_data_files(&entry) == one_process_build(&env, &spec), "byte-identical entry");

    // The dead node's build lease is still there; once stale it does not block gc.
    let short_fingerprint = entry.file_name().unwrap().to_str().unwrap().to_string();
    let leases_dir = env.cache().join("leases").join(&short_fingerprint);
    let dead_lease = std::fs::read_dir(&leases_dir)
        .unwrap()
        .flatten()
        .map(|l| l.path())
        .find(|lease| lease.file_name().unwrap().to_string_lossy().starts_with("node2."));
    let dead_lease = dead_lease.expect("the killed node left its build lease");
    let stale = |lease: &Path| std::fs::metadata(lease).unwrap().modified().unwrap().elapsed().unwrap();
    while stale(&dead_lease) < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let gc = |vars: &[(&str, &str)]| -> serde_json::Value {
        serde_json::from_str(&run_ok(srun_on("node1", &env, &conf, &["ferry", "gc", "--keep", "0", "--json"], vars)))
            .unwrap()
    };
    // With the default stale age the lease (a few seconds old) still protects the entry...
    let kept = gc(&[]);
    assert!(entry.exists(), "{kept}");
    assert_eq!(kept["kept_in_use"].as_array().map(Vec::len), Some(1), "{kept}");
    // ...and past the short stale age the job ran with, it no longer does.
    let removed = gc(&short);
    assert!(!entry.exists(), "the dead node's lease blocked gc: {removed}");
}

/// Starts `ferry stage` on `node` and freezes its ferry processes (SIGSTOP) while it
/// holds its stage lease; None when the staging finished before it could be caught.
fn stage_frozen_mid_copy(
    env: &TestEnv,
    conf: &Path,
    node: &str,
    spec: &Path,
    leases: &Path,
) -> Option<(Child, Vec<u32>)> {
    let namespace = namespace(conf, node);
    let mut child = srun_on(node, env, conf, &["ferry", "stage", spec.to_str().unwrap()], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stage_lease = || {
        std::fs::read_dir(leases).into_iter().flatten().flatten().any(|lease| {
            let name = lease.file_name().to_string_lossy().into_owned();
            name.starts_with(&format!("{node}.")) && name.contains(".stage.")
        })
    };
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "stage on {node} failed: {}", describe(&child.wait_with_output().unwrap()));
            return None;
        }
        if stage_lease() {
            let pids = ferry_processes(&namespace);
            signal(&pids, "STOP");
            if stage_lease() && !pids.is_empty() {
                return Some((child, pids));
            }
            signal(&pids, "CONT");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn gc_on_one_node_keeps_the_entry_another_node_is_staging() {
    let Some(conf) = cluster() else { return };
    let env = scratch_env(&conf);
    env.shards("data", "train", 6, 3000, 14);
    let spec = env.write("spec.toml", gpt2_spec("gc-while-staging", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    env.prepare(&spec, &[]);
    let entry = only_entry(&env.cache());
    let leases = env.cache().join("leases").join(entry.file_name().unwrap());

    let (stage, frozen) = (0..20)
        .find_map(|_| stage_frozen_mid_copy(&env, &conf, "node2", &spec, &leases))
        .expect("staging on node2 always finished before it could be caught mid-copy");
    let gc = || -> serde_json::Value {
        serde_json::from_str(&run_ok(srun_on("node1", &env, &conf, &["ferry", "gc", "--keep", "0", "--json"], &[])))
            .unwrap()
    };
    let report = gc();
    signal(&frozen, "CONT");
    assert!(entry.exists(), "gc on node1 removed the entry node2 is staging: {report}");
    assert_eq!(report["kept_in_use"].as_array().map(Vec::len), Some(1), "{report}");
    let output = stage.wait_with_output().unwrap();
    assert!(output.status.success(), "stage on node2: {}", describe(&output));

    // Once nobody uses it, the same gc removes it.
    let report = gc();
    assert!(!entry.exists(), "{report}");
}
