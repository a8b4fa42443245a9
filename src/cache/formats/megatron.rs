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
//! In a view, every row is one sequence and its own document: with `pack = "none"`
//! or `"truncate"` a row is a document; with `"concat"` a row is a block cut across
//! documents, so the index is again 0, 1, ..., n (Megatron's `GPTDataset` joins
//! sequences into samples by itself either way). Where rows keep documents apart
//! (`position_ids`, `best_fit`), each run of one document inside a row is a
//! sequence and a document instead, and padding is in no sequence. A token store's
//! shards are document-level indexes: one sequence per document.

use std::path::{Path, PathBuf};

use crate::cache::layout::megatron_file;
use crate::cache::manifest::{StoreDtype, WrittenFile};
use crate::cache::writer::WriteError;
use crate::errors::IoError;
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

/// Megatron's code for a token store's dtype.
pub fn store_dtype_code(dtype: StoreDtype) -> u8 {
    match dtype {
        StoreDtype::Uint16 => 8,
        StoreDtype::Int32 => 4,
    }
}

/// Bytes before the sequence lengths: header, version, dtype code, two counts.
const HEADER_BYTES: usize = 9 + 8 + 1 + 8 + 8;

/// Writes a document-level index (one sequence per document, as Megatron's
/// `preprocess_data.py` writes it) for documents of `lengths` tokens.
pub fn write_document_index(idx: &mut HashedFile, dtype_code: u8, lengths: &[u32]) -> Result<(), IoError> {
    let sequences = lengths.len() as u64;
    write_header(idx, dtype_code, sequences)?;
    let mut block = Vec::with_capacity(1 << 16);
    let flush = |block: &mut Vec<u8>, idx: &mut HashedFile| -> Result<(), IoError> {
        idx.append(block)?;
        block.clear();
        Ok(())
    };
    for &length in lengths {
        block.extend_from_slice(&(length as i32).to_le_bytes());
        if block.len() >= 1 << 16 {
            flush(&mut block, idx)?;
        }
    }
    let size = i64::from(dtype_size(dtype_code));
    let mut pointer = 0i64;
    for &length in lengths {
        block.extend_from_slice(&pointer.to_le_bytes());
        pointer += i64::from(length) * size;
        if block.len() >= 1 << 16 {
            flush(&mut block, idx)?;
        }
    }
    for document in 0..=sequences as i64 {
        block.extend_from_slice(&document.to_le_bytes());
        if block.len() >= 1 << 16 {
            flush(&mut block, idx)?;
        }
    }
    flush(&mut block, idx)
}

/// Bytes per token of a dtype code ferry writes.
fn dtype_size(code: u8) -> u8 {
    if code == 8 { 2 } else { 4 }
}

/// Reads an index that others may have written: every count is checked against
/// the bytes there are before anything is allocated for it.
pub struct IndexReader<'a> {
    bytes: &'a [u8],
}

