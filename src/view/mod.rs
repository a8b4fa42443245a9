//! Views: training rows derived from a token store. Everything after tokenizing is
//! a view's: packing, `seq_len`, the columns, the shuffle, the token type and the
//! formats. A view opens no raw input and runs no tokenizer; it reads the token
//! store's documents and writes its own files, so it is bound by writing its bytes.
//! A view is a complete entry by itself (its Arrow files, formats and tokenizer
//! files): it loads and stages after its token store is gone.
//!
//! # Layout
//!
//! - `store`: a token store's shards, read and checked against its manifest.
//! - `rows`: rows as pieces of documents.
//! - `plan`: the rows of an input shard, from its documents' lengths alone.
//! - `best_fit`: best-fit-decreasing packing of a window of documents.
//! - `shuffle`: the seeded permutation of a split's rows.
//! - `gather`: a row's tokens, read from the token store's files.
//! - `write`: one unit of rows written as Arrow files and format parts.
//! - `assemble`: the units put together as an entry, and its manifest.
//! - here: the whole view, claimed among racing prepares, derived and published.

mod assemble;
pub mod best_fit;
mod gather;
pub mod plan;
pub mod rows;
pub mod shuffle;
mod store;
mod write;

use std::path::{Path, PathBuf};
use std::time::Instant;

use rayon::prelude::*;

use crate::cache::build_progress;
use crate::cache::claims::{ClaimGuard, Claims};
use crate::cache::formats::FormatsPlan;
use crate::cache::layout::{BUILDING_DIR, CacheLayout, EntryLayout};
use crate::cache::lease::Lease;
use crate::cache::lookup::{LookupError, published};
use crate::cache::manifest::{EntryKind, Manifest, ManifestError};
use crate::cache::publish::publish;
use crate::cache::writer::{Columns, WriteError};
use crate::errors::{Failure, Fault, IoError};
use crate::fingerprint::Fingerprint;
use crate::fsutil::untrusted;
use crate::spec::{PackMode, Spec};

use rows::{Plan, PlanStats};
use store::{StoreShard, TokenStore};
use write::{UnitContext, UnitOutput, write_unit};

