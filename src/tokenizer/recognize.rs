//! Reads a serialized tokenizer into the parts of the fast encoder, or says which
//! component it cannot reproduce. Accepted: an optional NFC normalizer; `Split`
//! pre-tokenizers (one, or a `Sequence`) ending in `ByteLevel` without a prefix
//! space; a BPE model without dropout, affixes or byte fallback whose merges
//! build on all 256 byte tokens; added tokens that strip nothing. Or, for
//! SentencePiece-style BPE (Llama-2, Gemma): no pre-tokenizer, a normalizer that
//! turns spaces into `▁` (after prepending one, or not), byte fallback on all 256
//! `<0xXX>` tokens that no merge uses, and added tokens matched in the raw text.

use rustc_hash::FxHashMap;
use serde_json::Value;

use crate::huge_pages::{HugeMap, huge_map_with_capacity};

use super::added::AddedToken;
use super::bpe::{Alphabet, BytePairMerger, WholeTokens};
use super::bytelevel::{byte_to_char, decode_token_into};
use super::patterns::BYTE_LEVEL_PATTERN;
use super::pretokenize::{Behavior, SplitStep};
use super::scanner::Scanner;
use super::serialized::{MergeTokens, Model, Token, tokens_by_id};
use super::split_regex::SplitRegex;
use super::symbols::Merge;

/// Whether the normalizer is NFC (possibly in a `Sequence`), none, or something else.
pub fn normalizer_is_nfc(normalizer: &Value) -> Result<bool, String> {
    match normalizer["type"].as_str() {
        None if normalizer.is_null() => Ok(false),
        Some("NFC") => Ok(true),
        Some("Sequence") => {
            let mut nfc = false;
            for inner in normalizer["normalizers"].as_array().into_iter().flatten() {
                nfc |= normalizer_is_nfc(inner)?;
            }
            Ok(nfc)
        }
        other => Err(format!("the normalizer {} is not NFC", other.unwrap_or("(unnamed)"))),
    }
}

/// The split steps of the pre-tokenizer: its `Split`s, then `ByteLevel`'s own regex when it uses one.
pub fn split_steps(pre_tokenizer: &Value) -> Result<Vec<SplitStep>, String> {
    let parts: Vec<&Value> = match pre_tokenizer["type"].as_str() {
        Some("Sequence") => pre_tokenizer["pretokenizers"].as_array().into_iter().flatten().collect(),
        Some(_) => vec![pre_tokenizer],
        None => return Err("the tokenizer has no pre-tokenizer".into()),
    };
    let Some((byte_level, splits)) = parts.split_last().filter(|(last, _)| last["type"] == "ByteLevel") else {
        return Err("the pre-tokenizer does not end in ByteLevel".into());
    };
    if byte_level["add_prefix_space"] != false {
        return Err("the ByteLevel pre-tokenizer adds a prefix space".into());
    }
    let mut steps = match scanned_splits(splits) {
        Some(step) => vec![step],
        None => splits.iter().map(|split| split_step(split)).collect::<Result<Vec<_>, _>>()?,
    };
    if byte_level["use_regex"] != false {
        let regex = compile(BYTE_LEVEL_PATTERN)?;
        steps.push(SplitStep { regex, behavior: Behavior::Isolated, invert: false });
    }
    Ok(steps)
}

/// The `Split`s as one step, where a scanner gives the pieces of them all: each
/// `Isolated` and not inverted, with patterns it recognizes (DeepSeek-V3's).
fn scanned_splits(splits: &[&Value]) -> Option<SplitStep> {
    let patterns = splits.iter().map(|split| {
        let isolated = split["type"] == "Split" && split["behavior"] == "Isolated" && split["invert"] != true;
        isolated.then(|| split["pattern"]["Regex"].as_str()).flatten()
    });
    let scanner = Scanner::for_split_sequence(&patterns.collect::<Option<Vec<&str>>>()?)?;
    Some(SplitStep { regex: SplitRegex::Scanner(Box::new(scanner)), behavior: Behavior::Isolated, invert: false })
}

fn split_step(split: &Value) -> Result<SplitStep, String> {
    if split["type"] != "Split" {
        return Err(format!("the pre-tokenizer {} is not Split or ByteLevel", split["type"]));
    }
    let regex = match (split["pattern"]["Regex"].as_str(), split["pattern"]["String"].as_str()) {
        (Some(pattern), _) => compile(pattern)?,
        (None, Some(literal)) => compile(&fancy_regex::escape(literal))?,
        (None, None) => return Err("a Split pre-tokenizer has no pattern".into()),
    };
    let behavior = split["behavior"]
        .as_str()
        .and_then(Behavior::parse)
        .ok_or_else(|| format!("a Split pre-tokenizer has an unknown behavior {}", split["behavior"]))?;
    Ok(SplitStep { regex, behavior, invert: split["invert"] == true })
}