impl<'a> IndexReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        IndexReader { bytes }
    }

    fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().unwrap_or_default())
    }

    /// The dtype code and the sequence count.
    pub fn header(&mut self) -> Result<(u8, u64), String> {
        if self.bytes.len() < HEADER_BYTES || &self.bytes[..9] != HEADER {
            return Err("it does not start with Megatron's index header".into());
        }
        if self.u64_at(9) != VERSION {
            return Err(format!("its version is {}, not {VERSION}", self.u64_at(9)));
        }
        Ok((self.bytes[17], self.u64_at(18)))
    }

    /// The sequence lengths of an index with one sequence per document, checked:
    /// the file's size, pointers that follow the lengths (`size` bytes a token),
    /// document indices 0, 1, ..., n.
    pub fn document_level(&self, sequences: u64, size: u64) -> Result<Vec<u32>, String> {
        let expected = usize::try_from(sequences)
            .ok()
            .and_then(|n| n.checked_mul(20)?.checked_add(HEADER_BYTES + 8))
            .ok_or_else(|| format!("it claims {sequences} sequences"))?;
        if self.bytes.len() != expected {
            return Err(format!("it claims {sequences} sequences in {} bytes", self.bytes.len()));
        }
        if self.u64_at(26) != sequences + 1 {
            return Err(format!("it has {} documents for {sequences} sequences, not one each", self.u64_at(26)));
        }
        let n = sequences as usize;
        let (lengths, rest) = self.bytes[HEADER_BYTES..].split_at(n * 4);
        let (pointers, documents) = rest.split_at(n * 8);
        let mut pointer = 0u64;
        let mut out = Vec::with_capacity(n);
        for (index, (length, found)) in lengths.chunks_exact(4).zip(pointers.chunks_exact(8)).enumerate() {
            let length = i32::from_le_bytes(length.try_into().unwrap_or_default());
            let length = u32::try_from(length).map_err(|_| format!("sequence {index} has length {length}"))?;
            if u64::from_le_bytes(found.try_into().unwrap_or_default()) != pointer {
                return Err(format!("sequence {index} does not start where the one before ends"));
            }
            pointer += u64::from(length) * size;
            out.push(length);
        }
        for (index, found) in documents.chunks_exact(8).enumerate() {
            if u64::from_le_bytes(found.try_into().unwrap_or_default()) != index as u64 {
                return Err(format!("document {index} is not sequence {index}"));
            }
        }
        Ok(out)
    }
}

/// Writes `megatron/<split>_text_document.{bin,idx}`; returns the `.bin` file,
/// whose bytes the flat format shares.
pub fn write_split(
    entry_root: &Path,
    parts: &SplitParts,
    files: &mut Vec<WrittenFile>,
) -> Result<WrittenFile, WriteError> {
    let split = parts.split;
    let bin_relative = megatron_file(split, "bin");
    let bin = parts.join_tokens(&entry_root.join(&bin_relative), bin_relative)?;
    let idx_relative = megatron_file(split, "idx");
    let mut idx = HashedFile::create(&entry_root.join(&idx_relative))?;
    match parts.pieces() {
        Some(pieces) => write_piece_index(&mut idx, pieces, parts)?,
        None => write_row_index(&mut idx, parts.rows(), &parts.lengths(), parts.token_type)?,
    }
    files.push(bin.clone());
    files.push(idx.finish(idx_relative)?);
    Ok(bin)
}

/// The header, version, dtype code and counts of an index of `sequences`
/// sequences, each its own document.
fn write_header(idx: &mut HashedFile, dtype_code: u8, sequences: u64) -> Result<(), IoError> {
    idx.append(HEADER)?;
    idx.append(&VERSION.to_le_bytes())?;
    idx.append(&[dtype_code])?;
    idx.append(&sequences.to_le_bytes())?;
    idx.append(&(sequences + 1).to_le_bytes())
}

/// Every row one sequence and one document. Lengths and pointers are read from
/// the parts twice rather than held, so memory stays flat whatever the split's size.
fn write_row_index(
    idx: &mut HashedFile,
    rows: u64,
    lengths: &[PathBuf],
    token_type: TokenType,
) -> Result<(), WriteError> {
    write_header(idx, dtype_code(token_type), rows)?;
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

/// Every run of one document inside a row one sequence and one document: its
/// pointer skips the padding, so Megatron never reads a pad token, and its EOS
/// (ensure_bos_eos) marks where `reset_position_ids` restarts.
fn write_piece_index(idx: &mut HashedFile, pieces: u64, parts: &SplitParts) -> Result<(), WriteError> {
    write_header(idx, dtype_code(parts.token_type), pieces)?;
    parts.for_each_piece(|_, length| Ok(idx.append(&(length as i32).to_le_bytes())?))?;
    let size = token_size(parts.token_type);
    parts.for_each_piece(|start, _| Ok(idx.append(&((start * size) as i64).to_le_bytes())?))?;
    for document in 0..=pieces as i64 {
        idx.append(&document.to_le_bytes())?;
    }
    Ok(())
}
