//! A hostile member of a lab writes to the lab's shared cache; another member
//! stages, collects garbage, checks status and verifies. Each test is one attack by
//! a real unprivileged user (created by the test, as root) against the other, and
//! checks that the victim's files are untouched. Without root they skip.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::users::{LAB_GROUP, User, attacker_and_victim, open_to_all};
use common::{SmallEntry, TestEnv, describe, gpt2_spec};

/// The lab's setup: a group-writable, setgid cache in which the attacker prepared
/// an entry every member uses, and a victim with private files and a destination.
struct Lab {
    env: TestEnv,
    attacker: User,
    victim: User,
    /// The entry's short fingerprint.
    short: String,
    /// The victim's private directory (0700) and a file in it (0600).
    private_dir: PathBuf,
    private_file: PathBuf,
    /// The victim's staging destination.
    dest: PathBuf,
}

const SECRET: &[u8] = b"the victim's own notes\n";

impl Lab {
    fn new() -> Option<Lab> {
        let (attacker, victim) = attacker_and_victim()?;
        let env = TestEnv::new();
        open_to_all(env.dir.path());
        let cache = env.cache();
        std::fs::create_dir(&cache).unwrap();
        let group = uzers::get_group_by_name(LAB_GROUP).unwrap().gid();
        rustix::fs::chown(&cache, None, Some(rustix::fs::Gid::from_raw(group))).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o2775)).unwrap();

        let entry = SmallEntry { name: "lab", dir: "data", shards: 2, documents: 30, seq_len: 64, seed: 5 };
        env.shards(entry.dir, "train", entry.shards, entry.documents, entry.seed);
        let spec = env.write("lab.toml", gpt2_spec("lab", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
        let prepared = run(lab_member(&attacker).args(["prepare", spec.to_str().unwrap(), "--json"]), &env);
        assert!(prepared.status.success(), "{}", describe(&prepared));
        let summary: serde_json::Value = serde_json::from_slice(&prepared.stdout).unwrap();
        let short = summary["fingerprint"].as_str().unwrap()[..16].to_string();

        let private_dir = env.path("victim-home");
        std::fs::create_dir(&private_dir).unwrap();
        let private_file = private_dir.join("notes.txt");
        std::fs::write(&private_file, SECRET).unwrap();
        std::fs::create_dir(private_dir.join("project")).unwrap();
        std::fs::write(private_dir.join("project/results.csv"), SECRET).unwrap();
        for path in
            [&private_dir, &private_file, &private_dir.join("project"), &private_dir.join("project/results.csv")]
        {
            victim.chown(path);
        }
        std::fs::set_permissions(&private_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&private_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let attacker_home = env.path("attacker-home");
        std::fs::create_dir(&attacker_home).unwrap();
        attacker.chown(&attacker_home);
        let dest = env.path("victim-node");
        std::fs::create_dir(&dest).unwrap();
        victim.chown(&dest);
        Some(Lab { env, attacker, victim, short, private_dir, private_file, dest })
    }

    fn entry_dir(&self) -> PathBuf {
        self.env.cache().join("entries").join(&self.short)
    }

    /// Runs a shell script as the attacker, in the test tree.
    fn attack(&self, script: &str) {
        let output = run(self.attacker.command("sh").args(["-c", &format!("umask 002; {script}")]), &self.env);
        assert!(output.status.success(), "the attacker's script failed:\n{script}\n{}", describe(&output));
    }

    /// Replaces the entry's manifest with `edit`'s version of it, as the attacker.
    fn forge_manifest(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut manifest = common::read_manifest(&self.entry_dir());
        edit(&mut manifest);
        let forged = self.env.write("forged-manifest.json", serde_json::to_vec(&manifest).unwrap());
        self.attack(&format!("cp {} {}/manifest.json", forged.display(), self.entry_dir().display()));
    }

    /// `ferry ARGS` as the victim, bounded in time (a hang fails the test).
    fn victim_runs(&self, args: &[&str]) -> Output {
        let output = run_bounded(lab_member(&self.victim).args(args), &self.env, Duration::from_secs(60));
        output.unwrap_or_else(|| panic!("ferry {args:?} as the victim did not finish in 60 s"))
    }

    fn stage(&self) -> Output {
        self.victim_runs(&["stage", "--entry", &self.short, "--dest", self.dest.to_str().unwrap()])
    }

    /// The victim's private files are all there with their bytes.
    fn assert_private_files_untouched(&self) {
        assert_eq!(std::fs::read(&self.private_file).unwrap(), SECRET, "the victim's file was changed");
        assert_eq!(std::fs::read(self.private_dir.join("project/results.csv")).unwrap(), SECRET);
        assert_eq!(std::fs::symlink_metadata(&self.private_file).unwrap().uid(), self.victim.uid);
    }
}

/// `ferry` as a member of the lab, with the group-writable umask shared project
/// spaces ask for.
fn lab_member(user: &User) -> Command {
    let mut command = user.command("sh");
    command.args(["-c", "umask 002; exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_ferry")]);
    command
}

