//! BPE merges with the `tokenizers` crate's semantics: pairs merge by their rank
//! in the `merges` list (not by token id), lowest rank first and leftmost on ties.
//! Short pieces merge on arrays on the stack, longer ones rank by rank (see
//! `by_rank`) or, for a merge list not in training order, through a priority
//! queue as `tokenizers` does. A per-thread cache maps pre-tokens to ids, since
//! natural text repeats the same words.

use std::cell::{RefCell, RefMut};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::num::NonZeroU128;

use rustc_hash::FxHashMap;
use thread_local::ThreadLocal;

use crate::huge_pages::{HugeMap, huge_map_with_capacity};

use super::by_rank::{self, RankBuckets};
use super::short_pieces::ShortPieces;
use super::symbols::{Merge, NONE, Symbol, merge_with_next, surviving_ids};

/// Pre-tokens longer than this are encoded without the cache: they are rare, and
/// keeping them would let a few huge pieces fill it. Up to here, a generation's
/// bound on stored bytes keeps memory flat; code repeats pieces of 64 to 255 bytes
/// (runs of indentation, rule lines), and merging each again took 3% of the fast
/// core's instructions on 20 MB of code and docs.
const CACHED_PIECE_MAX: usize = 255;
// A stored piece's length, and so its count of ids, is kept in a byte.
const _: () = assert!(CACHED_PIECE_MAX <= u8::MAX as usize);
/// Pre-tokens up to this long, giving up to `INLINE_IDS` ids, are cached by value:
/// the key is one integer and the ids sit in the table, so a hit compares no
/// bytes and follows no pointer. Most words of natural text are such pieces.
const INLINE_PIECE_MAX: usize = 15;
const INLINE_IDS: usize = 3;
/// Pieces up to this long are merged by `merge_short`, on arrays on the stack.
const SHORT_PIECE_MAX: usize = 32;
/// Entries per generation of a thread's cache: once the current generation is
/// full it becomes the previous one and the one before is emptied to be the
/// current one (its memory kept), so memory per thread is bounded while the
/// words in use stay cached. 2^18: 50 MB of code and docs hold about 200,000
/// distinct pieces under Llama-3's pattern (letters take a leading symbol, as in
/// `(foo` or `.bar`), more than a generation of 2^17 held. Those generations
/// aged out and merged again most of them on every pass over the same text
/// (121,000 merges a pass, none at 2^18; warm fast core 40 -> 57 M tokens/s), and
/// a build over 100 MB ran 2-10% faster for every byte-level family.
const GENERATION_ENTRIES: usize = 1 << 18;
/// Bytes of stored pieces' bytes and ids a generation holds at most, so that text
/// of long pieces, or of pieces giving many ids each, grows a thread's cache no
/// further than natural text does (its tables take at most about 16 MiB per
/// generation): within the 64 MiB per worker a build may use.
const GENERATION_STORED_BYTES: usize = 4 << 20;
/// Slots of the direct-mapped table in front of the generations (32 bytes each).
/// A generation's hash table spans megabytes, so nearly every probe of it misses
/// the CPU's caches; this table is small enough to stay in them and, as natural
/// text reuses a few thousand words most of the time, answers most lookups.
const RECENT_SLOTS: usize = 1 << 15;

/// A piece's symbols before any merge.
// Built once per tokenizer and never moved after: the tables stay inline, one
// indirection fewer for every piece.
#[allow(clippy::large_enum_variant)]
pub enum Alphabet {
    /// Byte-level BPE: one token per byte.
    Bytes([u32; 256]),
    /// SentencePiece-style BPE: one token per character of the vocabulary; any other
    /// character becomes its UTF-8 bytes as `<0xXX>` tokens (byte fallback).
    Chars {
        /// Each ASCII character's token, or its byte token where it has none.
        ascii: [u32; 128],
        others: FxHashMap<char, u32>,
        byte_tokens: [u32; 256],
    },
}

impl Alphabet {
    /// The token of a piece that is one byte (so one ASCII character for `Chars`).
    fn single_byte(&self, byte: u8) -> u32 {
        match self {
            Alphabet::Bytes(ids) => ids[byte as usize],
            Alphabet::Chars { ascii, byte_tokens, .. } => {
                ascii.get(byte as usize).copied().unwrap_or(byte_tokens[byte as usize])
            }
        }
    }

    /// Calls `push` with each of the piece's first symbols, in order: at most one
    /// per byte. A `Chars` piece is whole characters of a text.
    fn first_ids(&self, piece: &[u8], mut push: impl FnMut(u32)) {
        match self {
            Alphabet::Bytes(ids) => piece.iter().for_each(|&byte| push(ids[byte as usize])),
            Alphabet::Chars { ascii, others, byte_tokens } => {
                for c in String::from_utf8_lossy(piece).chars() {
                    match ascii.get(c as usize).or_else(|| others.get(&c)) {
                        Some(&id) => push(id),
                        None => c.encode_utf8(&mut [0; 4]).bytes().for_each(|byte| push(byte_tokens[byte as usize])),
                    }
                }
            }
        }
    }
}

