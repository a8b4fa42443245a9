//! What an entry holds, from its manifest and its own files only (never the raw
//! inputs): counts per split, the document lengths and tokens per source recorded
//! while preparing, how a view packed its rows and which token store it came from,
//! and the first rows (a token store's: documents) decoded with the tokenizer the
//! entry carries.
//! The entry may sit in a shared cache, so its files are opened without following
//! symlinks and read with bounds.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt16Type, UInt32Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use serde::Serialize;

use crate::cache::layout::{CacheLayout, ENTRIES_DIR};
use crate::cache::lookup::{LookupError, find_named_entry};
use crate::cache::manifest::{Counts, EntryKind, Manifest, MixtureRecord, PackingRecord, length_bucket_range};
use crate::cache::token_store;
use crate::errors::{Failure, Fault, IoError};
use crate::fsutil::untrusted::Dir;
use crate::tokenizer::{self, TokenizerError};

/// The largest `tokenizer.json` read back (the biggest published ones are ~20 MB).
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("entry {entry} has no split {split:?}; it has {}", available.join(", "))]
    NoSplit { entry: String, split: String, available: Vec<String> },
    #[error("reading rows of {path}: {message}")]
    Rows { path: PathBuf, message: String },
}

impl Failure for InspectError {
    fn fault(&self) -> Fault {
        match self {
            InspectError::NoSplit { .. } | InspectError::Rows { .. } => Fault::User,
            // Transparent: the wrapped error's own fault decides.
            InspectError::Lookup(lookup) => lookup.fault(),
            InspectError::Io(io) => io.fault(),
        }
    }
}

