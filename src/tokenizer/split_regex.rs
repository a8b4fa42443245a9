//! A split pattern compiled for speed with the same matches as `fancy-regex`, the
//! engine `tokenizers` uses: the common families' patterns get a hand-written
//! scanner (see `scanner`); other patterns without look-around go to the `regex`
//! crate's automata; the byte-level families' `...|\s+(?!\S)|\s+` ending is
//! matched as `...|\s+` and then given back its last whitespace character where
//! the look-ahead would have (see `whitespace_run_matches`). Anything else stays
//! on `fancy-regex`.
//!
//! The families' patterns match at almost every position, so each match is first
//! looked for *anchored* where the previous one ended, with a forward lazy DFA
//! alone; only when nothing starts there does an unanchored search (forward,
//! then backward for the start) find the next match.

use std::cell::RefCell;

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input, PatternID};
use thread_local::ThreadLocal;

use super::scanner::Scanner;

/// The ending whose look-ahead the automata cannot run.
const LOOKAHEAD_ENDING: &str = r"|\s+(?!\S)|\s+";

pub enum SplitRegex {
    Scanner(Box<Scanner>),
    Backtracking(fancy_regex::Regex),
    Automaton(Automaton),
    /// Pattern 0 is everything before the ending, pattern 1 is `\s+`.
    WhitespaceRun(Automaton),
}

/// The same patterns twice: a forward DFA for anchored matches, and the meta
/// regex for finding where the next match starts.
pub struct Automaton {
    anchored: DFA,
    caches: ThreadLocal<RefCell<Cache>>,
    unanchored: Regex,
}

/// One match: its range and which pattern matched.
#[derive(Debug, Clone, Copy)]
struct Found {
    start: usize,
    end: usize,
    pattern: PatternID,
}

impl Automaton {
    fn new(patterns: &[&str]) -> Option<Automaton> {
        Some(Automaton {
            anchored: DFA::new_many(patterns).ok()?,
            caches: ThreadLocal::new(),
            unanchored: Regex::new_many(patterns).ok()?,
        })
    }

    /// Calls `on_match` with every match, left to right; it returns where the
    /// next match may start (after the start, since the patterns never match empty).
    fn for_each(&self, text: &str, on_match: &mut dyn FnMut(Found) -> usize) {
        let cache = &mut *self.caches.get_or(|| RefCell::new(self.anchored.create_cache())).borrow_mut();
        let mut at = 0;
        while let Some(found) = self.find_from(cache, text, at) {
            at = on_match(found);
        }
    }

    /// The leftmost-first match starting at `at` or after it.
    fn find_from(&self, cache: &mut Cache, text: &str, at: usize) -> Option<Found> {
        let input = Input::new(text).range(at..).anchored(Anchored::Yes);
        // An error (the lazy DFA giving up, which it does not as configured) leaves it to the meta regex.
        if let Ok(Some(found)) = self.anchored.try_search_fwd(cache, &input) {
            return Some(Found { start: at, end: found.offset(), pattern: found.pattern() });
        }
        let found = self.unanchored.search(&Input::new(text).range(at..))?;
        Some(Found { start: found.start(), end: found.end(), pattern: found.pattern() })
    }
}

impl SplitRegex {
    pub fn new(pattern: &str) -> Result<SplitRegex, String> {
        match Scanner::for_pattern(pattern) {
            Some(scanner) => Ok(SplitRegex::Scanner(Box::new(scanner))),
            None => SplitRegex::with_regex_engines(pattern),
        }
    }

    /// The pattern on the regex engines alone, with no scanner.
    fn with_regex_engines(pattern: &str) -> Result<SplitRegex, String> {
        let backtracking = fancy_regex::Regex::new(pattern)
            .map_err(|err| format!("cannot compile the split pattern {pattern:?}: {err}"))?;
        if let Some(head) = pattern.strip_suffix(LOOKAHEAD_ENDING)
            && never_empty(head)
            && let Some(automaton) = Automaton::new(&[head, r"\s+"])
        {
            return Ok(SplitRegex::WhitespaceRun(automaton));
        }
        if never_empty(pattern)
            && let Some(automaton) = Automaton::new(&[pattern])
        {
            return Ok(SplitRegex::Automaton(automaton));
        }
        Ok(SplitRegex::Backtracking(backtracking))
    }