fn run(command: &mut Command, env: &TestEnv) -> Output {
    command.current_dir(env.dir.path()).env("FERRY_CACHE", env.cache()).env("RUST_LOG", "ferry=info");
    command.output().unwrap()
}

/// Runs `command`, killing it after `limit`: `None` when it had to be killed.
fn run_bounded(command: &mut Command, env: &TestEnv, limit: Duration) -> Option<Output> {
    use std::process::Stdio;
    command.current_dir(env.dir.path()).env("FERRY_CACHE", env.cache()).env("RUST_LOG", "ferry=info");
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(child.wait_with_output().unwrap())
}

/// `../` enough times to climb from `from` (an absolute directory) to `/`.
fn climb_to_root(from: &Path) -> String {
    "../".repeat(from.components().count() - 1)
}

/// The manifest lists a file `s/../../…/victim-home/notes.txt`: in the cache `s` is a
/// symlink to a deep directory of the attacker's, so the source resolves to the
/// attacker's bytes, while in the destination the path climbs to the victim's file.
#[test]
fn a_forged_manifest_path_cannot_overwrite_the_victims_file() {
    let Some(lab) = Lab::new() else { return };
    let payload = b"attacker bytes";
    let dest_dir = lab.dest.join("entries").join(&lab.short).join("s");
    let climb = climb_to_root(&dest_dir);
    let relative_victim = lab.private_file.strip_prefix("/").unwrap();
    // In the cache, `s` -> deep/d1/…/dN with N = the climb's length, so the same
    // climb lands in `deep/`, where the attacker keeps a copy of the victim's path.
    let deep = lab.env.path("attacker-home/deep");
    let depth = dest_dir.components().count() - 1;
    let deep_end = (1..=depth).fold(deep.clone(), |path, level| path.join(format!("d{level}")));
    let planted = deep.join(relative_victim);
    lab.attack(&format!(
        "mkdir -p {deep_end} {planted_dir} && printf '%s' '{payload}' > {planted} && ln -s {deep_end} {entry}/s",
        deep_end = deep_end.display(),
        planted_dir = planted.parent().unwrap().display(),
        planted = planted.display(),
        payload = String::from_utf8_lossy(payload),
        entry = lab.entry_dir().display(),
    ));
    let path = format!("s/{climb}{}", relative_victim.display());
    lab.forge_manifest(|manifest| {
        manifest["files"].as_array_mut().unwrap().push(serde_json::json!({
            "path": path, "size": payload.len(), "blake3": blake3::hash(payload).to_hex().to_string(),
            "rows": 0, "tokens": 0,
        }));
    });
    let staged = lab.stage();
    lab.assert_private_files_untouched();
    assert!(!staged.status.success(), "a manifest with `..` was staged:\n{}", describe(&staged));
    let stderr = String::from_utf8_lossy(&staged.stderr);
    assert!(stderr.contains("manifest.json") && stderr.contains("\"..\""), "{}", describe(&staged));
}

/// A listed file `…/notes.txt/x` made the mirror remove `notes.txt` to create a directory.
#[test]
fn a_forged_manifest_path_cannot_delete_the_victims_file() {
    let Some(lab) = Lab::new() else { return };
    let inside = lab.dest.join("entries").join(&lab.short);
    let path = format!("{}{}/x", climb_to_root(&inside), lab.private_file.strip_prefix("/").unwrap().display());
    lab.forge_manifest(|manifest| {
        manifest["files"][0]["path"] = path.into();
    });
    let staged = lab.stage();
    lab.assert_private_files_untouched();
    assert!(!staged.status.success(), "{}", describe(&staged));
}

