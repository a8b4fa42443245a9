//! Added tokens and the NFC normalizer, in the order `tokenizers` applies them:
//! tokens with `normalized = false` are found in the raw text first, then what is
//! left is normalized and tokens with `normalized = true` are found in that.
//! Both searches are leftmost-longest, as in `tokenizers`.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};
use unicode_normalization_alignments::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// One part of a document: an added token, or text for the pre-tokenizer.
pub enum Part<'a> {
    Token(u32),
    Text(&'a str),
}

/// Added tokens of one kind (raw or normalized) and their ids.
struct TokenSet {
    matcher: AhoCorasick,
    ids: Vec<u32>,
}

pub struct AddedTokens {
    raw: Option<TokenSet>,
    normalized: Option<TokenSet>,
    nfc: bool,
}

/// An added token as the tokenizer declares it.
pub struct AddedToken {
    pub content: String,
    pub id: u32,
    pub normalized: bool,
}

impl AddedTokens {
    pub fn new(tokens: &[AddedToken], nfc: bool) -> Result<AddedTokens, String> {
        let set = |normalized: bool| -> Result<Option<TokenSet>, String> {
            let (patterns, ids): (Vec<String>, Vec<u32>) = tokens
                .iter()
                .filter(|token| token.normalized == normalized && !token.content.is_empty())
                .map(|token| {
                    (
                        if normalized { nfc_of(&token.content, nfc).into_owned() } else { token.content.clone() },
                        token.id,
                    )
                })
                .unzip();
            if patterns.is_empty() {
                return Ok(None);
            }
            let matcher = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .map_err(|err| format!("cannot index the added tokens: {err}"))?;
            Ok(Some(TokenSet { matcher, ids }))
        };
        Ok(AddedTokens { raw: set(false)?, normalized: set(true)?, nfc })
    }

    /// Calls `on_part` with the parts of `text`, in order.
    pub fn for_each_part(&self, text: &str, on_part: &mut dyn FnMut(Part<'_>)) {
        split_by(self.raw.as_ref(), text, &mut |part| match part {
            Part::Token(id) => on_part(Part::Token(id)),
            Part::Text(raw) => {
                let normalized = nfc_of(raw, self.nfc);
                split_by(self.normalized.as_ref(), &normalized, on_part);
            }
        });
    }
}

/// `text` in NFC when `nfc` is set (borrowed when it already is), as the
/// `tokenizers` NFC normalizer computes it.
fn nfc_of(text: &str, nfc: bool) -> Cow<'_, str> {
    if !nfc || passes_nfc_quick_check(text) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.nfc().map(|(c, _)| c).collect())
}

/// The first byte of a character from U+0300 on in UTF-8 is at least this, and
/// every byte of a character before it is less.
const FIRST_BYTE_FROM_U0300: u8 = 0xCC;

/// Whether `tokenizers`' NFC quick check answers yes for `text`. That check goes
/// character by character, a twentieth of the fast core's time for an NFC
/// tokenizer on mostly ASCII text. Each character before U+0300 passes it on its
/// own and has combining class 0, so nothing after it depends on it either: the
/// check starts at the first character from U+0300 on, found by its first byte,
/// 32 bytes at a time.
fn passes_nfc_quick_check(text: &str) -> bool {
    let bytes = text.as_bytes();
    let (chunks, _) = bytes.as_chunks::<32>();
    // A maximum, not a search, so that each whole chunk is a few vector operations;
    // the search then runs from the chunk that has such a byte, or past them all.
    let wide_chunk =
        chunks.iter().position(|chunk| chunk.iter().fold(0, |max, &byte| max.max(byte)) >= FIRST_BYTE_FROM_U0300);
    let from = wide_chunk.unwrap_or(chunks.len()) * 32;
    let first = bytes[from..].iter().position(|&byte| byte >= FIRST_BYTE_FROM_U0300).map(|at| from + at);
    // Such a first byte starts a character, so `at` is on a boundary.
    first.is_none_or(|at| is_nfc_quick(text[at..].chars()) == IsNormalized::Yes)
}

fn split_by(set: Option<&TokenSet>, text: &str, on_part: &mut dyn FnMut(Part<'_>)) {
    let Some(set) = set else {
        if !text.is_empty() {
            on_part(Part::Text(text));
        }
        return;
    };
    let mut previous = 0;
    for found in set.matcher.find_iter(text) {
        if previous < found.start() {
            on_part(Part::Text(&text[previous..found.start()]));
        }
        on_part(Part::Token(set.ids[found.pattern().as_usize()]));
        previous = found.end();
    }
    if previous < text.len() {
        on_part(Part::Text(&text[previous..]));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn checked_whole(text: &str) -> bool {
        is_nfc_quick(text.chars()) == IsNormalized::Yes
    }

    #[test]
    fn characters_before_u0300_pass_alone_and_combine_with_nothing_before_them() {
        // A character after them that is not NFC, or NFC only after some characters.
        let after = ["", "a", "\u{301}", "\u{315}\u{301}", "\u{340}", "\u{1100}\u{1161}", "e\u{301}", "日本"];
        for c in ('\0'..'\u{300}').chain(['\u{300}', '\u{301}', '\u{344}', '\u{e9}', '\u{2ff}']) {
            assert_eq!(c < '\u{300}', c.to_string().as_bytes()[0] < FIRST_BYTE_FROM_U0300, "{c:?}");
            for tail in after {
                for text in [format!("{c}{tail}"), format!("x{c}{tail}"), format!("{}{c}{tail}", "y".repeat(40))] {
                    assert_eq!(passes_nfc_quick_check(&text), checked_whole(&text), "{text:?}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn the_quick_check_from_the_first_wide_character_is_the_whole_check(
            text in "[a-zé\u{2ff}\u{300}-\u{36f}\u{340}\u{1100}-\u{1112}\u{1161}-\u{1175}日 ]{0,80}"
        ) {
            prop_assert_eq!(passes_nfc_quick_check(&text), checked_whole(&text));
        }
    }
}
