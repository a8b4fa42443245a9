//! One writable cache shared by a lab: two real unprivileged members of one group, a
//! setgid group-owned cache, each member's umask 002 as project spaces ask. One
//! builds and the other hits; one's stage lease keeps the other's gc off the entry;
//! a dead member's claim is taken over by the other; gc by either removes what nobody
//! uses; and nothing in the cache is left unreadable or unwritable to the group.
//! Without root they skip.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::users::{LAB_GROUP, User, lab_members, open_to_all};
use common::{TestEnv, describe, gpt2_spec};
use serde_json::Value;

/// `ferry ARGS` as `member`, umask 002, the cache in the test tree.
fn member_ferry(env: &TestEnv, member: &User, args: &[&str]) -> Command {
    let mut command = member.command("sh");
    command
        .args(["-c", "umask 002; exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_ferry")])
        .args(args)
        .current_dir(env.dir.path())
        .env("FERRY_CACHE", env.cache())
        .env("RUST_LOG", "ferry=info");
    command
}

fn member_json(env: &TestEnv, member: &User, args: &[&str]) -> Value {
    let output = member_ferry(env, member, args).output().unwrap();
    assert!(output.status.success(), "ferry {args:?} as {}:\n{}", member.name, describe(&output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| panic!("{err}:\n{}", describe(&output)))
}

/// A test tree every user can enter, with a setgid cache owned by the lab's group.
fn lab_tree() -> Option<(TestEnv, User, User, u32)> {
    let (one, two) = lab_members()?;
    let env = TestEnv::new();
    open_to_all(env.dir.path());
    let group = uzers::get_group_by_name(LAB_GROUP).unwrap().gid();
    std::fs::create_dir(env.cache()).unwrap();
    rustix::fs::chown(env.cache(), None, Some(rustix::fs::Gid::from_raw(group))).unwrap();
    std::fs::set_permissions(env.cache(), std::fs::Permissions::from_mode(0o2775)).unwrap();
    Some((env, one, two, group))
}

fn spec(env: &TestEnv, name: &str, data: &str, seed: u64) -> String {
    env.shards(data, "train", 2, 40, seed);
    let spec = env
        .write(&format!("{name}.toml"), gpt2_spec(name, &format!("{data}/*.jsonl.zst"), "[sequence]\nseq_len = 64\n"));
    spec.to_str().unwrap().to_string()
}

/// Every path in the cache: group-owned by the lab, readable and writable by the group
/// (as umask 002 asks: ferry sets no fixed mode), directories setgid, so any member can
/// use and collect all.
fn assert_all_usable_by_the_group(cache: &Path, group: u32) {
    let mut problems = Vec::new();
    for item in walkdir::WalkDir::new(cache) {
        let item = item.unwrap();
        let meta = item.path().symlink_metadata().unwrap();
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode();
        let wanted = if meta.is_dir() { 0o2070 } else { 0o060 };
        if meta.gid() != group || mode & wanted != wanted {
            problems.push(format!("{} (gid {}, mode {:o})", item.path().display(), meta.gid(), mode & 0o7777));
        }
    }
    assert!(problems.is_empty(), "not usable by the lab's group:\n{}", problems.join("\n"));
}

#[test]
fn one_member_builds_and_the_other_hits_and_collects() {
    let Some((env, one, two, group)) = lab_tree() else { return };
    let spec = spec(&env, "shared", "data", 3);
    let built = member_json(&env, &one, &["prepare", &spec, "--json"]);
    assert_eq!(built["built"], true);
    let hit = member_json(&env, &two, &["prepare", &spec, "--json"]);
    assert_eq!((hit["built"].clone(), hit["fingerprint"].clone()), (Value::Bool(false), built["fingerprint"].clone()));
    let dest = env.path("two-node");
    std::fs::create_dir(&dest).unwrap();
    two.chown(&dest);
    member_json(&env, &two, &["stage", &spec, "--dest", dest.to_str().unwrap(), "--verify", "--json"]);
    assert_all_usable_by_the_group(&env.cache(), group);

    // What member two built, member one's gc removes once nobody uses it, and the reverse.
    let other = spec_of_two(&env, &two);
    let report = member_json(&env, &one, &["gc", "--keep", "0", "--json"]);
    let removed = removed_entries(&report);
    assert_eq!(removed.len(), 4, "both views and their token stores: {report}");
    assert!(removed.iter().any(|path| path.ends_with(&other)), "{report}");
    assert!(std::fs::read_dir(env.cache().join("entries")).unwrap().next().is_none());
    member_json(&env, &one, &["prepare", &spec, "--json"]);
    let report = member_json(&env, &two, &["gc", "--keep", "0", "--json"]);
    assert_eq!(removed_entries(&report).len(), 2, "the view and its token store: {report}");
}

/// The entry paths a `gc --json` report says it removed.
fn removed_entries(report: &Value) -> Vec<&str> {
    let removed = report["removed"].as_array().unwrap().iter();
    removed.filter(|r| r["kind"] == "entry").map(|r| r["path"].as_str().unwrap()).collect()
}

/// Member two prepares an entry of its own; returns its short fingerprint.
fn spec_of_two(env: &TestEnv, two: &User) -> String {
    let spec = spec(env, "twos", "data-two", 4);
    let built = member_json(env, two, &["prepare", &spec, "--json"]);
    built["fingerprint"].as_str().unwrap()[..16].to_string()
}

#[test]
fn a_members_stage_lease_keeps_the_others_gc_off_the_entry() {
    let Some((env, one, two, _)) = lab_tree() else { return };
    let spec = spec(&env, "leased", "data", 5);
    let short =
        member_json(&env, &one, &["prepare", &spec, "--json"])["fingerprint"].as_str().unwrap()[..16].to_string();
    // Member one's destination is held by another stager (this test): its stage takes
    // its lease on the entry, then waits for the destination.
    let dest = env.path("one-node");
    std::fs::create_dir_all(dest.join(".ferry")).unwrap();
    let lock = std::fs::File::create(dest.join(".ferry/stage.lock")).unwrap();
    for path in [&dest, &dest.join(".ferry"), &dest.join(".ferry/stage.lock")] {
        one.chown(path);
    }
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let mut stager = member_ferry(&env, &one, &["stage", &spec, "--dest", dest.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_lease(&env.cache(), &short, &mut stager);
    let report = member_json(&env, &two, &["gc", "--keep", "0", "--json"]);
    assert_eq!(report["kept_in_use"][0], short.as_str(), "{report}");
    assert!(env.cache().join("entries").join(&short).is_dir(), "member two's gc removed an entry in use");

    drop(lock);
    let output: Output = stager.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let report = member_json(&env, &two, &["gc", "--keep", "0", "--json"]);
    assert_eq!(removed_entries(&report).len(), 1, "once staged, nobody uses it: {report}");
}

#[test]
fn a_dead_members_claim_is_taken_over_by_another() {
    let Some((env, one, two, group)) = lab_tree() else { return };
    let spec = spec(&env, "claimed", "data", 6);
    // The fingerprint, from a build in a private cache.
    let probe = env
        .ferry()
        .args(["prepare", &spec, "--json", "--cache", env.path("probe").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(probe.status.success(), "{}", describe(&probe));
    let short =
        serde_json::from_slice::<Value>(&probe.stdout).unwrap()["fingerprint"].as_str().unwrap()[..16].to_string();
    // Member one claimed shard 0 and died: its claim, made as it makes claims.
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let owner = serde_json::json!({"host": ferry::fsutil::host_name(), "pid": dead_pid, "job_id": null, "task": null});
    let claims = env.cache().join("building").join(&short).join("claims");
    let planted = one
        .command("sh")
        .args([
            "-c",
            &format!(
                "umask 002; mkdir -p {} && printf '%s' '{owner}' > {}/train.000000",
                claims.display(),
                claims.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(planted.status.success(), "{}", describe(&planted));

    let built = member_json(&env, &two, &["prepare", &spec, "--json"]);
    assert_eq!(built["built"], true);
    assert_eq!(built["shards_tokenized_here"], 2, "member one's dead claim was taken over");
    assert_all_usable_by_the_group(&env.cache(), group);
}

#[test]
fn a_permission_error_names_the_path_and_whose_it_is() {
    let Some((env, one, two, _)) = lab_tree() else { return };
    // Member one's cache, not opened to the group.
    std::fs::set_permissions(env.cache(), std::fs::Permissions::from_mode(0o755)).unwrap();
    one.chown(&env.cache());
    let spec = spec(&env, "private", "data", 7);
    let output = member_ferry(&env, &two, &["prepare", &spec]).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let owner = format!("{} is owned by {}:", env.cache().display(), one.name);
    assert!(stderr.contains("Permission denied") && stderr.contains(&owner), "{stderr}");
    assert!(stderr.contains("drwxr-xr-x"), "{stderr}");

    let config = member_json(&env, &two, &["config", "--json"]);
    assert!(config["cache_access"].as_str().unwrap().contains(&owner), "{config}");
}
