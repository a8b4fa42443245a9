//! Long pieces merged rank by rank, in time linear in the piece, where the merge
//! list allows it.
//!
//! In a merge list learned by BPE training, a token is merged with others only
//! after every merge that makes it: each merge that uses a token has a higher rank
//! than each merge that gives it. Then merging a pair of rank `r` only creates
//! pairs of higher rank, so the lowest rank waiting never goes down. The pairs can
//! wait in one bucket per rank, the buckets taken in rank order and each bucket
//! leftmost first: exactly the order in which `tokenizers`' priority queue takes
//! them, without a queue operation of `log n` cache misses per merge (a 2 MB word
//! queues millions of pairs).

use rustc_hash::FxHashMap;

use crate::huge_pages::HugeMap;

use super::symbols::{Merge, NONE, Symbol, merge_with_next};

/// Whether every merge that uses a token ranks above every merge that gives it,
/// which `merge` needs.
pub fn rank_ordered(merges: &HugeMap<(u32, u32), Merge>) -> bool {
    // Indexed by id where the ids are about as many as the tokens, as in a trained
    // vocabulary: a hash map of them was a tenth of building GPT-4o's encoder. Else
    // keyed by id, since a vocabulary's ids may be sparse and large.
    let largest = merges.iter().flat_map(|(&(left, right), merge)| [left, right, merge.id]).max().unwrap_or(0);
    if ids_fit_a_table(largest, merges.len()) {
        let mut ranks = vec![TokenRanks::default(); largest as usize + 1];
        record_ranks(merges, &mut ranks);
        return ranks.iter().all(TokenRanks::in_order);
    }
    let mut ranks: FxHashMap<u32, TokenRanks> = FxHashMap::default();
    ranks.reserve(merges.len() * 2);
    record_ranks(merges, &mut ranks);
    ranks.values().all(TokenRanks::in_order)
}

/// Whether ids up to `largest`, for `count` tokens or merges, are dense enough for a
/// table indexed by id: an untrusted vocabulary's ids may go up to `u32::MAX`,
/// and the table stays within a few entries per token.
pub fn ids_fit_a_table(largest: u32, count: usize) -> bool {
    largest as usize <= 4 * count + 256
}

/// A token's highest rank that makes it and lowest rank that uses it.
#[derive(Clone, Copy)]
struct TokenRanks {
    last_made: Option<u32>,
    first_used: u32,
}

impl Default for TokenRanks {
    fn default() -> TokenRanks {
        TokenRanks { last_made: None, first_used: u32::MAX }
    }
}

impl TokenRanks {
    fn in_order(&self) -> bool {
        self.last_made.is_none_or(|made| made < self.first_used)
    }
}

/// Tokens' ranks by id.
trait RanksById {
    fn of(&mut self, id: u32) -> &mut TokenRanks;
}

impl RanksById for Vec<TokenRanks> {
    fn of(&mut self, id: u32) -> &mut TokenRanks {
        &mut self[id as usize]
    }
}

impl RanksById for FxHashMap<u32, TokenRanks> {
    fn of(&mut self, id: u32) -> &mut TokenRanks {
        self.entry(id).or_default()
    }
}

/// Records each token's ranks in `ranks`, which has room for every id of `merges`.
fn record_ranks(merges: &HugeMap<(u32, u32), Merge>, ranks: &mut impl RanksById) {
    for (&(left, right), merge) in merges {
        let made = &mut ranks.of(merge.id).last_made;
        *made = (*made).max(Some(merge.rank));
        for part in [left, right] {
            let used = &mut ranks.of(part).first_used;
            *used = (*used).min(merge.rank);
        }
    }
}

/// Buckets of waiting pairs, one per rank, kept by a thread between pieces: every
/// bucket is empty again when `merge` returns.
#[derive(Default)]
pub struct RankBuckets {
    waiting: Waiting,
    /// One bucket's entries, by position: (position, entry).
    bucket: Vec<(u32, u32)>,
}

#[derive(Default)]
struct Waiting {
    /// The latest entry of each rank's bucket (a list through `Pair::next`), or `NONE`.
    heads: Vec<u32>,
    /// One bit per rank, set while its bucket holds entries.
    occupied: Vec<u64>,
    /// One bit per word of `occupied`, set while that word has a bit set: the
    /// next rank is found past a few words of these, not past every word of
    /// `occupied` (3,125 of them for a vocabulary of 200,000, scanned to the
    /// end for each piece, made long pieces a fifth of GPT-4o's encoding).
    occupied_words: Vec<u64>,
    /// No word of `occupied_words` before this one has a bit set.
    lowest_word: usize,
    entries: Vec<Pair>,
}

/// A pair waiting to merge into `id`: the symbol at `at` with its right
/// neighbour, while they are still the tokens `left` and `right`.
#[derive(Clone, Copy)]
struct Pair {
    next: u32,
    at: u32,
    left: u32,
    right: u32,
    id: u32,
}

