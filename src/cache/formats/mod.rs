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

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use crate::cache::layout::BuildLayout;
use crate::cache::writer::{PartWriter, WriteError, WrittenFile};
use crate::fsutil;
use crate::spec::TokenType;

pub use parts::TokenParts;

/// One layout an entry can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Hugging Face `datasets` Arrow files: always written.
    Hf,
    /// `megatron/<split>_text_document.{bin,idx}`.
    Megatron,
    /// `flat/<split>.bin` with `<split>.offsets.npy` and `<split>.json`.
    Flat,
}

/// The formats a spec asks for. The Arrow files are always written: the entry's
/// row counts, resumable shard records and `load_from_disk` all rest on them, so
/// `"hf"` may be listed or left out and means the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Formats {
    extra: BTreeSet<Format>,
}

impl<'de> Deserialize<'de> for Formats {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let listed = Vec::<Format>::deserialize(deserializer)?;
        Ok(Formats { extra: listed.into_iter().filter(|format| *format != Format::Hf).collect() })
    }
}

impl Formats {
    pub fn new(extra: impl IntoIterator<Item = Format>) -> Formats {
        Formats { extra: extra.into_iter().filter(|format| *format != Format::Hf).collect() }
    }

    pub fn megatron(&self) -> bool {
        self.extra.contains(&Format::Megatron)
    }

    pub fn flat(&self) -> bool {
        self.extra.contains(&Format::Flat)
    }

    /// Whether any format beyond the Arrow files is asked for.
    pub fn any_extra(&self) -> bool {
        !self.extra.is_empty()
    }

    /// The extra formats for the fingerprint, in a fixed order; `None` for the
    /// Arrow files alone, so such specs keep the fingerprint they always had.
    pub fn canonical(&self) -> Option<serde_json::Value> {
        self.any_extra().then(|| serde_json::json!(self.extra))
    }

    /// Refuses combinations a reader cannot load.
    pub fn check(&self, token_type: TokenType) -> Result<(), String> {
        if self.megatron() && token_type == TokenType::Uint32 {
            return Err("output.formats has \"megatron\", whose index has no uint32 dtype code; \
                 set output.token_type = \"int32\" (or \"uint16\" for vocabularies under 65536)"
                .into());
        }
        Ok(())
    }
}

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
                fsutil::create_dir_all(target.parent().unwrap_or(Path::new("."))).map_err(io_error(target))?;
                std::fs::hard_link(part, target).map_err(io_error(target))?;
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

pub(crate) fn io_error(path: &Path) -> impl Fn(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io { path: path.to_path_buf(), source }
}
