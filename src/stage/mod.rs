//! `stage`: mirror the cache into a node-local destination as symlinks and copy
//! the active entry's files in, safely re-runnable and resumable.
//!
//! One stager at a time per destination: an exclusive `flock` on
//! `<dest>/.ferry/stage.lock` (the destination is node-local, and the kernel
//! releases the lock when its holder dies). Others wait for it, then find the
//! files complete and copy nothing.

pub mod broadcast;
pub mod command;
pub mod copy;
mod guard;
pub mod landing;
pub mod megatron_cache;
pub mod mirror;
mod plan;
mod report;
mod twins;

pub use guard::lock_destination;
pub use plan::{PlanKind, PlannedFile, StagePlan, pending_files, plan_drop_in, plan_entry};
pub use report::new_state;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::cache::destination::DestLayout;
use crate::cache::layout::CacheLayout;
use crate::cache::lease::Lease;
use crate::cache::staging::{self, Phase, StageState};
use crate::errors::{Failure, Fault, IoError};
use crate::progress::ProgressMode;
use copy::{CopyCounters, CopyError, CopyJob};
use guard::check_free;
use plan::is_regular;
use report::{start_reporter, state_ticker};

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(
        "not enough space in {dest}: staging needs {needed}, {available} available; free space there or stage to another --dest"
    )]
    NoSpace { dest: PathBuf, needed: bytesize::ByteSize, available: bytesize::ByteSize },
    #[error(transparent)]
    Io(#[from] IoError),
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

#[derive(Debug, Clone)]
pub struct StageOptions {
    pub dest: PathBuf,
    /// Copies in flight.
    pub jobs: usize,
    pub verify: bool,
    pub progress: ProgressMode,
}

/// What a finished staging did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StageReport {
    #[serde(flatten)]
    pub state: StageState,
    pub files_copied: u64,
    /// Files with the bytes of another file of the entry, hard-linked to its copy.
    pub files_linked: u64,
    pub files_skipped: u64,
    /// Files landed from what `stage --broadcast` sent to this node (counted in `files_copied`).
    pub files_received: u64,
    pub seconds: f64,
    pub dest_root: PathBuf,
    pub waited_for_another_stager: bool,
}

