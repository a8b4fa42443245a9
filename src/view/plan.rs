//! Rows as pieces of documents, planned from the documents' lengths alone: no
//! token is read until a row is written (`gather`). A piece is a run of one
//! shard's tokens; a row is one or more pieces, then padding.
//!
//! - `concat` (run_clm's `group_texts`, per input shard): the shard's documents end
//!   to end, cut every `seq_len` tokens; the last, shorter block is dropped.
//! - `truncate`: one row per document, its first `seq_len` tokens.
//! - `none`: one row per document, whole.
//! - `best_fit`: whole documents packed into padded rows (see `best_fit`).
//!
//! Empty documents (possible without BOS/EOS) give no row.

use crate::spec::PackMode;

use super::best_fit;

/// A run of `len` tokens of shard `shard`, from token `start` of its `.bin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub shard: u32,
    pub start: u64,
    pub len: u32,
}

/// One row: `pieces` pieces of the plan from `first`, then `padding` pad tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRef {
    pub first: usize,
    pub pieces: u32,
    pub padding: u32,
}

/// What packing kept, dropped and added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Tokens of documents in rows.
    pub tokens: u64,
    pub padding: u64,
    /// Tokens at the end of each shard too few for a row (concat).
    pub remainder: u64,
    /// Tokens cut off long documents (truncate).
    pub truncated: u64,
    /// Documents longer than a row, cut into pieces (best_fit).
    pub documents_split: u64,
}

impl PlanStats {
    pub fn add(&mut self, other: &PlanStats) {
        self.tokens += other.tokens;
        self.padding += other.padding;
        self.remainder += other.remainder;
        self.truncated += other.truncated;
        self.documents_split += other.documents_split;
    }
}

/// A run of rows and the pieces they are made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub pieces: Vec<Piece>,
    pub rows: Vec<RowRef>,
    pub stats: PlanStats,
}

impl Plan {
    pub fn pieces_of(&self, row: &RowRef) -> &[Piece] {
        &self.pieces[row.first..row.first + row.pieces as usize]
    }

    /// Tokens a row holds, padding included.
    pub fn row_tokens(&self, row: &RowRef) -> u64 {
        self.pieces_of(row).iter().map(|piece| u64::from(piece.len)).sum::<u64>() + u64::from(row.padding)
    }

    /// Adds a row of `pieces` and `padding` pad tokens.
    pub fn push_row(&mut self, pieces: impl IntoIterator<Item = Piece>, padding: u32) {
        let first = self.pieces.len();
        for piece in pieces {
            self.stats.tokens += u64::from(piece.len);
            self.pieces.push(piece);
        }
        let pieces = (self.pieces.len() - first) as u32;
        self.stats.padding += u64::from(padding);
        self.rows.push(RowRef { first, pieces, padding });
    }

    /// Appends `other`'s rows after this plan's.
    pub fn append(&mut self, other: Plan) {
        let base = self.pieces.len();
        self.pieces.extend(other.pieces);
        self.rows.extend(other.rows.into_iter().map(|row| RowRef { first: row.first + base, ..row }));
        self.stats.add(&other.stats);
    }

    /// The rows cut into consecutive runs of at most `max_tokens` tokens each (a
    /// longer row alone), the units a view writes in parallel: each run's row range.
    pub fn runs(&self, max_tokens: u64) -> Vec<std::ops::Range<usize>> {
        let mut runs = Vec::new();
        let (mut start, mut tokens) = (0, 0);
        for (index, row) in self.rows.iter().enumerate() {
            let row_tokens = self.row_tokens(row);
            if index > start && tokens + row_tokens > max_tokens {
                runs.push(start..index);
                (start, tokens) = (index, 0);
            }
            tokens += row_tokens;
        }
        if start < self.rows.len() || runs.is_empty() {
            runs.push(start..self.rows.len());
        }
        runs
    }
}

/// Where each document of `lengths` starts, in tokens from the shard's first, and
/// where the last ends: `lengths.len() + 1` offsets.
pub fn document_offsets(lengths: &[u32]) -> Vec<u64> {
    let mut offsets = Vec::with_capacity(lengths.len() + 1);
    let mut offset = 0u64;
    offsets.push(0);
    for &length in lengths {
        offset += u64::from(length);
        offsets.push(offset);
    }
    offsets
}

