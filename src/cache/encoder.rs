//! Which encoder produced a shard's ids, as recorded in shard records and the manifest.

/// Which encoder produced a shard's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EncoderKind {
    /// tiktoken's byte-level BPE core, guarded by sampled comparison.
    FastBytelevelBpe,
    /// The Hugging Face `tokenizers` crate.
    Tokenizers,
}
