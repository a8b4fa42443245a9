//! Reads a serialized tokenizer into the parts of the fast encoder, or says which
//! component it cannot reproduce. Accepted: an optional NFC normalizer; `Split`
//! pre-tokenizers (one, or a `Sequence`) ending in `ByteLevel` without a prefix
//! space; a BPE model without dropout, affixes or byte fallback whose merges
//! build on all 256 byte tokens; added tokens that strip nothing.

use rustc_hash::FxHashMap;
use serde_json::{Map, Value};

use super::added::AddedToken;
use super::bpe::{BytePairMerger, Merge};
use super::bytelevel::{byte_to_char, token_to_bytes};
use super::patterns::BYTE_LEVEL_PATTERN;
use super::pretokenize::{Behavior, SplitStep};
use super::split_regex::SplitRegex;

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
    let mut steps = splits.iter().map(|split| split_step(split)).collect::<Result<Vec<_>, _>>()?;
    if byte_level["use_regex"] != false {
        let regex = compile(BYTE_LEVEL_PATTERN)?;
        steps.push(SplitStep { regex, behavior: Behavior::Isolated, invert: false });
    }
    Ok(steps)
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
pub fn merger(model: &Value) -> Result<BytePairMerger, String> {
    check_model(model)?;
    let vocab = model["vocab"].as_object().ok_or("the BPE model has no vocabulary")?;
    // JSON objects are ordered maps: three string-compared tree lookups per merge
    // took most of the time to load a large tokenizer. A hash map is built once.
    let ids: FxHashMap<&str, u32> =
        vocab.iter().filter_map(|(token, id)| Some((token.as_str(), u32::try_from(id.as_u64()?).ok()?))).collect();
    let id_of = |token: &str| ids.get(token).copied();
    let mut byte_ids = [0u32; 256];
    for (byte, slot) in byte_ids.iter_mut().enumerate() {
        *slot = id_of(&byte_to_char()[byte].to_string())
            .ok_or_else(|| format!("the vocabulary lacks the token for byte 0x{byte:02x}"))?;
    }
    let merges = merges(model, &id_of)?;
    let whole_tokens = (model["ignore_merges"] == true).then(|| whole_tokens(vocab));
    Ok(BytePairMerger::new(byte_ids, merges, whole_tokens))
}

fn check_model(model: &Value) -> Result<(), String> {
    if model["type"] != "BPE" {
        return Err(format!("the model {} is not BPE", model["type"]));
    }
    let empty = |v: &Value| v.is_null() || v == "";
    let no_dropout = model["dropout"].is_null() || model["dropout"].as_f64() == Some(0.0);
    if !no_dropout || !empty(&model["continuing_subword_prefix"]) || !empty(&model["end_of_word_suffix"]) {
        return Err("the BPE model uses dropout or subword affixes".into());
    }
    if model["byte_fallback"] == true {
        return Err("the BPE model uses byte fallback".into());
    }
    Ok(())
}

/// Each merge's pair of ids and result; a pair listed twice keeps its last rank, as in `tokenizers`.
fn merges(model: &Value, id_of: &dyn Fn(&str) -> Option<u32>) -> Result<FxHashMap<(u32, u32), Merge>, String> {
    let list = model["merges"].as_array().ok_or("the BPE model has no merges")?;
    let mut merges = FxHashMap::default();
    merges.reserve(list.len());
    let mut joined = String::new();
    for (rank, merge) in list.iter().enumerate() {
        let (left, right) = match merge {
            Value::String(line) => line.split_once(' ').filter(|(_, right)| !right.contains(' ')),
            Value::Array(pair) => match pair.as_slice() {
                [Value::String(left), Value::String(right)] => Some((left.as_str(), right.as_str())),
                _ => None,
            },
            _ => None,
        }
        .ok_or_else(|| format!("merge {rank} is not a pair of tokens"))?;
        joined.clear();
        joined.push_str(left);
        joined.push_str(right);
        let ids = (id_of(left), id_of(right), id_of(&joined));
        let (Some(left), Some(right), Some(id)) = ids else {
            return Err(format!("merge {rank} ({left:?} {right:?}) names a token missing from the vocabulary"));
        };
        merges.insert((left, right), Merge { rank: rank as u32, id });
    }
    Ok(merges)
}

/// Every byte-level vocabulary token by its bytes, for `ignore_merges`.
fn whole_tokens(vocab: &Map<String, Value>) -> FxHashMap<Vec<u8>, u32> {
    vocab.iter().filter_map(|(token, id)| Some((token_to_bytes(token)?, id.as_u64()? as u32))).collect()
}
