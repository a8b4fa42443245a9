//! The split patterns of GPT-2 and cl100k (Llama-3, Qwen2) on ASCII text, by
//! table: whether a match starts at a byte depends only on the kinds of the two
//! bytes before it, itself and the next, once contractions and cl100k's groups of
//! digits are set aside. So the starts of a block of 64 bytes are found with one
//! table lookup per byte and no branch that depends on the text, and the matches
//! are read off the bits. Pieces are a few bytes long and vary, and a scanner that
//! tests byte after byte mispredicts the end of nearly every piece.
//!
//! GPT-2 (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`),
//! for a byte after one of kind `p`:
//! - a letter, number or other character continues a run of its own kind, or the
//!   space before it takes it (` ?`); after anything else a match starts;
//! - whitespace after a non-space starts a match (runs hold one kind);
//! - whitespace after whitespace starts a match only as the last of its run with
//!   a non-space after it (`\s+(?!\S)` leaves that one to the next match).
//!
//! cl100k (`(?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//! \s*[\r\n]+|\s+(?!\S)|\s+`) differs in three ways. A letter run takes the one
//! space or other character before it, if that one starts a match: an other
//! character does unless a run of others or a space took it, hence the second
//! byte back. Numbers take no space. Line breaks and other whitespace than the
//! space join what is around them (`[\r\n]*`, `\s*[\r\n]+`), so the table stops at
//! them, as at non-ASCII bytes, and the scanner's general path goes on.
//!
//! A contraction's apostrophe starts a match where a run of other characters
//! would, and the match ends after its letters; a run of digits starts a match
//! every `digits` digits for cl100k. Both are applied as the matches are given.

/// What the scanner's tables say an ASCII character is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsciiClass {
    Letter,
    Number,
    Whitespace,
    Other,
}

/// A byte's kind in a window.
const LETTER: u8 = 0;
const NUMBER: u8 = 1;
const OTHER: u8 = 2;
const SPACE: u8 = 3;
/// Whitespace other than the space: its own kind for GPT-2; cl100k stops at it.
const BREAK: u8 = 4;
const END: u8 = 5;
/// Where the table cannot decide: the general path goes on.
const STOP: u8 = 6;
/// Before the first byte looked at, which starts a match.
const START: u8 = 7;

/// Bits per kind in a window index, four kinds: two bytes before, the byte looked
/// at, the next.
const KIND_BITS: usize = 3;
const KIND_MASK: usize = (1 << KIND_BITS) - 1;
const WINDOWS: usize = 1 << (4 * KIND_BITS);

#[derive(Clone, Copy)]
enum Family {
    Gpt2,
    Cl100k { digits: usize },
}

pub struct AsciiWindows {
    family: Family,
    kinds: [u8; 256],
    /// Whether a match starts at the third byte of each window of four kinds.
    starts: Box<[bool; WINDOWS]>,
}

/// Where `AsciiWindows::matches_from` stopped.
pub enum Stop {
    /// The text's end: every match was given.
    End,
    /// The matches before `resume` were given; the table cannot decide at
    /// `stop`, so the general path goes on from `resume` until past it.
    At { resume: usize, stop: usize },
}

impl AsciiWindows {
    /// The table for GPT-2's pattern, with ASCII's classes as the scanner's tables
    /// give them.
    pub fn gpt2(ascii: &[AsciiClass; 128]) -> AsciiWindows {
        AsciiWindows::new(Family::Gpt2, ascii)
    }

    /// The table for cl100k's pattern with numbers in groups of up to `digits`.
    pub fn cl100k(ascii: &[AsciiClass; 128], digits: usize) -> AsciiWindows {
        AsciiWindows::new(Family::Cl100k { digits }, ascii)
    }

