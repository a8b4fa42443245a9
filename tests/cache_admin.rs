//! `ferry status`, `gc` and `verify` on real caches: builds in progress and
//! abandoned, eviction policies, leases held by a live stage, damaged files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use common::{SmallEntry, TestEnv, describe, gpt2_spec};

fn prepare_named(env: &TestEnv, name: &str, dir: &str, seq_len: u32, seed: u64) -> String {
    let (_, prepared) = env.prepare_entry(&SmallEntry { name, dir, shards: 2, documents: 40, seq_len, seed });
    prepared["fingerprint"].as_str().unwrap()[..16].to_string()
}

fn json(env: &TestEnv, args: &[&str]) -> serde_json::Value {
    env.json(args)
}

fn set_last_use(env: &TestEnv, short: &str, days_ago: u64) {
    let marker = env.cache().join("used").join(short);
    let file = std::fs::File::options().write(true).open(marker).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(days_ago * 86400)).unwrap();
}

/// The short fingerprint of the token store the view `short` was made from.
fn token_store_of(env: &TestEnv, short: &str) -> String {
    let manifest = common::read_manifest(&env.cache().join("entries").join(short));
    manifest["token_store"]["fingerprint"].as_str().unwrap()[..16].to_string()
}

fn entry_exists(env: &TestEnv, short: &str) -> bool {
    env.cache().join("entries").join(short).join("manifest.json").is_file()
}

