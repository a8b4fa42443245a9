//! `manifest.json`: what an entry is made of and how it was made. Written once,
//! when the entry is published; read by `stage`, `status`, `gc` and `verify`.
//!
//! An entry is one of two kinds. A token store holds every document's ids (what
//! tokenizing made); a view holds training rows derived from a token store (what a
//! trainer loads), complete by itself: it still loads and stages once its token
//! store is gone. Entries made before token stores existed have no `kind` and are
//! read as views without a token store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::errors::{Failure, Fault, IoError};
use crate::fsutil::untrusted;
/// Which encoder produced a shard's ids: the tokenizer module names its encoders.
pub use crate::tokenizer::EncoderKind;

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
    #[serde(default)]
    pub kind: EntryKind,
    /// A view's token store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_store: Option<TokenStoreRef>,
    /// How a view's rows were packed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packing: Option<PackingRecord>,
    /// How a token store holds its documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<DocumentsRecord>,
    /// A mixture's components and what each gave (a view of several token stores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixture: Option<MixtureRecord>,
}

/// How a mixture was mixed, and what each component gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MixtureRecord {
    pub seed: u64,
    /// The document tokens asked of each split that has a total; the others hold
    /// as many as need no repetition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub total_tokens: BTreeMap<String, u64>,
    pub components: Vec<ComponentRecord>,
}

/// One component of a mixture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentRecord {
    /// As the mixture spec names it: a spec file or an entry.
    pub name: String,
    /// Its token store's fingerprint, all 64 hex digits.
    pub token_store: String,
    /// Its weight over the sum of weights.
    pub weight: f64,
    pub max_epochs: Option<u64>,
    /// What it gave, per split.
    pub splits: BTreeMap<String, ComponentUse>,
}

/// What a component gave one split of a mixture.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ComponentUse {
    /// Document tokens in one epoch of its rows.
    pub tokens_available: u64,
    pub tokens_used: u64,
    pub rows: u64,
    /// Epochs begun over its rows.
    pub epochs: u64,
    /// Its share of the split's document tokens.
    pub realized_weight: f64,
}

/// What an entry holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// Training rows, derived from a token store (or, made before token stores, from the inputs).
    #[default]
    View,
    /// The documents' ids, the one product of tokenizing.
    Tokens,
}

impl EntryKind {
    pub fn name(self) -> &'static str {
        match self {
            EntryKind::View => "view",
            EntryKind::Tokens => "tokens",
        }
    }
}

/// The token store a view was derived from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenStoreRef {
    /// All 64 hex digits.
    pub fingerprint: String,
}

/// How a view's rows were made from its token store's documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackingRecord {
    pub pack: crate::spec::PackMode,
    pub seq_len: u64,
    /// Tokens of documents over all tokens in rows, padding included: 1 without
    /// padding; for best_fit, non-padding tokens / (rows x `seq_len`).
    pub fill: f64,
    /// Pad tokens added to rows (best_fit).
    pub padding_tokens: u64,
    /// The pad token's id, when rows are padded.
    pub pad_id: Option<u32>,
    /// Documents longer than a row, cut into pieces (best_fit).
    pub documents_split: u64,
    pub shuffle_seed: Option<u64>,
}

/// How a token store lays out its documents: per input shard, Megatron's indexed
/// dataset with one sequence per document (`tokens/<split>/<shard>.bin` and `.idx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentsRecord {
    pub dtype: StoreDtype,
}

/// The type a token store keeps ids in: the narrowest that holds the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreDtype {
    Uint16,
    /// Megatron has no uint32; ids below 2^31 are the same bits.
    Int32,
}

impl StoreDtype {
    pub fn for_vocabulary(vocab_size: u64) -> StoreDtype {
        if vocab_size <= 1 << 16 { StoreDtype::Uint16 } else { StoreDtype::Int32 }
    }

    pub fn bytes(self) -> usize {
        match self {
            StoreDtype::Uint16 => 2,
            StoreDtype::Int32 => 4,
        }
    }
}

/// One file of an entry as the manifest records it (and a shard record its parts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenFile {
    /// Path relative to the directory the caller names (a split or an entry).
    pub path: String,
    pub size: u64,
    pub blake3: String,
    pub rows: u64,
    pub tokens: u64,
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
    /// The pad token's id, or else EOS's: what best-fit rows are padded with.
    #[serde(default)]
    pub pad_id: Option<u32>,
    /// The BOS and EOS tokens' text, for the `tokenizer_config.json` a view carries.
    #[serde(default)]
    pub bos_token: Option<String>,
    #[serde(default)]
    pub eos_token: Option<String>,
}

/// One input file as it was when resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: PathBuf,
    pub size: u64,
    /// Modification time in nanoseconds since the epoch.
    pub mtime_ns: i128,
}

