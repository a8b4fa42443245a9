//! `stage --broadcast`: the entry's files fanned out to every node of a Slurm job
//! by `sbcast`, reading the shared copy once. Each node's `ferry stage` then lands
//! what arrived from its own disk instead of reading `$SCRATCH` again, so the shared
//! filesystem's load no longer grows with the number of nodes.
//!
//! What arrives lies beside the destination, in its parent directory: for the
//! default destination `$SLURM_TMPDIR/ferry` that is `$SLURM_TMPDIR`, which every
//! node of the job has at the same path, while `ferry/` is not created yet.
//!
//! ```text
//! <parent>/.ferry-incoming.<fp16>.<blake3>   a large file, whole, named by its content
//! <parent>/.ferry-incoming.<fp16>.pack       the small files, one after another
//! ```
//!
//! sbcast's man page warns against loops of calls (each one is a request to
//! slurmctld): one call per large file, and one for the pack. The pack starts with
//! its length-prefixed JSON index (path, size, offset of each file). Everything that
//! arrived is untrusted: the index is bounded and each of its files must be a file of
//! the plan with the plan's size, a large file must carry the name of the manifest's
//! blake3 and belong to the user, and every copy out of them is checked as a copy
//! from the cache is (size; blake3 with `--verify`). What is missing or fails is
//! copied from the cache instead.

use std::collections::HashMap;
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use super::StagePlan;
use super::copy::{CopyJob, Source};
use crate::errors::{Failure, Fault, IoError};
use crate::fsutil::untrusted::Dir;

/// Files below this size travel in the pack unless `FERRY_BROADCAST_PACK_BELOW` says otherwise.
pub const PACK_BELOW: u64 = 16 << 20;
/// A pack's index is refused above this size (an entry of a million files fits).
const MAX_INDEX_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BroadcastError {
    #[error(
        "--broadcast needs a Slurm job (SLURM_JOB_ID is not set): run it in the batch script, before `srun --ntasks-per-node=1 ferry stage`"
    )]
    NotInJob,
    #[error(
        "{dir} does not exist on this node; --broadcast sends into the destination's parent, which must exist on every node of the job (the default destination $SLURM_TMPDIR/ferry has $SLURM_TMPDIR)"
    )]
    NoParent { dir: PathBuf },
    #[error(
        "--broadcast stages a prepared entry; a drop-in directory (--src) is copied by each node's `ferry stage` instead"
    )]
    NotAnEntry,
    #[error("{path}: the cache copy has {found} bytes, the manifest says {expected}; run `ferry verify`")]
    Size { path: PathBuf, expected: u64, found: u64 },
    #[error(
        "running sbcast (from Slurm's client commands) failed: {source}; install slurm-client or stage without --broadcast"
    )]
    NoSbcast { source: io::Error },
    #[error("sbcast {source_file} {dest} failed ({status}): {stderr}")]
    Sbcast { source_file: PathBuf, dest: PathBuf, status: std::process::ExitStatus, stderr: String },
    #[error(transparent)]
    Io(#[from] IoError),
}

impl Failure for BroadcastError {
    fn fault(&self) -> Fault {
        match self {
            BroadcastError::Io(_) => Fault::Cause,
            // sbcast fails for what the user can mend: a node without the destination's
            // parent, no space there, a job that ended.
            _ => Fault::User,
        }
    }
}

/// What a broadcast sent.
#[derive(Debug, serde::Serialize)]
pub struct BroadcastReport {
    pub name: String,
    pub id: String,
    /// Where the files arrived on every node.
    pub incoming: PathBuf,
    pub files: usize,
    pub files_packed: usize,
    pub bytes: u64,
    pub sbcast_calls: usize,
    pub seconds: f64,
}

/// One entry of a pack's index; `offset` counts from the end of the index.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Packed {
    path: String,
    size: u64,
    offset: u64,
}

/// Where broadcast files arrive for a destination: its parent directory.
pub fn incoming_dir(dest: &Path) -> PathBuf {
    let dest = std::path::absolute(dest).unwrap_or_else(|_| dest.to_path_buf());
    dest.parent().map(Path::to_path_buf).unwrap_or(dest)
}