pub struct BytePairMerger {
    alphabet: Alphabet,
    /// A hashbrown map, although a lookup reads its control bytes and then its
    /// slot: the control bytes are a quarter of a megabyte for GPT-4o, small
    /// enough for the CPU's caches. One 16-byte slot per pair at half load (one
    /// line a lookup, twice the memory) made the fast core 7-9% slower (GPT-4o,
    /// Llama-3, cold, medians of 5 alternated runs).
    merges: HugeMap<(u32, u32), Merge>,
    /// With `ignore_merges`, a pre-token that is itself in the vocabulary is that token.
    whole_tokens: Option<WholeTokens>,
    /// Ranks in the merge list.
    ranks: usize,
    /// Whether long pieces can merge rank by rank (see `by_rank`).
    rank_ordered: bool,
    caches: ThreadLocal<RefCell<PieceCache>>,
}

#[derive(Default)]
struct PieceCache {
    recent: RecentPieces,
    current: Generation,
    previous: Generation,
    merging: MergeState,
}

/// Reused merge state, so encoding a piece allocates nothing once warm.
#[derive(Default)]
struct MergeState {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Reverse<(u32, u32, u32)>>,
    buckets: RankBuckets,
}

#[derive(Default)]
struct Generation {
    inline: ShortPieces<InlineIds>,
    /// Other pieces by a hash of their bytes, kept in `bytes` and `ids`: a cache
    /// can drop a piece whose hash another piece shares, so a hit compares the
    /// bytes and there are no allocations per piece to make and free.
    stored: HugeMap<u64, Stored>,
    bytes: Vec<u8>,
    ids: Vec<u32>,
}

/// Where a stored piece's bytes and ids are.
#[derive(Clone, Copy)]
struct Stored {
    bytes: u32,
    ids: u32,
    bytes_len: u8,
    ids_len: u8,
}

/// Short pieces' ids by key, one slot per hash value: a newer piece replaces an
/// older one in its slot (it is still in the generations).
struct RecentPieces {
    /// Of a fixed length, so that a slot's index needs no bounds check.
    slots: Box<[RecentSlot; RECENT_SLOTS]>,
}

#[derive(Clone, Copy, Default)]
#[repr(align(32))]
struct RecentSlot {
    /// Zero in an empty slot: no key is zero, since a key holds its nonzero length.
    key: u128,
    ids: InlineIds,
}

impl Default for RecentPieces {
    fn default() -> RecentPieces {
        // Made on the heap: a megabyte would not fit every thread's stack.
        let slots = vec![RecentSlot::default(); RECENT_SLOTS].into_boxed_slice();
        RecentPieces { slots: slots.try_into().ok().expect("RECENT_SLOTS slots were made") }
    }
}

impl RecentPieces {
    fn slot(key: NonZeroU128) -> usize {
        let key = key.get();
        let mixed = ((key >> 64) as u64 ^ key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (mixed >> (64 - RECENT_SLOTS.trailing_zeros())) as usize
    }

    fn get(&self, key: NonZeroU128) -> Option<&InlineIds> {
        Self::find(&self.slots, key)
    }

    /// The ids of `key` in `slots`; a function of the table itself, so that a
    /// loop over many pieces keeps the table's address in a register (see
    /// `recent_hits`).
    fn find(slots: &[RecentSlot; RECENT_SLOTS], key: NonZeroU128) -> Option<&InlineIds> {
        let slot = &slots[Self::slot(key)];
        (slot.key == key.get()).then_some(&slot.ids)
    }

    fn insert(&mut self, key: NonZeroU128, ids: InlineIds) {
        self.slots[Self::slot(key)] = RecentSlot { key: key.get(), ids };
    }
}

/// The vocabulary by bytes, for `ignore_merges`: a short token by its inline key,
/// so that finding it compares no bytes behind a pointer (a cache miss for a piece
/// not seen before, as most looked up here are).
pub struct WholeTokens {
    short: HugeMap<NonZeroU128, u32>,
    long: HugeMap<Vec<u8>, u32>,
}

impl WholeTokens {
    pub fn with_capacity(tokens: usize) -> WholeTokens {
        WholeTokens { short: huge_map_with_capacity(tokens), long: HugeMap::default() }
    }

    /// Adds a token by its bytes; a token given again keeps the last id.
    pub fn insert(&mut self, bytes: &[u8], id: u32) {
        match inline_key(bytes) {
            Some(key) => self.short.insert(key, id),
            None => self.long.insert(bytes.to_vec(), id),
        };
    }

    /// The token of `piece`, whose `inline_key` is `inline`.
    fn get(&self, piece: &[u8], inline: Option<NonZeroU128>) -> Option<u32> {
        match inline {
            Some(key) => self.short.get(&key).copied(),
            None => self.long.get(piece).copied(),
        }
    }
}

/// A short piece's `InlineIds` in a generation when its ids are too many to be
/// inline: they are in `stored`. So a short piece costs one probe to miss.
const SPILLED: InlineIds = InlineIds { len: u32::MAX, ids: [0; INLINE_IDS] };

/// How the cache finds a piece: a short one by its bytes as one integer, any other
/// by a hash of its bytes (compared on a hit), hashed once for all its lookups.
#[derive(Clone, Copy)]
enum CacheKey {
    Inline(NonZeroU128),
    Hashed(u64),
}

impl CacheKey {
    /// The key of `piece`, whose `inline_key` is `inline`.
    fn new(piece: &[u8], inline: Option<NonZeroU128>) -> CacheKey {
        inline.map_or_else(|| CacheKey::Hashed(hash_of(piece)), CacheKey::Inline)
    }

