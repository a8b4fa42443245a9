//! Token layouts written beside the Arrow files of a view, for trainers that do
//! not read `datasets`: Megatron-LM / GPT-NeoX indexed datasets and flat token files.
//!
//! Both are made from the same per-unit parts, written while the view's rows are
//! written by a [`RowSink`]: the unit's tokens in the declared dtype, row after row,
//! the length of every row, and, where rows hold several documents that a reader
//! keeps apart (`position_ids`, `best_fit`), every document piece's place. At
//! publish the parts of a split are put together in unit order, so the result is
//! the same whatever the worker count.

pub mod flat;
pub mod litdata;
pub mod mds;
pub mod megatron;
pub mod modded_nanogpt;
pub mod nanotron;
pub mod olmo;
mod parts;
mod rows;

use std::path::{Path, PathBuf};

use crate::cache::manifest::WrittenFile;
use crate::cache::writer::{PartWriter, Row, WriteError};
use crate::errors::IoError;
use crate::fsutil;
use crate::spec::{Format, Formats, TokenType};

pub use parts::{TokenParts, UnitParts};

use parts::token_size;

/// A trainer format's token file (nanotron's, OLMo's): the ids of the rows end to end
/// in uint16 or uint32 by the vocabulary. A hard link to `shared` (a file of the same
/// bytes already in the entry), else the token parts themselves when they have that
/// width, else the rows written again in it.
fn trainer_tokens(
    entry_root: &Path,
    parts: &SplitParts,
    shared: Option<&WrittenFile>,
    relative: String,
) -> Result<WrittenFile, WriteError> {
    if let Some(shared) = shared {
        return link_same(entry_root, shared, relative);
    }
    let path = entry_root.join(&relative);
    let wide = parts.trainer_token_bytes() == 4;
    if token_size(parts.token_type) == parts.trainer_token_bytes() {
        return parts.join_tokens(&path, relative);
    }
    let mut file = crate::cache::hashed_file::HashedFile::create(&path)?;
    let mut block = Vec::new();
    rows::for_each_row(parts, |row| {
        block.clear();
        rows::encode(row, wide, &mut block);
        Ok(file.append(&block)?)
    })?;
    Ok(file.finish(relative)?)
}

/// `relative` in the entry made a hard link to `shared`, a file of the same bytes
/// already there; its record is `shared`'s under the new path.
fn link_same(entry_root: &Path, shared: &WrittenFile, relative: String) -> Result<WrittenFile, WriteError> {
    let path = entry_root.join(&relative);
    fsutil::create_dir_all(path.parent().unwrap_or(entry_root)).map_err(IoError::at("writing", &path))?;
    std::fs::hard_link(entry_root.join(&shared.path), &path).map_err(IoError::at("writing", &path))?;
    Ok(WrittenFile { path: relative, ..shared.clone() })
}

/// Receives every row a view unit produces and fans it out to the Arrow writer and,
/// when extra formats are asked for, to the unit's token parts.
pub struct RowSink<F: Fn(usize) -> PathBuf> {
    /// None where the view links another view's Arrow files (the same rows).
    arrow: Option<PartWriter<F>>,
    tokens: Option<TokenParts>,
}

/// What a unit wrote: its Arrow files and its token parts (none without extra formats).
pub struct SinkFiles {
    pub arrow: Vec<WrittenFile>,
    pub formats: Option<UnitParts>,
}

/// What the extra formats need of a view's rows.
#[derive(Debug, Clone, Copy)]
pub struct FormatsPlan<'a> {
    pub formats: &'a Formats,
    pub token_type: TokenType,
    /// Rows hold documents a reader keeps apart: their pieces are recorded.
    pub documents: bool,
}

impl<F: Fn(usize) -> PathBuf> RowSink<F> {
    /// `part(kind)` names the unit's token part of that kind.
    pub fn new(
        arrow: Option<PartWriter<F>>,
        plan: FormatsPlan,
        part: impl Fn(&str) -> PathBuf,
    ) -> Result<Self, WriteError> {
        let pieces = plan.documents || plan.formats.reads_documents();
        let tokens = match plan.formats.any_extra() {
            true => Some(TokenParts::create(&part, plan.token_type, pieces)?),
            false => None,
        };
        Ok(RowSink { arrow, tokens })
    }

    pub fn push_row(&mut self, row: Row) -> Result<(), WriteError> {
        if let Some(tokens) = &mut self.tokens {
            tokens.push_row(row)?;
        }
        match &mut self.arrow {
            Some(arrow) => arrow.push_row(row),
            None => Ok(()),
        }
    }

    pub fn finish(self) -> Result<SinkFiles, WriteError> {
        let formats = match self.tokens {
            Some(tokens) => Some(tokens.finish()?),
            None => None,
        };
        let arrow = match self.arrow {
            Some(arrow) => arrow.finish()?,
            None => Vec::new(),
        };
        Ok(SinkFiles { arrow, formats })
    }
}

