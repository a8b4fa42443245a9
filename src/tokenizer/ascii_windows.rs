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
//! \s*[\r\n]+|\s+(?!\S)|\s+`) differs:
//! - a letter run takes the one character before it that is neither a line break,
//!   a letter nor a number, if that one starts a match: an other character does
//!   unless a run of others or a space took it, hence the second byte back;
//! - numbers take no space, and only the space (not a tab) takes other characters;
//! - a run of others takes the line breaks after it, and whitespace up to its last
//!   line break is one match, so a line break after anything but a letter or number
//!   starts none;
//! - after a line break, whitespace starts a match unless a line break comes later
//!   in its run. Where that is further than the next byte, or the line break
//!   before may have been taken by a run of others further back, the table cannot
//!   tell, and `look_around` reads the whitespace run (indentation after a line
//!   break is the common case).
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
/// Whitespace other than the space (for cl100k, other than line breaks too).
const BREAK: u8 = 4;
/// cl100k's `\r` and `\n`.
const NEWLINE: u8 = 5;
const END: u8 = 6;
/// Non-ASCII: the general path goes on.
const STOP: u8 = 7;

/// Bits per kind in a window index, four kinds: two bytes before, the byte looked
/// at, the next.
const KIND_BITS: usize = 3;
const KIND_MASK: usize = (1 << KIND_BITS) - 1;
const WINDOWS: usize = 1 << (4 * KIND_BITS);

/// What a window says of its third byte.
const NO_START: u8 = 0;
const STARTS: u8 = 1;
/// Whitespace after a line break: `look_around` decides.
const LOOK_AROUND: u8 = 2;
/// Next to a non-ASCII byte: the general path decides.
const UNDECIDED: u8 = 3;

#[derive(Clone, Copy)]
enum Family {
    Gpt2,
    Cl100k { digits: usize },
}

pub struct AsciiWindows {
    family: Family,
    kinds: [u8; 256],
    /// Whether a match starts at the third byte of each window of four kinds.
    starts: Box<[u8; WINDOWS]>,
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
                (AsciiClass::Whitespace, Family::Cl100k { .. }) if matches!(byte as u8, b'\r' | b'\n') => NEWLINE,
                (AsciiClass::Whitespace, _) => BREAK,
            };
        }
        let mut starts = Box::new([NO_START; WINDOWS]);
        for (window, start) in starts.iter_mut().enumerate() {
            let kind = |back: usize| (window >> (back * KIND_BITS) & KIND_MASK) as u8;
            let (before, previous, current, next) = (kind(3), kind(2), kind(1), kind(0));
            *start = if [previous, current, next].contains(&STOP) {
                UNDECIDED
            } else {
                match family {
                    Family::Gpt2 => verdict(gpt2_starts(previous, current, next)),
                    Family::Cl100k { .. } => cl100k_starts(before, previous, current, next),
                }
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
        if kind(at) == STOP {
            return Stop::At { resume: at, stop: at };
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
        // Before `at`, which starts a match, as if a letter: for cl100k, an other
        // character after a letter starts a match too.
        let mut window = usize::from(LETTER) << (2 * KIND_BITS) | usize::from(kind(at)) << KIND_BITS;
        window |= usize::from(kind(at + 1));
        let mut block = at + 1;
        while block < bytes.len() {
            let block_end = (block + 64).min(bytes.len());
            let mut found = 0u64;
            let mut stop = None;
            for middle in block..block_end {
                window = (window << KIND_BITS | usize::from(kind(middle + 1))) & (WINDOWS - 1);
                let verdict = match self.starts[window] {
                    LOOK_AROUND => self.look_around(bytes, middle).map_or(UNDECIDED, verdict),
                    verdict => verdict,
                };
                if verdict == UNDECIDED {
                    // The general path goes on past the byte after it too: that
                    // one may be what the table could not read.
                    stop = Some(middle + 1);
                    break;
                }
                found |= u64::from(verdict) << (middle - block);
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

    /// Whether cl100k starts a match at `at`, whitespace after a line break:
    /// unless a later line break in the run ends the same match, which it does
    /// unless a run of others took the line breaks before. `None` where a
    /// non-ASCII character might be whitespace or an other character.
    fn look_around(&self, bytes: &[u8], at: usize) -> Option<bool> {
        let kind = |byte: u8| self.kinds[byte as usize];
        // Only as far as the next line break: reading the whole run from every
        // line break in it would be quadratic in a long run of blank lines.
        let past_blanks = bytes[at..].iter().map(|&byte| kind(byte)).find(|&kind| !matches!(kind, SPACE | BREAK));
        match past_blanks {
            Some(NEWLINE) => {}
            Some(STOP) => return None,
            _ => return Some(true),
        }
        match bytes[..at].iter().rposition(|&byte| kind(byte) != NEWLINE) {
            Some(before_breaks) => match kind(bytes[before_breaks]) {
                STOP => None,
                before => Some(before == OTHER),
            },
            None => Some(false),
        }
    }
}

fn verdict(starts: bool) -> u8 {
    if starts { STARTS } else { NO_START }
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

fn cl100k_starts(before: u8, previous: u8, current: u8, next: u8) -> u8 {
    let starts = match current {
        // After a space, a tab, or an other character that starts its match, a
        // letter run belongs to that match; a run of others or a space before took it.
        LETTER => match previous {
            LETTER | SPACE | BREAK => false,
            OTHER => before == OTHER || before == SPACE,
            _ => true,
        },
        NUMBER => previous != NUMBER,
        OTHER => previous != OTHER && previous != SPACE,
        NEWLINE => previous == LETTER || previous == NUMBER,
        SPACE | BREAK => match previous {
            LETTER | NUMBER | OTHER => true,
            SPACE | BREAK => in_run(next),
            // After a line break: a start unless a later line break in the run
            // belongs to the same match.
            NEWLINE => match (next, before) {
                (END, _) => true,
                (next, _) if in_run(next) => true,
                // Taken by the run of others before, which ends at it.
                (NEWLINE, OTHER) => true,
                (NEWLINE, LETTER | NUMBER | SPACE | BREAK) => false,
                _ => return LOOK_AROUND,
            },
            _ => false,
        },
        _ => false,
    };
    verdict(starts)
}