    #[cfg(test)]
    fn of(piece: &[u8]) -> CacheKey {
        CacheKey::new(piece, inline_key(piece))
    }

    fn inline(self) -> Option<NonZeroU128> {
        match self {
            CacheKey::Inline(key) => Some(key),
            CacheKey::Hashed(_) => None,
        }
    }
}

/// In this order, so that a hit copies the whole of it as 16 bytes (see `recent_hits`).
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct InlineIds {
    ids: [u32; INLINE_IDS],
    len: u32,
}

impl InlineIds {
    fn new(ids: &[u32]) -> Option<InlineIds> {
        let mut inline = InlineIds { len: ids.len() as u32, ids: [0; INLINE_IDS] };
        inline.ids.get_mut(..ids.len())?.copy_from_slice(ids);
        Some(inline)
    }

    fn ids(&self) -> &[u32] {
        &self.ids[..self.len as usize]
    }

    /// Appends the ids to `out` by copying all `INLINE_IDS` slots and counting in
    /// as many as there are: a copy of as many as there are would branch on the
    /// count (or call `memcpy`), and mispredict it for one piece in three.
    fn push_to(&self, out: &mut Vec<u32>) {
        out.reserve(INLINE_IDS);
        let spare = &mut out.spare_capacity_mut()[..INLINE_IDS];
        for (slot, &id) in spare.iter_mut().zip(&self.ids) {
            slot.write(id);
        }
        let count = (self.len as usize).min(INLINE_IDS);
        // SAFETY: the first `INLINE_IDS` spare slots were just written.
        unsafe { out.set_len(out.len() + count) };
    }
}

/// A short piece as one integer: its bytes, and its length in the top byte. Read
/// with fixed-size loads, two overlapping ones for a length between two sizes,
/// rather than byte by byte or copied into a buffer: a loop of as many steps as
/// the piece has bytes mispredicts its end, and a copy costs a call to `memcpy`.
/// Never zero, so that an `Option` of it is 16 bytes passed in two registers: as an
/// `Option<u128>` (32 bytes) it went through the stack on every piece missing from
/// the table of recent ones, and encoding on one thread took 4% more time (GPT-2
/// and GPT-4o). The empty piece, which no table holds, has none.
fn inline_key(piece: &[u8]) -> Option<NonZeroU128> {
    let len = piece.len();
    if len > INLINE_PIECE_MAX {
        return None;
    }
    // The `N` bytes at `at`, and the last `N` bytes shifted up to follow the first `N`.
    let load = |at: usize| u64::from_le_bytes(piece[at..at + 8].try_into().unwrap_or_default());
    let load4 = |at: usize| u32::from_le_bytes(piece[at..at + 4].try_into().unwrap_or_default()) as u64;
    let load2 = |at: usize| u16::from_le_bytes(piece[at..at + 2].try_into().unwrap_or_default()) as u64;
    let bytes = match len {
        0 => 0,
        1 => piece[0] as u128,
        2..4 => (load2(0) | load2(len - 2) << ((len - 2) * 8)) as u128,
        4..8 => (load4(0) | load4(len - 4) << ((len - 4) * 8)) as u128,
        8 => load(0) as u128,
        // The last eight bytes, less those the first load has, shifted down.
        _ => load(0) as u128 | ((load(len - 8) >> ((16 - len) * 8)) as u128) << 64,
    };
    NonZeroU128::new(bytes | (len as u128) << 120)
}

/// `inline_key` of `text[start..end]`, read with one 16-byte load of the text
/// where the text goes on that far, and its bytes past `end` masked off.
fn inline_key_in(text: &[u8], start: usize, end: usize) -> Option<NonZeroU128> {
    let len = end - start;
    if len > INLINE_PIECE_MAX {
        return None;
    }
    match text.get(start..).and_then(<[u8]>::first_chunk::<16>) {
        Some(window) => NonZeroU128::new(key_of_window(*window, len)),
        None => inline_key(&text[start..end]),
    }
}

/// The `inline_key` of the first `len` bytes of a 16-byte load.
#[inline(always)]
fn key_of_window(window: [u8; 16], len: usize) -> u128 {
    u128::from_le_bytes(window) & KEY_MASKS[len] | (len as u128) << 120
}

/// `inline_key_in` where the text is known to go on 16 bytes from `start`.
///
/// # Safety
/// `start + 16 <= text.len()`.
#[inline(always)]
unsafe fn inline_key_within(text: &[u8], start: usize, end: usize) -> Option<NonZeroU128> {
    debug_assert!(start + 16 <= text.len());
    let len = end - start;
    if len > INLINE_PIECE_MAX {
        return None;
    }
    // SAFETY: the caller vouches for the 16 bytes from `start`.
    let window = unsafe { text.as_ptr().add(start).cast::<[u8; 16]>().read_unaligned() };
    NonZeroU128::new(key_of_window(window, len))
}

/// For each length of an inline piece, the mask of its bytes in a 16-byte load:
/// a table, since a shift by the length would need a branch on which half of
/// the two registers it falls in.
const KEY_MASKS: [u128; INLINE_PIECE_MAX + 1] = {
    let mut masks = [0; INLINE_PIECE_MAX + 1];
    let mut len = 1;
    while len <= INLINE_PIECE_MAX {
        masks[len] = (1 << (len * 8)) - 1;
        len += 1;
    }
    masks
};

impl Generation {
    fn get(&self, piece: &[u8], key: CacheKey) -> Option<&[u32]> {
        let hash = match key {
            CacheKey::Inline(key) => match self.inline.get(key)? {
                inline if inline.len != SPILLED.len => return Some(inline.ids()),
                _ => hash_of(piece),
            },
            CacheKey::Hashed(hash) => hash,
        };
        let stored = self.stored.get(&hash)?;
        let bytes = &self.bytes[stored.bytes as usize..][..stored.bytes_len as usize];
        (bytes == piece).then(|| &self.ids[stored.ids as usize..][..stored.ids_len as usize])
    }

