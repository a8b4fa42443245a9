//! `prepare`: resolve inputs and fingerprint; return the view if it exists. Else
//! make sure its token store exists (tokenize every shard in parallel, alongside
//! any other task building it, and publish it atomically), then derive the view
//! from the token store (`view`), which opens no input and runs no tokenizer.

mod budget;
mod pipeline;
mod publish;
mod record;
mod shard;
mod together;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::cache::build_progress;
use crate::cache::claims::Claims;
use crate::cache::layout::{BUILDING_DIR, BuildLayout, CacheLayout, EntryLayout, USED_DIR};
use crate::cache::lease::Lease;
use crate::cache::lookup::{self, LookupError};
use crate::cache::manifest::{BuildRecord, EntryKind, Manifest, ManifestError, StoreDtype};
use crate::cache::publish::{link_name, publish};
use crate::errors::{Failure, Fault, IoError};
use crate::fingerprint::{Fingerprint, TokensFingerprintInputs, view_fingerprint};
use crate::fsutil::{self, untrusted};
use crate::inputs::{self, ContentHashMemo, InputError, SplitInputs};
use crate::progress::{self, ProgressMode, Reporter};
use crate::source::Selector;
use crate::spec::{Spec, SpecError};
use crate::tokenizer::{self, Encoders, TokenizerError};
use crate::view::{self, ViewError};
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
    View(#[from] ViewError),
    #[error(transparent)]
    Gc(#[from] crate::gc::GcError),
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
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(
        "split {split:?} has no documents: {filtered} filtered out, {skipped} bad records skipped; check source.text_field, [filter] and the inputs"
    )]
    EmptySplit { split: String, filtered: u64, skipped: u64 },
    #[error("the token store {path} is in use (a live lease); --rebuild-tokens removes it once nothing uses it")]
    TokenStoreInUse { path: PathBuf },
}

/// Execution settings; none of them changes the entry's bytes.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    pub jobs: usize,
    pub progress: ProgressMode,
    /// Remove the spec's token store first, if unused, and tokenize again (a
    /// damaged token store's way back).
    pub rebuild_tokens: bool,
}

/// A spec resolved to its fingerprints, without reading any input bytes twice.
pub struct Located {
    /// The token store's.
    pub tokens: Fingerprint,
    /// The view's: the token store's and the spec's view part.
    pub view: Fingerprint,
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
    let tokens = TokensFingerprintInputs {
        canonical_spec: &spec.tokens_canonical(),
        tokenizer: &tokenizer_identity,
        splits: &hashes,
    }
    .fingerprint();
    let view = view_fingerprint(&tokens.full(), &spec.view_canonical());
    let hash_seconds = started.elapsed().as_secs_f64();
    Ok(Located { tokens, view, splits, hashes, tokenizer_identity, hash_seconds, parsed_tokenizer })
}

/// The outcome of `prepare`: the view, and what became of its token store.
pub struct Prepared {
    pub entry: EntryLayout,
    pub manifest: Manifest,
    /// False when the view already existed (a cache hit).
    pub built: bool,
    pub token_store: TokenStoreOutcome,
}

/// The token store a prepare used, made or found.
pub struct TokenStoreOutcome {
    pub fingerprint: Fingerprint,
    /// Whether this prepare tokenized (published the token store, or tokenized
    /// shards of a build another task published).
    pub built: bool,
    pub shards_tokenized_here: usize,
    pub tokenize_seconds: f64,
    /// The documents' tokens (0 when the view was found and the store not looked at).
    pub tokens: u64,
}

impl TokenStoreOutcome {
    pub fn untouched(fingerprint: Fingerprint, store: Option<&Manifest>) -> TokenStoreOutcome {
        let tokens = store.map_or(0, |store| store.totals.counts.tokens);
        TokenStoreOutcome { fingerprint, built: false, shards_tokenized_here: 0, tokenize_seconds: 0.0, tokens }
    }
}

/// The published entry with this fingerprint, if any, checked to be of `kind`.
pub fn published_kind(
    cache: &CacheLayout,
    fingerprint: &Fingerprint,
    kind: EntryKind,
) -> Result<Option<(EntryLayout, Manifest)>, PrepareError> {
    Ok(lookup::published(cache, fingerprint, kind)?)
}

/// The published view with this fingerprint, if any.
pub fn published(
    cache: &CacheLayout,
    fingerprint: &Fingerprint,
) -> Result<Option<(EntryLayout, Manifest)>, PrepareError> {
    published_kind(cache, fingerprint, EntryKind::View)
}

