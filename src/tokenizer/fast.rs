//! A fast encoder for GPT-2 family byte-level BPE vocabularies, built on
//! tiktoken's BPE core (measured about 3x faster than the `tokenizers` crate here).
//!
//! It is used only for tokenizers whose every component it reproduces (checked
//! here), and every run still compares its ids with the reference encoder on a
//! sample of documents (see `tokenizer::Encoders`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use rustc_hash::FxHashMap;
use serde_json::Value;
use tiktoken_rs::CoreBPE;

use super::bytelevel::token_to_bytes;

/// tiktoken's form of GPT-2's pre-tokenizer regex: the same splits, with possessive
/// quantifiers (tiktoken `r50k_base`).
const GPT2_PATTERN: &str = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s";

pub struct FastEncoder {
    bpe: CoreBPE,
    /// Added tokens are matched in the raw text before BPE, as `tokenizers` does.
    match_added_tokens: bool,
}

impl FastEncoder {
    /// Builds the fast encoder from a tokenizer's serialized form, or says why it
    /// cannot reproduce that tokenizer.
    pub fn for_tokenizer(serialized: &Value) -> Result<FastEncoder, String> {
        let pre = &serialized["pre_tokenizer"];
        let byte_level_gpt2 =
            pre["type"] == "ByteLevel" && pre["add_prefix_space"] == false && pre["use_regex"] == true;
        if !byte_level_gpt2 {
            return Err("the pre-tokenizer is not GPT-2's ByteLevel split".into());
        }
        if !serialized["normalizer"].is_null() {
            return Err("the tokenizer has a normalizer".into());
        }
        let model = &serialized["model"];
        if model["type"] != "BPE" {
            return Err("the model is not BPE".into());
        }
        let empty = |v: &Value| v.is_null() || v == "";
        if !model["dropout"].is_null()
            || !empty(&model["continuing_subword_prefix"])
            || !empty(&model["end_of_word_suffix"])
        {
            return Err("the BPE model uses dropout or subword affixes".into());
        }
        if model["byte_fallback"] == true {
            return Err("the BPE model uses byte fallback".into());
        }
        let mut added = FxHashMap::default();
        for token in serialized["added_tokens"].as_array().into_iter().flatten() {
            if token["lstrip"] == true || token["rstrip"] == true || token["single_word"] == true {
                return Err("an added token strips spaces or matches single words".into());
            }
            let (Some(content), Some(id)) = (token["content"].as_str(), token["id"].as_u64()) else {
                return Err("an added token has no content or id".into());
            };
            added.insert(content.to_string(), id as u32);
        }
        let vocab = model["vocab"].as_object().ok_or("the BPE model has no vocabulary")?;
        let mut encoder: FxHashMap<Vec<u8>, u32> = FxHashMap::default();
        for (token, id) in vocab {
            let id = id.as_u64().ok_or("a vocabulary id is not a number")? as u32;
            match token_to_bytes(token) {
                Some(bytes) => {
                    encoder.insert(bytes, id);
                }
                None if added.contains_key(token) => {}
                None => return Err(format!("vocabulary token {token:?} is not byte-level")),
            }
        }
        if (0..=255u8).any(|b| !encoder.contains_key(&vec![b])) {
            return Err("the vocabulary lacks some single bytes".into());
        }
        let mut ids: Vec<u32> = encoder.values().copied().collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err("two vocabulary tokens share an id".into());
        }
        let match_added_tokens = !added.is_empty();
        let bpe = CoreBPE::new(encoder, added, GPT2_PATTERN).map_err(|err| err.to_string())?;
        Ok(FastEncoder { bpe, match_added_tokens })
    }

    /// Token ids of `text`, or `None` if the regex engine gave up on it (its
    /// backtracking limit), in which case the caller uses the reference encoder.
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        catch_unwind(AssertUnwindSafe(|| {
            if self.match_added_tokens {
                self.bpe.encode_with_special_tokens(text)
            } else {
                self.bpe.encode_ordinary(text)
            }
        }))
        .ok()
    }
}
