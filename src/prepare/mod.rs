//! `prepare`: resolve inputs, fingerprint, return the entry if it exists, else
//! tokenize every shard in parallel and publish the entry atomically.

mod budget;
mod claims;
mod pipeline;
mod publish;
mod record;
mod shard;
mod together;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::cache::build_progress::BuildProgress;
use crate::cache::layout::{BUILDING_DIR, BuildLayout, CacheLayout, EntryLayout, USED_DIR};
use crate::cache::lease::Lease;
use crate::cache::manifest::{BuildRecord, Manifest, ManifestError};
use crate::cache::writer::{Columns, WriteError};
use crate::errors::{Failure, Fault, IoError};
use crate::fingerprint::{Fingerprint, FingerprintInputs};
use crate::fsutil::{self, untrusted};
use crate::inputs::{self, ContentHashMemo, InputError, SplitInputs};
use crate::progress::{self, ProgressMode, Reporter};
use crate::source::Selector;
use crate::spec::{PackMode, Spec, SpecError};
use crate::ticker::Ticker;
use crate::tokenizer::{self, Encoders, TokenizerError};
use claims::Claims;
use together::{Together, build_together};

pub use shard::{BuildCounters, ShardError, ShardRecord};

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error(transparent)]
    Write(WriteError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("another task published {path}, but it is gone; run prepare again")]
    Vanished { path: PathBuf },
    #[error("starting worker threads")]
    Threads(#[source] rayon::ThreadPoolBuildError),
    /// The cache's layout version, or the cache root itself, is not usable.
    #[error("checking the cache layout of {path}")]
    Layout { path: PathBuf, source: std::io::Error },
    #[error(
        "entry {path} has fingerprint {found}, not {expected}; remove it (a 64-bit prefix collision or a damaged cache)"
    )]
    Collision { path: PathBuf, found: String, expected: String },
    #[error(
        "split {split:?} has no documents: {filtered} filtered out, {skipped} bad records skipped; check source.text_field, [filter] and the inputs"
    )]
    EmptySplit { split: String, filtered: u64, skipped: u64 },
}

/// Execution settings; none of them changes the entry's bytes.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    pub jobs: usize,
    pub progress: ProgressMode,
}

/// A spec resolved to its fingerprint, without reading any input bytes twice.
pub struct Located {
    pub fingerprint: Fingerprint,
    pub splits: Vec<SplitInputs>,
    pub hashes: Vec<(String, Vec<blake3::Hash>)>,
    pub tokenizer_identity: blake3::Hash,
    pub hash_seconds: f64,
    /// The tokenizer, when computing its identity had to parse it.
    pub parsed_tokenizer: Option<tokenizer::Parsed>,
}

/// Resolves inputs and computes the fingerprint (one `stat` per memoized input).
pub fn locate(spec: &Spec, cache: &CacheLayout) -> Result<Located, PrepareError> {
    let started = Instant::now();
    let splits = inputs::resolve(spec)?;
    let memo = ContentHashMemo::new(cache.memo_dir());
    let mut parsed_tokenizer = None;
    // The inputs are hashed while the tokenizer is parsed: on a first build each
    // takes a good part of the time before the first document is encoded.
    let (hashes, tokenizer_identity) = std::thread::scope(|scope| {
        let hashing = std::thread::Builder::new().spawn_scoped(scope, || inputs::content_hashes(&splits, &memo));
        let identity = tokenizer::identity(spec, &cache.memo_dir(), &mut parsed_tokenizer);
        // Without a thread to spare (a process limit), the inputs are hashed after.
        let hashes = match hashing {
            Ok(thread) => thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => inputs::content_hashes(&splits, &memo),
        };
        (hashes, identity)
    });
    // An input's problem is reported before the tokenizer's, as when they ran in turn.
    let (hashes, tokenizer_identity) = (hashes?, tokenizer_identity?);
    let canonical = spec.canonical();
    let fingerprint =
        FingerprintInputs { canonical_spec: &canonical, tokenizer: &tokenizer_identity, splits: &hashes }.fingerprint();
    let hash_seconds = started.elapsed().as_secs_f64();
    Ok(Located { fingerprint, splits, hashes, tokenizer_identity, hash_seconds, parsed_tokenizer })
}

