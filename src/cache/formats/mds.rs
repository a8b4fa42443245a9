//! MosaicML Streaming's MDS shards, as llm-foundry trains from them
//! (`streaming.StreamingDataset(local=dir)`, its `StreamingTextDataset`), one folder
//! per split: `mds/<split>/shard.<n:05>.mds` holds one sample per row, a `tokens`
//! column encoded `ndarray:<dtype>` (the view's token type); `mds/<split>/index.json`
//! lists the shards (MDS version 2, as mosaicml-streaming 0.12 and 0.13 write it).
//!
//! A shard: a u32 sample count, u32 absolute sample offsets (count + 1), the
//! shard's config as JSON (readers skip it), then each sample: its column's size
//! (u32), then the column: a byte `ndim << 2 | shape width` (1-D; the width code
//! 0..3 for u8..u64), the length in that width, and the ids, little-endian.

use std::path::Path;

use serde_json::json;

use crate::cache::hashed_file::HashedFile;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::WriteError;

use super::SplitParts;
use super::litdata::write_json;
use super::parts::{encode_tokens, token_size};
use super::rows::{Chunk, Lengths, for_each_row, plan_chunks};

/// Bytes of samples in a shard at most: mosaicml-streaming's default `size_limit`.
const SIZE_LIMIT: u64 = 1 << 26;

fn shard_name(shard: usize) -> String {
    format!("shard.{shard:05}.mds")
}

/// The shape's width code and bytes for a length.
fn shape_width(length: u32) -> (u8, usize) {
    match length {
        0..256 => (0, 1),
        256..65536 => (1, 2),
        _ => (2, 4),
    }
}

/// A row's sample: its size header, then its `ndarray` column.
fn sample_bytes(length: u32, token_bytes: u64) -> u64 {
    4 + 1 + shape_width(length).1 as u64 + u64::from(length) * token_bytes
}

/// The shard's config, as its index entry repeats it.
fn config(parts: &SplitParts) -> serde_json::Value {
    json!({
        "column_encodings": [format!("ndarray:{}", parts.token_type.dtype())],
        "column_names": ["tokens"],
        "column_sizes": [null],
        "compression": null,
        "format": "mds",
        "hashes": [],
        "size_limit": SIZE_LIMIT,
        "version": 2,
    })
}

/// Writes the split's shards and index.
pub fn write_split(entry_root: &Path, parts: &SplitParts, files: &mut Vec<WrittenFile>) -> Result<(), WriteError> {
    let size = token_size(parts.token_type);
    let shards = plan_chunks(parts, SIZE_LIMIT, |length| sample_bytes(length, size))?;
    let folder = entry_root.join("mds").join(parts.split);
    let relative = |shard: usize| format!("mds/{}/{}", parts.split, shard_name(shard));
    let config = config(parts);
    let config_text = config.to_string();
    let all_lengths = parts.lengths();
    let mut lengths = Lengths::new(&all_lengths);
    let (mut shard, mut rows, mut written) = (0, 0u64, Vec::new());
    let mut open = start_shard(&folder, 0, &shards[0], size, &config_text, &mut lengths)?;
    let mut block = Vec::new();
    for_each_row(parts, |row| {
        if rows == shards[shard].rows {
            let next = start_shard(&folder, shard + 1, &shards[shard + 1], size, &config_text, &mut lengths)?;
            written.push(std::mem::replace(&mut open, next).finish(relative(shard))?);
            (shard, rows) = (shard + 1, 0);
        }
        let length = row.len() as u32;
        let (code, width) = shape_width(length);
        block.clear();
        block.extend_from_slice(&((sample_bytes(length, size) - 4) as u32).to_le_bytes());
        block.push(1 << 2 | code);
        block.extend_from_slice(&length.to_le_bytes()[..width]);
        encode_tokens(row, parts.token_type, &mut block);
        open.append(&block)?;
        rows += 1;
        Ok(())
    })?;
    written.push(open.finish(relative(shard))?);
    let listed: Vec<serde_json::Value> = shards
        .iter()
        .zip(&written)
        .enumerate()
        .map(|(index, (planned, file))| {
            let mut entry = config.clone();
            entry["raw_data"] = json!({"basename": shard_name(index), "bytes": file.size, "hashes": {}});
            entry["samples"] = json!(planned.rows);
            entry["zip_data"] = serde_json::Value::Null;
            entry
        })
        .collect();
    files.extend(written);
    let index = json!({"shards": listed, "version": 2});
    files.push(write_json(entry_root, &format!("mds/{}/index.json", parts.split), &index)?);
    Ok(())
}

/// A shard begun with its header: the sample count, each sample's absolute offset
/// (from the next `shard.rows` row lengths), and the config.
fn start_shard(
    folder: &Path,
    index: usize,
    shard: &Chunk,
    token_bytes: u64,
    config: &str,
    lengths: &mut Lengths,
) -> Result<HashedFile, WriteError> {
    let mut file = HashedFile::create(&folder.join(shard_name(index)))?;
    // Under 4 GiB: a shard holds at most SIZE_LIMIT of samples, or one row.
    let mut header = Vec::with_capacity(4 * (shard.rows as usize + 2) + config.len());
    header.extend_from_slice(&(shard.rows as u32).to_le_bytes());
    let mut offset = 4 + 4 * (shard.rows + 1) + config.len() as u64;
    header.extend_from_slice(&(offset as u32).to_le_bytes());
    for _ in 0..shard.rows {
        offset += sample_bytes(lengths.next_length()?.unwrap_or(0), token_bytes);
        header.extend_from_slice(&(offset as u32).to_le_bytes());
    }
    header.extend_from_slice(config.as_bytes());
    file.append(&header)?;
    Ok(file)
}
