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
//! <parent>/.ferry-incoming.<fp16>.pack       sent last: the index of what was sent, then
//!                                            the small files' bytes one after another
//! ```
//!
//! sbcast's man page warns against loops of calls (each one is a request to
//! slurmctld): one call per distinct large file, and one for the pack. A stage
//! looks for the pack only, one failed open when nothing was broadcast. It moves a
//! large file into place by a rename (the node never holds it twice) and copies the
//! small ones out of the pack.
//!
//! sbcast writes as the user, truncating whatever the name leads to, so that
//! directory must be the user's alone: owned by them, writable by nobody else, as
//! `$SLURM_TMPDIR` is. Elsewhere another user could plant a link there. What arrived
//! is still untrusted: the index is bounded and must name files of the plan with the
//! plan's sizes, and every copy out of it is checked as a copy from the cache is
//! (size; blake3 with `--verify`). What is missing or fails is copied from the cache.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use super::copy::{CopyJob, Source};
use super::{PlannedFile, StagePlan};
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
        "{dir} is {why}; --broadcast writes into the destination's parent, which must be yours alone: use a destination in $SLURM_TMPDIR"
    )]
    SharedParent { dir: PathBuf, why: String },
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
    /// Files sent (the manifest is not: each node reads it from the cache anyway).
    pub files: usize,
    pub files_packed: usize,
    pub bytes: u64,
    pub sbcast_calls: usize,
    pub seconds: f64,
}

/// The pack's index: the large files sent whole (by blake3), and where each small
/// file's bytes lie after the index.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Index {
    whole: Vec<String>,
    packed: Vec<Packed>,
}

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

/// Why a directory is not the user's alone, if it is not.
fn not_private(dir: &Dir) -> Option<String> {
    let stat = match rustix::fs::fstat(dir) {
        Ok(stat) => stat,
        Err(errno) => return Some(format!("not readable ({errno})")),
    };
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Some(format!("owned by uid {}", stat.st_uid));
    }
    (stat.st_mode & 0o022 != 0).then(|| format!("writable by others (mode {:o})", stat.st_mode & 0o777))
}