    /// Calls `on_match` with each match's byte range in `text`, left to right. A
    /// backtracking error (its limit) ends the matches there, as in `tokenizers`.
    pub fn for_each_match(&self, text: &str, mut on_match: impl FnMut(usize, usize)) {
        match self {
            SplitRegex::Scanner(scanner) => scanner.for_each_match(text, on_match),
            SplitRegex::Backtracking(regex) => {
                for found in regex.find_iter(text) {
                    let Ok(found) = found else { break };
                    on_match(found.start(), found.end());
                }
            }
            SplitRegex::Automaton(automaton) => automaton.for_each(text, &mut |found| {
                on_match(found.start, found.end);
                found.end
            }),
            SplitRegex::WhitespaceRun(automaton) => whitespace_run_matches(automaton, text, &mut on_match),
        }
    }
}

/// `\s+(?!\S)` before `\s+` takes a whitespace run up to the end of the text, or
/// all of it but its last character when something follows (if that leaves any).
fn whitespace_run_matches(automaton: &Automaton, text: &str, on_match: &mut dyn FnMut(usize, usize)) {
    automaton.for_each(text, &mut |Found { start, mut end, pattern }| {
        if pattern == PatternID::must(1)
            && end < text.len()
            && let Some(last) = text[start..end].chars().next_back()
            && end - last.len_utf8() > start
        {
            end -= last.len_utf8();
        }
        on_match(start, end);
        end
    });
}

/// Whether no text makes `pattern` match empty: empty matches are where engines'
/// iteration rules differ, so such patterns stay on `fancy-regex`.
fn never_empty(pattern: &str) -> bool {
    regex_syntax::parse(pattern).is_ok_and(|hir| hir.properties().minimum_len().is_some_and(|len| len > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::tokenizer::patterns::LLAMA3_PATTERN as LLAMA3;

    fn matches(regex: &SplitRegex, text: &str) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        regex.for_each_match(text, &mut |start, end| found.push((start, end)));
        found
    }

    #[test]
    fn automata_match_like_fancy_regex_on_whitespace_runs() {
        let fast = SplitRegex::with_regex_engines(LLAMA3).unwrap();
        assert!(matches!(fast, SplitRegex::WhitespaceRun(_)));
        let slow = SplitRegex::Backtracking(fancy_regex::Regex::new(LLAMA3).unwrap());
        for text in [
            "a  b",
            "a \u{3000}\u{3000}b  ",
            "x\n\n  y\t\t\n z   ",
            "  \n\n\t  x   \t",
            " ",
            "a b",
            "I'LL   don't\r\n\r\n  4096   ",
            "\u{a0}\u{a0}é  \u{2003}x",
        ] {
            assert_eq!(matches(&fast, text), matches(&slow, text), "{text:?}");
        }
    }

    #[test]
    fn patterns_with_gaps_between_matches_match_like_fancy_regex() {
        // Where nothing matches at the previous match's end, the next match is searched for.
        for pattern in [r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+", r"-", r"[\r\n]+|\p{P}"] {
            let fast = SplitRegex::new(pattern).unwrap();
            assert!(matches!(fast, SplitRegex::Automaton(_)), "{pattern}");
            let slow = SplitRegex::Backtracking(fancy_regex::Regex::new(pattern).unwrap());
            for text in ["", "abc", "x1234567y89", "日本語のテキスト, and 12 more-text", "a-b--c-", "\n\nline.\r\n"]
            {
                assert_eq!(matches(&fast, text), matches(&slow, text), "{pattern} on {text:?}");
            }
        }
    }

    #[test]
    fn each_pattern_gets_the_fastest_engine_that_matches_alike() {
        assert!(matches!(SplitRegex::new(LLAMA3).unwrap(), SplitRegex::Scanner(_)));
        assert!(matches!(SplitRegex::new(r"\w+(?=,)|\s+").unwrap(), SplitRegex::Backtracking(_)));
        assert!(matches!(SplitRegex::new(r"\p{N}{1,3}").unwrap(), SplitRegex::Automaton(_)));
        assert!(matches!(SplitRegex::new(r"a*").unwrap(), SplitRegex::Backtracking(_)));
    }
}
