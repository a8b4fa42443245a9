//! Finding a published entry by its fingerprint or a prefix of it: the one lookup
//! behind `stage --entry`, `verify FP` and the daemon's stagings (which run
//! `ferry stage --entry`); and the entry a fingerprint names, of the kind expected
//! (`prepare`'s token store and view).

use std::path::PathBuf;

use crate::cache::layout::{BY_NAME_DIR, CacheLayout, EntryLayout, is_short_fingerprint};
use crate::cache::manifest::{EntryKind, Manifest, ManifestError};
use crate::errors::{Failure, Fault, IoError};
use crate::fingerprint::Fingerprint;
use crate::fsutil::untrusted::{self, Dir};

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("no entry {prefix} in {cache}; `ferry status` lists them")]
    NoEntry { prefix: String, cache: String },
    #[error("{prefix} matches {} entries ({}); give more digits", matches.len(), matches.join(", "))]
    Ambiguous { prefix: String, matches: Vec<String> },
    #[error(transparent)]
    Listing(#[from] IoError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(
        "entry {path} has fingerprint {found}, not {expected}; remove it (a 64-bit prefix collision or a damaged cache)"
    )]
    Collision { path: PathBuf, found: String, expected: String },
    #[error("entry {path} is a {found}, where a {expected} belongs; remove it (a damaged cache)")]
    WrongKind { path: PathBuf, found: &'static str, expected: &'static str },
}

impl Failure for LookupError {
    fn fault(&self) -> Fault {
        match self {
            LookupError::NoEntry { .. }
            | LookupError::Ambiguous { .. }
            | LookupError::Collision { .. }
            | LookupError::WrongKind { .. } => Fault::User,
            LookupError::Listing(_) | LookupError::Manifest(_) => Fault::Cause,
        }
    }
}

/// The published entry with this fingerprint, if any, checked to be of `kind`.
pub fn published(
    cache: &CacheLayout,
    fingerprint: &Fingerprint,
    kind: EntryKind,
) -> Result<Option<(EntryLayout, Manifest)>, LookupError> {
    let entry = cache.entry(&fingerprint.short());
    if !entry.manifest().exists() {
        return Ok(None);
    }
    let manifest = Manifest::load(&entry.manifest())?;
    if manifest.fingerprint != fingerprint.full() {
        return Err(LookupError::Collision {
            path: entry.root().to_path_buf(),
            found: manifest.fingerprint,
            expected: fingerprint.full(),
        });
    }
    if manifest.kind != kind {
        let (found, expected) = (manifest.kind.name(), kind.name());
        return Err(LookupError::WrongKind { path: entry.root().to_path_buf(), found, expected });
    }
    Ok(Some((entry, manifest)))
}

/// The published entry whose short fingerprint starts with `prefix` (or that
/// `prefix`, a full fingerprint, starts with).
pub fn find_entry(cache: &CacheLayout, prefix: &str) -> Result<Manifest, LookupError> {
    let prefix = prefix.to_ascii_lowercase();
    let entries_dir = cache.entries_dir();
    let no_entry = || LookupError::NoEntry { prefix: prefix.clone(), cache: cache.root().display().to_string() };
    let entries = match std::fs::read_dir(&entries_dir) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(no_entry()),
        listing => listing.map_err(IoError::at("listing the entries of", &entries_dir))?,
    };
    let mut matches: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // Only directories named by a fingerprint: any other name was not published
        // by ferry (and a short one would match every prefix).
        .filter(|name| is_short_fingerprint(name))
        .filter(|name| !prefix.is_empty() && (name.starts_with(&prefix) || prefix.starts_with(name.as_str())))
        .collect();
    matches.sort();
    match matches.as_slice() {
        [one] => Ok(Manifest::load_entry(cache.entry(one).root())?),
        [] => Err(no_entry()),
        _ => Err(LookupError::Ambiguous { prefix, matches }),
    }
}

/// The published entry `by-name/<name_or_prefix>` points at, else the one whose
/// fingerprint starts with it. The link is read through the cache's descriptor (a
/// symlinked `by-name/` is not followed) and used only if it has the form ferry writes.
pub fn find_named_entry(cache: &CacheLayout, name_or_prefix: &str) -> Result<Manifest, LookupError> {
    let named = untrusted::check_name(name_or_prefix)
        .ok()
        .and_then(|()| Dir::open(cache.root()).and_then(|root| root.open_dir(BY_NAME_DIR)).ok())
        .and_then(|by_name| by_name.read_link(name_or_prefix).ok());
    match named.as_deref().and_then(CacheLayout::by_name_entry) {
        Some(short) => find_entry(cache, short),
        None => find_entry(cache, name_or_prefix),
    }
}
