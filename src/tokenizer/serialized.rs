//! The parts of a serialized tokenizer (`tokenizer.json`) the fast encoder reads.
//!
//! A large tokenizer's vocabulary and merges hold hundreds of thousands of
//! entries. Read into a `serde_json::Value`, they became ordered maps and arrays
//! of owned strings: building that tree took about as long as building the fast
//! encoder from it, and it was the largest thing in memory while loading. Here the
//! vocabulary goes straight into a hash map and the merges into a list, both
//! borrowing their strings from the JSON text where it has no escapes. The small
//! sections stay `Value`s.
//!
//! Whether a canonical text (as `tokenizers` writes it) reads as given parts is
//! answered without reading its vocabulary and merges: they are compared as text
//! with the parts' own, written the way `tokenizers` writes them (see `Large`).

use std::borrow::{Borrow, Cow};
use std::fmt;

use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

#[derive(Deserialize, PartialEq)]
pub struct Serialized<'a> {
    #[serde(default)]
    pub normalizer: Value,
    #[serde(default)]
    pub pre_tokenizer: Value,
    #[serde(default)]
    pub added_tokens: Value,
    #[serde(borrow)]
    pub model: Model<'a>,
}

/// The model's settings as written (`Null` where absent), its vocabulary and its merges.
#[derive(Deserialize, PartialEq)]
pub struct Model<'a> {
    #[serde(rename = "type", default)]
    pub kind: Value,
    #[serde(default)]
    pub dropout: Value,
    #[serde(default)]
    pub continuing_subword_prefix: Value,
    #[serde(default)]
    pub end_of_word_suffix: Value,
    #[serde(default)]
    pub byte_fallback: Value,
    #[serde(default)]
    pub ignore_merges: Value,
    #[serde(borrow, default)]
    pub vocab: Option<FxHashMap<Token<'a>, u32>>,
    #[serde(borrow, default)]
    pub merges: Option<Vec<MergeTokens<'a>>>,
}

/// A model's vocabulary and merges as JSON text, written as `tokenizers` writes
/// them in its canonical form: the vocabulary by id, the merges in order, each a
/// pair of tokens. Comparing these texts takes a millisecond where reading a large
/// vocabulary and its merges again took a tenth of a second.
#[derive(Debug, PartialEq)]
pub struct Large {
    vocab: Option<String>,
    merges: Option<String>,
    /// The largest id in the vocabulary, if it has any token.
    largest_id: Option<u32>,
}

impl Large {
    /// The vocabulary's and the merges' texts, when the model has both.
    pub fn texts(&self) -> Option<(&str, &str)> {
        Some((self.vocab.as_deref()?, self.merges.as_deref()?))
    }

    /// The largest id of a token of the vocabulary, if it has any.
    pub fn largest_id(&self) -> Option<u32> {
        self.largest_id
    }
}

