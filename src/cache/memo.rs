//! Hashes memoized on disk under a key: input content hashes (keyed by path,
//! size and mtime, in `inputs`) and tokenizer identities share `memoized_hash`;
//! confirmations of a tokenizer's canonical form (`tokenizer::written`) keep a
//! `HashMemo` between reading and writing theirs.

use std::io;
use std::path::{Path, PathBuf};

use crate::fsutil;

/// The hash memoized in `dir` under `key`, else `compute`'s, written down for
/// next time. A memo that cannot be written only costs computing it again.
pub fn memoized_hash<E>(
    dir: &Path,
    key: &str,
    compute: impl FnOnce() -> Result<blake3::Hash, E>,
) -> Result<blake3::Hash, E> {
    let memo = HashMemo::read(dir, key);
    if let Some(hash) = memo.hash() {
        return Ok(hash);
    }
    let hash = compute()?;
    memo.write(&hash);
    Ok(hash)
}

/// One memo file holding a hash, as it was read: what was found there decides
/// how a new hash is written.
pub struct HashMemo {
    dir: PathBuf,
    key: String,
    /// An error where there is none or it is not a regular file, `None` where it is damaged.
    found: io::Result<Option<blake3::Hash>>,
}

impl HashMemo {
    pub fn read(dir: &Path, key: &str) -> HashMemo {
        let found = fsutil::untrusted::read_regular(&dir.join(key), 1024)
            .map(|bytes| blake3::Hash::from_hex(String::from_utf8_lossy(&bytes).trim()).ok());
        HashMemo { dir: dir.to_path_buf(), key: key.to_string(), found }
    }

    /// The hash the memo held when read.
    pub fn hash(&self) -> Option<blake3::Hash> {
        self.found.as_ref().ok().copied().flatten()
    }

    /// Writes `hash` as the memo. A new memo is written once, so processes racing
    /// on other nodes never swap it under one another's reads; only what was found
    /// under the key (a damaged memo, one of another hash, another kind of file) is
    /// replaced. A memo that cannot be written is only warned about.
    pub fn write(&self, hash: &blake3::Hash) {
        let path = self.dir.join(&self.key);
        let hex = hash.to_hex();
        let missing = matches!(&self.found, Err(err) if err.kind() == io::ErrorKind::NotFound);
        let written = fsutil::create_dir_all(&self.dir).and_then(|()| match missing {
            true => fsutil::write_once(&path, hex.as_bytes()).map(drop),
            false => fsutil::write_atomic(&path, hex.as_bytes()),
        });
        if let Err(err) = written {
            tracing::warn!(path = %path.display(), error = %err, "cannot write a memo");
        }
    }
}
