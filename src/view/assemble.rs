//! A view's units put together as an entry in a private assembly directory: Arrow
//! parts hard-linked under their `datasets` names, split metadata, the extra
//! formats, `dataset_dict.json`, the tokenizer files (the token store's
//! `tokenizer.json`, and a `tokenizer_config.json` with the view's row length),
//! and the manifest.

use std::collections::BTreeMap;

use crate::cache::formats::{self, SplitParts, UnitParts};
use crate::cache::layout::{BuildLayout, EntryLayout, data_file_name};
use crate::cache::manifest::{
    BuildRecord, ComponentRecord, ComponentUse, Counts, EntryKind, MANIFEST_VERSION, Manifest, MixtureRecord,
    PackingRecord, SplitRecord, Timings, TokenStoreRef, Totals, WrittenFile,
};
use crate::cache::publish::{clear_assembly, hash_small_file, write_root_files};
use crate::cache::writer::{self, Columns};
use crate::errors::IoError;
use crate::fsutil;
use crate::spec::PackMode;
use crate::tokenizer::{SpecialTokens, reader_files};

use super::interleave::Used;
use super::rows::PlanStats;
use super::store::TokenStore;
use super::{Making, Mixing, Recipe, SplitOutput, ViewError, blend};

/// The largest `tokenizer.json` read from a token store (the biggest released ones are ~20 MB).
const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// What the manifest records of how the view was made.
pub struct Made<'a> {
    pub recipe: &'a Recipe<'a>,
    pub making: &'a Making,
    /// The token store, or a mixture's components' stores in order.
    pub stores: &'a [TokenStore<'a>],
    pub mixing: Option<&'a Mixing<'a>>,
    /// A published view of the same rows, whose Arrow files this one links.
    pub twin: Option<&'a TokenStore<'a>>,
    pub view_seconds: f64,
}

/// Lays out the view and makes its manifest (the caller fills in the publish and total times).
pub fn assemble(
    build: &BuildLayout,
    made: &Made,
    outputs: Vec<(String, SplitOutput)>,
) -> Result<(EntryLayout, Manifest), ViewError> {
    let Made { recipe, stores, mixing, .. } = *made;
    let short = made.making.fingerprint.short();
    let assembly = build.assembly(&fsutil::host_name(), std::process::id());
    clear_assembly(build.root(), &assembly)?;
    let columns = Columns::new(recipe.output.token_type, recipe.sequence);
    let formats = &recipe.output.formats;
    let row_formats = if mixing.is_some() { formats.without_megatron() } else { formats.clone() };
    let mut files = Vec::new();
    let mut splits = BTreeMap::new();
    let mut stats = PlanStats::default();
    let mut uses = Vec::new();
    for (split, output) in outputs {
        let data_files = match made.twin {
            Some(twin) => link_twin_arrow(twin, &assembly, &split, &columns, &short, &mut files)?,
            None => link_arrow_parts(build, &assembly, &split, &output, &columns, &short, &mut files)?,
        };
        let units: Vec<UnitParts> = output.units.iter().filter_map(|unit| unit.formats.clone()).collect();
        let documents = super::documents(recipe.sequence);
        let parts = SplitParts {
            split: &split,
            units: &units,
            token_type: row_formats.parts_type(recipe.output.token_type, stores[0].manifest.tokenizer.vocab_size),
            documents,
            padded: recipe.sequence.pack == PackMode::BestFit,
            vocab_size: stores[0].manifest.tokenizer.vocab_size,
            tokenizer: &stores[0].manifest.tokenizer.source,
        };
        files.extend(formats::assemble_split(assembly.root(), &parts, &row_formats)?);
        let mut record = SplitRecord { inputs: Vec::new(), data_files, counts: Counts::default() };
        for store in stores {
            let store_split = &store.manifest.splits[&split];
            record.inputs.extend(store_split.inputs.iter().cloned());
            // A mixture takes part of a store, or more than all of it: the store's
            // document counts are not its own (`mixture` records each component's use).
            if mixing.is_none() {
                record.counts.add(&store_split.counts);
            }
        }
        record.counts = Counts {
            rows: output.units.iter().map(|unit| unit.rows).sum(),
            tokens: output.stats.tokens,
            remainder_tokens: output.stats.remainder,
            truncated_tokens: output.stats.truncated,
            ..record.counts
        };
        stats.add(&output.stats);
        if let Some(used) = output.used {
            uses.push((split.clone(), used));
        }
        splits.insert(split, record);
    }
    if let Some(mixing) = mixing.filter(|_| formats.megatron()) {
        files.extend(blend::write(assembly.root(), stores, mixing)?);
    }
    let names: Vec<&String> = splits.keys().collect();
    let dataset_dict = assembly.dataset_dict();
    fsutil::write_json_atomic(&dataset_dict, &serde_json::json!({"splits": names}))
        .map_err(IoError::at("writing", &dataset_dict))?;
    files.push(hash_small_file(assembly.root(), "dataset_dict.json")?);
    files.extend(write_root_files(assembly.root(), &tokenizer_files(made)?)?);
    let mut manifest = manifest(made, splits, files, &stats);
    manifest.mixture = mixing.map(|mixing| mixture_record(mixing, &uses));
    Ok((assembly, manifest))
}

