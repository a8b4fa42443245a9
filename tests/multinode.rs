//! On a real Slurm cluster of three nodes on one machine (scripts/slurm/multinode.sh,
//! started by scripts/test.sh as root): each node its own host name, network and
//! mount namespace, its own FUSE client of the GlusterFS volume that is `$SCRATCH`
//! and holds the cache, and its own disk at the `SLURM_TMPDIR` path every node shares.
//! Staging lands on every node's own disk; one build splits across hosts; a node
//! killed mid-build is taken over once its heartbeat is stale; `gc` on one node
//! keeps an entry another node is staging.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

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
    assert!(output.status.success(), "job failed: {}\njob output:\n{log}{}", describe(&output), task_errors(env));
    log
}

/// Every `*.err` file the job's tasks wrote, for a failure message.
fn task_errors(env: &TestEnv) -> String {
    let mut files: Vec<_> = std::fs::read_dir(env.dir.path()).unwrap().flatten().map(|f| f.path()).collect();
    files.sort();
    files
        .iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "err"))
        .map(|path| format!("\n{}:\n{}", path.display(), std::fs::read_to_string(path).unwrap_or_default()))
        .collect()
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

/// The only view of a cache (the entry a trainer loads), beside the one token store it was made from.
fn only_entry(cache: &Path) -> PathBuf {
    let entries: Vec<PathBuf> =
        std::fs::read_dir(cache.join("entries")).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    let (stores, views): (Vec<PathBuf>, Vec<PathBuf>) =
        entries.into_iter().partition(|entry| json_file(&entry.join("manifest.json"))["kind"] == "tokens");
    assert_eq!((views.len(), stores.len()), (1, 1), "one view and its token store: {views:?} {stores:?}");
    views[0].clone()
}

/// The short fingerprint of the token store a view was made from.
fn token_store_of(view: &Path) -> String {
    json_file(&view.join("manifest.json"))["token_store"]["fingerprint"].as_str().unwrap()[..16].to_string()
}

/// The same spec built by one process into a cache of its own: the reference bytes.
fn one_process_build(env: &TestEnv, spec: &Path) -> Vec<(String, Vec<u8>)> {
    let solo = env.path("solo-cache");
    let output = env.ferry().args(["prepare", spec.to_str().unwrap()]).env("FERRY_CACHE", &solo).output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    entry_data_files(&only_entry(&solo))
}

const SEQ_64: &str = "[sequence]\nseq_len = 64\n";

/// A test tree in `$SCRATCH`: `shards` shards of `documents` documents in `data/`,
/// and `spec.toml`, a GPT-2 spec named `name` over them. Returns the tree and the spec.
fn corpus_in_scratch(conf: &Path, name: &str, shards: usize, documents: usize, seed: u64) -> (TestEnv, PathBuf) {
    let env = scratch_env(conf);
    env.shards("data", "train", shards, documents, seed);
    let spec = env.write("spec.toml", gpt2_spec(name, "data/*.jsonl.zst", SEQ_64));
    (env, spec)
}

/// `corpus_in_scratch`, prepared: also the entry's directory.
fn prepared_in_scratch(
    conf: &Path,
    name: &str,
    shards: usize,
    documents: usize,
    seed: u64,
) -> (TestEnv, PathBuf, PathBuf) {
    let (env, spec) = corpus_in_scratch(conf, name, shards, documents, seed);
    env.prepare(&spec, &[]);
    let entry = only_entry(&env.cache());
    (env, spec, entry)
}

/// The sizes of an entry's files, as its manifest lists them.
fn manifest_sizes(entry: &Path) -> Vec<u64> {
    let manifest = json_file(&entry.join("manifest.json"));
    manifest["files"].as_array().unwrap().iter().map(|file| file["size"].as_u64().unwrap()).collect()
}

