//! A mixture's Megatron files. Megatron blends datasets itself, at load time
//! (`BlendedDataset`), from document-level indexed datasets and weights; a token
//! store's shards are exactly such datasets. So a mixture's `megatron/` holds its
//! components' shard files, hard-linked from their token stores (no bytes
//! written, and the mixture stays whole when a store is evicted: see `place`),
//! and `megatron/blend.json`: per split, the weights and prefixes as
//! `--data-path` takes them, prefixes relative to `megatron/`.
//!
//! A component's weight is shared among its shards by their tokens, so Megatron
//! draws from each shard in proportion to its size.

use std::collections::BTreeMap;
use std::path::Path;

use crate::cache::layout::megatron_blend_file;
use crate::cache::manifest::WrittenFile;
use crate::cache::publish::hash_small_file;
use crate::errors::IoError;
use crate::fsutil;

use super::store::TokenStore;
use super::{Mixing, ViewError};

/// Links every component's shards of every mixed split into the assembly at
/// `root` and writes `blend.json`; returns their files for the manifest.
pub fn write(root: &Path, stores: &[TokenStore], mixing: &Mixing) -> Result<Vec<WrittenFile>, ViewError> {
    let sum: f64 = mixing.components.iter().map(|(weight, _)| weight).sum();
    let mut files = Vec::new();
    let mut blend: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for split in &mixing.splits {
        let dir = root.join("megatron").join(split);
        fsutil::create_dir_all(&dir).map_err(IoError::at("creating", &dir))?;
        let arguments = blend.entry(split).or_default();
        for (index, (store, (weight, _))) in stores.iter().zip(&mixing.components).enumerate() {
            let shards = store.shard_files(split);
            let mut placed = Vec::new();
            for bin in shards {
                let stem = Path::new(bin).file_stem().map(|stem| stem.to_string_lossy().into_owned());
                let stem = stem.unwrap_or_default();
                let prefix = format!("{split}/c{index}-{stem}");
                let idx = bin.strip_suffix(".bin").map(|stem| format!("{stem}.idx")).unwrap_or_default();
                let record = store.place(bin, &root.join("megatron").join(format!("{prefix}.bin")))?;
                let index_record = store.place(&idx, &root.join("megatron").join(format!("{prefix}.idx")))?;
                files.push(WrittenFile { path: format!("megatron/{prefix}.bin"), ..record.clone() });
                files.push(WrittenFile { path: format!("megatron/{prefix}.idx"), ..index_record.clone() });
                placed.push((prefix, record.tokens));
            }
            let tokens: u64 = placed.iter().map(|(_, tokens)| tokens).sum();
            // An empty shard is no dataset Megatron can draw from.
            for (prefix, shard_tokens) in placed.into_iter().filter(|(_, tokens)| *tokens > 0) {
                arguments.push(format!("{}", weight / sum * shard_tokens as f64 / tokens as f64));
                arguments.push(prefix);
            }
        }
    }
    let path = root.join(megatron_blend_file());
    fsutil::write_json_atomic(&path, &blend).map_err(IoError::at("writing", &path))?;
    files.push(hash_small_file(root, megatron_blend_file())?);
    Ok(files)
}
