//! What the cache holds and how far builds and stagings are. Reads manifests,
//! progress and state files only: no walk of entry directories, so it stays fast
//! on a parallel filesystem.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rayon::prelude::*;
use serde::Serialize;

use crate::cache::build_progress::BuildProgress;
use crate::cache::layout::CacheLayout;
use crate::cache::layout::is_short_fingerprint;
use crate::cache::lease;
use crate::cache::liveness;
use crate::cache::manifest::{EntryKind, Manifest};
use crate::cache::staging::{self, StageState};
use crate::fsutil::untrusted;

/// The largest build progress file read; ferry's are a few hundred bytes.
const MAX_PROGRESS_BYTES: u64 = 64 << 10;

/// One published entry. Field names are part of `ferry status --json` (see README).
#[derive(Debug, Clone, Serialize)]
pub struct EntryStatus {
    pub name: String,
    pub fingerprint: String,
    pub short: String,
    pub splits: Vec<String>,
    pub rows: u64,
    pub tokens: u64,
    pub bytes: u64,
    pub created_unix: u64,
    pub last_used_unix: u64,
    pub state: EntryState,
    /// Live leases (builds or stagings using it now).
    pub in_use: usize,
    pub problem: Option<String>,
    /// `tokens` (a token store) or `view` (rows made from one, or an entry made before token stores).
    pub kind: EntryKind,
    /// A view's token store (all 64 hex digits); none for a token store or an entry
    /// made before token stores.
    pub token_store: Option<String>,
    /// Whether that token store is still in the cache (a view loads and stages without it).
    pub token_store_present: Option<bool>,
    /// A mixture's components' token stores (a mixture loads and stages without them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mixture_of: Vec<StoreUse>,
}

/// A token store a mixture was made of, and whether it is still in the cache.
#[derive(Debug, Clone, Serialize)]
pub struct StoreUse {
    /// All 64 hex digits.
    pub fingerprint: String,
    pub present: bool,
}

/// An entry's state, as `status --json` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryState {
    Ready,
    /// The manifest cannot be read.
    Invalid,
}

/// A build's state, as `status --json` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildState {
    /// A builder is alive.
    Building,
    /// Every builder is gone; gc removes it.
    Stale,
}

impl std::fmt::Display for BuildState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BuildState::Building => "building",
            BuildState::Stale => "stale",
        })
    }
}

