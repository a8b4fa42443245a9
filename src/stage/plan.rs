//! What a staging copies: the files of a cache entry or of a drop-in list, and
//! which of them the destination does not hold complete yet.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use crate::cache::destination::DestLayout;
use crate::cache::layout::{CacheLayout, ENTRIES_DIR, MANIFEST_FILE};
use crate::cache::manifest::Manifest;
use crate::errors::IoError;
use crate::fsutil::untrusted::Dir;

use super::StageError;

/// One file to stage, relative to the source and destination roots.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    pub relative: String,
    pub size: u64,
    pub blake3: Option<String>,
}

impl PlannedFile {
    /// The directory it sits in, relative like the file.
    fn parent(&self) -> &Path {
        Path::new(&self.relative).parent().unwrap_or(Path::new(""))
    }
}

/// What to stage.
pub struct StagePlan {
    /// Short fingerprint, or `dropin-<hash>`.
    pub id: String,
    pub name: String,
    pub source_root: PathBuf,
    /// `source_root` opened once: copies open their files below it without
    /// following symlinks (a shared cache is written by others).
    pub source: Arc<Dir>,
    /// Where the files land: `<dest>/entries/<fp16>`, or `<dest>` in drop-in mode.
    pub dest_root: PathBuf,
    pub files: Vec<PlannedFile>,
    pub kind: PlanKind,
}

pub enum PlanKind {
    /// A cache entry: mirror the rest of the cache too, and hold a lease.
    Entry { cache: CacheLayout },
    /// An existing Hugging Face cache directory mirrored file by file.
    DropIn,
}

/// The plan for a published cache entry: every file of the manifest, and the manifest.
pub fn plan_entry(cache: &CacheLayout, manifest: &Manifest, dest: &Path) -> Result<StagePlan, StageError> {
    let short = manifest.short_fingerprint().to_string();
    let source_root = absolute(cache.entry(&short).root());
    let source = Dir::open(cache.root())
        .and_then(|root| root.open_dir(Path::new(ENTRIES_DIR).join(&short)))
        .map_err(IoError::at("opening", &source_root))?;
    let manifest_path = source_root.join(MANIFEST_FILE);
    let manifest_size = source.stat(MANIFEST_FILE).map_err(IoError::at("reading", &manifest_path))?.st_size as u64;
    let mut files: Vec<PlannedFile> = manifest
        .files
        .iter()
        .map(|f| PlannedFile { relative: f.path.clone(), size: f.size, blake3: Some(f.blake3.clone()) })
        .collect();
    files.push(PlannedFile { relative: MANIFEST_FILE.into(), size: manifest_size, blake3: None });
    Ok(StagePlan {
        id: short.clone(),
        name: manifest.name.clone(),
        source_root,
        source: Arc::new(source),
        dest_root: DestLayout::new(dest).mirror().entry(&short).root().to_path_buf(),
        files,
        kind: PlanKind::Entry { cache: cache.at(absolute(cache.root())) },
    })
}

/// The plan for drop-in mode: `list` holds relative paths inside `src`, one per
/// line. The listed files are looked up `jobs` at a time, since each lookup
/// may wait on a network filesystem.
pub fn plan_drop_in(src: &Path, list: &str, dest: &Path, jobs: usize) -> Result<StagePlan, StageError> {
    let src = absolute(src);
    let mut listed = Vec::new();
    for (index, line) in list.lines().enumerate() {
        let relative = line.trim();
        if relative.is_empty() {
            continue;
        }
        let path = Path::new(relative);
        if path.is_absolute() || path.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return Err(StageError::OutsideSource { line: index + 1, path: relative.to_string(), src: src.clone() });
        }
        listed.push((index + 1, relative));
    }
    let look_up = || {
        listed
            .par_iter()
            .map(|&(line, relative)| {
                let source = src.join(relative);
                // Not followed: copies refuse symlinks below the source, so refuse them here first.
                match std::fs::symlink_metadata(&source) {
                    Ok(meta) if meta.is_file() => {
                        Ok(PlannedFile { relative: relative.to_string(), size: meta.len(), blake3: None })
                    }
                    _ => Err(StageError::NotAFile { line, path: source }),
                }
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let files = match rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build() {
        Ok(pool) => pool.install(look_up)?,
        Err(_) => look_up()?,
    };
    if files.is_empty() {
        return Err(StageError::EmptyList);
    }
    let id = crate::cache::staging::drop_in_id(&src);
    let name = src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let source = Arc::new(Dir::open(&src).map_err(IoError::at("opening", &src))?);
    Ok(StagePlan { id, name, source_root: src, source, dest_root: dest.to_path_buf(), files, kind: PlanKind::DropIn })
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether the destination already holds this file complete (a regular file of
/// the right size; with `verify`, also the right blake3).
fn is_complete(plan: &StagePlan, file: &PlannedFile, verify: bool) -> bool {
    let path = plan.dest_root.join(&file.relative);
    let complete = path.symlink_metadata().is_ok_and(|m| m.file_type().is_file() && m.len() == file.size);
    match (&file.blake3, verify && complete) {
        (Some(expected), true) => hash_file(&path).is_ok_and(|found| found == *expected),
        _ => complete,
    }
}

pub(super) fn is_regular(path: &Path) -> bool {
    path.symlink_metadata().is_ok_and(|m| m.file_type().is_file())
}

fn hash_file(path: &Path) -> std::io::Result<String> {
    Ok(crate::fsutil::blake3_of_file(path)?.to_hex().to_string())
}

/// The plan's files not yet complete in the destination. A file whose directory
/// is not there yet is pending without a lookup of its own: on a fresh
/// destination that is one lookup per directory instead of one per file.
pub fn pending_files(plan: &StagePlan, verify: bool) -> Vec<&PlannedFile> {
    let parents: HashSet<&Path> = plan.files.iter().map(PlannedFile::parent).collect();
    let present: HashSet<&Path> = parents.into_par_iter().filter(|dir| plan.dest_root.join(dir).is_dir()).collect();
    plan.files.par_iter().filter(|f| !(present.contains(f.parent()) && is_complete(plan, f, verify))).collect()
}