    /// Caches the ids of a piece of at most `CACHED_PIECE_MAX` bytes.
    fn insert(&mut self, piece: &[u8], key: CacheKey, ids: &[u32]) {
        let hash = match key {
            CacheKey::Inline(key) => {
                let inline = InlineIds::new(ids);
                self.inline.insert(key, inline.unwrap_or(SPILLED));
                if inline.is_some() {
                    return;
                }
                hash_of(piece)
            }
            CacheKey::Hashed(hash) => hash,
        };
        // At most one id per byte, so both lengths fit (see `CACHED_PIECE_MAX`).
        let stored = Stored {
            bytes: self.bytes.len() as u32,
            ids: self.ids.len() as u32,
            bytes_len: piece.len() as u8,
            ids_len: ids.len() as u8,
        };
        self.bytes.extend_from_slice(piece);
        self.ids.extend_from_slice(ids);
        self.stored.insert(hash, stored);
    }

    fn is_full(&self) -> bool {
        // Pieces whose hash was taken again still hold their bytes: those count too.
        self.inline.len() + self.stored.len() >= GENERATION_ENTRIES
            || self.bytes.len() + self.ids.len() * size_of::<u32>() >= GENERATION_STORED_BYTES
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inline.len() + self.stored.len()
    }

    /// Empties the generation for the next one, with room for as much as `like`
    /// holds: natural text fills each generation about as far. Grown again size
    /// by size, the second generation's tables took 16 MiB more of fresh pages
    /// for the kernel to zero, and placed every entry again at each size; made
    /// at once, a 2-thread build of GPT-4o over 500 MB took 2-6% less CPU (medians
    /// of alternated runs) and 5-9 MB less peak memory. A build that ends before
    /// its second generation fills peaks higher, as that one is whole at once:
    /// GPT-2 over 200 MB on 2 threads, 142 -> 155 MiB (medians of 6 runs).
    fn clear_to_hold(&mut self, like: &Generation) {
        self.inline.clear_to_slots_of(&like.inline);
        self.stored.clear();
        self.stored.reserve(like.stored.len());
        self.bytes.clear();
        self.bytes.reserve(like.bytes.len());
        self.ids.clear();
        self.ids.reserve(like.ids.len());
    }
}

fn hash_of(piece: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut hasher = rustc_hash::FxHasher::default();
    hasher.write(piece);
    hasher.finish()
}

impl PieceCache {
    /// Appends the cached ids of `piece` to `out`, if a generation has them (the
    /// table of recent pieces was asked before, see `Pieces::encode_in`).
    fn extend_with(&mut self, piece: &[u8], key: CacheKey, out: &mut Vec<u32>) -> bool {
        if let Some(ids) = self.current.get(piece, key) {
            if let Some((key, ids)) = key.inline().zip(InlineIds::new(ids)) {
                self.recent.insert(key, ids);
            }
            out.extend_from_slice(ids);
            return true;
        }
        let Some(ids) = self.previous.get(piece, key) else { return false };
        let start = out.len();
        out.extend_from_slice(ids);
        // Still in use: it moves to the current generation.
        self.insert(piece, key, start, out);
        true
    }

    /// Caches the ids `out[start..]` of `piece`.
    fn insert(&mut self, piece: &[u8], key: CacheKey, start: usize, out: &[u32]) {
        if self.current.is_full() {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear_to_hold(&self.previous);
        }
        let ids = &out[start..];
        if let Some((key, ids)) = key.inline().zip(InlineIds::new(ids)) {
            self.recent.insert(key, ids);
        }
        self.current.insert(piece, key, ids);
    }
}

/// Encodes the pieces of a text with the thread's cache, borrowed once for them all.
pub struct Pieces<'a> {
    merger: &'a BytePairMerger,
    cache: RefMut<'a, PieceCache>,
}

