//! Llama-3-structured tokenizer.json files built from tiktoken ranks (the
//! `cl100k_base` and `o200k_base` vocabularies embedded in `tiktoken-rs`): a
//! `Split` regex pre-tokenizer, `ByteLevel` without its own regex, merges
//! recovered from the ranks and `ignore_merges`, as Llama-3 is published. Real
//! vocabularies of 100k and 200k tokens, offline, for benchmarks and tests.

use serde_json::{Map, Value, json};

use super::bytelevel::bytes_to_token;
use super::gpt2::merges_from_ranks;
use super::patterns::LLAMA3_PATTERN;

/// A tiktoken vocabulary embedded in `tiktoken-rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranks {
    Cl100kBase,
    O200kBase,
}

impl Ranks {
    /// The ranks' bytes, rank order, without special tokens.
    pub fn tokens(self) -> Result<Vec<Vec<u8>>, String> {
        let bpe = match self {
            Ranks::Cl100kBase => tiktoken_rs::cl100k_base(),
            Ranks::O200kBase => tiktoken_rs::o200k_base(),
        }
        .map_err(|err| format!("cannot load the embedded {self:?} ranks: {err}"))?;
        let mut tokens = Vec::new();
        // The ordinary ranks are dense from 0; the first gap is where special tokens begin.
        while let Ok(bytes) = bpe.decode_bytes(&[tokens.len() as u32]) {
            tokens.push(bytes);
        }
        Ok(tokens)
    }

    /// The split pattern the vocabulary was trained with, in `tokenizers` syntax.
    pub fn pattern(self) -> &'static str {
        match self {
            Ranks::Cl100kBase => LLAMA3_PATTERN,
            Ranks::O200kBase => tiktoken_rs::O200K_BASE_PAT_STR,
        }
    }
}

/// A Llama-3-structured tokenizer.json for `ranks`, ids equal to ranks, with
/// `<|begin_of_text|>` and `<|end_of_text|>` added after the vocabulary.
pub fn llama3_style_tokenizer_json(ranks: Ranks) -> Result<Value, String> {
    let tokens = ranks.tokens()?;
    let merges: Vec<Value> = merges_from_ranks(&tokens)?
        .iter()
        .map(|(left, right)| json!([bytes_to_token(left), bytes_to_token(right)]))
        .collect();
    let mut vocab = Map::new();
    for (id, bytes) in tokens.iter().enumerate() {
        vocab.insert(bytes_to_token(bytes), json!(id));
    }
    let special = |offset: usize, content: &str| {
        json!({"id": tokens.len() + offset, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false});
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "<|begin_of_text|>"), special(1, "<|end_of_text|>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": ranks.pattern()}, "behavior": "Isolated", "invert": false},
            byte_level,
        ]},
        "post_processor": null,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
            "vocab": vocab, "merges": merges,
        }
    }))
}
