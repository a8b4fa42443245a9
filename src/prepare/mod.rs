//! `prepare`: resolve inputs, fingerprint, return the entry if it exists, else
//! tokenize every shard in parallel and publish the entry atomically.

mod publish;
mod shard;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rayon::prelude::*;

use crate::cache::layout::{BuildLayout, CacheLayout, EntryLayout};
use crate::cache::lease::Lease;
use crate::cache::manifest::{
    BuildRecord, Counts, InputRecord, MANIFEST_VERSION, Manifest, ManifestError, SplitRecord, Timings, TokenizerRecord,
    Totals,
};
use crate::cache::memo::ContentHashMemo;
use crate::cache::writer::{Columns, WriteError};
use crate::fingerprint::{Fingerprint, FingerprintInputs};
use crate::fsutil;
use crate::inputs::{self, InputError, SplitInputs};
use crate::progress::{self, ProgressMode, Reporter};
use crate::source::Selector;
use crate::spec::{Spec, SpecError};
use crate::tokenizer::{self, EncoderKind, Encoders, TokenizerError};

pub use shard::{BuildCounters, SAMPLE_EVERY, ShardError, ShardRecord};

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
    #[error("{doing}: {source}")]
    Io { doing: &'static str, source: std::io::Error },
    #[error(
        "entry {path} has fingerprint {found}, not {expected}; remove it (a 64-bit prefix collision or a damaged cache)"
    )]
    Collision { path: PathBuf, found: String, expected: String },
}

impl PrepareError {
    pub(crate) fn io(doing: &'static str) -> impl Fn(std::io::Error) -> PrepareError {
        move |source| PrepareError::Io { doing, source }
    }

    /// Whether the user can fix this (exit 1) rather than an internal failure (exit 2).
    pub fn is_user_error(&self) -> bool {
        !matches!(self, PrepareError::Write(_) | PrepareError::Io { .. })
            || matches!(self, PrepareError::Io { source, .. } if is_space_or_permission(source))
            || matches!(self, PrepareError::Write(WriteError::Io { source, .. }) if is_space_or_permission(source))
    }
}

fn is_space_or_permission(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::QuotaExceeded
    )
}

/// Execution settings; none of them changes the entry's bytes.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    pub workers: usize,
    pub progress: ProgressMode,
}

/// A spec resolved to its fingerprint, without reading any input bytes twice.
pub struct Located {
    pub fingerprint: Fingerprint,
    pub splits: Vec<SplitInputs>,
    pub hashes: Vec<(String, Vec<blake3::Hash>)>,
    pub tokenizer_identity: blake3::Hash,
    pub hash_seconds: f64,
}

