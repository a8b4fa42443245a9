//! Hand-written scanners for the split patterns of the common byte-level BPE
//! families, giving exactly the matches `fancy-regex` gives for the pattern they
//! replace, without a regex engine on the hot path.
//!
//! Each scanner is chosen only for its pattern spelled exactly (see
//! `Scanner::for_pattern`); any other pattern stays on the regex engines. The
//! character classes (`\p{L}`, `\p{N}`, `\s` and the case-insensitive letters of
//! the contractions) are read from `regex-syntax`, the tables behind both regex
//! engines, so a scanner and its pattern agree on every code point. The
//! `property_tests` below pit each scanner against `fancy-regex` on generated text.
//!
//! The scanners read ASCII text through a table first (see `ascii_windows`) and go
//! character by character only where it cannot decide.
//!
//! Every one of these patterns matches at every position (each character is a
//! letter, a number, whitespace or something else, and each has an alternative),
//! so the matches tile the text and the scanner only has to find where each ends.
//!
//! DeepSeek-V3 splits with three patterns in turn (`Split`s in a `Sequence`), each
//! on every piece of the one before; its third leaves some characters unmatched
//! (controls and format characters before no letter), which `Isolated` keeps as
//! pieces. Its scanner gives all the pieces of the three at once, in one pass:
//! their classes are made disjoint in the order the steps run (a number is the
//! first step's, a CJK character the second's), and where a piece of an earlier
//! step ends, the third sees the end of its text. Its property test pits it
//! against the three patterns run in turn on `fancy-regex`.

use regex_syntax::hir::{Class, HirKind};

use super::ascii_windows::{AsciiClass, AsciiWindows, Stop};
use super::patterns::{BYTE_LEVEL_PATTERN, DEEPSEEK_V3_PATTERNS, LLAMA3_PATTERN, O200K_PATTERN, QWEN2_PATTERN};
use super::piece_sink::PieceSink;

/// The contractions both families split off, in the patterns' order.
const CONTRACTIONS: [&str; 7] = ["s", "t", "re", "ve", "m", "ll", "d"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    Gpt2,
    /// `(?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    Cl100k { digits: usize },
    /// GPT-4o's `O200K_PATTERN`: words by case, then as `Cl100k` with three digits.
    O200k,
    /// DeepSeek-V3's three `Split`s in turn (`DEEPSEEK_V3_PATTERNS`), as one scan.
    DeepSeekV3,
}

/// The classes a family's scanner tells characters apart by: GPT-2 and cl100k
/// use `Letter`; o200k splits letters by case and counts combining marks, which are
/// neither letters nor numbers, as part of words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CharClass {
    Letter,
    Number,
    Space,
    Other,
    /// `[\p{Lu}\p{Lt}]`
    UpperLetter,
    /// `\p{Ll}`
    LowerLetter,
    /// `[\p{Lm}\p{Lo}]`: letters without case, on both sides of o200k's words.
    UncasedLetter,
    /// `\p{M}`
    Mark,
    /// DeepSeek-V3's `[\p{P}\p{S}]` outside its CJK range.
    Punct,
    /// DeepSeek-V3's CJK ideographs and kana (its second `Split`), as its third
    /// `Split` then tells them apart: letters and marks, punctuation and symbols,
    /// and the others (unassigned).
    CjkWord,
    CjkPunct,
    CjkOther,
}

const CLASSES: usize = 12;

/// A set of classes, one bit each.
type ClassSet = u16;

const fn set(classes: &[CharClass]) -> ClassSet {
    let mut bits = 0;
    let mut at = 0;
    while at < classes.len() {
        bits |= 1 << classes[at] as u8;
        at += 1;
    }
    bits
}

/// o200k's `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`, the start of a word.
const UPPER_LIKE: ClassSet = set(&[CharClass::UpperLetter, CharClass::UncasedLetter, CharClass::Mark]);
/// o200k's `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`, the end of a word.
const LOWER_LIKE: ClassSet = set(&[CharClass::LowerLetter, CharClass::UncasedLetter, CharClass::Mark]);
/// o200k's `[^\s\p{L}\p{N}]`.
const NEITHER: ClassSet = set(&[CharClass::Other, CharClass::Mark]);
/// No class: for a pattern that sees the whole text (see `Scanner::whitespace_end`).
const NO_CLASS: ClassSet = 0;
/// DeepSeek-V3's `[\p{L}\p{M}]` outside its CJK range.
const LETTER_OR_MARK: ClassSet = set(&[CharClass::Letter, CharClass::Mark]);
/// Where DeepSeek-V3's first two `Split`s end a piece for its third.
const NUMBER_OR_CJK: ClassSet = set(&[CharClass::Number, CharClass::CjkWord, CharClass::CjkPunct, CharClass::CjkOther]);
/// DeepSeek-V3's CJK letters and marks, its third pattern's words inside a CJK run.
const CJK_WORD: ClassSet = set(&[CharClass::CjkWord]);

