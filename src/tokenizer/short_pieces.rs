//! A generation's table of short pieces by their inline key (see `bpe`): open
//! addressing with linear probing, each key beside its value in one slot, so that
//! a lookup that misses the CPU's caches waits for one line of memory. A hashbrown
//! table reads its control bytes first and the slot after them. With this table,
//! looking a piece up in a generation fell from 29% to 24% of the warm fast core's
//! time (Llama-3's pattern, 50 MB of code and docs, where 460,000 pieces a pass
//! come from a generation), and the fast core ran 11-24% faster (3 alternated
//! runs of `benches/encoders.rs --cores`, GPT-2 and Llama-3, cold and warm).

use std::num::NonZeroU128;

use allocator_api2::vec::Vec;

use crate::huge_pages::HugePages;

/// The fewest slots of a table that holds anything.
const MIN_SLOTS: usize = 1 << 10;

/// Values by nonzero key, at most three for every four slots: a lookup then
/// probes a few slots next to each other, most often in one or two cache lines.
pub struct ShortPieces<V> {
    /// A power of two of them, or none before the first insert; key 0 is empty.
    slots: Vec<Slot<V>, HugePages>,
    len: usize,
}

#[derive(Clone, Copy, Default)]
struct Slot<V> {
    key: u128,
    value: V,
}

impl<V: Copy + Default> Default for ShortPieces<V> {
    fn default() -> ShortPieces<V> {
        ShortPieces { slots: Vec::new_in(HugePages), len: 0 }
    }
}

impl<V: Copy + Default> ShortPieces<V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, key: NonZeroU128) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        let slot = &self.slots[self.probe(key)];
        (slot.key == key.get()).then_some(&slot.value)
    }

    /// Sets the value of `key`, replacing the one it had.
    pub fn insert(&mut self, key: NonZeroU128, value: V) {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let at = self.probe(key);
        let slot = &mut self.slots[at];
        self.len += usize::from(slot.key == 0);
        *slot = Slot { key: key.get(), value };
    }

    /// The slot that holds `key`, or else the empty one where it would go; the
    /// table has slots, and one of them is empty.
    #[inline]
    fn probe(&self, key: NonZeroU128) -> usize {
        let mask = self.slots.len() - 1;
        let mut at = home(key, self.slots.len());
        while self.slots[at].key != key.get() && self.slots[at].key != 0 {
            at = (at + 1) & mask;
        }
        at
    }

    /// Empties the table, keeping its memory.
    fn clear(&mut self) {
        self.slots.fill(Slot::default());
        self.len = 0;
    }

    /// Empties the table, with at least the slots of `other`: a table about to be
    /// filled as far as `other` was is made that large at once, rather than grown
    /// to it again through every size, each new one zeroed and filled anew.
    pub fn clear_to_slots_of(&mut self, other: &ShortPieces<V>) {
        if self.slots.len() >= other.slots.len() {
            return self.clear();
        }
        // Freed first: the two are never held at once.
        self.slots = Vec::new_in(HugePages);
        self.slots = empty_slots(other.slots.len());
        self.len = 0;
    }

    /// Twice the slots, every key placed again.
    fn grow(&mut self) {
        let count = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, empty_slots(count));
        self.len = 0;
        for slot in old.iter() {
            if let Some(key) = NonZeroU128::new(slot.key) {
                self.insert(key, slot.value);
            }
        }
    }
}

/// `count` empty slots, in huge pages once large.
fn empty_slots<V: Copy + Default>(count: usize) -> Vec<Slot<V>, HugePages> {
    let mut slots = Vec::with_capacity_in(count, HugePages);
    slots.resize(count, Slot::default());
    slots
}

/// The first slot to probe for `key` in a table of `slots` (a power of two): the
/// top bits of a multiplicative hash of both halves. The table of recent pieces
/// hashes their xor alone, so pieces that share a slot there spread out here.
fn home(key: NonZeroU128, slots: usize) -> usize {
    const K: u64 = 0xF135_7AEA_2E62_A9C5;
    let key = key.get();
    let mixed = ((key as u64).wrapping_mul(K).rotate_left(26) ^ (key >> 64) as u64).wrapping_mul(K);
    (mixed >> (64 - slots.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(n: u128) -> NonZeroU128 {
        NonZeroU128::new(n).unwrap()
    }

    #[test]
    fn an_empty_table_has_nothing_and_keeps_what_it_is_given_as_it_grows() {
        let mut table = ShortPieces::<u32>::default();
        assert_eq!(table.get(key(1)), None);
        // Past several doublings, with keys that differ only in their top bits.
        for n in 1..=10_000u32 {
            table.insert(key((n as u128) << 100 | 7), n);
        }
        assert_eq!(table.len(), 10_000);
        assert!(table.slots.len() * 3 >= table.len() * 4);
        assert!((1..=10_000u32).all(|n| table.get(key((n as u128) << 100 | 7)) == Some(&n)));
        assert_eq!(table.get(key(7)), None);
        table.insert(key(5u128 << 100 | 7), 0);
        assert_eq!((table.get(key(5u128 << 100 | 7)), table.len()), (Some(&0), 10_000));
        let slots = table.slots.len();
        table.clear();
        assert_eq!((table.len(), table.get(key(5u128 << 100 | 7)), table.slots.len()), (0, None, slots));
    }

    #[test]
    fn a_table_cleared_to_the_slots_of_another_holds_nothing_and_grows_no_more_to_hold_as_much() {
        let mut full = ShortPieces::<u32>::default();
        (1..=5_000u32).for_each(|n| full.insert(key(n.into()), n));
        let mut next = ShortPieces::<u32>::default();
        next.insert(key(9_999), 1);
        next.clear_to_slots_of(&full);
        assert_eq!((next.len(), next.get(key(9_999)), next.slots.len()), (0, None, full.slots.len()));
        (1..=5_000u32).for_each(|n| next.insert(key(n.into()), n + 1));
        assert_eq!(next.slots.len(), full.slots.len());
        assert!((1..=5_000u32).all(|n| next.get(key(n.into())) == Some(&(n + 1))));
        // A table as large already keeps its slots.
        full.clear_to_slots_of(&ShortPieces::default());
        assert_eq!((full.len(), full.get(key(1)), full.slots.len()), (0, None, next.slots.len()));
    }

    proptest! {
        #[test]
        fn the_table_answers_as_a_hash_map(
            steps in proptest::collection::vec((1u128..3000, any::<u16>(), any::<bool>()), 0..3000),
        ) {
            let (mut table, mut map) = (ShortPieces::<u16>::default(), HashMap::new());
            for (n, value, clear) in steps {
                // Keys spread over both halves of the integer, some sharing a half.
                let key = key((n * 0x1_0000_0001) << (n % 3 * 40));
                if clear && value % 97 == 0 {
                    table.clear();
                    map.clear();
                }
                table.insert(key, value);
                map.insert(key, value);
                prop_assert_eq!(table.len(), map.len());
            }
            for (key, value) in &map {
                prop_assert_eq!(table.get(*key), Some(value));
            }
        }
    }
}