/// The outcome of `prepare`.
pub struct Prepared {
    pub entry: EntryLayout,
    pub manifest: Manifest,
    /// False when the entry already existed (a cache hit).
    pub built: bool,
    pub shards_tokenized_here: usize,
}

/// Loads the published entry with this fingerprint, if any.
pub fn published(
    cache: &CacheLayout,
    fingerprint: &Fingerprint,
) -> Result<Option<(EntryLayout, Manifest)>, PrepareError> {
    let entry = cache.entry(&fingerprint.short());
    if !entry.manifest().exists() {
        return Ok(None);
    }
    let manifest = Manifest::load(&entry.manifest())?;
    if manifest.fingerprint != fingerprint.full() {
        return Err(PrepareError::Collision {
            path: entry.root().to_path_buf(),
            found: manifest.fingerprint,
            expected: fingerprint.full(),
        });
    }
    Ok(Some((entry, manifest)))
}

/// Builds the entry for `spec` unless it exists.
pub fn prepare(spec: &Spec, cache: &CacheLayout, options: &PrepareOptions) -> Result<Prepared, PrepareError> {
    let started = Instant::now();
    cache.check_version().map_err(|source| PrepareError::Layout { path: cache.root().to_path_buf(), source })?;
    cache
        .create_own_dirs(&cache.build_dirs())
        .map_err(|source| PrepareError::Layout { path: cache.root().to_path_buf(), source })?;
    let mut located = locate(spec, cache)?;
    let short = located.fingerprint.short();
    if let Some((entry, manifest)) = published(cache, &located.fingerprint)? {
        return use_published(cache, spec, Prepared { entry, manifest, built: false, shards_tokenized_here: 0 });
    }
    tracing::info!(fingerprint = %short, "building entry");
    let parsed = match located.parsed_tokenizer.take() {
        Some(parsed) => parsed,
        None => tokenizer::Parsed::read(spec)?,
    };
    let encoders = Encoders::from_parsed(spec, parsed, Some(&cache.memo_dir()))?;
    let build = cache.build(&short);
    let tasks = shard_tasks(&located);
    let _lease = build_lease(cache, &short)?;
    if let Some((entry, manifest)) = set_up_build(cache, &build, &located)? {
        return use_published(cache, spec, Prepared { entry, manifest, built: false, shards_tokenized_here: 0 });
    }
    let tokenize_started = Instant::now();
    let claims = Claims::new(cache.liveness());
    let run = BuildRun { spec, cache, options, located: &located, encoders: &encoders, build: &build };
    let (records, tokenized_here, kind, fast_off, _publish_guard) = match tokenize_all(&run, &claims, &tasks)? {
        Together::Publish { records, tokenized_here, kind, fast_off, guard } => {
            (records, tokenized_here, kind, fast_off, guard)
        }
        Together::PublishedElsewhere { tokenized_here } => {
            // A task that set up the build directory while another published leaves
            // it behind otherwise; whoever leaves last removes it.
            let _ = untrusted::remove_tree_below(cache.root(), &Path::new(BUILDING_DIR).join(&short));
            let vanished = || PrepareError::Vanished { path: cache.entry(&short).root().to_path_buf() };
            let (entry, manifest) = published(cache, &located.fingerprint)?.ok_or_else(vanished)?;
            let prepared = Prepared { entry, manifest, built: false, shards_tokenized_here: tokenized_here };
            return use_published(cache, spec, prepared);
        }
    };
    let tokenize_seconds = tokenize_started.elapsed().as_secs_f64();
    let publish_started = Instant::now();
    let by_split = record::group(&located, records)?;
    let columns = Columns::new(spec.output.token_type, &spec.sequence);
    let max_length = (spec.sequence.pack != PackMode::None).then_some(spec.sequence.seq_len);
    let tokenizer_files = encoders
        .files_for_readers(max_length)
        .map_err(|message| TokenizerError::Load { source_name: encoders.source_name.clone(), message })?;
    let publish::Assembly { entry: assembly, data_files, files } =
        publish::assemble(&build, &by_split.records, &columns, &spec.output.formats, &short, &tokenizer_files)?;
    let build_record = BuildRecord {
        host: fsutil::whoami().host.clone(),
        pid: fsutil::whoami().pid,
        workers: options.jobs,
        shards_tokenized_here: tokenized_here,
        shards_total: tasks.len(),
    };
    let making = record::Making {
        spec,
        located: &located,
        encoders: &encoders,
        kind,
        fast_off,
        build: build_record,
        tokenize_seconds,
    };
    let mut manifest = record::manifest(making, by_split.counts, &data_files, files);
    manifest.timings.publish_seconds = publish_started.elapsed().as_secs_f64();
    manifest.timings.total_seconds = started.elapsed().as_secs_f64();
    let won = publish::publish(cache, assembly, &manifest)?;
    encoders.free_in_background();
    let entry = cache.entry(&short);
    if won {
        // Published: the build directory has served its purpose.
        let _ = untrusted::remove_tree_below(cache.root(), &Path::new(BUILDING_DIR).join(&short));
    } else {
        manifest = Manifest::load(&entry.manifest())?;
    }
    use_published(cache, spec, Prepared { entry, manifest, built: won, shards_tokenized_here: tokenized_here })
}