/// Resolves inputs and computes the fingerprint (one `stat` per memoized input).
pub fn locate(spec: &Spec, cache: &CacheLayout) -> Result<Located, PrepareError> {
    let started = Instant::now();
    let splits = inputs::resolve(spec)?;
    let memo = ContentHashMemo::new(cache.memo_dir());
    let hashes = inputs::content_hashes(&splits, &memo)?;
    let tokenizer_identity = tokenizer::identity(spec)?;
    let canonical = spec.canonical();
    let fingerprint =
        FingerprintInputs { canonical_spec: &canonical, tokenizer: &tokenizer_identity, splits: &hashes }.fingerprint();
    Ok(Located { fingerprint, splits, hashes, tokenizer_identity, hash_seconds: started.elapsed().as_secs_f64() })
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
    let located = locate(spec, cache)?;
    let short = located.fingerprint.short();
    if let Some((entry, manifest)) = published(cache, &located.fingerprint)? {
        publish::link_name(cache, &spec.name, &short)?;
        mark_used(cache, &short);
        return Ok(Prepared { entry, manifest, built: false, shards_tokenized_here: 0 });
    }
    tracing::info!(fingerprint = %short, "building entry");
    let encoders = Encoders::load(spec)?;
    let build = cache.build(&short);
    for split in &located.splits {
        fsutil::create_dir_all(&build.parts_dir(&split.name))
            .map_err(PrepareError::io("creating the build directory"))?;
    }
    let tasks: Vec<shard::ShardTask> = located
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
        .collect();
    let _lease = Lease::acquire(cache, &short, "build").map_err(PrepareError::io("taking a build lease"))?;
    let progress_file = progress_ticker(&build, spec, &located.fingerprint, tasks.len() as u64);
    let counters = Arc::new(BuildCounters::default());
    let context = shard::ShardContext {
        spec,
        encoders: &encoders,
        selector: Selector::new(&spec.source.text_field, &spec.filter),
        columns: Columns::new(spec.output.token_type, &spec.sequence),
        build: &build,
        counters: &counters,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.workers.max(1))
        .build()
        .map_err(|err| PrepareError::Io { doing: "starting worker threads", source: std::io::Error::other(err) })?;

    let tokenize_started = Instant::now();
    let total_input_bytes: u64 = tasks.iter().map(|t| t.input.size).sum();
    let reporter = start_reporter(options.progress, counters.clone(), tasks.len() as u64, total_input_bytes);
    let fast_disabled_marker = build.root().join("fast-path-disabled");
    let mut kind = if encoders.fast_available() && !fast_disabled_marker.exists() {
        EncoderKind::FastBytelevelBpe
    } else {
        EncoderKind::Tokenizers
    };
    let (records, tokenized_here) = loop {
        let outcome = pool.install(|| run_shards(&context, &tasks, kind));
        match outcome {
            Err(PrepareError::Shard(ShardError::FastPathMismatch { path, record }))
                if kind == EncoderKind::FastBytelevelBpe =>
            {
                // Rare: the vocabulary looked equivalent but is not. Every shard of this
                // build is then encoded by the reference, so the output stays deterministic.
                tracing::warn!(path = %path.display(), record, "the fast encoder disagrees with the tokenizer; re-encoding every shard with the tokenizer");
                fsutil::write_atomic(&fast_disabled_marker, b"")
                    .map_err(PrepareError::io("recording the fast-path fallback"))?;
                kind = EncoderKind::Tokenizers;
            }
            other => break other?,
        }
    };
    drop(reporter);
    drop(progress_file);
    let tokenize_seconds = tokenize_started.elapsed().as_secs_f64();

    let publish_started = Instant::now();
    let mut by_split: BTreeMap<String, Vec<ShardRecord>> =
        located.splits.iter().map(|s| (s.name.clone(), Vec::new())).collect();
    for record in records {
        by_split.entry(record.split.clone()).or_default().push(record);
    }
    let columns = Columns::new(spec.output.token_type, &spec.sequence);
    let publish::Assembly { entry: assembly, data_files, files } =
        publish::assemble(&build, &by_split, &columns, &short)?;
    let mut totals = Totals { bytes: files.iter().map(|f| f.size).sum(), ..Totals::default() };
    let mut splits = BTreeMap::new();
    for (split, split_inputs) in located.splits.iter().zip(&located.hashes) {
        let mut counts = Counts::default();
        for record in &by_split[&split.name] {
            counts.add(&record.counts);
        }
        totals.counts.add(&counts);
        let inputs = split.files.iter().zip(&split_inputs.1).map(|(file, hash)| InputRecord::new(file, hash)).collect();
        splits.insert(split.name.clone(), SplitRecord { inputs, data_files: data_files[&split.name].clone(), counts });
    }
    let mut manifest = Manifest {
        manifest_version: MANIFEST_VERSION,
        fingerprint: located.fingerprint.full(),
        name: spec.name.clone(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        created_unix: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        spec: spec.canonical(),
        tokenizer: TokenizerRecord {
            source: encoders.source_name.clone(),
            blake3: located.tokenizer_identity.to_hex().to_string(),
            vocab_size: encoders.vocab_size,
            encoder: kind,
            fast_unavailable: encoders.fast_unavailable.clone(),
            bos_id: encoders.bos_eos.prepend,
            eos_id: encoders.bos_eos.append,
        },
        splits,
        files,
        totals,
        timings: Timings { hash_inputs_seconds: located.hash_seconds, tokenize_seconds, ..Timings::default() },
        build: BuildRecord {
            host: fsutil::host_name(),
            pid: std::process::id(),
            workers: options.workers,
            shards_tokenized_here: tokenized_here,
            shards_total: tasks.len(),
        },
    };
    manifest.timings.publish_seconds = publish_started.elapsed().as_secs_f64();
    manifest.timings.total_seconds = started.elapsed().as_secs_f64();
    let won = publish::publish(cache, assembly, &manifest)?;
    let entry = cache.entry(&short);
    if won {
        // Published: the build directory has served its purpose.
        let _ = fs_err::remove_dir_all(build.root());
    } else {
        manifest = Manifest::load(&entry.manifest())?;
    }
    publish::link_name(cache, &spec.name, &short)?;
    mark_used(cache, &short);
    Ok(Prepared { entry, manifest, built: won, shards_tokenized_here: tokenized_here })
}

/// Runs every shard not already finished; returns all records in task order and
/// how many shards this call tokenized.
fn run_shards(
    context: &shard::ShardContext,
    tasks: &[shard::ShardTask],
    kind: EncoderKind,
) -> Result<(Vec<ShardRecord>, usize), PrepareError> {
    let results: Vec<(ShardRecord, bool)> = tasks
        .par_iter()
        .map(|task| match context.finished_record(task, kind) {
            Some(record) => {
                context.counters.shards_done.fetch_add(1, Ordering::Relaxed);
                context.counters.input_bytes.fetch_add(task.input.size, Ordering::Relaxed);
                Ok((record, false))
            }
            None => context.run(task, kind).map(|record| (record, true)).map_err(PrepareError::from),
        })
        .collect::<Result<_, _>>()?;
    let tokenized = results.iter().filter(|(_, fresh)| *fresh).count();
    Ok((results.into_iter().map(|(record, _)| record).collect(), tokenized))
}

fn start_reporter(mode: ProgressMode, counters: Arc<BuildCounters>, shards: u64, input_bytes: u64) -> Reporter {
    Reporter::start(mode, "prepare", move |elapsed| {
        let done = counters.input_bytes.load(Ordering::Relaxed).min(input_bytes);
        let line = format!(
            "{}/{} shards, {}docs/s, {}tokens/s, {}B/s, ETA {}",
            counters.shards_done.load(Ordering::Relaxed),
            shards,
            progress::per_second(counters.documents.load(Ordering::Relaxed), elapsed),
            progress::per_second(counters.tokens.load(Ordering::Relaxed), elapsed),
            progress::per_second(done, elapsed),
            progress::eta(done, input_bytes, elapsed),
        );
        (done, input_bytes, line)
    })
}

/// What `ferry status` shows of a build in progress.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BuildProgress {
    pub name: String,
    pub fingerprint: String,
    pub host: String,
    pub pid: u32,
    pub job_id: Option<String>,
    pub shards_done: u64,
    pub shards_total: u64,
    pub updated_unix: u64,
}

