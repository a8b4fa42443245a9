//! `ferry verify`: exit 1 when any file differs from its manifest.

use std::path::Path;

use anyhow::bail;

use super::UserError;
use crate::cache::destination::DestLayout;
use crate::cache::layout::is_short_fingerprint;
use crate::cache::layout::{CacheLayout, ENTRIES_DIR};
use crate::cache::lookup::find_entry;
use crate::cache::manifest::Manifest;
use crate::errors::IoError;
use crate::fsutil::untrusted::Dir;
use crate::verify::{self, VerifyReport};

pub fn run(
    cache: &CacheLayout,
    fingerprint: Option<&str>,
    all: bool,
    dest: Option<&Path>,
    as_json: bool,
) -> anyhow::Result<()> {
    // (manifest, the entry's directory opened without following symlinks)
    let mut targets: Vec<(Manifest, Dir)> = Vec::new();
    let in_entries = |root: &Path, short: &str| -> anyhow::Result<Dir> {
        let root = Dir::open(root).map_err(IoError::at("opening", root))?;
        Ok(root.open_dir(Path::new(ENTRIES_DIR).join(short))?)
    };
    match (dest, fingerprint) {
        (Some(dest), _) => {
            for item in fs_err::read_dir(DestLayout::new(dest).mirror().entries_dir())?.flatten() {
                let short = item.file_name().to_string_lossy().into_owned();
                let staged = item.path().symlink_metadata().is_ok_and(|m| m.is_dir());
                if !staged || !is_short_fingerprint(&short) || fingerprint.is_some_and(|f| !short.starts_with(f)) {
                    continue;
                }
                targets.push((Manifest::load_entry(&item.path())?, in_entries(dest, &short)?));
            }
        }
        (None, Some(prefix)) => {
            let manifest = find_entry(cache, prefix)?;
            let entry = in_entries(cache.root(), manifest.short_fingerprint())?;
            targets.push((manifest, entry));
        }
        (None, None) if all => {
            for item in fs_err::read_dir(cache.entries_dir())?.flatten() {
                let short = item.file_name().to_string_lossy().into_owned();
                if is_short_fingerprint(&short) {
                    targets.push((Manifest::load_entry(&item.path())?, in_entries(cache.root(), &short)?));
                }
            }
        }
        (None, None) => bail!(UserError("give a fingerprint, --all, or --dest".into())),
    }
    let reports: Vec<VerifyReport> =
        targets.iter().map(|(manifest, entry)| verify::verify_entry(entry, manifest)).collect();
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
