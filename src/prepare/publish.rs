//! Assembles finished shards into an entry and publishes it with one rename.

use std::collections::BTreeMap;
use std::path::Path;

use crate::cache::formats::{self, SplitShards};
use crate::cache::layout::{BuildLayout, CacheLayout, EntryLayout, data_file_name};
use crate::cache::manifest::Manifest;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::{self, Columns};
use crate::errors::IoError;
use crate::fsutil::{self, untrusted};
use crate::spec::Formats;

use super::PrepareError;
use super::shard::ShardRecord;

/// An entry laid out but not yet published.
pub struct Assembly {
    pub entry: EntryLayout,
    /// Per split, its data files relative to the entry.
    pub data_files: BTreeMap<String, Vec<String>>,
    /// Every file but the manifest.
    pub files: Vec<WrittenFile>,
}

/// Lays out the entry in a private assembly directory: part files hard-linked
/// under their `datasets` names (the parts stay valid for a resumed build), split
/// metadata, `dataset_dict.json`, and `root_files` (the tokenizer's, for readers).
pub fn assemble(
    build: &BuildLayout,
    records: &BTreeMap<String, Vec<ShardRecord>>,
    columns: &Columns,
    formats: &Formats,
    short_fingerprint: &str,
    root_files: &[(&str, String)],
) -> Result<Assembly, PrepareError> {
    let assembly = build.assembly(&fsutil::host_name(), std::process::id());
    untrusted::remove_tree_below(build.root(), Path::new(assembly_name(&assembly)))
        .map_err(IoError::at("clearing an old assembly in", build.root()))?;
    let mut files = Vec::new();
    let mut data_files = BTreeMap::new();
    for (split, shards) in records {
        let split_dir = assembly.split_dir(split);
        fsutil::create_dir_all(&split_dir).map_err(IoError::at("creating", &split_dir))?;
        let parts: Vec<&WrittenFile> = shards.iter().flat_map(|record| &record.files).collect();
        let count = parts.len().max(1);
        let mut names = Vec::new();
        if parts.is_empty() {
            let name = data_file_name(0, 1);
            let mut file = writer::write_empty_file(&split_dir.join(&name), columns).map_err(PrepareError::Write)?;
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
        writer::write_split_metadata(&split_dir, split, &names, columns, short_fingerprint)
            .map_err(IoError::at("writing the split metadata in", &split_dir))?;
        for metadata in ["dataset_info.json", "state.json"] {
            files.push(hash_small_file(assembly.root(), &format!("{split}/{metadata}"))?);
        }
        let split_shards = SplitShards {
            split,
            shards: shards.iter().map(|record| record.shard).collect(),
            rows: shards.iter().map(|record| record.counts.rows).sum(),
            tokens: shards.iter().map(|record| record.counts.tokens).sum(),
            token_parts: shards
                .iter()
                .flat_map(|record| &record.format_files)
                .filter(|file| file.path.ends_with(".tokens"))
                .cloned()
                .collect(),
        };
        files.extend(
            formats::assemble_split(build, assembly.root(), &split_shards, formats, columns.token_type)
                .map_err(PrepareError::Write)?,
        );
        data_files.insert(split.clone(), names.iter().map(|name| format!("{split}/{name}")).collect());
    }
    let splits: Vec<&String> = records.keys().collect();
    let dataset_dict = assembly.dataset_dict();
    fsutil::write_json_atomic(&dataset_dict, &serde_json::json!({"splits": splits}))
        .map_err(IoError::at("writing", &dataset_dict))?;
    files.push(hash_small_file(assembly.root(), "dataset_dict.json")?);
    for (name, contents) in root_files {
        let path = assembly.root().join(name);
        fsutil::write_atomic(&path, contents.as_bytes()).map_err(IoError::at("writing", &path))?;
        files.push(hash_small_file(assembly.root(), name)?);
    }
    Ok(Assembly { entry: assembly, data_files, files })
}

fn hash_small_file(root: &Path, relative: &str) -> Result<WrittenFile, PrepareError> {
    let path = root.join(relative);
    let bytes = std::fs::read(&path).map_err(IoError::at("reading back", &path))?;
    Ok(WrittenFile {
        path: relative.to_string(),
        size: bytes.len() as u64,
        blake3: blake3::hash(&bytes).to_hex().to_string(),
        rows: 0,
        tokens: 0,
    })
}

/// Writes the manifest, renames the assembly into `entries/`, and points
/// `by-name` at it. Returns false if another process published the entry first
/// (its copy is then the entry; ours is removed).
pub fn publish(cache: &CacheLayout, assembly: EntryLayout, manifest: &Manifest) -> Result<bool, PrepareError> {
    let manifest_path = assembly.manifest();
    fsutil::write_json_atomic(&manifest_path, manifest).map_err(IoError::at("writing", &manifest_path))?;
    let short = manifest.short_fingerprint();
    let entries = cache.entries_dir();
    fsutil::create_dir_all(&entries).map_err(IoError::at("creating", &entries))?;
    let target = cache.entry(short);
    let won =
        fsutil::rename_no_replace(assembly.root(), target.root()).map_err(IoError::at("publishing", target.root()))?;
    if !won && let Some(build) = assembly.root().parent() {
        let _ = untrusted::remove_tree_below(build, Path::new(assembly_name(&assembly)));
    }
    Ok(won)
}

/// The assembly directory's name inside its build directory.
fn assembly_name(assembly: &EntryLayout) -> &str {
    assembly.root().file_name().and_then(|name| name.to_str()).unwrap_or_default()
}

/// Points `by-name/<name>` at the entry.
pub fn link_name(cache: &CacheLayout, name: &str, short_fingerprint: &str) -> Result<(), PrepareError> {
    let link = cache.by_name(name);
    let target = CacheLayout::by_name_target(short_fingerprint);
    if std::fs::read_link(&link).is_ok_and(|current| current == target) {
        return Ok(());
    }
    let by_name = cache.by_name_dir();
    fsutil::create_dir_all(&by_name).map_err(IoError::at("creating", &by_name))?;
    Ok(fsutil::replace_symlink(&target, &link).map_err(IoError::at("linking", &link))?)
}
