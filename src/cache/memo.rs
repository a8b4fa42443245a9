//! Hashes memoized on disk under a key: input content hashes (keyed by path,
//! size and mtime, in `inputs`) and tokenizer identities share `memoized_hash`.

use std::path::Path;

use crate::fsutil;

/// The hash memoized in `dir` under `key`, else `compute`'s, written down for
/// next time. A memo that cannot be written only costs computing it again.
pub fn memoized_hash<E>(
    dir: &Path,
    key: &str,
    compute: impl FnOnce() -> Result<blake3::Hash, E>,
) -> Result<blake3::Hash, E> {
    let memo_path = dir.join(key);
    let memo = fsutil::untrusted::read_regular(&memo_path, 1024);
    if let Ok(bytes) = &memo
        && let Ok(hash) = blake3::Hash::from_hex(String::from_utf8_lossy(bytes).trim())
    {
        return Ok(hash);
    }
    let hash = compute()?;
    let hex = hash.to_hex();
    // A new memo is written once, so processes racing on other nodes never swap it
    // under one another's reads; only a damaged one is replaced.
    let missing = memo.is_err_and(|err| err.kind() == std::io::ErrorKind::NotFound);
    let written = fsutil::create_dir_all(dir).and_then(|()| match missing {
        true => fsutil::write_once(&memo_path, hex.as_bytes()).map(drop),
        false => fsutil::write_atomic(&memo_path, hex.as_bytes()),
    });
    if let Err(err) = written {
        tracing::warn!(path = %memo_path.display(), error = %err, "cannot write a memo");
    }
    Ok(hash)
}
