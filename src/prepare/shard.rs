//! One input shard of a build: its task, the context every shard shares, the
//! record a finished shard leaves, and what can go wrong (`pipeline` tokenizes
//! it). Shards are independent, so a build runs them in parallel and resumes them
//! one by one.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;

use serde::{Deserialize, Serialize};

use crate::cache::layout::BuildLayout;
use crate::cache::manifest::EncoderKind;
use crate::cache::manifest::InputFile;
use crate::cache::manifest::StoreDtype;
use crate::cache::manifest::{Counts, InputRecord, WrittenFile};
use crate::errors::{Failure, Fault, IoError};
use crate::fsutil::untrusted;
use crate::source::{RecordProblem, Selector, SourceError};
use crate::spec::Spec;
use crate::tokenizer::{EncodeError, Encoders};

use super::budget::Budget;

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(
        "input {path} line {record}: {problem}; fix or remove the record, or set source.on_bad_record = \"skip\" to count and skip bad records"
    )]
    BadRecord { path: PathBuf, record: u64, problem: RecordProblem },
    #[error("input {path} line {record}")]
    Encode { path: PathBuf, record: u64, source: EncodeError },
    #[error(transparent)]
    Write(#[from] IoError),
    #[error("input {path} line {record}: the fast encoder's ids differ from the tokenizer's")]
    FastPathMismatch { path: PathBuf, record: u64 },
    #[error("writing shard record {path}")]
    Record { path: PathBuf, source: std::io::Error },
}

/// What one finished shard produced, saved as `parts/<split>/<shard>.done.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardRecord {
    pub split: String,
    pub shard: usize,
    pub input: InputRecord,
    pub encoder: EncoderKind,
    pub counts: Counts,
    /// The shard's `.bin` and `.idx`, paths as the token store holds them.
    pub files: Vec<WrittenFile>,
    pub seconds: f64,
    pub host: String,
    pub pid: u32,
}

/// One unit of work.
#[derive(Debug, Clone)]
pub struct ShardTask {
    pub split: String,
    pub shard: usize,
    pub input: InputFile,
    pub hash: blake3::Hash,
}

/// Live counters for progress reports.
#[derive(Debug, Default)]
pub struct BuildCounters {
    pub input_bytes: AtomicU64,
    pub documents: AtomicU64,
    pub tokens: AtomicU64,
}

/// Everything shard workers share.
pub struct ShardContext<'a> {
    pub spec: &'a Spec,
    pub encoders: &'a Encoders,
    pub selector: Selector,
    /// The type the token store keeps ids in.
    pub dtype: StoreDtype,
    pub build: &'a BuildLayout,
    pub counters: &'a BuildCounters,
    /// Batches in flight across every shard of the build.
    pub budget: &'a Budget,
    /// Whether each shard reads on a thread of its own rather than on the pool
    /// thread that runs it: where the pool leaves cores free (`--jobs` below the
    /// CPUs this process may use), reading there keeps the encoders encoding. With a
    /// pool on every core, reading threads would only take turns with encoders.
    pub reading_threads: bool,
}

impl ShardContext<'_> {
    /// The shard's record if it was finished before with this encoder and its
    /// part files are all still there.
    pub fn finished_record(&self, task: &ShardTask, kind: EncoderKind) -> Option<ShardRecord> {
        // Others may write the build directory: a regular file of bounded size only.
        let bytes = untrusted::read_regular(&self.build.shard_record(&task.split, task.shard), 16 << 20).ok()?;
        let record: ShardRecord = serde_json::from_slice(&bytes).ok()?;
        let same_input = record.input.blake3 == task.hash.to_hex().as_str();
        let parts_present = record.files.len() == 2
            && ["bin", "idx"].iter().zip(&record.files).all(|(extension, file)| {
                let path = self.build.document_part(&task.split, task.shard, extension);
                std::fs::metadata(path).is_ok_and(|m| m.len() == file.size)
            });
        (same_input && record.encoder == kind && parts_present).then_some(record)
    }
}

impl Failure for ShardError {
    fn fault(&self) -> Fault {
        Fault::Cause
    }
}
