//! Megatron's index cache for node-local copies. megatron-core's `GPTDataset` builds
//! its sample indexes on global rank 0 only, into `<prefix>/cache/GPTDataset_indices/`
//! beside the data unless `--data-cache-path` says otherwise, and every other rank
//! loads them from there after a barrier. Beside a node-local copy, ranks on other
//! nodes find nothing and fail (Megatron-LM #907, #1355, #356; gpt-neox #919).
//!
//! So staging makes each Megatron prefix's cache folder, `<prefix>/` in the staged
//! entry, a symlink to one folder in the cache, shared by every node of the job:
//! `<cache>/megatron-cache/<uid>/<fp16>/<prefix>`. Rank 0 writes the indexes through
//! its node's link, and every rank reads them through its own, with no flag given.
//! Megatron names the index files by a hash of their description, which holds the
//! data's path: the nodes must stage at the same path, as `$SLURM_TMPDIR/ferry` is on
//! each node of a job. The folder is the user's own (mode 0700) in a sticky one:
//! Megatron loads the indexes with pickling allowed, so no one else may write them
//! or swap the folder for their own.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;

use crate::cache::layout::CacheLayout;

use super::mirror::ensure_symlink;
use super::plan::StagePlan;

/// The cache's folder of Megatron index caches.
pub const MEGATRON_CACHE_DIR: &str = "megatron-cache";

/// Links each Megatron prefix of the staged entry to its cache folder in `cache`.
/// A cache this user cannot write (a site-wide one) gets no links: Megatron then
/// needs `--data-cache-path` on a shared filesystem, which the warning says.
pub fn link_index_caches(cache: &CacheLayout, plan: &StagePlan) {
    let prefixes: Vec<&str> = plan
        .files
        .iter()
        .filter_map(|file| file.relative.strip_prefix("megatron/").and(file.relative.strip_suffix(".idx")))
        .collect();
    if prefixes.is_empty() {
        return;
    }
    if let Err(err) = link_prefixes(cache, plan, &prefixes) {
        tracing::warn!(
            error = %err,
            "cannot share Megatron's index cache between nodes; pass Megatron --data-cache-path on a filesystem every node sees"
        );
    }
}

fn link_prefixes(cache: &CacheLayout, plan: &StagePlan, prefixes: &[&str]) -> io::Result<()> {
    let shared = user_dir(cache)?.join(&plan.id);
    for prefix in prefixes {
        let target = shared.join(prefix);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&target)?;
        ensure_symlink(&target, &plan.dest_root.join(prefix))?;
    }
    Ok(())
}

/// `<cache>/megatron-cache/<uid>`, made this user's alone (0700). Both folders are
/// checked, not followed: `megatron-cache` must be a real folder that is this user's
/// or sticky (as /tmp, made so here: every user of a shared cache has a folder in it,
/// and none may rename another's), and `<uid>` a real folder of this user's alone.
fn user_dir(cache: &CacheLayout) -> io::Result<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let root = cache.root().join(MEGATRON_CACHE_DIR);
    if create(&root, 0o1777)? {
        // The umask took the sticky and shared bits off.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o1777))?;
    }
    let refuse = |path: &PathBuf, why: &str| {
        Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{} {why}", path.display())))
    };
    let meta = std::fs::symlink_metadata(&root)?;
    if !meta.is_dir() || (meta.uid() != uid && meta.mode() & 0o1000 == 0) {
        return refuse(&root, "is not a real folder of this user's, nor a sticky one (mode 1777)");
    }
    let dir = root.join(uid.to_string());
    create(&dir, 0o700)?;
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return refuse(&dir, "is not a folder of this user's alone (mode 0700)");
    }
    Ok(dir)
}

/// Creates the folder `path` with `mode` (less the umask); whether it was made here.
fn create(path: &PathBuf, mode: u32) -> io::Result<bool> {
    match std::fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(err),
    }
}
