//! The split patterns of GPT-2, cl100k (Llama-3, Qwen2) and o200k (GPT-4o) on ASCII
//! text, 64 bytes at a time: whether a match starts at a byte depends only on the
//! kinds of the two bytes before it, itself and the next, once contractions and
//! groups of digits are set aside. So a block's bytes are sorted into kinds, one bit per byte
//! in a `u64` per kind (by AVX2 or SSE2 on x86-64, 32 or 16 bytes per instruction), the rules
//! below are operations on those bits, shifted one or two bytes to see the
//! neighbours, and the matches are read off the bits of the starts. No branch
//! depends on the text: pieces are a few bytes long and vary, and a scanner that
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
//! o200k (`[^\r\n\p{L}\p{N}]?[\p{Lu}...]*[\p{Ll}...]+(?i:'s|...|'d)?|...|\p{N}{1,3}|
//! ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`) reads as cl100k, but:
//! - a word is capitals then small letters, so a capital after a small letter
//!   starts a match;
//! - contractions end words instead of starting matches, so an apostrophe after a
//!   letter is left to the general path;
//! - a run of others takes slashes among the line breaks after it, so a slash after
//!   a line break is left to the general path too.
//!
//! DeepSeek-V3's three patterns (`patterns::DEEPSEEK_V3_PATTERNS`) split ASCII text
//! as cl100k with groups of three digits does, but:
//! - it has no contractions, so an apostrophe is an other character like any;
//! - numbers are split off first, so the third pattern sees the text before one
//!   end there: whitespace before a number is one match, its last byte included;
//! - control characters (not whitespace) are neither others nor anything else it
//!   names, and are left to the general path.
//!
//! For GPT-2 and cl100k, a contraction's apostrophe starts a match where a run of
//! other characters would, and the match ends after its letters: that is applied
//! as the matches are given. A run of digits starts a match every `digits` digits
//! for cl100k, o200k and DeepSeek-V3: those starts are bits too (`DigitGroups`).

use super::piece_sink::PieceSink;

/// What the scanner's tables say an ASCII character is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsciiClass {
    Letter,
    /// o200k's letters by case.
    UpperLetter,
    LowerLetter,
    Number,
    Whitespace,
    Other,
    /// Matched by no alternative alone (DeepSeek-V3's controls): the general path decides.
    Unmatched,
}

/// A byte's kind, an index into `KindBits`. For o200k, `LETTER` is a small letter.
const LETTER: u8 = 0;
const NUMBER: u8 = 1;
const OTHER: u8 = 2;
const SPACE: u8 = 3;
/// Whitespace other than the space (for cl100k, other than line breaks too).
const BREAK: u8 = 4;
/// cl100k's `\r` and `\n`.
const NEWLINE: u8 = 5;
/// Past the text's end.
const END: u8 = 6;
/// Non-ASCII: the general path goes on.
const STOP: u8 = 7;
/// o200k's capitals.
const UPPER: u8 = 8;
const KINDS: usize = 9;

/// Bytes read at a time: one bit each in a `u64`.
const BLOCK: usize = 64;

/// A block of bytes by kind: bit `i` of `kinds[kind]` is set when the block's
/// byte `i` is of that kind; `slashes` and `apostrophes` single out two other
/// characters that o200k treats apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct KindBits {
    kinds: [u64; KINDS],
    slashes: u64,
    apostrophes: u64,
}

impl KindBits {
    fn of(&self, kind: u8) -> u64 {
        self.kinds[kind as usize]
    }

    fn add(&mut self, kind: u8, bits: u64) {
        self.kinds[kind as usize] |= bits;
    }
}

/// What the bits of a block say of each of its bytes.
#[derive(Debug, PartialEq, Eq)]
struct Verdicts {
    starts: u64,
    /// Whitespace after a line break: `look_around` decides.
    look_around: u64,
    /// Next to a non-ASCII byte: the general path decides.
    undecided: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Gpt2,
    Cl100k { digits: usize },
    O200k,
    DeepSeekV3,
}

pub struct AsciiWindows {
    family: Family,
    kinds: [u8; 256],
    /// How blocks are sorted into kinds.
    sort: Sort,
}

/// How a block's bytes are sorted into kinds: 32 or 16 at a time where the CPU
/// can and the SIMD sort gives the kinds of the table (checked on every byte when
/// the table is made), else one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    Avx2,
    Sse2,
    Scalar,
}

/// Where `AsciiWindows::matches_from` stopped.
pub enum Stop {
    /// The text's end: every match was given.
    End,
    /// The matches before `resume` were given; the table cannot decide at
    /// `stop`, so the general path goes on from `resume` until past it.
    At { resume: usize, stop: usize },
}

/// Where a match ends before the next start the table finds: after a
/// contraction that starts at an apostrophe.
struct Contractions {
    start_matches: bool,
}

impl Contractions {
    /// The bytes of a block where a match that starts there may end early.
    fn may_cut(&self, bits: &KindBits) -> u64 {
        if self.start_matches { bits.apostrophes } else { 0 }
    }

