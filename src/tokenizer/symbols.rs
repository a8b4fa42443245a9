//! What the two ways of merging long pieces share: the merge of a pair, and a
//! piece's symbols as a linked list.

/// What merging a pair gives: its rank in the merge list and the id of the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Merge {
    pub rank: u32,
    pub id: u32,
}

/// One token of a word being merged, in a linked list over the word's bytes; a
/// symbol merged into its left neighbour has `len == 0`.
#[derive(Clone, Copy)]
pub struct Symbol {
    pub id: u32,
    pub prev: u32,
    pub next: u32,
    pub len: u32,
}

pub const NONE: u32 = u32::MAX;

/// The ids of the symbols left once merging is done, in order.
pub fn surviving_ids(symbols: &[Symbol]) -> impl Iterator<Item = u32> + '_ {
    symbols.iter().filter(|symbol| symbol.len > 0).map(|symbol| symbol.id)
}

/// Merges the symbol at `at` with its right neighbour into the token `id`, then
/// calls `paired` with each symbol that has a new right neighbour: the merged one
/// (unless it is last now) and the one before it.
pub fn merge_with_next(symbols: &mut [Symbol], at: u32, id: u32, mut paired: impl FnMut(&[Symbol], u32)) {
    let symbol = symbols[at as usize];
    let right = symbols[symbol.next as usize];
    symbols[at as usize] = Symbol { id, len: symbol.len + right.len, next: right.next, ..symbol };
    symbols[symbol.next as usize].len = 0;
    if right.next != NONE {
        symbols[right.next as usize].prev = at;
        paired(symbols, at);
    }
    if symbol.prev != NONE {
        paired(symbols, symbol.prev);
    }
}
