//! Filesystem primitives every other module builds on: atomic writes, no-replace
//! renames, exclusive creation, free-space queries, writes in pieces, writeback hints.
//!
//! Everything here must behave on shared parallel filesystems (NFS, Lustre, GPFS)
//! as well as on local disks, so it relies only on `open(O_EXCL)` and `rename`,
//! never on `flock`.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use fs_err as fs;

pub mod untrusted;

/// How every temporary name ferry makes begins: a file being written, a link
/// being replaced. gc and a resumed stage remove what a killed writer left by it.
pub const TEMP_PREFIX: &str = ".ferry-tmp-";

/// A name beside `path` that no other writer uses (this process's pid and a
/// counter), starting with `TEMP_PREFIX`.
pub fn temp_name_beside(path: &Path) -> std::path::PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!("{TEMP_PREFIX}{name}.{}.{}", whoami().pid, unique_suffix()))
}

/// The most one `write` call hands the kernel. Single writes of 2 MiB and more
/// into a new file sometimes took the kernel's copy into the page cache several
/// times the system time (ext4, Linux 6.18: 160 MB written in 4 MiB calls took
/// 0.04-0.48 s of system time over sixteen runs, in 1 MiB calls 0.03-0.05 s); an
/// Arrow batch's body, about 4 MiB, was such a write. The bytes are the same.
pub const WRITE_PIECE_BYTES: usize = 1 << 20;

/// `write_all` in calls of at most `WRITE_PIECE_BYTES`.
pub fn write_all_in_pieces(file: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    bytes.chunks(WRITE_PIECE_BYTES).try_for_each(|piece| file.write_all(piece))
}

/// Writes `bytes` to `path` so that readers see either the old file or the whole
/// new one: a temporary file in the same directory, synced, then renamed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_through_temp(path, bytes, true)
}

/// Like `write_atomic` but without `fsync`, for progress and state files that
/// are rewritten every second: on ext4 (data=ordered) each fsync would wait for
/// every dirty block of the filesystem, stalling the copies it reports on.
pub fn write_atomic_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_through_temp(path, bytes, false)
}

fn write_through_temp(path: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    let mut file = temp_file_in(parent_dir(path))?;
    write_all_in_pieces(&mut file, bytes)?;
    if sync {
        file.as_file().sync_all()?;
    }
    file.persist(path).map_err(|err| err.error)?;
    Ok(())
}

/// Writes `bytes` to `path` unless a file is there already, which is then left as
/// it is. For files every writer fills with the same bytes (the layout version, a
/// memo): a file that is never replaced is never swapped under a reader on another
/// node, which GlusterFS answers with ESTALE mid-read. Returns whether this call wrote it.
pub fn write_once(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let mut file = temp_file_in(parent_dir(path))?;
    write_all_in_pieces(&mut file, bytes)?;
    file.as_file().sync_all()?;
    let temp = file.into_temp_path();
    let placed = rename_no_replace(&temp, path)?;
    if placed {
        // Renamed away: nothing is left for the guard to delete.
        temp.keep().map_err(|err| err.error)?;
    }
    Ok(placed)
}

/// A temporary file in `dir`, readable by others once renamed into place: the cache is
/// shared between users, while `tempfile` alone would create it with mode 0600.
pub fn temp_file_in(dir: &Path) -> io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX).permissions(std::fs::Permissions::from_mode(0o666));
    retry_while_settling(|| builder.tempfile_in(dir)).map_err(|err| {
        let err = io::Error::new(err.kind(), format!("creating a temporary file in {}: {err}", dir.display()));
        crate::errors::with_owner(err, dir)
    })
}

/// Serializes `value` as pretty JSON and writes it atomically.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Renames `from` to `to` unless `to` exists. Returns `Ok(false)` when `to` exists.
///
/// Uses `renameat2(RENAME_NOREPLACE)`; where the filesystem does not support it
/// (some NFS servers) falls back to plain `rename`, which for directories still
/// refuses to replace a non-empty target.
pub fn rename_no_replace(from: &Path, to: &Path) -> io::Result<bool> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) | Err(rustix::io::Errno::NOTEMPTY) => Ok(false),
        // Plain rename still refuses a non-empty target directory, and entries are never empty.
        Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOSYS) => match std::fs::rename(from, to) {
            Ok(()) => Ok(true),
            Err(err) if is_exists_error(&err) => Ok(false),
            Err(err) => Err(err),
        },
        Err(errno) => Err(io::Error::from(errno)),
    }
}

/// Creates `path` only if it does not exist yet, writing `bytes` into it.
/// Returns `Ok(false)` if it existed. `O_EXCL` is atomic on NFSv3+ and Lustre.
pub fn create_exclusive(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    match retry_while_settling(|| std::fs::OpenOptions::new().write(true).create_new(true).open(path)) {
        Ok(mut file) => {
            file.write_all(bytes)?;
            Ok(true)
        }
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(io::Error::new(err.kind(), format!("creating {}: {err}", path.display()))),
    }
}