/// An entry as `ferry inspect` shows it.
#[derive(Debug, Serialize)]
pub struct Inspection {
    pub fingerprint: String,
    pub name: String,
    pub entry: PathBuf,
    pub kind: EntryKind,
    /// A view's token store, and whether it is still in the cache.
    pub token_store: Option<StoreOfView>,
    /// How a view packed its rows.
    pub packing: Option<PackingRecord>,
    /// A mixture's components and what each gave.
    pub mixture: Option<MixtureRecord>,
    /// The formats it holds, each with the line that opens the split with its trainer's reader.
    pub formats: Vec<crate::readers::Reader>,
    pub splits: BTreeMap<String, SplitView>,
    /// The split the rows come from.
    pub split: String,
    pub rows: Vec<DecodedRow>,
    /// The special tokens of the tokenizer (BOS, EOS and the like) as they appear in `text`.
    pub special_tokens: Vec<String>,
    /// Why rows are not decoded, when they are not (an entry made before entries carried
    /// their tokenizer).
    pub not_decoded: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct StoreOfView {
    pub fingerprint: String,
    pub present: bool,
}

#[derive(Debug, Serialize)]
pub struct SplitView {
    pub rows: u64,
    pub documents: u64,
    pub tokens: u64,
    /// Document lengths in tokens (BOS/EOS included, before packing).
    pub document_lengths: Vec<LengthBucket>,
    /// Tokens per value of the spec's first field filter; empty without one.
    pub tokens_by_source: BTreeMap<String, u64>,
}

#[derive(Debug, Serialize)]
pub struct LengthBucket {
    /// Documents of `from ..< to` tokens.
    pub from: u64,
    pub to: u64,
    pub documents: u64,
}

#[derive(Debug, Serialize)]
pub struct DecodedRow {
    pub row: u64,
    pub ids: Vec<u32>,
    /// The row decoded, special tokens written out.
    pub text: String,
}

/// Inspects the entry named `name_or_fingerprint` (a `by-name` name or a fingerprint prefix).
pub fn inspect(
    cache: &CacheLayout,
    name_or_fingerprint: &str,
    split: Option<&str>,
    rows: usize,
) -> Result<Inspection, InspectError> {
    let manifest = find_named_entry(cache, name_or_fingerprint)?;
    let short = manifest.short_fingerprint().to_string();
    let root = cache.root();
    let entry = Dir::open(root)
        .and_then(|cache_dir| cache_dir.open_dir(Path::new(ENTRIES_DIR).join(&short)))
        .map_err(IoError::at("opening the entry in", root))?;
    let split = match split {
        Some(split) => split.to_string(),
        None => manifest
            .splits
            .keys()
            .find(|name| *name == "train")
            .or(manifest.splits.keys().next())
            .cloned()
            .unwrap_or_default(),
    };
    let Some(record) = manifest.splits.get(&split) else {
        return Err(InspectError::NoSplit {
            entry: short,
            split,
            available: manifest.splits.keys().cloned().collect(),
        });
    };
    let ids = match manifest.kind {
        EntryKind::View => first_rows(&entry, &record.data_files, rows)?,
        EntryKind::Tokens => first_documents(&entry, &manifest, &record.data_files, rows)?,
    };
    let (rows, special_tokens, not_decoded) = match carried_tokenizer(&entry) {
        Ok(tokenizer) => decoded(&tokenizer, ids),
        Err(why) => (
            ids.into_iter()
                .enumerate()
                .map(|(row, ids)| DecodedRow { row: row as u64, ids, text: String::new() })
                .collect(),
            Vec::new(),
            Some(why),
        ),
    };
    let splits = manifest.splits.iter().map(|(name, record)| (name.clone(), split_view(&record.counts))).collect();
    let token_store = manifest.token_store.as_ref().map(|store| StoreOfView {
        fingerprint: store.fingerprint.clone(),
        present: cache.entry(&store.fingerprint[..16]).manifest().is_file(),
    });
    Ok(Inspection {
        fingerprint: manifest.fingerprint.clone(),
        name: manifest.name.clone(),
        entry: entry.path().to_path_buf(),
        kind: manifest.kind,
        token_store,
        packing: manifest.packing.clone(),
        mixture: manifest.mixture.clone(),
        formats: match manifest.kind {
            EntryKind::View => crate::readers::readers(&manifest, entry.path(), &split),
            EntryKind::Tokens => Vec::new(),
        },
        splits,
        split,
        rows,
        special_tokens,
        not_decoded,
    })
}

fn split_view(counts: &Counts) -> SplitView {
    let document_lengths = counts
        .document_lengths
        .iter()
        .enumerate()
        .map(|(bucket, &documents)| {
            let (from, to) = length_bucket_range(bucket);
            LengthBucket { from, to, documents }
        })
        .collect();
    SplitView {
        rows: counts.rows,
        documents: counts.documents,
        tokens: counts.tokens,
        document_lengths,
        tokens_by_source: counts.tokens_by_source.clone(),
    }
}

/// The first `limit` rows' `input_ids`, reading the split's files in order.
fn first_rows(entry: &Dir, data_files: &[String], limit: usize) -> Result<Vec<Vec<u32>>, InspectError> {
    let mut rows = Vec::new();
    for relative in data_files {
        if rows.len() >= limit {
            break;
        }
        let path = entry.display_path(relative);
        let rows_error = |message: String| InspectError::Rows { path: path.clone(), message };
        let file = entry.open_file(relative).map_err(IoError::at("opening", &path))?;
        let reader = arrow_ipc::reader::StreamReader::try_new(BufReader::new(file), None)
            .map_err(|err| rows_error(err.to_string()))?;
        for batch in reader {
            let batch = batch.map_err(|err| rows_error(err.to_string()))?;
            let lists = batch.column_by_name("input_ids").ok_or_else(|| rows_error("no input_ids column".into()))?;
            let lists = lists.as_list_opt::<i32>().ok_or_else(|| rows_error("input_ids is not a list".into()))?;
            for row in 0..lists.len() {
                if rows.len() >= limit {
                    return Ok(rows);
                }
                rows.push(ids_of(&lists.value(row)).map_err(rows_error)?);
            }
        }
    }
    Ok(rows)
}

/// Tokens shown of a token store's document at most: documents can be long, rows
/// (what views show) are at most `seq_len`.
const DOCUMENT_TOKENS_SHOWN: u64 = 1 << 16;

/// A token store's first `limit` documents (each up to `DOCUMENT_TOKENS_SHOWN`
/// tokens), reading its shards in order. Each shard's index is checked against its
/// `.bin` (see `token_store::read_index`), and no more is read than the file holds.
fn first_documents(
    entry: &Dir,
    manifest: &Manifest,
    bins: &[String],
    limit: usize,
) -> Result<Vec<Vec<u32>>, InspectError> {
    use std::os::unix::fs::FileExt;
    let Some(dtype) = manifest.documents.map(|documents| documents.dtype) else { return Ok(Vec::new()) };
    let size_of = |relative: &str| manifest.files.iter().find(|file| file.path == relative).map(|file| file.size);
    let mut documents = Vec::new();
    for bin in bins {
        if documents.len() >= limit {
            break;
        }
        let idx = format!("{}.idx", bin.strip_suffix(".bin").unwrap_or(bin));
        let path = entry.display_path(&idx);
        let rows_error = |message: String| InspectError::Rows { path: path.clone(), message };
        let (Some(bin_size), Some(idx_size)) = (size_of(bin), size_of(&idx)) else {
            return Err(rows_error("the manifest does not list it".into()));
        };
        let index = entry.read(&idx, idx_size).map_err(IoError::at("reading", &path))?;
        let lengths = token_store::read_index(&index, dtype, bin_size).map_err(rows_error)?;
        let file = entry.open_file(bin).map_err(IoError::at("opening", &entry.display_path(bin)))?;
        let size = file.metadata().map_err(IoError::at("reading", &entry.display_path(bin)))?.len();
        if size != bin_size {
            return Err(rows_error(format!("its .bin has {size} bytes, the manifest says {bin_size}")));
        }
        let mut offset = 0u64;
        for length in lengths.into_iter().take(limit - documents.len()) {
            let shown = u64::from(length).min(DOCUMENT_TOKENS_SHOWN) as usize;
            let mut bytes = vec![0; shown * dtype.bytes()];
            file.read_exact_at(&mut bytes, offset).map_err(IoError::at("reading", &entry.display_path(bin)))?;
            offset += u64::from(length) * dtype.bytes() as u64;
            let mut ids = Vec::with_capacity(length as usize);
            token_store::decode(&bytes, dtype, &mut ids);
            documents.push(ids);
        }
    }
    Ok(documents)
}

fn ids_of(values: &ArrayRef) -> Result<Vec<u32>, String> {
    Ok(match values.data_type() {
        DataType::Int32 => values.as_primitive::<Int32Type>().values().iter().map(|&id| id as u32).collect(),
        DataType::UInt16 => values.as_primitive::<UInt16Type>().values().iter().map(|&id| u32::from(id)).collect(),
        DataType::UInt32 => values.as_primitive::<UInt32Type>().values().to_vec(),
        other => return Err(format!("input_ids holds {other}, not a token type ferry writes")),
    })
}

/// The tokenizer the entry carries, or why there is none.
fn carried_tokenizer(entry: &Dir) -> Result<tokenizers::Tokenizer, String> {
    let path = entry.display_path("tokenizer.json");
    let json = entry.read("tokenizer.json", MAX_TOKENIZER_BYTES).map_err(|err| {
        format!("{}: {err} (entries made before ferry stored the tokenizer have none)", path.display())
    })?;
    let json = String::from_utf8(json).map_err(|_| format!("{} is not UTF-8", path.display()))?;
    tokenizer::from_json(&path.display().to_string(), &json).map_err(|err: TokenizerError| err.to_string())
}

/// Rows decoded with special tokens written out, and those tokens' text.
fn decoded(tokenizer: &tokenizers::Tokenizer, rows: Vec<Vec<u32>>) -> (Vec<DecodedRow>, Vec<String>, Option<String>) {
    let mut special: Vec<String> = tokenizer
        .get_added_tokens_decoder()
        .values()
        .filter(|token| token.special)
        .map(|token| token.content.clone())
        .collect();
    special.sort();
    let mut failure = None;
    let rows = rows
        .into_iter()
        .enumerate()
        .map(|(row, ids)| {
            let text = tokenizer.decode(&ids, false).unwrap_or_else(|err| {
                failure.get_or_insert_with(|| format!("decoding row {row}: {err}"));
                String::new()
            });
            DecodedRow { row: row as u64, ids, text }
        })
        .collect();
    (rows, special, failure)
}
