//! `manifest.json`: what an entry is made of and how it was made. Written once,
//! when the entry is published; read by `stage`, `status`, `gc` and `verify`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cache::encoder::EncoderKind;
use crate::cache::input_file::InputFile;
use crate::cache::writer::WrittenFile;

/// Bump on incompatible changes; readers refuse versions they do not know.
pub const MANIFEST_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub manifest_version: u32,
    /// All 64 hex digits; the entry's directory is named by the first 16.
    pub fingerprint: String,
    pub name: String,
    pub tool_version: String,
    /// Seconds since the epoch.
    pub created_unix: u64,
    pub spec: serde_json::Value,
    pub tokenizer: TokenizerRecord,
    pub splits: BTreeMap<String, SplitRecord>,
    /// Every file of the entry except this manifest, paths relative to the entry.
    pub files: Vec<WrittenFile>,
    pub totals: Totals,
    pub timings: Timings,
    pub build: BuildRecord,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenizerRecord {
    pub source: String,
    pub blake3: String,
    pub vocab_size: u64,
    pub encoder: EncoderKind,
    /// Why the fast encoder was not used, when it was not.
    pub fast_unavailable: Option<String>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputRecord {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i128,
    pub blake3: String,
}

impl InputRecord {
    pub fn new(file: &InputFile, hash: &blake3::Hash) -> InputRecord {
        InputRecord {
            path: file.path.display().to_string(),
            size: file.size,
            mtime_ns: file.mtime_ns,
            blake3: hash.to_hex().to_string(),
        }
    }
}

/// Counts for one split, or for the whole entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub documents: u64,
    pub filtered_documents: u64,
    /// Bad records skipped (`on_bad_record = "skip"`), per reason.
    pub skipped_records: BTreeMap<String, u64>,
    pub rows: u64,
    /// Tokens stored in rows.
    pub tokens: u64,
    /// Tokens at the end of each shard too few for a row (concat).
    pub remainder_tokens: u64,
    /// Tokens cut off long documents (truncate).
    pub truncated_tokens: u64,
    pub input_bytes: u64,
}

impl Counts {
    pub fn add(&mut self, other: &Counts) {
        self.documents += other.documents;
        self.filtered_documents += other.filtered_documents;
        for (reason, n) in &other.skipped_records {
            *self.skipped_records.entry(reason.clone()).or_default() += n;
        }
        self.rows += other.rows;
        self.tokens += other.tokens;
        self.remainder_tokens += other.remainder_tokens;
        self.truncated_tokens += other.truncated_tokens;
        self.input_bytes += other.input_bytes;
    }

    pub fn skipped_total(&self) -> u64 {
        self.skipped_records.values().sum()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SplitRecord {
    pub inputs: Vec<InputRecord>,
    /// Data files of the split, relative to the entry.
    pub data_files: Vec<String>,
    #[serde(flatten)]
    pub counts: Counts,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Totals {
    #[serde(flatten)]
    pub counts: Counts,
    /// Bytes of every file in the entry, manifest excluded.
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    pub hash_inputs_seconds: f64,
    pub tokenize_seconds: f64,
    pub publish_seconds: f64,
    pub total_seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildRecord {
    pub host: String,
    pub pid: u32,
    pub workers: usize,
    /// Shards this process tokenized (others may have been done by other tasks).
    pub shards_tokenized_here: usize,
    pub shards_total: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading manifest {path}")]
    Read { path: String, source: std::io::Error },
    #[error("manifest {path} is invalid: {message}")]
    Invalid { path: String, message: String },
}

impl Manifest {
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| ManifestError::Read { path: shown.clone(), source })?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|err| ManifestError::Invalid { path: shown.clone(), message: err.to_string() })?;
        if manifest.manifest_version != MANIFEST_VERSION {
            return Err(ManifestError::Invalid {
                path: shown,
                message: format!(
                    "manifest version {} is not {MANIFEST_VERSION}; this entry was made by another ferry version",
                    manifest.manifest_version
                ),
            });
        }
        Ok(manifest)
    }

    pub fn short_fingerprint(&self) -> &str {
        &self.fingerprint[..16.min(self.fingerprint.len())]
    }
}
