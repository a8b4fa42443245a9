//! Keeps a cache (or a node-local destination) within bounds: evicts least
//! recently used entries by policy, never one with a live lease; reclaims
//! abandoned builds, orphaned temporary files and unreadable (older-format)
//! entries; keeps `by-name` links pointing at entries that exist.
//!
//! Deletion renames into `trash/` first, so a racing reader sees the whole entry
//! or none of it.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::cache::destination::{self, CONTROL_DIR, DestLayout};
use crate::cache::layout::{
    BUILDING_DIR, BY_NAME_DIR, CacheLayout, ENTRIES_DIR, MANIFEST_FILE, MEMO_DIR, TRASH_DIR, USED_DIR,
};
use crate::cache::lease;
use crate::cache::liveness;
use crate::cache::manifest::Manifest;
use crate::cache::staging;
use crate::errors::{Failure, Fault, IoError};
use crate::fsutil;
use crate::fsutil::untrusted::Dir;
use crate::status::{self, BuildState, EntryState, EntryStatus};

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// A stage holds the destination's lock: collecting now could remove what it copies.
    #[error("a ferry stage is running into {dest}; try again when it is done")]
    Busy { dest: PathBuf },
    #[error(transparent)]
    Io(#[from] IoError),
}

/// What to keep. Every bound is optional; an entry is evicted if any bound asks.
#[derive(Debug, Clone, Default)]
pub struct GcPolicy {
    /// Total bytes of entries to stay under (least recently used go first).
    pub max_size: Option<u64>,
    /// Entries not used for longer are evicted.
    pub max_age: Option<Duration>,
    /// At most this many entries (the most recently used) are kept.
    pub keep: Option<usize>,
}

/// What one removal was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GcActionKind {
    /// An entry evicted by the policy.
    Entry,
    /// An entry whose manifest cannot be read.
    InvalidEntry,
    /// A build whose builders are all gone.
    AbandonedBuild,
    /// A temporary file a killed writer left.
    TemporaryFile,
    /// What an interrupted gc left in the trash.
    Trash,
    /// A `by-name` link re-pointed or removed.
    Link,
}

impl std::fmt::Display for GcActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GcActionKind::Entry => "entry",
            GcActionKind::InvalidEntry => "invalid entry",
            GcActionKind::AbandonedBuild => "abandoned build",
            GcActionKind::TemporaryFile => "temporary file",
            GcActionKind::Trash => "trash",
            GcActionKind::Link => "link",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct GcAction {
    pub kind: GcActionKind,
    pub path: String,
    pub name: String,
    pub bytes: u64,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub removed: Vec<GcAction>,
    /// Entries the policy would evict but a live lease protects.
    pub kept_in_use: Vec<String>,
    pub freed_bytes: u64,
    pub remaining_bytes: u64,
}

impl GcReport {
    fn record(&mut self, kind: GcActionKind, path: &Path, name: &str, bytes: u64, reason: String) {
        self.freed_bytes += bytes;
        self.removed.push(GcAction { kind, path: path.display().to_string(), name: name.into(), bytes, reason });
    }
}

/// Temporary files younger than this may belong to a writer still at work.
const TEMP_GRACE: Duration = Duration::from_secs(3600);

/// Which entries the policy evicts, oldest use last in `entries` (newest first).
fn plan_evictions(entries: &[EntryStatus], policy: &GcPolicy, now: SystemTime) -> Vec<(usize, String)> {
    let mut evict: Vec<Option<String>> = vec![None; entries.len()];
    for (index, entry) in entries.iter().enumerate() {
        if policy.keep.is_some_and(|keep| index >= keep) {
            evict[index] = Some(format!("beyond the {} most recently used", policy.keep.unwrap_or(0)));
        }
        let used = SystemTime::UNIX_EPOCH + Duration::from_secs(entry.last_used_unix);
        if let Some(max_age) = policy.max_age
            && now.duration_since(used).is_ok_and(|age| age > max_age)
        {
            evict[index] = Some(format!("unused for more than {}", humantime::format_duration(max_age)));
        }
    }
    if let Some(max_size) = policy.max_size {
        let mut total: u64 =
            entries.iter().zip(&evict).filter(|(_, e)| e.is_none()).map(|(entry, _)| entry.bytes).sum();
        for index in (0..entries.len()).rev() {
            if total <= max_size {
                break;
            }
            if evict[index].is_none() && entries[index].in_use == 0 {
                total -= entries[index].bytes;
                evict[index] = Some(format!("the cache is over {}", bytesize::ByteSize(max_size)));
            }
        }
    }
    evict.into_iter().enumerate().filter_map(|(index, reason)| reason.map(|r| (index, r))).collect()
}

