//! A builder's progress file in the build directory, read by `ferry status`.

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