impl InputFile {
    /// The file's size and mtime now; the error carries no path (callers add it).
    pub fn stat(path: &Path) -> std::io::Result<InputFile> {
        let meta = std::fs::metadata(path)?;
        let mtime = meta.modified()?;
        let mtime_ns = match mtime.duration_since(UNIX_EPOCH) {
            Ok(after) => after.as_nanos() as i128,
            Err(before) => -(before.duration().as_nanos() as i128),
        };
        Ok(InputFile { path: path.to_path_buf(), size: meta.len(), mtime_ns })
    }
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
    /// Tokens of documents stored in rows (a view's padding is `packing.padding_tokens`;
    /// a token store's rows are its documents).
    pub tokens: u64,
    /// Tokens at the end of each shard too few for a row (concat).
    pub remainder_tokens: u64,
    /// Tokens cut off long documents (truncate).
    pub truncated_tokens: u64,
    pub input_bytes: u64,
    /// Documents by length in tokens, BOS/EOS included, before packing: entry `i`
    /// counts lengths in `2^(i-1) ..< 2^i` (entry 0: empty documents). See `length_bucket`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub document_lengths: Vec<u64>,
    /// Tokens of the documents from each source (the value of the spec's first field
    /// filter, e.g. `meta.pile_set_name`), before packing; empty without a field filter.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tokens_by_source: BTreeMap<String, u64>,
}

/// The histogram bucket of a document of `tokens` tokens (see `Counts::document_lengths`).
pub fn length_bucket(tokens: u64) -> usize {
    (u64::BITS - tokens.leading_zeros()) as usize
}

/// The lengths bucket `index` holds: `from ..< to` tokens.
pub fn length_bucket_range(index: usize) -> (u64, u64) {
    match index {
        0 => (0, 1),
        _ => (1 << (index - 1), 1 << index.min(63)),
    }
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
        if self.document_lengths.len() < other.document_lengths.len() {
            self.document_lengths.resize(other.document_lengths.len(), 0);
        }
        for (bucket, n) in other.document_lengths.iter().enumerate() {
            self.document_lengths[bucket] += n;
        }
        for (source, tokens) in &other.tokens_by_source {
            *self.tokens_by_source.entry(source.clone()).or_default() += tokens;
        }
    }

    /// Counts one document of `tokens` tokens from `source`.
    pub fn add_document(&mut self, tokens: u64, source: Option<&str>) {
        let bucket = length_bucket(tokens);
        if self.document_lengths.len() <= bucket {
            self.document_lengths.resize(bucket + 1, 0);
        }
        self.document_lengths[bucket] += 1;
        match source.map(|source| (self.tokens_by_source.get_mut(source), source)) {
            Some((Some(total), _)) => *total += tokens,
            Some((None, source)) => {
                self.tokens_by_source.insert(source.to_string(), tokens);
            }
            None => {}
        }
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
    /// Tokenizing (a token store), or the tokenizing this prepare did before the view (a view).
    pub tokenize_seconds: f64,
    /// Deriving a view's rows from its token store.
    #[serde(default)]
    pub view_seconds: f64,
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
    #[error(transparent)]
    Read(#[from] IoError),
    #[error(
        "manifest {} is invalid: {message}; the entry cannot be used: remove it (`ferry gc` removes invalid entries) and prepare again",
        path.display()
    )]
    Invalid { path: PathBuf, message: String },
}

/// The largest manifest read: one of an entry with 100,000 files is about 20 MB.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

