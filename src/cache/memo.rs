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
    if let Ok(bytes) = fsutil::untrusted::read_regular(&memo_path, 1024)
        && let Ok(hash) = blake3::Hash::from_hex(String::from_utf8_lossy(&bytes).trim())
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
