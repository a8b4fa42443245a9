//! Re-hashes an entry's files (in parallel) and reports every
//! file whose size or blake3 differs from the manifest.

use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use crate::cache::manifest::Manifest;

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

/// Checks the copy of `manifest`'s entry found at `root` (the cache's or a staged one).
pub fn verify_entry(root: &Path, manifest: &Manifest) -> VerifyReport {
    let mut problems: Vec<FileProblem> = manifest
        .files
        .par_iter()
        .filter_map(|file| {
            let path = root.join(&file.path);
            let problem = match std::fs::metadata(&path) {
                Err(err) => Some(format!("cannot read: {err}")),
                Ok(meta) if meta.len() != file.size => Some(format!("size {} instead of {}", meta.len(), file.size)),
                Ok(_) => match crate::fsutil::blake3_of_file(&path) {
                    Err(err) => Some(format!("cannot read: {err}")),
                    Ok(found) => {
                        let found = found.to_hex();
                        (found.as_str() != file.blake3).then(|| format!("blake3 {found} instead of {}", file.blake3))
                    }
                },
            };
            problem.map(|problem| FileProblem { path: path.display().to_string(), problem })
        })
        .collect();
    problems.sort_by(|a, b| a.path.cmp(&b.path));
    VerifyReport {
        name: manifest.name.clone(),
        fingerprint: manifest.fingerprint.clone(),
        root: root.display().to_string(),
        files: manifest.files.len(),
        bytes: manifest.files.iter().map(|f| f.size).sum(),
        problems,
    }
}