/// A manifest `name` of `../../victim-home/planted` put the `by-name` link outside DEST.
#[test]
fn a_forged_entry_name_cannot_put_a_link_outside_the_destination() {
    let Some(lab) = Lab::new() else { return };
    lab.forge_manifest(|manifest| manifest["name"] = "../../victim-home/planted".into());
    let staged = lab.stage();
    assert!(!staged.status.success(), "{}", describe(&staged));
    assert!(std::fs::symlink_metadata(lab.private_dir.join("planted")).is_err(), "a link landed in the victim's home");
    lab.assert_private_files_untouched();
}

/// `trash` -> the victim's directory: gc emptied it.
#[test]
fn gc_never_deletes_through_a_symlinked_trash() {
    let Some(lab) = Lab::new() else { return };
    let trash = lab.env.cache().join("trash");
    lab.attack(&format!("rm -rf {t} && ln -s {} {t}", lab.private_dir.display(), t = trash.display()));
    let collected = lab.victim_runs(&["gc"]);
    lab.assert_private_files_untouched();
    assert!(!collected.status.success(), "{}", describe(&collected));
    assert!(String::from_utf8_lossy(&collected.stderr).contains("symbolic link"), "{}", describe(&collected));
}

/// `building` -> the victim's directory: gc took every subdirectory for a stale build.
#[test]
fn gc_never_deletes_through_a_symlinked_building_directory() {
    let Some(lab) = Lab::new() else { return };
    // The attacker's own build left `building/` behind: replace it.
    let building = lab.env.cache().join("building");
    lab.attack(&format!("rm -rf {b} && ln -s {} {b}", lab.private_dir.display(), b = building.display()));
    let _ = lab.victim_runs(&["gc"]);
    lab.assert_private_files_untouched();
    assert!(lab.private_dir.join("project").is_dir());
}

/// `leases/<fp>` -> the victim's directory, with an empty `building/<fp>`: gc took
/// every file there older than the stale age for a dead lease and removed it.
#[test]
fn gc_never_removes_leases_through_a_symlinked_lease_directory() {
    let Some(lab) = Lab::new() else { return };
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    for file in [&lab.private_file, &lab.private_dir.join("project/results.csv")] {
        std::fs::File::options().write(true).open(file).unwrap().set_modified(old).unwrap();
    }
    let fake = "0123456789abcdef";
    let cache = lab.env.cache();
    lab.attack(&format!(
        "mkdir -p {cache}/building/{fake} {cache}/leases && ln -s {victim} {cache}/leases/{fake}",
        cache = cache.display(),
        victim = lab.private_dir.display(),
    ));
    let _ = lab.victim_runs(&["gc"]);
    lab.assert_private_files_untouched();
}

/// A FIFO, and a symlink to `/dev/zero`, as entries' manifests: `status` and `gc`
/// hung forever (and grew without bound).
#[test]
fn status_and_gc_finish_when_manifests_are_fifos_or_devices() {
    let Some(lab) = Lab::new() else { return };
    let entries = lab.env.cache().join("entries");
    lab.attack(&format!(
        "mkdir {e}/aaaaaaaaaaaaaaaa {e}/bbbbbbbbbbbbbbbb && mkfifo {e}/aaaaaaaaaaaaaaaa/manifest.json \
         && ln -s /dev/zero {e}/bbbbbbbbbbbbbbbb/manifest.json",
        e = entries.display()
    ));
    let status = lab.victim_runs(&["status", "--json"]);
    assert!(status.status.success(), "{}", describe(&status));
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let states: Vec<(&str, &str)> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["short"].as_str().unwrap(), e["state"].as_str().unwrap()))
        .collect();
    assert!(states.contains(&("aaaaaaaaaaaaaaaa", "invalid")), "{states:?}");
    assert!(states.contains(&("bbbbbbbbbbbbbbbb", "invalid")), "{states:?}");
    assert!(states.contains(&(lab.short.as_str(), "ready")), "{states:?}");
    let collected = lab.victim_runs(&["gc", "--dry-run"]);
    assert!(collected.status.success(), "{}", describe(&collected));
}

/// An entry directory named `d` made every fingerprint prefix ambiguous.
#[test]
fn a_stray_directory_in_entries_does_not_shadow_real_entries() {
    let Some(lab) = Lab::new() else { return };
    // Named by the fingerprint's first digit, so the old prefix match took it for a candidate.
    lab.attack(&format!("mkdir {}/entries/{}", lab.env.cache().display(), &lab.short[..1]));
    let staged = lab.stage();
    assert!(staged.status.success(), "{}", describe(&staged));
}

