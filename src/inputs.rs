//! Resolves a spec's split globs to input files, and their content hashes.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::cache::memo::ContentHashMemo;
use crate::spec::Spec;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("invalid glob {pattern:?} in split {split:?}: {message}")]
    BadGlob { split: String, pattern: String, message: String },
    #[error(
        "glob {pattern:?} in split {split:?} matches no file; check the path (relative globs start at the spec's folder)"
    )]
    NoMatch { split: String, pattern: String },
    #[error("reading input {path}")]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("input {path} changed while it was being hashed; run again once it is stable")]
    Changed { path: PathBuf },
}

/// One input file as it was when resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: PathBuf,
    pub size: u64,
    /// Modification time in nanoseconds since the epoch.
    pub mtime_ns: i128,
}

impl InputFile {
    pub fn stat(path: &Path) -> Result<InputFile, InputError> {
        let unreadable = |source| InputError::Unreadable { path: path.to_path_buf(), source };
        let meta = std::fs::metadata(path).map_err(unreadable)?;
        let mtime = meta.modified().map_err(unreadable)?;
        let mtime_ns = match mtime.duration_since(UNIX_EPOCH) {
            Ok(after) => after.as_nanos() as i128,
            Err(before) => -(before.duration().as_nanos() as i128),
        };
        Ok(InputFile { path: path.to_path_buf(), size: meta.len(), mtime_ns })
    }
}

/// The inputs of one split, in order.
#[derive(Debug, Clone)]
pub struct SplitInputs {
    pub name: String,
    pub files: Vec<InputFile>,
}

/// Expands every split's globs: matches of one glob sorted by path, globs in the
/// order written, a file listed twice kept once. A glob matching nothing is an error.
pub fn resolve(spec: &Spec) -> Result<Vec<SplitInputs>, InputError> {
    let mut splits = Vec::new();
    for (name, globs) in &spec.splits {
        let mut files: Vec<PathBuf> = Vec::new();
        for pattern in globs.patterns() {
            let resolved = spec.resolve(Path::new(pattern));
            let bad_glob =
                |message: String| InputError::BadGlob { split: name.clone(), pattern: pattern.clone(), message };
            let mut matches: Vec<PathBuf> = glob::glob(&resolved.to_string_lossy())
                .map_err(|err| bad_glob(err.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| bad_glob(err.to_string()))?
                .into_iter()
                // Directories are skipped; anything else (a dangling link too) must be readable.
                .filter(|path| !path.is_dir())
                .collect();
            if matches.is_empty() {
                return Err(InputError::NoMatch { split: name.clone(), pattern: pattern.clone() });
            }
            matches.sort();
            for path in matches {
                if !files.contains(&path) {
                    files.push(path);
                }
            }
        }
        let files = files.par_iter().map(|path| InputFile::stat(path)).collect::<Result<Vec<_>, _>>()?;
        splits.push(SplitInputs { name: name.clone(), files });
    }
    Ok(splits)
}

/// Content hashes of every input, in order, through the memo: inputs whose
/// (path, size, mtime) were hashed before cost one small memo read, not a re-read.
pub fn content_hashes(
    splits: &[SplitInputs],
    memo: &ContentHashMemo,
) -> Result<Vec<(String, Vec<blake3::Hash>)>, InputError> {
    splits
        .iter()
        .map(|split| {
            let hashes = split.files.par_iter().map(|file| memo.content_hash(file)).collect::<Result<Vec<_>, _>>()?;
            Ok((split.name.clone(), hashes))
        })
        .collect()
}
