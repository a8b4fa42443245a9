//! Assembles a token store from its finished shards.

use std::collections::BTreeMap;

use crate::cache::layout::EntryLayout;
use crate::cache::layout::{BuildLayout, token_store_file};
use crate::cache::manifest::WrittenFile;
use crate::cache::publish::{clear_assembly, write_root_files};
use crate::errors::IoError;
use crate::fsutil;

use super::PrepareError;
use super::shard::ShardRecord;

/// A token store laid out but not yet published.
pub struct Assembly {
    pub entry: EntryLayout,
    /// Per split, its shards' `.bin` files in shard order, relative to the entry.
    pub data_files: BTreeMap<String, Vec<String>>,
    /// Every file but the manifest.
    pub files: Vec<WrittenFile>,
}

/// Lays out the token store in a private assembly directory: each shard's `.bin`
/// and `.idx` hard-linked under `tokens/<split>/` (the parts stay valid for a
/// resumed build), and `root_files` (the tokenizer's, for readers).
pub fn assemble(
    build: &BuildLayout,
    records: &BTreeMap<String, Vec<ShardRecord>>,
    root_files: &[(&str, String)],
) -> Result<Assembly, PrepareError> {
    let assembly = build.assembly(&fsutil::host_name(), std::process::id());
    clear_assembly(build.root(), &assembly)?;
    let mut files = Vec::new();
    let mut data_files = BTreeMap::new();
    for (split, shards) in records {
        let mut bins = Vec::new();
        for record in shards {
            for (extension, file) in ["bin", "idx"].into_iter().zip(&record.files) {
                let source = build.document_part(split, record.shard, extension);
                let relative = token_store_file(split, record.shard, extension);
                let target = assembly.root().join(&relative);
                if let Some(dir) = target.parent() {
                    fsutil::create_dir_all(dir).map_err(IoError::at("creating", dir))?;
                }
                std::fs::hard_link(&source, &target).map_err(IoError::at("linking into the assembly", &source))?;
                files.push(WrittenFile { path: relative.clone(), ..file.clone() });
                if extension == "bin" {
                    bins.push(relative);
                }
            }
        }
        data_files.insert(split.clone(), bins);
    }
    files.extend(write_root_files(assembly.root(), root_files)?);
    Ok(Assembly { entry: assembly, data_files, files })
}
