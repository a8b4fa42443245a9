//! nanotron's tokenized files, as datatrove writes them (`TokenizedFile`) and
//! nanotron reads them (`DatatroveFolderDataset`), one folder per split:
//! `nanotron/<split>/000_<split>.ds` holds the view's rows end to end, little-endian
//! uint16 (vocabularies up to 65,536) or uint32; `.ds.index` the end of every run of
//! one document, uint64 token offsets (datatrove's document ends, read for
//! `return_positions`); `.ds.metadata` the text `<tokenizer>|<bytes per token>`,
//! then the token count (nanotron reads the first line).
//!
//! The reader takes samples of `seq_len + 1` tokens: with its `seq_len` one less than
//! the view's, sample i is row i. A document cut by a row ends there too, as the
//! rows' `position_ids` restart there.

use std::path::Path;

use crate::cache::hashed_file::HashedFile;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::WriteError;

use super::rows::for_each_layout;
use super::{SplitParts, trainer_tokens};

/// The split's token file, relative to the entry (the index and metadata add suffixes).
pub fn data_file(split: &str) -> String {
    format!("nanotron/{split}/000_{split}.ds")
}

/// Writes the split's three files (the tokens: see `trainer_tokens`).
pub fn write_split(
    entry_root: &Path,
    parts: &SplitParts,
    shared: Option<&WrittenFile>,
    files: &mut Vec<WrittenFile>,
) -> Result<(), WriteError> {
    let relative = data_file(parts.split);
    files.push(trainer_tokens(entry_root, parts, shared, relative.clone())?);
    let mut index = HashedFile::create(&entry_root.join(format!("{relative}.index")))?;
    let (mut written, mut block) = (0u64, Vec::new());
    for_each_layout(parts, |length, documents| {
        block.clear();
        for &(start, piece) in documents {
            block.extend_from_slice(&(written + u64::from(start) + u64::from(piece)).to_le_bytes());
        }
        written += u64::from(length);
        Ok(index.append(&block)?)
    })?;
    files.push(index.finish(format!("{relative}.index"))?);
    // nanotron splits the first line at '|' and loads the name with AutoTokenizer.
    let name = parts.tokenizer.strip_prefix("builtin ").unwrap_or(parts.tokenizer).replace(['|', '\n'], "_");
    let bytes = parts.trainer_token_bytes();
    let mut metadata = HashedFile::create(&entry_root.join(format!("{relative}.metadata")))?;
    metadata.append(format!("{name}|{bytes}\n{written}\n{written} tokens").as_bytes())?;
    files.push(metadata.finish(format!("{relative}.metadata"))?);
    Ok(())
}
