//! The rows of one input shard of a view, planned from its documents' lengths:
//! - `concat` (run_clm's `group_texts`, per input shard): the shard's documents end
//!   to end, cut every `seq_len` tokens; the last, shorter block is dropped.
//! - `truncate`: one row per document, its first `seq_len` tokens.
//! - `none`: one row per document, whole.
//! - `best_fit`: whole documents packed into padded rows (see `best_fit`).
//!
//! Empty documents (possible without BOS/EOS) give no row.

use crate::spec::PackMode;

use super::best_fit;
use super::rows::{Piece, Plan};

/// The rows of one shard (`shard`), whose document `i` is tokens
/// `offsets[i]..offsets[i + 1]` (see `rows::document_offsets`).
pub fn plan_shard(pack: PackMode, seq_len: u32, shard: u32, offsets: &[u64]) -> Plan {
    let mut plan = Plan::default();
    // Starts and lengths (a document is at most i32::MAX tokens: `token_store::read_index`).
    let documents = offsets.windows(2).map(|pair| (pair[0], (pair[1] - pair[0]) as u32)).filter(|(_, len)| *len > 0);
    match pack {
        PackMode::Concat => {
            let total = offsets.last().copied().unwrap_or(0);
            let row = u64::from(seq_len);
            for start in (0..total / row).map(|index| index * row) {
                plan.push_row([Piece { shard, start, len: seq_len }], 0);
            }
            plan.stats.remainder = total % row;
        }
        PackMode::Truncate => {
            for (start, len) in documents {
                plan.push_row([Piece { shard, start, len: len.min(seq_len) }], 0);
                plan.stats.truncated += u64::from(len.saturating_sub(seq_len));
            }
        }
        PackMode::None => {
            for (start, len) in documents {
                plan.push_row([Piece { shard, start, len }], 0);
            }
        }
        PackMode::BestFit => {
            let documents: Vec<(u64, u32)> = documents.collect();
            for window in best_fit::windows(&documents) {
                best_fit::pack(&mut plan, shard, window, seq_len);
            }
        }
    }
    plan
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::view::rows::{PlanStats, document_offsets};

    /// The plan of a shard whose documents are `lengths` tokens long.
    pub(crate) fn plan_lengths(pack: PackMode, seq_len: u32, shard: u32, lengths: &[u32]) -> Plan {
        plan_shard(pack, seq_len, shard, &document_offsets(lengths))
    }

    fn rows(plan: &Plan) -> Vec<(Vec<(u64, u32)>, u32)> {
        plan.rows
            .iter()
            .map(|row| (plan.pieces_of(row).iter().map(|p| (p.start, p.len)).collect(), row.padding))
            .collect()
    }

    #[test]
    fn concat_cuts_the_shard_every_seq_len_and_drops_the_remainder() {
        let plan = plan_lengths(PackMode::Concat, 3, 0, &[2, 5, 1]);
        assert_eq!(rows(&plan), [(vec![(0, 3)], 0), (vec![(3, 3)], 0)]);
        assert_eq!(plan.stats, PlanStats { tokens: 6, remainder: 2, ..PlanStats::default() });
    }

    #[test]
    fn truncate_and_none_give_a_row_per_non_empty_document() {
        let truncated = plan_lengths(PackMode::Truncate, 2, 0, &[3, 0, 1]);
        assert_eq!(rows(&truncated), [(vec![(0, 2)], 0), (vec![(3, 1)], 0)]);
        assert_eq!(truncated.stats.truncated, 1);
        let whole = plan_lengths(PackMode::None, 2, 0, &[3, 0, 1]);
        assert_eq!(rows(&whole), [(vec![(0, 3)], 0), (vec![(3, 1)], 0)]);
    }

    #[test]
    fn runs_cut_rows_into_units_of_bounded_tokens() {
        let plan = plan_lengths(PackMode::None, 0, 0, &[4, 4, 4, 9, 1]);
        assert_eq!(plan.runs(8), [0..2, 2..3, 3..4, 4..5]);
        assert_eq!(plan.runs(100), vec![0..5]);
        assert_eq!(Plan::default().runs(8), vec![0..0]);
    }

    proptest::proptest! {
        /// Concat's rows are the shard's tokens end to end, cut every `seq_len`,
        /// whatever the lengths of the documents against the rows.
        #[test]
        fn concat_rows_are_the_joined_tokens_cut_every_seq_len(
            seq_len in 1u32..9,
            lengths in proptest::collection::vec(0u32..30, 0..12),
        ) {
            let plan = plan_lengths(PackMode::Concat, seq_len, 3, &lengths);
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