    fn may_cut_at(&self, byte: u8) -> bool {
        self.start_matches && byte == b'\''
    }

    /// Gives the matches from `start` up to `next`, the next start the table
    /// found: normally one match; a contraction ends where it ends.
    #[inline(always)]
    fn matches_up_to(
        &self,
        bytes: &[u8],
        start: &mut usize,
        next: usize,
        contraction_end: &impl Fn(usize) -> Option<usize>,
        on_match: &mut impl PieceSink,
    ) {
        while *start < next {
            let end = match bytes[*start] {
                b'\'' if self.start_matches => contraction_end(*start + 1).unwrap_or(next),
                _ => next,
            };
            on_match.take(*start, end);
            *start = end;
        }
    }
}

/// The starts inside runs of digits that `\p{N}{1,3}` cuts into groups of up to
/// `digits`: each `digits`-th digit from the run's start, while the run goes on.
/// Found as bits with the rest of a block's starts, so that a block with digits
/// gives its matches as one run with no byte to look at (see `take_run`), where a
/// third of the blocks of code and docs hold a digit.
struct DigitGroups {
    /// `usize::MAX` where numbers are not cut (GPT-2).
    digits: usize,
}

impl DigitGroups {
    /// The starts of groups but the first of each run, in `block`; `behind` is how
    /// far before the block the match being read starts, where that match is a
    /// run of digits (it then goes on up to the block).
    #[inline(always)]
    fn starts(&self, before_block: &KindBits, block: &KindBits, behind: Option<usize>) -> u64 {
        let (numbers, numbers_before) = (block.of(NUMBER), before_block.of(NUMBER));
        if numbers == 0 || self.digits >= BLOCK {
            return 0;
        }
        let digits = self.digits;
        if digits == 1 {
            return numbers;
        }
        // Bytes that end `digits` digits in a row.
        let mut full = numbers;
        for back in 1..digits {
            full &= numbers << back | numbers_before >> (BLOCK - back);
        }
        let mut starts = numbers & !(numbers << 1 | numbers_before >> (BLOCK - 1));
        if let Some(behind) = behind {
            // The run before the block goes on into it: its next group starts here,
            // if the digits go on that far.
            let first = (digits - behind % digits) % digits;
            let through_first = (2 << first) - 1;
            if numbers & through_first == through_first {
                starts |= 1 << first;
            }
        }
        // Each step finds the next group of every run; runs are a few digits long.
        loop {
            let more = starts | (starts << digits) & full;
            if more == starts {
                return starts;
            }
            starts = more;
        }
    }
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

    /// The table for o200k's pattern, with letters by case.
    pub fn o200k(ascii: &[AsciiClass; 128]) -> AsciiWindows {
        AsciiWindows::new(Family::O200k, ascii)
    }

    /// The table for DeepSeek-V3's three patterns.
    pub fn deepseek_v3(ascii: &[AsciiClass; 128]) -> AsciiWindows {
        AsciiWindows::new(Family::DeepSeekV3, ascii)
    }

    fn new(family: Family, ascii: &[AsciiClass; 128]) -> AsciiWindows {
        let mut kinds = [STOP; 256];
        for (byte, class) in ascii.iter().enumerate() {
            kinds[byte] = match (class, family) {
                (AsciiClass::Letter | AsciiClass::LowerLetter, _) => LETTER,
                (AsciiClass::UpperLetter, _) => UPPER,
                (AsciiClass::Number, _) => NUMBER,
                (AsciiClass::Other, _) => OTHER,
                (AsciiClass::Unmatched, _) => STOP,
                (AsciiClass::Whitespace, _) if byte == usize::from(b' ') => SPACE,
                (AsciiClass::Whitespace, Family::Gpt2) => BREAK,
                (AsciiClass::Whitespace, _) if matches!(byte as u8, b'\r' | b'\n') => NEWLINE,
                (AsciiClass::Whitespace, _) => BREAK,
            };
        }
        let mut windows = AsciiWindows { family, kinds, sort: Sort::Scalar };
        windows.sort =
            [Sort::Avx2, Sort::Sse2].into_iter().find(|&sort| windows.sorts_as_table(sort)).unwrap_or(Sort::Scalar);
        windows
    }

    /// Whether `sort`, which knows ASCII's Unicode classes, runs on this CPU and
    /// gives every byte the kind the scanner's tables give it.
    fn sorts_as_table(&self, sort: Sort) -> bool {
        let every_byte: Vec<u8> = (0..=u8::MAX).collect();
        every_byte.chunks_exact(BLOCK).all(|block| {
            let block = block.try_into().unwrap_or([0; BLOCK]);
            classify_simd(sort, &block, self.kinds_apart()) == Some(self.classify_scalar(&block))
        })
    }