/// Renames `name` out of `from` into `trash`, under a name there that no other gc
/// uses, and returns that name: a racing reader sees the whole tree or none of it.
/// Both directories are descriptors, so nothing is ever moved through a symlink.
fn park(from: &Dir, name: &str, trash: &Dir) -> io::Result<String> {
    let parked = format!("{name}.{}.{}", fsutil::whoami().pid, fsutil::unique_suffix());
    if !from.rename_no_replace(name, trash, &parked)? {
        return Err(io::Error::other(format!("{} exists already", trash.display_path(&parked).display())));
    }
    Ok(parked)
}

/// Parks `name` (see `park`), then deletes it in the trash.
fn discard(from: &Dir, name: &str, trash: &Dir) -> io::Result<()> {
    trash.remove_tree(&park(from, name, trash)?)
}

/// Whether `lease` says nobody uses the entry. Leases that cannot be read (a
/// symlink planted where they belong) keep the entry: whoever is unsure must not delete.
fn unused(leases: io::Result<Vec<Option<lease::LeaseInfo>>>) -> bool {
    leases.is_ok_and(|leases| leases.is_empty())
}

/// Garbage-collects a shared cache.
pub fn collect_cache(cache: &CacheLayout, policy: &GcPolicy, dry_run: bool) -> Result<GcReport, GcError> {
    Ok(collect_cache_io(cache, policy, dry_run).map_err(IoError::at("collecting garbage in", cache.root()))?)
}

/// The cache's directories, each opened once without following symlinks: anyone
/// who can write to a shared cache could have put a symlink in place of one.
struct CacheDirs {
    root: Dir,
    entries: Option<Dir>,
    building: Option<Dir>,
}

impl CacheDirs {
    fn open(cache: &CacheLayout) -> io::Result<CacheDirs> {
        let root = Dir::open(cache.root())?;
        let entries = root.open_dir_if_exists(ENTRIES_DIR)?;
        let building = root.open_dir_if_exists(BUILDING_DIR)?;
        Ok(CacheDirs { root, entries, building })
    }

    fn trash(&self) -> io::Result<Dir> {
        self.root.create_dir(TRASH_DIR)
    }
}

/// Removes what an interrupted gc left in the trash. What another gc parked
/// moments ago (its rename set the change time) is left to it: it may be giving
/// it back.
fn remove_leftover_trash(
    cache: &CacheLayout,
    dirs: &CacheDirs,
    dry_run: bool,
    report: &mut GcReport,
) -> io::Result<()> {
    let Some(trash) = dirs.root.open_dir_if_exists(TRASH_DIR)? else { return Ok(()) };
    for item in trash.list()? {
        let Ok(stat) = trash.stat(&item.name) else { continue };
        if liveness::age_of_stamp(stat.st_ctime) < cache.liveness().stale_age {
            continue;
        }
        let bytes = trash.tree_size(&item.name);
        if !dry_run {
            trash.remove_tree(&item.name)?;
        }
        let path = trash.display_path(&item.name);
        report.record(GcActionKind::Trash, &path, "", bytes, "left by an interrupted gc".into());
    }
    Ok(())
}