/// Bytes available to an unprivileged user on the filesystem holding `path`.
pub fn available_bytes(path: &Path) -> io::Result<u64> {
    let stat = rustix::fs::statvfs(path).map_err(io::Error::from)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Raises this process's soft limit on open files to its hard limit: a shuffled
/// view reads every input shard's token file, all open at once. Where it cannot,
/// nothing changes (an open that then fails says "too many open files" and names
/// the file).
pub fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
    }
}

/// Starts the kernel's writeback of `len` bytes of `file` from `offset`, without
/// waiting for it (`sync_file_range(SYNC_FILE_RANGE_WRITE)`; nothing elsewhere than
/// Linux). Only a hint: it reports nothing, and `fsync` is still what makes the
/// bytes durable and reports errors; where the filesystem has no page-cache
/// writeback (FUSE without a writeback cache), it does nothing.
pub fn start_writeback(file: &std::fs::File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else { return };
        // SAFETY: sync_file_range only reads its arguments; `file` keeps the descriptor open.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Replaces (or creates) the symlink `link` so it points at `target`, atomically:
/// a symlink under a temporary name, renamed over the old one.
pub fn replace_symlink(target: &Path, link: &Path) -> io::Result<()> {
    let temp = temp_name_beside(link);
    std::os::unix::fs::symlink(target, &temp)
        .map_err(|err| io::Error::new(err.kind(), format!("creating symlink {}: {err}", temp.display())))?;
    if let Err(err) = fs::rename(&temp, link) {
        let _ = std::fs::remove_file(&temp);
        return Err(err);
    }
    Ok(())
}

/// Sets `path`'s mtime to now (a heartbeat). Never creates the file: a lease or
/// claim that was removed must stay removed.
pub fn touch(path: &Path) -> io::Result<()> {
    fs_err::File::options().write(true).open(path)?.set_modified(std::time::SystemTime::now())
}

/// What `blake3_of_reader` reads and hashes at a time. A block of 1 MiB is hashed
/// while the copy the read made is still in the CPU's caches: 100 MB of JSONL in 4
/// files hashed in 0.051 s (median of 6) on one thread, against 0.068 s in blocks
/// of 8 MiB, and as fast on two; 256 KiB was slower on both.
const HASH_BLOCK: usize = 1 << 20;

/// The blake3 of a file's bytes, read in blocks so memory stays small whatever
/// the file's size (a memory map would count the whole file in the process's
/// resident size); each block is hashed on every core.
pub fn blake3_of_file(path: &Path) -> io::Result<blake3::Hash> {
    // std, not fs_err: callers name the path in their own errors.
    blake3_of_reader(std::fs::File::open(path)?)
}

/// The blake3 of everything `file` reads, in blocks (see `blake3_of_file`).
pub fn blake3_of_reader(mut file: impl io::Read) -> io::Result<blake3::Hash> {
    use std::io::Read;
    let mut hasher = blake3::Hasher::new();
    let mut block = Vec::with_capacity(HASH_BLOCK);
    loop {
        block.clear();
        (&mut file).take(HASH_BLOCK as u64).read_to_end(&mut block)?;
        hasher.update_rayon(&block);
        if block.len() < HASH_BLOCK {
            return Ok(hasher.finalize());
        }
    }
}

/// Creates `dir` and its parents. When its mkdir loses a race on a network
/// filesystem, std's `create_dir_all` can answer "File exists" while the winner's
/// directory is not yet visible to its stat (seen on GlusterFS, six nodes
/// creating one cache): that case is settling too, and is retried as such.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    retry_while_settling(|| match fs::create_dir_all(dir) {
        Err(exists) if exists.kind() == io::ErrorKind::AlreadyExists => match fs::metadata(dir) {
            Ok(found) if found.is_dir() => Ok(()),
            Ok(_) => Err(exists),
            Err(unseen) => Err(unseen),
        },
        result => result,
    })
}

/// Runs `op` again while it fails with ESTALE or not-found, for a few seconds.
/// When processes on several nodes create the same directory at once, a client
/// whose mkdir lost the race can answer either for the next operations in that
/// directory (seen on GlusterFS, as NFS can). Not-found clears within milliseconds;
/// ESTALE lasts as long as the client caches the name (GlusterFS: one second by
/// default), and is never an answer ferry expects. Only for steps that create what
/// they then use.
pub fn retry_while_settling<T>(op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    use std::time::Duration;
    retry_while(
        |err| match err.kind() {
            io::ErrorKind::NotFound => Some(Duration::from_millis(300)),
            io::ErrorKind::StaleNetworkFileHandle => Some(Duration::from_secs(5)),
            _ => None,
        },
        op,
    )
}

