//! LitData's optimized chunks, as LitGPT pretrains from them
//! (`litdata.StreamingDataset(dir, item_loader=TokensLoader(block_size))`), one folder
//! per split: `litdata/<split>/chunk-0-<n>.bin` holds rows as items (a u32 item
//! count, u32 absolute item offsets, count + 1 of them, then the tokens, raw
//! little-endian in the view's token type) and `litdata/<split>/index.json` lists
//! the chunks and their token dtype (`no_header_tensor:16` for int32, `:20` for
//! uint16), as litdata 0.2 writes them.
//!
//! `TokensLoader` cuts each chunk into blocks of `block_size` tokens, never across
//! chunks: with `block_size` the view's `seq_len`, block i is row i.

use std::path::Path;

use serde_json::json;

use crate::cache::hashed_file::HashedFile;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::WriteError;
use crate::errors::IoError;
use crate::spec::TokenType;

use super::SplitParts;
use super::parts::{encode_tokens, token_size};
use super::rows::{Chunk, Lengths, for_each_row, plan_chunks};

/// Bytes of rows in a chunk at most: litdata's default `chunk_bytes` ("64MB").
const CHUNK_BYTES: u64 = 64_000_000;

fn chunk_name(chunk: usize) -> String {
    format!("chunk-0-{chunk}.bin")
}

/// litdata's serializer name for the token type (torch's dtype codes as litdata
/// numbers them); uint32 has none (refused when the spec is read).
fn data_format(token_type: TokenType) -> &'static str {
    match token_type {
        TokenType::Uint16 => "no_header_tensor:20",
        TokenType::Int32 | TokenType::Uint32 => "no_header_tensor:16",
    }
}

/// Writes the split's chunks and index.
pub fn write_split(entry_root: &Path, parts: &SplitParts, files: &mut Vec<WrittenFile>) -> Result<(), WriteError> {
    let size = token_size(parts.token_type);
    let chunks = plan_chunks(parts, CHUNK_BYTES, |length| u64::from(length) * size)?;
    let folder = format!("litdata/{}", parts.split);
    let all_lengths = parts.lengths();
    let mut lengths = Lengths::new(&all_lengths);
    let (mut chunk, mut rows, mut written) = (0, 0u64, Vec::new());
    let mut open = start_chunk(&entry_root.join(&folder), 0, &chunks[0], size, &mut lengths)?;
    let mut block = Vec::new();
    for_each_row(parts, |row| {
        if rows == chunks[chunk].rows {
            let next = start_chunk(&entry_root.join(&folder), chunk + 1, &chunks[chunk + 1], size, &mut lengths)?;
            written.push(std::mem::replace(&mut open, next).finish(format!("{folder}/{}", chunk_name(chunk)))?);
            (chunk, rows) = (chunk + 1, 0);
        }
        block.clear();
        encode_tokens(row, parts.token_type, &mut block);
        open.append(&block)?;
        rows += 1;
        Ok(())
    })?;
    written.push(open.finish(format!("{folder}/{}", chunk_name(chunk)))?);
    let listed: Vec<serde_json::Value> = chunks
        .iter()
        .zip(&written)
        .enumerate()
        .map(|(index, (planned, file))| {
            json!({"chunk_bytes": file.size, "chunk_size": planned.rows, "dim": planned.tokens, "filename": chunk_name(index)})
        })
        .collect();
    files.extend(written);
    let relative = format!("{folder}/index.json");
    files.push(write_json(entry_root, &relative, &index(parts.token_type, listed))?);
    Ok(())
}

/// `index.json`: the chunks, and how their items are read.
fn index(token_type: TokenType, chunks: Vec<serde_json::Value>) -> serde_json::Value {
    json!({
        "chunks": chunks,
        "config": {
            "chunk_bytes": CHUNK_BYTES,
            "chunk_size": null,
            "compression": null,
            "data_format": [data_format(token_type)],
            "data_spec": "[1, {\"type\": null, \"context\": null, \"children_spec\": []}]",
            "encryption": null,
            "item_loader": "TokensLoader",
        },
    })
}

/// A small JSON file of the entry, written and recorded.
pub fn write_json(entry_root: &Path, relative: &str, value: &serde_json::Value) -> Result<WrittenFile, WriteError> {
    let path = entry_root.join(relative);
    let text = serde_json::to_vec(value).map_err(|err| IoError::at("writing", &path)(err.into()))?;
    let mut file = HashedFile::create(&path)?;
    file.append(&text)?;
    Ok(file.finish(relative.to_string())?)
}

/// A chunk file begun with its header: the item count, then each item's absolute
/// offset (from the next `chunk.rows` row lengths).
fn start_chunk(
    folder: &Path,
    index: usize,
    chunk: &Chunk,
    token_bytes: u64,
    lengths: &mut Lengths,
) -> Result<HashedFile, WriteError> {
    let mut file = HashedFile::create(&folder.join(chunk_name(index)))?;
    // Under 4 GiB: a chunk holds at most CHUNK_BYTES of rows, or one row.
    let mut header = Vec::with_capacity(4 * (chunk.rows as usize + 2));
    header.extend_from_slice(&(chunk.rows as u32).to_le_bytes());
    let mut offset = 4 + 4 * (chunk.rows + 1);
    header.extend_from_slice(&(offset as u32).to_le_bytes());
    for _ in 0..chunk.rows {
        offset += u64::from(lengths.next_length()?.unwrap_or(0)) * token_bytes;
        header.extend_from_slice(&(offset as u32).to_le_bytes());
    }
    file.append(&header)?;
    Ok(file)
}
