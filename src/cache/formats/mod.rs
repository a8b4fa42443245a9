//! Token layouts written beside the Arrow files of an entry, for trainers that do
//! not read `datasets`: Megatron-LM / GPT-NeoX indexed datasets and flat token files.
//!
//! Both are made from the same two per-shard parts, written while tokenizing by a
//! [`RowSink`]: the shard's tokens in the declared dtype, row after row, and the
//! length of every row. At publish the parts of a split are put together in shard
//! order, so the result is the same whatever the worker count.

pub mod flat;
pub mod megatron;
mod parts;

use std::path::{Path, PathBuf};

use crate::cache::layout::BuildLayout;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::{PartWriter, WriteError};
use crate::errors::IoError;
use crate::fsutil;
use crate::spec::{Formats, TokenType};

pub use parts::TokenParts;

/// Receives every row a shard produces and fans it out to the Arrow writer and,
/// when extra formats are asked for, to the shard's token parts.
pub struct RowSink<F: Fn(usize) -> PathBuf> {
    arrow: PartWriter<F>,
    tokens: Option<TokenParts>,
}

/// What a shard wrote: its Arrow files and its token parts (empty without extra formats).
pub struct SinkFiles {
    pub arrow: Vec<WrittenFile>,
    pub formats: Vec<WrittenFile>,
}

impl<F: Fn(usize) -> PathBuf> RowSink<F> {
    pub fn new(
        arrow: PartWriter<F>,
        formats: &Formats,
        token_type: TokenType,
        build: &BuildLayout,
        split: &str,
        shard: usize,
    ) -> Result<Self, WriteError> {
        let tokens = match formats.any_extra() {
            true => Some(TokenParts::create(build, split, shard, token_type)?),
            false => None,
        };
        Ok(RowSink { arrow, tokens })
    }

    pub fn push_row(&mut self, row: &[u32]) -> Result<(), WriteError> {
        if let Some(tokens) = &mut self.tokens {
            tokens.push_row(row)?;
        }
        self.arrow.push_row(row)
    }

    pub fn finish(self) -> Result<SinkFiles, WriteError> {
        let formats = match self.tokens {
            Some(tokens) => tokens.finish()?,
            None => Vec::new(),
        };
        Ok(SinkFiles { arrow: self.arrow.finish()?, formats })
    }
}

/// One split's shards, in order, as the publisher sees them.
pub struct SplitShards<'a> {
    pub split: &'a str,
    /// Shard numbers in shard order.
    pub shards: Vec<usize>,
    pub rows: u64,
    pub tokens: u64,
    /// Each shard's token part as its record gives it (size and blake3), in shard order.
    pub token_parts: Vec<WrittenFile>,
}

/// What the formats of one split are made from: the shards' parts, in shard order.
pub struct SplitParts<'a> {
    pub shards: &'a SplitShards<'a>,
    pub tokens: Vec<PathBuf>,
    pub lengths: Vec<PathBuf>,
    pub token_type: TokenType,
}

impl SplitParts<'_> {
    /// Puts the token parts together as `target`: a single part is hard-linked (its
    /// size and hash are known from when it was written), several are concatenated.
    fn join_tokens(&self, target: &Path, relative: String) -> Result<WrittenFile, WriteError> {
        match (&self.tokens[..], &self.shards.token_parts[..]) {
            ([part], [known]) => {
                fsutil::create_dir_all(target.parent().unwrap_or(Path::new(".")))
                    .map_err(IoError::at("writing", target))?;
                std::fs::hard_link(part, target).map_err(IoError::at("writing", target))?;
                Ok(WrittenFile { path: relative, rows: 0, tokens: 0, ..known.clone() })
            }
            _ => parts::concatenate(&self.tokens, target, relative),
        }
    }
}

/// Writes the extra formats of one split into the assembly at `entry_root`,
/// returning their files (paths relative to the entry) for the manifest.
pub fn assemble_split(
    build: &BuildLayout,
    entry_root: &Path,
    shards: &SplitShards,
    formats: &Formats,
    token_type: TokenType,
) -> Result<Vec<WrittenFile>, WriteError> {
    let mut files = Vec::new();
    if !formats.any_extra() {
        return Ok(files);
    }
    let part = |kind| shards.shards.iter().map(|&shard| build.format_part(shards.split, shard, kind)).collect();
    let parts = SplitParts { shards, tokens: part("tokens"), lengths: part("lengths"), token_type };
    // Both formats hold the same token bytes: the second is a hard link to the first.
    let mut data: Option<WrittenFile> = None;
    if formats.megatron() {
        data = Some(megatron::write_split(entry_root, &parts, &mut files)?);
    }
    if formats.flat() {
        flat::write_split(entry_root, &parts, data.as_ref(), &mut files)?;
    }
    Ok(files)
}