impl RankBuckets {
    /// Merges `symbols` (a linked list, as `BytePairMerger::first_symbols` builds
    /// it) with `merges`, which must be `rank_ordered`.
    pub fn merge(&mut self, merges: &HugeMap<(u32, u32), Merge>, ranks: usize, symbols: &mut [Symbol]) {
        let waiting = &mut self.waiting;
        if waiting.heads.len() != ranks {
            waiting.heads = vec![NONE; ranks];
            waiting.occupied = vec![0; ranks.div_ceil(64)];
            waiting.occupied_words = vec![0; ranks.div_ceil(64 * 64)];
        }
        waiting.entries.clear();
        waiting.lowest_word = 0;
        for at in 0..symbols.len() as u32 {
            waiting.push(merges, symbols, at);
        }
        while let Some(rank) = waiting.take_lowest_rank() {
            waiting.take_bucket(rank, &mut self.bucket);
            for &(_, entry) in &self.bucket {
                let Pair { at, left, right, id, .. } = waiting.entries[entry as usize];
                let symbol = symbols[at as usize];
                // Stale: a side was merged since. A symbol merged into its left
                // neighbour keeps its id, hence the length; a symbol that took in
                // its right neighbour has a new id.
                let stale = symbol.len == 0
                    || symbol.id != left
                    || symbols.get(symbol.next as usize).is_none_or(|next| next.id != right);
                if !stale {
                    merge_with_next(symbols, at, id, |symbols, at| waiting.push(merges, symbols, at));
                }
            }
        }
    }
}

impl Waiting {
    /// The lowest rank with a bucket, marked empty (its entries are taken next).
    /// The search starts at the last rank taken, since none below it fills again.
    fn take_lowest_rank(&mut self) -> Option<usize> {
        let summary = &mut self.occupied_words[self.lowest_word..];
        let (offset, words) = summary.iter_mut().enumerate().find(|(_, words)| **words != 0)?;
        self.lowest_word += offset;
        let word = self.lowest_word * 64 + words.trailing_zeros() as usize;
        let bits = &mut self.occupied[word];
        let rank = word * 64 + bits.trailing_zeros() as usize;
        *bits &= *bits - 1;
        if *bits == 0 {
            *words &= *words - 1;
        }
        Some(rank)
    }

    /// Moves the bucket of `rank` into `bucket`, leftmost first.
    fn take_bucket(&mut self, rank: usize, bucket: &mut Vec<(u32, u32)>) {
        bucket.clear();
        let mut index = std::mem::replace(&mut self.heads[rank], NONE);
        while index != NONE {
            let entry = &self.entries[index as usize];
            bucket.push((entry.at, index));
            index = entry.next;
        }
        bucket.sort_unstable();
    }

    /// Queues the merge of the symbol at `at` with its right neighbour, if any.
    fn push(&mut self, merges: &HugeMap<(u32, u32), Merge>, symbols: &[Symbol], at: u32) {
        let symbol = symbols[at as usize];
        let Some(right) = symbols.get(symbol.next as usize) else { return };
        let Some(merge) = merges.get(&(symbol.id, right.id)) else { return };
        let rank = merge.rank as usize;
        self.entries.push(Pair { next: self.heads[rank], at, left: symbol.id, right: right.id, id: merge.id });
        self.heads[rank] = (self.entries.len() - 1) as u32;
        self.occupied[rank / 64] |= 1 << (rank % 64);
        self.occupied_words[rank / (64 * 64)] |= 1 << (rank / 64 % 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merges(list: &[((u32, u32), u32)]) -> HugeMap<(u32, u32), Merge> {
        list.iter().enumerate().map(|(rank, &(pair, id))| (pair, Merge { rank: rank as u32, id })).collect()
    }

    #[test]
    fn trained_orders_pass_and_a_token_used_before_it_is_made_fails() {
        // a=0 b=1 c=2; ab=3, abc=4
        assert!(rank_ordered(&merges(&[((0, 1), 3), ((3, 2), 4)])));
        assert!(!rank_ordered(&merges(&[((3, 2), 4), ((0, 1), 3)])));
        // bc=5; abc made twice, by (ab, c) at rank 2 and (a, bc) at rank 4, and used at rank 3.
        let twice = merges(&[((0, 1), 3), ((1, 2), 5), ((3, 2), 4), ((4, 4), 6), ((0, 5), 4)]);
        assert!(!rank_ordered(&twice));
        // Ids are not indices: the largest one costs no more than any other.
        assert!(rank_ordered(&merges(&[((0, 1), u32::MAX), ((u32::MAX, 2), 7)])));
    }

    #[test]
    fn sparse_ids_give_the_answers_of_dense_ones() {
        let orders: [&[((u32, u32), u32)]; 3] = [
            &[((0, 1), 3), ((3, 2), 4)],
            &[((3, 2), 4), ((0, 1), 3)],
            &[((0, 1), 3), ((1, 2), 5), ((3, 2), 4), ((4, 4), 6), ((0, 5), 4)],
        ];
        for order in orders {
            // Spread far past the table's bound: the ranks are kept by id in a map.
            let spread = |id: u32| id * 100_000_000 + 1;
            let sparse: Vec<_> =
                order.iter().map(|&((left, right), id)| ((spread(left), spread(right)), spread(id))).collect();
            assert_eq!(rank_ordered(&merges(&sparse)), rank_ordered(&merges(order)), "{order:?}");
        }
    }
}