#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(
        "token store {store} is damaged: {file} {problem}; `ferry prepare SPEC --rebuild-tokens` removes it and tokenizes again"
    )]
    DamagedStore { store: PathBuf, file: String, problem: String },
    #[error("the token store {path} was removed before the view could read it; run prepare again")]
    StoreGone { path: PathBuf },
    #[error(
        "the tokenizer has {vocab_size} tokens, more than output.token_type = \"{token_type}\" holds; choose a wider token_type"
    )]
    VocabTooLarge { vocab_size: u64, token_type: &'static str },
    #[error(
        "pack = \"best_fit\" pads rows, but the tokenizer has neither a pad token nor an EOS token; name one with tokenizer.eos_token"
    )]
    NoPadToken,
    #[error("starting worker threads; a lower --jobs may start")]
    Threads(#[source] rayon::ThreadPoolBuildError),
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

impl Failure for ViewError {
    fn fault(&self) -> Fault {
        match self {
            ViewError::Io(_) | ViewError::Write(_) => Fault::Cause,
            ViewError::Threads(_) => Fault::Internal,
            ViewError::Lookup(lookup) => lookup.fault(),
            ViewError::Manifest(manifest) => manifest.fault(),
            _ => Fault::User,
        }
    }
}

/// Tokens in a unit of rows at most: units are written in parallel, a shard's
/// rows in several when it is large, and each unit's files hold it whole.
const UNIT_TOKENS: u64 = 64 << 20;

/// A view made or found.
pub struct Derived {
    pub entry: EntryLayout,
    pub manifest: Manifest,
    /// Whether this process derived and published it.
    pub built: bool,
}

/// What a view's manifest records of the prepare that made it.
pub struct Making {
    /// The view's fingerprint.
    pub fingerprint: Fingerprint,
    pub hash_seconds: f64,
    /// Tokenizing this prepare did first (0 when the token store was there).
    pub tokenize_seconds: f64,
    pub shards_tokenized_here: usize,
    pub jobs: usize,
}

/// How long a prepare waits between looks at a view another one is deriving.
const POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// Derives the view of `spec` from the token store `store_manifest`, unless it is
/// published meanwhile. One prepare derives it (the one holding the claim); others
/// wait for it, and take the claim over if its holder dies.
pub fn derive(
    cache: &CacheLayout,
    spec: &Spec,
    store_manifest: &Manifest,
    making: &Making,
) -> Result<Derived, ViewError> {
    let started = Instant::now();
    let token_type = spec.output.token_type;
    if store_manifest.tokenizer.vocab_size > token_type.max_vocab() {
        let vocab_size = store_manifest.tokenizer.vocab_size;
        return Err(ViewError::VocabTooLarge { vocab_size, token_type: token_type.dtype() });
    }
    let pad_id = match spec.sequence.pack {
        PackMode::BestFit => store_manifest.tokenizer.pad_id.ok_or(ViewError::NoPadToken)?,
        _ => 0,
    };
    if u64::from(pad_id) >= store_manifest.tokenizer.vocab_size.max(1) {
        return Err(ViewError::DamagedStore {
            store: cache.entry(store_manifest.short_fingerprint()).root().to_path_buf(),
            file: "manifest.json".into(),
            problem: format!("names pad id {pad_id}, outside its vocabulary"),
        });
    }
    let short = making.fingerprint.short();
    // Held while the view reads the token store: gc keeps both meanwhile.
    let lease =
        |short: &str, kind| Lease::acquire(cache, short, kind).map_err(IoError::at("taking a lease in", cache.root()));
    let (_store_lease, _lease) = (lease(store_manifest.short_fingerprint(), "derive")?, lease(&short, "build")?);
    let claims = Claims::new(cache.liveness());
    let claimed = match claim(cache, &claims, &making.fingerprint)? {
        Claimed::Ours(guard) => guard,
        Claimed::Published(entry, manifest) => return Ok(Derived { entry, manifest: *manifest, built: false }),
    };
    let store = TokenStore::open(cache, store_manifest)?;
    let build = cache.build(&short);
    // What a deriver that died here left.
    untrusted::remove_tree_below(cache.root(), &Path::new(BUILDING_DIR).join(&short).join("parts"))
        .map_err(IoError::at("clearing", build.root()))?;
    let splits: Vec<&String> = store_manifest.splits.keys().collect();
    let _progress = build_progress::ticker(&build, &spec.name, &making.fingerprint, splits.len() as u64);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(making.jobs.max(1)).build().map_err(ViewError::Threads)?;
    let mut outputs = Vec::new();
    for split in splits {
        let context = UnitContext {
            build: &build,
            split,
            columns: Columns::new(token_type, &spec.sequence),
            formats: FormatsPlan {
                formats: &spec.output.formats,
                token_type,
                documents: spec.sequence.position_ids || spec.sequence.pack == PackMode::BestFit,
            },
            target_shard_bytes: spec.output.target_shard_bytes,
            pad_id,
        };
        outputs.push((split.clone(), pool.install(|| derive_split(&store, &context, spec))?));
    }
    let publish_started = Instant::now();
    let made = assemble::Made { spec, making, store: &store, view_seconds: started.elapsed().as_secs_f64() };
    let (assembly, mut manifest) = assemble::assemble(&build, &made, outputs)?;
    manifest.timings.publish_seconds = publish_started.elapsed().as_secs_f64();
    manifest.timings.total_seconds = making.hash_seconds + making.tokenize_seconds + started.elapsed().as_secs_f64();
    let won = publish(cache, assembly, &manifest)?;
    let entry = cache.entry(&short);
    if !won {
        manifest = Manifest::load(&entry.manifest())?;
    }
    // The claim goes first (its file lies in the build directory), then what the
    // build left: published either way, by this prepare or another.
    drop(claimed);
    let _ = untrusted::remove_tree_below(cache.root(), &Path::new(BUILDING_DIR).join(&short));
    Ok(Derived { entry, manifest, built: won })
}

/// Whether this prepare derives the view, or found it published.
enum Claimed<'a> {
    Ours(ClaimGuard<'a>),
    Published(EntryLayout, Box<Manifest>),
}

/// Waits until the view is published or its claim is ours.
fn claim<'a>(cache: &CacheLayout, claims: &'a Claims, view: &Fingerprint) -> Result<Claimed<'a>, ViewError> {
    let build = cache.build(&view.short());
    let path = build.root().join("derive.lock");
    loop {
        if let Some((entry, manifest)) = published(cache, view, EntryKind::View)? {
            return Ok(Claimed::Published(entry, Box::new(manifest)));
        }
        cache.create_own_dirs(&[build.root().to_path_buf()]).map_err(IoError::at("creating", build.root()))?;
        let claimed = match claims.try_claim(&path) {
            Ok(claimed) => claimed,
            // The holder published and removed the build directory since it was made
            // above: look again.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(IoError::at("claiming", &path)(err).into()),
        };
        if let Some(guard) = claimed {
            // Published by the holder before ours: the build directory, made again
            // above after it removed it, is ours to remove.
            if let Some((entry, manifest)) = published(cache, view, EntryKind::View)? {
                drop(guard);
                let _ = untrusted::remove_tree_below(cache.root(), &Path::new(BUILDING_DIR).join(view.short()));
                return Ok(Claimed::Published(entry, Box::new(manifest)));
            }
            return Ok(Claimed::Ours(guard));
        }
        std::thread::sleep(POLL);
    }
}