/// The rows of one shard (`shard`, whose documents are `lengths` tokens long).
pub fn plan_shard(pack: PackMode, seq_len: u32, shard: u32, lengths: &[u32]) -> Plan {
    let mut plan = Plan::default();
    let offsets = document_offsets(lengths);
    let documents = offsets.iter().zip(lengths).filter(|(_, length)| **length > 0);
    match pack {
        PackMode::Concat => {
            let total = offsets[lengths.len()];
            let row = u64::from(seq_len);
            for start in (0..total / row).map(|index| index * row) {
                plan.push_row([Piece { shard, start, len: seq_len }], 0);
            }
            plan.stats.remainder = total % row;
        }
        PackMode::Truncate => {
            for (&start, &len) in documents {
                plan.push_row([Piece { shard, start, len: len.min(seq_len) }], 0);
                plan.stats.truncated += u64::from(len.saturating_sub(seq_len));
            }
        }
        PackMode::None => {
            for (&start, &len) in documents {
                plan.push_row([Piece { shard, start, len }], 0);
            }
        }
        PackMode::BestFit => {
            let documents: Vec<(u64, u32)> = documents.map(|(&start, &len)| (start, len)).collect();
            for window in best_fit::windows(&documents) {
                best_fit::pack(&mut plan, shard, window, seq_len);
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(plan: &Plan) -> Vec<(Vec<(u64, u32)>, u32)> {
        plan.rows
            .iter()
            .map(|row| (plan.pieces_of(row).iter().map(|p| (p.start, p.len)).collect(), row.padding))
            .collect()
    }

    #[test]
    fn concat_cuts_the_shard_every_seq_len_and_drops_the_remainder() {
        let plan = plan_shard(PackMode::Concat, 3, 0, &[2, 5, 1]);
        assert_eq!(rows(&plan), [(vec![(0, 3)], 0), (vec![(3, 3)], 0)]);
        assert_eq!(plan.stats, PlanStats { tokens: 6, remainder: 2, ..PlanStats::default() });
    }

    #[test]
    fn truncate_and_none_give_a_row_per_non_empty_document() {
        let truncated = plan_shard(PackMode::Truncate, 2, 0, &[3, 0, 1]);
        assert_eq!(rows(&truncated), [(vec![(0, 2)], 0), (vec![(3, 1)], 0)]);
        assert_eq!(truncated.stats.truncated, 1);
        let whole = plan_shard(PackMode::None, 2, 0, &[3, 0, 1]);
        assert_eq!(rows(&whole), [(vec![(0, 3)], 0), (vec![(3, 1)], 0)]);
    }

    #[test]
    fn runs_cut_rows_into_units_of_bounded_tokens() {
        let plan = plan_shard(PackMode::None, 0, 0, &[4, 4, 4, 9, 1]);
        assert_eq!(plan.runs(8), [0..2, 2..3, 3..4, 4..5]);
        assert_eq!(plan.runs(100), [0..5]);
        assert_eq!(Plan::default().runs(8), [0..0]);
    }

    proptest::proptest! {
        /// Concat's rows are the shard's tokens end to end, cut every `seq_len`,
        /// whatever the lengths of the documents against the rows.
        #[test]
        fn concat_rows_are_the_joined_tokens_cut_every_seq_len(
            seq_len in 1u32..9,
            lengths in proptest::collection::vec(0u32..30, 0..12),
        ) {
            let plan = plan_shard(PackMode::Concat, seq_len, 3, &lengths);
            let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
            proptest::prop_assert_eq!(plan.rows.len() as u64, total / u64::from(seq_len));
            for (index, row) in plan.rows.iter().enumerate() {
                let piece = plan.pieces_of(row)[0];
                proptest::prop_assert_eq!(piece, Piece { shard: 3, start: index as u64 * u64::from(seq_len), len: seq_len });
            }
            proptest::prop_assert_eq!(plan.stats.remainder, total % u64::from(seq_len));
        }
    }
}