/// `used/<fp>` -> the victim's file: each use of the entry touched it.
#[test]
fn the_used_marker_never_touches_what_a_symlink_points_at() {
    let Some(lab) = Lab::new() else { return };
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&lab.private_file).unwrap().set_modified(old).unwrap();
    let used = lab.env.cache().join("used");
    lab.attack(&format!(
        "rm -f {u}/{s} && ln -s {f} {u}/{s}",
        u = used.display(),
        s = lab.short,
        f = lab.private_file.display()
    ));
    let prepared = lab.victim_runs(&["prepare", lab.env.path("lab.toml").to_str().unwrap()]);
    assert!(prepared.status.success(), "{}", describe(&prepared));
    let modified = std::fs::metadata(&lab.private_file).unwrap().modified().unwrap();
    assert_eq!(modified, old, "the victim's file was touched through the marker");
    lab.assert_private_files_untouched();
}

/// An entry's file replaced by a symlink to a file only root reads: root's verify
/// printed its blake3.
#[test]
fn verify_never_hashes_through_a_symlink() {
    let Some(lab) = Lab::new() else { return };
    let secret = lab.env.path("root-only-secret");
    std::fs::write(&secret, b"root's secret").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let manifest = common::read_manifest(&lab.entry_dir());
    let first = manifest["files"][0]["path"].as_str().unwrap().to_string();
    lab.attack(&format!("ln -sf {} {}/{first}", secret.display(), lab.entry_dir().display()));
    // The size the manifest records is the secret's, so only the hash is left to tell.
    lab.forge_manifest(|manifest| manifest["files"][0]["size"] = b"root's secret".len().into());
    let env = &lab.env;
    let verified = env.ferry().args(["verify", &lab.short]).output().unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&verified.stdout), String::from_utf8_lossy(&verified.stderr));
    assert!(!printed.contains(blake3::hash(b"root's secret").to_hex().as_str()), "{printed}");
    assert!(printed.contains("symbolic link"), "{printed}");
    assert!(!verified.status.success());
}

/// `building`, `entries`, `by-name`, `memo`, `used` or `building/<fp>` -> the victim's
/// directory: the victim's `prepare` created its build, memo files, entry, name link
/// or use marker there, since those are written by path.
#[test]
fn prepare_writes_nothing_through_a_symlinked_cache_directory() {
    let Some(lab) = Lab::new() else { return };
    lab.env.shards("data-new", "train", 2, 30, 9);
    let spec = lab.env.write("new.toml", gpt2_spec("new", "data-new/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let probe = lab
        .env
        .ferry()
        .args(["prepare", spec.to_str().unwrap(), "--json", "--cache"])
        .arg(lab.env.path("probe"))
        .output()
        .unwrap();
    assert!(probe.status.success(), "{}", describe(&probe));
    let short = serde_json::from_slice::<serde_json::Value>(&probe.stdout).unwrap()["fingerprint"].as_str().unwrap()
        [..16]
        .to_string();
    let project = lab.private_dir.join("project");
    let cache = lab.env.cache();
    for name in ["building", "entries", "by-name", "memo", "used", &format!("building/{short}")] {
        let link = cache.join(name);
        lab.attack(&format!(
            "mkdir -p {link} && mv {link} {link}.real && ln -s {project} {link}",
            link = link.display(),
            project = project.display()
        ));
        let output = lab.victim_runs(&["prepare", spec.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(1), "{name}:\n{}", describe(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("symbolic link") && stderr.contains(name), "{name}:\n{stderr}");
        let listing: Vec<_> = std::fs::read_dir(&project).unwrap().map(|item| item.unwrap().file_name()).collect();
        assert_eq!(
            listing,
            vec![std::ffi::OsString::from("results.csv")],
            "{name}: written into the victim's directory"
        );
        lab.assert_private_files_untouched();
        lab.attack(&format!("rm {link} && mv {link}.real {link}", link = link.display()));
    }
    let output = lab.victim_runs(&["prepare", spec.to_str().unwrap()]);
    assert!(output.status.success(), "with the links gone it builds:\n{}", describe(&output));
}
