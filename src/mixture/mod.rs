//! Mixtures: one training view of several token stores, by weight. Each
//! component is a token store, built once (from its spec, when missing) and
//! shared by every mixture and view that uses it; the mixture is a view of all
//! of them (`view::Source::Mixture`), so a new weight, seed or `seq_len` opens no
//! raw input and runs no tokenizer.
//!
//! - `spec`: the mixture spec file.
//! - here: its components resolved to token stores, its fingerprint, and the
//!   prepare that makes it.

pub mod spec;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::json;

use crate::cache::layout::{CacheLayout, EntryLayout};
use crate::cache::lease::Lease;
use crate::cache::lookup::{self, LookupError};
use crate::cache::manifest::{EntryKind, Manifest};
use crate::cache::publish::link_name;
use crate::errors::{Failure, Fault, IoError};
use crate::fingerprint::{Fingerprint, mixture_fingerprint};
use crate::prepare::{self, Located, PrepareError, PrepareOptions, TokenStoreOutcome};
use crate::spec::{Spec, SpecError, view_canonical};
use crate::view::{self, Mixing, Recipe, Source, ViewError};

pub use spec::{AnySpec, MixtureSpec, TotalTokens};

#[derive(Debug, thiserror::Error)]
pub enum MixtureError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("mixture component {name}")]
    Component {
        name: String,
        #[source]
        source: Box<PrepareError>,
    },
    #[error(transparent)]
    Prepare(Box<PrepareError>),
    #[error(transparent)]
    View(Box<ViewError>),
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(
        "mixture components {first} and {second} use different tokenizers ({first_tokenizer} and {second_tokenizer}): \
         a mixture's rows need one vocabulary; tokenize both with the same tokenizer"
    )]
    TokenizerMismatch { first: String, first_tokenizer: String, second: String, second_tokenizer: String },
    #[error("mixture component {name} {problem}")]
    NotAStore { name: String, problem: String },
    #[error("mixture component {name} has no split {split:?} (it has {has}); list the splits to mix in mix.splits")]
    MissingSplit { name: String, split: String, has: String },
    #[error("the mixture's components share no split; name them the same or list the splits to mix in mix.splits")]
    NoSharedSplit,
    #[error("mix.total_tokens names split {split:?}, which is not mixed (the mixed splits: {mixed})")]
    UnknownTotal { split: String, mixed: String },
    #[error(
        "mixture components {first} ({first_tokens}) and {second} ({second_tokens}) add different special tokens \
         to their documents; tokenize them with the same [tokenizer] bos_token, eos_token and ensure_bos_eos"
    )]
    SpecialTokens { first: String, first_tokens: String, second: String, second_tokens: String },
    #[error("mixture component {name}: {source}; prepare that entry first, or name its spec (spec = \"FILE\")")]
    EntryNotFound {
        name: String,
        #[source]
        source: LookupError,
    },
    #[error(
        "mixture components {first} and {second} are the same token store {store}; list it once with the sum of their weights"
    )]
    Repeated { first: String, second: String, store: String },
}

impl From<PrepareError> for MixtureError {
    fn from(err: PrepareError) -> Self {
        MixtureError::Prepare(Box::new(err))
    }
}

impl From<ViewError> for MixtureError {
    fn from(err: ViewError) -> Self {
        MixtureError::View(Box::new(err))
    }
}

impl Failure for MixtureError {
    fn fault(&self) -> Fault {
        match self {
            MixtureError::Component { source, .. } => source.fault(),
            MixtureError::Prepare(prepare) => prepare.fault(),
            MixtureError::View(view) => view.fault(),
            MixtureError::Lookup(lookup) => lookup.fault(),
            MixtureError::Io(_) => Fault::Cause,
            _ => Fault::User,
        }
    }
}

/// A component resolved to its token store.
pub struct Component {
    /// As messages and the manifest name it.
    pub name: String,
    pub store: Fingerprint,
    /// Its tokenizer's identity.
    pub tokenizer: String,
    /// Where its store comes from when it is not in the cache: its spec.
    origin: Origin,
}

enum Origin {
    Spec(Box<Spec>, Box<Located>),
    Entry,
}

/// A mixture spec resolved to its components and its fingerprint.
pub struct LocatedMixture {
    pub fingerprint: Fingerprint,
    /// What the fingerprint covers; the manifest's `spec`.
    pub canonical: serde_json::Value,
    pub components: Vec<Component>,
}