#[test]
fn every_node_stages_into_its_own_slurm_tmpdir_and_trains_from_it() {
    let Some(conf) = cluster() else { return };
    if python().is_none() {
        return;
    }
    let (env, spec) = corpus_in_scratch(&conf, "three-nodes", 3, 200, 11);
    let script = format!(
        "ferry prepare {spec} --json > prepare.json\n\
         srun --ntasks-per-node=1 --output=stage-%N.out ferry stage {spec}\n\
         HF_DATASETS_OFFLINE=1 srun --ntasks-per-node=1 --output=train-%N.json \"$PYTHON\" {trainer} --data-name three-nodes\n\
         srun --ntasks-per-node=1 --output=status-%N.json ferry status --json\n\
         srun --ntasks-per-node=1 sh -c 'hostname > \"$SLURM_TMPDIR/host\"'\n\
         srun --ntasks-per-node=1 --output=host-%N.txt sh -c 'cat \"$SLURM_TMPDIR/host\"'\n",
        spec = spec.display(),
        trainer = repo().join("scripts/train_example.py").display()
    );
    sbatch(&env, &conf, &["--nodes=3"], &script, &[]);
    assert_eq!(json_file(&env.path("prepare.json"))["built"], true);

    let localscratch = conf.parent().unwrap().join("localscratch");
    for node in ["node1", "node2", "node3"] {
        // SLURM_TMPDIR is one path on every node, and each node's is its own disk.
        let host = std::fs::read_to_string(env.path(&format!("host-{node}.txt"))).unwrap();
        assert_eq!(host.trim(), node, "{node} read another node's SLURM_TMPDIR");
        // The trainer on this node read only files under this node's SLURM_TMPDIR.
        let trainer = json_file(&env.path(&format!("train-{node}.json")));
        let tmpdir = trainer["slurm_tmpdir"].as_str().unwrap();
        assert_eq!(Path::new(tmpdir).parent(), Some(localscratch.as_path()), "{node}: {trainer}");
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
    // Shards long enough that the tasks' start-up skew cannot decide the split.
    let (env, spec) = corpus_in_scratch(&conf, "split-hosts", 12, 1500, 12);
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

#[test]
fn prepares_racing_into_a_new_cache_on_every_node_all_succeed() {
    let Some(conf) = cluster() else { return };
    // Round after round, six processes on three clients create the same new cache
    // directories at once: a client whose mkdir lost the race can answer ESTALE or
    // not-found for a moment inside the directory another client made. A word-level
    // tokenizer keeps each round to the race itself.
    const ROUNDS: usize = 12;
    let env = scratch_env(&conf);
    env.shards("data", "train", 2, 20, 14);
    env.write("tokenizer.json", WORD_LEVEL_TOKENIZER);
    let spec = env.write(
        "spec.toml",
        "name = \"new-cache\"\n[splits]\ntrain = [\"data/*.jsonl.zst\"]\n[tokenizer]\npath = \"tokenizer.json\"\nensure_bos_eos = false\n",
    );
    let script = format!(
        "for round in $(seq 1 {ROUNDS}); do\n  FERRY_CACHE=$PWD/cache-$round srun --output=/dev/null --error=round-$round-%t.err ferry prepare {}\ndone\n",
        spec.display()
    );
    sbatch(&env, &conf, &["--nodes=3", "--ntasks=6", "--cpus-per-task=1"], &script, &[]);
    let entries: Vec<PathBuf> = (1..=ROUNDS).map(|round| only_entry(&env.path(&format!("cache-{round}")))).collect();
    assert!(entries.iter().all(|entry| entry.file_name() == entries[0].file_name()), "{entries:?}");
}

/// A tokenizer that loads in a moment: every word it does not know is `[UNK]`.
const WORD_LEVEL_TOKENIZER: &str = r#"{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
"normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
"model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "the": 1, "a": 2, "of": 3}, "unk_token": "[UNK]"}}"#;

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
    let (env, spec) = corpus_in_scratch(&conf, "node-dies", 9, 2500, 13);
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

    // The dead node's build lease on the token store is still there; once stale it does not block gc.
    let store = env.cache().join("entries").join(token_store_of(&entry));
    let leases_dir = env.cache().join("leases").join(token_store_of(&entry));
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
    // With the default stale age the lease (a few seconds old) still protects the token
    // store (the view, which nobody holds, goes)...
    let kept = gc(&[]);
    assert!(store.exists() && !entry.exists(), "{kept}");
    assert_eq!(kept["kept_in_use"].as_array().map(Vec::len), Some(1), "{kept}");
    // ...and past the short stale age the job ran with, it no longer does.
    let removed = gc(&short);
    assert!(!store.exists(), "the dead node's lease blocked gc: {removed}");
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
    let (env, spec, entry) = prepared_in_scratch(&conf, "gc-while-staging", 6, 3000, 14);
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

/// Bytes the volume's brick has served to readers since `clear_brick_reads`, from
/// GlusterFS's own per-brick counters (`volume profile`).
fn brick_bytes_read(conf: &Path) -> u64 {
    let info = gluster(conf, &["info", "cumulative"]);
    let line = info.lines().find(|line| line.trim_start().starts_with("Data Read:"));
    let line = line.unwrap_or_else(|| panic!("no Data Read in the volume profile:\n{info}"));
    line.split_whitespace().nth(2).and_then(|bytes| bytes.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

fn clear_brick_reads(conf: &Path) {
    gluster(conf, &["info", "clear"]);
}

/// `gluster volume profile VOLUME ARGS` against the cluster's own glusterd.
fn gluster(conf: &Path, args: &[&str]) -> String {
    let dir = conf.parent().unwrap();
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap().trim().to_string();
    let socket = format!("--glusterd-sock={}", read("gluster-socket"));
    let mut command = Command::new("gluster");
    command.args(["--mode=script", &socket, "volume", "profile", &read("gluster-volume")]).args(args);
    run_ok(command)
}

#[test]
fn broadcast_reads_the_shared_copy_once_and_every_node_lands_it() {
    let Some(conf) = cluster() else { return };
    let (env, spec, entry) = prepared_in_scratch(&conf, "broadcast", 6, 3000, 15);
    let bytes: u64 = manifest_sizes(&entry).iter().sum();
    // On node2, one large file arrives damaged (same size, one byte changed): with
    // --verify it is caught and that one file comes from the cache instead.
    let script = format!(
        "ferry stage {spec} --broadcast --json > broadcast.json\n\
         srun --nodes=1 --ntasks=1 --nodelist=node2 sh -c 'f=$(ls \"$SLURM_TMPDIR\"/.ferry-incoming.* | grep -v pack | head -n 1) && printf X | dd of=\"$f\" bs=1 seek=1000 conv=notrunc status=none'\n\
         srun --ntasks-per-node=1 --output=stage-%N.json --error=stage-%N.err ferry stage {spec} --verify --json\n\
         srun --ntasks-per-node=1 --output=verify-%N.json ferry verify --dest \"$SLURM_TMPDIR/ferry\" --json\n\
         srun --ntasks-per-node=1 --output=left-%N.txt sh -c 'ls -A \"$SLURM_TMPDIR\"'\n",
        spec = spec.display()
    );
    clear_brick_reads(&conf);
    // Data files travel whole, one sbcast call each; the small files of the entry in one pack.
    sbatch(&env, &conf, &["--nodes=3"], &script, &[("FERRY_BROADCAST_PACK_BELOW", "1MiB")]);
    let read = brick_bytes_read(&conf);
    // Three nodes staged, and the shared copy was read about once (plus the manifest and
    // metadata), and once more for node2's damaged file.
    let largest = manifest_sizes(&entry).into_iter().max().unwrap();
    assert!(
        read <= bytes + bytes / 10 + largest,
        "the brick served {read} bytes for a {bytes}-byte entry staged on 3 nodes"
    );

    let sent = json_file(&env.path("broadcast.json"));
    let files = sent["files"].as_u64().unwrap();
    let packed = sent["files_packed"].as_u64().unwrap();
    assert!(packed > 0 && packed < files, "{sent}");
    assert_eq!(
        sent["sbcast_calls"].as_u64().unwrap(),
        files - packed + 1,
        "one call per large file and one pack: {sent}"
    );
    for node in ["node1", "node2", "node3"] {
        let staged = json_file(&env.path(&format!("stage-{node}.json")));
        assert_eq!(staged["phase"], "done", "{node}: {staged}");
        let received = if node == "node2" { files - 1 } else { files };
        assert_eq!(staged["files_received"].as_u64(), Some(received), "{node}: {staged}");
        let verified = json_file(&env.path(&format!("verify-{node}.json")));
        assert_eq!(verified[0]["problems"].as_array().map(Vec::len), Some(0), "{node}: {verified}");
        let left = std::fs::read_to_string(env.path(&format!("left-{node}.txt"))).unwrap();
        assert!(!left.contains(".ferry-incoming"), "{node} kept what arrived after landing it:\n{left}");
    }
}

/// `ferry COMMAND... --json` on `node`, in a job of its own, started now.
fn spawn_on(node: &str, env: &TestEnv, conf: &Path, args: &[&str]) -> Child {
    let mut argv = vec!["ferry"];
    argv.extend_from_slice(args);
    srun_on(node, env, conf, &argv, &[]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn finish_json(node: &str, child: Child) -> serde_json::Value {
    finish_json_noting(node, child, "")
}

/// `finish_json`, with `note` (what else went on meanwhile) added to a failure's message.
fn finish_json_noting(node: &str, child: Child, note: &str) -> serde_json::Value {
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "on {node}: {}{note}", describe(&output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("on {node}: {e}: {}", describe(&output)))
}

#[test]
fn racing_prepares_of_one_spec_on_every_node_build_it_once() {
    let Some(conf) = cluster() else { return };
    let (env, spec) = corpus_in_scratch(&conf, "race-nodes", 9, 1500, 16);
    let spec_arg = spec.to_str().unwrap();
    // Three jobs submitted at once, one per node: independent prepares, not the tasks of one step.
    let racers: Vec<(&str, Child)> = ["node1", "node2", "node3"]
        .map(|node| (node, spawn_on(node, &env, &conf, &["prepare", spec_arg, "--json"])))
        .into();
    let results: Vec<serde_json::Value> = racers.into_iter().map(|(node, child)| finish_json(node, child)).collect();

    assert_eq!(results.iter().filter(|r| r["built"] == true).count(), 1, "one publisher: {results:?}");
    assert!(results.iter().all(|r| r["fingerprint"] == results[0]["fingerprint"]), "{results:?}");
    let tokenized: u64 = results.iter().map(|r| r["shards_tokenized_here"].as_u64().unwrap()).sum();
    assert_eq!(tokenized, 9, "each shard tokenized once: {results:?}");
    assert!(entry_data_files(&only_entry(&env.cache())) == one_process_build(&env, &spec), "byte-identical entry");
}

/// Every entry visible in the cache is whole: its manifest readable and every file it
/// lists there with its size.
fn assert_published_entries_whole(cache: &Path) {
    for entry in std::fs::read_dir(cache.join("entries")).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("manifest.json")) else {
            // Gone between the listing and the read (gc's rename into the trash) is fine.
            assert!(!entry.path().exists(), "{} is visible without its manifest", entry.path().display());
            continue;
        };
        let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
        for file in manifest["files"].as_array().unwrap() {
            let path = entry.path().join(file["path"].as_str().unwrap());
            let size = std::fs::metadata(&path).map(|m| m.len()).ok();
            assert!(
                size == file["size"].as_u64() || !entry.path().exists(),
                "{} is visible with {} missing or short",
                entry.path().display(),
                path.display()
            );
        }
    }
}

#[test]
fn gc_racing_a_prepare_on_another_node_deletes_nothing_in_use() {
    let Some(conf) = cluster() else { return };
    let env = scratch_env(&conf);
    env.shards("old", "train", 2, 200, 17);
    env.shards("new", "train", 9, 2500, 18);
    let old_spec = env.write("old.toml", gpt2_spec("old", "old/*.jsonl.zst", SEQ_64));
    let new_spec = env.write("new.toml", gpt2_spec("new", "new/*.jsonl.zst", SEQ_64));
    env.prepare(&old_spec, &[]);
    let old_entry = only_entry(&env.cache());

    // gc on node1 keeps only the most recently used entry, over and over while node2 builds.
    let mut prepare = spawn_on("node2", &env, &conf, &["prepare", new_spec.to_str().unwrap(), "--json"]);
    let mut reports = Vec::new();
    loop {
        let finished = prepare.try_wait().unwrap().is_some();
        reports.push(finish_json("node1", spawn_on("node1", &env, &conf, &["gc", "--keep", "1", "--json"])));
        assert_published_entries_whole(&env.cache());
        if finished {
            break;
        }
    }
    let built = finish_json_noting("node2", prepare, &format!("\ngc meanwhile: {reports:?}"));
    assert_eq!(built["built"], true, "{built}");
    assert!(reports.len() > 1, "the build ended before gc could race it: {reports:?}");

    // gc removed the old entries, never the build in progress or the view it published;
    // its token store, once the view was made from it, is the policy's to evict.
    let short = built["fingerprint"].as_str().unwrap()[..16].to_string();
    let new_store = built["token_store"]["fingerprint"].as_str().unwrap()[..16].to_string();
    let removed: Vec<&serde_json::Value> = reports.iter().flat_map(|r| r["removed"].as_array().unwrap()).collect();
    for item in &removed {
        let kind = item["kind"].as_str().unwrap();
        let old = item["name"] == "old" && ["entry", "link"].contains(&kind);
        let new_store_after_its_view = kind == "entry" && item["path"].as_str().unwrap().ends_with(&new_store);
        assert!(old || new_store_after_its_view, "{removed:?}");
    }
    assert!(!old_entry.exists(), "the unused entry outlived gc: {reports:?}");
    let verified = env.json(&["verify", &short, "--json"]);
    assert_eq!(verified[0]["problems"].as_array().map(Vec::len), Some(0), "{verified}");
}

#[test]
fn a_cache_reached_by_another_path_on_one_node_keeps_its_fingerprint() {
    let Some(conf) = cluster() else { return };
    let (env, spec) = corpus_in_scratch(&conf, "two-paths", 3, 300, 19);
    let first = finish_json("node1", spawn_on("node1", &env, &conf, &["prepare", spec.to_str().unwrap(), "--json"]));
    assert_eq!(first["built"], true, "{first}");

    // node2 mounts the same volume at another path, as sites mount $SCRATCH at
    // different places, and prepares and stages through it.
    let scratch = conf.parent().unwrap().join("scratch");
    let tree = env.dir.path().strip_prefix(&scratch).unwrap();
    let script = format!(
        "other=\"$SLURM_TMPDIR/other-mount\" && mkdir -p \"$other\" && mount --bind {scratch} \"$other\" && \
         export FERRY_CACHE=\"$other/{tree}/cache\" && \
         ferry prepare \"$other/{tree}/spec.toml\" --json > \"$other/{tree}/second.json\" && \
         ferry stage \"$other/{tree}/spec.toml\" --json > \"$other/{tree}/stage.json\"",
        scratch = scratch.display(),
        tree = tree.display()
    );
    run_ok(srun_on(
        "node2",
        &env,
        &conf,
        &["unshare", "--mount", "--propagation", "private", "sh", "-c", &script],
        &[],
    ));
    let second = json_file(&env.path("second.json"));
    assert_eq!(second["fingerprint"], first["fingerprint"], "{second}");
    assert_eq!(second["built"], false, "the entry built through the other path was not found: {second}");
    assert_eq!(json_file(&env.path("stage.json"))["phase"], "done");
    only_entry(&env.cache());
}

/// Regular files under `dir`, recursively.
fn regular_files(dir: &Path) -> usize {
    walkdir::WalkDir::new(dir).into_iter().flatten().filter(|e| e.file_type().is_file()).count()
}

/// The pid of a child of process `parent`, once it has one.
fn child_of(parent: u32) -> Option<Pid> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|process| {
        let stat = std::fs::read_to_string(process.path().join("stat")).ok()?;
        // The command name, in parentheses, may hold spaces: the state and the parent follow its closing one.
        let mut fields = stat.rsplit_once(") ")?.1.split(' ');
        let ppid: u32 = fields.nth(1)?.parse().ok()?;
        (ppid == parent).then(|| process.file_name().to_str()?.parse().ok().and_then(Pid::from_raw)).flatten()
    })
}

#[test]
fn a_stage_killed_on_one_node_resumes_and_copies_only_what_is_missing() {
    let Some(conf) = cluster() else { return };
    assert!(
        Command::new("strace").arg("-V").output().is_ok_and(|out| out.status.success()),
        "this test needs strace (Debian package strace), as scripts/test.sh installs it"
    );
    let (env, spec, entry) = prepared_in_scratch(&conf, "killed-stage", 12, 2000, 20);
    let total = manifest_sizes(&entry).len() + 1;
    // One job on node2: a stage the test kills part-way, then the same stage again, then a
    // verifying one. The first stage runs under strace, which holds every landing (a link or a
    // rename) for a second before the stage goes on, so the test sees some but not all files
    // landed however fast the copy or busy the machine, and kills the stage then.
    let landings = "linkat,rename,renameat,renameat2";
    let script = format!(
        "sh -c 'echo $$ $SLURM_JOB_ID > first.pid && exec strace -f -qq -o /dev/null -e trace={landings} \
         -e inject={landings}:delay_exit=1000000 ferry stage {spec} --jobs 1 --json > first.json' \
         || echo $? > first.exit\n\
         ferry stage {spec} --json > second.json\n\
         ferry stage {spec} --verify --json > third.json\n",
        spec = spec.display()
    );
    let job = sbatch_spawn(&env, &conf, &["--nodes=1", "--nodelist=node2"], &script, &[]);
    // The job may wait for node2 while other tests' jobs hold it.
    let started = Instant::now();
    let (tracer, job_id) = loop {
        assert!(started.elapsed() < Duration::from_secs(600), "the first stage's shell never wrote its pid");
        let text = std::fs::read_to_string(env.path("first.pid")).unwrap_or_default();
        if let Some((pid, job_id)) = text.trim().split_once(' ').and_then(|(p, j)| Some((p.parse::<u32>().ok()?, j))) {
            break (pid, job_id.to_string());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The job's destination, seen from the machine: node2's disk under the cluster's directory.
    let staged = conf.parent().unwrap().join(format!("nodes/node2/tmp/job_{job_id}/ferry/entries"));
    let staged = staged.join(entry.file_name().unwrap());
    let deadline = Instant::now() + Duration::from_secs(120);
    let landed_at_kill = loop {
        let landed = if staged.is_dir() { regular_files(&staged) } else { 0 };
        assert!(landed < total, "the first stage landed all {total} files before the test could kill it");
        if landed > 0 {
            let stage = child_of(tracer).expect("the first stage runs under strace");
            kill_process(stage, Signal::KILL).unwrap();
            break landed;
        }
        assert!(Instant::now() < deadline, "no file of the first stage landed in {staged:?} within 120 s");
        std::thread::sleep(Duration::from_millis(10));
    };
    sbatch_finish(&env, job);

    assert!(env.path("first.exit").exists(), "the first stage was not killed");
    let second = json_file(&env.path("second.json"));
    assert_eq!(second["phase"], "done", "{second}");
    let skipped = second["files_skipped"].as_u64().unwrap() as usize;
    assert!(skipped >= landed_at_kill, "{landed_at_kill} files had landed, the resume skipped {skipped}: {second}");
    assert_eq!(skipped + second["files_copied"].as_u64().unwrap() as usize, total, "{second}");
    let third = json_file(&env.path("third.json"));
    assert_eq!(
        (third["files_copied"].as_u64(), third["files_skipped"].as_u64()),
        (Some(0), Some(total as u64)),
        "every file whole after the resume: {third}"
    );
}
