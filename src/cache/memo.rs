//! Hashes memoized on disk under a key: input content hashes (keyed by path,
//! size and mtime, in `inputs`) and tokenizer identities share `memoized_hash`;
//! confirmations of a tokenizer's canonical form (`tokenizer::written`) read and
//! write their memos with `read_hash` and `write_hash`.

use std::io;
use std::path::Path;

use crate::fsutil;

/// The hash memoized in `dir` under `key`, else `compute`'s, written down for
/// next time. A memo that cannot be written only costs computing it again.
pub fn memoized_hash<E>(
    dir: &Path,
    key: &str,
    compute: impl FnOnce() -> Result<blake3::Hash, E>,
) -> Result<blake3::Hash, E> {
    let memo = read_hash(dir, key);
    if let Ok(Some(hash)) = memo {
        return Ok(hash);
    }
    let hash = compute()?;
    write_hash(dir, key, &hash, found(&memo));
    Ok(hash)
}

/// The hash the memo in `dir` under `key` holds: an error where there is none
/// or it is not a regular file, `None` where it is damaged.
pub fn read_hash(dir: &Path, key: &str) -> io::Result<Option<blake3::Hash>> {
    let bytes = fsutil::untrusted::read_regular(&dir.join(key), 1024)?;
    Ok(blake3::Hash::from_hex(String::from_utf8_lossy(&bytes).trim()).ok())
}

/// Whether `read_hash` found something under the key, if only a damaged memo or
/// another kind of file: `write_hash` then replaces it.
pub fn found(memo: &io::Result<Option<blake3::Hash>>) -> bool {
    !matches!(memo, Err(err) if err.kind() == io::ErrorKind::NotFound)
}

/// Writes `hash` as the memo in `dir` under `key`. A new memo is written once, so
/// processes racing on other nodes never swap it under one another's reads; only
/// what was `found` under the key (a damaged memo, one of another hash, another
/// kind of file) is `replace`d. A memo that cannot be written is only warned about.
pub fn write_hash(dir: &Path, key: &str, hash: &blake3::Hash, replace: bool) {
    let memo_path = dir.join(key);
    let hex = hash.to_hex();
    let written = fsutil::create_dir_all(dir).and_then(|()| match replace {
        false => fsutil::write_once(&memo_path, hex.as_bytes()).map(drop),
        true => fsutil::write_atomic(&memo_path, hex.as_bytes()),
    });
    if let Err(err) = written {
        tracing::warn!(path = %memo_path.display(), error = %err, "cannot write a memo");
    }
}
