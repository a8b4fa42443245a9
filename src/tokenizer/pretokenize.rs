//! Regex pre-tokenization with the `tokenizers` crate's `Split` semantics: each
//! step splits every piece of the step before it, as its own string (so `$` and
//! look-arounds see only that piece), and keeps or drops the matches as its
//! `behavior` and `invert` say. Patterns mean what they mean to `fancy-regex`,
//! the engine the `tokenizers` build here uses (see `split_regex`).

use super::piece_sink::PieceSink;
use super::split_regex::SplitRegex;

/// What `Split` does with the parts its pattern matches (`SplitDelimiterBehavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    Removed,
    Isolated,
    MergedWithPrevious,
    MergedWithNext,
    Contiguous,
}

impl Behavior {
    pub fn parse(name: &str) -> Option<Behavior> {
        Some(match name {
            "Removed" => Behavior::Removed,
            "Isolated" => Behavior::Isolated,
            "MergedWithPrevious" => Behavior::MergedWithPrevious,
            "MergedWithNext" => Behavior::MergedWithNext,
            "Contiguous" => Behavior::Contiguous,
            _ => return None,
        })
    }
}

pub struct SplitStep {
    pub regex: SplitRegex,
    pub behavior: Behavior,
    pub invert: bool,
}

/// A byte range of the text being split.
pub type Span = (usize, usize);

pub struct PreTokenizer {
    steps: Vec<SplitStep>,
}

impl PreTokenizer {
    pub fn new(steps: Vec<SplitStep>) -> PreTokenizer {
        PreTokenizer { steps }
    }

    /// Calls `on_piece` with each non-empty pre-token of `text`, in order; `spans`
    /// is scratch space. One `Isolated` step, the byte-level families' shape, keeps
    /// every part of its pattern's partition, so the parts go straight from the
    /// pattern to `on_piece` without being collected first.
    pub fn for_each_piece(&self, text: &str, spans: &mut Vec<Span>, mut on_piece: impl PieceSink) {
        if let [step] = &self.steps[..]
            && step.behavior == Behavior::Isolated
        {
            if let SplitRegex::Scanner(scanner) = &step.regex {
                scanner.for_each_match(text, on_piece);
                return;
            }
            for_each_part(&step.regex, text, |(start, end), _| {
                if start != end {
                    on_piece.take(start, end);
                }
            });
            return;
        }
        self.split(text, spans);
        spans.iter().for_each(|&(start, end)| on_piece.take(start, end));
    }

    /// The non-empty pre-tokens of `text`, as byte ranges, in order.
    pub fn split(&self, text: &str, out: &mut Vec<Span>) {
        out.clear();
        if text.is_empty() {
            return;
        }
        out.push((0, text.len()));
        let mut matches = Vec::new();
        let mut next = Vec::new();
        for step in &self.steps {
            next.clear();
            for &(start, end) in out.iter() {
                find_matches(&step.regex, &text[start..end], step.invert, &mut matches);
                apply_behavior(step.behavior, &matches, start, &mut next);
            }
            std::mem::swap(out, &mut next);
        }
    }
}

/// The partition of `piece` into matched and unmatched parts (`Pattern::find_matches`).
fn find_matches(regex: &SplitRegex, piece: &str, invert: bool, matches: &mut Vec<(Span, bool)>) {
    matches.clear();
    for_each_part(regex, piece, |span, is_match| matches.push((span, is_match != invert)));
}

/// Calls `on_part` with each part of `piece` in order, and whether the pattern
/// matched it: the non-empty stretches between matches, and the matches (which
/// may be empty).
fn for_each_part(regex: &SplitRegex, piece: &str, mut on_part: impl FnMut(Span, bool)) {
    let mut previous = 0;
    regex.for_each_match(piece, |start, end| {
        if previous != start {
            on_part((previous, start), false);
        }
        on_part((start, end), true);
        previous = end;
    });
    if previous != piece.len() {
        on_part((previous, piece.len()), false);
    }
}

