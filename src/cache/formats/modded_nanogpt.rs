//! modded-nanogpt's token shards (its `data/fineweb.py` writes them, `train_gpt.py`'s
//! `_load_data_shard` reads them): a header of 256 little-endian int32 (magic
//! 20240520, version 1, the token count, zeros), then the tokens as uint16. Its
//! loader finds documents by GPT-2's `<|endoftext|>` and packs them itself, so a
//! shard is the view's rows end to end: `modded_nanogpt/<split>_<n:06>.bin`, at
//! most 10^8 tokens each as its own shards are, cut between rows.

use std::path::Path;

use crate::cache::hashed_file::HashedFile;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::WriteError;

use super::SplitParts;
use super::rows::{encode, for_each_row, plan_chunks};

const MAGIC: i32 = 20240520;
const VERSION: i32 = 1;
/// Tokens per shard at most, as modded-nanogpt's own shards hold.
const SHARD_TOKENS: u64 = 100_000_000;

/// The shard file of a split, relative to the entry.
pub fn shard_file(split: &str, shard: usize) -> String {
    format!("modded_nanogpt/{split}_{shard:06}.bin")
}

/// Writes the split's shards (the vocabulary fits uint16: checked when the view began).
pub fn write_split(entry_root: &Path, parts: &SplitParts, files: &mut Vec<WrittenFile>) -> Result<(), WriteError> {
    // The header holds each shard's count: the shards are planned first, from the row lengths.
    let shards = plan_chunks(parts, SHARD_TOKENS, u64::from)?;
    let (mut shard, mut rows) = (0, 0u64);
    let mut open = start_shard(entry_root, parts.split, 0, shards[0].tokens)?;
    let mut block = Vec::new();
    for_each_row(parts, |row| {
        if rows == shards[shard].rows {
            let next = start_shard(entry_root, parts.split, shard + 1, shards[shard + 1].tokens)?;
            files.push(std::mem::replace(&mut open, next).finish(shard_file(parts.split, shard))?);
            (shard, rows) = (shard + 1, 0);
        }
        block.clear();
        encode(row, false, &mut block);
        open.append(&block)?;
        rows += 1;
        Ok(())
    })?;
    files.push(open.finish(shard_file(parts.split, shard))?);
    Ok(())
}

fn start_shard(entry_root: &Path, split: &str, shard: usize, tokens: u64) -> Result<HashedFile, WriteError> {
    let mut file = HashedFile::create(&entry_root.join(shard_file(split, shard)))?;
    let mut header = [0i32; 256];
    // Below 2^31: a shard holds at most SHARD_TOKENS, or one row (at most i32::MAX tokens).
    (header[0], header[1], header[2]) = (MAGIC, VERSION, tokens as i32);
    let bytes: Vec<u8> = header.iter().flat_map(|value| value.to_le_bytes()).collect();
    file.append(&bytes)?;
    Ok(file)
}
