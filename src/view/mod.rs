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
//! - `interleave`: a mixture's rows, several components' interleaved by weight.
//! - `gather`: a row's tokens, read from the token store's files.
//! - `write`: one unit of rows written as Arrow files and format parts.
//! - `twin`: a published view of the same rows, whose Arrow files a new view links.
//! - `assemble`: the units put together as an entry, and its manifest.
//! - here: the whole view, claimed among racing prepares, derived and published.

mod assemble;
pub mod best_fit;
mod blend;
mod gather;
pub mod interleave;
pub mod plan;
pub mod rows;
pub mod shuffle;
mod store;
mod twin;
mod write;

use std::collections::BTreeMap;
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
use crate::spec::{Format, Formats, OutputSpec, PackMode, SequenceSpec, Spec};

use interleave::{Component, Interleaved, Total, Used};
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
    #[error(
        "the view {view} whose Arrow files this view shares is damaged: {file} {problem}; `ferry verify` checks it, \
         and `ferry gc` removes what fails"
    )]
    DamagedView { view: PathBuf, file: String, problem: String },
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
    #[error(
        "output.formats has \"modded_nanogpt\", whose tokens are uint16, but the tokenizer has {vocab_size} tokens; \
         leave the format out for this tokenizer"
    )]
    ModdedNanogptVocab { vocab_size: u64 },
    #[error(
        "output.formats has \"olmo\", whose reader finds documents by their EOS, but the token store's documents end \
         with none; set tokenizer.eos_token (with ensure_bos_eos = true) in the spec"
    )]
    OlmoWithoutEos,
    #[error("starting worker threads; a lower --jobs may start")]
    Threads(#[source] rayon::ThreadPoolBuildError),
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(
        "mixture component {name} is short in split {split:?}: it has {available} tokens in rows of this packing, \
         {needed} are needed for its weight, and {epochs} epoch(s) are allowed; raise its max_epochs, lower its \
         weight or mix.total_tokens"
    )]
    ShortComponent { name: String, split: String, available: u64, needed: u64, epochs: u64 },
    #[error(
        "mixture component {name} has no rows in split {split:?} at this packing (its documents are too few for one row); \
         lower sequence.seq_len, use pack = \"best_fit\", or leave the split out with mix.splits"
    )]
    EmptyComponent { name: String, split: String },
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

/// What a view is made into: the view part of a spec (or of a mixture spec).
pub struct Recipe<'a> {
    pub name: &'a str,
    pub sequence: &'a SequenceSpec,
    pub output: &'a OutputSpec,
    /// The whole spec's canonical form, which the manifest records.
    pub canonical: serde_json::Value,
}

impl<'a> Recipe<'a> {
    pub fn of(spec: &'a Spec) -> Recipe<'a> {
        Recipe { name: &spec.name, sequence: &spec.sequence, output: &spec.output, canonical: spec.canonical() }
    }
}

/// Where a view's rows come from.
pub enum Source<'a> {
    /// One token store's documents.
    Store(&'a Manifest),
    /// Several token stores' rows, interleaved by weight (`interleave`).
    Mixture(&'a Mixing<'a>),
}

/// A mixture's components and how they are mixed.
pub struct Mixing<'a> {
    /// Each component's token store, in the spec's order; they share a tokenizer.
    pub stores: Vec<&'a Manifest>,
    /// How each component is named in messages and the manifest.
    pub names: Vec<String>,
    /// Weights (any positive scale) and epoch caps, in the same order.
    pub components: Vec<(f64, Option<u64>)>,
    /// The document tokens asked of each split that has a total; the others hold
    /// as many as need no repetition.
    pub totals: BTreeMap<String, u64>,
    pub seed: u64,
    /// The splits mixed: each component has them all.
    pub splits: Vec<String>,
}

impl Mixing<'_> {
    fn total(&self, split: &str) -> Total {
        self.totals.get(split).map_or(Total::NoRepetition, |tokens| Total::Tokens(*tokens))
    }
}

impl Source<'_> {
    pub fn stores(&self) -> Vec<&Manifest> {
        match self {
            Source::Store(store) => vec![*store],
            Source::Mixture(mixing) => mixing.stores.clone(),
        }
    }

    /// The token store's full fingerprint; none for a mixture (its canonical form names its stores).
    fn store_fingerprint(&self) -> Option<&str> {
        match self {
            Source::Store(store) => Some(store.fingerprint.as_str()),
            Source::Mixture(_) => None,
        }
    }

    fn splits(&self) -> Vec<String> {
        match self {
            Source::Store(store) => store.splits.keys().cloned().collect(),
            Source::Mixture(mixing) => mixing.splits.clone(),
        }
    }

    /// The formats units write: a mixture's Megatron files are its components'
    /// document files (`assemble`), not rows.
    fn row_formats(&self, formats: &Formats) -> Formats {
        match self {
            Source::Store(_) => formats.clone(),
            Source::Mixture(_) => formats.without_megatron(),
        }
    }
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