fn compile(pattern: &str) -> Result<SplitRegex, String> {
    SplitRegex::new(pattern)
}

/// The added tokens, refusing those whose matching depends on surrounding spaces or words.
pub fn added_tokens(added: &Value) -> Result<Vec<AddedToken>, String> {
    let mut tokens = Vec::new();
    for token in added.as_array().into_iter().flatten() {
        if token["lstrip"] == true || token["rstrip"] == true || token["single_word"] == true {
            return Err("an added token strips spaces or matches single words".into());
        }
        let (Some(content), Some(id)) = (token["content"].as_str(), token["id"].as_u64()) else {
            return Err("an added token has no content or id".into());
        };
        let normalized = token["normalized"] == true;
        tokens.push(AddedToken { content: content.to_string(), id: id as u32, normalized });
    }
    Ok(tokens)
}

/// The BPE model as a merger: byte tokens, and merges ranked by their place in `merges`.
pub fn merger(model: &Model) -> Result<BytePairMerger, String> {
    check_model(model)?;
    if model.byte_fallback == true {
        return Err("the BPE model uses byte fallback".into());
    }
    let ids = vocabulary(model)?;
    let byte_ids = token_per_byte(ids, |byte| byte_to_char()[byte as usize].to_string())
        .map_err(|byte| format!("the vocabulary lacks the token for byte 0x{byte:02x}"))?;
    let merges = merges(model, ids)?;
    let whole_tokens = (model.ignore_merges == true).then(|| whole_tokens(ids));
    Ok(BytePairMerger::new(Alphabet::Bytes(byte_ids), merges, whole_tokens))
}

/// The vocabulary, by token.
fn vocabulary<'m>(model: &'m Model) -> Result<&'m FxHashMap<Token<'m>, u32>, String> {
    model.vocab.as_ref().ok_or_else(|| "the BPE model has no vocabulary".to_string())
}

/// Each byte's token, as `name` spells it; the first byte without one is the error.
fn token_per_byte(ids: &FxHashMap<Token, u32>, name: impl Fn(u8) -> String) -> Result<[u32; 256], u8> {
    let mut table = [0u32; 256];
    for (byte, slot) in (0..=u8::MAX).zip(table.iter_mut()) {
        *slot = ids.get(name(byte).as_str()).copied().ok_or(byte)?;
    }
    Ok(table)
}

/// For a SentencePiece-style tokenizer (no pre-tokenizer), whether its normalizer
/// prepends `▁` before turning spaces into `▁` (Llama-2) or only turns them (Gemma).
pub fn metaspace_normalizer(normalizer: &Value) -> Result<bool, String> {
    let replaces_spaces = |n: &Value| n["type"] == "Replace" && n["pattern"]["String"] == " " && n["content"] == "▁";
    let prepends = |n: &Value| n["type"] == "Prepend" && n["prepend"] == "▁";
    let steps = match normalizer["type"].as_str() {
        Some("Sequence") => normalizer["normalizers"].as_array().map(Vec::as_slice).unwrap_or_default(),
        _ => std::slice::from_ref(normalizer),
    };
    match steps {
        [replace] if replaces_spaces(replace) => Ok(false),
        [prepend, replace] if prepends(prepend) && replaces_spaces(replace) => Ok(true),
        _ => Err(format!(
            "the tokenizer has no pre-tokenizer and its normalizer {} is not SentencePiece's (Prepend and Replace of spaces by ▁)",
            normalizer["type"]
        )),
    }
}

/// A SentencePiece-style BPE model as a merger: characters of the vocabulary, the
/// others by byte fallback, and merges ranked by their place in `merges`.
pub fn sentencepiece_merger(model: &Model) -> Result<BytePairMerger, String> {
    check_model(model)?;
    if model.byte_fallback != true {
        return Err("the SentencePiece-style BPE model has no byte fallback".into());
    }
    if model.ignore_merges == true {
        return Err("the SentencePiece-style BPE model ignores merges".into());
    }
    let ids = vocabulary(model)?;
    let id_of = |token: &str| ids.get(token).copied();
    let byte_tokens = token_per_byte(ids, |byte| format!("<0x{byte:02X}>"))
        .map_err(|byte| format!("the vocabulary lacks the byte fallback token <0x{byte:02X}>"))?;
    let mut ascii = [0u32; 128];
    for (code, slot) in ascii.iter_mut().enumerate() {
        *slot = id_of(&(code as u8 as char).to_string()).unwrap_or(byte_tokens[code]);
    }
    let others = ids
        .iter()
        .filter_map(|(token, &id)| {
            let mut chars = token.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) if !c.is_ascii() => Some((c, id)),
                _ => None,
            }
        })
        .collect();
    let merges = merges(model, ids)?;
    Ok(BytePairMerger::new(Alphabet::Chars { ascii, others, byte_tokens }, merges, None))
}