/// Resolves every component to its token store (by its spec's fingerprint, or by
/// the prepared entry it names) and computes the mixture's fingerprint. Reads no
/// input: a spec component's inputs are stat'ed, as `prepare` does.
pub fn locate(mixture: &MixtureSpec, cache: &CacheLayout) -> Result<LocatedMixture, MixtureError> {
    let mut components: Vec<Component> = Vec::new();
    for component in &mixture.mix.components {
        let name = component.name();
        let resolved = match (&component.spec, &component.entry) {
            (Some(path), _) => {
                let spec = match AnySpec::load(&mixture.resolve(path))? {
                    AnySpec::Pipeline(spec) => spec,
                    AnySpec::Mixture(_) => {
                        let problem =
                            "is a mixture spec; a component is a token store: list its components here instead";
                        return Err(MixtureError::NotAStore { name, problem: problem.into() });
                    }
                };
                let located = prepare::locate(&spec, cache)
                    .map_err(|source| MixtureError::Component { name: name.clone(), source: Box::new(source) })?;
                let tokenizer = located.tokenizer_identity.to_hex().to_string();
                Component { name, store: located.tokens, tokenizer, origin: Origin::Spec(spec, Box::new(located)) }
            }
            (None, Some(entry)) => {
                let store = entry_store(cache, &name, entry)?;
                let fingerprint = Fingerprint::from_hex(&store.fingerprint).ok_or_else(|| MixtureError::NotAStore {
                    name: name.clone(),
                    problem: format!("records a malformed fingerprint {:?}", store.fingerprint),
                })?;
                Component { name, store: fingerprint, tokenizer: store.tokenizer.blake3.clone(), origin: Origin::Entry }
            }
            (None, None) => unreachable!("the mixture spec's validation requires spec or entry"),
        };
        if let Some(first) = components.iter().find(|other| other.store == resolved.store) {
            return Err(MixtureError::Repeated {
                first: first.name.clone(),
                second: resolved.name,
                store: resolved.store.short(),
            });
        }
        if let Some(first) = components.first().filter(|first| first.tokenizer != resolved.tokenizer) {
            return Err(MixtureError::TokenizerMismatch {
                first: first.name.clone(),
                first_tokenizer: short_hex(&first.tokenizer),
                second: resolved.name,
                second_tokenizer: short_hex(&resolved.tokenizer),
            });
        }
        components.push(resolved);
    }
    let sum: f64 = mixture.mix.components.iter().map(|component| component.weight).sum();
    let canonical_components: Vec<serde_json::Value> = components
        .iter()
        .zip(&mixture.mix.components)
        .map(|(resolved, component)| {
            json!({
                "token_store": resolved.store.full(),
                "weight": component.weight / sum,
                "max_epochs": component.max_epochs,
            })
        })
        .collect();
    let canonical = canonical(mixture, canonical_components);
    Ok(LocatedMixture { fingerprint: mixture_fingerprint(&canonical), canonical, components })
}

/// The mixture's canonical form: what its fingerprint covers, and its manifest's `spec`.
fn canonical(mixture: &MixtureSpec, components: Vec<serde_json::Value>) -> serde_json::Value {
    let mut canonical = view_canonical(&mixture.sequence, &mixture.output);
    if let Some(all) = canonical.as_object_mut() {
        all.insert(
            "mix".into(),
            json!({
                "seed": mixture.mix.seed,
                "total_tokens": mixture.mix.total_tokens.as_ref().map(TotalTokens::canonical),
                "splits": mixture.mix.splits,
                "components": components,
            }),
        );
    }
    canonical
}

fn short_hex(hash: &str) -> String {
    hash.chars().take(16).collect()
}

/// The token store a prepared entry is, or was derived from.
fn entry_store(cache: &CacheLayout, name: &str, entry: &str) -> Result<Manifest, MixtureError> {
    let manifest = match lookup::find_named_entry(cache, entry) {
        Ok(manifest) => manifest,
        Err(source @ LookupError::NoEntry { .. }) => {
            return Err(MixtureError::EntryNotFound { name: name.to_string(), source });
        }
        Err(err) => return Err(err.into()),
    };
    let not_a_store = |problem: &str| MixtureError::NotAStore { name: name.to_string(), problem: problem.to_string() };
    match (manifest.kind, &manifest.token_store) {
        (EntryKind::Tokens, _) => Ok(manifest),
        (EntryKind::View, _) if manifest.mixture.is_some() => {
            Err(not_a_store("is a mixture; a component is a token store: name its components instead"))
        }
        (EntryKind::View, None) => Err(not_a_store(
            "was made before token stores and has none; name its spec (spec = \"FILE\") to tokenize it into one",
        )),
        (EntryKind::View, Some(store)) => {
            let fingerprint = Fingerprint::from_hex(&store.fingerprint)
                .ok_or_else(|| not_a_store("records a malformed token store fingerprint"))?;
            match lookup::published(cache, &fingerprint, EntryKind::Tokens)? {
                Some((_, store)) => Ok(store),
                None => Err(not_a_store(&format!(
                    "is a view whose token store {} was evicted; name its spec (spec = \"FILE\") to tokenize it again",
                    fingerprint.short()
                ))),
            }
        }
    }
}

