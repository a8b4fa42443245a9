//! Tokenizes one input shard into Arrow part files and a shard record. Shards are
//! independent, so a build runs them in parallel and resumes them one by one.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::cache::layout::BuildLayout;
use crate::cache::manifest::{Counts, InputRecord};
use crate::cache::writer::{Columns, WriteError, WrittenFile};
use crate::fsutil::untrusted;
use crate::inputs::InputFile;
use crate::source::{self, Document, RecordProblem, Selector, SourceError};
use crate::spec::Spec;
use crate::tokenizer::{EncoderKind, Encoders};

use super::budget::Budget;
use super::pipeline;

/// Documents tokenized together (in parallel) before packing.
pub(super) const BATCH_DOCUMENTS: usize = 256;
pub(super) const BATCH_TEXT_BYTES: usize = 1 << 20;
/// With the fast encoder, every n-th document of a shard is also encoded by the
/// reference encoder and must give the same ids.
pub const SAMPLE_EVERY: u64 = 128;

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(
        "input {path} line {record}: {problem}; fix or remove the record, or set source.on_bad_record = \"skip\" to count and skip bad records"
    )]
    BadRecord { path: PathBuf, record: u64, problem: RecordProblem },
    #[error("input {path} line {record}: the tokenizer failed: {message}")]
    Encode { path: PathBuf, record: u64, message: String },
    #[error(transparent)]
    Write(#[from] WriteError),
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
    /// Part files in order, names relative to the split's parts directory.
    pub files: Vec<WrittenFile>,
    /// Parts for the extra output formats, relative to the same directory.
    #[serde(default)]
    pub format_files: Vec<WrittenFile>,
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
    pub columns: Columns,
    pub build: &'a BuildLayout,
    pub counters: &'a BuildCounters,
    /// Batches in flight across every shard of the build.
    pub budget: &'a Budget,
}

impl ShardContext<'_> {
    /// The shard's record if it was finished before with this encoder and its
    /// part files are all still there.
    pub fn finished_record(&self, task: &ShardTask, kind: EncoderKind) -> Option<ShardRecord> {
        // Others may write the build directory: a regular file of bounded size only.
        let bytes = untrusted::read_regular(&self.build.shard_record(&task.split, task.shard), 16 << 20).ok()?;
        let record: ShardRecord = serde_json::from_slice(&bytes).ok()?;
        let same_input = record.input.blake3 == task.hash.to_hex().as_str();
        let parts_present = record.files.iter().chain(&record.format_files).all(|file| {
            let path = self.build.parts_dir(&task.split).join(&file.path);
            std::fs::metadata(path).is_ok_and(|m| m.len() == file.size)
        });
        (same_input && record.encoder == kind && parts_present).then_some(record)
    }

    /// Tokenizes the shard and saves its record.
    pub fn run(&self, task: &ShardTask, kind: EncoderKind) -> Result<ShardRecord, ShardError> {
        let started = Instant::now();
        let path = &task.input.path;
        let reader = source::open(path, self.spec.source.format, &self.selector)?;
        let (read, written) = pipeline::run(self, task, kind, reader)?;
        let counts = Counts {
            input_bytes: task.input.size,
            documents: read.documents,
            filtered_documents: read.filtered,
            skipped_records: read.skipped,
            rows: written.files.iter().map(|f| f.rows).sum(),
            tokens: written.files.iter().map(|f| f.tokens).sum(),
            remainder_tokens: written.stats.remainder_tokens,
            truncated_tokens: written.stats.truncated_tokens,
        };
        let (files, format_files) = (written.files, written.formats);
        let record = ShardRecord {
            split: task.split.clone(),
            shard: task.shard,
            input: InputRecord::new(&task.input, &task.hash),
            encoder: kind,
            counts,
            files,
            format_files,
            seconds: started.elapsed().as_secs_f64(),
            host: crate::fsutil::host_name(),
            pid: std::process::id(),
        };
        let record_path = self.build.shard_record(&task.split, task.shard);
        crate::fsutil::write_json_atomic(&record_path, &record)
            .map_err(|source| ShardError::Record { path: record_path, source })?;
        Ok(record)
    }

    /// Encodes documents in parallel (order kept), checking sampled documents
    /// against the reference encoder when the fast one is used.
    pub(super) fn encode_batch(
        &self,
        path: &std::path::Path,
        batch: &[Document],
        first_index: u64,
        kind: EncoderKind,
    ) -> Result<Vec<Vec<u32>>, ShardError> {
        batch
            .par_iter()
            .enumerate()
            .map(|(offset, document)| {
                let encode_error =
                    |message| ShardError::Encode { path: path.to_path_buf(), record: document.record, message };
                let ids = self.encoders.encode(&document.text, kind).map_err(encode_error)?;
                if kind == EncoderKind::FastBytelevelBpe && (first_index + offset as u64).is_multiple_of(SAMPLE_EVERY) {
                    let reference = self.encoders.encode_reference(&document.text).map_err(encode_error)?;
                    if reference != ids {
                        return Err(ShardError::FastPathMismatch { path: path.to_path_buf(), record: document.record });
                    }
                }
                Ok(self.encoders.with_bos_eos(ids))
            })
            .collect()
    }
}
