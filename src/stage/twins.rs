//! Files of an entry with the same bytes are copied once. A split's Megatron and
//! flat `.bin` are one token array (the cache holds them as one inode); copied
//! separately they would take twice the node-local space and copy time. The
//! other files land as hard links to the first one's local copy.

use std::collections::{HashMap, HashSet};

use super::landing;
use super::plan::{PlannedFile, StagePlan, is_regular};

/// A pending file whose bytes are `original`'s: `original` is copied in this
/// staging or already complete in the destination.
pub struct Twin<'a> {
    pub file: &'a PlannedFile,
    pub original: &'a PlannedFile,
}

/// Splits the pending files into those to copy and those to link to a twin.
/// Files match by recorded blake3 and size (a cache entry's files; drop-in files
/// have no recorded hash and are all copied). A file already complete in the
/// destination is preferred as the original, so a re-run copies nothing twice.
pub fn split<'a>(plan: &'a StagePlan, pending: Vec<&'a PlannedFile>) -> (Vec<&'a PlannedFile>, Vec<Twin<'a>>) {
    let is_pending: HashSet<&str> = pending.iter().map(|f| f.relative.as_str()).collect();
    let mut originals: HashMap<(&str, u64), &PlannedFile> = HashMap::new();
    for file in &plan.files {
        // Empty files have nothing to share.
        let Some(hash) = file.blake3.as_deref().filter(|_| file.size > 0) else { continue };
        let original = originals.entry((hash, file.size)).or_insert(file);
        if is_pending.contains(original.relative.as_str()) && !is_pending.contains(file.relative.as_str()) {
            *original = file;
        }
    }
    let mut copies = Vec::new();
    let mut twins = Vec::new();
    for file in pending {
        match file.blake3.as_deref().and_then(|hash| originals.get(&(hash, file.size))) {
            Some(&original) if original.relative != file.relative => twins.push(Twin { file, original }),
            _ => copies.push(file),
        }
    }
    (copies, twins)
}

/// Links each twin whose original is now in place; returns the sizes of those
/// linked and the twins to copy instead, whose link the filesystem refused. A
/// twin whose original failed to copy is in neither: it fails with it.
pub fn link<'a>(plan: &StagePlan, twins: &[Twin<'a>]) -> (Vec<u64>, Vec<&'a PlannedFile>) {
    let mut linked = Vec::new();
    let mut refused = Vec::new();
    for twin in twins {
        let original = plan.dest_root.join(&twin.original.relative);
        if !is_regular(&original) {
            continue;
        }
        let path = plan.dest_root.join(&twin.file.relative);
        match landing::land_hard_link(&original, &path) {
            Ok(()) => linked.push(twin.file.size),
            Err(err) => {
                tracing::debug!(path = %path.display(), error = %err, "hard link refused; copying instead");
                refused.push(twin.file);
            }
        }
    }
    (linked, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::plan::PlanKind;

    fn file(relative: &str, size: u64, hash: Option<&str>) -> PlannedFile {
        PlannedFile { relative: relative.into(), size, blake3: hash.map(String::from) }
    }

    fn plan(files: Vec<PlannedFile>) -> StagePlan {
        StagePlan {
            id: "id".into(),
            name: "name".into(),
            source_root: "src".into(),
            source: std::sync::Arc::new(crate::fsutil::untrusted::Dir::open(std::path::Path::new(".")).unwrap()),
            dest_root: "dest".into(),
            files,
            kind: PlanKind::DropIn,
        }
    }

    fn names<'a>(files: impl IntoIterator<Item = &'a PlannedFile>) -> Vec<&'a str> {
        files.into_iter().map(|f| f.relative.as_str()).collect()
    }

    #[test]
    fn identical_files_are_copied_once_and_linked_after() {
        let plan = plan(vec![
            file("megatron/train_text_document.bin", 100, Some("aa")),
            file("flat/train.bin", 100, Some("aa")),
            file("train/data-00000-of-00001.arrow", 300, Some("bb")),
            file("empty-a", 0, Some("00")),
            file("empty-b", 0, Some("00")),
            file("manifest.json", 100, None),
        ]);
        let (copies, twins) = split(&plan, plan.files.iter().collect());
        assert_eq!(
            names(copies),
            [
                "megatron/train_text_document.bin",
                "train/data-00000-of-00001.arrow",
                "empty-a",
                "empty-b",
                "manifest.json"
            ]
        );
        assert_eq!(names(twins.iter().map(|t| t.file)), ["flat/train.bin"]);
        assert_eq!(twins[0].original.relative, "megatron/train_text_document.bin");
    }

    #[test]
    fn a_twin_already_in_place_is_the_original() {
        let plan = plan(vec![file("megatron/a.bin", 100, Some("aa")), file("flat/a.bin", 100, Some("aa"))]);
        // The Megatron file is pending, the flat one landed in an earlier run.
        let (copies, twins) = split(&plan, vec![&plan.files[0]]);
        assert!(copies.is_empty());
        assert_eq!(names(twins.iter().map(|t| t.original)), ["flat/a.bin"]);
    }

    #[test]
    fn same_hash_with_another_size_is_not_a_twin() {
        let plan = plan(vec![file("a", 100, Some("aa")), file("b", 200, Some("aa"))]);
        let (copies, twins) = split(&plan, plan.files.iter().collect());
        assert_eq!(names(copies), ["a", "b"]);
        assert!(twins.is_empty());
    }
}
