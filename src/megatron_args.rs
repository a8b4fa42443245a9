//! Megatron's data arguments for an entry where it lies (in a cache or staged on a
//! node): the weights and absolute prefixes `--data-path` takes, per split.
//! Megatron resolves prefixes against its working directory, so the entry keeps
//! them relative (`megatron/blend.json` of a mixture) and they are made absolute
//! here, for the copy a job reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cache::layout::{CacheLayout, ENTRIES_DIR, megatron_blend_file, megatron_file};
use crate::cache::lookup::{LookupError, find_named_entry};
use crate::cache::manifest::Manifest;
use crate::errors::{Failure, Fault, IoError};
use crate::fsutil::untrusted::{Dir, check_relative};

#[derive(Debug, thiserror::Error)]
pub enum MegatronArgsError {
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("entry {entry} has no Megatron files; prepare it with output.formats = [\"megatron\"]")]
    NoMegatron { entry: String },
    #[error("{path} is damaged: {problem}; `ferry verify` checks the entry, and preparing it again mends it")]
    Damaged { path: PathBuf, problem: String },
}

impl Failure for MegatronArgsError {
    fn fault(&self) -> Fault {
        match self {
            MegatronArgsError::Lookup(lookup) => lookup.fault(),
            MegatronArgsError::Io(io) => io.fault(),
            _ => Fault::User,
        }
    }
}

/// The largest blend read (a mixture of hundreds of components' shards is a few MB).
const MAX_BLEND_BYTES: u64 = 64 << 20;

/// Per split: weight, absolute prefix, weight, prefix, ... for the entry `name`
/// in `cache` (a cache, or a staging destination, which mirrors one).
pub fn data_args(cache: &CacheLayout, name: &str) -> Result<BTreeMap<String, Vec<String>>, MegatronArgsError> {
    let manifest = find_named_entry(cache, name)?;
    let short = manifest.short_fingerprint().to_string();
    let root = std::path::absolute(cache.root()).unwrap_or_else(|_| cache.root().to_path_buf());
    let entry = Dir::open(&root)
        .and_then(|cache_dir| cache_dir.open_dir(Path::new(ENTRIES_DIR).join(&short)))
        .map_err(IoError::at("opening the entry in", &root))?;
    let megatron = entry.path().join("megatron");
    if manifest.files.iter().any(|file| file.path == megatron_blend_file()) {
        return blend(&manifest, &entry, &megatron);
    }
    let splits = single_prefixes(&manifest, &megatron);
    if splits.is_empty() {
        return Err(MegatronArgsError::NoMegatron { entry: short });
    }
    Ok(splits)
}

/// A view's Megatron files: one dataset per split, weight 1.
fn single_prefixes(manifest: &Manifest, megatron: &Path) -> BTreeMap<String, Vec<String>> {
    let listed = |relative: &str| manifest.files.iter().any(|file| file.path == relative);
    manifest
        .splits
        .keys()
        .filter(|split| listed(&megatron_file(split, "idx")))
        .map(|split| {
            let prefix = megatron.join(format!("{split}_text_document"));
            (split.clone(), vec!["1".to_string(), prefix.display().to_string()])
        })
        .collect()
}

/// A mixture's blend, read, checked against the manifest, and made absolute: it
/// names only datasets whose files the manifest lists.
fn blend(
    manifest: &Manifest,
    entry: &Dir,
    megatron: &Path,
) -> Result<BTreeMap<String, Vec<String>>, MegatronArgsError> {
    let path = entry.display_path(megatron_blend_file());
    let damaged = |problem: String| MegatronArgsError::Damaged { path: path.clone(), problem };
    let bytes = entry.read(megatron_blend_file(), MAX_BLEND_BYTES).map_err(IoError::at("reading", &path))?;
    let record = manifest.files.iter().find(|file| file.path == megatron_blend_file());
    let hash = blake3::hash(&bytes).to_hex().to_string();
    if record.is_none_or(|record| record.size != bytes.len() as u64 || record.blake3 != hash) {
        return Err(damaged("differs from its record in the manifest".into()));
    }
    let listed = |relative: String| manifest.files.iter().any(|file| file.path == relative);
    let blend: BTreeMap<String, Vec<String>> =
        serde_json::from_slice(&bytes).map_err(|err| damaged(format!("not a blend ({err})")))?;
    let mut absolute = BTreeMap::new();
    for (split, arguments) in blend {
        if arguments.len() % 2 != 0 {
            return Err(damaged(format!("split {split:?} has a weight without a prefix")));
        }
        let mut made = Vec::with_capacity(arguments.len());
        for pair in arguments.chunks_exact(2) {
            let weight: f64 = pair[0].parse().map_err(|_| damaged(format!("{:?} is not a weight", pair[0])))?;
            if !(weight.is_finite() && weight >= 0.0) {
                return Err(damaged(format!("{:?} is not a weight", pair[0])));
            }
            check_relative(&pair[1]).map_err(&damaged)?;
            if !["bin", "idx"].iter().all(|extension| listed(format!("megatron/{}.{extension}", pair[1]))) {
                return Err(damaged(format!("names {:?}, whose files the manifest does not list", pair[1])));
            }
            made.push(pair[0].clone());
            made.push(megatron.join(&pair[1]).display().to_string());
        }
        absolute.insert(split, made);
    }
    Ok(absolute)
}

/// Megatron's name of a split in `--per-split-data-args-path`: `train`, `valid`, `test`.
pub fn megatron_split(split: &str) -> Option<&'static str> {
    match split {
        "train" => Some("train"),
        "validation" | "valid" | "val" | "dev" => Some("valid"),
        "test" => Some("test"),
        _ => None,
    }
}
