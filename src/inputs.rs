//! Resolves a spec's split globs to input files, and their content hashes
//! through a memo keyed by (absolute path, size, mtime), so a cache hit costs one
//! `stat` per input and never a read of its bytes.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::cache::manifest::InputFile;
use crate::cache::memo::memoized_hash;
use crate::errors::{Failure, Fault};
use crate::hub::{HubError, HubRepo, RepoType};
use crate::spec::{Globs, Spec};

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
    #[error(transparent)]
    Hub(#[from] HubError),
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
        let hub = match globs {
            Globs::Hub(files) => Some(HubRepo::new(&files.hub, files.revision.as_deref(), RepoType::Dataset)?),
            Globs::One(_) | Globs::Many(_) => None,
        };
        let mut files: Vec<PathBuf> = Vec::new();
        for pattern in globs.patterns() {
            let matches = match &hub {
                Some(repo) => repo.files_matching(pattern)?,
                None => matching_files(spec, name, pattern)?,
            };
            for path in matches {
                if !files.contains(&path) {
                    files.push(path);
                }
            }
        }
        let files = files.par_iter().map(|path| stat(path)).collect::<Result<Vec<_>, _>>()?;
        splits.push(SplitInputs { name: name.clone(), files });
    }
    Ok(splits)
}

/// The files a glob of `split` matches on the file system, sorted; none is an error.
fn matching_files(spec: &Spec, split: &str, pattern: &str) -> Result<Vec<PathBuf>, InputError> {
    let resolved = spec.resolve(Path::new(pattern));
    let bad_glob = |message: String| InputError::BadGlob { split: split.into(), pattern: pattern.into(), message };
    let mut matches: Vec<PathBuf> = glob::glob(&resolved.to_string_lossy())
        .map_err(|err| bad_glob(err.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| bad_glob(err.to_string()))?
        .into_iter()
        // Directories are skipped; anything else (a dangling link too) must be readable.
        .filter(|path| !path.is_dir())
        .collect();
    if matches.is_empty() {
        return Err(InputError::NoMatch { split: split.into(), pattern: pattern.into() });
    }
    matches.sort();
    Ok(matches)
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

/// The input as it is now, or why it cannot be read.
fn stat(path: &Path) -> Result<InputFile, InputError> {
    InputFile::stat(path).map_err(|source| InputError::Unreadable { path: path.to_path_buf(), source })
}

/// Content hashes of inputs, memoized in the cache's memo directory.
pub struct ContentHashMemo {
    dir: PathBuf,
}

impl ContentHashMemo {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The blake3 of the file's bytes, from the memo or computed and memoized.
    pub fn content_hash(&self, file: &InputFile) -> Result<blake3::Hash, InputError> {
        memoized_hash(&self.dir, &memo_key(file), || hash_file(file))
    }
}

fn memo_key(file: &InputFile) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"ferry-memo-v1\0");
    hasher.update(file.path.as_os_str().as_encoded_bytes());
    hasher.update(&file.size.to_le_bytes());
    hasher.update(&file.mtime_ns.to_le_bytes());
    hasher.finalize().to_hex()[..32].to_string()
}

fn hash_file(file: &InputFile) -> Result<blake3::Hash, InputError> {
    let unreadable = |source| InputError::Unreadable { path: file.path.clone(), source };
    let hash = crate::fsutil::blake3_of_file(&file.path).map_err(unreadable)?;
    // Hashing a file that is being rewritten would memoize a hash of bytes that never existed.
    if stat(&file.path)? != *file {
        return Err(InputError::Changed { path: file.path.clone() });
    }
    Ok(hash)
}

impl Failure for InputError {
    fn fault(&self) -> Fault {
        match self {
            InputError::Hub(hub) => hub.fault(),
            _ => Fault::Cause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_answers_without_reading_the_file_again() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("shard.jsonl");
        std::fs::write(&input, b"{\"text\": \"a\"}\n").unwrap();
        let memo = ContentHashMemo::new(dir.path().join("memo"));
        let file = InputFile::stat(&input).unwrap();
        let first = memo.content_hash(&file).unwrap();
        assert_eq!(first, blake3::hash(b"{\"text\": \"a\"}\n"));
        // Same size and mtime, other bytes: the memo answers, proving no re-read.
        let mtime = std::fs::metadata(&input).unwrap().modified().unwrap();
        std::fs::write(&input, b"{\"text\": \"b\"}\n").unwrap();
        std::fs::File::options().write(true).open(&input).unwrap().set_modified(mtime).unwrap();
        assert_eq!(memo.content_hash(&InputFile::stat(&input).unwrap()).unwrap(), first);
    }
}
