//! The embedded GPT-2 tokenizer (`builtin = "gpt2"`) and GPT-2 style
//! `vocab.json` + `merges.txt` pairs, both turned into a Hugging Face tokenizer.json.
//!
//! GPT-2's ranks ship inside the `tiktoken-rs` crate (`r50k_base`). Its ranks are
//! GPT-2's token ids, and the merge list is recovered from them the way Hugging Face
//! converts tiktoken vocabularies: each token's merge is the last step of running
//! BPE on its bytes with only lower-ranked tokens. The tokenizer.json so derived
//! is embedded compressed; a test derives it again and compares.

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::{Value, json};

pub const END_OF_TEXT: &str = "<|endoftext|>";
const END_OF_TEXT_ID: u32 = 50256;

/// GPT-2's tokenizer.json as shipped, compressed: derived from the ranks once (see
/// the tests, which hold it to the derivation), since deriving it at every start
/// cost a third of a second, as much as tokenizing 30 MB.
const EMBEDDED_JSON_ZST: &[u8] = include_bytes!("gpt2-tokenizer.json.zst");

/// GPT-2's tokenizer.json, decompressed once per process.
pub fn builtin_tokenizer_json() -> Result<&'static str, String> {
    static JSON: OnceLock<Result<String, String>> = OnceLock::new();
    JSON.get_or_init(|| {
        let bytes = zstd::decode_all(EMBEDDED_JSON_ZST)
            .map_err(|err| format!("cannot decompress the embedded GPT-2 tokenizer: {err}"))?;
        String::from_utf8(bytes).map_err(|err| format!("the embedded GPT-2 tokenizer is not UTF-8: {err}"))
    })
    .as_deref()
    .map_err(Clone::clone)
}

/// A tokenizer.json for GPT-2 style `vocab.json` + `merges.txt` files.
pub fn tokenizer_json_from_texts(
    (vocab_path, vocab_text): (&Path, &str),
    (merges_path, merges_text): (&Path, &str),
) -> Result<String, String> {
    let vocab: HashMap<String, u32> = serde_json::from_str(vocab_text)
        .map_err(|err| format!("{} is not a JSON object of token -> id: {err}", vocab_path.display()))?;
    let mut merges = Vec::new();
    for (index, line) in merges_text.lines().enumerate() {
        if line.starts_with("#version") || line.trim().is_empty() {
            continue;
        }
        let (a, b) = line.split_once(' ').ok_or_else(|| {
            format!("{} line {}: expected two tokens separated by a space", merges_path.display(), index + 1)
        })?;
        merges.push((a.to_string(), b.to_string()));
    }
    let mut vocab: Vec<(String, u32)> = vocab.into_iter().collect();
    vocab.sort_by_key(|(_, id)| *id);
    let end_of_text = vocab.iter().any(|(token, _)| token == END_OF_TEXT).then_some(END_OF_TEXT);
    Ok(byte_level_tokenizer_json(vocab, merges, end_of_text).to_string())
}

/// The tokenizer.json GPT-2 is published with on the Hugging Face hub.
fn byte_level_tokenizer_json(
    vocab: Vec<(String, u32)>,
    merges: Vec<(String, String)>,
    end_of_text: Option<&str>,
) -> Value {
    let end_of_text_id = end_of_text.and_then(|t| vocab.iter().find(|(token, _)| token == t).map(|(_, id)| *id));
    let mut vocab_map = serde_json::Map::new();
    for (token, id) in vocab {
        vocab_map.insert(token, json!(id));
    }
    if let (Some(token), None) = (end_of_text, end_of_text_id) {
        vocab_map.insert(token.to_string(), json!(END_OF_TEXT_ID));
    }
    let added_tokens: Vec<Value> = end_of_text
        .map(|token| {
            json!({"id": end_of_text_id.unwrap_or(END_OF_TEXT_ID), "content": token, "single_word": false,
                   "lstrip": false, "rstrip": false, "normalized": true, "special": true})
        })
        .into_iter()
        .collect();
    let byte_level = |add_prefix_space: bool, trim_offsets: bool| json!({"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets, "use_regex": true});
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": null,
        "pre_tokenizer": byte_level(false, true),
        "post_processor": byte_level(true, false),
        "decoder": byte_level(true, true),
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab_map,
            "merges": merges.into_iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
        }
    })
}

