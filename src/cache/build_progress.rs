//! A builder's progress file in the build directory, read by `ferry status`.

use crate::cache::layout::BuildLayout;
use crate::fingerprint::Fingerprint;
use crate::fsutil;
use crate::ticker::Ticker;

/// What `ferry status` shows of a build in progress.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BuildProgress {
    pub name: String,
    pub fingerprint: String,
    pub host: String,
    pub pid: u32,
    pub job_id: Option<String>,
    pub shards_done: u64,
    pub shards_total: u64,
    pub updated_unix: u64,
}

/// Keeps this builder's progress file fresh every two seconds, for the build of
/// `name` with `fingerprint` (a token store's, counting shards; a view's, counting
/// splits); it is removed with the build directory (or by `gc` when the builder died).
pub fn ticker(build: &BuildLayout, name: &str, fingerprint: &Fingerprint, shards_total: u64) -> Ticker {
    let (host, pid) = (fsutil::whoami().host.clone(), fsutil::whoami().pid);
    let path = build.progress_file(&host, pid);
    let build = build.clone();
    let mut progress = BuildProgress {
        name: name.to_string(),
        fingerprint: fingerprint.full(),
        host,
        pid,
        job_id: fsutil::whoami().job_id.clone(),
        shards_done: 0,
        shards_total,
        updated_unix: 0,
    };
    Ticker::every(std::time::Duration::from_secs(2), move || {
        progress.shards_done = build.count_shard_records();
        progress.updated_unix = fsutil::now_unix();
        if build.root().exists()
            && let Ok(bytes) = serde_json::to_vec(&progress)
        {
            let _ = fsutil::write_atomic_unsynced(&path, &bytes);
        }
    })
}
