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

use crate::cache::destination::DestLayout;
use crate::cache::layout::CacheLayout;
use crate::cache::lease;
use crate::cache::staging as state;
use crate::fsutil;
use crate::status::{self, BuildState, EntryState, EntryStatus};

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// A stage holds the destination's lock: collecting now could remove what it copies.
    #[error("a ferry stage is running into {dest}; try again when it is done")]
    Busy { dest: PathBuf },
    #[error("{doing} {path}")]
    Io { doing: &'static str, path: PathBuf, source: io::Error },
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

#[derive(Debug, Clone, Serialize)]
pub struct GcAction {
    /// "entry", "invalid_entry", "abandoned_build", "temporary_file", "trash", "link".
    pub kind: String,
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
    fn record(&mut self, kind: &str, path: &Path, name: &str, bytes: u64, reason: String) {
        self.freed_bytes += bytes;
        self.removed.push(GcAction {
            kind: kind.into(),
            path: path.display().to_string(),
            name: name.into(),
            bytes,
            reason,
        });
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

/// Moves `path` into `trash` under a unique name, then deletes it.
fn remove_via_trash(trash: &Path, path: &Path) -> io::Result<()> {
    fsutil::create_dir_all(trash)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let target = trash.join(format!("{name}.{}.{}", std::process::id(), fsutil::unique_suffix()));
    fs_err::rename(path, &target)?;
    fs_err::remove_dir_all(&target)
}

fn dir_size(path: &Path) -> u64 {
    walkdir::WalkDir::new(path)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Garbage-collects a shared cache.
pub fn collect_cache(cache: &CacheLayout, policy: &GcPolicy, dry_run: bool) -> Result<GcReport, GcError> {
    collect_cache_io(cache, policy, dry_run).map_err(|source| GcError::Io {
        doing: "collecting garbage in",
        path: cache.root().to_path_buf(),
        source,
    })
}

fn collect_cache_io(cache: &CacheLayout, policy: &GcPolicy, dry_run: bool) -> io::Result<GcReport> {
    let mut report = GcReport { dry_run, ..GcReport::default() };
    let trash = cache.trash_dir();
    // Leftovers of an interrupted gc.
    if let Ok(items) = std::fs::read_dir(&trash) {
        for item in items.flatten() {
            let bytes = dir_size(&item.path());
            if !dry_run {
                fs_err::remove_dir_all(item.path())?;
            }
            report.record("trash", &item.path(), "", bytes, "left by an interrupted gc".into());
        }
    }

    let entries = status::entries(cache);
    let mut removed_entries: HashSet<String> = HashSet::new();
    for entry in entries.iter().filter(|e| e.state != EntryState::Ready) {
        let path = cache.entry(&entry.short).root().to_path_buf();
        if entry.in_use > 0 {
            report.kept_in_use.push(entry.short.clone());
            continue;
        }
        let bytes = dir_size(&path);
        if !dry_run {
            remove_via_trash(&trash, &path)?;
        }
        removed_entries.insert(entry.short.clone());
        report.record("invalid_entry", &path, "", bytes, entry.problem.clone().unwrap_or_default());
    }
    let ready: Vec<EntryStatus> = entries.into_iter().filter(|e| e.state == EntryState::Ready).collect();
    for (index, reason) in plan_evictions(&ready, policy, SystemTime::now()) {
        let entry = &ready[index];
        let path = cache.entry(&entry.short).root().to_path_buf();
        if !lease::live_leases(cache, &entry.short).is_empty() {
            report.kept_in_use.push(entry.short.clone());
            continue;
        }
        if !dry_run && !evict_entry(cache, &entry.short)? {
            report.kept_in_use.push(entry.short.clone());
            continue;
        }
        removed_entries.insert(entry.short.clone());
        report.record("entry", &path, &entry.name, entry.bytes, reason);
    }
    report.remaining_bytes = ready.iter().filter(|e| !removed_entries.contains(&e.short)).map(|e| e.bytes).sum();

    for build in status::builds(cache).into_iter().filter(|b| b.state == BuildState::Stale) {
        if !lease::live_leases(cache, &build.short).is_empty() {
            continue;
        }
        let path = cache.build(&build.short).root().to_path_buf();
        let bytes = dir_size(&path);
        if !dry_run {
            remove_via_trash(&trash, &path)?;
            lease::remove_dead_leases(cache, &build.short);
        }
        report.record("abandoned_build", &path, &build.name, bytes, "its builder is gone".into());
    }

    for dir in
        [cache.entries_dir(), cache.by_name_dir(), cache.memo_dir(), cache.used_dir(), cache.root().to_path_buf()]
    {
        remove_old_temporaries(&dir, dry_run, &mut report)?;
    }
    let remaining: Vec<&EntryStatus> = ready.iter().filter(|e| !removed_entries.contains(&e.short)).collect();
    relink_names(cache, &removed_entries, &remaining, dry_run, &mut report)?;
    Ok(report)
}

/// Renames the entry into the trash unless a lease appeared meanwhile (then it
/// is put back). Returns whether it was removed.
fn evict_entry(cache: &CacheLayout, short: &str) -> io::Result<bool> {
    let path = cache.entry(short).root().to_path_buf();
    fsutil::create_dir_all(&cache.trash_dir())?;
    let parked = cache.trash_dir().join(format!("{short}.{}.{}", std::process::id(), fsutil::unique_suffix()));
    fs_err::rename(&path, &parked)?;
    if !lease::live_leases(cache, short).is_empty() {
        // A stage or build started between the check and the rename: give it back.
        fs_err::rename(&parked, &path)?;
        return Ok(false);
    }
    fs_err::remove_dir_all(&parked)?;
    let _ = std::fs::remove_file(cache.used_marker(short));
    lease::remove_dead_leases(cache, short);
    let _ = std::fs::remove_dir(cache.leases(short));
    Ok(true)
}

fn remove_old_temporaries(dir: &Path, dry_run: bool, report: &mut GcReport) -> io::Result<()> {
    let Ok(items) = std::fs::read_dir(dir) else { return Ok(()) };
    for item in items.flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        let Ok(meta) = item.path().symlink_metadata() else { continue };
        let old = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age > TEMP_GRACE);
        if name.starts_with(".tmp-") && old && !meta.is_dir() {
            if !dry_run {
                fs_err::remove_file(item.path())?;
            }
            report.record("temporary_file", &item.path(), "", meta.len(), "orphaned temporary file".into());
        }
    }
    Ok(())
}

/// Points each `by-name` link whose entry is gone at the newest remaining entry of
/// that name, or removes it.
fn relink_names(
    cache: &CacheLayout,
    removed: &HashSet<String>,
    remaining: &[&EntryStatus],
    dry_run: bool,
    report: &mut GcReport,
) -> io::Result<()> {
    let Ok(links) = std::fs::read_dir(cache.by_name_dir()) else { return Ok(()) };
    for link in links.flatten() {
        let name = link.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let Ok(target) = std::fs::read_link(link.path()) else { continue };
        let short = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let alive = !removed.contains(&short) && cache.entry(&short).manifest().exists();
        if alive {
            continue;
        }
        let newest = remaining.iter().filter(|e| e.name == name).max_by_key(|e| e.created_unix);
        match newest {
            Some(entry) => {
                if !dry_run {
                    fsutil::replace_symlink(&CacheLayout::by_name_target(&entry.short), &link.path())?;
                }
                report.record("link", &link.path(), &name, 0, format!("re-pointed to {}", entry.short));
            }
            None => {
                if !dry_run {
                    fs_err::remove_file(link.path())?;
                }
                report.record("link", &link.path(), &name, 0, "no entry of that name is left".into());
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
    // A destination never staged into has no lock file, but one that does not exist is a wrong --dest.
    std::fs::metadata(dest).map_err(|source| GcError::Io { doing: "cleaning", path: dest.to_path_buf(), source })?;
    let lock_path = state::lock_path(dest);
    let lock = std::fs::File::options().create(true).truncate(false).write(true).open(&lock_path);
    let Ok(lock) = lock else {
        return Ok(report);
    };
    use rustix::fs::{FlockOperation, flock};
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(GcError::Busy { dest: dest.to_path_buf() });
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| GcError::Io { doing: "cleaning", path, source }
    };
    let states = state::read_all(dest);
    let layout = DestLayout::new(dest);
    let entries_dir = layout.mirror().entries_dir();
    let mut staged = staged_entries(&entries_dir, &states, dry_run, &mut report)?;
    staged.sort_by_key(|e| std::cmp::Reverse(e.last_used_unix));
    for (index, reason) in plan_evictions(&staged, policy, SystemTime::now()) {
        let entry = &staged[index];
        let path = entries_dir.join(&entry.short);
        let source =
            states.iter().find(|s| s.id == entry.short).map(|s| PathBuf::from(&s.source)).filter(|p| p.is_dir());
        if !dry_run {
            remove_via_trash(&layout.trash_dir(), &path).map_err(io(&path))?;
            match &source {
                Some(source) => fsutil::replace_symlink(source, &path).map_err(io(&path))?,
                None => {
                    let _ = std::fs::remove_file(state::state_path(dest, &entry.short));
                }
            }
        }
        report.record("entry", &path, &entry.name, entry.bytes, reason);
    }
    report.remaining_bytes = staged.iter().map(|e| e.bytes).sum::<u64>() - report.freed_bytes;
    if !dry_run {
        crate::cache::destination::remove_stale_temps(&entries_dir);
    }
    for link in std::fs::read_dir(layout.mirror().by_name_dir()).into_iter().flatten().flatten() {
        if !link.path().exists() {
            if !dry_run {
                std::fs::remove_file(link.path()).map_err(io(&link.path()))?;
            }
            report.record("link", &link.path(), &link.file_name().to_string_lossy(), 0, "its entry is gone".into());
        }
    }
    Ok(report)
}

/// The copies staged in `entries_dir`, each as old as its last staging; links
/// whose cache entry is gone are removed on the way.
fn staged_entries(
    entries_dir: &Path,
    states: &[state::StageState],
    dry_run: bool,
    report: &mut GcReport,
) -> Result<Vec<EntryStatus>, GcError> {
    let mut staged: Vec<EntryStatus> = Vec::new();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| GcError::Io { doing: "cleaning", path, source }
    };
    for item in std::fs::read_dir(entries_dir).into_iter().flatten().flatten() {
        let path = item.path();
        let short = item.file_name().to_string_lossy().into_owned();
        let Ok(meta) = path.symlink_metadata() else { continue };
        if meta.file_type().is_symlink() {
            if !path.exists() {
                if !dry_run {
                    std::fs::remove_file(&path).map_err(io(&path))?;
                }
                report.record("link", &path, "", 0, "its cache entry is gone".into());
            }
            continue;
        }
        let state = states.iter().find(|s| s.id == short);
        let last_used = state.map(|s| s.updated_unix).unwrap_or_else(|| {
            meta.modified().ok().and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs())
        });
        staged.push(EntryStatus {
            name: state.map(|s| s.name.clone()).unwrap_or_default(),
            fingerprint: String::new(),
            short,
            splits: Vec::new(),
            rows: 0,
            tokens: 0,
            bytes: dir_size(&path),
            created_unix: last_used,
            last_used_unix: last_used,
            state: EntryState::Ready,
            in_use: 0,
            problem: None,
        });
    }
    Ok(staged)
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