/// Names the published entry after the spec and records its use.
fn use_published(cache: &CacheLayout, spec: &Spec, prepared: Prepared) -> Result<Prepared, PrepareError> {
    let short = prepared.manifest.short_fingerprint().to_string();
    publish::link_name(cache, &spec.name, &short)?;
    mark_used(cache, &short);
    Ok(prepared)
}

/// One task per input file, numbered within its split.
fn shard_tasks(located: &Located) -> Vec<shard::ShardTask> {
    located
        .splits
        .iter()
        .zip(&located.hashes)
        .flat_map(|(split, (_, hashes))| {
            split.files.iter().zip(hashes).enumerate().map(|(shard, (input, hash))| shard::ShardTask {
                split: split.name.clone(),
                shard,
                input: input.clone(),
                hash: *hash,
            })
        })
        .collect()
}

/// The lease a builder holds from before it makes the build directory: gc on
/// another node must never see the directory without a live holder.
fn build_lease(cache: &CacheLayout, short: &str) -> Result<Lease, PrepareError> {
    Ok(Lease::acquire(cache, short, "build").map_err(IoError::at("taking a build lease in", cache.root()))?)
}

/// Creates the build directory's parts and claims directories, or finds the
/// entry published meanwhile. The task that publishes an entry removes its build
/// directory, possibly while this one is creating it: then the entry is there,
/// or (a stale build's cleanup) the directories are created again.
fn set_up_build(
    cache: &CacheLayout,
    build: &BuildLayout,
    located: &Located,
) -> Result<Option<(EntryLayout, Manifest)>, PrepareError> {
    let dirs: Vec<PathBuf> =
        located.splits.iter().map(|split| build.parts_dir(&split.name)).chain([build.claims_dir()]).collect();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Err(err) = cache.create_own_dirs(&dirs) else {
            return Ok(None);
        };
        if let Some(found) = published(cache, &located.fingerprint)? {
            return Ok(Some(found));
        }
        if err.kind() != std::io::ErrorKind::NotFound || attempt == 5 {
            return Err(IoError::at("creating the build directories in", build.root())(err).into());
        }
    }
}

/// What one build of an entry works with.
struct BuildRun<'a> {
    spec: &'a Spec,
    cache: &'a CacheLayout,
    options: &'a PrepareOptions,
    located: &'a Located,
    encoders: &'a Encoders,
    build: &'a BuildLayout,
}

