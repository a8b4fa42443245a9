//! `ferry verify`: exit 1 when any file differs from its manifest.

use std::path::Path;

use anyhow::bail;

use super::{UserError, find_entry};
use crate::cache::destination::DestLayout;
use crate::cache::layout::{CacheLayout, EntryLayout};
use crate::cache::manifest::Manifest;
use crate::verify::{self, VerifyReport};

pub fn run(
    cache_root: &Path,
    fingerprint: Option<&str>,
    all: bool,
    dest: Option<&Path>,
    as_json: bool,
) -> anyhow::Result<()> {
    let cache = CacheLayout::new(cache_root);
    // (manifest, where its files are)
    let mut targets: Vec<(Manifest, std::path::PathBuf)> = Vec::new();
    match (dest, fingerprint) {
        (Some(dest), _) => {
            for item in fs_err::read_dir(DestLayout::new(dest).mirror().entries_dir())?.flatten() {
                let short = item.file_name().to_string_lossy().into_owned();
                let staged = item.path().symlink_metadata().is_ok_and(|m| m.is_dir());
                if !staged || fingerprint.is_some_and(|f| !short.starts_with(f)) {
                    continue;
                }
                let entry = EntryLayout::new(item.path());
                targets.push((Manifest::load(&entry.manifest())?, item.path()));
            }
        }
        (None, Some(prefix)) => {
            let manifest = find_entry(&cache, prefix)?;
            let root = cache.entry(manifest.short_fingerprint()).root().to_path_buf();
            targets.push((manifest, root));
        }
        (None, None) if all => {
            for item in fs_err::read_dir(cache.entries_dir())?.flatten() {
                let root = item.path();
                targets.push((Manifest::load(&EntryLayout::new(&root).manifest())?, root));
            }
        }
        (None, None) => bail!(UserError("give a fingerprint, --all, or --dest".into())),
    }
    let reports: Vec<VerifyReport> =
        targets.iter().map(|(manifest, root)| verify::verify_entry(root, manifest)).collect();
    if as_json {
        out!("{}", serde_json::to_string_pretty(&reports)?)?;
    } else {
        for report in &reports {
            let verdict = if report.problems.is_empty() { "ok" } else { "DAMAGED" };
            out!(
                "{} {} ({}): {} files, {}: {verdict}",
                report.name,
                &report.fingerprint[..16.min(report.fingerprint.len())],
                report.root,
                report.files,
                bytesize::ByteSize(report.bytes)
            )?;
            for problem in &report.problems {
                out!("  {}: {}", problem.path, problem.problem)?;
            }
        }
    }
    let damaged: usize = reports.iter().map(|r| r.problems.len()).sum();
    if damaged > 0 {
        bail!(UserError(format!(
            "{damaged} file(s) differ from their manifest; re-prepare the entry (remove it first) or re-stage"
        )));
    }
    Ok(())
}