/// The classes of GPT-2 and cl100k, by the patterns that define them.
const WORD_CLASSES: &[(&str, CharClass)] =
    &[(r"\p{L}", CharClass::Letter), (r"\p{N}", CharClass::Number), (r"\s", CharClass::Space)];
/// The classes of o200k.
const CASED_CLASSES: &[(&str, CharClass)] = &[
    (r"[\p{Lu}\p{Lt}]", CharClass::UpperLetter),
    (r"\p{Ll}", CharClass::LowerLetter),
    (r"[\p{Lm}\p{Lo}]", CharClass::UncasedLetter),
    (r"\p{M}", CharClass::Mark),
    (r"\p{N}", CharClass::Number),
    (r"\s", CharClass::Space),
];

/// The classes of DeepSeek-V3, made disjoint in the order its `Split`s run: a
/// number goes to the first whatever else it is, a CJK character to the second.
fn deepseek_v3_classes() -> Vec<(String, CharClass)> {
    let cjk = DEEPSEEK_V3_PATTERNS[1].trim_end_matches('+');
    vec![
        (r"\p{N}".to_string(), CharClass::Number),
        (format!(r"[[{cjk}--\p{{N}}]&&[\p{{L}}\p{{M}}]]"), CharClass::CjkWord),
        (format!(r"[[{cjk}--\p{{N}}]&&[\p{{P}}\p{{S}}]]"), CharClass::CjkPunct),
        (format!(r"[{cjk}--[\p{{N}}\p{{L}}\p{{M}}\p{{P}}\p{{S}}]]"), CharClass::CjkOther),
        (format!(r"[\p{{L}}--{cjk}]"), CharClass::Letter),
        (format!(r"[\p{{M}}--{cjk}]"), CharClass::Mark),
        (format!(r"[[\p{{P}}\p{{S}}]--{cjk}]"), CharClass::Punct),
        (format!(r"[\s--{cjk}]"), CharClass::Space),
    ]
}

pub struct Scanner {
    family: Family,
    classes: CharClasses,
    /// For case-insensitive contractions: each character `(?i)` lets stand for one
    /// of the contractions' ASCII letters (`ſ` for `s`, for one).
    folds: Vec<(char, char)>,
    /// Matches in ASCII text, 64 bytes at a time.
    ascii_windows: Option<AsciiWindows>,
}

impl Scanner {
    /// The scanner for `pattern`, when it is one of the recognized patterns exactly.
    pub fn for_pattern(pattern: &str) -> Option<Scanner> {
        let family = match pattern {
            BYTE_LEVEL_PATTERN => Family::Gpt2,
            LLAMA3_PATTERN => Family::Cl100k { digits: 3 },
            QWEN2_PATTERN => Family::Cl100k { digits: 1 },
            O200K_PATTERN => Family::O200k,
            _ => return None,
        };
        let folds = if family == Family::Gpt2 { Vec::new() } else { contraction_folds()? };
        let classes = CharClasses::new(if family == Family::O200k { CASED_CLASSES } else { WORD_CLASSES })?;
        Some(Scanner::with_classes(family, classes, folds))
    }

    /// The scanner for a pre-tokenizer's `Split`s (each `Isolated`, not inverted)
    /// with these patterns, when they are a recognized sequence exactly: its
    /// matches are then the pieces of all the steps (the parts no pattern matched
    /// included), as one `Isolated` step would give them.
    pub fn for_split_sequence(patterns: &[&str]) -> Option<Scanner> {
        // A line break in a pattern means the same as its escape, and both spellings are found.
        let escaped = |pattern: &str| pattern.replace('\r', r"\r").replace('\n', r"\n");
        let same = |recognized: &[&str]| {
            recognized.len() == patterns.len() && recognized.iter().zip(patterns).all(|(a, b)| escaped(a) == escaped(b))
        };
        if !same(&DEEPSEEK_V3_PATTERNS) {
            return None;
        }
        Some(Scanner::with_classes(Family::DeepSeekV3, CharClasses::new(&deepseek_v3_classes())?, Vec::new()))
    }

    fn with_classes(family: Family, classes: CharClasses, folds: Vec<(char, char)>) -> Scanner {
        // DeepSeek-V3 names punctuation apart; what is left no alternative matches alone.
        let other = if family == Family::DeepSeekV3 { AsciiClass::Unmatched } else { AsciiClass::Other };
        let ascii_windows = match (family, classes.ascii_classes(other)) {
            (Family::Gpt2, Some(ascii)) => Some(AsciiWindows::gpt2(&ascii)),
            (Family::Cl100k { digits }, Some(ascii)) => Some(AsciiWindows::cl100k(&ascii, digits)),
            (Family::O200k, Some(ascii)) => Some(AsciiWindows::o200k(&ascii)),
            (Family::DeepSeekV3, Some(ascii)) => Some(AsciiWindows::deepseek_v3(&ascii)),
            _ => None,
        };
        Scanner { family, classes, folds, ascii_windows }
    }

