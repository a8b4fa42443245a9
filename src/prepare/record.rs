//! The manifest of a finished token store: shard records grouped by split,
//! per-split counts (a split left without documents is an error), inputs, files
//! and how the documents were tokenized.

use std::collections::BTreeMap;

use crate::cache::manifest::EncoderKind;
use crate::cache::manifest::WrittenFile;
use crate::cache::manifest::{
    BuildRecord, Counts, DocumentsRecord, EntryKind, InputRecord, MANIFEST_VERSION, Manifest, SplitRecord, StoreDtype,
    Timings, TokenizerRecord, Totals,
};
use crate::spec::Spec;
use crate::tokenizer::Encoders;

use super::shard::ShardRecord;
use super::{Located, PrepareError};

/// Shard records by split (every split of the spec present), with each split's counts.
pub struct BySplit {
    pub records: BTreeMap<String, Vec<ShardRecord>>,
    pub counts: BTreeMap<String, Counts>,
}

/// Groups the records by split and sums their counts once.
pub fn group(located: &Located, records: Vec<ShardRecord>) -> Result<BySplit, PrepareError> {
    let mut by_split: BTreeMap<String, Vec<ShardRecord>> =
        located.splits.iter().map(|s| (s.name.clone(), Vec::new())).collect();
    for record in records {
        by_split.entry(record.split.clone()).or_default().push(record);
    }
    let mut split_counts: BTreeMap<String, Counts> = BTreeMap::new();
    for (split, shards) in &by_split {
        let counts = split_counts.entry(split.clone()).or_default();
        shards.iter().for_each(|record| counts.add(&record.counts));
        if counts.documents == 0 {
            return Err(PrepareError::EmptySplit {
                split: split.clone(),
                filtered: counts.filtered_documents,
                skipped: counts.skipped_total(),
            });
        }
    }
    Ok(BySplit { records: by_split, counts: split_counts })
}

/// What the manifest records of how the entry was made.
pub struct Making<'a> {
    pub spec: &'a Spec,
    pub located: &'a Located,
    pub encoders: &'a Encoders,
    pub kind: EncoderKind,
    /// Why the fast path was turned off during the build, where it was.
    pub fast_off: Option<String>,
    pub build: BuildRecord,
    pub tokenize_seconds: f64,
}

/// The manifest of the assembled token store; the caller fills in the publish and total times.
pub fn manifest(
    making: Making,
    mut split_counts: BTreeMap<String, Counts>,
    data_files: &BTreeMap<String, Vec<String>>,
    files: Vec<WrittenFile>,
) -> Manifest {
    let Making { spec, located, encoders, kind, fast_off, build, tokenize_seconds } = making;
    let mut totals = Totals { bytes: files.iter().map(|f| f.size).sum(), ..Totals::default() };
    let mut splits = BTreeMap::new();
    for (split, split_inputs) in located.splits.iter().zip(&located.hashes) {
        let counts = split_counts.remove(&split.name).unwrap_or_default();
        totals.counts.add(&counts);
        let inputs = split.files.iter().zip(&split_inputs.1).map(|(file, hash)| InputRecord::new(file, hash)).collect();
        splits.insert(split.name.clone(), SplitRecord { inputs, data_files: data_files[&split.name].clone(), counts });
    }
    Manifest {
        manifest_version: MANIFEST_VERSION,
        fingerprint: located.tokens.full(),
        name: spec.name.clone(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        created_unix: crate::fsutil::now_unix(),
        spec: spec.tokens_canonical(),
        tokenizer: TokenizerRecord {
            source: encoders.source_name.clone(),
            blake3: located.tokenizer_identity.to_hex().to_string(),
            vocab_size: encoders.vocab_size,
            encoder: kind,
            fast_unavailable: fast_off.or_else(|| encoders.fast_unavailable.clone()),
            bos_id: encoders.bos_eos.prepend,
            eos_id: encoders.bos_eos.append,
            pad_id: encoders.pad_id,
            bos_token: encoders.special.bos.clone(),
            eos_token: encoders.special.eos.clone(),
        },
        splits,
        files,
        totals,
        timings: Timings { hash_inputs_seconds: located.hash_seconds, tokenize_seconds, ..Timings::default() },
        build,
        kind: EntryKind::Tokens,
        token_store: None,
        packing: None,
        documents: Some(DocumentsRecord { dtype: StoreDtype::for_vocabulary(encoders.vocab_size) }),
        mixture: None,
    }
}