    /// The kinds the table gives line breaks (GPT-2 has none apart) and capitals
    /// (only o200k has them apart), for the SSE2 sort. Where the table gives `\r`
    /// another kind than `\n`, or one capital another kind than `A`, the check on
    /// every byte sees it and the blocks are sorted by the table.
    fn kinds_apart(&self) -> KindsApart {
        KindsApart {
            newline: self.kinds[usize::from(b'\n')],
            upper: self.kinds[usize::from(b'A')],
            control: self.kinds[0],
        }
    }

    fn classify_scalar(&self, block: &[u8; BLOCK]) -> KindBits {
        let mut bits = KindBits::default();
        for (at, &byte) in block.iter().enumerate() {
            bits.add(self.kinds[byte as usize], 1 << at);
            bits.slashes |= u64::from(byte == b'/') << at;
            bits.apostrophes |= u64::from(byte == b'\'') << at;
        }
        bits
    }

    /// The kinds of the `BLOCK` bytes from `from`, `END` past the text's end.
    #[cfg(test)]
    fn classify(&self, bytes: &[u8], from: usize) -> KindBits {
        Self::classify_by(bytes, from, |block| self.classify_block(block))
    }

    /// `classify`, each block sorted by `sort`.
    #[inline(always)]
    fn classify_by(bytes: &[u8], from: usize, sort: impl Fn(&[u8; BLOCK]) -> KindBits) -> KindBits {
        if let Some(block) = bytes.get(from..from + BLOCK).and_then(|block| block.first_chunk::<BLOCK>()) {
            return sort(block);
        }
        let tail = bytes.get(from..).unwrap_or_default();
        let mut block = [0; BLOCK];
        block[..tail.len()].copy_from_slice(tail);
        let mut bits = sort(&block);
        // Shorter than a block, so the shift is less than 64.
        let inside = !(u64::MAX << tail.len());
        bits.kinds.iter_mut().for_each(|kind| *kind &= inside);
        bits.kinds[END as usize] = !inside;
        bits
    }

    fn classify_block(&self, block: &[u8; BLOCK]) -> KindBits {
        match classify_simd(self.sort, block, self.kinds_apart()) {
            Some(bits) => bits,
            None => self.classify_scalar(block),
        }
    }

    /// Calls `on_match` with each match from `at`, a match's start, while the
    /// table can decide. `contraction_end` says where a contraction after an
    /// apostrophe ends, given the byte after the apostrophe.
    pub fn matches_from(
        &self,
        text: &str,
        at: usize,
        contraction_end: impl Fn(usize) -> Option<usize>,
        on_match: &mut impl PieceSink,
    ) -> Stop {
        #[cfg(target_arch = "x86_64")]
        if self.sort == Sort::Avx2 && has_avx2_loop_features() {
            // SAFETY: the CPU has every feature the loop is compiled for, checked just above.
            return unsafe { self.matches_from_avx2(text, at, contraction_end, on_match) };
        }
        self.matches_by(text, at, contraction_end, on_match, |block| self.classify_block(block))
    }

    /// `matches_from` compiled for CPUs with AVX2 (and the bit instructions that
    /// come with it): the sort of each block is inlined into the loop, with no call
    /// and no copy of its result, and so is the encoder's handling of the pieces,
    /// where counting and finding bits are then one instruction each.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
    fn matches_from_avx2(
        &self,
        text: &str,
        at: usize,
        contraction_end: impl Fn(usize) -> Option<usize>,
        on_match: &mut impl PieceSink,
    ) -> Stop {
        let apart = self.kinds_apart();
        self.matches_by(text, at, contraction_end, on_match, |block| classify_with_avx2(block).kinds(apart))
    }

