//! Byte-level BPE merges with the `tokenizers` crate's semantics: pairs merge by
//! their rank in the `merges` list (not by token id), lowest rank first and
//! leftmost on ties, through a priority queue as `tokenizers` does. A per-thread
//! cache maps pre-tokens to ids, since natural text repeats the same words.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use thread_local::ThreadLocal;

/// Pre-tokens longer than this are encoded without the cache: they are rare, and
/// keeping them would let a few huge pieces fill it.
const CACHED_PIECE_MAX: usize = 64;
/// Entries per thread before the cache starts over; bounds memory per thread.
const CACHE_ENTRIES_MAX: usize = 1 << 18;

/// What merging a pair gives: its rank in the merge list and the id of the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Merge {
    pub rank: u32,
    pub id: u32,
}

pub struct BytePairMerger {
    /// Id of each single byte's token.
    byte_ids: [u32; 256],
    merges: FxHashMap<(u32, u32), Merge>,
    /// With `ignore_merges`, a pre-token that is itself in the vocabulary is that token.
    whole_tokens: Option<FxHashMap<Vec<u8>, u32>>,
    caches: ThreadLocal<RefCell<PieceCache>>,
}

#[derive(Default)]
struct PieceCache {
    ids: FxHashMap<Box<[u8]>, Box<[u32]>>,
    /// Reused merge state, so encoding a piece allocates nothing once warm.
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Reverse<(u32, u32, u32)>>,
}

/// One token of a word being merged, in a linked list over the word's bytes; a
/// symbol merged into its left neighbour has `len == 0`.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: u32,
    next: u32,
    len: u32,
}

const NONE: u32 = u32::MAX;

impl BytePairMerger {
    pub fn new(
        byte_ids: [u32; 256],
        merges: FxHashMap<(u32, u32), Merge>,
        whole_tokens: Option<FxHashMap<Vec<u8>, u32>>,
    ) -> BytePairMerger {
        BytePairMerger { byte_ids, merges, whole_tokens, caches: ThreadLocal::new() }
    }

    /// Appends the ids of one pre-token to `out`.
    pub fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        match piece {
            [] => return,
            [byte] => {
                out.push(self.byte_ids[*byte as usize]);
                return;
            }
            _ => {}
        }
        if let Some(id) = self.whole_tokens.as_ref().and_then(|tokens| tokens.get(piece)) {
            out.push(*id);
            return;
        }
        let mut cache = self.caches.get_or_default().borrow_mut();
        let cache = &mut *cache;
        if piece.len() > CACHED_PIECE_MAX {
            self.merge(piece, &mut cache.symbols, &mut cache.queue, out);
            return;
        }
        if let Some(ids) = cache.ids.get(piece) {
            out.extend_from_slice(ids);
            return;
        }
        let start = out.len();
        self.merge(piece, &mut cache.symbols, &mut cache.queue, out);
        if cache.ids.len() >= CACHE_ENTRIES_MAX {
            cache.ids.clear();
        }
        cache.ids.insert(piece.into(), out[start..].into());
    }

    /// `tokenizers`' `Word::merge_all` without dropout.
    fn merge(
        &self,
        piece: &[u8],
        symbols: &mut Vec<Symbol>,
        queue: &mut BinaryHeap<Reverse<(u32, u32, u32)>>,
        out: &mut Vec<u32>,
    ) {
        let last = piece.len() as u32 - 1;
        symbols.clear();
        symbols.extend(piece.iter().enumerate().map(|(at, &byte)| {
            let at = at as u32;
            Symbol {
                id: self.byte_ids[byte as usize],
                prev: if at == 0 { NONE } else { at - 1 },
                next: if at == last { NONE } else { at + 1 },
                len: 1,
            }
        }));
        queue.clear();
        for at in 0..last {
            self.push_pair(symbols, queue, at);
        }
        while let Some(Reverse((_, at, new_id))) = queue.pop() {
            let symbol = symbols[at as usize];
            if symbol.len == 0 || symbol.next == NONE {
                continue;
            }
            let right = symbols[symbol.next as usize];
            // A stale entry: one side was merged with something else since.
            if self.merges.get(&(symbol.id, right.id)).is_none_or(|merge| merge.id != new_id) {
                continue;
            }
            symbols[at as usize] = Symbol { id: new_id, len: symbol.len + right.len, next: right.next, ..symbol };
            symbols[symbol.next as usize].len = 0;
            if right.next != NONE {
                symbols[right.next as usize].prev = at;
                self.push_pair(symbols, queue, at);
            }
            if symbol.prev != NONE {
                self.push_pair(symbols, queue, symbol.prev);
            }
        }
        out.extend(symbols.iter().filter(|symbol| symbol.len > 0).map(|symbol| symbol.id));
    }

    /// Queues the merge of the symbol at `at` with its right neighbour, if there is one.
    fn push_pair(&self, symbols: &[Symbol], queue: &mut BinaryHeap<Reverse<(u32, u32, u32)>>, at: u32) {
        let symbol = symbols[at as usize];
        if symbol.next == NONE {
            return;
        }
        if let Some(merge) = self.merges.get(&(symbol.id, symbols[symbol.next as usize].id)) {
            queue.push(Reverse((merge.rank, at, merge.id)));
        }
    }
}