/// Derives the view `recipe` of `source`, unless it is published meanwhile. One
/// prepare derives it (the one holding the claim); others wait for it, and take
/// the claim over if its holder dies.
pub fn derive(cache: &CacheLayout, recipe: &Recipe, source: &Source, making: &Making) -> Result<Derived, ViewError> {
    let started = Instant::now();
    let manifests = source.stores();
    let pad_id = pad_id(cache, recipe, manifests[0])?;
    let short = making.fingerprint.short();
    // Held while the view reads the token stores: gc keeps them meanwhile.
    let mut _leases = manifests
        .iter()
        .map(|store| lease(cache, store.short_fingerprint(), "derive"))
        .collect::<Result<Vec<_>, _>>()?;
    _leases.push(lease(cache, &short, "build")?);
    let claims = Claims::new(cache.liveness());
    let claimed = match claim(cache, &claims, &making.fingerprint)? {
        Claimed::Ours(guard) => guard,
        Claimed::Published(entry, manifest) => return Ok(Derived { entry, manifest: *manifest, built: false }),
    };
    let stores: Vec<TokenStore> =
        manifests.iter().map(|manifest| TokenStore::open(cache, manifest)).collect::<Result<_, _>>()?;
    // A view of the same rows already published: its Arrow files are this one's.
    let twin_manifest = twin::find(cache, recipe, source.store_fingerprint(), &short);
    if let Some(manifest) = &twin_manifest {
        _leases.push(lease(cache, manifest.short_fingerprint(), "derive")?);
    }
    let twin = twin_manifest.as_ref().map(|manifest| TokenStore::open_view(cache, manifest)).transpose()?;
    let build = cache.build(&short);
    // What a deriver that died here left.
    untrusted::remove_tree_below(cache.root(), &Path::new(BUILDING_DIR).join(&short).join("parts"))
        .map_err(IoError::at("clearing", build.root()))?;
    let splits = source.splits();
    let _progress = build_progress::ticker(&build, recipe.name, &making.fingerprint, splits.len() as u64);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(making.jobs.max(1)).build().map_err(ViewError::Threads)?;
    let token_type = recipe.output.token_type;
    let row_formats = source.row_formats(&recipe.output.formats);
    let mut outputs = Vec::new();
    for split in &splits {
        let context = UnitContext {
            build: &build,
            split,
            columns: Columns::new(token_type, recipe.sequence),
            formats: FormatsPlan {
                formats: &row_formats,
                token_type: row_formats.parts_type(token_type, manifests[0].tokenizer.vocab_size),
                documents: documents(recipe.sequence),
            },
            target_shard_bytes: recipe.output.target_shard_bytes,
            pad_id,
            arrow: twin.is_none(),
        };
        let output = match source {
            Source::Store(_) => pool.install(|| derive_split(&stores[0], &context, recipe.sequence))?,
            Source::Mixture(mixing) => {
                pool.install(|| derive_mixed_split(&stores, &context, recipe.sequence, mixing))?
            }
        };
        outputs.push((split.clone(), output));
    }
    let publish_started = Instant::now();
    let mixing = match source {
        Source::Mixture(mixing) => Some(*mixing),
        Source::Store(_) => None,
    };
    let view_seconds = started.elapsed().as_secs_f64();
    let made = assemble::Made { recipe, making, stores: &stores, mixing, twin: twin.as_ref(), view_seconds };
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

/// A lease of `kind` on the entry `short`: gc keeps it while this view is made.
fn lease(cache: &CacheLayout, short: &str, kind: &str) -> Result<Lease, ViewError> {
    Ok(Lease::acquire(cache, short, kind).map_err(IoError::at("taking a lease in", cache.root()))?)
}

/// Rows hold documents a reader keeps apart: the formats record their pieces.
fn documents(sequence: &SequenceSpec) -> bool {
    sequence.position_ids || sequence.pack == PackMode::BestFit
}

/// The id best-fit rows are padded with (0, unused, otherwise), after checking the
/// token type and the formats hold the vocabulary and its documents.
fn pad_id(cache: &CacheLayout, recipe: &Recipe, store: &Manifest) -> Result<u32, ViewError> {
    let token_type = recipe.output.token_type;
    let vocab_size = store.tokenizer.vocab_size;
    if vocab_size > token_type.max_vocab() {
        return Err(ViewError::VocabTooLarge { vocab_size, token_type: token_type.dtype() });
    }
    let formats = &recipe.output.formats;
    if formats.has(Format::ModdedNanogpt) && vocab_size > 1 << 16 {
        return Err(ViewError::ModdedNanogptVocab { vocab_size });
    }
    if formats.has(Format::Olmo) && store.tokenizer.eos_id.is_none() {
        return Err(ViewError::OlmoWithoutEos);
    }
    let pad_id = match recipe.sequence.pack {
        PackMode::BestFit => store.tokenizer.pad_id.ok_or(ViewError::NoPadToken)?,
        _ => 0,
    };
    if u64::from(pad_id) >= vocab_size.max(1) {
        return Err(ViewError::DamagedStore {
            store: cache.entry(store.short_fingerprint()).root().to_path_buf(),
            file: "manifest.json".into(),
            problem: format!("names pad id {pad_id}, outside its vocabulary"),
        });
    }
    Ok(pad_id)
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
    /// What each component of a mixture gave.
    pub used: Option<Vec<Used>>,
}

/// Derives one split on the current pool. Unshuffled, each input shard's rows are
/// planned, read and written by themselves (memory follows one shard); shuffled,
/// the split's rows are planned whole, permuted, and written in units of the
/// permuted order.
fn derive_split(store: &TokenStore, context: &UnitContext, sequence: &SequenceSpec) -> Result<SplitOutput, ViewError> {
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
            let mut plan = Plan::default();
            plan_shards(&shards, sequence).into_iter().for_each(|shard_plan| plan.append(shard_plan));
            stats = plan.stats;
            write_in_order(context, &plan, &shuffle::permutation(plan.rows.len(), seed), &shards)?
        }
    };
    Ok(SplitOutput { units, stats, used: None })
}