#[test]
fn status_shows_ready_building_and_stale_builds() {
    let env = TestEnv::new();
    let ready = prepare_named(&env, "ready", "data-ready", 64, 1);
    // A real build, frozen part-way so its state can be looked at.
    env.shards("data-big", "train", 4, 4000, 2);
    let spec = env.write("big.toml", gpt2_spec("big", "data-big/*.jsonl.zst", ""));
    let mut builder = env
        .ferry()
        .args(["prepare", spec.to_str().unwrap(), "--jobs", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let building = env.cache().join("building");
    let deadline = Instant::now() + Duration::from_secs(60);
    let progress_file = loop {
        let found = std::fs::read_dir(&building).into_iter().flatten().flatten().find_map(|b| {
            std::fs::read_dir(b.path())
                .ok()?
                .flatten()
                .find(|f| f.file_name().to_string_lossy().starts_with("progress."))
                .map(|f| f.path())
        });
        if let Some(found) = found {
            break found;
        }
        assert!(Instant::now() < deadline, "the build never started");
        std::thread::sleep(Duration::from_millis(5));
    };
    let pid = rustix::process::Pid::from_child(&builder);
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    assert!(progress_file.exists(), "the build was still running when frozen");

    let status = json(&env, &["status", "--json"]);
    assert_eq!(status["entries"][0]["short"], ready.as_str());
    assert_eq!(status["entries"][0]["state"], "ready");
    let build = &status["builds"][0];
    assert_eq!(build["state"], "building", "{status}");
    assert_eq!(build["name"], "big");
    assert_eq!(build["shards_total"], 4);
    assert!(build["builders"][0].as_str().unwrap().ends_with(&format!(":{}", builder.id())), "{build}");
    let text = env.run_ok(&["status"]);
    assert!(text.contains("ready") && text.contains(&format!("building {}/4 shards", build["shards_done"])), "{text}");

    builder.kill().unwrap();
    builder.wait().unwrap();
    let status = json(&env, &["status", "--json"]);
    assert_eq!(status["builds"][0]["state"], "stale", "{status}");
    assert!(env.run_ok(&["status"]).contains("stale"));

    // gc reclaims the abandoned build, and only that.
    let report = json(&env, &["gc", "--json"]);
    assert_eq!(report["removed"][0]["kind"], "abandoned_build", "{report}");
    assert!(!progress_file.exists());
    assert!(entry_exists(&env, &ready));
}

#[test]
fn gc_policies_dry_run_and_by_name_links() {
    let env = TestEnv::new();
    let old = prepare_named(&env, "same", "data", 32, 3);
    let middle = prepare_named(&env, "same", "data", 48, 3);
    let newest = prepare_named(&env, "other", "data", 64, 3);
    set_last_use(&env, &old, 40);
    set_last_use(&env, &middle, 10);

    let snapshot = || -> Vec<PathBuf> {
        walkdir::WalkDir::new(env.cache()).into_iter().flatten().map(|e| e.path().to_path_buf()).collect()
    };
    let before = snapshot();
    let dry = json(&env, &["gc", "--keep", "1", "--dry-run", "--json"]);
    let would: Vec<&str> = dry["removed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "entry")
        .map(|a| a["path"].as_str().unwrap())
        .collect();
    // The two older views and the token store all three were made from: either kind counts.
    let store = token_store_of(&env, &newest);
    assert_eq!(would.len(), 3, "{dry}");
    assert!(would.iter().any(|p| p.ends_with(&store)), "{dry}");
    assert!(would.iter().all(|p| !p.ends_with(&newest)));
    assert_eq!(snapshot(), before, "--dry-run changes nothing");

    let aged = json(&env, &["gc", "--max-age", "30d", "--json"]);
    assert_eq!(
        aged["removed"][0]["path"].as_str().unwrap(),
        env.cache().join("entries").join(&old).to_str().unwrap(),
        "{aged}"
    );
    assert!(!entry_exists(&env, &old) && entry_exists(&env, &middle) && entry_exists(&env, &newest));

    // by-name/same pointed at `middle` (the newest prepare of that name); keep it so.
    assert_eq!(std::fs::read_link(env.cache().join("by-name/same")).unwrap(), Path::new("../entries").join(&middle));
    let newest_bytes = json(&env, &["status", "--json"])["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["short"] == newest.as_str())
        .unwrap()["bytes"]
        .as_u64()
        .unwrap();
    let sized = json(&env, &["gc", "--max-size", &format!("{}B", newest_bytes + 1), "--json"]);
    assert!(
        sized["removed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["kind"] == "entry" && a["path"].as_str().unwrap().ends_with(&middle)),
        "{sized}"
    );
    assert!(!entry_exists(&env, &middle) && entry_exists(&env, &newest));
    assert!(!env.cache().join("by-name/same").exists(), "no entry named `same` is left, so its link is gone");
    assert_eq!(std::fs::read_link(env.cache().join("by-name/other")).unwrap(), Path::new("../entries").join(&newest));
    assert!(env.cache().join("trash").read_dir().map_or(true, |mut d| d.next().is_none()), "trash emptied");
}

#[test]
fn gc_relinks_a_name_to_the_newest_remaining_entry() {
    let env = TestEnv::new();
    let first = prepare_named(&env, "same", "data", 32, 4);
    let second = prepare_named(&env, "same", "data", 48, 4);
    assert_eq!(std::fs::read_link(env.cache().join("by-name/same")).unwrap(), Path::new("../entries").join(&second));
    set_last_use(&env, &second, 50);
    json(&env, &["gc", "--max-age", "30d", "--json"]);
    assert_eq!(std::fs::read_link(env.cache().join("by-name/same")).unwrap(), Path::new("../entries").join(&first));
}

#[test]
fn gc_never_deletes_an_entry_being_staged() {
    let env = TestEnv::new();
    let oldest = prepare_named(&env, "oldest", "data-a", 32, 5);
    let spec = env.path("oldest-32.toml");
    prepare_named(&env, "newest", "data-b", 32, 6);
    set_last_use(&env, &oldest, 5);
    let dest = env.path("node/ferry");
    // Another stager holds the destination: ours takes its lease, then waits.
    std::fs::create_dir_all(dest.join(".ferry")).unwrap();
    let lock = std::fs::File::create(dest.join(".ferry/stage.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let mut stager = env
        .ferry()
        .args(["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_lease(&env.cache(), &oldest, &mut stager);
    // A policy that evicts every entry: only the lease can keep one.
    let report = json(&env, &["gc", "--keep", "0", "--json"]);
    assert_eq!(report["kept_in_use"][0], oldest.as_str(), "{report}");
    assert!(entry_exists(&env, &oldest), "the leased entry survives gc");
    assert!(env.run_ok(&["status"]).contains("in use"));

    drop(lock);
    let output = stager.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    env.run_ok(&["verify", "--dest", dest.to_str().unwrap()]);
    let report = json(&env, &["gc", "--keep", "0", "--json"]);
    assert!(
        report["removed"].as_array().unwrap().iter().any(|a| a["path"].as_str().unwrap().ends_with(&oldest)),
        "{report}"
    );
    assert!(!entry_exists(&env, &oldest));
}

/// What another node's builder or stager leaves while it starts: a build directory
/// with no progress file yet, and a lease file created but not yet written. On a
/// network filesystem gc on this node can see either at any moment.
#[test]
fn gc_keeps_a_build_being_set_up_and_an_entry_whose_lease_is_being_written() {
    let env = TestEnv::new();
    let leased = prepare_named(&env, "leased", "data", 32, 7);
    let starting = env.cache().join("building/0123456789abcdef");
    std::fs::create_dir_all(starting.join("claims")).unwrap();
    let lease_dir = env.cache().join("leases").join(&leased);
    std::fs::create_dir_all(&lease_dir).unwrap();
    let lease = lease_dir.join("node9.4242.stage.0");
    std::fs::write(&lease, b"").unwrap();

    // A policy that evicts every entry: only the unreadable lease can keep it. Its
    // token store, which nothing holds, goes.
    let report = json(&env, &["gc", "--keep", "0", "--json"]);
    let removed: Vec<&str> =
        report["removed"].as_array().unwrap().iter().map(|a| a["path"].as_str().unwrap()).collect();
    assert_eq!(removed.len(), 1, "{report}");
    assert!(removed[0].ends_with(&token_store_of(&env, &leased)), "{report}");
    assert_eq!(report["kept_in_use"][0], leased.as_str(), "{report}");
    assert!(entry_exists(&env, &leased) && starting.is_dir());
    let status = json(&env, &["status", "--json"]);
    assert_eq!(status["builds"][0]["state"], "building", "{status}");

    // Once both are older than the stale age, nobody is behind them.
    let long_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(&starting).unwrap().set_modified(long_ago).unwrap();
    std::fs::File::options().write(true).open(&lease).unwrap().set_modified(long_ago).unwrap();
    let report = json(&env, &["gc", "--keep", "0", "--json"]);
    let kinds: Vec<&str> = report["removed"].as_array().unwrap().iter().map(|a| a["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"abandoned_build") && kinds.contains(&"entry"), "{report}");
    assert!(!entry_exists(&env, &leased) && !starting.exists());
}

/// A tree another gc parked in the trash a moment ago may still go back (its
/// lease re-check found a holder): only once it stayed there past the stale age
/// is it left over from an interrupted gc.
#[test]
fn gc_leaves_what_another_gc_just_parked_and_removes_it_once_old() {
    let env = TestEnv::new();
    let parked = env.cache().join("trash/0123456789abcdef.4242.0");
    std::fs::create_dir_all(parked.join("parts")).unwrap();
    std::fs::write(parked.join("parts/a.done.json"), b"{}").unwrap();
    let gc = || {
        let output = env
            .ferry()
            .args(["gc", "--json"])
            .envs([("FERRY_HEARTBEAT_INTERVAL", "1s"), ("FERRY_STALE_AGE", "2s")])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", describe(&output));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let report = gc();
    assert_eq!(report["removed"].as_array().map(Vec::len), Some(0), "{report}");
    assert!(parked.join("parts/a.done.json").is_file());

    std::thread::sleep(Duration::from_millis(2100));
    let report = gc();
    assert_eq!(report["removed"][0]["kind"], "trash", "{report}");
    assert!(!parked.exists());
}

#[test]
fn verify_names_a_damaged_file_and_passes_a_clean_entry() {
    let env = TestEnv::new();
    let short = prepare_named(&env, "v", "data", 32, 7);
    env.run_ok(&["verify", &short]);
    let data = env.cache().join("entries").join(&short).join("train/data-00000-of-00002.arrow");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&data, bytes).unwrap();
    let output = env.run(&["verify", "--all"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("data-00000-of-00002.arrow") && stdout.contains("blake3"), "{stdout}");
    assert!(!stdout.contains("data-00001-of-00002.arrow"), "only the damaged file is named: {stdout}");
}