/// What the formats of one split are made from: its units' parts, in unit order.
pub struct SplitParts<'a> {
    pub split: &'a str,
    pub units: &'a [UnitParts],
    pub token_type: TokenType,
    /// The view keeps documents apart in its rows (`FormatsPlan::documents`): the
    /// Megatron and flat layouts then hold document pieces.
    pub documents: bool,
    /// Rows are padded (`best_fit`).
    pub padded: bool,
    /// The tokenizer's vocabulary size: the trainer formats' dtype follows it.
    pub vocab_size: u64,
    /// The tokenizer's name, as the token store records its source.
    pub tokenizer: &'a str,
}

impl SplitParts<'_> {
    /// Bytes per token in the nanotron and OLMo files: 2 up to 65,536 tokens, else 4.
    pub fn trainer_token_bytes(&self) -> u64 {
        if self.vocab_size > 1 << 16 { 4 } else { 2 }
    }

    pub fn rows(&self) -> u64 {
        self.units.iter().map(|unit| unit.rows).sum()
    }

    pub fn tokens(&self) -> u64 {
        self.units.iter().map(|unit| unit.tokens_count).sum()
    }

    /// Document pieces across units, when they are recorded.
    pub fn pieces(&self) -> Option<u64> {
        self.documents.then(|| self.units.iter().map(|unit| unit.piece_count).sum())
    }

    /// Puts the token parts together as `target`: a single part is hard-linked (its
    /// size and hash are known from when it was written), several are concatenated.
    fn join_tokens(&self, target: &Path, relative: String) -> Result<WrittenFile, WriteError> {
        match self.units {
            [unit] => {
                fsutil::create_dir_all(target.parent().unwrap_or(Path::new(".")))
                    .map_err(IoError::at("writing", target))?;
                std::fs::hard_link(&unit.tokens.0, target).map_err(IoError::at("writing", target))?;
                Ok(WrittenFile { path: relative, rows: 0, tokens: 0, ..unit.tokens.1.clone() })
            }
            _ => {
                let parts: Vec<PathBuf> = self.units.iter().map(|unit| unit.tokens.0.clone()).collect();
                parts::concatenate(&parts, target, relative)
            }
        }
    }

    /// Calls `each` with every document piece of the split as (start, length), start
    /// counted in tokens from the split's first, in order.
    fn for_each_piece(&self, mut each: impl FnMut(u64, u32) -> Result<(), WriteError>) -> Result<(), WriteError> {
        let mut base = 0;
        for unit in self.units {
            if let Some(pieces) = &unit.pieces {
                parts::for_each_record::<12>(std::slice::from_ref(pieces), |record| {
                    let start = u64::from_le_bytes(record[..8].try_into().unwrap_or_default());
                    let length = u32::from_le_bytes(record[8..].try_into().unwrap_or_default());
                    each(base + start, length)
                })?;
            }
            base += unit.tokens_count;
        }
        Ok(())
    }

    fn lengths(&self) -> Vec<PathBuf> {
        self.units.iter().map(|unit| unit.lengths.clone()).collect()
    }
}

/// Writes the extra formats of one split into the assembly at `entry_root`,
/// returning their files (paths relative to the entry) for the manifest.
pub fn assemble_split(
    entry_root: &Path,
    parts: &SplitParts,
    formats: &Formats,
) -> Result<Vec<WrittenFile>, WriteError> {
    let mut files = Vec::new();
    if !formats.any_extra() {
        return Ok(files);
    }
    // Formats that hold the same token bytes share one file: each later one is a hard
    // link to the first. Megatron's and flat's are in the view's token type; OLMo's and
    // nanotron's in uint16 or uint32 by the vocabulary, the same bytes when the widths agree.
    let mut data: Option<WrittenFile> = None;
    if formats.megatron() {
        data = Some(megatron::write_split(entry_root, parts, &mut files)?);
    }
    if formats.flat() {
        data = Some(flat::write_split(entry_root, parts, data.as_ref(), &mut files)?);
    }
    let same_width = token_size(parts.token_type) == parts.trainer_token_bytes();
    let mut trainer_data = data.filter(|_| same_width);
    if formats.has(Format::Olmo) {
        trainer_data = Some(olmo::write_split(entry_root, parts, trainer_data.as_ref(), &mut files)?);
    }
    if formats.has(Format::Nanotron) {
        nanotron::write_split(entry_root, parts, trainer_data.as_ref(), &mut files)?;
    }
    if formats.has(Format::ModdedNanogpt) {
        modded_nanogpt::write_split(entry_root, parts, &mut files)?;
    }
    if formats.has(Format::Litdata) {
        litdata::write_split(entry_root, parts, &mut files)?;
    }
    if formats.has(Format::Mds) {
        mds::write_split(entry_root, parts, &mut files)?;
    }
    Ok(files)
}