/// A build in `building/`.
#[derive(Debug, Clone, Serialize)]
pub struct BuildStatus {
    pub short: String,
    pub name: String,
    pub state: BuildState,
    pub shards_done: u64,
    pub shards_total: u64,
    pub builders: Vec<String>,
    pub updated_unix: u64,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Totals {
    pub entries: usize,
    /// Of `entries`, the token stores; the rest are views.
    #[serde(default)]
    pub token_stores: usize,
    pub bytes: u64,
    /// Tokens in views' rows (a token store's are counted in its views).
    pub tokens: u64,
    pub builds: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheStatus {
    pub cache: String,
    pub entries: Vec<EntryStatus>,
    pub builds: Vec<BuildStatus>,
    pub totals: Totals,
}

fn unix(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Every entry's status, newest use first.
pub fn entries(cache: &CacheLayout) -> Vec<EntryStatus> {
    let Ok(dir) = std::fs::read_dir(cache.entries_dir()) else { return Vec::new() };
    let names: Vec<String> = dir
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| is_short_fingerprint(name))
        .collect();
    let mut entries: Vec<EntryStatus> = names.par_iter().map(|short| entry_status(cache, short)).collect();
    entries.sort_by(|a, b| b.last_used_unix.cmp(&a.last_used_unix).then(a.short.cmp(&b.short)));
    entries
}

fn entry_status(cache: &CacheLayout, short: &str) -> EntryStatus {
    let entry = cache.entry(short);
    let last_used = std::fs::symlink_metadata(cache.used_marker(short)).and_then(|m| m.modified()).ok().map(unix);
    // Leases that cannot be read (a symlink planted in their place) count as one use:
    // whoever is unsure must not delete.
    let in_use = lease::live_leases(cache, short).map_or(1, |leases| leases.len());
    match Manifest::load_entry(entry.root()) {
        Ok(manifest) => EntryStatus {
            name: manifest.name.clone(),
            fingerprint: manifest.fingerprint.clone(),
            short: short.to_string(),
            splits: manifest.splits.keys().cloned().collect(),
            rows: manifest.totals.counts.rows,
            tokens: manifest.totals.counts.tokens,
            bytes: manifest.totals.bytes,
            created_unix: manifest.created_unix,
            last_used_unix: last_used.unwrap_or(manifest.created_unix),
            state: EntryState::Ready,
            in_use,
            problem: None,
            kind: manifest.kind,
            token_store_present: manifest
                .token_store
                .as_ref()
                .map(|store| cache.entry(short_of(&store.fingerprint)).manifest().is_file()),
            token_store: manifest.token_store.map(|store| store.fingerprint),
            mixture_of: manifest
                .mixture
                .iter()
                .flat_map(|mixture| &mixture.components)
                .map(|component| StoreUse {
                    fingerprint: component.token_store.clone(),
                    present: cache.entry(short_of(&component.token_store)).manifest().is_file(),
                })
                .collect(),
        },
        Err(err) => {
            let modified = std::fs::symlink_metadata(entry.root()).and_then(|m| m.modified()).map(unix).unwrap_or(0);
            EntryStatus {
                name: String::new(),
                fingerprint: String::new(),
                short: short.to_string(),
                splits: Vec::new(),
                rows: 0,
                tokens: 0,
                bytes: 0,
                created_unix: modified,
                last_used_unix: last_used.unwrap_or(modified),
                state: EntryState::Invalid,
                in_use,
                problem: Some(err.to_string()),
                kind: EntryKind::View,
                token_store: None,
                token_store_present: None,
                mixture_of: Vec::new(),
            }
        }
    }
}

/// The entry directory name of a fingerprint a manifest records (untrusted: any text).
fn short_of(fingerprint: &str) -> &str {
    fingerprint.get(..16).filter(|short| is_short_fingerprint(short)).unwrap_or("-")
}

/// Builds in progress or abandoned.
///
/// A build is stale only when what it holds says so: a progress file naming a
/// holder that is gone. A build with no progress file that can be read (one being
/// set up, or one whose file another node is replacing right now, which GlusterFS
/// can answer with "not found" or a stale handle) counts as in progress while its
/// directory changed within the stale age: whoever is unsure must not delete.
pub fn builds(cache: &CacheLayout) -> Vec<BuildStatus> {
    let Ok(dir) = std::fs::read_dir(cache.building_dir()) else { return Vec::new() };
    let mut builds = Vec::new();
    for item in dir.flatten() {
        let short = item.file_name().to_string_lossy().into_owned();
        if !is_short_fingerprint(&short) {
            continue;
        }
        let build = cache.build(&short);
        let modified = item.metadata().and_then(|m| m.modified()).ok();
        let mut status = BuildStatus {
            short: short.clone(),
            name: String::new(),
            state: BuildState::Stale,
            shards_done: build.count_shard_records(),
            shards_total: 0,
            builders: Vec::new(),
            updated_unix: modified.map(unix).unwrap_or(0),
        };
        let progress_files = build.progress_files();
        let mut holder_unknown = progress_files.is_empty();
        for path in progress_files {
            let Some(progress) = untrusted::read_regular(&path, MAX_PROGRESS_BYTES)
                .ok()
                .and_then(|b| serde_json::from_slice::<BuildProgress>(&b).ok())
            else {
                holder_unknown = true;
                continue;
            };
            let age = liveness::heartbeat_age(&path);
            // Read, but replaced before its age could be: unknown, like an unreadable one.
            holder_unknown |= age.is_none();
            status.name = progress.name.clone();
            status.shards_total = status.shards_total.max(progress.shards_total);
            status.updated_unix = status.updated_unix.max(progress.updated_unix);
            if cache.liveness().holder_alive(Some((progress.host.as_str(), progress.pid)), age) {
                status.state = BuildState::Building;
                status.builders.push(format!("{}:{}", progress.host, progress.pid));
            }
        }
        // A directory whose age cannot be read is kept.
        let directory_age = modified.map(liveness::age).unwrap_or_default();
        if holder_unknown && cache.liveness().holder_alive(None, Some(directory_age)) {
            status.state = BuildState::Building;
        }
        builds.push(status);
    }
    builds.sort_by(|a, b| a.short.cmp(&b.short));
    builds
}

pub fn cache_status(cache: &CacheLayout) -> CacheStatus {
    let entries = entries(cache);
    let builds = builds(cache);
    let totals = Totals {
        entries: entries.len(),
        token_stores: entries.iter().filter(|e| e.kind == EntryKind::Tokens).count(),
        bytes: entries.iter().map(|e| e.bytes).sum(),
        tokens: entries.iter().filter(|e| e.kind == EntryKind::View).map(|e| e.tokens).sum(),
        builds: builds.len(),
    };
    CacheStatus { cache: cache.root().display().to_string(), entries, builds, totals }
}

/// This node's stagings into `dest`, with owners that died shown as failed.
pub fn staging(dest: &Path) -> Vec<StageState> {
    staging::read_all(dest)
        .into_iter()
        .map(|mut s| {
            if s.owner_died() {
                s.phase =
                    staging::Phase::Failed { error: format!("the staging process {} died before finishing", s.pid) };
            }
            s
        })
        .collect()
}
