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
//! Every one of these patterns matches at every position (each character is a
//! letter, a number, whitespace or something else, and each has an alternative),
//! so the matches tile the text and the scanner only has to find where each ends.

use regex_syntax::hir::{Class, HirKind};

use super::patterns::{BYTE_LEVEL_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN};

/// The contractions both families split off, in the patterns' order.
const CONTRACTIONS: [&str; 7] = ["s", "t", "re", "ve", "m", "ll", "d"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    Gpt2,
    /// `(?i:'s|...|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    Cl100k { digits: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CharClass {
    Letter,
    Number,
    Space,
    Other,
}

pub struct Scanner {
    family: Family,
    classes: CharClasses,
    /// For case-insensitive contractions: each character `(?i)` lets stand for one
    /// of the contractions' ASCII letters (`ſ` for `s`, for one).
    folds: Vec<(char, char)>,
}

impl Scanner {
    /// The scanner for `pattern`, when it is one of the recognized patterns exactly.
    pub fn for_pattern(pattern: &str) -> Option<Scanner> {
        let family = match pattern {
            BYTE_LEVEL_PATTERN => Family::Gpt2,
            LLAMA3_PATTERN => Family::Cl100k { digits: 3 },
            QWEN2_PATTERN => Family::Cl100k { digits: 1 },
            _ => return None,
        };
        let folds = if family == Family::Gpt2 { Vec::new() } else { contraction_folds()? };
        Some(Scanner { family, classes: CharClasses::new()?, folds })
    }

    /// Calls `on_match` with each match's byte range in `text`, left to right.
    pub fn for_each_match(&self, text: &str, mut on_match: impl FnMut(usize, usize)) {
        let mut at = 0;
        while at < text.len() {
            let end = match self.family {
                Family::Gpt2 => self.gpt2_match(text, at),
                Family::Cl100k { digits } => self.cl100k_match(text, at, digits),
            };
            on_match(at, end);
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
            CharClass::Space => self.whitespace_end(text, at),
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
        // `\s*[\r\n]+`: backtracking from the run's end, the last line break ends it.
        let run_end = self.classes.run_end(text, at, CharClass::Space);
        if let Some(last_break) = text.as_bytes()[at..run_end].iter().rposition(|&b| b == b'\r' || b == b'\n') {
            return at + last_break + 1;
        }
        self.whitespace_end(text, at)
    }

    /// `\s+(?!\S)|\s+`: a whitespace run up to the end of the text, or all of it
    /// but its last character when something follows (if that leaves any).
    fn whitespace_end(&self, text: &str, at: usize) -> usize {
        let end = self.classes.run_end(text, at, CharClass::Space);
        if end == text.len() {
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

/// Which class each character is in: a table for ASCII, sorted ranges beyond.
struct CharClasses {
    ascii: [CharClass; 128],
    /// For each class, whether each byte is an ASCII character of it (bytes from
    /// 0x80 never are), for the tight loop of `run_end`.
    ascii_in: [[bool; 256]; 4],
    /// Disjoint `(first, last, class)` ranges of the non-ASCII letters, numbers
    /// and whitespace, sorted; every other character is `Other`.
    ranges: Vec<(u32, u32, CharClass)>,
}

impl CharClasses {
    fn new() -> Option<CharClasses> {
        let mut ranges = Vec::new();
        for (pattern, class) in
            [(r"\p{L}", CharClass::Letter), (r"\p{N}", CharClass::Number), (r"\s", CharClass::Space)]
        {
            ranges.extend(unicode_ranges(pattern)?.into_iter().map(|(first, last)| (first, last, class)));
        }
        ranges.sort_unstable_by_key(|&(first, _, _)| first);
        // The three classes are disjoint by Unicode's definitions; should a table
        // ever say otherwise, the regex engines decide instead.
        if ranges.windows(2).any(|pair| pair[0].1 >= pair[1].0) {
            return None;
        }
        let mut ascii = [CharClass::Other; 128];
        for (code, slot) in ascii.iter_mut().enumerate() {
            *slot = lookup(&ranges, code as u32);
        }
        let mut ascii_in = [[false; 256]; 4];
        for (code, class) in ascii.iter().enumerate() {
            ascii_in[*class as usize][code] = true;
        }
        ranges.retain(|&(_, last, _)| last >= 128);
        Some(CharClasses { ascii, ascii_in, ranges })
    }

    fn class_of(&self, c: char) -> CharClass {
        match self.ascii.get(c as usize) {
            Some(&class) => class,
            None => lookup(&self.ranges, c as u32),
        }
    }

    /// The character at byte `at` (a character boundary), its class and length.
    fn get(&self, text: &str, at: usize) -> Option<(char, CharClass, usize)> {
        let byte = *text.as_bytes().get(at)?;
        if byte < 0x80 {
            return Some((byte as char, self.ascii[byte as usize], 1));
        }
        let c = text[at..].chars().next()?;
        Some((c, self.class_of(c), c.len_utf8()))
    }

    /// `get` where `at` is known to be inside the text.
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
}

#[cfg(test)]
mod property_tests {
    use super::*;
    use proptest::prelude::*;

    /// Characters where the classes and the alternatives meet: contraction
    /// letters and their case folds, line breaks and Unicode spaces, combining
    /// marks (neither letters nor numbers), non-ASCII numbers, CJK and emoji.
    const TRICKY: &[char] = &[
        '\'', 's', 'S', 'ſ', 't', 'T', 'r', 'e', 'v', 'm', 'l', 'L', 'd', 'K', '\u{212a}', ' ', ' ', ' ', '\t', '\r',
        '\n', '\u{b}', '\u{c}', '\u{85}', '\u{a0}', '\u{2028}', '\u{3000}', '\u{1680}', '0', '7', '²', '½', 'Ⅻ', '٣',
        '߀', 'é', '\u{301}', '\u{200d}', 'a', 'Z', 'ß', 'İ', 'Ω', '日', 'ア', '😀', '🇫', '.', ',', '-', '(', '"', '…',
        '_', '$', '\u{0}', '\u{7f}', '\u{ad}', '\u{fe0f}',
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
        [BYTE_LEVEL_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN]
            .into_iter()
            .map(|pattern| (Scanner::for_pattern(pattern).unwrap(), fancy_regex::Regex::new(pattern).unwrap()))
            .collect()
    });

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20000))]

        #[test]
        fn every_scanner_matches_like_fancy_regex(text in text()) {
            for (scanner, regex) in PAIRS.iter() {
                prop_assert_eq!(scanner_matches(scanner, &text), regex_matches(regex, &text), "{}", regex.as_str());
            }
        }
    }
}