/// Every two characters that some merge's result has side by side: a text splits
/// between any other two without changing its tokens, since no merge can join them.
/// Byte fallback tokens stand for bytes, not for their names' characters, so no
/// merge may use one.
pub fn joinable_pairs(model: &Model) -> Result<JoinablePairs, String> {
    let mut pairs = JoinablePairs { ascii: Box::new([0; 128]), others: Default::default() };
    for (rank, merge) in merge_list(model)?.iter().enumerate() {
        let (left, right) = merge.pair();
        if is_byte_token(left) || is_byte_token(right) {
            return Err(format!("merge {rank} ({left:?} {right:?}) merges a byte fallback token"));
        }
        let joined = left.chars().chain(right.chars());
        for (first, second) in joined.clone().zip(joined.skip(1)) {
            pairs.insert(first, second);
        }
    }
    Ok(pairs)
}

fn is_byte_token(token: &str) -> bool {
    token.len() == 6 && token.starts_with("<0x") && token.ends_with('>')
}

/// Pairs of characters: ASCII ones in a bit table, the others in a set.
pub struct JoinablePairs {
    /// Bit `second` of `ascii[first]`.
    ascii: Box<[u128; 128]>,
    others: rustc_hash::FxHashSet<(char, char)>,
}

impl JoinablePairs {
    fn insert(&mut self, first: char, second: char) {
        if first.is_ascii() && second.is_ascii() {
            self.ascii[first as usize] |= 1 << second as u32;
        } else {
            self.others.insert((first, second));
        }
    }

    /// Whether a token can hold `first` then `second`.
    pub fn contains(&self, first: char, second: char) -> bool {
        if first.is_ascii() && second.is_ascii() {
            return self.ascii[first as usize] & (1 << second as u32) != 0;
        }
        self.others.contains(&(first, second))
    }
}

fn check_model(model: &Model) -> Result<(), String> {
    if model.kind != "BPE" {
        return Err(format!("the model {} is not BPE", model.kind));
    }
    let empty = |v: &Value| v.is_null() || v == "";
    let no_dropout = model.dropout.is_null() || model.dropout.as_f64() == Some(0.0);
    if !no_dropout || !empty(&model.continuing_subword_prefix) || !empty(&model.end_of_word_suffix) {
        return Err("the BPE model uses dropout or subword affixes".into());
    }
    Ok(())
}

/// Each merge's pair of ids and result; a pair listed twice keeps its last rank, as in `tokenizers`.
fn merges(model: &Model, ids: &FxHashMap<Token, u32>) -> Result<HugeMap<(u32, u32), Merge>, String> {
    let list = merge_list(model)?;
    let id_of = |token: &str| ids.get(token).copied();
    // A trained merge list gives its tokens in the order of their ids, so a merge's
    // result is most often the token after the last merge's: comparing it with the
    // pair takes one of the three lookups of each merge, a third of the time here.
    let tokens = tokens_by_id(ids).map(|table| table.tokens).unwrap_or_default();
    let is_next = |id: u32, left: &str, right: &str| {
        tokens.get(id as usize).copied().flatten().is_some_and(|token| joins(token, left, right))
    };
    let mut merges = huge_map_with_capacity(list.len());
    let mut joined = String::new();
    let mut last_result = None;
    for (rank, merge) in list.iter().enumerate() {
        let (left, right) = merge.pair();
        let next = last_result.and_then(|id: u32| id.checked_add(1)).filter(|&id| is_next(id, left, right));
        let result = next.or_else(|| {
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            id_of(&joined)
        });
        let (Some(left), Some(right), Some(id)) = (id_of(left), id_of(right), result) else {
            return Err(format!("merge {rank} ({left:?} {right:?}) names a token missing from the vocabulary"));
        };
        merges.insert((left, right), Merge { rank: rank as u32, id });
        last_result = Some(id);
    }
    Ok(merges)
}

/// Whether `token` is `left` followed by `right`, compared in place.
fn joins(token: &str, left: &str, right: &str) -> bool {
    token.len() == left.len() + right.len() && token.starts_with(left) && token.ends_with(right)
}

fn merge_list<'m>(model: &'m Model) -> Result<&'m [MergeTokens<'m>], String> {
    model.merges.as_deref().ok_or_else(|| "the BPE model has no merges".to_string())
}

