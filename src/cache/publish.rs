//! Publishing an assembled entry (a token store or a view): the manifest is written
//! last inside the assembly, which then becomes `entries/<fp16>` with one rename,
//! so a reader sees the whole entry or none of it.

use std::path::Path;

use crate::cache::layout::{CacheLayout, EntryLayout};
use crate::cache::manifest::{Manifest, WrittenFile};
use crate::errors::IoError;
use crate::fsutil::{self, untrusted};

/// Writes the manifest, renames the assembly into `entries/`. Returns false if
/// another process published the entry first (its copy is then the entry; ours
/// is removed).
pub fn publish(cache: &CacheLayout, assembly: EntryLayout, manifest: &Manifest) -> Result<bool, IoError> {
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
pub fn assembly_name(assembly: &EntryLayout) -> &str {
    assembly.root().file_name().and_then(|name| name.to_str()).unwrap_or_default()
}

/// Clears what an earlier assembly by this process's host and pid left (a
/// killed run whose pid came back), so the new one starts empty.
pub fn clear_assembly(build_root: &Path, assembly: &EntryLayout) -> Result<(), IoError> {
    untrusted::remove_tree_below(build_root, Path::new(assembly_name(assembly)))
        .map_err(IoError::at("clearing an old assembly in", build_root))
}

/// Points `by-name/<name>` at the entry.
pub fn link_name(cache: &CacheLayout, name: &str, short_fingerprint: &str) -> Result<(), IoError> {
    let link = cache.by_name(name);
    let target = CacheLayout::by_name_target(short_fingerprint);
    if std::fs::read_link(&link).is_ok_and(|current| current == target) {
        return Ok(());
    }
    let by_name = cache.by_name_dir();
    fsutil::create_dir_all(&by_name).map_err(IoError::at("creating", &by_name))?;
    fsutil::replace_symlink(&target, &link).map_err(IoError::at("linking", &link))
}

/// The record of a small file the assembly holds (metadata, a tokenizer file).
pub fn hash_small_file(root: &Path, relative: &str) -> Result<WrittenFile, IoError> {
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

/// Writes `files` (name, contents) at the assembly's root and records them.
pub fn write_root_files(root: &Path, files: &[(&str, String)]) -> Result<Vec<WrittenFile>, IoError> {
    let mut written = Vec::new();
    for (name, contents) in files {
        let path = root.join(name);
        fsutil::write_atomic(&path, contents.as_bytes()).map_err(IoError::at("writing", &path))?;
        written.push(hash_small_file(root, name)?);
    }
    Ok(written)
}