impl Manifest {
    /// Reads and checks a manifest. Anyone who can write to a shared cache can
    /// write one, so it is read only if a regular file of bounded size, and every
    /// name and path in it must be plain (see `check`).
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let bytes = untrusted::read_regular(path, MAX_MANIFEST_BYTES).map_err(IoError::at("reading manifest", path))?;
        Manifest::parse(&bytes).map_err(|message| ManifestError::Invalid { path: path.to_path_buf(), message })
    }

    /// The manifest of the entry in `entry_dir`, a directory named by the entry's
    /// short fingerprint (in a cache or a destination), checked to name that entry.
    pub fn load_entry(entry_dir: &Path) -> Result<Manifest, ManifestError> {
        let path = entry_dir.join(crate::cache::layout::MANIFEST_FILE);
        let manifest = Manifest::load(&path)?;
        let directory = entry_dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        if manifest.short_fingerprint() != directory {
            return Err(ManifestError::Invalid {
                path: path.clone(),
                message: format!("it names entry {}, but lies in {directory}", manifest.short_fingerprint()),
            });
        }
        Ok(manifest)
    }

    /// Parses and checks a manifest's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|err| err.to_string())?;
        manifest.check()?;
        Ok(manifest)
    }

    /// What ferry relies on before it joins anything from a manifest to a path:
    /// a known version, a fingerprint of 64 hex digits (its first 16 name
    /// directories), and plain names and relative paths (no `..`, no absolute path),
    /// so that no manifest can steer a stage, gc or verify outside the entry.
    fn check(&self) -> Result<(), String> {
        if self.manifest_version != MANIFEST_VERSION {
            return Err(format!(
                "manifest version {} is not {MANIFEST_VERSION}; this entry was made by another ferry version",
                self.manifest_version
            ));
        }
        if !is_hex_digest(&self.fingerprint) {
            return Err(format!("fingerprint {:?} is not 64 lowercase hex digits", self.fingerprint));
        }
        if let Some(store) = &self.token_store
            && !is_hex_digest(&store.fingerprint)
        {
            return Err(format!("token_store: fingerprint {:?} is not 64 lowercase hex digits", store.fingerprint));
        }
        if (self.kind == EntryKind::Tokens) != self.documents.is_some() {
            return Err("a token store, and only a token store, records how it holds documents".into());
        }
        untrusted::check_name(&self.name).map_err(|why| format!("name: {why}"))?;
        for (split, record) in &self.splits {
            untrusted::check_name(split).map_err(|why| format!("split name: {why}"))?;
            for file in &record.data_files {
                untrusted::check_relative(file).map_err(|why| format!("split {split}: {why}"))?;
            }
        }
        for file in &self.files {
            untrusted::check_relative(&file.path).map_err(|why| format!("files: {why}"))?;
            if file.path == crate::cache::layout::MANIFEST_FILE {
                return Err("files: lists the manifest itself".into());
            }
            if !is_hex_digest(&file.blake3) {
                return Err(format!("files: {}: blake3 {:?} is not 64 lowercase hex digits", file.path, file.blake3));
            }
        }
        Ok(())
    }

    pub fn short_fingerprint(&self) -> &str {
        // `check` made it 64 ASCII hex digits.
        &self.fingerprint[..16]
    }
}

/// Whether `text` is a blake3 digest as ferry writes it: 64 lowercase hex digits.
pub fn is_hex_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Failure for ManifestError {
    fn fault(&self) -> Fault {
        match self {
            ManifestError::Read(_) => Fault::Cause,
            ManifestError::Invalid { .. } => Fault::User,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_json() -> serde_json::Value {
        serde_json::json!({
            "manifest_version": MANIFEST_VERSION,
            "fingerprint": "ab".repeat(32),
            "name": "pile",
            "tool_version": "0",
            "created_unix": 0,
            "spec": {},
            "tokenizer": {"source": "builtin", "blake3": "00", "vocab_size": 1, "encoder": "tokenizers",
                          "fast_unavailable": null, "bos_id": null, "eos_id": null},
            "splits": {"train": {"inputs": [], "data_files": ["train/data-00000-of-00001.arrow"],
                                 "documents": 0, "filtered_documents": 0, "skipped_records": {}, "rows": 0,
                                 "tokens": 0, "remainder_tokens": 0, "truncated_tokens": 0, "input_bytes": 0}},
            "files": [{"path": "train/data-00000-of-00001.arrow", "size": 1, "blake3": "cd".repeat(32),
                       "rows": 0, "tokens": 0}],
            "totals": {"documents": 0, "filtered_documents": 0, "skipped_records": {}, "rows": 0, "tokens": 0,
                       "remainder_tokens": 0, "truncated_tokens": 0, "input_bytes": 0, "bytes": 1},
            "timings": {"hash_inputs_seconds": 0.0, "tokenize_seconds": 0.0, "publish_seconds": 0.0,
                        "total_seconds": 0.0},
            "build": {"host": "h", "pid": 1, "workers": 1, "shards_tokenized_here": 1, "shards_total": 1}
        })
    }

    fn parse(value: &serde_json::Value) -> Result<Manifest, String> {
        Manifest::parse(&serde_json::to_vec(value).unwrap())
    }

    #[test]
    fn a_well_formed_manifest_parses() {
        let manifest = parse(&manifest_json()).unwrap();
        assert_eq!(manifest.short_fingerprint(), "abababababababab");
    }

    #[test]
    fn paths_and_names_that_leave_the_entry_are_refused() {
        let cases: [(&str, serde_json::Value); 7] = [
            ("/files/0/path", "s/../../../home/victim/notes.txt".into()),
            ("/files/0/path", "/etc/passwd".into()),
            ("/files/0/path", "manifest.json".into()),
            ("/name", "../../..".into()),
            ("/fingerprint", "../../../../tmp/x".into()),
            ("/splits/train/data_files/0", "../x".into()),
            ("/files/0/blake3", "zz".into()),
        ];
        for (pointer, value) in cases {
            let mut json = manifest_json();
            *json.pointer_mut(pointer).unwrap() = value.clone();
            assert!(parse(&json).is_err(), "{pointer} = {value} was accepted");
        }
    }
}
