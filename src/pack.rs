//! Turning documents' token ids into training rows: `concat` (run_clm's
//! `group_texts`, per input shard), `truncate` and `none`.

use crate::spec::PackMode;

/// Token counts a packer dropped, for the manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackStats {
    /// Tokens left at the end of a shard, shorter than `seq_len` (concat).
    pub remainder_tokens: u64,
    /// Tokens cut from documents longer than `seq_len` (truncate).
    pub truncated_tokens: u64,
}

pub struct Packer {
    mode: PackMode,
    seq_len: usize,
    buffer: Vec<u32>,
    stats: PackStats,
}

impl Packer {
    pub fn new(mode: PackMode, seq_len: usize) -> Packer {
        Packer { mode, seq_len, buffer: Vec::new(), stats: PackStats::default() }
    }

    /// Adds one document's ids, calling `emit` for every finished row.
    pub fn push<E>(&mut self, ids: &[u32], mut emit: impl FnMut(&[u32]) -> Result<(), E>) -> Result<(), E> {
        match self.mode {
            PackMode::None => {
                if !ids.is_empty() {
                    emit(ids)?;
                }
            }
            PackMode::Truncate => {
                if !ids.is_empty() {
                    let kept = ids.len().min(self.seq_len);
                    self.stats.truncated_tokens += (ids.len() - kept) as u64;
                    emit(&ids[..kept])?;
                }
            }
            PackMode::Concat => {
                // The row begun by earlier documents is finished first; the rows
                // after it are emitted from `ids` where they are, not copied into
                // the buffer and out again.
                let mut rest = ids;
                if !self.buffer.is_empty() {
                    let (head, tail) = rest.split_at(rest.len().min(self.seq_len - self.buffer.len()));
                    self.buffer.extend_from_slice(head);
                    rest = tail;
                    if self.buffer.len() < self.seq_len {
                        return Ok(());
                    }
                    emit(&self.buffer)?;
                    self.buffer.clear();
                }
                let rows = rest.chunks_exact(self.seq_len);
                let remainder = rows.remainder();
                for row in rows {
                    emit(row)?;
                }
                self.buffer.extend_from_slice(remainder);
            }
        }
        Ok(())
    }

    /// Ends the shard: the concat remainder is dropped, as `group_texts` does.
    pub fn finish(mut self) -> PackStats {
        self.stats.remainder_tokens += self.buffer.len() as u64;
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(mode: PackMode, seq_len: usize, docs: &[&[u32]]) -> (Vec<Vec<u32>>, PackStats) {
        let mut packer = Packer::new(mode, seq_len);
        let mut rows = Vec::new();
        for doc in docs {
            packer
                .push(doc, |row| {
                    rows.push(row.to_vec());
                    Ok::<_, ()>(())
                })
                .unwrap();
        }
        (rows, packer.finish())
    }

    #[test]
    fn concat_joins_documents_and_drops_the_remainder() {
        let (rows, stats) = pack(PackMode::Concat, 3, &[&[1, 2], &[3, 4, 5, 6, 7], &[8]]);
        assert_eq!(rows, vec![vec![1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(stats.remainder_tokens, 2);
    }

    proptest::proptest! {
        /// Concat is the documents' ids end to end, cut into rows of `seq_len`,
        /// whatever the lengths of the documents against the rows.
        #[test]
        fn concat_rows_are_the_joined_ids_cut_every_seq_len(
            seq_len in 1usize..9,
            lengths in proptest::collection::vec(0usize..30, 0..12),
        ) {
            let mut next = 0u32;
            let docs: Vec<Vec<u32>> = lengths
                .iter()
                .map(|&len| (0..len).map(|_| { next += 1; next }).collect())
                .collect();
            let doc_refs: Vec<&[u32]> = docs.iter().map(Vec::as_slice).collect();
            let (rows, stats) = pack(PackMode::Concat, seq_len, &doc_refs);
            let joined: Vec<u32> = docs.concat();
            let expected: Vec<Vec<u32>> = joined.chunks_exact(seq_len).map(<[u32]>::to_vec).collect();
            proptest::prop_assert_eq!(rows, expected);
            proptest::prop_assert_eq!(stats.remainder_tokens as usize, joined.len() % seq_len);
        }
    }

    #[test]
    fn truncate_cuts_each_document() {
        let (rows, stats) = pack(PackMode::Truncate, 2, &[&[1, 2, 3], &[4], &[]]);
        assert_eq!(rows, vec![vec![1, 2], vec![4]]);
        assert_eq!(stats.truncated_tokens, 1);
    }

    #[test]
    fn none_keeps_documents_whole() {
        let (rows, stats) = pack(PackMode::None, 2, &[&[1, 2, 3], &[4]]);
        assert_eq!(rows, vec![vec![1, 2, 3], vec![4]]);
        assert_eq!(stats, PackStats::default());
    }
}
