//! `ferry stage` and `ferry wait`: mirror, copy, resume, races, space, drop-in.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{SmallEntry, TestEnv, describe, gpt2_spec, python, read_manifest};

/// Prepares a small entry (several Arrow files) and returns (spec path, entry path).
fn prepared_entry(env: &TestEnv, name: &str, seed: u64) -> (PathBuf, PathBuf) {
    let dir = format!("data-{name}");
    let entry = SmallEntry { name, dir: &dir, shards: 3, documents: 80, seq_len: 64, seed };
    let (spec, prepared) = env.prepare_entry(&entry);
    (spec, PathBuf::from(prepared["entry"].as_str().unwrap()))
}

fn is_regular(path: &Path) -> bool {
    path.symlink_metadata().is_ok_and(|m| m.file_type().is_file())
}

#[test]
fn staged_entry_is_local_regular_files_and_loads_in_datasets() {
    let env = TestEnv::new();
    let (_, other_entry) = prepared_entry(&env, "other", 1);
    let (spec, entry) = prepared_entry(&env, "active", 2);
    let dest = env.path("node/ferry");
    let output = env.run_ok(&["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap(), "--verify", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&output).unwrap();
    assert_eq!(report["phase"], "done");
    let short = entry.file_name().unwrap().to_str().unwrap();
    let local = dest.join("entries").join(short);
    for file in read_manifest(&entry)["files"].as_array().unwrap() {
        let path = local.join(file["path"].as_str().unwrap());
        assert!(is_regular(&path), "{} is a local file", path.display());
        assert_eq!(path.metadata().unwrap().len(), file["size"].as_u64().unwrap());
        let hash = blake3::hash(&std::fs::read(&path).unwrap()).to_hex().to_string();
        assert_eq!(hash, file["blake3"].as_str().unwrap());
    }
    assert!(is_regular(&local.join("manifest.json")));
    // Other entries are reachable through one directory symlink each.
    let other = dest.join("entries").join(other_entry.file_name().unwrap());
    assert!(other.symlink_metadata().unwrap().file_type().is_symlink());
    assert!(other.join("dataset_dict.json").is_file());
    // by-name resolves inside the destination; no lock, lease or build is mirrored.
    assert_eq!(std::fs::read_link(dest.join("by-name/active")).unwrap(), Path::new("../entries").join(short));
    for absent in ["building", "leases", "memo", "locks"] {
        assert!(!dest.join(absent).exists(), "{absent} is not mirrored");
    }
    let Some(python) = python() else { return };
    let by_name = dest.join("by-name/active");
    let script = format!(
        "import datasets, json; d = datasets.load_from_disk({by_name:?}); print(json.dumps([d['train'].num_rows, d['train'].cache_files[0]['filename']]))"
    );
    let output = Command::new(python).args(["-c", &script]).env("HF_DATASETS_OFFLINE", "1").output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let (rows, file): (u64, String) = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rows, read_manifest(&entry)["splits"]["train"]["rows"].as_u64().unwrap());
    assert!(Path::new(&file).starts_with(&dest), "datasets reads from the destination: {file}");
}

#[test]
fn rerun_copies_nothing_and_four_racing_stagers_copy_every_byte_once() {
    let env = TestEnv::new();
    let (spec, entry) = prepared_entry(&env, "race", 3);
    let dest = env.path("node/ferry");
    let total: u64 =
        read_manifest(&entry)["files"].as_array().unwrap().iter().map(|f| f["size"].as_u64().unwrap()).sum::<u64>()
            + entry.join("manifest.json").metadata().unwrap().len();
    let children: Vec<_> = (0..4)
        .map(|_| {
            env.ferry()
                .args(["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap(), "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let reports: Vec<serde_json::Value> = children.into_iter().map(common::finished_json).collect();
    let copied: u64 = reports.iter().map(|r| r["bytes_copied"].as_u64().unwrap()).sum();
    assert_eq!(copied, total, "every byte copied exactly once across the 4 stagers: {reports:?}");
    assert_eq!(reports.iter().filter(|r| r["files_copied"].as_u64().unwrap() > 0).count(), 1, "one stager copied");
    let again: serde_json::Value = serde_json::from_str(&env.run_ok(&[
        "stage",
        spec.to_str().unwrap(),
        "--dest",
        dest.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    assert_eq!(again["files_copied"], 0);
    assert_eq!(again["bytes_copied"], 0);
}

/// A Hugging Face cache-like source tree for drop-in mode: `count` files of `size` bytes.
fn source_tree(env: &TestEnv, count: usize, size: usize) -> (PathBuf, Vec<String>) {
    let src = env.path("hf-cache");
    let mut listed = Vec::new();
    for i in 0..count {
        let relative = format!("pile/default/0.0.0/abc/cache-{i:04}.arrow");
        let bytes: Vec<u8> = (0..size).map(|b| ((b * 31 + i) % 251) as u8).collect();
        env.write(&format!("hf-cache/{relative}"), bytes);
        listed.push(relative);
    }
    env.write("hf-cache/pile/default/0.0.0/abc/dataset_info.json", "{}");
    env.write("hf-cache/pile/default/0.0.0/abc_builder.lock", "");
    env.write("hf-cache/other/unrelated.arrow", "not listed");
    (src, listed)
}

/// `ferry stage --src SRC --files-from LIST --dest DEST` and extra arguments.
fn drop_in(env: &TestEnv, src: &Path, list: &str, dest: &Path, extra: &[&str]) -> std::process::Output {
    let mut args =
        vec!["stage", "--src", src.to_str().unwrap(), "--files-from", list, "--dest", dest.to_str().unwrap()];
    args.extend_from_slice(extra);
    env.run(&args)
}

fn regular_files_with_inodes(dir: &Path) -> BTreeMap<PathBuf, u64> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file() && !e.path().starts_with(dir.join(".ferry")))
        .filter(|e| !e.file_name().to_string_lossy().contains(".ferry-tmp-"))
        .map(|e| (e.path().to_path_buf(), e.metadata().unwrap().ino()))
        .collect()
}

#[test]
fn killed_stage_resumes_without_copying_finished_files_again() {
    let env = TestEnv::new();
    let dest = env.path("node");
    // Grow the data until the kill lands part-way (copies from the page cache are fast).
    for (attempt, size) in [(0, 4 << 20), (1, 16 << 20)] {
        let (src, listed) = source_tree(&env, 60, size);
        env.write("list.txt", listed.join("\n"));
        let _ = std::fs::remove_dir_all(&dest);
        let mut child = env
            .ferry()
            .args([
                "stage",
                "--src",
                src.to_str().unwrap(),
                "--files-from",
                "list.txt",
                "--dest",
                dest.to_str().unwrap(),
                "--jobs",
                "1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let copied_dir = dest.join("pile/default/0.0.0/abc");
        let deadline = Instant::now() + Duration::from_secs(30);
        while regular_files_with_inodes(&copied_dir).len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let before = regular_files_with_inodes(&copied_dir);
        let arrow_before = before.keys().filter(|p| p.extension().is_some_and(|e| e == "arrow")).count();
        if arrow_before >= listed.len() {
            assert!(attempt == 0, "the copy finished before the kill even with large files");
            continue;
        }
        assert!(arrow_before >= 2, "killed part-way: {arrow_before} files done");
        let rerun = drop_in(&env, &src, "list.txt", &dest, &["--json"]);
        assert!(rerun.status.success(), "{}", describe(&rerun));
        let output: serde_json::Value = serde_json::from_slice(&rerun.stdout).unwrap();
        assert_eq!(output["phase"], "done");
        assert_eq!(
            output["files_copied"].as_u64().unwrap(),
            (listed.len() - arrow_before) as u64,
            "only unfinished files copied"
        );
        let after = regular_files_with_inodes(&copied_dir);
        for (path, inode) in &before {
            assert_eq!(after.get(path), Some(inode), "{} was not copied again", path.display());
        }
        for relative in &listed {
            let local = dest.join(relative);
            assert!(is_regular(&local));
            assert_eq!(std::fs::read(&local).unwrap(), std::fs::read(src.join(relative)).unwrap());
        }
        let leftovers: Vec<_> = walkdir::WalkDir::new(&dest)
            .into_iter()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".ferry-tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files of the killed run are cleaned: {leftovers:?}");
        return;
    }
}

#[test]
fn drop_in_mode_mirrors_copies_listed_files_and_refuses_empty_lists() {
    let env = TestEnv::new();
    let (src, listed) = source_tree(&env, 3, 1000);
    let dest = env.path("node");
    env.write("list.txt", format!("{}\n\n{}\n", listed[0], listed[2]));
    let staged = drop_in(&env, &src, "list.txt", &dest, &[]);
    assert!(staged.status.success(), "{}", describe(&staged));
    assert!(is_regular(&dest.join(&listed[0])) && is_regular(&dest.join(&listed[2])));
    assert!(dest.join(&listed[1]).symlink_metadata().unwrap().file_type().is_symlink(), "unlisted files are symlinks");
    assert!(dest.join("other/unrelated.arrow").symlink_metadata().unwrap().file_type().is_symlink());
    assert!(!dest.join("pile/default/0.0.0/abc_builder.lock").exists(), "lock files are never mirrored");

    let empty_dest = env.path("node-empty");
    env.write("empty.txt", "\n");
    let output = drop_in(&env, &src, "empty.txt", &empty_dest, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("lists no file"), "{}", describe(&output));
    assert!(!empty_dest.exists(), "nothing staged for an empty list");

    env.write("escape.txt", "../outside.arrow\n");
    let output = drop_in(&env, &src, "escape.txt", &empty_dest, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("line 1"), "{}", describe(&output));

    // The list can come from stdin.
    let mut child = env
        .ferry()
        .args([
            "stage",
            "--src",
            src.to_str().unwrap(),
            "--files-from",
            "-",
            "--dest",
            env.path("node-stdin").to_str().unwrap(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(listed[1].as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(is_regular(&env.path("node-stdin").join(&listed[1])));
}

#[test]
fn verify_catches_a_corrupted_cache_file_and_leaves_no_bad_copy() {
    let env = TestEnv::new();
    let (spec, entry) = prepared_entry(&env, "corrupt", 4);
    let data = entry.join("train/data-00001-of-00003.arrow");
    let mut bytes = std::fs::read(&data).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&data, bytes).unwrap();
    let dest = env.path("node/ferry");
    let output = env.run(&["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap(), "--verify"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("data-00001-of-00003.arrow") && stderr.contains("blake3"), "{stderr}");
    let local = dest.join("entries").join(entry.file_name().unwrap()).join("train/data-00001-of-00003.arrow");
    assert!(local.symlink_metadata().unwrap().file_type().is_symlink(), "the damaged file was not landed");
    let waited = env.run(&["wait", "--dest", dest.to_str().unwrap()]);
    assert_eq!(waited.status.code(), Some(1), "wait reports the failure: {}", describe(&waited));
}

#[test]
fn background_stage_returns_with_the_mirror_ready_and_wait_blocks_until_done() {
    let env = TestEnv::new();
    let (spec, entry) = prepared_entry(&env, "bg", 5);
    let dest = env.path("node/ferry");
    let output = env.run(&["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap(), "--background"]);
    assert!(output.status.success(), "{}", describe(&output));
    // The mirror exists at once: every file is readable, as a symlink or a copy.
    let local = dest.join("by-name/bg");
    for file in read_manifest(&entry)["files"].as_array().unwrap() {
        assert!(local.join(file["path"].as_str().unwrap()).is_file());
    }
    env.run_ok(&["wait", "--dest", dest.to_str().unwrap()]);
    for file in read_manifest(&entry)["files"].as_array().unwrap() {
        assert!(is_regular(&local.join(file["path"].as_str().unwrap())), "copied after wait");
    }
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dest.join(format!(".ferry/stage-{}.json", entry.file_name().unwrap().to_str().unwrap())))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(state["phase"], "done");
    assert_eq!(state["files_done"], state["files_total"]);
}

#[test]
fn broadcast_outside_a_job_or_into_a_missing_or_shared_parent_says_what_to_do() {
    let env = TestEnv::new();
    let (spec, _) = prepared_entry(&env, "broadcast-here", 7);
    let broadcast = |dest: &Path, job: Option<&str>| {
        let mut command = env.ferry();
        command.args(["stage", spec.to_str().unwrap(), "--broadcast", "--dest", dest.to_str().unwrap()]);
        match job {
            Some(id) => command.env("SLURM_JOB_ID", id),
            None => command.env_remove("SLURM_JOB_ID"),
        };
        command.output().unwrap()
    };
    let output = broadcast(&env.path("node/ferry"), None);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("needs a Slurm job"), "{}", describe(&output));
    let output = broadcast(&env.path("missing/ferry"), Some("1"));
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("must exist on every node"), "{}", describe(&output));
    assert!(!env.path("missing").exists(), "a failed broadcast created its destination's parent");
    // sbcast would write through a link another user planted in a directory they can write.
    let shared = env.path("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let output = broadcast(&shared.join("ferry"), Some("1"));
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("must be yours alone"), "{}", describe(&output));
}

#[test]
fn stage_without_a_destination_or_prepared_entry_says_what_to_do() {
    let env = TestEnv::new();
    env.shards("data", "train", 1, 10, 6);
    let spec = env.write("spec.toml", gpt2_spec("unprepared", "data/*.jsonl.zst", ""));
    let output = env.ferry().args(["stage", spec.to_str().unwrap()]).env_remove("SLURM_TMPDIR").output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--dest"), "{}", describe(&output));
    let output = env.run(&["stage", spec.to_str().unwrap(), "--dest", env.path("node").to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("ferry prepare"), "{}", describe(&output));
}

#[test]
fn full_destination_fails_before_copying_and_leaves_nothing() {
    if !rustix::process::getuid().is_root() {
        eprintln!("SKIPPED: mounting a small tmpfs needs root");
        return;
    }
    let env = TestEnv::new();
    let (src, listed) = source_tree(&env, 4, 1 << 20);
    env.write("list.txt", listed.join("\n"));
    let mount_point = env.path("small");
    std::fs::create_dir(&mount_point).unwrap();
    let mounted =
        Command::new("mount").args(["-t", "tmpfs", "-o", "size=2m", "tmpfs", mount_point.to_str().unwrap()]).status();
    if !mounted.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: could not mount a tmpfs (no privilege in this container)");
        return;
    }
    let dest = mount_point.join("ferry");
    let output = drop_in(&env, &src, "list.txt", &dest, &[]);
    let left: Vec<_> = std::fs::read_dir(&mount_point).unwrap().flatten().map(|e| e.file_name()).collect();
    let _ = Command::new("umount").arg(&mount_point).status();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not enough space") && stderr.contains("MiB"), "{stderr}");
    assert!(left.is_empty(), "nothing left behind: {left:?}");
}