/// Keeps this builder's progress file fresh every two seconds; it is removed with
/// the build directory (or by `gc` when the builder died).
fn progress_ticker(build: &BuildLayout, spec: &Spec, fingerprint: &Fingerprint, shards_total: u64) -> progress::Ticker {
    let (host, pid) = (fsutil::host_name(), std::process::id());
    let path = build.progress_file(&host, pid);
    let build = build.clone();
    let mut progress = BuildProgress {
        name: spec.name.clone(),
        fingerprint: fingerprint.full(),
        host,
        pid,
        job_id: std::env::var("SLURM_JOB_ID").ok(),
        shards_done: 0,
        shards_total,
        updated_unix: 0,
    };
    progress::Ticker::every(std::time::Duration::from_secs(2), move || {
        progress.shards_done = build.count_shard_records();
        progress.updated_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if build.root().exists() {
            let _ = fsutil::write_json_atomic(&path, &progress);
        }
    })
}

/// Records a use of the entry: the mtime of `used/<fp16>`. Cheap, and never
/// rewrites the manifest.
pub fn mark_used(cache: &CacheLayout, short_fingerprint: &str) {
    let marker = cache.used_marker(short_fingerprint);
    let result = fsutil::create_dir_all(&cache.used_dir()).and_then(|()| {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&marker)?;
        file.set_modified(SystemTime::now())
    });
    if let Err(err) = result {
        tracing::warn!(path = %marker.display(), error = %err, "cannot record the entry's last use");
    }
}
