//! Re-hashes an entry's files (in parallel) and reports every
//! file whose size or blake3 differs from the manifest.

use rayon::prelude::*;
use serde::Serialize;

use crate::cache::manifest::Manifest;
use crate::fsutil::untrusted::Dir;

#[derive(Debug, Clone, Serialize)]
pub struct FileProblem {
    pub path: String,
    pub problem: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub name: String,
    pub fingerprint: String,
    pub root: String,
    pub files: usize,
    pub bytes: u64,
    pub problems: Vec<FileProblem>,
}

/// Checks the copy of `manifest`'s entry in `entry` (the cache's or a staged one),
/// opened without following symlinks: every file is opened below it the same way,
/// so a link planted in a shared cache is reported, never hashed through.
pub fn verify_entry(entry: &Dir, manifest: &Manifest) -> VerifyReport {
    let mut problems: Vec<FileProblem> = manifest
        .files
        .par_iter()
        .filter_map(|file| {
            let problem = match entry.open_file(&file.path).and_then(|f| Ok((f.metadata()?.len(), f))) {
                Err(err) => Some(format!("cannot read: {err}")),
                Ok((size, _)) if size != file.size => Some(format!("size {size} instead of {}", file.size)),
                Ok((_, opened)) => match crate::fsutil::blake3_of_reader(opened) {
                    Err(err) => Some(format!("cannot read: {err}")),
                    Ok(found) => {
                        let found = found.to_hex();
                        (found.as_str() != file.blake3).then(|| format!("blake3 {found} instead of {}", file.blake3))
                    }
                },
            };
            problem.map(|problem| FileProblem { path: entry.display_path(&file.path).display().to_string(), problem })
        })
        .collect();
    problems.sort_by(|a, b| a.path.cmp(&b.path));
    VerifyReport {
        name: manifest.name.clone(),
        fingerprint: manifest.fingerprint.clone(),
        root: entry.path().display().to_string(),
        files: manifest.files.len(),
        bytes: manifest.files.iter().map(|f| f.size).sum(),
        problems,
    }
}