/// The outcome of preparing a mixture.
pub struct PreparedMixture {
    pub entry: EntryLayout,
    pub manifest: Manifest,
    /// False when the mixture already existed.
    pub built: bool,
    /// Each component's token store, made or found (none when the mixture existed).
    pub stores: Vec<(String, TokenStoreOutcome)>,
}

/// Prepares the mixture unless it exists: each component's token store first
/// (built from its spec when missing), then the mixture derived from them.
pub fn prepare(
    mixture: &MixtureSpec,
    cache: &CacheLayout,
    options: &PrepareOptions,
) -> Result<PreparedMixture, MixtureError> {
    prepare::open_cache(cache)?;
    let mut located = locate(mixture, cache)?;
    if let Some((entry, manifest)) = prepare::published(cache, &located.fingerprint)? {
        // Its token stores are in use too: the next mixture of them needs them.
        for component in &located.components {
            prepare::mark_used(cache, &component.store.short());
        }
        return use_published(cache, mixture, PreparedMixture { entry, manifest, built: false, stores: Vec::new() });
    }
    // From before each token store is looked for until the mixture is made of them.
    let mut _leases = Vec::new();
    for component in &located.components {
        let lease = Lease::acquire(cache, &component.store.short(), "derive")
            .map_err(IoError::at("taking a lease in", cache.root()))?;
        _leases.push(lease);
    }
    let (manifests, stores) = component_stores(cache, options, &mut located)?;
    check_special_tokens(&located.components, &manifests)?;
    let splits = mixed_splits(mixture, &located.components, &manifests)?;
    let mixing = Mixing {
        stores: manifests.iter().collect(),
        names: located.components.iter().map(|component| component.name.clone()).collect(),
        // The weights the fingerprint covers: the same fingerprint, the same bytes.
        components: mixture
            .mix
            .components
            .iter()
            .map(|component| (component.weight / sum_of_weights(mixture), component.max_epochs))
            .collect(),
        totals: totals(mixture, &splits)?,
        seed: mixture.mix.seed,
        splits,
    };
    let recipe = Recipe {
        name: &mixture.name,
        sequence: &mixture.sequence,
        output: &mixture.output,
        canonical: located.canonical.clone(),
    };
    let tokenize_seconds = stores.iter().map(|(_, outcome)| outcome.tokenize_seconds).sum();
    let making = view::Making {
        fingerprint: located.fingerprint,
        hash_seconds: 0.0,
        tokenize_seconds,
        shards_tokenized_here: stores.iter().map(|(_, outcome)| outcome.shards_tokenized_here).sum(),
        jobs: options.jobs,
    };
    let derived = view::derive(cache, &recipe, &Source::Mixture(&mixing), &making)?;
    let prepared = PreparedMixture { entry: derived.entry, manifest: derived.manifest, built: derived.built, stores };
    use_published(cache, mixture, prepared)
}

fn sum_of_weights(mixture: &MixtureSpec) -> f64 {
    mixture.mix.components.iter().map(|component| component.weight).sum()
}

/// Each mixed split's total, where one is asked; a total for a split not mixed is
/// a typo to point out.
fn totals(mixture: &MixtureSpec, splits: &[String]) -> Result<BTreeMap<String, u64>, MixtureError> {
    if let Some(TotalTokens::PerSplit(counts)) = &mixture.mix.total_tokens
        && let Some(unknown) = counts.keys().find(|split| !splits.contains(split))
    {
        return Err(MixtureError::UnknownTotal { split: unknown.clone(), mixed: splits.join(", ") });
    }
    let Some(total) = &mixture.mix.total_tokens else { return Ok(BTreeMap::new()) };
    Ok(splits.iter().filter_map(|split| Some((split.clone(), total.of(split)?))).collect())
}

