//! A mixture's rows: the rows of several components (each a token store's rows,
//! planned as any view's) interleaved by weight, reproducibly.
//!
//! # The rule
//!
//! Shares are counted in document tokens (padding is not a component's). Rows
//! are taken one at a time; before each, with `T` tokens taken so far, `c` of
//! them from component `d` of weight `w`, and `L` the longest row:
//! - the components that are due are those with `c < w * (T + L)` (all of them
//!   when none is);
//! - of those, the one with the earliest deadline `(c + L * (1 - mu)) / w` gives
//!   the next row, `mu = 1 / (2k - 2)` for `k` components (ties: the first listed).
//!
//! This is Tijdeman's solution of the chairman assignment problem (Tijdeman,
//! "The chairman assignment problem", Discrete Mathematics 32, 1980), scaled from
//! one unit per step to rows of up to `L` tokens: at every prefix each component's
//! tokens stay within one row of `w * T`, `|c - w * T| < L` (a property test below
//! holds it to that, for rows of equal and of varying length). Megatron's
//! `BlendedDataset` picks the component with the largest `w * i - c` over
//! samples, which strays further (up to 1.75 rows measured on skewed weights).
//!
//! A component's rows are taken in a seeded order, a new one for every epoch (a
//! pass over all its rows), so a repeated component never repeats its order.

use std::ops::Range;

use super::rows::Plan;
use super::shuffle;

/// One component: its rows in the plan and how it may be used.
#[derive(Debug, Clone)]
pub struct Component {
    /// Weights need not sum to 1: each counts relative to their sum.
    pub weight: f64,
    /// Passes over its rows at most; `None`: as many as the total needs.
    pub max_epochs: Option<u64>,
    /// Its rows: a range of the plan's rows.
    pub rows: Range<usize>,
}

/// How many tokens the mixture holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Total {
    /// About this many (the last row that fits ends it).
    Tokens(u64),
    /// As many as one pass over every component allows: stop at the first
    /// component with no row left.
    NoRepetition,
}

/// What one component gave.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Used {
    /// Document tokens in one pass over its rows.
    pub tokens_available: u64,
    pub tokens_used: u64,
    pub rows: u64,
    /// Passes begun over its rows (a pass cut short counts).
    pub epochs: u64,
}

/// The mixture's rows, in order (indices into the plan's rows; a repeated
/// component's rows appear more than once), and what each component gave.
#[derive(Debug, Clone)]
pub struct Interleaved {
    pub order: Vec<usize>,
    pub used: Vec<Used>,
}

/// A component that cannot give its share within its epochs.
#[derive(Debug, Clone, PartialEq)]
pub struct Short {
    pub component: usize,
    pub tokens_available: u64,
    pub epochs: u64,
    /// Its weight's share of the total asked for.
    pub tokens_needed: u64,
}