    /// Calls `on_match` with each match's byte range in `text`, left to right.
    pub fn for_each_match(&self, text: &str, mut on_match: impl PieceSink) {
        let mut at = 0;
        // Matches that start before here are found one at a time: the table
        // (where there is one) stopped at a byte it cannot decide.
        let mut one_at_a_time_until = if self.ascii_windows.is_some() { 0 } else { text.len() };
        let ignore_case = self.family != Family::Gpt2;
        let contraction_end = |after: usize| self.contraction_end(text, after, ignore_case);
        while at < text.len() {
            if let Some(windows) = &self.ascii_windows
                && at >= one_at_a_time_until
            {
                match windows.matches_from(text, at, contraction_end, &mut on_match) {
                    Stop::End => return,
                    Stop::At { resume, stop } => (at, one_at_a_time_until) = (resume, stop + 1),
                }
                continue;
            }
            let end = match self.family {
                Family::Gpt2 => self.gpt2_match(text, at),
                Family::Cl100k { digits } => self.cl100k_match(text, at, digits),
                Family::O200k => self.o200k_match(text, at),
                Family::DeepSeekV3 => self.deepseek_v3_piece(text, at),
            };
            on_match.take(at, end);
            at = end;
        }
    }

    fn gpt2_match(&self, text: &str, at: usize) -> usize {
        let (c, class, len) = self.classes.at(text, at);
        if c == '\''
            && let Some(end) = self.contraction_end(text, at + 1, false)
        {
            return end;
        }
        // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: a space takes the run after it.
        if c == ' '
            && let Some((_, next, _)) = self.classes.get(text, at + 1)
            && next != CharClass::Space
        {
            return self.classes.run_end(text, at + 1, next);
        }
        match class {
            CharClass::Space => self.whitespace_end(text, at, NO_CLASS),
            _ => self.classes.run_end(text, at + len, class),
        }
    }