/// Prepares the view of `spec` unless it exists: its token store first, built
/// unless it exists, then the view derived from it.
pub fn prepare(spec: &Spec, cache: &CacheLayout, options: &PrepareOptions) -> Result<Prepared, PrepareError> {
    open_cache(cache)?;
    let mut located = locate(spec, cache)?;
    if options.rebuild_tokens {
        discard_token_store(cache, &located.tokens)?;
    }
    if let Some((entry, manifest)) = published(cache, &located.view)? {
        let token_store = TokenStoreOutcome::untouched(located.tokens, None);
        return use_published(cache, spec, Prepared { entry, manifest, built: false, token_store });
    }
    // From before the token store is looked for until the view is made of it: gc
    // (here or on another node) never takes it in between.
    let _store_lease = Lease::acquire(cache, &located.tokens.short(), "derive")
        .map_err(IoError::at("taking a lease in", cache.root()))?;
    let (store, outcome) = token_store(spec, cache, options, &mut located)?;
    mark_used(cache, &located.tokens.short());
    let making = view::Making {
        fingerprint: located.view,
        hash_seconds: located.hash_seconds,
        tokenize_seconds: outcome.tokenize_seconds,
        shards_tokenized_here: outcome.shards_tokenized_here,
        jobs: options.jobs,
    };
    let derived = view::derive(cache, &view::Recipe::of(spec), &view::Source::Store(&store), &making)?;
    let prepared =
        Prepared { entry: derived.entry, manifest: derived.manifest, built: derived.built, token_store: outcome };
    use_published(cache, spec, prepared)
}

/// Checks the cache's layout version and makes the folders builds need.
pub fn open_cache(cache: &CacheLayout) -> Result<(), PrepareError> {
    let layout = |source| PrepareError::Layout { path: cache.root().to_path_buf(), source };
    cache.check_version().map_err(layout)?;
    cache.create_own_dirs(&cache.build_dirs()).map_err(layout)
}

/// `--rebuild-tokens`: moves the spec's token store out of the cache (to be
/// tokenized again) unless a live lease holds it.
fn discard_token_store(cache: &CacheLayout, tokens: &Fingerprint) -> Result<(), PrepareError> {
    let short = tokens.short();
    if std::fs::symlink_metadata(cache.entry(&short).root()).is_err() {
        return Ok(());
    }
    if !crate::gc::evict(cache, &short)? {
        return Err(PrepareError::TokenStoreInUse { path: cache.entry(&short).root().to_path_buf() });
    }
    tracing::info!(fingerprint = %short, "token store removed; tokenizing again");
    Ok(())
}

/// The spec's token store: the published one, else built here (with every other
/// task building it) and published. The caller holds a lease on it.
pub fn token_store(
    spec: &Spec,
    cache: &CacheLayout,
    options: &PrepareOptions,
    located: &mut Located,
) -> Result<(Manifest, TokenStoreOutcome), PrepareError> {
    let started = Instant::now();
    let short = located.tokens.short();
    if let Some((_, manifest)) = published_kind(cache, &located.tokens, EntryKind::Tokens)? {
        let outcome = TokenStoreOutcome::untouched(located.tokens, Some(&manifest));
        return Ok((manifest, outcome));
    }
    tracing::info!(fingerprint = %short, "tokenizing into a token store");
    let parsed = match located.parsed_tokenizer.take() {
        Some(parsed) => parsed,
        None => tokenizer::Parsed::read(spec)?,
    };
    let encoders = Encoders::from_parsed(spec, parsed, Some(&cache.memo_dir()))?;
    let build = cache.build(&short);
    let tasks = shard_tasks(located);
    let _lease = build_lease(cache, &short)?;
    if let Some((_, manifest)) = set_up_build(cache, &build, located)? {
        let outcome = TokenStoreOutcome::untouched(located.tokens, Some(&manifest));
        return Ok((manifest, outcome));
    }
    let claims = Claims::new(cache.liveness());
    let run = BuildRun { spec, cache, options, located, encoders: &encoders, build: &build };
    let (records, tokenized_here, kind, fast_off, _publish_guard) = match tokenize_all(&run, &claims, &tasks)? {
        Together::Publish { records, tokenized_here, kind, fast_off, guard } => {
            (records, tokenized_here, kind, fast_off, guard)
        }
        Together::PublishedElsewhere { tokenized_here } => {
            // A task that set up the build directory while another published leaves
            // it behind otherwise; whoever leaves last removes it.
            let _ = untrusted::remove_tree_below(cache.root(), &Path::new(BUILDING_DIR).join(&short));
            let vanished = || PrepareError::Vanished { path: cache.entry(&short).root().to_path_buf() };
            let (_, manifest) = published_kind(cache, &located.tokens, EntryKind::Tokens)?.ok_or_else(vanished)?;
            let outcome = TokenStoreOutcome {
                fingerprint: located.tokens,
                built: tokenized_here > 0,
                shards_tokenized_here: tokenized_here,
                tokenize_seconds: started.elapsed().as_secs_f64(),
                tokens: manifest.totals.counts.tokens,
            };
            return Ok((manifest, outcome));
        }
    };
    let tokenize_seconds = started.elapsed().as_secs_f64();
    let finished =
        Finished { records, tokenized_here, kind, fast_off, started, tokenize_seconds, shards_total: tasks.len() };
    let manifest = publish_store(&run, finished)?;
    encoders.free_in_background();
    let outcome = TokenStoreOutcome {
        fingerprint: located.tokens,
        built: true,
        shards_tokenized_here: tokenized_here,
        tokenize_seconds,
        tokens: manifest.totals.counts.tokens,
    };
    Ok((manifest, outcome))
}

