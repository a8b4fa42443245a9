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

use super::rows::{encode, for_each_row};
use super::{SplitParts, TokenFile};

/// The split's token file, relative to the entry (the index and metadata add suffixes).
pub fn data_file(split: &str) -> String {
    format!("nanotron/{split}/000_{split}.ds")
}

/// Writes the split's three files. `shared` is a file of the same token bytes
/// (OLMo's, or the flat or Megatron tokens of the same width), hard-linked instead.
pub fn write_split(
    entry_root: &Path,
    parts: &SplitParts,
    shared: Option<&WrittenFile>,
    files: &mut Vec<WrittenFile>,
) -> Result<(), WriteError> {
    let relative = data_file(parts.split);
    let wide = parts.trainer_token_bytes() == 4;
    let mut data = TokenFile::new(entry_root, &relative, shared)?;
    let mut index = HashedFile::create(&entry_root.join(format!("{relative}.index")))?;
    let (mut written, mut block) = (0u64, Vec::new());
    for_each_row(parts, |row| {
        if data.writes() {
            block.clear();
            encode(row.tokens, wide, &mut block);
            data.append(&block)?;
        }
        block.clear();
        for &(start, length) in row.documents {
            block.extend_from_slice(&(written + u64::from(start) + u64::from(length)).to_le_bytes());
        }
        index.append(&block)?;
        written += row.tokens.len() as u64;
        Ok(())
    })?;
    files.push(data.finish(entry_root, relative.clone())?);
    files.push(index.finish(format!("{relative}.index"))?);
    // nanotron splits the first line at '|' and loads the name with AutoTokenizer.
    let name = parts.tokenizer.strip_prefix("builtin ").unwrap_or(parts.tokenizer).replace(['|', '\n'], "_");
    let mut metadata = HashedFile::create(&entry_root.join(format!("{relative}.metadata")))?;
    metadata.append(format!("{name}|{}\n{written}\n{written} tokens", if wide { 4 } else { 2 }).as_bytes())?;
    files.push(metadata.finish(format!("{relative}.metadata"))?);
    Ok(())
}
