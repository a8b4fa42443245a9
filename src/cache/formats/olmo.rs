//! OLMo-core's numpy token files (`olmo_core.data`'s `NumpyFSLDataset` and its
//! kin): `olmo/<split>.npy` holds the view's rows end to end as a headerless
//! little-endian array, uint16 (vocabularies up to 65,536) or uint32, which the
//! reader is told (`dtype=`); documents end with EOS, which is how it finds them.
//! Where rows are padded (`best_fit`), `olmo/<split>.mask.npy` holds one byte per
//! token, 1 on documents and 0 on padding (its `label_mask_paths`).
//!
//! `NumpyFSLDataset(sequence_length = the view's seq_len)` cuts the file into
//! instances of that length: instance i is row i.

use std::path::Path;

use crate::cache::hashed_file::HashedFile;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::WriteError;

use super::rows::for_each_layout;
use super::{SplitParts, trainer_tokens};

/// The split's token file, relative to the entry.
pub fn data_file(split: &str) -> String {
    format!("olmo/{split}.npy")
}

/// The split's label mask, relative to the entry (padded rows only).
pub fn mask_file(split: &str) -> String {
    format!("olmo/{split}.mask.npy")
}

/// Writes the split's token file (see `trainer_tokens`), and its mask where rows are
/// padded. Returns the token file's record.
pub fn write_split(
    entry_root: &Path,
    parts: &SplitParts,
    shared: Option<&WrittenFile>,
    files: &mut Vec<WrittenFile>,
) -> Result<WrittenFile, WriteError> {
    let tokens = trainer_tokens(entry_root, parts, shared, data_file(parts.split))?;
    files.push(tokens.clone());
    if parts.padded {
        let mut mask = HashedFile::create(&entry_root.join(mask_file(parts.split)))?;
        let mut block = Vec::new();
        for_each_layout(parts, |length, documents| {
            block.clear();
            block.resize(length as usize, 0);
            for &(start, length) in documents {
                block[start as usize..(start + length) as usize].fill(1);
            }
            Ok(mask.append(&block)?)
        })?;
        files.push(mask.finish(mask_file(parts.split))?);
    }
    Ok(tokens)
}