impl Serialized<'_> {
    /// Takes the vocabulary and merges out of the parts, as their canonical text.
    pub fn take_large(&mut self) -> Large {
        let mut largest_id = None;
        let vocab = self.model.vocab.take().map(|vocab| {
            let by_id = vocab_in_id_order(&vocab);
            largest_id = by_id.last().map(|&(id, _)| id);
            let mut text = JsonText::with_capacity(by_id.iter().map(|(_, token)| token.len() + 10).sum());
            text.list(b'{', b'}', &by_id, |text, &(id, token)| {
                text.string(token);
                text.0.push(':');
                text.0.push_str(itoa::Buffer::new().format(id));
            });
            text.0
        });
        let merges = self.model.merges.take().map(|merges| {
            let mut text = JsonText::with_capacity(merges.iter().map(|m| m.left.len() + m.right.len() + 8).sum());
            text.list(b'[', b']', &merges, |text, merge| {
                text.0.push('[');
                text.string(&merge.left);
                text.0.push(',');
                text.string(&merge.right);
                text.0.push(']');
            });
            text.0
        });
        Large { vocab, merges, largest_id }
    }

    /// Whether `canonical`, a `tokenizer.json` as `tokenizers` writes it, reads as
    /// these parts once `large` is put back into them. `false` also where the
    /// text is written some other way: the caller then reads it whole.
    pub fn with_large_read_from(&self, large: &Large, canonical: &str) -> bool {
        let sections = match Self::sections_found_as_written(large, canonical) {
            Some(sections) => sections,
            None => match Self::sections_read(large, canonical) {
                Some(sections) => sections,
                None => return false,
            },
        };
        // The rest of the text, with `null` for the two sections (what these parts have).
        let mut rest = String::new();
        let mut at = 0;
        for section in sections {
            rest.push_str(&canonical[at..section.start]);
            rest.push_str("null");
            at = section.end;
        }
        rest.push_str(&canonical[at..]);
        serde_json::from_str::<Serialized>(&rest).is_ok_and(|rest| rest == *self)
    }

    /// Where the sections of `large` are in `canonical`, in order, found without
    /// reading the 7.5 MB of GPT-4o's as JSON: right after the first `"vocab":`,
    /// then the first `"merges":` after it, must be their texts. Those bytes
    /// elsewhere (another key of that name, a key that ends in it) give `None`
    /// when other text follows them, and otherwise leave the model's own section
    /// in the rest, which then differs from these parts.
    fn sections_found_as_written(large: &Large, canonical: &str) -> Option<Vec<std::ops::Range<usize>>> {
        let mut sections = Vec::new();
        let mut from = 0;
        for (key, text) in [("\"vocab\":", &large.vocab), ("\"merges\":", &large.merges)] {
            let Some(text) = text else { continue };
            let start = from + memchr::memmem::find(&canonical.as_bytes()[from..], key.as_bytes())? + key.len();
            canonical[start..].starts_with(text.as_str()).then_some(())?;
            from = start + text.len();
            sections.push(start..from);
        }
        Some(sections)
    }

    /// `sections_found_as_written`, with the model's two sections read as JSON:
    /// `None` where either is not the text of `large`.
    fn sections_read(large: &Large, canonical: &str) -> Option<Vec<std::ops::Range<usize>>> {
        #[derive(Deserialize)]
        struct Tokenizer<'a> {
            #[serde(borrow)]
            model: LargeText<'a>,
        }
        #[derive(Deserialize)]
        struct LargeText<'a> {
            #[serde(borrow, default)]
            vocab: Option<&'a RawValue>,
            #[serde(borrow, default)]
            merges: Option<&'a RawValue>,
        }
        let Tokenizer { model: LargeText { vocab, merges } } = serde_json::from_str(canonical).ok()?;
        if vocab.map(RawValue::get) != large.vocab.as_deref() || merges.map(RawValue::get) != large.merges.as_deref() {
            return None;
        }
        let mut sections: Vec<std::ops::Range<usize>> = [vocab, merges]
            .into_iter()
            .flatten()
            .map(|section| {
                let start = section.get().as_ptr().addr() - canonical.as_ptr().addr();
                start..start + section.get().len()
            })
            .collect();
        sections.sort_by_key(|section| section.start);
        Some(sections)
    }
}

/// The vocabulary's tokens in a table indexed by id, where its ids are about as
/// many as its tokens (as in every trained vocabulary, see `ids_fit_a_table`);
/// `None` otherwise. `unique` tells whether each id is one token's: where two
/// share one, the table holds one of them.
pub struct TokensById<'v> {
    pub tokens: Vec<Option<&'v str>>,
    pub unique: bool,
}

pub fn tokens_by_id<'v>(vocab: &'v FxHashMap<Token, u32>) -> Option<TokensById<'v>> {
    let largest = vocab.values().copied().max().unwrap_or(0);
    if !super::by_rank::ids_fit_a_table(largest, vocab.len()) {
        return None;
    }
    let mut tokens = vec![None; largest as usize + 1];
    let mut unique = true;
    for (token, &id) in vocab {
        unique &= tokens[id as usize].replace(&**token).is_none();
    }
    Some(TokensById { tokens, unique })
}