/// Mirrors the cache and creates the active entry's tree. Of the plan's own
/// files, only those in `link` get a symlink to the source: a foreground stage is
/// about to copy the missing ones and nobody reads before it returns, while
/// `--background` links every missing file so a reader finds them all at once.
/// Files already copied are left alone. Call with the destination lock held.
pub fn build_mirror(plan: &StagePlan, dest: &Path, link: &[&str]) -> Result<(), StageError> {
    let mirror_error = IoError::at("mirroring into", dest);
    let relative: Vec<&str> = plan.files.iter().map(|f| f.relative.as_str()).collect();
    match &plan.kind {
        PlanKind::Entry { cache } => {
            mirror::mirror_cache(cache, dest, &plan.id).map_err(mirror_error)?;
            mirror::ensure_real_dir(&plan.dest_root).map_err(IoError::at("mirroring into", dest))?;
            // by-name/<name> names the entry being staged, whatever the cache's link says now.
            let link = DestLayout::new(dest).mirror().by_name(&plan.name);
            mirror::ensure_symlink(&CacheLayout::by_name_target(&plan.id), &link)
                .map_err(IoError::at("linking", &link))?;
        }
        PlanKind::DropIn => {
            let listed: HashSet<&str> = relative.iter().copied().collect();
            mirror_tree(&plan.source_root, dest, &listed).map_err(mirror_error)?;
        }
    }
    mirror::make_dirs(&plan.dest_root, &relative).map_err(IoError::at("mirroring into", dest))?;
    if let PlanKind::Entry { cache } = &plan.kind {
        megatron_cache::link_index_caches(cache, plan);
    }
    Ok(mirror::link_files(&plan.source_root, &plan.dest_root, link).map_err(IoError::at("mirroring into", dest))?)
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

/// A lease of `kind` on the plan's entry, so gc keeps it while this process works;
/// none for a drop-in, or in a cache this user may only read (a site-wide one).
pub fn take_lease(plan: &StagePlan, kind: &str) -> Result<Option<Lease>, StageError> {
    let PlanKind::Entry { cache } = &plan.kind else { return Ok(None) };
    match Lease::acquire(cache, &plan.id, kind) {
        Ok(lease) => Ok(Some(lease)),
        Err(err)
            if matches!(err.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem) =>
        {
            tracing::warn!(cache = %cache.root().display(), error = %err, "cannot take a lease in a read-only cache; gc cannot see this staging");
            Ok(None)
        }
        Err(err) => Err(IoError::at("taking a lease in", cache.root())(err).into()),
    }
}

/// Stages in the foreground: lock, mirror, copy what is missing, check sizes.
pub fn stage(plan: &StagePlan, options: &StageOptions) -> Result<StageReport, StageError> {
    let started = Instant::now();
    let dest = &options.dest;
    // Before creating anything: a full disk must leave nothing behind.
    // By sizes only: hashing here would hash every staged file again under the lock.
    check_free(dest, twins::split(plan, pending_files(plan, false)).0.iter().map(|f| f.size).sum())?;
    // The lease comes first: a stager waiting for another one still needs the entry.
    let _lease = take_lease(plan, "stage")?;
    let lock = lock_destination(dest)?;
    let waited = lock.waited;
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "space checked, destination locked");
    let previous_done = staging::read(&staging::state_path(dest, &plan.id)).is_some_and(|s| s.phase == Phase::Done);
    let mut current = new_state(plan, options, Phase::Mirroring);
    staging::write(dest, &current).map_err(IoError::at("writing state in", dest))?;
    let result = stage_locked(plan, options, &mut current, started, previous_done);
    if let Err(err) = &result {
        current.phase = Phase::Failed { error: crate::errors::chain(err) };
        current.updated_unix = crate::fsutil::now_unix();
        let _ = staging::write(dest, &current);
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
    let (pending, twins) = twins::split(plan, pending_files(plan, options.verify));
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), pending = pending.len(), "pending files found");
    build_mirror(plan, dest, &[])?;
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "mirror built");
    // Space again, now that the lock is ours and another stager may have finished.
    check_free(dest, pending.iter().map(|f| f.size).sum())?;
    let mut copies: Vec<CopyJob> = pending.iter().map(|file| cache_copy(plan, file)).collect();
    let twin_bytes: u64 = twins.iter().map(|t| t.file.size).sum();
    let already_bytes: u64 =
        plan.files.iter().map(|f| f.size).sum::<u64>() - copies.iter().map(|j| j.size).sum::<u64>() - twin_bytes;
    let already_files = (plan.files.len() - copies.len() - twins.len()) as u64;

    current.phase = Phase::Copying;
    let counters = Arc::new(CopyCounters::default());
    let arrived = broadcast::Arrived::find(plan, dest);
    let (failures, linked, received) = {
        let _ticker = state_ticker(dest.clone(), current.clone(), counters.clone(), already_files, already_bytes);
        let _reporter = start_reporter(
            options.progress,
            counters.clone(),
            current.files_total,
            current.bytes_total,
            // Linking takes no time worth showing: twins count as done from the start.
            already_files + twins.len() as u64,
            already_bytes + twin_bytes,
        );
        copy_phase(plan, options, arrived.as_ref(), &mut copies, &twins, &counters)
    };
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "copies landed");
    let copied_bytes = counters.bytes_done.load(Ordering::Relaxed);
    let copied_files = counters.files_done.load(Ordering::Relaxed);
    let linked_files = linked.len() as u64;
    current.files_done = already_files + copied_files + linked_files;
    current.bytes_done = already_bytes + copied_bytes + linked.iter().sum::<u64>();
    current.bytes_copied = copied_bytes;
    let seconds = started.elapsed().as_secs_f64();
    current.bytes_per_second = copied_bytes as f64 / seconds.max(1e-6);
    current.updated_unix = crate::fsutil::now_unix();
    if let Some((_, first)) = failures.into_iter().next() {
        let count = link_what_failed(plan, &copies, &twins);
        return Err(StageError::Copy { dest: dest.clone(), count, first });
    }
    current.phase = Phase::Done;
    staging::write(dest, current).map_err(IoError::at("writing state in", dest))?;
    if let Some(arrived) = arrived {
        arrived.remove();
    }
    Ok(StageReport {
        state: current.clone(),
        files_copied: copied_files,
        files_linked: linked_files,
        files_skipped: already_files,
        files_received: received,
        seconds,
        dest_root: plan.dest_root.clone(),
        waited_for_another_stager: false,
    })
}

/// The copy of `file` from the cache. Each copy's size is checked as it lands,
/// against the manifest (or the stat of a drop-in plan).
fn cache_copy(plan: &StagePlan, file: &PlannedFile) -> CopyJob {
    CopyJob {
        source: copy::Source::whole(plan.source.clone(), file.relative.clone()),
        dest: plan.dest_root.join(&file.relative),
        size: file.size,
        blake3: file.blake3.clone(),
    }
}