fn collect_cache_io(cache: &CacheLayout, policy: &GcPolicy, dry_run: bool) -> io::Result<GcReport> {
    let mut report = GcReport { dry_run, ..GcReport::default() };
    let dirs = CacheDirs::open(cache)?;
    remove_leftover_trash(cache, &dirs, dry_run, &mut report)?;

    let entries = status::entries(cache);
    let mut removed_entries: HashSet<String> = HashSet::new();
    if let Some(entries_dir) = &dirs.entries {
        for entry in entries.iter().filter(|e| e.state != EntryState::Ready) {
            if entry.in_use > 0 {
                report.kept_in_use.push(entry.short.clone());
                continue;
            }
            // A manifest another node's client failed to read for a moment reads now.
            if Manifest::load_entry(cache.entry(&entry.short).root()).is_ok() {
                continue;
            }
            let bytes = entries_dir.tree_size(&entry.short);
            if !dry_run && !discard_unless_leased(cache, &dirs.trash()?, entries_dir, &entry.short)? {
                report.kept_in_use.push(entry.short.clone());
                continue;
            }
            removed_entries.insert(entry.short.clone());
            let path = entries_dir.display_path(&entry.short);
            report.record(GcActionKind::InvalidEntry, &path, "", bytes, entry.problem.clone().unwrap_or_default());
        }
    }
    let ready: Vec<EntryStatus> = entries.into_iter().filter(|e| e.state == EntryState::Ready).collect();
    for (index, reason) in plan_evictions(&ready, policy, SystemTime::now()) {
        let entry = &ready[index];
        let Some(entries_dir) = &dirs.entries else { break };
        if !unused(lease::live_leases(cache, &entry.short)) {
            report.kept_in_use.push(entry.short.clone());
            continue;
        }
        if !dry_run && !evict_entry(cache, &dirs, entries_dir, &entry.short)? {
            report.kept_in_use.push(entry.short.clone());
            continue;
        }
        removed_entries.insert(entry.short.clone());
        let path = entries_dir.display_path(&entry.short);
        report.record(GcActionKind::Entry, &path, &entry.name, entry.bytes, reason);
    }
    report.remaining_bytes = ready.iter().filter(|e| !removed_entries.contains(&e.short)).map(|e| e.bytes).sum();

    if let Some(building) = &dirs.building {
        for build in status::builds(cache).into_iter().filter(|b| b.state == BuildState::Stale) {
            if !unused(lease::live_leases(cache, &build.short)) {
                continue;
            }
            let bytes = building.tree_size(&build.short);
            if !dry_run {
                if !discard_unless_leased(cache, &dirs.trash()?, building, &build.short)? {
                    continue;
                }
                lease::remove_dead_leases(cache, &build.short);
            }
            let path = building.display_path(&build.short);
            report.record(GcActionKind::AbandonedBuild, &path, &build.name, bytes, "its builder is gone".into());
        }
    }

    remove_old_temporaries(&dirs.root, dry_run, &mut report)?;
    for name in [ENTRIES_DIR, BY_NAME_DIR, MEMO_DIR, USED_DIR] {
        if let Some(dir) = dirs.root.open_dir_if_exists(name)? {
            remove_old_temporaries(&dir, dry_run, &mut report)?;
        }
    }
    let remaining: Vec<&EntryStatus> = ready.iter().filter(|e| !removed_entries.contains(&e.short)).collect();
    if let Some(by_name) = dirs.root.open_dir_if_exists(BY_NAME_DIR)? {
        relink_names(&by_name, dirs.entries.as_ref(), &removed_entries, &remaining, dry_run, &mut report)?;
    }
    Ok(report)
}

/// Removes one entry now, whatever the policy, unless a live lease holds it
/// (`prepare --rebuild-tokens`). Returns whether it was removed.
pub fn evict(cache: &CacheLayout, short: &str) -> Result<bool, GcError> {
    let evict_io = || -> io::Result<bool> {
        let dirs = CacheDirs::open(cache)?;
        let Some(entries_dir) = &dirs.entries else { return Ok(false) };
        if !unused(lease::live_leases(cache, short)) {
            return Ok(false);
        }
        evict_entry(cache, &dirs, entries_dir, short)
    };
    Ok(evict_io().map_err(IoError::at("removing an entry from", cache.root()))?)
}

/// Renames the entry into the trash unless a lease appeared meanwhile (then it
/// is put back). Returns whether it was removed.
fn evict_entry(cache: &CacheLayout, dirs: &CacheDirs, entries_dir: &Dir, short: &str) -> io::Result<bool> {
    if !discard_unless_leased(cache, &dirs.trash()?, entries_dir, short)? {
        return Ok(false);
    }
    if let Ok(Some(used)) = dirs.root.open_dir_if_exists(USED_DIR) {
        let _ = used.remove_file(short);
    }
    lease::remove_dead_leases(cache, short);
    lease::remove_lease_dir(cache, short);
    Ok(true)
}

/// Renames `short` out of `from` into the trash and deletes it there, unless a
/// lease on it appeared between the caller's check and the rename: then it goes
/// back, and this returns false. A holder takes its lease before it creates or
/// uses the directory, so a lease missed by the check is seen here.
fn discard_unless_leased(cache: &CacheLayout, trash: &Dir, from: &Dir, short: &str) -> io::Result<bool> {
    let parked = park(from, short, trash)?;
    if !unused(lease::live_leases(cache, short)) {
        // The new holder may have made the directory afresh meanwhile; then it keeps
        // its own and the parked one is deleted.
        if !trash.rename_no_replace(&parked, from, short)? {
            trash.remove_tree(&parked)?;
        }
        return Ok(false);
    }
    trash.remove_tree(&parked)?;
    Ok(true)
}

