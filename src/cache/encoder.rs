//! Which encoder produced a shard's ids, as recorded in shard records and the manifest.

/// Which encoder produced a shard's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EncoderKind {
    /// ferry's byte-level BPE encoder (`tokenizer::fast`), guarded by sampled comparison.
    FastBytelevelBpe,
    /// The Hugging Face `tokenizers` crate.
    Tokenizers,
}

impl EncoderKind {
    /// The name the manifest and `prepare --json` use.
    pub fn name(self) -> &'static str {
        match self {
            EncoderKind::FastBytelevelBpe => "fast_bytelevel_bpe",
            EncoderKind::Tokenizers => "tokenizers",
        }
    }
}