/// Tokenizes every shard on a pool of `options.jobs` threads, alongside any
/// other task building the same entry, with progress shown and written down.
fn tokenize_all<'a>(
    run: &BuildRun,
    claims: &'a Claims,
    tasks: &[shard::ShardTask],
) -> Result<Together<'a>, PrepareError> {
    let BuildRun { spec, cache, options, located, encoders, build } = *run;
    let _progress_file = progress_ticker(build, spec, &located.fingerprint, tasks.len() as u64);
    let counters = Arc::new(BuildCounters::default());
    let budget = budget::Budget::for_threads(options.jobs);
    let context = shard::ShardContext {
        spec,
        encoders,
        selector: Selector::new(&spec.source.text_field, &spec.filter),
        columns: Columns::new(spec.output.token_type, &spec.sequence),
        build,
        counters: &counters,
        budget: &budget,
        reading_threads: options.jobs < crate::settings::usable_cpus(),
    };
    let pool =
        rayon::ThreadPoolBuilder::new().num_threads(options.jobs.max(1)).build().map_err(PrepareError::Threads)?;
    let total_input_bytes: u64 = tasks.iter().map(|t| t.input.size).sum();
    let _reporter =
        start_reporter(options.progress, counters.clone(), build.clone(), tasks.len() as u64, total_input_bytes);
    build_together(&context, claims, tasks, &pool, cache, &located.fingerprint)
}

fn start_reporter(
    mode: ProgressMode,
    counters: Arc<BuildCounters>,
    build: BuildLayout,
    shards: u64,
    input_bytes: u64,
) -> Reporter {
    Reporter::start(mode, "prepare", move |elapsed| {
        let done = counters.input_bytes.load(Ordering::Relaxed).min(input_bytes);
        let line = format!(
            "{}/{} shards, {}docs/s, {}tokens/s, {}B/s, ETA {}",
            build.count_shard_records(),
            shards,
            progress::per_second(counters.documents.load(Ordering::Relaxed), elapsed),
            progress::per_second(counters.tokens.load(Ordering::Relaxed), elapsed),
            progress::per_second(done, elapsed),
            progress::eta(done, input_bytes, elapsed),
        );
        (done, input_bytes, line)
    })
}

/// Keeps this builder's progress file fresh every two seconds; it is removed with
/// the build directory (or by `gc` when the builder died).
fn progress_ticker(build: &BuildLayout, spec: &Spec, fingerprint: &Fingerprint, shards_total: u64) -> Ticker {
    let (host, pid) = (fsutil::whoami().host.clone(), fsutil::whoami().pid);
    let path = build.progress_file(&host, pid);
    let build = build.clone();
    let mut progress = BuildProgress {
        name: spec.name.clone(),
        fingerprint: fingerprint.full(),
        host,
        pid,
        job_id: fsutil::whoami().job_id.clone(),
        shards_done: 0,
        shards_total,
        updated_unix: 0,
    };
    Ticker::every(std::time::Duration::from_secs(2), move || {
        progress.shards_done = build.count_shard_records();
        progress.updated_unix = fsutil::now_unix();
        if build.root().exists()
            && let Ok(bytes) = serde_json::to_vec(&progress)
        {
            let _ = fsutil::write_atomic_unsynced(&path, &bytes);
        }
    })
}

/// Records a use of the entry: the mtime of `used/<fp16>`. Cheap, and never
/// rewrites the manifest.
pub fn mark_used(cache: &CacheLayout, short_fingerprint: &str) {
    // Through the directory, never following a symlink planted at `used/` or at the marker.
    let result = fsutil::create_dir_all(cache.root())
        .and_then(|()| untrusted::Dir::open(cache.root()))
        .and_then(|root| root.create_dir(USED_DIR))
        .and_then(|used| used.touch(short_fingerprint, true));
    if let Err(err) = result {
        tracing::warn!(path = %cache.used_marker(short_fingerprint).display(), error = %err, "cannot record the entry's last use");
    }
}

impl Failure for PrepareError {
    fn fault(&self) -> Fault {
        match self {
            // Writing and I/O failures are the user's when the disk or permissions are.
            PrepareError::Write(_) | PrepareError::Io(_) => Fault::Cause,
            PrepareError::Threads(_) => Fault::Internal,
            _ => Fault::User,
        }
    }
}