/// A token store's shards, all tokenized, and how.
struct Finished {
    records: Vec<ShardRecord>,
    tokenized_here: usize,
    kind: crate::cache::manifest::EncoderKind,
    fast_off: Option<String>,
    started: Instant,
    tokenize_seconds: f64,
    shards_total: usize,
}

/// Assembles and publishes the token store (another task may have published it
/// first: its manifest is then the one returned).
fn publish_store(run: &BuildRun, finished: Finished) -> Result<Manifest, PrepareError> {
    let BuildRun { spec, cache, options, located, encoders, build } = *run;
    let publish_started = Instant::now();
    let by_split = record::group(located, finished.records)?;
    let tokenizer_files = encoders
        .files_for_readers(None)
        .map_err(|message| TokenizerError::Load { source_name: encoders.source_name.clone(), message })?;
    let publish::Assembly { entry: assembly, data_files, files } =
        publish::assemble(build, &by_split.records, &tokenizer_files)?;
    let build_record = BuildRecord {
        host: fsutil::whoami().host.clone(),
        pid: fsutil::whoami().pid,
        workers: options.jobs,
        shards_tokenized_here: finished.tokenized_here,
        shards_total: finished.shards_total,
    };
    let making = record::Making {
        spec,
        located,
        encoders,
        kind: finished.kind,
        fast_off: finished.fast_off,
        build: build_record,
        tokenize_seconds: finished.tokenize_seconds,
    };
    let mut manifest = record::manifest(making, by_split.counts, &data_files, files);
    manifest.timings.publish_seconds = publish_started.elapsed().as_secs_f64();
    manifest.timings.total_seconds = finished.started.elapsed().as_secs_f64() + located.hash_seconds;
    let short = located.tokens.short();
    if publish(cache, assembly, &manifest)? {
        // Published: the build directory has served its purpose.
        let _ = untrusted::remove_tree_below(cache.root(), &Path::new(BUILDING_DIR).join(&short));
    } else {
        manifest = Manifest::load(&cache.entry(&short).manifest())?;
    }
    Ok(manifest)
}

/// Names the published view after the spec and records its use.
fn use_published(cache: &CacheLayout, spec: &Spec, prepared: Prepared) -> Result<Prepared, PrepareError> {
    let short = prepared.manifest.short_fingerprint().to_string();
    link_name(cache, &spec.name, &short)?;
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
        if let Some(found) = published_kind(cache, &located.tokens, EntryKind::Tokens)? {
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
    let _progress_file = build_progress::ticker(build, &spec.name, &located.tokens, tasks.len() as u64);
    let counters = Arc::new(BuildCounters::default());
    let budget = budget::Budget::for_threads(options.jobs);
    let context = shard::ShardContext {
        spec,
        encoders,
        selector: Selector::new(&spec.source.text_field, &spec.filter),
        dtype: StoreDtype::for_vocabulary(encoders.vocab_size),
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
    build_together(&context, claims, tasks, &pool, cache, &located.tokens)
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
            PrepareError::View(view) => view.fault(),
            PrepareError::Lookup(lookup) => lookup.fault(),
            PrepareError::Gc(gc) => gc.fault(),
            // Writing and I/O failures are the user's when the disk or permissions are.
            PrepareError::Io(_) => Fault::Cause,
            PrepareError::Threads(_) => Fault::Internal,
            _ => Fault::User,
        }
    }
}