/// Sends the plan's files (an entry's) to the job's nodes: each distinct large file
/// (`pack_below` bytes and up) with one sbcast call, then the pack with one more.
pub fn send(plan: &StagePlan, dest: &Path, pack_below: u64) -> Result<BroadcastReport, BroadcastError> {
    let started = Instant::now();
    if !matches!(plan.kind, super::PlanKind::Entry { .. }) {
        return Err(BroadcastError::NotAnEntry);
    }
    if std::env::var_os("SLURM_JOB_ID").is_none() {
        return Err(BroadcastError::NotInJob);
    }
    let incoming = incoming_dir(dest);
    let Ok(dir) = Dir::open(&incoming) else { return Err(BroadcastError::NoParent { dir: incoming }) };
    if let Some(why) = not_private(&dir) {
        return Err(BroadcastError::SharedParent { dir: incoming, why });
    }
    // The manifest has no blake3 to check it by: each node reads it from the cache.
    let (whole, packed): (Vec<&PlannedFile>, Vec<&PlannedFile>) =
        plan.files.iter().filter(|f| f.blake3.is_some()).partition(|f| f.size >= pack_below);
    let mut sent = HashSet::new();
    let whole: Vec<&PlannedFile> = whole.into_iter().filter(|f| sent.insert(f.blake3.clone())).collect();
    for file in &whole {
        let source = open_checked(plan, &file.relative, file.size)?;
        // sbcast opens the file through this process's descriptor: the one opened
        // without following a symlink, not whatever the cache's path names by then.
        let by_descriptor = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), source.as_raw_fd()));
        let blake3 = file.blake3.as_deref().unwrap_or_default();
        sbcast(&by_descriptor, &incoming.join(whole_name(&plan.id, blake3)))?;
    }
    let mut pack = crate::fsutil::temp_file_in(&incoming).map_err(IoError::at("creating a pack in", &incoming))?;
    write_pack(plan, &whole, &packed, pack.as_file_mut())?;
    sbcast(pack.path(), &incoming.join(pack_name(&plan.id)))?;
    Ok(BroadcastReport {
        name: plan.name.clone(),
        id: plan.id.clone(),
        incoming,
        files: whole.len() + packed.len(),
        files_packed: packed.len(),
        bytes: whole.iter().chain(&packed).map(|f| f.size).sum(),
        sbcast_calls: whole.len() + 1,
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
/// the small files' bytes in the index's order.
fn write_pack(
    plan: &StagePlan,
    whole: &[&PlannedFile],
    packed: &[&PlannedFile],
    pack: &mut std::fs::File,
) -> Result<(), BroadcastError> {
    let mut offset = 0;
    let index = Index {
        whole: whole.iter().filter_map(|f| f.blake3.clone()).collect(),
        packed: packed
            .iter()
            .map(|f| {
                let packed = Packed { path: f.relative.clone(), size: f.size, offset };
                offset += f.size;
                packed
            })
            .collect(),
    };
    let index = serde_json::to_vec(&index).expect("an index serializes");
    let writing = |err| IoError { doing: "writing a pack for", path: plan.source_root.clone(), source: err };
    pack.write_all(&(index.len() as u64).to_le_bytes()).map_err(writing)?;
    pack.write_all(&index).map_err(writing)?;
    for file in packed {
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
    id: String,
    /// The blake3s of the large files sent whole (each checked when it is moved).
    whole: HashSet<String>,
    /// path in the entry -> (size, where its bytes begin in the pack).
    packed: HashMap<String, (u64, u64)>,
    pack: String,
}

impl Arrived {
    /// What arrived beside `dest` for `plan`; `None` when nothing did (the common
    /// case, one failed open) or what did cannot be trusted (said in a warning).
    pub fn find(plan: &StagePlan, dest: &Path) -> Option<Arrived> {
        let dir = Dir::open(&incoming_dir(dest)).ok()?;
        let pack = pack_name(&plan.id);
        let pack_file = dir.open_file(&pack).ok()?;
        let refuse = |why: String| {
            tracing::warn!(pack = %dir.display_path(&pack).display(), why, "ignoring what was broadcast; copying from the cache");
            None
        };
        if let Some(why) = not_private(&dir)
            .or_else(|| (!pack_file.metadata().is_ok_and(|meta| is_mine(&meta))).then(|| "not yours".to_string()))
        {
            return refuse(why);
        }
        let (whole, packed) = match read_index(plan, pack_file) {
            Ok(index) => index,
            Err(why) => return refuse(why),
        };
        let whole = whole.into_iter().collect();
        Some(Arrived { dir: Arc::new(dir), id: plan.id.clone(), whole, packed, pack })
    }

    /// The copy of `job` (from the cache) re-pointed at what arrived, if its file was
    /// sent. Only files with a blake3 in the manifest: `--verify` must be able to check them.
    pub fn source_for(&self, job: &CopyJob) -> Option<Source> {
        let blake3 = job.blake3.as_deref()?;
        if self.whole.contains(blake3) {
            return Some(Source::whole(self.dir.clone(), whole_name(&self.id, blake3)));
        }
        let (size, start) = self.packed.get(&job.source.relative)?;
        (*size == job.size).then(|| Source {
            dir: self.dir.clone(),
            relative: self.pack.clone(),
            packed_at: Some(*start),
        })
    }

    /// Moves a large file that arrived whole to `dest`, by a rename on the same disk,
    /// if it is there and checks out: the user's, one link, the plan's size, and with
    /// `verify` the manifest's blake3. A rename of a complete file: a reader of `dest`
    /// sees what stood there or the whole file.
    pub fn move_into_place(&self, job: &CopyJob, verify: bool) -> Move {
        if job.source.packed_at.is_some() {
            return Move::NotHere;
        }
        let Ok(file) = self.dir.open_file(&job.source.relative) else { return Move::Damaged };
        let checks = file.metadata().is_ok_and(|meta| is_mine(&meta) && meta.nlink() == 1 && meta.len() == job.size);
        let hash_checks = || {
            let found = crate::fsutil::blake3_of_reader(&file).map(|hash| hash.to_hex().to_string());
            job.blake3.as_ref().is_some_and(|expected| found.is_ok_and(|found| found == *expected))
        };
        if !checks || (verify && !hash_checks()) {
            return Move::Damaged;
        }
        match rustix::fs::renameat(&*self.dir, job.source.relative.as_str(), rustix::fs::CWD, &job.dest) {
            Ok(()) => Move::Moved,
            // Another filesystem, say: the copy engine copies it instead.
            Err(_) => Move::NotHere,
        }
    }

    /// Removes a large file that arrived, once copied: the node need not hold it twice.
    pub fn discard(&self, source: &Source) {
        if source.packed_at.is_none() {
            let _ = self.dir.remove_file(&source.relative);
        }
    }

    /// Removes what is left of what arrived, once the stage is done.
    pub fn remove(&self) {
        for name in self.whole.iter().map(|blake3| whole_name(&self.id, blake3)).chain([self.pack.clone()]) {
            let _ = self.dir.remove_file(&name);
        }
    }
}

/// What became of a large file that arrived whole.
#[derive(Debug, PartialEq, Eq)]
pub enum Move {
    /// It is in place.
    Moved,
    /// It is missing or does not check out: copy it from the cache.
    Damaged,
    /// It could not be moved (packed, or on another filesystem): copy it from where it is.
    NotHere,
}

fn is_mine(meta: &std::fs::Metadata) -> bool {
    meta.uid() == rustix::process::geteuid().as_raw()
}

/// A pack's index, checked against the plan: each large file one of the plan's by
/// blake3, each packed file a file of the plan with the plan's size, lying inside
/// the pack. Returns the large files' blake3s and path -> (size, start in the pack).
type ReadIndex = (Vec<String>, HashMap<String, (u64, u64)>);
fn read_index(plan: &StagePlan, mut pack: std::fs::File) -> Result<ReadIndex, String> {
    let length = pack.metadata().map_err(|e| e.to_string())?.len();
    let mut prefix = [0u8; 8];
    pack.read_exact(&mut prefix).map_err(|e| format!("no index: {e}"))?;
    let index_bytes = u64::from_le_bytes(prefix);
    let data_start = 8 + index_bytes.min(MAX_INDEX_BYTES + 1);
    if index_bytes > MAX_INDEX_BYTES || data_start > length {
        return Err(format!("an index of {index_bytes} bytes in a pack of {length}"));
    }
    let mut index = Vec::new();
    (&mut pack).take(index_bytes).read_to_end(&mut index).map_err(|e| e.to_string())?;
    if index.len() as u64 != index_bytes {
        return Err(format!("an index cut short at {} of {index_bytes} bytes", index.len()));
    }
    let index: Index = serde_json::from_slice(&index).map_err(|e| format!("an unreadable index: {e}"))?;
    let hashes: HashSet<&str> = plan.files.iter().filter_map(|f| f.blake3.as_deref()).collect();
    if let Some(unknown) = index.whole.iter().find(|blake3| !hashes.contains(blake3.as_str())) {
        return Err(format!("a large file {unknown:?} that is not one of this entry's"));
    }
    let sizes: HashMap<&str, u64> = plan.files.iter().map(|f| (f.relative.as_str(), f.size)).collect();
    let mut packed = HashMap::new();
    for file in index.packed {
        if sizes.get(file.path.as_str()) != Some(&file.size) {
            return Err(format!("{:?} ({} bytes) is not a file of this entry's", file.path, file.size));
        }
        let start = data_start
            .checked_add(file.offset)
            .filter(|start| start.checked_add(file.size).is_some_and(|end| end <= length));
        let Some(start) = start else {
            return Err(format!("{:?} lies past the pack's end (at {})", file.path, file.offset));
        };
        packed.insert(file.path, (file.size, start));
    }
    Ok((index.whole, packed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::PlanKind;
    use std::io::Seek;

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
        let (whole, packed) = (vec![&plan.files[1]], vec![&plan.files[0], &plan.files[2]]);
        write_pack(&plan, &whole, &packed, &mut pack).unwrap();
        pack.rewind().unwrap();
        let mut bytes = Vec::new();
        pack.read_to_end(&mut bytes).unwrap();
        pack.rewind().unwrap();
        let (whole, index) = read_index(&plan, pack).unwrap();
        assert_eq!(whole, vec![plan.files[1].blake3.clone().unwrap()]);
        assert_eq!(index.len(), 2);
        for (name, expected) in [("a.json", &b"first"[..]), ("empty", b"")] {
            let (size, start) = index[name];
            assert_eq!(&bytes[start as usize..(start + size) as usize], expected, "{name}");
        }
    }

    #[test]
    fn a_large_arrival_is_moved_into_place_only_when_it_checks_out() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![5u8; 4096];
        let plan = plan(dir.path(), &[("train/a.arrow", &big), ("train/b.arrow", &big[..100]), ("c.json", b"{}")]);
        // What a broadcast leaves in the destination's parent: two large files whole, one packed.
        let incoming = dir.path().join("tmpdir");
        std::fs::create_dir(&incoming).unwrap();
        let (whole, packed) = (vec![&plan.files[0], &plan.files[1]], vec![&plan.files[2]]);
        let mut pack = std::fs::File::create(incoming.join(pack_name(&plan.id))).unwrap();
        write_pack(&plan, &whole, &packed, &mut pack).unwrap();
        let blake3 = |index: usize| plan.files[index].blake3.clone().unwrap();
        std::fs::write(incoming.join(whole_name(&plan.id, &blake3(0))), &big).unwrap();
        let mut damaged = big[..100].to_vec();
        damaged[7] ^= 1;
        std::fs::write(incoming.join(whole_name(&plan.id, &blake3(1))), &damaged).unwrap();

        let dest = incoming.join("ferry");
        let arrived = Arrived::find(&plan, &dest).expect("the pack is found");
        std::fs::create_dir_all(dest.join("train")).unwrap();
        let job = |index: usize| {
            let file = &plan.files[index];
            let from_cache = CopyJob {
                source: Source::whole(plan.source.clone(), file.relative.clone()),
                dest: dest.join(&file.relative),
                size: file.size,
                blake3: file.blake3.clone(),
            };
            let source = arrived.source_for(&from_cache).expect("it arrived");
            CopyJob { source, ..from_cache }
        };
        assert_eq!(arrived.move_into_place(&job(0), true), Move::Moved);
        assert_eq!(std::fs::read(dest.join("train/a.arrow")).unwrap(), big);
        assert!(!incoming.join(whole_name(&plan.id, &blake3(0))).exists(), "moved, not copied");
        // Damaged on the way: caught by --verify; only the size is checked without it.
        assert_eq!(arrived.move_into_place(&job(1), true), Move::Damaged);
        assert!(!dest.join("train/b.arrow").exists());
        // A packed file is copied out of the pack, never moved.
        assert_eq!(arrived.move_into_place(&job(2), true), Move::NotHere);
    }

    #[test]
    fn an_index_that_does_not_match_the_plan_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plan = plan(dir.path(), &[("a.json", b"first")]);
        let refused = |packed: &str, data: &[u8]| {
            let index = format!(r#"{{"whole":[],"packed":[{packed}]}}"#);
            read_index(&plan, pack_of(index.as_bytes(), data)).unwrap_err()
        };
        // A file the entry does not have, a size other than the manifest's, bytes past the end.
        assert!(refused(r#"{"path":"../../etc/passwd","size":5,"offset":0}"#, b"first").contains("not a file"));
        assert!(refused(r#"{"path":"a.json","size":4,"offset":0}"#, b"first").contains("not a file"));
        assert!(refused(r#"{"path":"a.json","size":5,"offset":1}"#, b"first").contains("past the pack's end"));
        for offset in [u64::MAX - 3, u64::MAX - 40] {
            let packed = format!(r#"{{"path":"a.json","size":5,"offset":{offset}}}"#);
            assert!(refused(&packed, b"first").contains("past the pack's end"), "{offset}");
        }
        let unknown = read_index(&plan, pack_of(br#"{"whole":["00ff"],"packed":[]}"#, b"")).unwrap_err();
        assert!(unknown.contains("not one of this entry's"), "{unknown}");
        assert!(read_index(&plan, pack_of(b"not json", b"")).unwrap_err().contains("unreadable"));
        // An index length beyond the file, or beyond any sane index.
        for length in [u64::MAX, 1000] {
            let mut file = tempfile::tempfile().unwrap();
            file.write_all(&length.to_le_bytes()).unwrap();
            file.rewind().unwrap();
            assert!(read_index(&plan, file).unwrap_err().contains("an index of"), "{length}");
        }
    }
}
