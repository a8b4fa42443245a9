//! A row's tokens, read from the token store's `.bin` files by piece, with the
//! documents that start inside it (for `position_ids` and the formats' pieces).
//! Rows written in shard order read each file front to back, a block at a time; a
//! shuffled view reads each piece where it lies (the files are in the page cache
//! after their hash was checked).

use std::os::unix::fs::FileExt;

use crate::cache::token_store;
use crate::errors::IoError;

use super::rows::{Plan, RowRef};
use super::store::StoreShard;

/// Bytes read at once when rows come in file order.
const BLOCK_BYTES: u64 = 1 << 20;

pub struct Gather<'a> {
    shards: &'a [StoreShard],
    /// Rows come in file order: read ahead in blocks.
    in_order: bool,
    block: Vec<u8>,
    /// The shard and the byte range of the file `block` holds.
    held: Option<(u32, u64, u64)>,
}

impl<'a> Gather<'a> {
    pub fn new(shards: &'a [StoreShard], in_order: bool) -> Gather<'a> {
        Gather { shards, in_order, block: Vec::new(), held: None }
    }

    /// Fills `tokens` with the row's ids (then `row.padding` times `pad_id`) and
    /// `starts` with the places in it where a document starts (not 0).
    pub fn row(
        &mut self,
        plan: &Plan,
        row: &RowRef,
        pad_id: u32,
        tokens: &mut Vec<u32>,
        starts: &mut Vec<u32>,
    ) -> Result<(), IoError> {
        tokens.clear();
        starts.clear();
        for piece in plan.pieces_of(row) {
            let at = tokens.len() as u32;
            if at > 0 {
                starts.push(at);
            }
            let shard = &self.shards[piece.shard as usize];
            let size = shard.dtype.bytes() as u64;
            let bytes = self.read(piece.shard, piece.start * size, u64::from(piece.len) * size)?;
            token_store::decode(bytes, shard.dtype, tokens);
            let end = piece.start + u64::from(piece.len);
            let first = shard.offsets.partition_point(|&offset| offset <= piece.start);
            for &offset in shard.offsets[first..].iter().take_while(|&&offset| offset < end) {
                let place = at + (offset - piece.start) as u32;
                if starts.last() != Some(&place) {
                    starts.push(place);
                }
            }
        }
        tokens.extend(std::iter::repeat_n(pad_id, row.padding as usize));
        Ok(())
    }

    /// `len` bytes of shard `shard`'s file from byte `start`.
    fn read(&mut self, shard: u32, start: u64, len: u64) -> Result<&[u8], IoError> {
        if let Some((held_shard, from, to)) = self.held
            && held_shard == shard
            && from <= start
            && start + len <= to
        {
            let at = (start - from) as usize;
            return Ok(&self.block[at..at + len as usize]);
        }
        let file = &self.shards[shard as usize];
        let want = if self.in_order { len.max(BLOCK_BYTES) } else { len };
        let take = want.min(file.size.saturating_sub(start)).max(len);
        self.block.resize(take as usize, 0);
        file.file.read_exact_at(&mut self.block, start).map_err(IoError::at("reading", &file.path))?;
        self.held = Some((shard, start, start + take));
        Ok(&self.block[..len as usize])
    }
}
