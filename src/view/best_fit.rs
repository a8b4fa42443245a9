//! Best-fit decreasing: whole documents into rows of `seq_len`, padded, as in
//! "Fewer Truncations Improve Language Modeling" (arXiv 2404.10830), OLMo-core's
//! OBFD and TRL's `bfd`. A document longer than a row is cut into rows of
//! `seq_len` and a last, shorter piece, and its pieces are placed like documents.
//! Pieces are taken longest first (equal ones in document order); each goes into
//! the open row with the least room that holds it, else opens a row. Rows come
//! out in the order they were opened, pieces in each in the order they were placed.
//!
//! Documents are packed a window at a time: the documents of one input shard in
//! order, cut after the one that brings a window to `WINDOW_TOKENS`. Inside a
//! window every row but the last few fills up when short documents are many (they
//! fill what long ones leave), so the rows left part-filled are a handful per
//! window: at 8 Mi tokens that is thousands of rows of 2048 or 4096 per window and
//! under a tenth of a percent of padding from window ends. A larger window would
//! gain nothing measurable, and the plan's memory grows with the window.

use std::collections::BTreeMap;

use super::rows::{Piece, Plan};

/// Tokens of documents packed together (see the module's comment).
pub const WINDOW_TOKENS: u64 = 8 << 20;

/// `documents` (start, length in tokens; none empty) cut into windows.
pub fn windows(documents: &[(u64, u32)]) -> impl Iterator<Item = &[(u64, u32)]> {
    let mut rest = documents;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut tokens = 0;
        let end = rest
            .iter()
            .position(|&(_, len)| {
                tokens += u64::from(len);
                tokens >= WINDOW_TOKENS
            })
            .map_or(rest.len(), |last| last + 1);
        let (window, after) = rest.split_at(end);
        rest = after;
        Some(window)
    })
}

/// Packs one window of `documents` of `shard` into rows of `seq_len`, appended to `plan`.
pub fn pack(plan: &mut Plan, shard: u32, documents: &[(u64, u32)], seq_len: u32) {
    let mut pieces: Vec<Piece> = Vec::with_capacity(documents.len());
    for &(start, len) in documents {
        if len > seq_len {
            plan.stats.documents_split += 1;
        }
        let mut offset = 0;
        while offset < len {
            let piece = (len - offset).min(seq_len);
            pieces.push(Piece { shard, start: start + u64::from(offset), len: piece });
            offset += piece;
        }
    }
    // Stable: pieces of equal length keep document order.
    pieces.sort_by_key(|piece| std::cmp::Reverse(piece.len));
    let mut rows: Vec<(Vec<Piece>, u32)> = Vec::new();
    // Room left -> the open rows with that much room (the last opened on top).
    let mut open: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for piece in pieces {
        let fit = open.range_mut(piece.len..).next().map(|(&room, rows)| (room, rows.pop()));
        let (row, room) = match fit {
            Some((room, Some(row))) => {
                if open.get(&room).is_some_and(Vec::is_empty) {
                    open.remove(&room);
                }
                (row, room)
            }
            _ => {
                rows.push((Vec::new(), seq_len));
                (rows.len() - 1, seq_len)
            }
        };
        rows[row].0.push(piece);
        let left = room - piece.len;
        rows[row].1 = left;
        if left > 0 {
            open.entry(left).or_default().push(row);
        }
    }
    for (pieces, padding) in rows {
        plan.push_row(pieces, padding);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::PackMode;
    use crate::view::plan::tests::plan_lengths as plan_shard;

    #[test]
    fn the_longest_pieces_go_first_into_the_tightest_row() {
        // Lengths 6, 3, 4, 2, 1 into rows of 7: 6 opens row 0 (room 1), 4 opens row 1
        // (room 3), 3 fits row 1 exactly, 2 opens row 2 (room 5), 1 fills row 0.
        let plan = plan_shard(PackMode::BestFit, 7, 0, &[6, 3, 4, 2, 1]);
        let rows: Vec<(Vec<u32>, u32)> =
            plan.rows.iter().map(|row| (plan.pieces_of(row).iter().map(|p| p.len).collect(), row.padding)).collect();
        assert_eq!(rows, [(vec![6, 1], 0), (vec![4, 3], 0), (vec![2], 5)]);
        assert_eq!((plan.stats.tokens, plan.stats.padding, plan.stats.documents_split), (16, 5, 0));
    }

    #[test]
    fn only_a_document_longer_than_a_row_is_cut() {
        let plan = plan_shard(PackMode::BestFit, 4, 0, &[4, 9, 2]);
        let mut pieces: Vec<(u64, u32)> = plan.pieces.iter().map(|p| (p.start, p.len)).collect();
        pieces.sort();
        assert_eq!(pieces, [(0, 4), (4, 4), (8, 4), (12, 1), (13, 2)]);
        assert_eq!(plan.stats.documents_split, 1);
    }

    #[test]
    fn windows_end_after_the_document_that_fills_them() {
        let big = WINDOW_TOKENS as u32;
        let documents = [(0, 5), (5, big - 5), (big as u64, 3), (big as u64 + 3, big)];
        let windows: Vec<usize> = windows(&documents).map(<[_]>::len).collect();
        assert_eq!(windows, [2, 2]);
    }

    proptest::proptest! {
        /// Every token of every document lands in exactly one row, no row is over
        /// `seq_len`, and only documents longer than a row are cut.
        #[test]
        fn every_token_is_kept_once_and_rows_stay_within_seq_len(
            seq_len in 1u32..40,
            lengths in proptest::collection::vec(1u32..100, 0..60),
        ) {
            let plan = plan_shard(PackMode::BestFit, seq_len, 0, &lengths);
            let mut covered: Vec<(u64, u32)> = plan.pieces.iter().map(|p| (p.start, p.len)).collect();
            covered.sort();
            let mut next = 0u64;
            for (start, len) in covered {
                proptest::prop_assert_eq!(start, next);
                next += u64::from(len);
            }
            proptest::prop_assert_eq!(next, lengths.iter().map(|&l| u64::from(l)).sum::<u64>());
            for row in &plan.rows {
                proptest::prop_assert_eq!(plan.row_tokens(row), u64::from(seq_len));
            }
            let offsets = crate::view::rows::document_offsets(&lengths);
            for piece in &plan.pieces {
                let document = offsets.partition_point(|&o| o <= piece.start) - 1;
                let whole = piece.start == offsets[document] && piece.len == lengths[document];
                proptest::prop_assert!(whole || lengths[document] > seq_len, "a document that fits was cut");
            }
            let split = lengths.iter().filter(|&&l| l > seq_len).count() as u64;
            proptest::prop_assert_eq!(plan.stats.documents_split, split);
        }
    }
}
