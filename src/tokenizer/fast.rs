//! The fast encoder for byte-level BPE tokenizers (GPT-2, Llama-3, Qwen2, GPT-4o,
//! DeepSeek-V3 and the like): added tokens, NFC, the tokenizer's own split
//! regexes, then merges by rank with a per-thread cache of pre-token ids.
//!
//! It is used only for tokenizers whose every component it reproduces (see
//! `recognize`), and every run still compares its ids with the reference encoder
//! on a sample of documents (see `tokenizer::Encoders`).

use serde_json::Value;

use super::added::{AddedTokens, Part};
use super::bpe::BytePairMerger;
use super::pretokenize::PreTokenizer;
use super::recognize;

pub struct FastEncoder {
    added: AddedTokens,
    pre_tokenizer: PreTokenizer,
    merger: BytePairMerger,
}

impl FastEncoder {
    /// Builds the fast encoder from a tokenizer's serialized form, or says why it
    /// cannot reproduce that tokenizer.
    pub fn for_tokenizer(serialized: &Value) -> Result<FastEncoder, String> {
        let nfc = recognize::normalizer_is_nfc(&serialized["normalizer"])?;
        let pre_tokenizer = PreTokenizer::new(recognize::split_steps(&serialized["pre_tokenizer"])?);
        let merger = recognize::merger(&serialized["model"])?;
        let added = AddedTokens::new(&recognize::added_tokens(&serialized["added_tokens"])?, nfc)?;
        Ok(FastEncoder { added, pre_tokenizer, merger })
    }

    /// Token ids of `text`. `None` is kept for encoders that can give up on a
    /// text; this one never does, since its regex engine stops where `tokenizers`' stops.
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        let mut spans = Vec::new();
        self.added.for_each_part(text, &mut |part| match part {
            Part::Token(id) => ids.push(id),
            Part::Text(text) => {
                self.pre_tokenizer.split(text, &mut spans);
                for &(start, end) in &spans {
                    self.merger.encode_piece(&text.as_bytes()[start..end], &mut ids);
                }
            }
        });
        Some(ids)
    }
}
