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
                self.buffer.extend_from_slice(ids);
                let full = self.buffer.len() / self.seq_len * self.seq_len;
                for row in self.buffer[..full].chunks_exact(self.seq_len) {
                    emit(row)?;
                }
                self.buffer.drain(..full);
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