/// `NormalizedString::split`: folds the partition by behaviour, then keeps the
/// non-empty parts not removed, shifted by `base`.
fn apply_behavior(behavior: Behavior, matches: &[(Span, bool)], base: usize, out: &mut Vec<Span>) {
    let mut previous_match = false;
    let kept: Vec<(Span, bool)> = match behavior {
        Behavior::Isolated | Behavior::Removed => {
            // No fold: each part stays as it is (`Removed` drops the matches), so
            // straight to the output without a buffer. `Isolated` is the
            // byte-level families' behaviour, the hot path.
            let parts = matches.iter().filter(|&&(_, removed)| behavior == Behavior::Isolated || !removed);
            let parts = parts.map(|&(span, _)| span).filter(|&(start, end)| start != end);
            out.extend(parts.map(|(start, end)| (base + start, base + end)));
            return;
        }
        Behavior::Contiguous | Behavior::MergedWithPrevious => {
            let mut kept: Vec<(Span, bool)> = Vec::with_capacity(matches.len());
            for &(span, is_match) in matches {
                let joins = if behavior == Behavior::Contiguous {
                    is_match == previous_match
                } else {
                    is_match && !previous_match
                };
                match kept.last_mut() {
                    Some(((_, end), _)) if joins => *end = span.1,
                    _ => kept.push((span, false)),
                }
                previous_match = is_match;
            }
            kept
        }
        Behavior::MergedWithNext => {
            let mut kept: Vec<(Span, bool)> = Vec::with_capacity(matches.len());
            for &(span, is_match) in matches.iter().rev() {
                match kept.last_mut() {
                    Some(((start, _), _)) if is_match && !previous_match => *start = span.0,
                    _ => kept.push((span, false)),
                }
                previous_match = is_match;
            }
            kept.reverse();
            kept
        }
    };
    // Folded parts are never removed.
    out.extend(
        kept.into_iter().map(|((start, end), _)| (base + start, base + end)).filter(|(start, end)| start != end),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(behavior: Behavior, invert: bool, text: &str) -> Vec<&str> {
        let step = SplitStep { regex: SplitRegex::new("-").unwrap(), behavior, invert };
        let mut spans = Vec::new();
        PreTokenizer::new(vec![step]).split(text, &mut spans);
        spans.into_iter().map(|(start, end)| &text[start..end]).collect()
    }

    #[test]
    fn pieces_streamed_from_one_step_are_the_split_ones() {
        for text in ["the-final--countdown", "-a-", "--", "", "plain"] {
            for steps in [1, 2] {
                let step =
                    || SplitStep { regex: SplitRegex::new("-").unwrap(), behavior: Behavior::Isolated, invert: false };
                let pre_tokenizer = PreTokenizer::new((0..steps).map(|_| step()).collect());
                let (mut split, mut streamed) = (Vec::new(), Vec::new());
                pre_tokenizer.split(text, &mut split);
                pre_tokenizer.for_each_piece(text, &mut Vec::new(), |start, end| streamed.push((start, end)));
                assert_eq!(streamed, split, "{text:?}, {steps} steps");
            }
        }
    }

    #[test]
    fn behaviors_match_the_tokenizers_documentation() {
        let text = "the-final--countdown";
        assert_eq!(pieces(Behavior::Removed, false, text), ["the", "final", "countdown"]);
        assert_eq!(pieces(Behavior::Isolated, false, text), ["the", "-", "final", "-", "-", "countdown"]);
        assert_eq!(pieces(Behavior::MergedWithPrevious, false, text), ["the-", "final-", "-", "countdown"]);
        assert_eq!(pieces(Behavior::MergedWithNext, false, text), ["the", "-final", "-", "-countdown"]);
        assert_eq!(pieces(Behavior::Contiguous, false, text), ["the", "-", "final", "--", "countdown"]);
        assert_eq!(pieces(Behavior::Removed, true, text), ["-", "-", "-"]);
        assert_eq!(pieces(Behavior::Isolated, true, text), pieces(Behavior::Isolated, false, text));
    }
}