fn remove_old_temporaries(dir: &Dir, dry_run: bool, report: &mut GcReport) -> io::Result<()> {
    for item in dir.list()? {
        if !item.name.starts_with(fsutil::TEMP_PREFIX) || item.is_dir() {
            continue;
        }
        let Ok(stat) = dir.stat(&item.name) else { continue };
        if liveness::age_of_stamp(stat.st_mtime) > TEMP_GRACE {
            if !dry_run {
                dir.remove_file(&item.name)?;
            }
            let path = dir.display_path(&item.name);
            report.record(
                GcActionKind::TemporaryFile,
                &path,
                "",
                stat.st_size as u64,
                "orphaned temporary file".into(),
            );
        }
    }
    Ok(())
}

/// Points each `by-name` link whose entry is gone at the newest remaining entry of
/// that name, or removes it. A link ferry did not write (any target but
/// `../entries/<fp16>`) counts as pointing nowhere.
fn relink_names(
    by_name: &Dir,
    entries_dir: Option<&Dir>,
    removed: &HashSet<String>,
    remaining: &[&EntryStatus],
    dry_run: bool,
    report: &mut GcReport,
) -> io::Result<()> {
    for link in by_name.list()? {
        let name = &link.name;
        if name.starts_with('.') || link.kind != rustix::fs::FileType::Symlink {
            continue;
        }
        let target = by_name.read_link(name)?;
        let alive = CacheLayout::by_name_entry(&target).is_some_and(|short| {
            !removed.contains(short)
                && entries_dir.is_some_and(|dir| dir.stat(Path::new(short).join(MANIFEST_FILE)).is_ok())
        });
        if alive {
            continue;
        }
        let path = by_name.display_path(name);
        match remaining.iter().filter(|e| &e.name == name).max_by_key(|e| e.created_unix) {
            Some(entry) => {
                if !dry_run {
                    by_name.replace_symlink(name, &CacheLayout::by_name_target(&entry.short))?;
                }
                report.record(GcActionKind::Link, &path, name, 0, format!("re-pointed to {}", entry.short));
            }
            None => {
                if !dry_run {
                    by_name.remove_file(name)?;
                }
                report.record(GcActionKind::Link, &path, name, 0, "no entry of that name is left".into());
            }
        }
    }
    Ok(())
}

/// Garbage-collects a node-local destination: staged copies evicted by the policy
/// become symlinks to the cache again (or go when the cache entry is gone);
/// dangling links and temporaries of killed stages are removed.
pub fn collect_destination(dest: &Path, policy: &GcPolicy, dry_run: bool) -> Result<GcReport, GcError> {
    let mut report = GcReport { dry_run, ..GcReport::default() };
    let layout = DestLayout::new(dest);
    // A destination that does not exist is a wrong --dest (named once, here).
    std::fs::metadata(dest).map_err(IoError::at("cleaning", dest))?;
    let root = Dir::open(dest).map_err(IoError::at("cleaning", dest))?;
    // A destination never staged into has nothing to collect.
    if root.open_dir_if_exists(CONTROL_DIR).map_err(IoError::at("cleaning", dest))?.is_none() {
        return Ok(report);
    }
    let Some(_lock) = destination::lock(dest, false).map_err(IoError::at("cleaning", dest))? else {
        return Err(GcError::Busy { dest: dest.to_path_buf() });
    };
    let states = staging::read_all(dest);
    let Some(entries) = root.open_dir_if_exists(ENTRIES_DIR).map_err(IoError::at("cleaning", dest))? else {
        return Ok(report);
    };
    let mut staged =
        staged_entries(&entries, &states, dry_run, &mut report).map_err(IoError::at("cleaning", entries.path()))?;
    staged.sort_by_key(|e| std::cmp::Reverse(e.last_used_unix));
    for (index, reason) in plan_evictions(&staged, policy, SystemTime::now()) {
        let entry = &staged[index];
        let path = entries.display_path(&entry.short);
        let source =
            states.iter().find(|s| s.id == entry.short).map(|s| PathBuf::from(&s.source)).filter(|p| p.is_dir());
        if !dry_run {
            let trash = root.create_dir(CONTROL_DIR).and_then(|control| control.create_dir(TRASH_DIR));
            trash.and_then(|trash| discard(&entries, &entry.short, &trash)).map_err(IoError::at("cleaning", &path))?;
            match &source {
                Some(source) => {
                    entries.replace_symlink(&entry.short, source).map_err(IoError::at("cleaning", &path))?
                }
                None => {
                    let _ = std::fs::remove_file(staging::state_path(dest, &entry.short));
                }
            }
        }
        report.record(GcActionKind::Entry, &path, &entry.name, entry.bytes, reason);
    }
    report.remaining_bytes = staged.iter().map(|e| e.bytes).sum::<u64>() - report.freed_bytes;
    if !dry_run {
        crate::cache::destination::remove_stale_temps(&layout.mirror().entries_dir());
    }
    if let Some(by_name) = root.open_dir_if_exists(BY_NAME_DIR).map_err(IoError::at("cleaning", dest))? {
        for link in by_name.list().map_err(IoError::at("cleaning", by_name.path()))? {
            let path = by_name.display_path(&link.name);
            if path.exists() {
                continue;
            }
            if !dry_run {
                by_name.remove_file(&link.name).map_err(IoError::at("cleaning", &path))?;
            }
            report.record(GcActionKind::Link, &path, &link.name, 0, "its entry is gone".into());
        }
    }
    Ok(report)
}