fn whole_name(id: &str, blake3: &str) -> String {
    format!(".ferry-incoming.{id}.{blake3}")
}

fn pack_name(id: &str) -> String {
    format!(".ferry-incoming.{id}.pack")
}

/// Sends every file of `plan` (an entry's) to the job's nodes: the large ones
/// (`pack_below` bytes and up) each with one sbcast call, the others packed into
/// one file sent with one more.
pub fn send(plan: &StagePlan, dest: &Path, pack_below: u64) -> Result<BroadcastReport, BroadcastError> {
    let started = Instant::now();
    if !matches!(plan.kind, super::PlanKind::Entry { .. }) {
        return Err(BroadcastError::NotAnEntry);
    }
    if std::env::var_os("SLURM_JOB_ID").is_none() {
        return Err(BroadcastError::NotInJob);
    }
    let incoming = incoming_dir(dest);
    if !incoming.is_dir() {
        return Err(BroadcastError::NoParent { dir: incoming });
    }
    let (whole, packed): (Vec<_>, Vec<_>) = plan.files.iter().partition(|f| f.size >= pack_below && f.blake3.is_some());
    let mut calls = 0;
    if !packed.is_empty() {
        let mut pack = crate::fsutil::temp_file_in(&incoming).map_err(IoError::at("creating a pack in", &incoming))?;
        write_pack(plan, &packed, pack.as_file_mut())?;
        sbcast(pack.path(), &incoming.join(pack_name(&plan.id)))?;
        calls += 1;
    }
    for file in &whole {
        let source = open_checked(plan, &file.relative, file.size)?;
        // sbcast opens the file through this process's descriptor: the one opened
        // without following a symlink, not whatever the cache's path names by then.
        let by_descriptor = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), source.as_raw_fd()));
        let blake3 = file.blake3.as_deref().unwrap_or_default();
        sbcast(&by_descriptor, &incoming.join(whole_name(&plan.id, blake3)))?;
        calls += 1;
    }
    Ok(BroadcastReport {
        name: plan.name.clone(),
        id: plan.id.clone(),
        incoming,
        files: plan.files.len(),
        files_packed: packed.len(),
        bytes: plan.files.iter().map(|f| f.size).sum(),
        sbcast_calls: calls,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Opens a file of the entry (regular, no symlink followed) and checks its size.
fn open_checked(plan: &StagePlan, relative: &str, size: u64) -> Result<std::fs::File, BroadcastError> {
    let path = plan.source.display_path(relative);
    let file = plan.source.open_file(relative).map_err(IoError::at("opening", &path))?;
    let found = file.metadata().map_err(IoError::at("reading", &path))?.len();
    if found != size {
        return Err(BroadcastError::Size { path, expected: size, found });
    }
    Ok(file)
}

/// The pack: the index's length (8 bytes, little-endian), the index (JSON), then
/// the files' bytes in the index's order.
fn write_pack(plan: &StagePlan, files: &[&super::PlannedFile], pack: &mut std::fs::File) -> Result<(), BroadcastError> {
    let mut offset = 0;
    let index: Vec<Packed> = files
        .iter()
        .map(|f| {
            let packed = Packed { path: f.relative.clone(), size: f.size, offset };
            offset += f.size;
            packed
        })
        .collect();
    let index = serde_json::to_vec(&index).expect("an index serializes");
    let writing = |err| IoError { doing: "writing a pack for", path: plan.source_root.clone(), source: err };
    pack.write_all(&(index.len() as u64).to_le_bytes()).map_err(writing)?;
    pack.write_all(&index).map_err(writing)?;
    for file in files {
        let source = open_checked(plan, &file.relative, file.size)?;
        let copied = io::copy(&mut source.take(file.size), pack).map_err(writing)?;
        if copied != file.size {
            let path = plan.source.display_path(&file.relative);
            return Err(BroadcastError::Size { path, expected: file.size, found: copied });
        }
    }
    Ok(pack.flush().map_err(writing)?)
}

fn sbcast(source: &Path, dest: &Path) -> Result<(), BroadcastError> {
    tracing::debug!(source = %source.display(), dest = %dest.display(), "sbcast");
    let output = Command::new("sbcast")
        .arg("--force")
        .arg(source)
        .arg(dest)
        .output()
        .map_err(|source| BroadcastError::NoSbcast { source })?;
    if !output.status.success() {
        return Err(BroadcastError::Sbcast {
            source_file: source.to_path_buf(),
            dest: dest.to_path_buf(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// What arrived for a plan on this node, found once per stage.
pub struct Arrived {
    dir: Arc<Dir>,
    /// blake3 -> the name of a whole file that arrived.
    whole: HashMap<String, String>,
    /// path in the entry -> (size, where its bytes begin in the pack).
    packed: HashMap<String, (u64, u64)>,
    pack: String,
}

impl Arrived {
    /// What arrived beside `dest` for `plan`; `None` when nothing did (the common case).
    pub fn find(plan: &StagePlan, dest: &Path) -> Option<Arrived> {
        let prefix = format!(".ferry-incoming.{}.", plan.id);
        let dir = Dir::open(&incoming_dir(dest)).ok()?;
        let names: Vec<String> =
            dir.list().ok()?.into_iter().map(|item| item.name).filter(|name| name.starts_with(&prefix)).collect();
        if names.is_empty() {
            return None;
        }
        let mine = |name: &str| dir.open_file(name).ok().filter(is_mine);
        let whole = names
            .iter()
            .filter_map(|name| Some((name.strip_prefix(&prefix)?.to_string(), name.clone())))
            .filter(|(blake3, name)| blake3 != "pack" && mine(name).is_some())
            .collect();
        let pack = pack_name(&plan.id);
        let packed = match names.contains(&pack).then(|| mine(&pack)).flatten() {
            Some(file) => read_index(plan, file).unwrap_or_else(|why| {
                tracing::warn!(pack = %dir.display_path(&pack).display(), why, "ignoring a broadcast pack");
                HashMap::new()
            }),
            None => HashMap::new(),
        };
        Some(Arrived { dir: Arc::new(dir), whole, packed, pack })
    }

    /// The copy of `job` (from the cache) re-pointed at what arrived, if its file did.
    pub fn source_for(&self, job: &CopyJob, blake3: Option<&str>) -> Option<Source> {
        if let Some(name) = blake3.and_then(|hash| self.whole.get(hash)) {
            return Some(Source::whole(self.dir.clone(), name.clone()));
        }
        let (size, start) = self.packed.get(&job.source.relative)?;
        (*size == job.size).then(|| Source {
            dir: self.dir.clone(),
            relative: self.pack.clone(),
            packed_at: Some(*start),
        })
    }

    /// Removes what arrived, once landed (only this user's files: the directory may be shared).
    pub fn remove(&self) {
        for name in self.whole.values().chain(std::iter::once(&self.pack)) {
            if self.dir.open_file(name).is_ok_and(|file| is_mine(&file)) {
                let _ = self.dir.remove_file(name);
            }
        }
    }
}

fn is_mine(file: &std::fs::File) -> bool {
    file.metadata().is_ok_and(|meta| meta.uid() == rustix::process::geteuid().as_raw())
}

/// A pack's index, checked against the plan: every file a file of the plan with the
/// plan's size, lying inside the pack. Returns path -> (size, start in the pack).
fn read_index(plan: &StagePlan, mut pack: std::fs::File) -> Result<HashMap<String, (u64, u64)>, String> {
    let length = pack.metadata().map_err(|e| e.to_string())?.len();
    let mut prefix = [0u8; 8];
    pack.read_exact(&mut prefix).map_err(|e| format!("no index: {e}"))?;
    let index_bytes = u64::from_le_bytes(prefix);
    if index_bytes > MAX_INDEX_BYTES || 8 + index_bytes > length {
        return Err(format!("an index of {index_bytes} bytes in a pack of {length}"));
    }
    let mut index = Vec::new();
    (&mut pack).take(index_bytes).read_to_end(&mut index).map_err(|e| e.to_string())?;
    let index: Vec<Packed> = serde_json::from_slice(&index).map_err(|e| format!("an unreadable index: {e}"))?;
    let data_start = pack.stream_position().map_err(|e| e.to_string())?;
    let sizes: HashMap<&str, u64> = plan.files.iter().map(|f| (f.relative.as_str(), f.size)).collect();
    let mut packed = HashMap::new();
    for file in index {
        let fits = file.offset.checked_add(file.size).is_some_and(|end| data_start + end <= length);
        if sizes.get(file.path.as_str()) != Some(&file.size) || !fits {
            return Err(format!(
                "{:?} ({} bytes at {}) is not a file of this entry's",
                file.path, file.size, file.offset
            ));
        }
        packed.insert(file.path, (file.size, data_start + file.offset));
    }
    Ok(packed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::{PlanKind, PlannedFile};

    /// A plan over files written into a temporary source directory.
    fn plan(dir: &Path, files: &[(&str, &[u8])]) -> StagePlan {
        let source_root = dir.join("src");
        for (name, bytes) in files {
            std::fs::create_dir_all(source_root.join(name).parent().unwrap()).unwrap();
            std::fs::write(source_root.join(name), bytes).unwrap();
        }
        let files = files
            .iter()
            .map(|(name, bytes)| PlannedFile {
                relative: name.to_string(),
                size: bytes.len() as u64,
                blake3: Some(blake3::hash(bytes).to_hex().to_string()),
            })
            .collect();
        StagePlan {
            id: "0123456789abcdef".into(),
            name: "test".into(),
            source: Arc::new(Dir::open(&source_root).unwrap()),
            source_root,
            dest_root: dir.join("dest"),
            files,
            kind: PlanKind::DropIn,
        }
    }

    fn pack_of(index: &[u8], data: &[u8]) -> std::fs::File {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&(index.len() as u64).to_le_bytes()).unwrap();
        file.write_all(index).unwrap();
        file.write_all(data).unwrap();
        file.rewind().unwrap();
        file
    }

    #[test]
    fn a_pack_reads_back_each_file_at_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let plan = plan(dir.path(), &[("a.json", b"first"), ("train/b.arrow", b"second file"), ("empty", b"")]);
        let mut pack = tempfile::tempfile().unwrap();
        let files: Vec<&PlannedFile> = plan.files.iter().collect();
        write_pack(&plan, &files, &mut pack).unwrap();
        pack.rewind().unwrap();
        let mut bytes = Vec::new();
        pack.read_to_end(&mut bytes).unwrap();
        pack.rewind().unwrap();
        let index = read_index(&plan, pack).unwrap();
        assert_eq!(index.len(), 3);
        for (name, expected) in [("a.json", &b"first"[..]), ("train/b.arrow", b"second file"), ("empty", b"")] {
            let (size, start) = index[name];
            assert_eq!(&bytes[start as usize..(start + size) as usize], expected, "{name}");
        }
    }

    #[test]
    fn an_index_that_does_not_match_the_plan_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plan = plan(dir.path(), &[("a.json", b"first")]);
        let refused = |index: &[u8], data: &[u8]| read_index(&plan, pack_of(index, data)).unwrap_err();
        // A file the entry does not have, a size other than the manifest's, bytes past the end.
        assert!(refused(br#"[{"path":"../../etc/passwd","size":5,"offset":0}]"#, b"first").contains("not a file"));
        assert!(refused(br#"[{"path":"a.json","size":4,"offset":0}]"#, b"first").contains("not a file"));
        assert!(refused(br#"[{"path":"a.json","size":5,"offset":1}]"#, b"first").contains("not a file"));
        let huge = u64::MAX - 3;
        assert!(
            refused(format!(r#"[{{"path":"a.json","size":5,"offset":{huge}}}]"#).as_bytes(), b"first")
                .contains("not a file")
        );
        assert!(refused(b"not json", b"").contains("unreadable"));
        // An index length beyond the file.
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&u64::MAX.to_le_bytes()).unwrap();
        file.rewind().unwrap();
        assert!(read_index(&plan, file).unwrap_err().contains("an index of"));
    }
}
