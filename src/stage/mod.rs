//! `stage`: mirror the cache into a node-local destination as symlinks and copy
//! the active entry's files in, safely re-runnable and resumable.
//!
//! One stager at a time per destination: an exclusive `flock` on
//! `<dest>/.ferry/stage.lock` (the destination is node-local, and the kernel
//! releases the lock when its holder dies). Others wait for it, then find the
//! files complete and copy nothing.

pub mod command;
pub mod copy;
pub mod landing;
pub mod mirror;
pub use crate::cache::staging as state;

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::cache::destination::DestLayout;
use crate::cache::layout::{CacheLayout, MANIFEST_FILE};
use crate::cache::lease::Lease;
use crate::cache::manifest::Manifest;
use crate::fsutil;
use crate::progress::{self, ProgressMode, Reporter};
use crate::ticker::Ticker;
use copy::{CopyCounters, CopyError, CopyJob};
use state::{Phase, StageState};

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(
        "not enough space in {dest}: staging needs {needed}, {available} available; free space there or stage to another --dest"
    )]
    NoSpace { dest: PathBuf, needed: bytesize::ByteSize, available: bytesize::ByteSize },
    #[error("{doing} {path}")]
    Io { doing: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{count} file(s) failed to stage into {dest}; the first one")]
    Copy {
        dest: PathBuf,
        count: usize,
        #[source]
        first: CopyError,
    },
    #[error("--files-from lists no file; refusing to guess (an empty list never means \"copy everything\")")]
    EmptyList,
    #[error("--files-from line {line}: {path:?} is not a relative path inside {src}")]
    OutsideSource { line: usize, path: String, src: PathBuf },
    #[error("--files-from line {line}: {path} is not a regular file")]
    NotAFile { line: usize, path: PathBuf },
}

impl StageError {
    fn io<'a>(doing: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StageError + 'a {
        move |source| StageError::Io { doing, path: path.to_path_buf(), source }
    }
}

/// One file to stage, relative to the source and destination roots.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    pub relative: String,
    pub size: u64,
    pub blake3: Option<String>,
}

impl PlannedFile {
    /// The directory it sits in, relative like the file.
    fn parent(&self) -> &Path {
        Path::new(&self.relative).parent().unwrap_or(Path::new(""))
    }
}

/// What to stage.
pub struct StagePlan {
    /// Short fingerprint, or `dropin-<hash>`.
    pub id: String,
    pub name: String,
    pub source_root: PathBuf,
    /// Where the files land: `<dest>/entries/<fp16>`, or `<dest>` in drop-in mode.
    pub dest_root: PathBuf,
    pub files: Vec<PlannedFile>,
    pub kind: PlanKind,
}

pub enum PlanKind {
    /// A cache entry: mirror the rest of the cache too, and hold a lease.
    Entry { cache: CacheLayout },
    /// An existing Hugging Face cache directory mirrored file by file.
    DropIn,
}

#[derive(Debug, Clone)]
pub struct StageOptions {
    pub dest: PathBuf,
    /// Copies in flight.
    pub threads: usize,
    pub verify: bool,
    pub progress: ProgressMode,
}

/// What a finished staging did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StageReport {
    #[serde(flatten)]
    pub state: StageState,
    pub files_copied: u64,
    pub files_skipped: u64,
    pub seconds: f64,
    pub dest_root: PathBuf,
    pub waited_for_another_stager: bool,
}

/// The plan for a published cache entry: every file of the manifest, and the manifest.
pub fn plan_entry(cache: &CacheLayout, manifest: &Manifest, dest: &Path) -> Result<StagePlan, StageError> {
    let short = manifest.short_fingerprint().to_string();
    let source_root = absolute(cache.entry(&short).root());
    let manifest_path = source_root.join(MANIFEST_FILE);
    let manifest_size = std::fs::metadata(&manifest_path).map_err(StageError::io("reading", &manifest_path))?.len();
    let mut files: Vec<PlannedFile> = manifest
        .files
        .iter()
        .map(|f| PlannedFile { relative: f.path.clone(), size: f.size, blake3: Some(f.blake3.clone()) })
        .collect();
    files.push(PlannedFile { relative: MANIFEST_FILE.into(), size: manifest_size, blake3: None });
    Ok(StagePlan {
        id: short.clone(),
        name: manifest.name.clone(),
        source_root,
        dest_root: DestLayout::new(dest).mirror().entry(&short).root().to_path_buf(),
        files,
        kind: PlanKind::Entry { cache: CacheLayout::new(absolute(cache.root())) },
    })
}

/// How drop-in stagings' ids begin (entries are named by their fingerprint).
pub const DROP_IN_PREFIX: &str = "dropin-";