/// What the manifest records of a mixture: each component, and what it gave each split.
fn mixture_record(mixing: &Mixing, uses: &[(String, Vec<Used>)]) -> MixtureRecord {
    let sum: f64 = mixing.components.iter().map(|(weight, _)| weight).sum();
    let components = mixing
        .components
        .iter()
        .enumerate()
        .map(|(index, &(weight, max_epochs))| {
            let splits = uses
                .iter()
                .map(|(split, used)| {
                    let total: u64 = used.iter().map(|used| used.tokens_used).sum();
                    let Used { tokens_available, tokens_used, rows, epochs } = used[index];
                    let realized_weight = if total == 0 { 0.0 } else { tokens_used as f64 / total as f64 };
                    (split.clone(), ComponentUse { tokens_available, tokens_used, rows, epochs, realized_weight })
                })
                .collect();
            ComponentRecord {
                name: mixing.names[index].clone(),
                token_store: mixing.stores[index].fingerprint.clone(),
                weight: weight / sum,
                max_epochs,
                splits,
            }
        })
        .collect();
    MixtureRecord { seed: mixing.seed, total_tokens: mixing.totals.clone(), components }
}

/// Hard-links a split's Arrow parts into the assembly under their `datasets`
/// names (an empty split gets one file with the schema and no rows) and writes
/// its metadata; returns its data files, relative to the entry.
fn link_arrow_parts(
    build: &BuildLayout,
    assembly: &EntryLayout,
    split: &str,
    output: &SplitOutput,
    columns: &Columns,
    short: &str,
    files: &mut Vec<WrittenFile>,
) -> Result<Vec<String>, ViewError> {
    let split_dir = assembly.split_dir(split);
    fsutil::create_dir_all(&split_dir).map_err(IoError::at("creating", &split_dir))?;
    let parts: Vec<&WrittenFile> = output.units.iter().flat_map(|unit| &unit.arrow).collect();
    let count = parts.len().max(1);
    let mut names = Vec::new();
    if parts.is_empty() {
        let name = data_file_name(0, 1);
        let mut file = writer::write_empty_file(&split_dir.join(&name), columns)?;
        file.path = format!("{split}/{name}");
        files.push(file);
        names.push(name);
    }
    for (index, part) in parts.into_iter().enumerate() {
        let name = data_file_name(index, count);
        let source = build.parts_dir(split).join(&part.path);
        std::fs::hard_link(&source, split_dir.join(&name))
            .map_err(IoError::at("linking into the assembly", &source))?;
        files.push(WrittenFile { path: format!("{split}/{name}"), ..part.clone() });
        names.push(name);
    }
    split_metadata(assembly, split, &names, columns, short, files)
}

/// Links the twin's Arrow files of a split into the assembly (see `twin`) and writes
/// the split's metadata; returns its data files, relative to the entry.
fn link_twin_arrow(
    twin: &TokenStore,
    assembly: &EntryLayout,
    split: &str,
    columns: &Columns,
    short: &str,
    files: &mut Vec<WrittenFile>,
) -> Result<Vec<String>, ViewError> {
    let split_dir = assembly.split_dir(split);
    fsutil::create_dir_all(&split_dir).map_err(IoError::at("creating", &split_dir))?;
    let data_files = twin.manifest.splits.get(split).map(|record| record.data_files.clone()).unwrap_or_default();
    let mut names = Vec::new();
    for relative in &data_files {
        let name = relative.strip_prefix(&format!("{split}/")).unwrap_or_default().to_string();
        // The twin's manifest is another's file: a name that is not a plain one in the split is damage.
        if let Err(problem) = crate::fsutil::untrusted::check_name(&name) {
            return Err(ViewError::DamagedView {
                view: twin.root().to_path_buf(),
                file: "manifest.json".into(),
                problem: format!("lists {relative:?} for split {split}: {problem}"),
            });
        }
        let record = twin.place(relative, &split_dir.join(&name))?;
        files.push(WrittenFile { path: format!("{split}/{name}"), ..record.clone() });
        names.push(name);
    }
    split_metadata(assembly, split, &names, columns, short, files)
}