/// Components' stores must agree on the special tokens rows are made with: where
/// documents end (EOS), start (BOS), and what pads a row.
fn check_special_tokens(components: &[Component], manifests: &[Manifest]) -> Result<(), MixtureError> {
    let settings = |manifest: &Manifest| {
        let tokenizer = &manifest.tokenizer;
        (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id)
    };
    let first = settings(&manifests[0]);
    for (component, manifest) in components.iter().zip(manifests).skip(1) {
        let other = settings(manifest);
        if other != first {
            let describe = |(bos, eos, pad): (Option<u32>, Option<u32>, Option<u32>)| {
                format!("BOS {bos:?}, EOS {eos:?}, pad {pad:?}")
            };
            return Err(MixtureError::SpecialTokens {
                first: components[0].name.clone(),
                first_tokens: describe(first),
                second: component.name.clone(),
                second_tokens: describe(other),
            });
        }
    }
    Ok(())
}

/// Each component's token store's manifest, and what became of it, by name.
type ComponentStores = (Vec<Manifest>, Vec<(String, TokenStoreOutcome)>);

/// Each component's token store: found, or built from its spec.
fn component_stores(
    cache: &CacheLayout,
    options: &PrepareOptions,
    located: &mut LocatedMixture,
) -> Result<ComponentStores, MixtureError> {
    let mut manifests = Vec::new();
    let mut outcomes = Vec::new();
    for component in &mut located.components {
        let wrap = |source| MixtureError::Component { name: component.name.clone(), source: Box::new(source) };
        let (manifest, outcome) = match &mut component.origin {
            Origin::Spec(spec, spec_located) => {
                prepare::token_store(spec, cache, options, spec_located).map_err(wrap)?
            }
            Origin::Entry => {
                let found = prepare::published_kind(cache, &component.store, EntryKind::Tokens).map_err(wrap)?;
                let Some((_, manifest)) = found else {
                    return Err(MixtureError::NotAStore {
                        name: component.name.clone(),
                        problem: format!(
                            "lost its token store {} while the mixture was made; run again",
                            component.store.short()
                        ),
                    });
                };
                let outcome = TokenStoreOutcome::untouched(component.store, Some(&manifest));
                (manifest, outcome)
            }
        };
        // The tokenizer a store was built with, checked once more: an entry's was read before.
        if manifest.tokenizer.blake3 != component.tokenizer {
            return Err(MixtureError::NotAStore {
                name: component.name.clone(),
                problem: "names a token store whose tokenizer changed meanwhile; run again".into(),
            });
        }
        prepare::mark_used(cache, &component.store.short());
        manifests.push(manifest);
        outcomes.push((component.name.clone(), outcome));
    }
    Ok((manifests, outcomes))
}

/// The splits mixed: those named, which every component must have, else those
/// every component has.
fn mixed_splits(
    mixture: &MixtureSpec,
    components: &[Component],
    manifests: &[Manifest],
) -> Result<Vec<String>, MixtureError> {
    let shared: BTreeSet<&String> = manifests
        .iter()
        .map(|manifest| manifest.splits.keys().collect::<BTreeSet<_>>())
        .reduce(|shared, splits| shared.intersection(&splits).copied().collect())
        .unwrap_or_default();
    let Some(named) = &mixture.mix.splits else {
        if shared.is_empty() {
            return Err(MixtureError::NoSharedSplit);
        }
        return Ok(shared.into_iter().cloned().collect());
    };
    for split in named {
        for (component, manifest) in components.iter().zip(manifests) {
            if !manifest.splits.contains_key(split) {
                let has = manifest.splits.keys().cloned().collect::<Vec<_>>().join(", ");
                return Err(MixtureError::MissingSplit { name: component.name.clone(), split: split.clone(), has });
            }
        }
    }
    Ok(named.clone())
}

/// Names the mixture and records its use, and its components'.
fn use_published(
    cache: &CacheLayout,
    mixture: &MixtureSpec,
    prepared: PreparedMixture,
) -> Result<PreparedMixture, MixtureError> {
    let short = prepared.manifest.short_fingerprint().to_string();
    link_name(cache, &mixture.name, &short)?;
    prepare::mark_used(cache, &short);
    Ok(prepared)
}

/// Where a mixture's entry lies, for messages.
pub fn entry_path(cache: &CacheLayout, located: &LocatedMixture) -> PathBuf {
    cache.entry(&located.fingerprint.short()).root().to_path_buf()
}