/// The copies staged in `entries`, each as old as its last staging; links whose
/// cache entry is gone are removed on the way.
fn staged_entries(
    entries: &Dir,
    states: &[staging::StageState],
    dry_run: bool,
    report: &mut GcReport,
) -> io::Result<Vec<EntryStatus>> {
    let mut staged: Vec<EntryStatus> = Vec::new();
    for item in entries.list()? {
        let path = entries.display_path(&item.name);
        if item.kind == rustix::fs::FileType::Symlink {
            if !path.exists() {
                if !dry_run {
                    entries.remove_file(&item.name)?;
                }
                report.record(GcActionKind::Link, &path, "", 0, "its cache entry is gone".into());
            }
            continue;
        }
        if !item.is_dir() {
            continue;
        }
        let state = states.iter().find(|s| s.id == item.name);
        let modified = || entries.stat(&item.name).map_or(0, |stat| stat.st_mtime.max(0) as u64);
        let last_used = state.map_or_else(modified, |s| s.updated_unix);
        staged.push(EntryStatus {
            name: state.map(|s| s.name.clone()).unwrap_or_default(),
            fingerprint: String::new(),
            short: item.name.clone(),
            splits: Vec::new(),
            rows: 0,
            tokens: 0,
            bytes: entries.tree_size(&item.name),
            created_unix: last_used,
            last_used_unix: last_used,
            state: EntryState::Ready,
            in_use: 0,
            problem: None,
            kind: crate::cache::manifest::EntryKind::View,
            token_store: None,
            token_store_present: None,
            mixture_of: Vec::new(),
        });
    }
    Ok(staged)
}

impl Failure for GcError {
    fn fault(&self) -> Fault {
        match self {
            GcError::Busy { .. } => Fault::User,
            GcError::Io(_) => Fault::Cause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(short: &str, bytes: u64, days_ago: u64, in_use: usize) -> EntryStatus {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        EntryStatus {
            name: short.into(),
            fingerprint: short.into(),
            short: short.into(),
            splits: vec![],
            rows: 0,
            tokens: 0,
            bytes,
            created_unix: 0,
            last_used_unix: now - days_ago * 86400,
            state: EntryState::Ready,
            in_use,
            problem: None,
            kind: crate::cache::manifest::EntryKind::View,
            token_store: None,
            token_store_present: None,
            mixture_of: Vec::new(),
        }
    }

    fn evicted(entries: &[EntryStatus], policy: GcPolicy) -> Vec<&str> {
        plan_evictions(entries, &policy, SystemTime::now())
            .into_iter()
            .map(|(i, _)| entries[i].short.as_str())
            .collect()
    }

    #[test]
    fn policies_evict_least_recently_used_first() {
        // Newest use first, as status::entries sorts them.
        let entries =
            vec![entry("a", 100, 0, 0), entry("b", 100, 5, 0), entry("c", 100, 40, 0), entry("d", 100, 60, 0)];
        assert_eq!(evicted(&entries, GcPolicy { keep: Some(2), ..Default::default() }), ["c", "d"]);
        assert_eq!(
            evicted(&entries, GcPolicy { max_age: Some(Duration::from_secs(30 * 86400)), ..Default::default() }),
            ["c", "d"]
        );
        assert_eq!(evicted(&entries, GcPolicy { max_size: Some(250), ..Default::default() }), ["c", "d"]);
        assert_eq!(evicted(&entries, GcPolicy { max_size: Some(400), ..Default::default() }), Vec::<&str>::new());
    }

    #[test]
    fn size_policy_skips_entries_in_use_and_takes_the_next_oldest() {
        let entries = vec![entry("a", 100, 0, 0), entry("b", 100, 5, 0), entry("c", 100, 60, 1)];
        assert_eq!(evicted(&entries, GcPolicy { max_size: Some(250), ..Default::default() }), ["b"]);
    }
}