/// Writes a split's `datasets` metadata for its data files `names` and records it;
/// returns the data files, relative to the entry.
fn split_metadata(
    assembly: &EntryLayout,
    split: &str,
    names: &[String],
    columns: &Columns,
    short: &str,
    files: &mut Vec<WrittenFile>,
) -> Result<Vec<String>, ViewError> {
    let split_dir = assembly.split_dir(split);
    writer::write_split_metadata(&split_dir, split, names, columns, short)
        .map_err(IoError::at("writing the split metadata in", &split_dir))?;
    for metadata in ["dataset_info.json", "state.json"] {
        files.push(hash_small_file(assembly.root(), &format!("{split}/{metadata}"))?);
    }
    Ok(names.iter().map(|name| format!("{split}/{name}")).collect())
}

/// The token store's `tokenizer.json`, and a `tokenizer_config.json` with the view's row length.
fn tokenizer_files(made: &Made) -> Result<Vec<(&'static str, String)>, ViewError> {
    let store = &made.stores[0];
    let damaged = |problem: String| ViewError::DamagedStore {
        store: store.root().to_path_buf(),
        file: "tokenizer.json".into(),
        problem,
    };
    let json = store.read_checked("tokenizer.json", MAX_TOKENIZER_BYTES)?;
    let json = String::from_utf8(json).map_err(|_| damaged("is not UTF-8".into()))?;
    let tokenizer = &store.manifest.tokenizer;
    let special = SpecialTokens { bos: tokenizer.bos_token.clone(), eos: tokenizer.eos_token.clone() };
    let sequence = made.recipe.sequence;
    let max_length = (sequence.pack != PackMode::None).then_some(sequence.seq_len);
    reader_files(&json, &special, max_length).map_err(damaged)
}

fn manifest(
    made: &Made,
    splits: BTreeMap<String, SplitRecord>,
    files: Vec<WrittenFile>,
    stats: &PlanStats,
) -> Manifest {
    let Made { recipe, making, stores, mixing, view_seconds, .. } = *made;
    let store = &stores[0];
    let mut totals = Totals { bytes: files.iter().map(|f| f.size).sum(), ..Totals::default() };
    splits.values().for_each(|split| totals.counts.add(&split.counts));
    let sequence = recipe.sequence;
    let stored = stats.tokens + stats.padding;
    let padded = sequence.pack == PackMode::BestFit;
    Manifest {
        manifest_version: MANIFEST_VERSION,
        fingerprint: making.fingerprint.full(),
        name: recipe.name.to_string(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        created_unix: fsutil::now_unix(),
        spec: recipe.canonical.clone(),
        tokenizer: store.manifest.tokenizer.clone(),
        splits,
        files,
        totals,
        timings: Timings {
            hash_inputs_seconds: making.hash_seconds,
            tokenize_seconds: making.tokenize_seconds,
            view_seconds,
            ..Timings::default()
        },
        build: BuildRecord {
            host: fsutil::whoami().host.clone(),
            pid: fsutil::whoami().pid,
            workers: making.jobs,
            shards_tokenized_here: making.shards_tokenized_here,
            shards_total: stores
                .iter()
                .flat_map(|store| store.manifest.splits.values())
                .map(|split| split.data_files.len())
                .sum(),
        },
        kind: EntryKind::View,
        // A mixture names its stores in `mixture`.
        token_store: match mixing {
            None => Some(TokenStoreRef { fingerprint: store.manifest.fingerprint.clone() }),
            Some(_) => None,
        },
        packing: Some(PackingRecord {
            pack: sequence.pack,
            seq_len: if sequence.pack == PackMode::None { 0 } else { sequence.seq_len as u64 },
            fill: if stored == 0 { 1.0 } else { stats.tokens as f64 / stored as f64 },
            padding_tokens: stats.padding,
            pad_id: padded.then_some(store.manifest.tokenizer.pad_id).flatten(),
            documents_split: stats.documents_split,
            shuffle_seed: sequence.shuffle_seed,
        }),
        documents: None,
        mixture: None,
    }
}