impl Pieces<'_> {
    /// Appends the ids of the pre-token `text[start..end]` to `out`. Inlined into
    /// the pre-tokenizer's loop for a short piece seen lately, with no branch on
    /// its length: its key is one load of the text, and its ids are copied whole.
    #[inline(always)]
    pub fn encode_in(&mut self, text: &[u8], start: usize, end: usize, out: &mut Vec<u32>) {
        let inline = inline_key_in(text, start, end);
        match inline.and_then(|key| self.cache.recent.get(key)) {
            Some(ids) => ids.push_to(out),
            None => self.encode_uncommon(&text[start..end], inline, out),
        }
    }

    /// `encode_in` for a run of pieces that each end where the next starts: from
    /// `start` to `base` plus the place of each bit of `ends`, from the lowest.
    /// Returns the end of the last. The run's hits are one loop over the table
    /// itself, with nothing to reload from memory between pieces. Prefetching the
    /// generations' slots of the next four pieces that miss the table, while the
    /// one before them was looked up, gained nothing (Llama-3 1% faster, GPT-4o
    /// 6% slower, fast core cold, medians of 5 alternated runs).
    #[inline(always)]
    pub fn encode_run(
        &mut self,
        text: &[u8],
        mut start: usize,
        base: usize,
        mut ends: u64,
        out: &mut Vec<u32>,
    ) -> usize {
        while let Some(end) = recent_hits(&self.cache.recent.slots, text, &mut start, base, &mut ends, out) {
            self.encode_uncommon(&text[start..end], inline_key_in(text, start, end), out);
            start = end;
        }
        start
    }

    /// A piece not among the recent ones, whose `inline_key` is `inline`: out of
    /// line, so that the common case stays small where it is inlined.
    #[inline(never)]
    fn encode_uncommon(&mut self, piece: &[u8], inline: Option<NonZeroU128>, out: &mut Vec<u32>) {
        let merger = self.merger;
        let cache = &mut *self.cache;
        match piece {
            [] => return,
            [byte] => {
                // Into the table of recent pieces only: the next time it is one lookup
                // there, like any other piece, rather than a branch on its length.
                let id = merger.alphabet.single_byte(*byte);
                out.push(id);
                if let Some((key, ids)) = inline.zip(InlineIds::new(&[id])) {
                    cache.recent.insert(key, ids);
                }
                return;
            }
            _ => {}
        }
        let key = (piece.len() <= CACHED_PIECE_MAX).then(|| CacheKey::new(piece, inline));
        if let Some(key) = key
            && cache.extend_with(piece, key, out)
        {
            return;
        }
        let start = out.len();
        match merger.whole_tokens.as_ref().and_then(|tokens| tokens.get(piece, inline)) {
            Some(id) => out.push(id),
            None if piece.len() <= SHORT_PIECE_MAX => merger.merge_short(piece, out),
            None => merger.merge(piece, &mut cache.merging, out),
        }
        if let Some(key) = key {
            cache.insert(piece, key, start, out);
        }
    }
}

/// Appends the ids of the run's pieces (see `Pieces::encode_run`) while the table
/// of recent pieces has them, moving `start` and `ends` past each; stops at the
/// first it has not, giving its end (its bit is taken out of `ends`). The table
/// comes as its own argument and `out`'s room as a local slice, so that nothing
/// is reloaded from memory between pieces, and a hit's key never leaves registers.
#[inline(always)]
fn recent_hits(
    slots: &[RecentSlot; RECENT_SLOTS],
    text: &[u8],
    start: &mut usize,
    base: usize,
    ends: &mut u64,
    out: &mut Vec<u32>,
) -> Option<usize> {
    // Room for every piece's ids as a hit writes them, `INLINE_IDS` and the
    // length after them, so that each is written with no call and no check.
    let room = ends.count_ones() as usize * INLINE_IDS + 1;
    out.reserve(room);
    let filled = out.len();
    let spare = &mut out.spare_capacity_mut()[..room];
    let mut written = 0;
    let mut missed = None;
    // Every piece of the run ends in the 64 bytes from `base`: where the text goes
    // on 16 bytes past them, every key is one load with no bounds to check.
    let windows_within = text.len() >= base + 64 + 16;
    while *ends != 0 {
        let end = base + ends.trailing_zeros() as usize;
        *ends &= *ends - 1;
        let key = if windows_within {
            // SAFETY: `*start <= end < base + 64`, so the 16 bytes from `*start` are in `text`.
            unsafe { inline_key_within(text, *start, end) }
        } else {
            inline_key_in(text, *start, end)
        };
        let Some(ids) = key.and_then(|key| RecentPieces::find(slots, key)) else {
            missed = Some(end);
            break;
        };
        // All the slots are copied and as many ids as there are counted in (see
        // `InlineIds::push_to`).
        debug_assert!(written + INLINE_IDS < room);
        // SAFETY: `room` has `INLINE_IDS` slots for each bit `ends` had, and one
        // more; each hit takes one bit and adds at most `INLINE_IDS` to `written`,
        // so `INLINE_IDS + 1` slots from `written` are within it.
        unsafe { spare.as_mut_ptr().add(written).cast::<InlineIds>().write_unaligned(*ids) };
        written += (ids.len as usize).min(INLINE_IDS);
        *start = end;
    }
    // SAFETY: the `written` spare slots after the first `filled` were just written.
    unsafe { out.set_len(filled + written) };
    missed
}

