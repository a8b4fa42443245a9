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

/// Why the fast encoder cannot reproduce a tokenizer (recorded in the manifest as
/// `fast_unavailable`; the tokenizer's own encoder is used instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

impl crate::errors::Failure for Unsupported {
    fn fault(&self) -> crate::errors::Fault {
        crate::errors::Fault::Internal
    }
}

impl FastEncoder {
    /// Builds the fast encoder from a tokenizer's serialized form, or says why it
    /// cannot reproduce that tokenizer.
    pub fn for_tokenizer(serialized: &Value) -> Result<FastEncoder, Unsupported> {
        let nfc = recognize::normalizer_is_nfc(&serialized["normalizer"]).map_err(Unsupported)?;
        let pre_tokenizer =
            PreTokenizer::new(recognize::split_steps(&serialized["pre_tokenizer"]).map_err(Unsupported)?);
        let merger = recognize::merger(&serialized["model"]).map_err(Unsupported)?;
        let added = recognize::added_tokens(&serialized["added_tokens"]).map_err(Unsupported)?;
        let added = AddedTokens::new(&added, nfc).map_err(Unsupported)?;
        Ok(FastEncoder { added, pre_tokenizer, merger })
    }

    /// Token ids of `text`. `None` is kept for encoders that can give up on a
    /// text; this one never does, since its regex engine stops where `tokenizers`' stops.
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        let mut spans = Vec::new();
        let mut pieces = self.merger.pieces();
        self.added.for_each_part(text, &mut |part| match part {
            Part::Token(id) => ids.push(id),
            Part::Text(text) => self.pre_tokenizer.for_each_piece(text, &mut spans, |start, end| {
                pieces.encode(&text.as_bytes()[start..end], &mut ids);
            }),
        });
        Some(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gpt2_with(change: impl Fn(&mut Value)) -> Result<FastEncoder, Unsupported> {
        let mut serialized: Value = serde_json::from_str(super::super::builtin_gpt2_json().unwrap()).unwrap();
        change(&mut serialized);
        FastEncoder::for_tokenizer(&serialized)
    }

    #[test]
    fn components_it_cannot_reproduce_are_named() {
        assert!(gpt2_with(|_| {}).is_ok());
        let reason = |change: &dyn Fn(&mut Value)| gpt2_with(change).err().unwrap().0;
        let metaspace = json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": false});
        assert!(reason(&|t| t["pre_tokenizer"] = metaspace.clone()).contains("does not end in ByteLevel"));
        assert!(reason(&|t| t["normalizer"] = json!({"type": "Lowercase"})).contains("Lowercase is not NFC"));
        assert!(reason(&|t| t["model"]["byte_fallback"] = json!(true)).contains("byte fallback"));
        assert!(reason(&|t| t["model"]["dropout"] = json!(0.1)).contains("dropout"));
        assert!(reason(&|t| t["pre_tokenizer"]["add_prefix_space"] = json!(true)).contains("prefix space"));
        let stripped = |t: &mut Value| t["added_tokens"][0]["lstrip"] = json!(true);
        assert!(reason(&stripped).contains("strips spaces"));
    }
}