/// The plan for drop-in mode: `list` holds relative paths inside `src`, one per
/// line. The listed files are looked up `threads` at a time, since each lookup
/// may wait on a network filesystem.
pub fn plan_drop_in(src: &Path, list: &str, dest: &Path, threads: usize) -> Result<StagePlan, StageError> {
    let src = absolute(src);
    let mut listed = Vec::new();
    for (index, line) in list.lines().enumerate() {
        let relative = line.trim();
        if relative.is_empty() {
            continue;
        }
        let path = Path::new(relative);
        if path.is_absolute() || path.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return Err(StageError::OutsideSource { line: index + 1, path: relative.to_string(), src: src.clone() });
        }
        listed.push((index + 1, relative));
    }
    let look_up = || {
        listed
            .par_iter()
            .map(|&(line, relative)| {
                let source = src.join(relative);
                match std::fs::metadata(&source) {
                    Ok(meta) if meta.is_file() => {
                        Ok(PlannedFile { relative: relative.to_string(), size: meta.len(), blake3: None })
                    }
                    _ => Err(StageError::NotAFile { line, path: source }),
                }
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let files = match rayon::ThreadPoolBuilder::new().num_threads(threads.max(1)).build() {
        Ok(pool) => pool.install(look_up)?,
        Err(_) => look_up()?,
    };
    if files.is_empty() {
        return Err(StageError::EmptyList);
    }
    let id = format!("{DROP_IN_PREFIX}{}", &blake3::hash(src.as_os_str().as_encoded_bytes()).to_hex()[..16]);
    let name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(StagePlan { id, name, source_root: src, dest_root: dest.to_path_buf(), files, kind: PlanKind::DropIn })
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether the destination already holds this file complete (a regular file of
/// the right size; with `verify`, also the right blake3).
fn is_complete(plan: &StagePlan, file: &PlannedFile, verify: bool) -> bool {
    let path = plan.dest_root.join(&file.relative);
    let complete = path.symlink_metadata().is_ok_and(|m| m.file_type().is_file() && m.len() == file.size);
    match (&file.blake3, verify && complete) {
        (Some(expected), true) => hash_file(&path).is_ok_and(|found| found == *expected),
        _ => complete,
    }
}

fn is_regular(path: &Path) -> bool {
    path.symlink_metadata().is_ok_and(|m| m.file_type().is_file())
}

fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut hasher = blake3::Hasher::new();
    hasher.update_mmap(path)?;
    Ok(hasher.finalize().to_hex().to_string())
}

/// Checks `needed` bytes against the free space on the destination's filesystem.
fn check_free(dest: &Path, needed: u64) -> Result<(), StageError> {
    let mut probe = dest.to_path_buf();
    while !probe.exists() {
        if !probe.pop() {
            break;
        }
    }
    let available = fsutil::available_bytes(&probe).map_err(StageError::io("checking free space on", &probe))?;
    if needed > available {
        return Err(StageError::NoSpace {
            dest: dest.to_path_buf(),
            needed: bytesize::ByteSize(needed),
            available: bytesize::ByteSize(available),
        });
    }
    Ok(())
}

/// Takes the destination's stage lock, waiting for another stager if needed.
/// Returns the lock (held until dropped) and whether it had to wait.
pub fn lock_destination(dest: &Path) -> Result<(File, bool), StageError> {
    let control = state::control_dir(dest);
    std::fs::create_dir_all(&control).map_err(StageError::io("creating", &control))?;
    let path = state::lock_path(dest);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(StageError::io("opening", &path))?;
    use rustix::fs::{FlockOperation, flock};
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok((file, false)),
        Err(rustix::io::Errno::WOULDBLOCK) => {
            tracing::info!(dest = %dest.display(), "another ferry stage is staging here; waiting for it");
            flock(&file, FlockOperation::LockExclusive).map_err(|e| StageError::Io {
                doing: "locking",
                path,
                source: e.into(),
            })?;
            Ok((file, true))
        }
        Err(errno) => Err(StageError::Io { doing: "locking", path, source: errno.into() }),
    }
}

/// Mirrors the cache and creates the active entry's tree. Of the plan's own
/// files, only those in `link` get a symlink to the source: a foreground stage is
/// about to copy the missing ones and nobody reads before it returns, while
/// `--background` links every missing file so a reader finds them all at once.
/// Files already copied are left alone. Call with the destination lock held.
pub fn build_mirror(plan: &StagePlan, dest: &Path, link: &[&str]) -> Result<(), StageError> {
    let mirror_error = StageError::io("mirroring into", dest);
    let relative: Vec<&str> = plan.files.iter().map(|f| f.relative.as_str()).collect();
    match &plan.kind {
        PlanKind::Entry { cache } => {
            mirror::mirror_cache(cache, dest, &plan.id).map_err(mirror_error)?;
            mirror::ensure_real_dir(&plan.dest_root).map_err(StageError::io("mirroring into", dest))?;
            // by-name/<name> names the entry being staged, whatever the cache's link says now.
            let link = DestLayout::new(dest).mirror().by_name(&plan.name);
            mirror::ensure_symlink(&CacheLayout::by_name_target(&plan.id), &link)
                .map_err(StageError::io("linking", &link))?;
        }
        PlanKind::DropIn => {
            let listed: HashSet<&str> = relative.iter().copied().collect();
            mirror_tree(&plan.source_root, dest, &listed).map_err(mirror_error)?;
        }
    }
    mirror::make_dirs(&plan.dest_root, &relative).map_err(StageError::io("mirroring into", dest))?;
    mirror::link_files(&plan.source_root, &plan.dest_root, link).map_err(StageError::io("mirroring into", dest))
}

/// The plan's files not yet complete in the destination. A file whose directory
/// is not there yet is pending without a lookup of its own: on a fresh
/// destination that is one lookup per directory instead of one per file.
pub fn pending_files(plan: &StagePlan, verify: bool) -> Vec<&PlannedFile> {
    let parents: HashSet<&Path> = plan.files.iter().map(PlannedFile::parent).collect();
    let present: HashSet<&Path> = parents.into_par_iter().filter(|dir| plan.dest_root.join(dir).is_dir()).collect();
    plan.files.par_iter().filter(|f| !(present.contains(f.parent()) && is_complete(plan, f, verify))).collect()
}

/// Drop-in mode: every file of `src` but the `listed` ones as a symlink
/// (directories real), `*.lock` skipped.
fn mirror_tree(src: &Path, dest: &Path, listed: &HashSet<&str>) -> std::io::Result<()> {
    mirror::ensure_real_dir(dest)?;
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(src).min_depth(1).follow_links(false) {
        let entry = entry.map_err(std::io::Error::other)?;
        let relative = entry.path().strip_prefix(src).map_err(std::io::Error::other)?.to_string_lossy().into_owned();
        if entry.file_type().is_dir() {
            mirror::ensure_real_dir(&dest.join(&relative))?;
        } else if !entry.file_name().to_string_lossy().ends_with(".lock") && !listed.contains(relative.as_str()) {
            files.push(relative);
        }
    }
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    mirror::link_files(src, dest, &files)
}

/// Stages in the foreground: lock, mirror, copy what is missing, check sizes.
pub fn stage(plan: &StagePlan, options: &StageOptions) -> Result<StageReport, StageError> {
    let started = Instant::now();
    let dest = &options.dest;
    // Before creating anything: a full disk must leave nothing behind.
    // By sizes only: hashing here would hash every staged file again under the lock.
    check_free(dest, pending_files(plan, false).iter().map(|f| f.size).sum())?;
    // The lease comes first: a stager waiting for another one still needs the entry.
    let _lease = match &plan.kind {
        PlanKind::Entry { cache } => match Lease::acquire(cache, &plan.id, "stage") {
            Ok(lease) => Some(lease),
            // A cache this user may only read (a site-wide one): stage without a lease.
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                ) =>
            {
                tracing::warn!(cache = %cache.root().display(), error = %err, "cannot take a lease in a read-only cache; gc cannot see this staging");
                None
            }
            Err(err) => {
                return Err(StageError::Io {
                    doing: "taking a lease in",
                    path: cache.root().to_path_buf(),
                    source: err,
                });
            }
        },
        PlanKind::DropIn => None,
    };
    let (_lock, waited) = lock_destination(dest)?;
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "space checked, destination locked");
    let previous_done = state::read(&state::state_path(dest, &plan.id)).is_some_and(|s| s.phase == Phase::Done);
    let mut current = new_state(plan, options, Phase::Mirroring);
    state::write(dest, &current).map_err(StageError::io("writing state in", dest))?;
    let result = stage_locked(plan, options, &mut current, started, previous_done);
    if let Err(err) = &result {
        current.phase = Phase::Failed;
        current.error = Some(crate::errors::chain(err));
        current.updated_unix = state::now_unix();
        let _ = state::write(dest, &current);
    }
    result.map(|mut report| {
        report.waited_for_another_stager = waited;
        report
    })
}