/// One split's rows: its units' files in order, and what packing kept and added.
pub struct SplitOutput {
    pub units: Vec<UnitOutput>,
    pub stats: PlanStats,
}

/// Derives one split on the current pool. Unshuffled, each input shard's rows are
/// planned, read and written by themselves (memory follows one shard); shuffled,
/// the split's rows are planned whole, permuted, and written in units of the
/// permuted order.
fn derive_split(store: &TokenStore, context: &UnitContext, spec: &Spec) -> Result<SplitOutput, ViewError> {
    let sequence = &spec.sequence;
    let seq_len = sequence.seq_len as u32;
    let files = store.shard_files(context.split);
    let mut stats = PlanStats::default();
    let units = match sequence.shuffle_seed {
        None => {
            let per_shard: Vec<(Vec<UnitOutput>, PlanStats)> = files
                .par_iter()
                .enumerate()
                .map(|(index, bin)| {
                    let shard = store.load_shard(bin)?;
                    let plan = plan::plan_shard(sequence.pack, seq_len, 0, &shard.offsets);
                    let shards = std::slice::from_ref(&shard);
                    // Best-fit rows take their pieces from anywhere in a window: each is read where it lies.
                    let in_order = sequence.pack != PackMode::BestFit;
                    let units = plan
                        .runs(UNIT_TOKENS)
                        .into_par_iter()
                        .enumerate()
                        .map(|(chunk, rows)| write_unit(context, (index, chunk), &plan, rows, shards, in_order))
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok((units, plan.stats))
                })
                .collect::<Result<_, ViewError>>()?;
            let mut units = Vec::new();
            for (shard_units, shard_stats) in per_shard {
                units.extend(shard_units);
                stats.add(&shard_stats);
            }
            units
        }
        Some(seed) => {
            // Every shard's file stays open while rows are read from all of them.
            crate::fsutil::raise_open_files_limit();
            let shards: Vec<StoreShard> =
                files.par_iter().map(|bin| store.load_shard(bin)).collect::<Result<_, _>>()?;
            let plans: Vec<Plan> = shards
                .par_iter()
                .enumerate()
                .map(|(index, shard)| plan::plan_shard(sequence.pack, seq_len, index as u32, &shard.offsets))
                .collect();
            let mut plan = Plan::default();
            plans.into_iter().for_each(|shard_plan| plan.append(shard_plan));
            stats = plan.stats;
            let order = shuffle::permutation(plan.rows.len(), seed);
            plan.runs_in(&order, UNIT_TOKENS)
                .into_par_iter()
                .enumerate()
                .map(|(chunk, run)| {
                    let rows = order[run].iter().copied();
                    write_unit(context, (0, chunk), &plan, rows, &shards, false)
                })
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    Ok(SplitOutput { units, stats })
}