/// Interleaves the components' rows of `plan` (see the module's rule).
pub fn interleave(plan: &Plan, components: &[Component], total: Total, seed: u64) -> Result<Interleaved, Short> {
    let sum: f64 = components.iter().map(|component| component.weight).sum();
    let weights: Vec<f64> = components.iter().map(|component| component.weight / sum).collect();
    let tokens = |row: usize| plan.pieces_of(&plan.rows[row]).iter().map(|piece| u64::from(piece.len)).sum::<u64>();
    let longest = plan.rows.iter().enumerate().map(|(row, _)| tokens(row)).max().unwrap_or(0).max(1) as f64;
    let mu = if components.len() > 1 { 1.0 / (2 * components.len() - 2) as f64 } else { 0.0 };
    let mut used: Vec<Used> = components
        .iter()
        .map(|component| Used { tokens_available: component.rows.clone().map(tokens).sum(), ..Used::default() })
        .collect();
    let mut passes: Vec<Pass> = components.iter().map(|_| Pass::default()).collect();
    let (mut order, mut taken) = (Vec::new(), 0u64);
    loop {
        if matches!(total, Total::Tokens(total) if taken >= total) {
            break;
        }
        let due = |d: usize| (used[d].tokens_used as f64) < weights[d] * (taken as f64 + longest);
        let any_due = (0..components.len()).any(due);
        let deadline = |d: usize| (used[d].tokens_used as f64 + longest * (1.0 - mu)) / weights[d];
        let next = (0..components.len())
            .filter(|&d| !any_due || due(d))
            .min_by(|&a, &b| deadline(a).total_cmp(&deadline(b)).then(a.cmp(&b)));
        let Some(d) = next else { break };
        let component = &components[d];
        let limit = match total {
            Total::Tokens(_) => component.max_epochs,
            Total::NoRepetition => Some(1),
        };
        let Some(row) = passes[d].next(component, d, seed, limit) else {
            match total {
                Total::NoRepetition => break,
                Total::Tokens(total) => {
                    let tokens_needed = (weights[d] * total as f64).ceil() as u64;
                    let Used { tokens_available, tokens_used, epochs, .. } = used[d];
                    // Run out within a row of its share: the mixture ends here, short of
                    // the total by less than a row. Further short, its weight cannot be met.
                    if tokens_used as f64 + longest >= tokens_needed as f64 {
                        break;
                    }
                    return Err(Short { component: d, tokens_available, epochs, tokens_needed });
                }
            }
        };
        let row_tokens = tokens(row);
        if matches!(total, Total::Tokens(total) if taken + row_tokens > total) {
            break;
        }
        order.push(row);
        taken += row_tokens;
        used[d].tokens_used += row_tokens;
        used[d].rows += 1;
        used[d].epochs = passes[d].epoch;
    }
    Ok(Interleaved { order, used })
}

/// Where a component's reading stands: its pass, and the pass's order.
#[derive(Default)]
struct Pass {
    /// Passes begun (1 for the first).
    epoch: u64,
    order: Vec<usize>,
    at: usize,
}

impl Pass {
    /// The component's next row, beginning a new pass when one ends (unless it
    /// would be pass `limit + 1`); none when it has no more to give.
    fn next(&mut self, component: &Component, index: usize, seed: u64, limit: Option<u64>) -> Option<usize> {
        let count = component.rows.len();
        if self.at == self.order.len() {
            if count == 0 || limit.is_some_and(|limit| self.epoch >= limit) {
                return None;
            }
            self.order = shuffle::permutation(count, pass_seed(seed, index, self.epoch));
            self.at = 0;
            self.epoch += 1;
        }
        let row = component.rows.start + self.order[self.at];
        self.at += 1;
        Some(row)
    }
}