fn stage_locked(
    plan: &StagePlan,
    options: &StageOptions,
    current: &mut StageState,
    started: Instant,
    previous_done: bool,
) -> Result<StageReport, StageError> {
    let dest = &options.dest;
    // Only a run that did not finish leaves temporaries behind.
    if !previous_done {
        crate::cache::destination::remove_stale_temps(&plan.dest_root);
    }
    let pending = pending_files(plan, options.verify);
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), pending = pending.len(), "pending files found");
    build_mirror(plan, dest, &[])?;
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "mirror built");
    // Space again, now that the lock is ours and another stager may have finished.
    check_free(dest, pending.iter().map(|f| f.size).sum())?;
    // Each copy's size is checked as it lands, against the manifest (or the stat above).
    let jobs: Vec<CopyJob> = pending
        .iter()
        .map(|file| CopyJob {
            source: plan.source_root.join(&file.relative),
            dest: plan.dest_root.join(&file.relative),
            size: file.size,
            blake3: file.blake3.clone(),
        })
        .collect();
    let already_bytes: u64 = plan.files.iter().map(|f| f.size).sum::<u64>() - jobs.iter().map(|j| j.size).sum::<u64>();
    let already_files = (plan.files.len() - jobs.len()) as u64;

    current.phase = Phase::Copying;
    let counters = Arc::new(CopyCounters::default());
    let failures = {
        let _ticker = state_ticker(dest.clone(), current.clone(), counters.clone(), already_files, already_bytes);
        let _reporter = start_reporter(
            options.progress,
            counters.clone(),
            current.files_total,
            current.bytes_total,
            already_files,
            already_bytes,
        );
        copy::copy_all(&jobs, options.threads, options.verify, &counters)
    };
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "copies landed");
    let copied_bytes = counters.bytes_done.load(Ordering::Relaxed);
    let copied_files = counters.files_done.load(Ordering::Relaxed);
    current.files_done = already_files + copied_files;
    current.bytes_done = already_bytes + copied_bytes;
    current.bytes_copied = copied_bytes;
    let seconds = started.elapsed().as_secs_f64();
    current.bytes_per_second = copied_bytes as f64 / seconds.max(1e-6);
    current.updated_unix = state::now_unix();
    if let Some(first) = failures.into_iter().next() {
        // Files whose copy failed point at the shared copy, so the mirror is whole.
        let failed: Vec<&str> = jobs
            .iter()
            .filter(|j| !is_regular(&j.dest))
            .filter_map(|j| j.dest.strip_prefix(&plan.dest_root).ok()?.to_str())
            .collect();
        let _ = mirror::link_files(&plan.source_root, &plan.dest_root, &failed);
        let count = jobs.len() - copied_files as usize;
        return Err(StageError::Copy { dest: dest.clone(), count, first });
    }
    current.phase = Phase::Done;
    state::write(dest, current).map_err(StageError::io("writing state in", dest))?;
    Ok(StageReport {
        state: current.clone(),
        files_copied: copied_files,
        files_skipped: already_files,
        seconds,
        dest_root: plan.dest_root.clone(),
        waited_for_another_stager: false,
    })
}

