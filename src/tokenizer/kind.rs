//! The encoders a build can use, by the name the manifest records.

/// Which encoder produced a shard's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EncoderKind {
    /// ferry's byte-level BPE encoder (`tokenizer::fast`), guarded by sampled comparison.
    FastBytelevelBpe,
    /// ferry's SentencePiece-style BPE encoder (`tokenizer::fast`), guarded the same way.
    FastSentencepieceBpe,
    /// The Hugging Face `tokenizers` crate.
    Tokenizers,
}

impl EncoderKind {
    /// Whether this is one of ferry's own encoders, checked against the tokenizer's.
    pub fn is_fast(self) -> bool {
        self != EncoderKind::Tokenizers
    }

    /// The name the manifest and `prepare --json` use.
    pub fn name(self) -> &'static str {
        match self {
            EncoderKind::FastBytelevelBpe => "fast_bytelevel_bpe",
            EncoderKind::FastSentencepieceBpe => "fast_sentencepiece_bpe",
            EncoderKind::Tokenizers => "tokenizers",
        }
    }
}