/// The seed of a component's pass: the mixture's seed, the component and the pass
/// mixed, so that no two passes share an order.
fn pass_seed(seed: u64, component: usize, pass: u64) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"ferry-mixture-pass");
    for value in [seed, component as u64, pass] {
        hasher.update(&value.to_le_bytes());
    }
    let bytes = hasher.finalize();
    u64::from_le_bytes(bytes.as_bytes()[..8].try_into().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::rows::Piece;

    /// A plan of components whose rows are `lengths[d]` tokens long, in turn.
    fn plan_of(lengths: &[Vec<u32>]) -> (Plan, Vec<Range<usize>>) {
        let mut plan = Plan::default();
        let mut ranges = Vec::new();
        for (shard, rows) in lengths.iter().enumerate() {
            let start = plan.rows.len();
            for &len in rows {
                plan.push_row([Piece { shard: shard as u32, start: 0, len }], 0);
            }
            ranges.push(start..plan.rows.len());
        }
        (plan, ranges)
    }

    fn components(weights: &[f64], ranges: &[Range<usize>], max_epochs: Option<u64>) -> Vec<Component> {
        weights.iter().zip(ranges).map(|(&weight, rows)| Component { weight, max_epochs, rows: rows.clone() }).collect()
    }

    /// The largest `|c - w * T| / L` over every prefix of the order.
    fn worst_deviation(plan: &Plan, ranges: &[Range<usize>], weights: &[f64], order: &[usize]) -> f64 {
        let sum: f64 = weights.iter().sum();
        let longest = plan.rows.iter().map(|row| plan.row_tokens(row)).max().unwrap_or(1) as f64;
        let mut counts = vec![0u64; weights.len()];
        let (mut total, mut worst) = (0u64, 0f64);
        for &row in order {
            let component = ranges.iter().position(|range| range.contains(&row)).unwrap();
            let tokens = plan.row_tokens(&plan.rows[row]);
            counts[component] += tokens;
            total += tokens;
            for (count, weight) in counts.iter().zip(weights) {
                worst = worst.max((*count as f64 - weight / sum * total as f64).abs() / longest);
            }
        }
        worst
    }

    #[test]
    fn without_a_total_it_stops_where_a_component_runs_out() {
        let (plan, ranges) = plan_of(&[vec![4; 30], vec![4; 5]]);
        let mixed = interleave(&plan, &components(&[0.5, 0.5], &ranges, None), Total::NoRepetition, 1).unwrap();
        assert_eq!(mixed.used[1].rows, 5);
        assert!((5..=6).contains(&mixed.used[0].rows), "{:?}", mixed.used);
        assert!(mixed.used.iter().all(|used| used.epochs == 1));
    }

    #[test]
    fn a_total_repeats_components_each_pass_in_a_new_order() {
        let (plan, ranges) = plan_of(&[vec![1; 10], vec![1; 10]]);
        let mixed = interleave(&plan, &components(&[0.5, 0.5], &ranges, None), Total::Tokens(60), 7).unwrap();
        assert_eq!(mixed.order.len(), 60);
        assert_eq!(mixed.used[0].epochs, 3);
        let first: Vec<usize> = mixed.order.iter().copied().filter(|row| *row < 10).collect();
        let mut sorted = first[..10].to_vec();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>(), "a pass takes every row once");
        assert_ne!(first[..10], first[10..20], "a new pass, a new order");
    }

    #[test]
    fn a_component_short_within_its_epochs_is_named_with_its_numbers() {
        let (plan, ranges) = plan_of(&[vec![2; 100], vec![2; 10]]);
        let err = interleave(&plan, &components(&[0.5, 0.5], &ranges, Some(2)), Total::Tokens(100), 0).unwrap_err();
        assert_eq!(err, Short { component: 1, tokens_available: 20, epochs: 2, tokens_needed: 50 });
    }

    #[test]
    fn a_total_that_uses_every_row_exactly_is_no_shortage() {
        let (plan, ranges) = plan_of(&[vec![2; 10], vec![2; 10]]);
        let mixed = interleave(&plan, &components(&[0.5, 0.5], &ranges, Some(1)), Total::Tokens(40), 0).unwrap();
        assert_eq!(mixed.order.len(), 20);
        assert_eq!((mixed.used[0].tokens_used, mixed.used[1].tokens_used), (20, 20));
    }

    #[test]
    fn the_same_seed_gives_the_same_order_and_another_seed_another() {
        let (plan, ranges) = plan_of(&[vec![3; 40], vec![3; 40]]);
        let parts = components(&[0.3, 0.7], &ranges, None);
        let order = |seed| interleave(&plan, &parts, Total::NoRepetition, seed).unwrap().order;
        assert_eq!(order(5), order(5));
        assert_ne!(order(5), order(6));
    }

    proptest::proptest! {
        /// At every prefix, each component's tokens are within one row of its weight's share.
        #[test]
        fn every_prefix_stays_within_one_row_of_the_weights(
            weights in proptest::collection::vec(0.001f64..1.0, 1..6),
            longest in 1u32..64,
            equal in proptest::bool::ANY,
            lengths in proptest::collection::vec(1u32..64, 64),
            seed in 0u64..1000,
        ) {
            let rows: Vec<Vec<u32>> = weights
                .iter()
                .enumerate()
                .map(|(d, _)| (0..40).map(|i| if equal { longest } else { lengths[(i + d) % 64].min(longest) }).collect())
                .collect();
            let (plan, ranges) = plan_of(&rows);
            let parts = components(&weights, &ranges, None);
            let mixed = interleave(&plan, &parts, Total::Tokens(4000), seed).unwrap();
            let worst = worst_deviation(&plan, &ranges, &weights, &mixed.order);
            proptest::prop_assert!(worst < 1.0, "{worst}");
        }
    }
}
