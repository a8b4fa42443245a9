//! The seeded shuffle of a split's rows: Fisher-Yates driven by SplitMix64, with
//! Lemire's unbiased bounded integers. Both are written out here rather than taken
//! from a crate, because a view's bytes must stay a function of its fingerprint:
//! the same seed must give the same order in every ferry version, which a random
//! number crate does not promise across its own releases.

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014): a 64-bit state stepped by a constant, then mixed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform integer below `bound` (> 0): Lemire's multiply-shift with rejection.
    fn below(&mut self, bound: u64) -> u64 {
        let mut product = u128::from(self.next()) * u128::from(bound);
        if (product as u64) < bound {
            let threshold = bound.wrapping_neg() % bound;
            while (product as u64) < threshold {
                product = u128::from(self.next()) * u128::from(bound);
            }
        }
        (product >> 64) as u64
    }
}

/// A permutation of `0..count`, the same for the same seed everywhere.
pub fn permutation(count: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..count).collect();
    let mut random = SplitMix64(seed);
    for last in (1..count).rev() {
        let other = random.below(last as u64 + 1) as usize;
        order.swap(last, other);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_gives_its_published_sequence() {
        // The first outputs for seed 1234567 of the reference implementation.
        let mut random = SplitMix64(1234567);
        let first: Vec<u64> = (0..3).map(|_| random.next()).collect();
        assert_eq!(first, [6457827717110365317, 3203168211198807973, 9817491932198370423]);
    }

    #[test]
    fn a_permutation_holds_every_index_once_and_follows_its_seed() {
        let order = permutation(1000, 7);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_eq!(order, permutation(1000, 7));
        assert_ne!(order, permutation(1000, 8));
        assert_ne!(order, sorted, "a thousand rows left in order");
        assert_eq!(permutation(0, 7), Vec::<usize>::new());
        assert_eq!(permutation(1, 7), [0]);
    }

    #[test]
    fn every_place_is_equally_likely() {
        // Where index 0 lands over many seeds: about a tenth in each of 10 places.
        let mut landed = [0u32; 10];
        for seed in 0..20_000 {
            let order = permutation(10, seed);
            landed[order.iter().position(|&i| i == 0).unwrap()] += 1;
        }
        assert!(landed.iter().all(|&n| (1700..2300).contains(&n)), "{landed:?}");
    }
}