    fn cl100k_match(&self, text: &str, at: usize, digits: usize) -> usize {
        let (c, class, len) = self.classes.at(text, at);
        if c == '\''
            && let Some(end) = self.contraction_end(text, at + 1, true)
        {
            return end;
        }
        // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if class == CharClass::Letter {
            return self.classes.run_end(text, at + len, CharClass::Letter);
        }
        let next = self.classes.get(text, at + len).map(|(_, class, _)| class);
        if class != CharClass::Number && c != '\r' && c != '\n' && next == Some(CharClass::Letter) {
            return self.classes.run_end(text, at + len, CharClass::Letter);
        }
        // `\p{N}{1,digits}`
        if class == CharClass::Number {
            return self.classes.run_end_at_most(text, at, CharClass::Number, digits);
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        if c == ' ' && next == Some(CharClass::Other) {
            return line_breaks_end(text, self.classes.run_end(text, at + 1, CharClass::Other));
        }
        if class == CharClass::Other {
            return line_breaks_end(text, self.classes.run_end(text, at + len, CharClass::Other));
        }
        self.line_breaks_or_whitespace_end(text, at, NO_CLASS)
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at whitespace, where the text the pattern sees
    /// ends at a character of `piece_ends` (see `whitespace_end`).
    fn line_breaks_or_whitespace_end(&self, text: &str, at: usize, piece_ends: ClassSet) -> usize {
        // `\s*[\r\n]+`: backtracking from the run's end, the last line break ends it.
        let run_end = self.classes.run_end(text, at, CharClass::Space);
        if let Some(last_break) = text.as_bytes()[at..run_end].iter().rposition(|&b| b == b'\r' || b == b'\n') {
            return at + last_break + 1;
        }
        self.whitespace_end(text, at, piece_ends)
    }

    fn o200k_match(&self, text: &str, at: usize) -> usize {
        let (c, class, len) = self.classes.at(text, at);
        // The two word alternatives, each first with `[^\r\n\p{L}\p{N}]?` taking the
        // character before the word, then without it, in the pattern's order.
        let prefix = c != '\r' && c != '\n' && matches!(class, CharClass::Space | CharClass::Other | CharClass::Mark);
        let word = prefix
            .then(|| self.cased_word_end(text, at + len))
            .flatten()
            .or_else(|| self.cased_word_end(text, at))
            .or_else(|| prefix.then(|| self.upper_word_end(text, at + len)).flatten())
            .or_else(|| self.upper_word_end(text, at));
        if let Some(end) = word {
            // `(?i:'s|'t|'re|'ve|'m|'ll|'d)?`
            return match text.as_bytes().get(end) {
                Some(b'\'') => self.contraction_end(text, end + 1, true).unwrap_or(end),
                _ => end,
            };
        }
        // `\p{N}{1,3}`
        if class == CharClass::Number {
            return self.classes.run_end_at_most(text, at, CharClass::Number, 3);
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        let next = self.classes.get(text, at + len).map(|(_, class, _)| class);
        if c == ' ' && next.is_some_and(|next| in_set(NEITHER, next)) {
            return line_breaks_or_slashes_end(text, self.classes.run_end_in(text, at + 1, NEITHER));
        }
        if in_set(NEITHER, class) {
            return line_breaks_or_slashes_end(text, self.classes.run_end_in(text, at, NEITHER));
        }
        self.line_breaks_or_whitespace_end(text, at, NO_CLASS)
    }

    /// The end of DeepSeek-V3's piece at `at`. Its third pattern splits each piece
    /// of the first two on its own, so there a look-ahead sees the end of a run
    /// of numbers or CJK characters as the end of the text.
    fn deepseek_v3_piece(&self, text: &str, at: usize) -> usize {
        let (c, class, len) = self.classes.at(text, at);
        match class {
            // The first `Split`, `\p{N}{1,3}`: the third matches nothing in a number.
            CharClass::Number => return self.classes.run_end_at_most(text, at, CharClass::Number, 3),
            // A run of the second, `[一-龥぀-ゟ゠-ヿ]+`, split by the third.
            CharClass::CjkWord => return self.classes.run_end(text, at, CharClass::CjkWord),
            CharClass::CjkPunct => return self.classes.run_end(text, at, CharClass::CjkPunct),
            CharClass::CjkOther => {
                return self.deepseek_v3_unmatched_end(text, at + len, CharClass::CjkOther, CJK_WORD);
            }
            _ => {}
        }
        let bytes = text.as_bytes();
        // `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+`: all of ASCII's punctuation.
        if c.is_ascii_punctuation() && bytes.get(at + 1).is_some_and(u8::is_ascii_alphabetic) {
            return at + 1 + bytes[at + 1..].iter().take_while(|byte| byte.is_ascii_alphabetic()).count();
        }
        // `[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+`, with the character before or without.
        if in_set(LETTER_OR_MARK, class) {
            return self.classes.run_end_in(text, at, LETTER_OR_MARK);
        }
        let next = self.classes.get(text, at + len).map(|(_, class, _)| class);
        if next.is_some_and(|next| in_set(LETTER_OR_MARK, next)) && c != '\r' && c != '\n' && class != CharClass::Punct
        {
            return self.classes.run_end_in(text, at + len, LETTER_OR_MARK);
        }
        // ` ?[\p{P}\p{S}]+[\r\n]*`
        if c == ' ' && next == Some(CharClass::Punct) {
            return line_breaks_end(text, self.classes.run_end(text, at + 1, CharClass::Punct));
        }
        if class == CharClass::Punct {
            return line_breaks_end(text, self.classes.run_end(text, at, CharClass::Punct));
        }
        // `\s*[\r\n]+|\s+(?!\S)|\s+`, on text that ends at a number or CJK character.
        if class == CharClass::Space {
            return self.line_breaks_or_whitespace_end(text, at, NUMBER_OR_CJK);
        }
        self.deepseek_v3_unmatched_end(text, at + len, CharClass::Other, LETTER_OR_MARK)
    }

    /// After a character of `class` ending at `after`, which only the letters of
    /// `word` after it make a match of (as the one before them): that match, else
    /// the piece of what no pattern matches, up to where a match starts.
    fn deepseek_v3_unmatched_end(&self, text: &str, after: usize, class: CharClass, word: ClassSet) -> usize {
        let starts_word = |at: usize| self.classes.get(text, at).is_some_and(|(_, next, _)| in_set(word, next));
        if starts_word(after) {
            return self.classes.run_end_in(text, after, word);
        }
        let mut end = after;
        while let Some((_, found, len)) = self.classes.get(text, end)
            && found == class
            && !starts_word(end + len)
        {
            end += len;
        }
        end
    }

    /// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+` at `at`, if it matches.
    fn cased_word_end(&self, text: &str, at: usize) -> Option<usize> {
        let upper_end = self.classes.run_end_in(text, at, UPPER_LIKE);
        if let Some((_, CharClass::LowerLetter, _)) = self.classes.get(text, upper_end) {
            return Some(self.classes.run_end_in(text, upper_end, LOWER_LIKE));
        }
        // Backtracking: the upper-case part gives back characters until one can be
        // the lower-case part; what follows it (upper case only) cannot continue it.
        let last_lower =
            text[at..upper_end].char_indices().rev().find(|&(_, c)| in_set(LOWER_LIKE, self.classes.class_of(c)));
        last_lower.map(|(offset, c)| at + offset + c.len_utf8())
    }

    /// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*` where
    /// `cased_word_end` found nothing: then no lower-case character follows the run.
    fn upper_word_end(&self, text: &str, at: usize) -> Option<usize> {
        let end = self.classes.run_end_in(text, at, UPPER_LIKE);
        (end > at).then_some(end)
    }

    /// `\s+(?!\S)|\s+`: a whitespace run up to the end of the text, or all of it
    /// but its last character when something follows (if that leaves any). The
    /// text ends before a character of `piece_ends` too: there an earlier `Split`
    /// ended the piece the pattern sees (DeepSeek-V3's numbers and CJK).
    fn whitespace_end(&self, text: &str, at: usize, piece_ends: ClassSet) -> usize {
        let end = self.classes.run_end(text, at, CharClass::Space);
        let piece_ends_here = || {
            piece_ends != NO_CLASS && self.classes.get(text, end).is_some_and(|(_, class, _)| in_set(piece_ends, class))
        };
        if end == text.len() || piece_ends_here() {
            return end;
        }
        let last = text[at..end].chars().next_back().map_or(0, char::len_utf8);
        if end - last > at { end - last } else { end }
    }

    /// Where the contraction after an apostrophe at `at - 1` ends, if one is there.
    fn contraction_end(&self, text: &str, at: usize, ignore_case: bool) -> Option<usize> {
        CONTRACTIONS.iter().find_map(|letters| {
            let mut end = at;
            for letter in letters.chars() {
                let c = text[end..].chars().next()?;
                let same = c == letter || (ignore_case && self.folds.contains(&(c, letter)));
                if !same {
                    return None;
                }
                end += c.len_utf8();
            }
            Some(end)
        })
    }
}

/// `[\r\n]*` from `at`.
fn line_breaks_end(text: &str, at: usize) -> usize {
    at + text.as_bytes()[at..].iter().take_while(|&&b| b == b'\r' || b == b'\n').count()
}

/// `[\r\n/]*` from `at`.
fn line_breaks_or_slashes_end(text: &str, at: usize) -> usize {
    at + text.as_bytes()[at..].iter().take_while(|&&b| b == b'\r' || b == b'\n' || b == b'/').count()
}

fn in_set(set: ClassSet, class: CharClass) -> bool {
    set & (1 << class as u8) != 0
}

/// Which class each character is in: a table for ASCII, sorted ranges beyond.
struct CharClasses {
    ascii: [CharClass; 128],
    /// For each class, whether each byte is an ASCII character of it (bytes from
    /// 0x80 never are), for the tight loop of `run_end`.
    ascii_in: [[bool; 256]; CLASSES],
    /// Disjoint `(first, last, class)` ranges of the non-ASCII characters of the
    /// classes given, sorted; every other character is `Other`.
    ranges: Vec<(u32, u32, CharClass)>,
}

impl CharClasses {
    /// The classes defined by one-class patterns, which must not overlap.
    fn new(classes: &[(impl AsRef<str>, CharClass)]) -> Option<CharClasses> {
        let mut ranges = Vec::new();
        for (pattern, class) in classes {
            ranges.extend(unicode_ranges(pattern.as_ref())?.into_iter().map(|(first, last)| (first, last, *class)));
        }
        ranges.sort_unstable_by_key(|&(first, _, _)| first);
        // The classes are disjoint by Unicode's definitions; should a table
        // ever say otherwise, the regex engines decide instead.
        if ranges.windows(2).any(|pair| pair[0].1 >= pair[1].0) {
            return None;
        }
        let mut ascii = [CharClass::Other; 128];
        for (code, slot) in ascii.iter_mut().enumerate() {
            *slot = lookup(&ranges, code as u32);
        }
        let mut ascii_in = [[false; 256]; CLASSES];
        for (code, class) in ascii.iter().enumerate() {
            ascii_in[*class as usize][code] = true;
        }
        ranges.retain(|&(_, last, _)| last >= 128);
        Some(CharClasses { ascii, ascii_in, ranges })
    }

    /// The ASCII characters' classes for `AsciiWindows`, if all are among its own;
    /// `Other` is `other` there.
    fn ascii_classes(&self, other: AsciiClass) -> Option<[AsciiClass; 128]> {
        let mut classes = [AsciiClass::Other; 128];
        for (class, &ours) in classes.iter_mut().zip(&self.ascii) {
            *class = match ours {
                CharClass::Letter => AsciiClass::Letter,
                CharClass::UpperLetter => AsciiClass::UpperLetter,
                CharClass::LowerLetter => AsciiClass::LowerLetter,
                CharClass::Number => AsciiClass::Number,
                CharClass::Space => AsciiClass::Whitespace,
                CharClass::Other => other,
                CharClass::Punct => AsciiClass::Other,
                _ => return None,
            };
        }
        Some(classes)
    }

    fn class_of(&self, c: char) -> CharClass {
        match self.ascii.get(c as usize) {
            Some(&class) => class,
            None => lookup(&self.ranges, c as u32),
        }
    }

    /// The character at byte `at` (a character boundary), its class and length.
    #[inline(always)]
    fn get(&self, text: &str, at: usize) -> Option<(char, CharClass, usize)> {
        let byte = *text.as_bytes().get(at)?;
        if byte < 0x80 {
            return Some((byte as char, self.ascii[byte as usize], 1));
        }
        let c = text[at..].chars().next()?;
        Some((c, self.class_of(c), c.len_utf8()))
    }

    /// `get` where `at` is known to be inside the text.
    #[inline(always)]
    fn at(&self, text: &str, at: usize) -> (char, CharClass, usize) {
        self.get(text, at).unwrap_or(('\0', CharClass::Other, 1))
    }

    /// The end of the run of `class` characters starting at `at`: ASCII stretches
    /// by one table lookup per byte, the rest by character.
    fn run_end(&self, text: &str, mut at: usize, class: CharClass) -> usize {
        let bytes = text.as_bytes();
        let in_class = &self.ascii_in[class as usize];
        loop {
            while at < bytes.len() && in_class[bytes[at] as usize] {
                at += 1;
            }
            if at == bytes.len() || bytes[at] < 0x80 {
                return at;
            }
            match text[at..].chars().next() {
                Some(c) if self.class_of(c) == class => at += c.len_utf8(),
                _ => return at,
            }
        }
    }

    /// The end of the run of characters of any class in `set` starting at `at`.
    fn run_end_in(&self, text: &str, mut at: usize, set: ClassSet) -> usize {
        let bytes = text.as_bytes();
        while let Some(&byte) = bytes.get(at) {
            if byte < 0x80 {
                if !in_set(set, self.ascii[byte as usize]) {
                    break;
                }
                at += 1;
            } else {
                match text[at..].chars().next() {
                    Some(c) if in_set(set, self.class_of(c)) => at += c.len_utf8(),
                    _ => break,
                }
            }
        }
        at
    }

    fn run_end_at_most(&self, text: &str, mut at: usize, class: CharClass, most: usize) -> usize {
        let bytes = text.as_bytes();
        let mut taken = 0;
        while taken < most && at < bytes.len() {
            if bytes[at] < 0x80 {
                if self.ascii[bytes[at] as usize] != class {
                    break;
                }
                at += 1;
            } else {
                let Some(c) = text[at..].chars().next() else { break };
                if self.class_of(c) != class {
                    break;
                }
                at += c.len_utf8();
            }
            taken += 1;
        }
        at
    }
}

fn lookup(ranges: &[(u32, u32, CharClass)], code: u32) -> CharClass {
    let after = ranges.partition_point(|&(first, _, _)| first <= code);
    match after.checked_sub(1).map(|index| ranges[index]) {
        Some((_, last, class)) if code <= last => class,
        _ => CharClass::Other,
    }
}

/// The code point ranges of a one-class pattern, as the regex engines see them.
fn unicode_ranges(pattern: &str) -> Option<Vec<(u32, u32)>> {
    let hir = regex_syntax::parse(pattern).ok()?;
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => {
            Some(class.ranges().iter().map(|range| (range.start() as u32, range.end() as u32)).collect())
        }
        _ => None,
    }
}

/// Each character that `(?i)` matches for a contraction letter, with that letter.
fn contraction_folds() -> Option<Vec<(char, char)>> {
    let mut letters: Vec<char> = CONTRACTIONS.concat().chars().collect();
    letters.sort_unstable();
    letters.dedup();
    let mut folds = Vec::new();
    for letter in letters {
        for (first, last) in unicode_ranges(&format!("(?i){letter}"))? {
            folds.extend((first..=last).filter_map(char::from_u32).map(|c| (c, letter)));
        }
    }
    Some(folds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces<'t>(scanner: &Scanner, text: &'t str) -> Vec<&'t str> {
        let mut found = Vec::new();
        scanner.for_each_match(text, &mut |start, end| found.push(&text[start..end]));
        found
    }