/// Every byte-level vocabulary token by its bytes, for `ignore_merges`.
fn whole_tokens(vocab: &FxHashMap<Token, u32>) -> WholeTokens {
    let mut tokens = WholeTokens::with_capacity(vocab.len());
    let mut bytes = Vec::new();
    for (token, &id) in vocab {
        if decode_token_into(token, &mut bytes) {
            tokens.insert(&bytes, id);
        }
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::patterns::DEEPSEEK_V3_PATTERNS;
    use crate::tokenizer::serialized::Serialized;

    fn sequence_of_splits(patterns: &[&str], behavior: &str) -> Value {
        let splits = patterns.iter().map(|pattern| {
            serde_json::json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": false})
        });
        let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false});
        serde_json::json!({"type": "Sequence", "pretokenizers": splits.chain([byte_level]).collect::<Vec<_>>()})
    }

    #[test]
    fn deepseek_v3s_splits_are_one_scanned_step_and_any_other_behavior_is_not() {
        let steps = split_steps(&sequence_of_splits(&DEEPSEEK_V3_PATTERNS, "Isolated")).unwrap();
        assert!(matches!(&steps[..], [SplitStep { regex: SplitRegex::Scanner(_), .. }]));
        let steps = split_steps(&sequence_of_splits(&DEEPSEEK_V3_PATTERNS, "MergedWithPrevious")).unwrap();
        assert_eq!(steps.len(), 3);
        assert!(steps.iter().all(|step| !matches!(step.regex, SplitRegex::Scanner(_))));
    }

    /// `merges` of a model with this vocabulary and merge list (JSON), as
    /// (left, right, rank, result) in rank order.
    fn merges_of(vocab: &str, list: &str) -> Result<Vec<(u32, u32, u32, u32)>, String> {
        let json = format!(r#"{{"model": {{"type": "BPE", "vocab": {vocab}, "merges": {list}}}}}"#);
        let parsed: Serialized = serde_json::from_str(&json).map_err(|err| err.to_string())?;
        let mut found: Vec<_> = merges(&parsed.model, vocabulary(&parsed.model)?)?
            .into_iter()
            .map(|((left, right), merge)| (left, right, merge.rank, merge.id))
            .collect();
        found.sort_by_key(|&(_, _, rank, _)| rank);
        Ok(found)
    }

    #[test]
    fn merge_results_are_their_tokens_whatever_the_order_of_ids() {
        // Each result the token after the last one's, as in a trained vocabulary.
        let in_order = merges_of(r#"{"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}"#, r#"["a b", "ab c"]"#);
        assert_eq!(in_order, Ok(vec![(0, 1, 0, 3), (3, 2, 1, 4)]));
        // The token after the last result is another merge's, or the next result comes before.
        let shuffled =
            merges_of(r#"{"a": 0, "b": 1, "c": 2, "abc": 3, "ab": 4, "bc": 5}"#, r#"["a b", "ab c", "b c"]"#);
        assert_eq!(shuffled, Ok(vec![(0, 1, 0, 4), (4, 2, 1, 3), (1, 2, 2, 5)]));
        // The token after the last result starts with the pair's left token and ends
        // with its right one, or only starts with the left one.
        let traps = merges_of(
            r#"{"a": 0, "b": 1, "x": 2, "ax": 3, "axb": 4, "ab": 5, "ba": 6, "bx": 7}"#,
            r#"["a x", "a b", "b x"]"#,
        );
        assert_eq!(traps, Ok(vec![(0, 2, 0, 3), (0, 1, 1, 5), (1, 2, 2, 7)]));
        // Two tokens of one id: either may be the one the table of ids holds.
        let shared = merges_of(r#"{"a": 0, "b": 1, "c": 2, "ab": 3, "zz": 4, "bc": 4}"#, r#"["a b", "b c"]"#);
        assert_eq!(shared, Ok(vec![(0, 1, 0, 3), (1, 2, 1, 4)]));
        // Ids far apart: looked up by token alone.
        let sparse = merges_of(r#"{"a": 0, "b": 1, "ab": 4000000000}"#, r#"["a b"]"#);
        assert_eq!(sparse, Ok(vec![(0, 1, 0, 4_000_000_000)]));
    }

    #[test]
    fn a_merge_whose_result_is_missing_is_named() {
        let missing = merges_of(r#"{"a": 0, "b": 1, "c": 2, "ab": 3}"#, r#"["a b", "b c"]"#);
        assert_eq!(missing, Err(r#"merge 1 ("b" "c") names a token missing from the vocabulary"#.to_string()));
    }
}