    /// `matches_from` with `sort` giving the kinds of a block.
    #[inline(always)]
    fn matches_by(
        &self,
        text: &str,
        at: usize,
        contraction_end: impl Fn(usize) -> Option<usize>,
        on_match: &mut impl PieceSink,
        sort: impl Fn(&[u8; BLOCK]) -> KindBits,
    ) -> Stop {
        let classify = |bytes: &[u8], from: usize| Self::classify_by(bytes, from, &sort);
        let bytes = text.as_bytes();
        let kind = |at: usize| bytes.get(at).map_or(END, |&byte| self.kinds[byte as usize]);
        if kind(at) == STOP {
            return Stop::At { resume: at, stop: at };
        }
        let digits = match self.family {
            Family::Cl100k { digits } => digits,
            Family::O200k | Family::DeepSeekV3 => 3,
            Family::Gpt2 => usize::MAX,
        };
        let digit_groups = DigitGroups { digits };
        // o200k's contractions end words, GPT-2's and cl100k's start matches.
        let contractions = Contractions { start_matches: matches!(self.family, Family::Gpt2 | Family::Cl100k { .. }) };
        let mut start = at;
        // The blocks start after `at`. Before them, `at` itself, and before it as if
        // a letter: for cl100k, an other character after a letter starts a match too.
        let mut before_block = KindBits::default();
        before_block.add(kind(at), 1 << 63);
        before_block.add(LETTER, 1 << 62);
        let mut block = at + 1;
        let mut block_bits = classify(bytes, block);
        while block < bytes.len() {
            let after_block = classify(bytes, block + BLOCK);
            let verdicts = self.verdicts(&before_block, &block_bits, &after_block);
            let behind = (start < block && kind(start) == NUMBER).then(|| block - start);
            let mut found = verdicts.starts | digit_groups.starts(&before_block, &block_bits, behind);
            let mut undecided = verdicts.undecided;
            let mut look_around = verdicts.look_around & below_lowest(undecided);
            while look_around != 0 {
                let bit = look_around & look_around.wrapping_neg();
                look_around ^= bit;
                match self.look_around(bytes, block + bit.trailing_zeros() as usize) {
                    Some(true) => found |= bit,
                    Some(false) => {}
                    None => {
                        undecided |= bit;
                        break;
                    }
                }
            }
            found &= below_lowest(undecided);
            if start >= block {
                // A contraction that started in the block before ends in this one: no
                // match starts inside it, and the one where it ends is `start`'s own.
                found &= u64::MAX.checked_shl((start - block + 1) as u32).unwrap_or(0);
            }
            // The matches given here start at `start` and at the starts found but the last.
            if found & contractions.may_cut(&block_bits) == 0
                && !bytes.get(start).is_some_and(|&byte| contractions.may_cut_at(byte))
            {
                // Each ends where the next starts, with no byte to look at.
                start = on_match.take_run(start, block, found);
                found = 0;
            }
            while found != 0 {
                let next = block + found.trailing_zeros() as usize;
                found &= found - 1;
                contractions.matches_up_to(bytes, &mut start, next, &contraction_end, on_match);
            }
            if undecided != 0 {
                // The general path goes on past the byte after it too: that one may
                // be what the table could not read.
                return Stop::At { resume: start, stop: block + undecided.trailing_zeros() as usize + 1 };
            }
            (before_block, block_bits) = (block_bits, after_block);
            block += BLOCK;
        }
        contractions.matches_up_to(bytes, &mut start, bytes.len(), &contraction_end, on_match);
        Stop::End
    }

    /// The verdicts on a block's bytes, given the blocks on either side: the rules
    /// of the module doc as operations on the bits of all 64 bytes at once.
    #[inline(always)]
    fn verdicts(&self, before_block: &KindBits, block: &KindBits, after_block: &KindBits) -> Verdicts {
        // Bit `i` of each: whether the byte two back, one back, at or after byte `i`
        // is of `kind`.
        let two_back = |kind: u8| block.of(kind) << 2 | before_block.of(kind) >> 62;
        let back = |kind: u8| block.of(kind) << 1 | before_block.of(kind) >> 63;
        let here = |kind: u8| block.of(kind);
        let ahead = |kind: u8| block.of(kind) >> 1 | after_block.of(kind) << 63;
        let letter = |bits: &dyn Fn(u8) -> u64| bits(LETTER) | bits(UPPER);
        let run = |bits: &dyn Fn(u8) -> u64| letter(bits) | bits(NUMBER) | bits(OTHER);
        let blank = |bits: &dyn Fn(u8) -> u64| bits(SPACE) | bits(BREAK);
        let (starts, look_around, unreadable) = match self.family {
            Family::Gpt2 => {
                let same_run = here(LETTER) & back(LETTER) | here(NUMBER) & back(NUMBER) | here(OTHER) & back(OTHER);
                let runs = run(&here) & (run(&back) & !same_run | back(BREAK));
                let blanks = blank(&here) & (run(&back) | blank(&back) & run(&ahead));
                (runs | blanks, 0, 0)
            }
            Family::Cl100k { .. } | Family::O200k | Family::DeepSeekV3 => {
                let other_taken = two_back(OTHER) | two_back(SPACE);
                let mut letters = letter(&here) & !(letter(&back) | blank(&back)) & (!back(OTHER) | other_taken);
                let numbers = here(NUMBER) & !back(NUMBER);
                let others = here(OTHER) & !(back(OTHER) | back(SPACE));
                let newlines = here(NEWLINE) & (letter(&back) | back(NUMBER));
                let after_newline = blank(&here) & back(NEWLINE);
                let decided_after_newline = ahead(END) | run(&ahead) | ahead(NEWLINE) & two_back(OTHER);
                let no_start_after_newline = ahead(NEWLINE) & (run(&two_back) & !two_back(OTHER) | blank(&two_back));
                // Whitespace before a number is all of one match for DeepSeek-V3.
                let before_run = match self.family {
                    Family::DeepSeekV3 => run(&ahead) & !ahead(NUMBER),
                    _ => run(&ahead),
                };
                let blanks =
                    blank(&here) & (run(&back) | blank(&back) & before_run) | after_newline & decided_after_newline;
                let look_around = after_newline & !decided_after_newline & !no_start_after_newline;
                let mut unreadable = 0;
                if self.family == Family::O200k {
                    // A capital after a small letter starts a word.
                    letters |= here(UPPER) & back(LETTER);
                    // An apostrophe after a letter may end the word as a contraction,
                    // and a slash after a line break may end a run of others before it.
                    unreadable = block.apostrophes & letter(&back) | block.slashes & back(NEWLINE);
                }
                (letters | numbers | others | newlines | blanks, look_around, unreadable)
            }
        };
        let inside = !block.of(END);
        let undecided = (here(STOP) | back(STOP) | ahead(STOP) | unreadable) & inside;
        Verdicts { starts: starts & inside & !undecided, look_around: look_around & inside & !undecided, undecided }
    }