impl BytePairMerger {
    pub fn new(
        alphabet: Alphabet,
        merges: HugeMap<(u32, u32), Merge>,
        whole_tokens: Option<WholeTokens>,
    ) -> BytePairMerger {
        let ranks = merges.values().map(|merge| merge.rank as usize + 1).max().unwrap_or(0);
        let rank_ordered = by_rank::rank_ordered(&merges);
        BytePairMerger { alphabet, merges, whole_tokens, ranks, rank_ordered, caches: ThreadLocal::new() }
    }

    /// The encoder of one text's pieces, holding this thread's cache while it lives.
    pub fn pieces(&self) -> Pieces<'_> {
        Pieces { merger: self, cache: self.caches.get_or_default().borrow_mut() }
    }

    /// The same merges as `merge` for a short piece, by scanning its adjacent pairs
    /// for the lowest rank (leftmost on ties) instead of keeping a queue: the result
    /// is the same, since a queued pair that changed is skipped there, and a pair's
    /// rank identifies it. The symbols stay where they started, linked to their
    /// neighbours, and a pair that cannot merge ranks last, so each scan is one
    /// branch-free pass over fixed arrays on the stack and a merge moves nothing.
    fn merge_short(&self, piece: &[u8], out: &mut Vec<u32>) {
        const NO_MERGE: u32 = u32::MAX;
        let mut ids = [0u32; SHORT_PIECE_MAX];
        let mut len = 0;
        self.alphabet.first_ids(piece, |id| {
            ids[len] = id;
            len += 1;
        });
        if len < 2 {
            out.extend_from_slice(&ids[..len]);
            return;
        }
        // `ranks[at]`/`merged[at]`: the merge of the symbol at `at` with the next one
        // still standing (`next[at]`), or `NO_MERGE`; merged-away symbols rank last.
        let mut ranks = [NO_MERGE; SHORT_PIECE_MAX];
        let mut merged = [0u32; SHORT_PIECE_MAX];
        let mut next: [u8; SHORT_PIECE_MAX] = std::array::from_fn(|at| at as u8 + 1);
        let mut previous: [u8; SHORT_PIECE_MAX] = std::array::from_fn(|at| (at as u8).saturating_sub(1));
        let pair = |left: u32, right: u32| self.merges.get(&(left, right)).map_or((NO_MERGE, 0), |m| (m.rank, m.id));
        for at in 0..len - 1 {
            (ranks[at], merged[at]) = pair(ids[at], ids[at + 1]);
        }
        loop {
            let lowest = ranks[..len - 1].iter().enumerate().map(|(at, &rank)| (rank as u64) << 32 | at as u64).min();
            let Some(lowest) = lowest.filter(|lowest| lowest >> 32 != NO_MERGE as u64) else { break };
            let at = lowest as u32 as usize;
            let gone = next[at] as usize;
            ids[at] = merged[at];
            ranks[gone] = NO_MERGE;
            next[at] = next[gone];
            let after = next[at] as usize;
            if after < len {
                (ranks[at], merged[at]) = pair(ids[at], ids[after]);
                previous[after] = at as u8;
            } else {
                ranks[at] = NO_MERGE;
            }
            // The first symbol is never merged away, so any other has a previous one.
            if at > 0 {
                let before = previous[at] as usize;
                (ranks[before], merged[before]) = pair(ids[before], ids[at]);
            }
        }
        let mut at = 0;
        while at < len {
            out.push(ids[at]);
            at = next[at] as usize;
        }
    }

    /// `tokenizers`' `Word::merge_all` without dropout: rank by rank where the merge
    /// list allows it, else through a priority queue as `tokenizers` does.
    fn merge(&self, piece: &[u8], state: &mut MergeState, out: &mut Vec<u32>) {
        let symbols = &mut state.symbols;
        self.first_symbols(piece, symbols);
        if self.rank_ordered {
            state.buckets.merge(&self.merges, self.ranks, symbols);
        } else {
            self.merge_queued(symbols, &mut state.queue);
        }
        out.extend(surviving_ids(symbols));
    }

    /// The piece's symbols before any merge, as a linked list.
    fn first_symbols(&self, piece: &[u8], symbols: &mut Vec<Symbol>) {
        symbols.clear();
        self.alphabet.first_ids(piece, |id| {
            let at = symbols.len() as u32;
            // The first symbol has no previous one: 0 - 1 wraps to `NONE`.
            symbols.push(Symbol { id, prev: at.wrapping_sub(1), next: at + 1, len: 1 });
        });
        if let Some(last) = symbols.last_mut() {
            last.next = NONE;
        }
    }

    fn merge_queued(&self, symbols: &mut [Symbol], queue: &mut BinaryHeap<Reverse<(u32, u32, u32)>>) {
        queue.clear();
        for at in 0..symbols.len().saturating_sub(1) as u32 {
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
            merge_with_next(symbols, at, new_id, |symbols, at| self.push_pair(symbols, queue, at));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// GPT-2's merges, built once for every case.
    static GPT2: std::sync::LazyLock<BytePairMerger> = std::sync::LazyLock::new(|| {
        let serialized: serde_json::Value = serde_json::from_str(super::super::builtin_gpt2_json().unwrap()).unwrap();
        let model = serde::Deserialize::deserialize(&serialized["model"]).unwrap();
        super::super::recognize::merger(&model).unwrap()
    });

    /// A piece merged by `merge_short` (when short enough), the queue and by rank.
    fn merged_every_way(merger: &BytePairMerger, piece: &[u8]) -> Vec<Vec<u32>> {
        let mut symbols = Vec::new();
        let mut ways = Vec::new();
        if piece.len() <= SHORT_PIECE_MAX {
            let mut short = Vec::new();
            merger.merge_short(piece, &mut short);
            ways.push(short);
        }
        merger.first_symbols(piece, &mut symbols);
        merger.merge_queued(&mut symbols, &mut BinaryHeap::new());
        ways.push(surviving_ids(&symbols).collect());
        merger.first_symbols(piece, &mut symbols);
        RankBuckets::default().merge(&merger.merges, merger.ranks, &mut symbols);
        ways.push(surviving_ids(&symbols).collect());
        ways
    }

    #[test]
    fn every_way_of_merging_gives_the_same_ids_on_words_and_runs() {
        let merger = &*GPT2;
        assert!(merger.rank_ordered, "GPT-2's merges are in training order");
        let long_word: Vec<u8> = (0..5000u32).map(|n| b"etaoinshrdlu"[(n * n % 12) as usize]).collect();
        let pieces: [&[u8]; 10] = [
            b" the",
            b"aaaaaaaaaaaaaaaa",
            b" internationalization",
            b"        ",
            b"\n\n",
            b"ab",
            b"\xe2\x80\x99s",
            b"0123456789abcdef0123456789abcdef",
            &[b'a'; 3000],
            &long_word,
        ];
        for piece in pieces {
            let ways = merged_every_way(merger, piece);
            assert!(ways.windows(2).all(|pair| pair[0] == pair[1]), "{:?}: {ways:?}", String::from_utf8_lossy(piece));
        }
    }

    proptest! {
        #[test]
        fn every_way_of_merging_gives_the_same_ids(piece in proptest::collection::vec(
            prop_oneof![b'a'..=b'z', Just(b' '), Just(b'e'), Just(b't'), b'0'..=b'9', any::<u8>()], 2..=4 * SHORT_PIECE_MAX)) {
            let ways = merged_every_way(&GPT2, &piece);
            prop_assert!(ways.windows(2).all(|pair| pair[0] == pair[1]), "{:?}", ways);
        }
    }

    #[test]
    fn a_run_of_pieces_gives_the_ids_of_each_piece_alone() {
        // Words new to the cache, then seen (misses and hits of the recent table),
        // pieces longer than a key, and runs across 64-byte blocks.
        let text = " the zqxv the dog the zqxvlogue the cat aaaaaaaaaaaaaaaaaaaaaaaaaaaaa the dog the end".repeat(3);
        let text = text.as_bytes();
        let starts: Vec<usize> = (1..text.len()).filter(|&at| text[at] == b' ').collect();
        let in_runs = || {
            let (mut pieces, mut out, mut start) = (GPT2.pieces(), Vec::new(), 0);
            for base in (1..text.len()).step_by(64) {
                let in_block = starts.iter().filter(|&&at| (base..base + 64).contains(&at));
                start = pieces.encode_run(
                    text,
                    start,
                    base,
                    in_block.fold(0, |bits, at| bits | 1 << (at - base)),
                    &mut out,
                );
            }
            pieces.encode_in(text, start, text.len(), &mut out);
            out
        };
        let first = in_runs();
        let mut alone = Vec::new();
        let mut start = 0;
        for &end in starts.iter().chain([&text.len()]) {
            GPT2.pieces().encode_in(text, start, end, &mut alone);
            start = end;
        }
        assert_eq!(first, alone);
        assert_eq!(in_runs(), alone);
    }

    fn piece(n: usize) -> Vec<u8> {
        format!("w{n}").into_bytes()
    }

    #[test]
    fn inline_keys_are_the_bytes_then_the_length() {
        let text = b"abcdefghijklmnopq";
        assert_eq!(inline_key(b""), None);
        for len in 1..=INLINE_PIECE_MAX {
            let mut bytes = [0u8; 16];
            bytes[..len].copy_from_slice(&text[..len]);
            bytes[15] = len as u8;
            assert_eq!(inline_key(&text[..len]).map(NonZeroU128::get), Some(u128::from_le_bytes(bytes)), "{len} bytes");
        }
        assert_eq!(inline_key(&text[..INLINE_PIECE_MAX + 1]), None);
    }

    #[test]
    fn a_key_read_from_the_text_is_the_key_of_the_piece() {
        let text = b"a text of thirty-two bytes or so";
        for start in 0..text.len() {
            for end in start..=text.len() {
                let piece = &text[start..end];
                assert_eq!(inline_key_in(text, start, end), inline_key(piece), "{start}..{end}");
            }
        }
    }

    #[test]
    fn whole_tokens_are_found_by_their_bytes_short_or_long() {
        let long = b"a token longer than fifteen bytes".to_vec();
        let mut tokens = WholeTokens::with_capacity(2);
        tokens.insert(b"ab", 1);
        tokens.insert(&long, 2);
        let get = |piece: &[u8]| tokens.get(piece, inline_key(piece));
        assert_eq!(get(b"ab"), Some(1));
        assert_eq!(get(&long), Some(2));
        assert_eq!(get(b"ab\0"), None);
        assert_eq!(get(&long[1..]), None);
    }

    #[test]
    fn cached_ids_come_back_exactly_short_or_long() {
        let mut cache = PieceCache::default();
        let long = b"a piece longer than fifteen bytes";
        for (piece, ids) in [(&b"ab"[..], &[7u32][..]), (b"abcdef", &[1, 2, 3, 4]), (long, &[5, 6])] {
            cache.insert(piece, CacheKey::of(piece), 0, ids);
        }
        for (piece, ids) in [(&b"ab"[..], &[7u32][..]), (b"abcdef", &[1, 2, 3, 4]), (long, &[5, 6])] {
            let mut out = vec![9];
            assert!(cache.extend_with(piece, CacheKey::of(piece), &mut out));
            assert_eq!(out[1..], *ids, "{piece:?}");
        }
        // Same bytes, other length: never the same key.
        assert!(!cache.extend_with(b"ab\0", CacheKey::of(b"ab\0"), &mut Vec::new()));
    }

    #[test]
    fn a_stored_piece_is_not_the_answer_for_another_piece_with_its_hash() {
        let mut generation = Generation::default();
        let (piece, other) = (b"a piece longer than fifteen bytes", b"another piece of over fifteen bytes");
        generation.insert(piece, CacheKey::of(piece), &[1, 2]);
        assert_eq!(generation.get(piece, CacheKey::of(piece)), Some(&[1, 2][..]));
        assert_eq!(generation.get(other, CacheKey::of(other)), None);
        // As if `other` hashed to where `piece` is stored.
        let stored = generation.stored[&hash_of(piece)];
        generation.stored.insert(hash_of(other), stored);
        assert_eq!(generation.get(other, CacheKey::of(other)), None, "bytes are compared");
        generation.insert(other, CacheKey::of(other), &[3]);
        assert_eq!(generation.get(other, CacheKey::of(other)), Some(&[3][..]));
        assert_eq!(generation.get(piece, CacheKey::of(piece)), Some(&[1, 2][..]));
    }

    #[test]
    fn pieces_sharing_a_recent_slot_each_come_back_with_their_own_ids() {
        let mut cache = PieceCache::default();
        // More pieces than slots: many share one, and the generations answer for the older.
        let count = GENERATION_ENTRIES;
        assert!(count >= 2 * RECENT_SLOTS);
        for n in 0..count {
            let piece = piece(n);
            cache.insert(&piece, CacheKey::of(&piece), 0, &[n as u32, 7]);
        }
        for n in (0..count).rev() {
            let piece = piece(n);
            let mut out = Vec::new();
            assert!(cache.extend_with(&piece, CacheKey::of(&piece), &mut out), "{n}");
            assert_eq!(out, [n as u32, 7], "{n}");
        }
    }

    #[test]
    fn long_pieces_of_many_ids_fill_a_generation_by_its_bytes() {
        let mut cache = PieceCache::default();
        let ids: Vec<u32> = (0..CACHED_PIECE_MAX as u32).collect();
        let stored = |generation: &Generation| generation.bytes.len() + generation.ids.len() * size_of::<u32>();
        for n in 0..GENERATION_STORED_BYTES / 100 {
            let piece: Vec<u8> = format!("{n:0>width$}", width = CACHED_PIECE_MAX).into_bytes();
            cache.insert(&piece, CacheKey::of(&piece), 0, &ids);
            for generation in [&cache.current, &cache.previous] {
                assert!(stored(generation) < GENERATION_STORED_BYTES + 5 * CACHED_PIECE_MAX, "{n}");
            }
        }
        assert!(cache.previous.len() > 0, "the generations never turned over");
    }

    #[test]
    fn the_cache_stays_bounded_and_keeps_pieces_in_use() {
        let mut cache = PieceCache::default();
        let in_use = piece(0);
        for n in 0..3 * GENERATION_ENTRIES {
            let mut out = Vec::new();
            if !cache.extend_with(&in_use, CacheKey::of(&in_use), &mut out) {
                cache.insert(&in_use, CacheKey::of(&in_use), 0, &[0]);
            }
            let other = piece(n + 1);
            cache.insert(&other, CacheKey::of(&other), 0, &[n as u32]);
            assert!(cache.current.len() + cache.previous.len() <= 2 * GENERATION_ENTRIES);
        }
        let mut out = Vec::new();
        assert!(cache.extend_with(&in_use, CacheKey::of(&in_use), &mut out), "a piece in use was dropped");
        let first = piece(1);
        assert!(
            !cache.extend_with(&first, CacheKey::of(&first), &mut out),
            "a piece unused for two generations stayed"
        );
    }
}