    #[test]
    fn only_the_exact_patterns_get_a_scanner() {
        assert!(Scanner::for_pattern(BYTE_LEVEL_PATTERN).is_some());
        assert!(Scanner::for_pattern(LLAMA3_PATTERN).is_some());
        assert!(Scanner::for_pattern(QWEN2_PATTERN).is_some());
        assert!(Scanner::for_pattern(O200K_PATTERN).is_some());
        assert_eq!(O200K_PATTERN, tiktoken_rs::O200K_BASE_PAT_STR);
        assert!(Scanner::for_pattern(&LLAMA3_PATTERN.replace("{1,3}", "{1,4}")).is_none());
        assert!(Scanner::for_pattern(&format!("{BYTE_LEVEL_PATTERN}|x")).is_none());
    }

    #[test]
    fn gpt2_splits_as_its_tokenizer_documents() {
        let gpt2 = Scanner::for_pattern(BYTE_LEVEL_PATTERN).unwrap();
        assert_eq!(pieces(&gpt2, "Hello world's 123  end   "), ["Hello", " world", "'s", " 123", " ", " end", "   "]);
        assert_eq!(pieces(&gpt2, "I'LL ſs"), ["I", "'", "LL", " ſs"]);
    }

    #[test]
    fn llama3_folds_case_in_contractions_and_groups_three_digits() {
        let llama3 = Scanner::for_pattern(LLAMA3_PATTERN).unwrap();
        assert_eq!(
            pieces(&llama3, "I'LL 12345 'ſ\r\n\n  x"),
            ["I", "'LL", " ", "123", "45", " '", "ſ", "\r\n\n", " ", " x"]
        );
        let qwen2 = Scanner::for_pattern(QWEN2_PATTERN).unwrap();
        assert_eq!(pieces(&qwen2, "x 123"), ["x", " ", "1", "2", "3"]);
    }