/// The vocabulary's tokens in the order of their ids, ties by token. Where each
/// id is one token's in a table (`tokens_by_id`), they are read off it rather than
/// sorted: sorting GPT-4o's 200k tokens took a fifth of the time to write its
/// vocabulary's text.
fn vocab_in_id_order<'v>(vocab: &'v FxHashMap<Token, u32>) -> Vec<(u32, &'v str)> {
    if let Some(TokensById { tokens, unique: true }) = tokens_by_id(vocab) {
        return tokens.into_iter().enumerate().filter_map(|(id, token)| Some((id as u32, token?))).collect();
    }
    let mut sorted: Vec<(u32, &str)> = vocab.iter().map(|(token, &id)| (id, &**token)).collect();
    sorted.sort_unstable();
    sorted
}

/// JSON text as `serde_json` writes it compactly, written by hand: through a
/// `serde_json::Serializer`, writing GPT-4o's vocabulary and merges (400k
/// strings) took 30 ms of a build's start, on its way to the first document.
struct JsonText(String);

impl JsonText {
    fn with_capacity(bytes: usize) -> JsonText {
        JsonText(String::with_capacity(bytes + 2))
    }

    /// `items` between `open` and `close`, each written by `item`, separated by commas.
    fn list<T>(&mut self, open: u8, close: u8, items: &[T], mut item: impl FnMut(&mut Self, &T)) {
        self.0.push(char::from(open));
        for (at, each) in items.iter().enumerate() {
            if at > 0 {
                self.0.push(',');
            }
            item(self, each);
        }
        self.0.push(char::from(close));
    }

    /// A JSON string. One with a character JSON escapes is written by `serde_json`
    /// itself, so that its escapes are exactly those `tokenizers` writes.
    fn string(&mut self, text: &str) {
        if text.bytes().any(|byte| byte == b'"' || byte == b'\\' || byte < 0x20) {
            self.0.push_str(&serde_json::to_string(text).expect("a string is always written as JSON"));
        } else {
            self.0.push('"');
            self.0.push_str(text);
            self.0.push('"');
        }
    }
}

/// A token's text, borrowed from the JSON where it can be. A newtype because
/// serde's own `Cow` always copies: it borrows only as a struct's field marked
/// `borrow`, never as a map's key or a list's item.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Token<'a>(pub Cow<'a, str>);

impl Borrow<str> for Token<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Token<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Token<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TokenVisitor).map(Token)
    }
}

struct TokenVisitor;

impl<'de> Visitor<'de> for TokenVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a token")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(text))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(text.to_string()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(text))
    }
}

/// A merge's two tokens, written `"left right"` or `["left", "right"]`.
#[derive(PartialEq)]
pub struct MergeTokens<'a> {
    pub left: Token<'a>,
    pub right: Token<'a>,
}

impl MergeTokens<'_> {
    pub fn pair(&self) -> (&str, &str) {
        (&self.left, &self.right)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for MergeTokens<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        MergeSpelling::deserialize(deserializer)?.into_tokens()
    }
}