/// Lands what arrived by broadcast, copies the rest from the cache, then links
/// the twins (copying those that cannot be linked, which join `copies`). Returns
/// the failures, the bytes of each linked twin, and how many files were received.
fn copy_phase(
    plan: &StagePlan,
    options: &StageOptions,
    arrived: Option<&broadcast::Arrived>,
    copies: &mut Vec<CopyJob>,
    twins: &[twins::Twin],
    counters: &CopyCounters,
) -> (Vec<(usize, CopyError)>, Vec<u64>, u64) {
    let received = arrived.map_or(0, |arrived| land_arrived(arrived, copies, options, counters));
    let mut failures = copy::copy_all(copies, options.jobs, options.verify, counters);
    let (linked, refused) = twins::link(plan, twins);
    let refused: Vec<CopyJob> = refused.into_iter().map(|file| cache_copy(plan, file)).collect();
    failures.extend(copy::copy_all(&refused, options.jobs, options.verify, counters));
    copies.extend(refused);
    (failures, linked, received)
}

/// Lands the files of `copies` that arrived by broadcast: a large file is moved into
/// place, a packed one copied out of the pack. Leaves in `copies` the ones still to
/// copy from the cache: those that did not arrive, and those that do not check out
/// or whose landing failed (a partial or damaged arrival). Returns how many landed.
fn land_arrived(
    arrived: &broadcast::Arrived,
    copies: &mut Vec<CopyJob>,
    options: &StageOptions,
    counters: &CopyCounters,
) -> u64 {
    let (mut from_cache, mut from_cache_instead, mut landing) = (Vec::new(), Vec::new(), Vec::new());
    let mut moved = 0;
    for job in copies.drain(..) {
        let Some(source) = arrived.source_for(&job) else {
            from_cache.push(job);
            continue;
        };
        let arrival = CopyJob { source, ..job.clone() };
        match arrived.move_into_place(&arrival, options.verify) {
            broadcast::Move::Moved => {
                counters.files_done.fetch_add(1, Ordering::Relaxed);
                counters.bytes_done.fetch_add(job.size, Ordering::Relaxed);
                moved += 1;
            }
            broadcast::Move::Damaged => {
                let file = job.dest.display();
                tracing::warn!(%file, "the copy sent by broadcast is missing or does not check out; copying it from the cache");
                from_cache.push(job);
            }
            broadcast::Move::NotHere => {
                landing.push(arrival);
                from_cache_instead.push(job);
            }
        }
    }
    let mut failed = vec![false; landing.len()];
    for (index, err) in copy::copy_all(&landing, options.jobs, options.verify, counters) {
        failed[index] = true;
        // Said without the copy errors' advice, which is about the cache's copy.
        let why = match &err {
            CopyError::Hash { .. } => "its blake3 differs from the manifest's".to_string(),
            CopyError::Size { expected, found, .. } => format!("{found} bytes where the manifest says {expected}"),
            CopyError::Io(err) => err.to_string(),
        };
        let file = landing[index].dest.display();
        tracing::warn!(%file, why, "the copy that arrived by broadcast did not land; copying it from the cache");
    }
    for ((job, cache_job), failed) in landing.iter().zip(from_cache_instead).zip(failed.iter()) {
        if *failed {
            from_cache.push(cache_job);
        } else {
            arrived.discard(&job.source);
        }
    }
    *copies = from_cache;
    moved + failed.iter().filter(|failed| !**failed).count() as u64
}

/// Points every file whose copy failed at the shared copy, so the mirror is
/// whole, and says how many there were.
fn link_what_failed(plan: &StagePlan, copies: &[CopyJob], twins: &[twins::Twin]) -> usize {
    let failed: Vec<&str> = copies
        .iter()
        .filter_map(|j| j.dest.strip_prefix(&plan.dest_root).ok()?.to_str())
        .chain(twins.iter().map(|t| t.file.relative.as_str()))
        .filter(|relative| !is_regular(&plan.dest_root.join(relative)))
        .collect();
    let _ = mirror::link_files(&plan.source_root, &plan.dest_root, &failed);
    failed.len()
}

impl Failure for StageError {
    fn fault(&self) -> Fault {
        match self {
            StageError::Io(_) => Fault::Cause,
            _ => Fault::User,
        }
    }
}