    #[test]
    fn deepseek_v3_is_recognized_in_both_spellings_of_its_line_breaks() {
        assert!(Scanner::for_split_sequence(&DEEPSEEK_V3_PATTERNS).is_some());
        let escaped = DEEPSEEK_V3_PATTERNS.map(|pattern| pattern.replace('\r', r"\r").replace('\n', r"\n"));
        assert_ne!(escaped[2], DEEPSEEK_V3_PATTERNS[2]);
        assert!(Scanner::for_split_sequence(&escaped.each_ref().map(String::as_str)).is_some());
        assert!(Scanner::for_split_sequence(&DEEPSEEK_V3_PATTERNS[1..]).is_none());
        let [numbers, cjk, rest] = DEEPSEEK_V3_PATTERNS;
        assert!(Scanner::for_split_sequence(&[cjk, numbers, rest]).is_none());
        assert!(Scanner::for_split_sequence(&[numbers, cjk, &rest.replace("{|}~", "{|}")]).is_none());
    }

    #[test]
    fn deepseek_v3_splits_numbers_then_cjk_then_the_rest() {
        let deepseek = Scanner::for_split_sequence(&DEEPSEEK_V3_PATTERNS).unwrap();
        let split = |text| pieces(&deepseek, text).join("|");
        // As Python `tokenizers` 0.23 splits them with DeepSeek-V3's pre-tokenizer: the
        // spaces before a number are one piece, those before a letter give it one.
        assert_eq!(
            split("abc1234567def 日本語のテキスト  x.foo (é\n\n  y\u{200b}\u{200b}z  7 \u{1}\u{2}"),
            "abc|123|456|7|def| |日本語のテキスト| | x|.foo| (|é|\n\n| | y|\u{200b}|\u{200b}z|  |7| |\u{1}\u{2}"
        );
        // The third pattern splits CJK runs too: a symbol (゛), an unassigned code
        // point (U+3040) and punctuation (・) in the range are not letters.
        assert_eq!(split("゛一 一\u{3040} ア・イ"), "゛|一| |一|\u{3040}| |ア|・|イ");
    }