/// Each shard's rows planned (shard `i` as piece shard `i`), on the current pool.
fn plan_shards(shards: &[StoreShard], sequence: &SequenceSpec) -> Vec<Plan> {
    let seq_len = sequence.seq_len as u32;
    shards
        .par_iter()
        .enumerate()
        .map(|(index, shard)| plan::plan_shard(sequence.pack, seq_len, index as u32, &shard.offsets))
        .collect()
}

/// The plan's rows taken in `order` (indices into its rows, repeats allowed), written
/// in parallel units of consecutive rows of that order; each piece read where it lies.
fn write_in_order(
    context: &UnitContext,
    plan: &Plan,
    order: &[usize],
    shards: &[StoreShard],
) -> Result<Vec<UnitOutput>, ViewError> {
    plan.runs_in(order, UNIT_TOKENS)
        .into_par_iter()
        .enumerate()
        .map(|(chunk, run)| write_unit(context, (0, chunk), plan, order[run].iter().copied(), shards, false))
        .collect()
}

/// Derives one split of a mixture on the current pool: every component's rows
/// planned as a view's, interleaved by weight, and written in units of that order.
fn derive_mixed_split(
    stores: &[TokenStore],
    context: &UnitContext,
    sequence: &SequenceSpec,
    mixing: &Mixing,
) -> Result<SplitOutput, ViewError> {
    crate::fsutil::raise_open_files_limit();
    let split = context.split;
    let files: Vec<(&TokenStore, &String)> =
        stores.iter().flat_map(|store| store.shard_files(split).iter().map(move |bin| (store, bin))).collect();
    let shards: Vec<StoreShard> =
        files.par_iter().map(|(store, bin)| store.load_shard(bin)).collect::<Result<_, _>>()?;
    let mut plan = Plan::default();
    let mut components = Vec::new();
    let mut plans = plan_shards(&shards, sequence).into_iter();
    for (store, &(weight, max_epochs)) in stores.iter().zip(&mixing.components) {
        let start = plan.rows.len();
        for shard_plan in plans.by_ref().take(store.shard_files(split).len()) {
            plan.append(shard_plan);
        }
        components.push(Component { weight, max_epochs, rows: start..plan.rows.len() });
    }
    for (component, name) in components.iter().zip(&mixing.names) {
        if component.rows.is_empty() {
            return Err(ViewError::EmptyComponent { name: name.clone(), split: split.to_string() });
        }
    }
    let Interleaved { order, used } = interleave::interleave(&plan, &components, mixing.total(split), mixing.seed)
        .map_err(|short| ViewError::ShortComponent {
            name: mixing.names[short.component].clone(),
            split: split.to_string(),
            available: short.tokens_available,
            needed: short.tokens_needed,
            epochs: short.epochs,
        })?;
    let units = write_in_order(context, &plan, &order, &shards)?;
    let mut stats = PlanStats::default();
    for &row in &order {
        let row = &plan.rows[row];
        stats.tokens += plan.pieces_of(row).iter().map(|piece| u64::from(piece.len)).sum::<u64>();
        stats.padding += u64::from(row.padding);
    }
    // What packing left out of whole stores (remainders, cut tails, split documents)
    // is no count of the rows a mixture took: it counts its rows' tokens and padding only.
    Ok(SplitOutput { units, stats, used: Some(used) })
}