/// A merge as it is written: a pair, or the older line of two tokens.
pub enum MergeSpelling<'a> {
    Pair(MergeTokens<'a>),
    Line(Cow<'a, str>),
}

impl<'a> MergeSpelling<'a> {
    /// The merge's two tokens; a line must be two tokens separated by a space.
    pub fn into_tokens<E: de::Error>(self) -> Result<MergeTokens<'a>, E> {
        let line = match self {
            MergeSpelling::Pair(tokens) => return Ok(tokens),
            MergeSpelling::Line(line) => line,
        };
        let space = match line.find(' ') {
            Some(space) if !line[space + 1..].contains(' ') => space,
            _ => return Err(E::custom(format!("the merge {line:?} is not two tokens separated by a space"))),
        };
        Ok(match line {
            Cow::Borrowed(line) => MergeTokens {
                left: Token(Cow::Borrowed(&line[..space])),
                right: Token(Cow::Borrowed(&line[space + 1..])),
            },
            Cow::Owned(line) => MergeTokens {
                left: Token(Cow::Owned(line[..space].to_string())),
                right: Token(Cow::Owned(line[space + 1..].to_string())),
            },
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for MergeSpelling<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MergeVisitor)
    }
}

struct MergeVisitor;

impl<'de> Visitor<'de> for MergeVisitor {
    type Value = MergeSpelling<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a merge: \"left right\" or [\"left\", \"right\"]")
    }

    fn visit_borrowed_str<E: de::Error>(self, line: &'de str) -> Result<Self::Value, E> {
        Ok(MergeSpelling::Line(Cow::Borrowed(line)))
    }

    fn visit_str<E: de::Error>(self, line: &str) -> Result<Self::Value, E> {
        Ok(MergeSpelling::Line(Cow::Owned(line.to_string())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let not_a_pair = || de::Error::custom("a merge is not a pair of tokens");
        let left = seq.next_element()?.ok_or_else(not_a_pair)?;
        let right = seq.next_element()?.ok_or_else(not_a_pair)?;
        if seq.next_element::<de::IgnoredAny>()?.is_some() {
            return Err(not_a_pair());
        }
        Ok(MergeSpelling::Pair(MergeTokens { left, right }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pairs(merges: &[MergeTokens]) -> Vec<(String, String)> {
        merges.iter().map(|merge| (merge.left.to_string(), merge.right.to_string())).collect()
    }

    #[test]
    fn merges_read_in_both_spellings_from_text_and_from_values() {
        let text =
            r#"{"model": {"type": "BPE", "vocab": {"a": 0, "b\"": 1}, "merges": ["a b\"", ["a", "b\""], "\u0041 b"]}}"#;
        let want = [("a", "b\""), ("a", "b\""), ("A", "b")].map(|(l, r)| (l.to_string(), r.to_string()));
        let from_text: Serialized = serde_json::from_str(text).unwrap();
        assert_eq!(pairs(from_text.model.merges.as_deref().unwrap()), want);
        assert_eq!(from_text.model.vocab.as_ref().unwrap().get("b\""), Some(&1));
        assert_eq!(from_text.model.kind, "BPE");
        assert!(from_text.normalizer.is_null() && from_text.model.dropout.is_null());

        let value: Value = serde_json::from_str(text).unwrap();
        let from_value = Serialized::deserialize(&value).unwrap();
        assert_eq!(pairs(from_value.model.merges.as_deref().unwrap()), want);
    }

    #[test]
    fn a_canonical_text_reads_as_the_parts_when_its_large_sections_are_theirs_as_text() {
        let json = crate::tokenizer::builtin_gpt2_json().unwrap();
        let canonical_of = |json: &str| json.parse::<tokenizers::Tokenizer>().unwrap().to_string(false).unwrap();
        let mut parts: Serialized = serde_json::from_str(json).unwrap();
        let large = parts.take_large();
        assert!(parts.model.vocab.is_none() && parts.model.merges.is_none(), "taken out");
        assert!(parts.with_large_read_from(&large, &canonical_of(json)));
        let found = Serialized::sections_found_as_written(&large, &canonical_of(json));
        assert!(found.is_some(), "found by their keys");
        assert_eq!(found, Serialized::sections_read(&large, &canonical_of(json)));

        let mut value: Value = serde_json::from_str(json).unwrap();
        assert!(!parts.with_large_read_from(&large, &serde_json::to_string_pretty(&value).unwrap()), "not as written");
        let changed = |change: &dyn Fn(&mut Value)| {
            let mut value = value.clone();
            change(&mut value);
            parts.with_large_read_from(&large, &canonical_of(&value.to_string()))
        };
        assert!(!changed(&|t| t["model"]["merges"].as_array_mut().unwrap().truncate(1000)), "fewer merges");
        assert!(!changed(&|t| t["model"]["merges"].as_array_mut().unwrap().swap(7, 8)), "merges in another order");
        assert!(!changed(&|t| t["model"]["vocab"]["!"] = json!(50256)), "a token's id");
        assert!(!changed(&|t| t["model"]["byte_fallback"] = json!(true)), "a setting of the model");
        assert!(!changed(&|t| t["pre_tokenizer"]["add_prefix_space"] = json!(true)), "a setting elsewhere");
        assert!(changed(&|t| t["decoder"] = json!(null)), "a part the encoder does not read");

        // A key that ends in `"vocab":` before the model's: read as JSON instead.
        let mut decoy = value.clone();
        let token = json!({"id": "x\"vocab", "type_id": 0});
        decoy["post_processor"] = json!({"type": "TemplateProcessing",
            "single": [{"SpecialToken": token}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"x\"vocab": {"id": "x\"vocab", "ids": [1], "tokens": ["x\"vocab"]}}});
        let json = decoy.to_string();
        let mut decoy_parts: Serialized = serde_json::from_str(&json).unwrap();
        let decoy_large = decoy_parts.take_large();
        let canonical = canonical_of(&json);
        assert!(canonical.contains(r#"x\"vocab":{"#), "{canonical:.300}");
        assert_eq!(Serialized::sections_found_as_written(&decoy_large, &canonical), None);
        assert!(decoy_parts.with_large_read_from(&decoy_large, &canonical));

        // Two tokens with one id: the canonical text has only one of them.
        value["model"]["vocab"]["a new token"] = json!(50256);
        let json = value.to_string();
        let mut parts: Serialized = serde_json::from_str(&json).unwrap();
        let large = parts.take_large();
        assert!(!parts.with_large_read_from(&large, &canonical_of(&json)));
    }

    #[test]
    fn the_large_sections_are_written_as_serde_json_writes_them() {
        // Tokens with every kind of character JSON escapes, and some it does not.
        let tokens =
            ["a", "", "\"", "\\", "a\"b\\c", "\n\t\r", "\u{0}\u{1f}\u{8}\u{c}", "\u{7f}", "é日\u{2028}", "Ġthe"];
        let mut vocab = serde_json::Map::new();
        for (id, token) in tokens.iter().enumerate() {
            // Ids out of order, one skipped.
            vocab.insert(token.to_string(), json!((tokens.len() - id) * 2));
        }
        let merges: Vec<Value> = tokens.windows(2).map(|pair| json!([pair[0], pair[1]])).collect();
        let json = json!({"model": {"vocab": vocab, "merges": merges}}).to_string();
        let mut parts: Serialized = serde_json::from_str(&json).unwrap();
        let large = parts.take_large();
        let mut by_id: Vec<(u64, &str)> =
            vocab.iter().map(|(token, id)| (id.as_u64().unwrap(), token.as_str())).collect();
        by_id.sort();
        let mut expected_vocab = Vec::new();
        let mut serializer = serde_json::Serializer::new(&mut expected_vocab);
        serde::Serializer::collect_map(&mut serializer, by_id.iter().map(|&(id, token)| (token, id))).unwrap();
        let (vocab_text, merges_text) = large.texts().unwrap();
        assert_eq!(vocab_text, String::from_utf8(expected_vocab).unwrap());
        assert_eq!(merges_text, serde_json::to_string(&merges).unwrap());
        assert_eq!(large.largest_id(), Some(2 * tokens.len() as u32));

        // Two tokens with one id (and ids too sparse for a table): by id, then by token.
        let json = json!({"model": {"vocab": {"b": 7, "a": 7, "c": 4_000_000_000u32}, "merges": []}}).to_string();
        let mut parts: Serialized = serde_json::from_str(&json).unwrap();
        assert_eq!(parts.take_large().texts(), Some((r#"{"a":7,"b":7,"c":4000000000}"#, "[]")));
    }

    #[test]
    fn merges_that_are_not_two_tokens_are_refused() {
        for merges in [json!(["a b c"]), json!(["ab"]), json!([["a"]]), json!([["a", "b", "c"]]), json!([3])] {
            let tokenizer = json!({"model": {"merges": merges}});
            assert!(Serialized::deserialize(&tokenizer).is_err(), "{merges}");
        }
    }
}