    /// Whether cl100k (or o200k) starts a match at `at`, whitespace after a line break:
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

/// The kinds a family gives line breaks and capitals.
#[derive(Clone, Copy)]
// Read by the SIMD sorts only; elsewhere `kinds` holds the same.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct KindsApart {
    newline: u8,
    upper: u8,
    /// Control characters but whitespace.
    control: u8,
}

/// The bits below `bits`' lowest set bit; all of them when none is set.
fn below_lowest(bits: u64) -> u64 {
    bits.wrapping_sub(1) & !bits
}

/// The kinds of a block by `sort`, for ASCII's Unicode classes (letters
/// `A-Za-z`, numbers `0-9`, whitespace `\t\n\x0B\x0C\r` and the space); `None`
/// where the CPU cannot run it, and for `Sort::Scalar`.
fn classify_simd(sort: Sort, block: &[u8; BLOCK], apart: KindsApart) -> Option<KindBits> {
    #[cfg(target_arch = "x86_64")]
    match sort {
        // SAFETY: SSE2 is part of x86-64, so every CPU this runs on has it.
        Sort::Sse2 => return Some(unsafe { classify_with_sse2(block) }.kinds(apart)),
        Sort::Avx2 if std::arch::is_x86_feature_detected!("avx2") => {
            // SAFETY: the CPU has AVX2, checked just above.
            return Some(unsafe { classify_with_avx2(block) }.kinds(apart));
        }
        _ => {}
    }
    let _ = (sort, block, apart);
    None
}

/// Whether the CPU has what `AsciiWindows::matches_from_avx2` is compiled for
/// (each check is a load of a flag the standard library caches).
#[cfg(target_arch = "x86_64")]
fn has_avx2_loop_features() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx2") && has!("bmi1") && has!("bmi2") && has!("lzcnt") && has!("popcnt")
}

/// A block's bytes by ASCII class, one bit per byte, as the SIMD sorts find them.
#[derive(Default)]
// Built by the SIMD sorts only.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct ClassMasks {
    upper: u64,
    lower: u64,
    number: u64,
    space: u64,
    /// `\t\n\x0B\x0C\r`
    controls: u64,
    /// The other controls: below the space, and DEL.
    other_controls: u64,
    /// `\n\r`
    newlines: u64,
    non_ascii: u64,
    slashes: u64,
    apostrophes: u64,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl ClassMasks {
    #[inline(always)]
    fn kinds(&self, apart: KindsApart) -> KindBits {
        let mut bits = KindBits { slashes: self.slashes, apostrophes: self.apostrophes, ..KindBits::default() };
        bits.add(LETTER, self.lower);
        bits.add(apart.upper, self.upper);
        bits.add(NUMBER, self.number);
        bits.add(SPACE, self.space);
        bits.add(apart.newline, self.newlines);
        bits.add(BREAK, self.controls & !self.newlines);
        bits.add(STOP, self.non_ascii);
        bits.add(apart.control, self.other_controls);
        let named = self.upper | self.lower | self.number | self.space | self.controls | self.other_controls;
        bits.add(OTHER, !(named | self.non_ascii));
        bits
    }
}

/// A block by SSE2, 16 bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn classify_with_sse2(block: &[u8; BLOCK]) -> ClassMasks {
    use std::arch::x86_64::*;
    let mut masks = ClassMasks::default();
    for (chunk, at) in block.chunks_exact(16).zip((0..BLOCK).step_by(16)) {
        // SAFETY: an unaligned load of the 16 bytes of `chunk`.
        let bytes = unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) };
        let byte = |value: u8| _mm_set1_epi8(value as i8);
        let equal = |value: u8| _mm_cmpeq_epi8(bytes, byte(value));
        // Bytes from `low` to `low + count - 1`: the offset from `low`, unsigned,
        // is at most `count - 1`.
        let in_range = |low: u8, count: u8| {
            let offset = _mm_sub_epi8(bytes, byte(low));
            _mm_cmpeq_epi8(_mm_min_epu8(offset, byte(count - 1)), offset)
        };
        let mask = |lanes: __m128i| u64::from(_mm_movemask_epi8(lanes) as u16) << at;
        masks.upper |= mask(in_range(b'A', 26));
        masks.lower |= mask(in_range(b'a', 26));
        masks.number |= mask(in_range(b'0', 10));
        masks.space |= mask(equal(b' '));
        let controls = mask(in_range(b'\t', 5));
        masks.controls |= controls;
        masks.other_controls |= mask(_mm_or_si128(in_range(0, 32), equal(0x7f))) & !controls;
        masks.newlines |= mask(_mm_or_si128(equal(b'\n'), equal(b'\r')));
        masks.non_ascii |= mask(bytes);
        masks.slashes |= mask(equal(b'/'));
        masks.apostrophes |= mask(equal(b'\''));
    }
    masks
}

