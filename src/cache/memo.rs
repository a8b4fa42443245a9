//! Memo of input content hashes keyed by (absolute path, size, mtime), so a cache
//! hit costs one `stat` per input and never a read of its bytes; `memoized_hash`
//! serves other memos in the same directory (tokenizer identities).

use std::path::{Path, PathBuf};

use crate::fsutil;
use crate::inputs::{InputError, InputFile};

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

/// The hash memoized in `dir` under `key`, else `compute`'s, written down for
/// next time. A memo that cannot be written only costs computing it again.
pub fn memoized_hash<E>(
    dir: &Path,
    key: &str,
    compute: impl FnOnce() -> Result<blake3::Hash, E>,
) -> Result<blake3::Hash, E> {
    let memo_path = dir.join(key);
    if let Ok(text) = std::fs::read_to_string(&memo_path)
        && let Ok(hash) = blake3::Hash::from_hex(text.trim())
    {
        return Ok(hash);
    }
    let hash = compute()?;
    if let Err(err) =
        fsutil::create_dir_all(dir).and_then(|()| fsutil::write_atomic(&memo_path, hash.to_hex().as_bytes()))
    {
        tracing::warn!(path = %memo_path.display(), error = %err, "cannot write a memo");
    }
    Ok(hash)
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
    let mut hasher = blake3::Hasher::new();
    let reader = std::fs::File::open(&file.path).map_err(unreadable)?;
    hasher.update_reader(reader).map_err(unreadable)?;
    // Hashing a file that is being rewritten would memoize a hash of bytes that never existed.
    if InputFile::stat(&file.path)? != *file {
        return Err(InputError::Changed { path: file.path.clone() });
    }
    Ok(hasher.finalize())
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
