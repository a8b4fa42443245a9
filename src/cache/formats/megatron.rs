//! Megatron-core's indexed dataset (`IndexedDataset(prefix)` in
//! `megatron/core/datasets/indexed_dataset.py`): `<prefix>.bin` holds the tokens,
//! `<prefix>.idx` the layout below, all little-endian.
//!
//! ```text
//! b"MMIDIDX\x00\x00"   header
//! u64 1                version
//! u8  dtype code       1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16
//! u64 sequence count   n
//! u64 document count   n + 1 (entries in the document index)
//! i32 x n              sequence lengths in tokens
//! i64 x n              sequence pointers: byte offset of each sequence in the .bin
//! i64 x (n + 1)        document indices: 0, then the sequence index ending each document
//! ```
//!
//! Every row is one sequence and its own document: with `pack = "none"` or
//! `"truncate"` a row is a document; with `"concat"` a row is a block cut across
//! documents, so the index is again 0, 1, ..., n (Megatron's `GPTDataset` joins
//! sequences into samples by itself either way).

use std::path::{Path, PathBuf};

use crate::cache::layout::megatron_file;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::WriteError;
use crate::spec::TokenType;

use super::SplitParts;
use super::parts::{for_each_length, token_size};
use crate::cache::hashed_file::HashedFile;

const HEADER: &[u8; 9] = b"MMIDIDX\x00\x00";
const VERSION: u64 = 1;

/// Megatron's code for the dtype; `uint32` has none (refused when the spec is read).
fn dtype_code(token_type: TokenType) -> u8 {
    match token_type {
        TokenType::Uint16 => 8,
        TokenType::Int32 | TokenType::Uint32 => 4,
    }
}

/// Writes `megatron/<split>_text_document.{bin,idx}`; returns the `.bin` file,
/// whose bytes the flat format shares.
pub fn write_split(
    entry_root: &Path,
    parts: &SplitParts,
    files: &mut Vec<WrittenFile>,
) -> Result<WrittenFile, WriteError> {
    let split = parts.shards.split;
    let bin_relative = megatron_file(split, "bin");
    let bin = parts.join_tokens(&entry_root.join(&bin_relative), bin_relative)?;
    let idx_relative = megatron_file(split, "idx");
    let mut idx = HashedFile::create(&entry_root.join(&idx_relative))?;
    write_index(&mut idx, parts.shards.rows, &parts.lengths, parts.token_type)?;
    files.push(bin.clone());
    files.push(idx.finish(idx_relative)?);
    Ok(bin)
}

/// Streams the index: lengths and pointers are read from the parts twice rather
/// than held, so memory stays flat whatever the split's size.
fn write_index(idx: &mut HashedFile, rows: u64, lengths: &[PathBuf], token_type: TokenType) -> Result<(), WriteError> {
    idx.append(HEADER)?;
    idx.append(&VERSION.to_le_bytes())?;
    idx.append(&[dtype_code(token_type)])?;
    idx.append(&rows.to_le_bytes())?;
    idx.append(&(rows + 1).to_le_bytes())?;
    for_each_length(lengths, |length| Ok(idx.append(&(length as i32).to_le_bytes())?))?;
    let size = token_size(token_type) as i64;
    let mut pointer = 0i64;
    for_each_length(lengths, |length| {
        idx.append(&pointer.to_le_bytes())?;
        pointer += length as i64 * size;
        Ok(())
    })?;
    for document in 0..=rows as i64 {
        idx.append(&document.to_le_bytes())?;
    }
    Ok(())
}
