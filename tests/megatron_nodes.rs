//! Megatron on node-local copies: two "nodes" (two mount namespaces, each seeing its
//! own staged copy at the same path, as `$SLURM_TMPDIR/ferry` is on each node of a
//! job) run megatron-core's dataset builder as two ranks of one job. Rank 0 builds
//! the index cache, rank 1 loads it: through the links `ferry stage` makes to one
//! folder in the cache, rank 1 finds it; without them it fails as Megatron-LM #907
//! reports, which the test shows too.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestEnv, gpt2_spec, python_script};

/// Mount namespaces need root (and `unshare`); else the test says it skipped.
fn namespaces() -> bool {
    let works = Command::new("unshare").args(["--mount", "true"]).status().is_ok_and(|status| status.success());
    if !works {
        eprintln!("SKIPPED: no mount namespaces here (root and unshare are needed to give two copies one path)");
    }
    works
}

/// A rank of the job in its own mount namespace, with `copy` mounted at `at`.
fn rank(python: &Path, copy: &Path, at: &Path, prefix: &Path, rank: u32, port: u16) -> Child {
    let script = "mount --bind \"$1\" \"$2\" && shift 2 && exec \"$@\"";
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
        .args([copy, at, python, &python_script("megatron_rank.py"), prefix])
        .args([rank.to_string(), port.to_string(), "200".into(), "32".into()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Both ranks' outcome: (succeeded, stdout, stderr) each, killed after two minutes.
fn job(python: &Path, copies: [&Path; 2], at: &Path, prefix: &Path) -> Vec<(bool, String, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut ranks: Vec<Child> =
        (0..2).map(|index| rank(python, copies[index], at, prefix, index as u32, port)).collect();
    let started = Instant::now();
    while ranks.iter_mut().any(|child| child.try_wait().unwrap().is_none())
        && started.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    ranks
        .into_iter()
        .map(|mut child| {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            (output.status.success(), text(&output.stdout), text(&output.stderr))
        })
        .collect()
}

#[test]
fn two_nodes_on_their_own_copies_share_megatrons_index_cache_through_the_staged_links() {
    let Some(python) =
        common::provided("FERRY_TEST_MEGATRON_PYTHON", "FERRY_REQUIRE_MEGATRON", "Python with megatron-core")
    else {
        return;
    };
    if !namespaces() {
        return;
    }
    let env = TestEnv::new();
    env.shards("data", "train", 2, 60, 13);
    let view = "[sequence]\nseq_len = 64\n[output]\nformats = [\"megatron\"]\n";
    let spec = env.write("m.toml", gpt2_spec("m", "data/*.jsonl.zst", view));
    let short = env.prepare(&spec, &[])["fingerprint"].as_str().unwrap()[..16].to_string();
    let copies: Vec<PathBuf> = ["node-a/ferry", "node-b/ferry"].iter().map(|dest| env.path(dest)).collect();
    for copy in &copies {
        env.run_ok(&["stage", spec.to_str().unwrap(), "--dest", copy.to_str().unwrap()]);
    }
    let at = env.path("slurm-tmpdir/ferry");
    std::fs::create_dir_all(&at).unwrap();
    let prefix = at.join("entries").join(&short).join("megatron/train_text_document");

    let ranks = job(&python, [&copies[0], &copies[1]], &at, &prefix);
    for (index, (passed, stdout, stderr)) in ranks.iter().enumerate() {
        assert!(passed, "rank {index} failed:\n{stdout}\n{stderr}");
    }
    let digest = |stdout: &str| serde_json::from_str::<serde_json::Value>(stdout.trim()).unwrap()["digest"].clone();
    assert_eq!(digest(&ranks[0].1), digest(&ranks[1].1), "both ranks read the same samples");
    let uid = rustix::process::geteuid().as_raw().to_string();
    let shared = env.cache().join("megatron-cache").join(uid).join(&short).join("megatron/train_text_document");
    let indexes = std::fs::read_dir(shared.join("cache/GPTDataset_indices")).unwrap().count();
    assert!(indexes >= 4, "the indexes rank 0 built are in the cache's shared folder");

    // Without the links, rank 1 looks beside its own copy, finds nothing, and fails.
    let link = copies[1].join("entries").join(&short).join("megatron/train_text_document");
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&shared).unwrap();
    let ranks = job(&python, [&copies[0], &copies[1]], &at, &prefix);
    let (passed, _, stderr) = &ranks[1];
    assert!(!passed && stderr.contains("No such file"), "rank 1 without the link: {stderr}");
}