pub fn new_state(plan: &StagePlan, options: &StageOptions, phase: Phase) -> StageState {
    let now = state::now_unix();
    StageState {
        id: plan.id.clone(),
        name: plan.name.clone(),
        source: plan.source_root.display().to_string(),
        phase,
        files_done: 0,
        files_total: plan.files.len() as u64,
        bytes_done: 0,
        bytes_total: plan.files.iter().map(|f| f.size).sum(),
        bytes_copied: 0,
        bytes_per_second: 0.0,
        verify: options.verify,
        pid: std::process::id(),
        host: fsutil::host_name(),
        job_id: std::env::var("SLURM_JOB_ID").ok(),
        started_unix: now,
        updated_unix: now,
        error: None,
    }
}

/// Rewrites the state file every half second while copying.
fn state_ticker(dest: PathBuf, mut current: StageState, counters: Arc<CopyCounters>, files: u64, bytes: u64) -> Ticker {
    let started = Instant::now();
    Ticker::every(Duration::from_millis(500), move || {
        let copied = counters.bytes_done.load(Ordering::Relaxed);
        current.files_done = files + counters.files_done.load(Ordering::Relaxed);
        current.bytes_done = bytes + copied;
        current.bytes_copied = copied;
        current.bytes_per_second = copied as f64 / started.elapsed().as_secs_f64().max(1e-3);
        current.updated_unix = state::now_unix();
        if let Err(err) = state::write(&dest, &current) {
            tracing::warn!(error = %err, "cannot update the staging state file");
        }
    })
}

fn start_reporter(
    mode: ProgressMode,
    counters: Arc<CopyCounters>,
    files: u64,
    bytes: u64,
    files_before: u64,
    bytes_before: u64,
) -> Reporter {
    Reporter::start(mode, "stage", move |elapsed| {
        let copied = counters.bytes_done.load(Ordering::Relaxed);
        let done = bytes_before + copied;
        let line = format!(
            "{}/{} files, {}/{}, {}B/s, ETA {}",
            files_before + counters.files_done.load(Ordering::Relaxed),
            files,
            bytesize::ByteSize(done),
            bytesize::ByteSize(bytes),
            progress::per_second(copied, elapsed),
            progress::eta(copied, bytes - bytes_before, elapsed),
        );
        (done, bytes, line)
    })
}