    fn new(family: Family, ascii: &[AsciiClass; 128]) -> AsciiWindows {
        let mut kinds = [STOP; 256];
        for (byte, class) in ascii.iter().enumerate() {
            kinds[byte] = match (class, family) {
                (AsciiClass::Letter, _) => LETTER,
                (AsciiClass::Number, _) => NUMBER,
                (AsciiClass::Other, _) => OTHER,
                (AsciiClass::Whitespace, _) if byte == usize::from(b' ') => SPACE,
                (AsciiClass::Whitespace, Family::Gpt2) => BREAK,
                (AsciiClass::Whitespace, Family::Cl100k { .. }) => STOP,
            };
        }
        let mut starts = Box::new([false; WINDOWS]);
        for (window, start) in starts.iter_mut().enumerate() {
            let kind = |back: usize| (window >> (back * KIND_BITS) & KIND_MASK) as u8;
            let (before, previous, current, next) = (kind(3), kind(2), kind(1), kind(0));
            *start = match family {
                Family::Gpt2 => gpt2_starts(previous, current, next),
                Family::Cl100k { .. } => cl100k_starts(before, previous, current, next),
            };
        }
        AsciiWindows { family, kinds, starts }
    }

    /// Calls `on_match` with each match from `at`, a match's start, while the
    /// table can decide. `contraction_end` says where a contraction after an
    /// apostrophe ends, given the byte after the apostrophe.
    pub fn matches_from(
        &self,
        text: &str,
        at: usize,
        contraction_end: impl Fn(usize) -> Option<usize>,
        on_match: &mut impl FnMut(usize, usize),
    ) -> Stop {
        let bytes = text.as_bytes();
        let kind = |at: usize| bytes.get(at).map_or(END, |&byte| self.kinds[byte as usize]);
        for stop in [at, at + 1] {
            if kind(stop) == STOP {
                return Stop::At { resume: at, stop };
            }
        }
        let digits = match self.family {
            Family::Cl100k { digits } => digits,
            Family::Gpt2 => usize::MAX,
        };
        let mut start = at;
        // Gives the matches from `start` up to `next`, the next start the table
        // found: normally one match; a contraction ends where it ends, and a run of
        // digits is cut into groups.
        let mut match_up_to = |start: &mut usize, next: usize| {
            while *start < next {
                let end = match bytes[*start] {
                    b'\'' => contraction_end(*start + 1).unwrap_or(next),
                    b'0'..=b'9' => next.min(start.saturating_add(digits)),
                    _ => next,
                };
                on_match(*start, end);
                *start = end;
            }
        };
        let mut window = usize::from(START) << (2 * KIND_BITS) | usize::from(kind(at)) << KIND_BITS;
        window |= usize::from(kind(at + 1));
        let mut block = at + 1;
        while block < bytes.len() {
            let block_end = (block + 64).min(bytes.len());
            let mut found = 0u64;
            let mut stop = None;
            for middle in block..block_end {
                let next = kind(middle + 1);
                if next == STOP {
                    stop = Some(middle + 1);
                    break;
                }
                window = (window << KIND_BITS | usize::from(next)) & (WINDOWS - 1);
                found |= u64::from(self.starts[window]) << (middle - block);
            }
            while found != 0 {
                let next = block + found.trailing_zeros() as usize;
                found &= found - 1;
                match_up_to(&mut start, next);
            }
            if let Some(stop) = stop {
                return Stop::At { resume: start, stop };
            }
            block = block_end;
        }
        match_up_to(&mut start, bytes.len());
        Stop::End
    }
}

/// Letters, numbers and other characters make runs.
fn in_run(kind: u8) -> bool {
    kind <= OTHER
}

fn gpt2_starts(previous: u8, current: u8, next: u8) -> bool {
    let whitespace = |kind: u8| kind == SPACE || kind == BREAK;
    if in_run(current) {
        (in_run(previous) && previous != current) || previous == BREAK
    } else if whitespace(current) {
        in_run(previous) || (whitespace(previous) && in_run(next))
    } else {
        false
    }
}

fn cl100k_starts(before: u8, previous: u8, current: u8, next: u8) -> bool {
    match current {
        // After a space, or an other character that starts its match, a letter
        // run belongs to that match; a run of others or a space before took it.
        LETTER => match previous {
            LETTER | SPACE => false,
            OTHER => before == OTHER || before == SPACE,
            _ => true,
        },
        NUMBER => previous != NUMBER,
        OTHER => previous != OTHER && previous != SPACE,
        SPACE => in_run(previous) || (previous == SPACE && in_run(next)),
        _ => false,
    }
}