/// A block by AVX2, 32 bytes at a time: the same steps as `classify_with_sse2`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn classify_with_avx2(block: &[u8; BLOCK]) -> ClassMasks {
    use std::arch::x86_64::*;
    let mut masks = ClassMasks::default();
    for (chunk, at) in block.chunks_exact(32).zip((0..BLOCK).step_by(32)) {
        // SAFETY: an unaligned load of the 32 bytes of `chunk`.
        let bytes = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
        let byte = |value: u8| _mm256_set1_epi8(value as i8);
        let equal = |value: u8| _mm256_cmpeq_epi8(bytes, byte(value));
        let in_range = |low: u8, count: u8| {
            let offset = _mm256_sub_epi8(bytes, byte(low));
            _mm256_cmpeq_epi8(_mm256_min_epu8(offset, byte(count - 1)), offset)
        };
        let mask = |lanes: __m256i| u64::from(_mm256_movemask_epi8(lanes) as u32) << at;
        masks.upper |= mask(in_range(b'A', 26));
        masks.lower |= mask(in_range(b'a', 26));
        masks.number |= mask(in_range(b'0', 10));
        masks.space |= mask(equal(b' '));
        let controls = mask(in_range(b'\t', 5));
        masks.controls |= controls;
        masks.other_controls |= mask(_mm256_or_si256(in_range(0, 32), equal(0x7f))) & !controls;
        masks.newlines |= mask(_mm256_or_si256(equal(b'\n'), equal(b'\r')));
        masks.non_ascii |= mask(bytes);
        masks.slashes |= mask(equal(b'/'));
        masks.apostrophes |= mask(equal(b'\''));
    }
    masks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Letters, numbers and other characters make runs.
    fn in_run(kind: u8) -> bool {
        kind <= OTHER
    }

    /// The module doc's rules for GPT-2, one byte at a time: whether a match starts
    /// at a byte of kind `current`.
    fn gpt2_starts(previous: u8, current: u8, next: u8) -> u8 {
        let whitespace = |kind: u8| kind == SPACE || kind == BREAK;
        let starts = if in_run(current) {
            (in_run(previous) && previous != current) || previous == BREAK
        } else if whitespace(current) {
            in_run(previous) || (whitespace(previous) && in_run(next))
        } else {
            false
        };
        if starts { 1 } else { 0 }
    }

    /// The same for cl100k: 2 where `look_around` decides.
    fn cl100k_starts(before: u8, previous: u8, current: u8, next: u8) -> u8 {
        let starts = match current {
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
                NEWLINE => match (next, before) {
                    (END, _) => true,
                    (next, _) if in_run(next) => true,
                    (NEWLINE, OTHER) => true,
                    (NEWLINE, LETTER | NUMBER | SPACE | BREAK) => false,
                    _ => return 2,
                },
                _ => false,
            },
            _ => false,
        };
        if starts { 1 } else { 0 }
    }

    /// The same for DeepSeek-V3: cl100k's rules, but that whitespace before a number
    /// is one match.
    fn deepseek_v3_starts(before: u8, previous: u8, current: u8, next: u8) -> u8 {
        if matches!(current, SPACE | BREAK) && matches!(previous, SPACE | BREAK) && next == NUMBER {
            return 0;
        }
        cl100k_starts(before, previous, current, next)
    }

    /// Other characters that o200k treats apart, as kinds of their own here.
    const SLASH: u8 = 20;
    const APOSTROPHE: u8 = 21;

    /// The same for o200k, with letters by case (`LETTER` small): cl100k's rules,
    /// capitals being letters and slashes and apostrophes others there, but for the
    /// three differences of the module doc.
    fn o200k_starts(before: u8, previous: u8, current: u8, next: u8) -> u8 {
        let as_cl100k = |kind: u8| match kind {
            UPPER => LETTER,
            SLASH | APOSTROPHE => OTHER,
            kind => kind,
        };
        let letter = |kind: u8| as_cl100k(kind) == LETTER;
        if (current == APOSTROPHE && letter(previous)) || (current == SLASH && previous == NEWLINE) {
            return 3;
        }
        if current == UPPER && previous == LETTER {
            return 1;
        }
        cl100k_starts(as_cl100k(before), as_cl100k(previous), as_cl100k(current), as_cl100k(next))
    }

    /// The verdict on the first byte of a block, the bytes around it of the given kinds.
    fn verdict_of(windows: &AsciiWindows, before: u8, previous: u8, current: u8, next: u8) -> u8 {
        // Kinds of their own here are others in the bits, and singled out.
        let add = |bits: &mut KindBits, kind: u8, bit: u64| match kind {
            SLASH => {
                bits.add(OTHER, bit);
                bits.slashes |= bit;
            }
            APOSTROPHE => {
                bits.add(OTHER, bit);
                bits.apostrophes |= bit;
            }
            kind => bits.add(kind, bit),
        };
        let mut before_block = KindBits::default();
        add(&mut before_block, before, 1 << 62);
        add(&mut before_block, previous, 1 << 63);
        let mut block = KindBits::default();
        add(&mut block, current, 1);
        add(&mut block, next, 2);
        block.add(END, !3);
        let mut after_block = KindBits::default();
        after_block.add(END, u64::MAX);
        let verdicts = windows.verdicts(&before_block, &block, &after_block);
        match (verdicts.undecided & 1, verdicts.look_around & 1, verdicts.starts & 1) {
            (1, _, _) => 3,
            (_, 1, _) => 2,
            (_, _, starts) => starts as u8,
        }
    }

    fn ascii() -> [AsciiClass; 128] {
        std::array::from_fn(|byte| match byte as u8 {
            b'a'..=b'z' | b'A'..=b'Z' => AsciiClass::Letter,
            b'0'..=b'9' => AsciiClass::Number,
            b'\t'..=b'\r' | b' ' => AsciiClass::Whitespace,
            _ => AsciiClass::Other,
        })
    }

    /// DeepSeek-V3's: controls (but whitespace) are matched by no alternative alone.
    fn deepseek_v3_ascii() -> [AsciiClass; 128] {
        let mut ascii = ascii();
        for (byte, class) in ascii.iter_mut().enumerate() {
            if (byte as u8).is_ascii_control() && *class == AsciiClass::Other {
                *class = AsciiClass::Unmatched;
            }
        }
        ascii
    }

    fn cased_ascii() -> [AsciiClass; 128] {
        let mut ascii = ascii();
        for byte in b'A'..=b'z' {
            ascii[usize::from(byte)] = match byte {
                b'A'..=b'Z' => AsciiClass::UpperLetter,
                b'a'..=b'z' => AsciiClass::LowerLetter,
                _ => ascii[usize::from(byte)],
            };
        }
        ascii
    }

    /// Calls `check` with every window of kinds a block can hold: a byte past the
    /// end is never looked at, nor one before a block's start but two back, which
    /// is at least the letter put before the first match.
    fn for_every_window(kinds: &[u8], mut check: impl FnMut(u8, u8, u8, u8)) {
        for &before in kinds {
            for &previous in kinds {
                for &current in kinds {
                    for &next in kinds.iter().chain(&[END]) {
                        check(before, previous, current, next);
                    }
                }
            }
        }
    }

    #[test]
    fn the_bits_of_a_block_give_the_verdicts_of_the_rules_for_every_window() {
        let (gpt2, cl100k, o200k) =
            (AsciiWindows::gpt2(&ascii()), AsciiWindows::cl100k(&ascii(), 3), AsciiWindows::o200k(&cased_ascii()));
        let undecided = |previous: u8, current: u8, next: u8| [previous, current, next].contains(&STOP);
        let verdict = |spec: u8, previous: u8, current: u8, next: u8| {
            if undecided(previous, current, next) { 3 } else { spec }
        };
        for_every_window(&[LETTER, NUMBER, OTHER, SPACE, BREAK, STOP], |before, previous, current, next| {
            let expected = verdict(gpt2_starts(previous, current, next), previous, current, next);
            let window = (before, previous, current, next);
            assert_eq!(verdict_of(&gpt2, before, previous, current, next), expected, "GPT-2 {window:?}");
        });
        for_every_window(&[LETTER, NUMBER, OTHER, SPACE, BREAK, NEWLINE, STOP], |before, previous, current, next| {
            let expected = verdict(cl100k_starts(before, previous, current, next), previous, current, next);
            let window = (before, previous, current, next);
            assert_eq!(verdict_of(&cl100k, before, previous, current, next), expected, "cl100k {window:?}");
        });
        let deepseek_v3 = AsciiWindows::deepseek_v3(&deepseek_v3_ascii());
        for_every_window(&[LETTER, NUMBER, OTHER, SPACE, BREAK, NEWLINE, STOP], |before, previous, current, next| {
            let expected = verdict(deepseek_v3_starts(before, previous, current, next), previous, current, next);
            let window = (before, previous, current, next);
            assert_eq!(verdict_of(&deepseek_v3, before, previous, current, next), expected, "DeepSeek-V3 {window:?}");
        });
        let cased = [LETTER, UPPER, NUMBER, OTHER, SLASH, APOSTROPHE, SPACE, BREAK, NEWLINE, STOP];
        for_every_window(&cased, |before, previous, current, next| {
            let expected = verdict(o200k_starts(before, previous, current, next), previous, current, next);
            let window = (before, previous, current, next);
            assert_eq!(verdict_of(&o200k, before, previous, current, next), expected, "o200k {window:?}");
        });
    }

    #[test]
    fn blocks_are_read_many_bytes_at_a_time_where_the_cpu_can() {
        for windows in [
            AsciiWindows::gpt2(&ascii()),
            AsciiWindows::cl100k(&ascii(), 1),
            AsciiWindows::o200k(&cased_ascii()),
            AsciiWindows::deepseek_v3(&deepseek_v3_ascii()),
        ] {
            assert_eq!(windows.sort != Sort::Scalar, cfg!(target_arch = "x86_64"));
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                assert_eq!(windows.sort, Sort::Avx2);
            }
            // Each sort the CPU runs gives the kinds byte by byte gives, on blocks
            // of every byte and of every mix of classes.
            let mut blocks: Vec<[u8; BLOCK]> =
                (0..=u8::MAX).collect::<Vec<_>>().chunks_exact(BLOCK).map(|block| block.try_into().unwrap()).collect();
            let mut state = 0x9e37_79b9_7f4a_7c15_u64;
            blocks.extend((0..1000).map(|_| {
                std::array::from_fn(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    b"aZ09 \t\n\r\x0b\x0c/'_-\x80\xff\x00\x1f\x7f\x08"[(state % 20) as usize]
                })
            }));
            for sort in [Sort::Avx2, Sort::Sse2] {
                for block in &blocks {
                    if let Some(bits) = classify_simd(sort, block, windows.kinds_apart()) {
                        assert_eq!(bits, windows.classify_scalar(block), "{sort:?} {block:?}");
                    }
                }
            }
        }
        // Classes other than Unicode's (`_` a letter) are read a byte at a time.
        let mut unusual = ascii();
        unusual[usize::from(b'_')] = AsciiClass::Letter;
        assert_eq!(AsciiWindows::gpt2(&unusual).sort, Sort::Scalar);
    }

    #[test]
    fn every_sort_and_the_loop_compiled_for_avx2_find_the_same_matches() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let chars = ['a', 'Z', 'q', '0', '7', ' ', ' ', '\t', '\n', '\r', '/', '\'', 's', '.', '-', 'é'];
        // Lengths around the 64-byte blocks, and texts mostly ASCII, so the table
        // runs long before it stops at a character it cannot read.
        let texts: Vec<String> = (0..600)
            .map(|n| {
                let len = [n % 7, 60 + n % 10, 120 + n % 20, 300][n % 4];
                let ascii_only = n % 3 != 0;
                (0..len).map(|_| chars[(next() % if ascii_only { 15 } else { 16 }) as usize]).collect()
            })
            .collect();
        for windows in [
            AsciiWindows::gpt2(&ascii()),
            AsciiWindows::cl100k(&ascii(), 3),
            AsciiWindows::o200k(&cased_ascii()),
            AsciiWindows::deepseek_v3(&deepseek_v3_ascii()),
        ] {
            for text in &texts {
                let matches = |sort: Sort| {
                    let windows = AsciiWindows { sort, ..windows };
                    let contraction_end =
                        |after: usize| (text.as_bytes().get(after) == Some(&b's')).then_some(after + 1);
                    let mut found = Vec::new();
                    let stop = match windows
                        .matches_from(text, 0, contraction_end, &mut |start, end| found.push((start, end)))
                    {
                        Stop::End => None,
                        Stop::At { resume, stop } => Some((resume, stop)),
                    };
                    (found, stop)
                };
                let scalar = matches(Sort::Scalar);
                assert_eq!(matches(Sort::Sse2), scalar, "{text:?}");
                // Where the CPU has AVX2, this is the loop compiled for it.
                assert_eq!(matches(windows.sort), scalar, "{text:?}");
            }
        }
    }

    #[test]
    fn a_block_past_the_end_of_the_text_is_end() {
        let windows = AsciiWindows::cl100k(&ascii(), 3);
        let text = b"ab 1\n\xc3\xa9";
        let bits = windows.classify(text, 1);
        let expected = [(LETTER, 0b1), (SPACE, 0b10), (NUMBER, 0b100), (NEWLINE, 0b1000), (STOP, 0b11_0000)];
        for (kind, bits_of_kind) in expected {
            assert_eq!(bits.of(kind), bits_of_kind, "kind {kind}");
        }
        assert_eq!(bits.of(END), u64::MAX << 6);
        assert_eq!(windows.classify(text, 70).of(END), u64::MAX);

        let o200k = AsciiWindows::o200k(&cased_ascii());
        let bits = o200k.classify(b"aB/'.", 0);
        assert_eq!((bits.of(LETTER), bits.of(UPPER), bits.of(OTHER)), (0b1, 0b10, 0b11100));
        assert_eq!((bits.slashes, bits.apostrophes), (0b100, 0b1000));
    }
}
