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
    if !nfc || is_nfc_quick(text.chars()) == IsNormalized::Yes {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.nfc().map(|(c, _)| c).collect())
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