    #[test]
    fn o200k_splits_words_by_case_and_keeps_marks_and_contractions_on_them() {
        let o200k = Scanner::for_pattern(O200K_PATTERN).unwrap();
        assert_eq!(
            pieces(&o200k, "camelCase HTTPServer I'LL e\u{301}t 12345 a.\n/x"),
            ["camel", "Case", " HTTPServer", " I'LL", " e\u{301}t", " ", "123", "45", " a", ".\n/", "x"]
        );
        // A word of capitals and an uncased letter ends at the uncased letter.
        assert_eq!(pieces(&o200k, "日A 日"), ["日", "A", " 日"]);
    }
}

#[cfg(test)]
mod property_tests {
    use super::*;
    use proptest::prelude::*;

    /// Characters where the classes and the alternatives meet: contraction
    /// letters and their case folds, line breaks and Unicode spaces, combining
    /// marks (neither letters nor numbers), non-ASCII numbers, CJK and emoji, and
    /// for o200k upper, lower, title-case and uncased letters and `/`.
    const TRICKY: &[char] = &[
        '\'', 's', 'S', 'ſ', 't', 'T', 'r', 'e', 'v', 'm', 'l', 'L', 'd', 'K', '\u{212a}', ' ', ' ', ' ', '\t', '\r',
        '\n', '\u{b}', '\u{c}', '\u{85}', '\u{a0}', '\u{2028}', '\u{3000}', '\u{1680}', '0', '7', '²', '½', 'Ⅻ', '٣',
        '߀', 'é', '\u{301}', '\u{200d}', 'a', 'Z', 'ß', 'İ', 'Ω', '日', 'ア', '😀', '🇫', '.', ',', '-', '(', '"', '…',
        '_', '$', '\u{0}', '\u{7f}', '\u{ad}', '\u{fe0f}', 'ǅ', 'ʰ', '/', 'A', 'b', 'Q', '\u{903}', '\u{20dd}',
        // DeepSeek-V3's CJK range: its ends, punctuation, a symbol and marks inside
        // it, and numbers and letters just outside.
        '一', '龥', '\u{9fa6}', '\u{3040}', 'ゟ', '゠', 'ヿ', '・', 'ー', '\u{3099}', '゛', '〇', '々', '十',
        '\u{200b}', '\u{1}', '`', '~', '|', '+', '€',
    ];

    fn text() -> impl Strategy<Value = String> {
        let tricky = proptest::sample::select(TRICKY);
        let char = prop_oneof![4 => tricky, 1 => any::<char>()];
        proptest::collection::vec(char, 0..48).prop_map(String::from_iter)
    }

    fn regex_matches(regex: &fancy_regex::Regex, text: &str) -> Vec<(usize, usize)> {
        regex.find_iter(text).map(|found| found.map(|found| (found.start(), found.end())).unwrap()).collect()
    }