/// Runs `op` again, after pauses that double, while its error is one that
/// `settling` gives a time to clear in and that time has not passed since the
/// first try. The bound is time, not tries, so a retried step that itself
/// retries adds at most one try per level.
pub fn retry_while<T>(
    settling: impl Fn(&io::Error) -> Option<std::time::Duration>,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    use std::time::{Duration, Instant};
    let started = Instant::now();
    let mut delay = Duration::from_millis(10);
    loop {
        match op() {
            Err(err) if settling(&err).is_some_and(|within| started.elapsed() < within) => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(500));
            }
            result => return result,
        }
    }
}

/// The host name, as Slurm and `hostname` report it.
pub fn host_name() -> String {
    whoami().host.clone()
}

/// Who this process is, as the files it leaves in a shared cache (leases, claims,
/// progress and state files, records) say: host, pid and Slurm job.
#[derive(Debug, Clone)]
pub struct Whoami {
    pub host: String,
    pub pid: u32,
    /// `SLURM_JOB_ID`, read here and nowhere else.
    pub job_id: Option<String>,
}

/// This process, looked up once.
pub fn whoami() -> &'static Whoami {
    static WHOAMI: std::sync::OnceLock<Whoami> = std::sync::OnceLock::new();
    WHOAMI.get_or_init(|| Whoami {
        host: rustix::system::uname().nodename().to_string_lossy().into_owned(),
        pid: std::process::id(),
        job_id: std::env::var("SLURM_JOB_ID").ok(),
    })
}

/// Now, in seconds since the epoch (0 before it, on a clock gone wrong).
pub fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Whether a process with this pid exists on this host.
pub fn process_alive(pid: u32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        // The process exists but belongs to someone else.
        Err(rustix::io::Errno::PERM) => true,
        Err(_) => false,
    }
}

/// A suffix that differs between calls in one process.
pub fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    (COUNTER.fetch_add(1, Ordering::Relaxed) << 32) ^ nanos
}

fn is_exists_error(err: &io::Error) -> bool {
    let code = err.raw_os_error();
    code == Some(rustix::io::Errno::EXIST.raw_os_error()) || code == Some(rustix::io::Errno::NOTEMPTY.raw_os_error())
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_hash_read_in_blocks_is_the_hash_of_the_whole_at_every_block_boundary() {
        let bytes: Vec<u8> = (0..2 * HASH_BLOCK + 12_345).map(|at| (at * 31 % 251) as u8).collect();
        for len in [0, 1, HASH_BLOCK - 1, HASH_BLOCK, HASH_BLOCK + 1, 2 * HASH_BLOCK, bytes.len()] {
            let hashed = blake3_of_reader(std::io::Cursor::new(&bytes[..len])).unwrap();
            assert_eq!(hashed, blake3::hash(&bytes[..len]), "{len} bytes");
        }
    }

    #[test]
    fn write_atomic_replaces_whole_file_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.json")]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o044, 0o044, "others can read a published file");
    }

    #[test]
    fn write_once_keeps_the_first_file_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("layout-version");
        assert!(write_once(&path, b"first").unwrap());
        let inode = std::fs::metadata(&path).unwrap().ino();
        assert!(!write_once(&path, b"second").unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "the file was never replaced");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("layout-version")]);
    }

    #[test]
    fn create_dir_all_accepts_a_directory_there_and_refuses_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        create_dir_all(&nested).unwrap();
        create_dir_all(&nested).unwrap();
        assert!(nested.is_dir());
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(create_dir_all(&file).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn retry_while_settling_rides_out_estale_and_returns_other_errors_at_once() {
        let mut calls = 0;
        let stale = io::Error::from_raw_os_error(rustix::io::Errno::STALE.raw_os_error());
        let result = retry_while_settling(|| {
            calls += 1;
            if calls < 3 { Err(io::Error::new(stale.kind(), "stale")) } else { Ok(calls) }
        });
        assert_eq!(result.unwrap(), 3);

        let mut calls = 0;
        let result: io::Result<()> = retry_while_settling(|| {
            calls += 1;
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        });
        assert_eq!((result.unwrap_err().kind(), calls), (io::ErrorKind::PermissionDenied, 1));

        let mut calls = 0;
        let result: io::Result<()> = retry_while_settling(|| {
            calls += 1;
            Err(io::Error::from(io::ErrorKind::NotFound))
        });
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::NotFound, "a missing path is reported in the end");
        assert!(calls > 1, "not-found is tried again while it may be settling");
    }

    #[test]
    fn rename_no_replace_refuses_existing_target() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(b.join("x"), b"x").unwrap();
        assert!(!rename_no_replace(&a, &b).unwrap());
        assert!(rename_no_replace(&a, &c).unwrap());
        assert!(c.is_dir() && !a.exists());
    }

    #[test]
    fn create_exclusive_wins_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease");
        assert!(create_exclusive(&path, b"1").unwrap());
        assert!(!create_exclusive(&path, b"2").unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"1");
    }

    #[test]
    fn this_process_is_alive() {
        assert!(process_alive(std::process::id()));
    }
}