/// Recovers the merge list from ranks: for every multi-byte token, in rank order,
/// run BPE on its bytes with only lower ranks; the two final parts are its merge.
/// A merge of two byte strings into one token.
type Merge = (Vec<u8>, Vec<u8>);

pub(super) fn merges_from_ranks(ranks: &[Vec<u8>]) -> Result<Vec<Merge>, String> {
    let rank_of: HashMap<&[u8], usize> =
        ranks.iter().enumerate().map(|(rank, bytes)| (bytes.as_slice(), rank)).collect();
    let mut merges = Vec::new();
    for (rank, token) in ranks.iter().enumerate() {
        if token.len() < 2 {
            continue;
        }
        // Boundaries of the current parts within `token`.
        let mut bounds: Vec<usize> = (0..=token.len()).collect();
        loop {
            let best = (0..bounds.len() - 2)
                .filter_map(|i| rank_of.get(&token[bounds[i]..bounds[i + 2]]).map(|&r| (r, i)))
                .filter(|&(r, _)| r < rank)
                .min();
            match best {
                Some((_, i)) => {
                    bounds.remove(i + 1);
                }
                None => break,
            }
        }
        if bounds.len() != 3 {
            return Err(format!("rank {rank} does not come from a single merge"));
        }
        merges.push((token[..bounds[1]].to_vec(), token[bounds[1]..].to_vec()));
    }
    Ok(merges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::bytelevel::bytes_to_token;

    /// GPT-2's tokenizer.json from the `r50k_base` ranks in `tiktoken-rs`.
    fn derived_from_ranks() -> String {
        let bpe = tiktoken_rs::r50k_base().unwrap();
        let ranks: Vec<Vec<u8>> = (0..END_OF_TEXT_ID).map(|rank| bpe.decode_bytes(&[rank]).unwrap()).collect();
        let merges = merges_from_ranks(&ranks).unwrap();
        let vocab: Vec<(String, u32)> =
            ranks.iter().enumerate().map(|(id, bytes)| (bytes_to_token(bytes), id as u32)).collect();
        let merges: Vec<(String, String)> =
            merges.iter().map(|(a, b)| (bytes_to_token(a), bytes_to_token(b))).collect();
        byte_level_tokenizer_json(vocab, merges, Some(END_OF_TEXT)).to_string()
    }

    const EMBEDDED_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/tokenizer/gpt2-tokenizer.json.zst");

    #[test]
    fn the_embedded_gpt2_is_the_one_derived_from_its_ranks() {
        assert!(
            builtin_tokenizer_json().unwrap() == derived_from_ranks(),
            "{EMBEDDED_PATH} is not what the ranks give; rewrite it with `cargo test --lib write_embedded_gpt2 -- --ignored`"
        );
    }

    /// Rewrites the embedded file from the ranks (after a change to the derivation).
    #[test]
    #[ignore = "writes a source file"]
    fn write_embedded_gpt2() {
        let compressed = zstd::bulk::compress(derived_from_ranks().as_bytes(), 19).unwrap();
        std::fs::write(EMBEDDED_PATH, compressed).unwrap();
    }

    #[test]
    fn builtin_gpt2_has_gpt2_shape() {
        let json: Value = serde_json::from_str(builtin_tokenizer_json().unwrap()).unwrap();
        assert_eq!(json["model"]["vocab"].as_object().unwrap().len(), 50257);
        let merges = json["model"]["merges"].as_array().unwrap();
        assert_eq!(merges.len(), 50000);
        // GPT-2's merges.txt starts with "Ġ t".
        assert_eq!(merges[0], json!(["\u{120}", "t"]));
        assert_eq!(json["model"]["vocab"]["<|endoftext|>"], json!(50256));
    }
}