    fn scanner_matches(scanner: &Scanner, text: &str) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        scanner.for_each_match(text, &mut |start, end| found.push((start, end)));
        found
    }

    /// Each pattern with its scanner and its `fancy-regex`, compiled once for all cases.
    static PAIRS: std::sync::LazyLock<Vec<(Scanner, fancy_regex::Regex)>> = std::sync::LazyLock::new(|| {
        [BYTE_LEVEL_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN, O200K_PATTERN]
            .into_iter()
            .map(|pattern| (Scanner::for_pattern(pattern).unwrap(), fancy_regex::Regex::new(pattern).unwrap()))
            .collect()
    });

    /// DeepSeek-V3's scanner and its `Split`s on `fancy-regex`, compiled once for all cases.
    static DEEPSEEK_V3: std::sync::LazyLock<(Scanner, Vec<fancy_regex::Regex>)> = std::sync::LazyLock::new(|| {
        let regexes = DEEPSEEK_V3_PATTERNS.iter().map(|pattern| fancy_regex::Regex::new(pattern).unwrap()).collect();
        (Scanner::for_split_sequence(&DEEPSEEK_V3_PATTERNS).unwrap(), regexes)
    });

    /// `Split` with `Isolated` of each pattern in turn, as `tokenizers` runs them:
    /// each splits every piece of the one before as its own string, keeping the
    /// matches and the non-empty parts between them.
    fn isolated_splits(regexes: &[fancy_regex::Regex], text: &str) -> Vec<(usize, usize)> {
        let mut pieces = vec![(0, text.len())];
        for regex in regexes {
            let mut next = Vec::new();
            for (start, end) in pieces {
                let mut at = start;
                for found in regex.find_iter(&text[start..end]) {
                    let found = found.unwrap();
                    next.extend([(at, start + found.start()), (start + found.start(), start + found.end())]);
                    at = start + found.end();
                }
                next.push((at, end));
            }
            pieces = next.into_iter().filter(|(start, end)| start != end).collect();
        }
        pieces
    }

    fn every_scanner_agrees_with_its_regex(text: &str) -> Result<(), TestCaseError> {
        for (scanner, regex) in PAIRS.iter() {
            prop_assert_eq!(scanner_matches(scanner, text), regex_matches(regex, text), "{}", regex.as_str());
        }
        let (deepseek, regexes) = &*DEEPSEEK_V3;
        prop_assert_eq!(scanner_matches(deepseek, text), isolated_splits(regexes, text), "DeepSeek-V3");
        Ok(())
    }

    /// Mostly ASCII and longer than a 64-byte block of `AsciiWindows`, with
    /// contractions, whitespace runs and now and then a character beyond ASCII.
    fn mostly_ascii_text() -> impl Strategy<Value = String> {
        let ascii = proptest::sample::select(TRICKY.iter().copied().filter(char::is_ascii).collect::<Vec<_>>());
        let char = prop_oneof![12 => ascii, 1 => proptest::sample::select(TRICKY), 1 => any::<char>()];
        proptest::collection::vec(char, 0..200).prop_map(String::from_iter)
    }

    #[test]
    fn a_contraction_across_two_blocks_ends_the_match_before_the_next() {
        // `'s` on bytes 63 and 64 ends in the next block, where a match starts
        // after it (found by the property test below).
        let text = format!("{}\0{}s's ", "'".repeat(11), "'".repeat(50));
        every_scanner_agrees_with_its_regex(&text).unwrap();
    }

    #[test]
    fn runs_of_digits_are_cut_into_groups_across_blocks() {
        // Runs of every length up to two blocks, starting at every place of a
        // block, after a letter, a space, an apostrophe or an other character and
        // before one, so that groups of digits start in one block and go on in the next.
        for offset in 0..66 {
            for len in 1..140 {
                for (before, after) in [("a", " x"), (" ", "a"), ("'", "'s"), (".", "\n")] {
                    let text = format!("{}{before}{}{after}7", "b".repeat(offset), &"0123456789".repeat(14)[..len]);
                    every_scanner_agrees_with_its_regex(&text).unwrap();
                }
            }
        }
    }

    #[test]
    fn contractions_end_matches_at_every_place_of_a_block() {
        // Each contraction, and near misses, at every place around a block's end,
        // after a letter, a space, a line break or an other character, and before
        // a letter, so that the match after it starts inside a run of letters.
        for offset in 0..70 {
            for contraction in ["'s", "'t", "'re", "'VE", "'m", "'ll", "'D", "'x", "'r", "'"] {
                for before in ["a", " ", "\n", "."] {
                    let text =
                        format!("{}{before}{contraction}ing's 's", "b ".repeat(offset / 2) + &"c".repeat(offset % 2));
                    every_scanner_agrees_with_its_regex(&text).unwrap();
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]

        #[test]
        fn the_tables_for_ascii_match_like_fancy_regex(text in mostly_ascii_text()) {
            every_scanner_agrees_with_its_regex(&text)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20000))]

        #[test]
        fn every_scanner_matches_like_fancy_regex(text in text()) {
            every_scanner_agrees_with_its_regex(&text)?;
        }
    }
}
