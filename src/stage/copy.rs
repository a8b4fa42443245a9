//! The copy engine: many files in flight (small files are bound by I/O latency,
//! not CPU), largest first, big files split into chunks copied concurrently with
//! `copy_file_range` (a read/write loop where the kernel refuses). Each file
//! becomes visible only complete (see `landing`): a reader sees the old symlink
//! or the whole file, never a part.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::landing::Landing;
use crate::errors::{Failure, Fault, IoError};
use crate::fsutil;
use crate::fsutil::untrusted::Dir;

/// Files above this size are split into chunks of this size.
const CHUNK_BYTES: u64 = 64 << 20;
/// The read/write loop's buffer, and so the most each of its writes hands the
/// kernel: one piece (see `fsutil::WRITE_PIECE_BYTES`).
const BUFFER_BYTES: usize = fsutil::WRITE_PIECE_BYTES;

/// Where a copy reads from: a file below a directory opened without following
/// symlinks (a cache entry others may write), opened only if regular.
#[derive(Debug, Clone)]
pub struct Source {
    pub dir: Arc<Dir>,
    pub relative: String,
    /// Where the bytes begin when `relative` packs several files (a broadcast's
    /// pack); `None` for a file of its own, whose size must match exactly.
    pub packed_at: Option<u64>,
}

impl Source {
    /// A file of its own.
    pub fn whole(dir: Arc<Dir>, relative: impl Into<String>) -> Source {
        Source { dir, relative: relative.into(), packed_at: None }
    }

    /// Where the copied bytes begin in the opened file.
    fn start(&self) -> u64 {
        self.packed_at.unwrap_or(0)
    }

    fn open(&self) -> io::Result<File> {
        self.dir.open_file(&self.relative)
    }

    pub fn path(&self) -> PathBuf {
        self.dir.display_path(&self.relative)
    }
}

#[derive(Debug, Clone)]
pub struct CopyJob {
    pub source: Source,
    pub dest: PathBuf,
    pub size: u64,
    /// Expected blake3 (hex), checked while copying with `verify`.
    pub blake3: Option<String>,
}

#[derive(Debug, Default)]
pub struct CopyCounters {
    pub files_done: AtomicU64,
    pub bytes_done: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(
        "{path}: copied {found} bytes, the manifest says {expected}; the cache copy may be damaged: run `ferry verify`"
    )]
    Size { path: PathBuf, expected: u64, found: u64 },
    #[error(
        "{path}: blake3 {found} differs from the manifest's {expected}; the cache copy is damaged: run `ferry verify` and re-prepare"
    )]
    Hash { path: PathBuf, expected: String, found: String },
}

fn source_error<'a>(doing: &'static str, job: &'a CopyJob) -> impl FnOnce(io::Error) -> IoError + 'a {
    move |source| IoError { doing, path: job.source.path(), source }
}

/// A unit of work: a whole file, or one chunk of a big file.
enum Unit {
    Whole { job: usize },
    Chunk { job: usize, offset: u64, len: u64 },
}

/// A big file being assembled from chunks.
struct Chunked {
    landing: Landing,
    chunks_left: AtomicUsize,
    failed: AtomicBool,
}

/// Copies every job with `in_flight` copies at a time; returns the failures, each
/// with its job's index (the other files are still copied).
pub fn copy_all(jobs: &[CopyJob], in_flight: usize, verify: bool, counters: &CopyCounters) -> Vec<(usize, CopyError)> {
    let failures = Mutex::new(Vec::new());
    let fail = |job: usize, err: CopyError| failures.lock().unwrap_or_else(|e| e.into_inner()).push((job, err));

    // Largest first, so the long copies start early and the tail is short; files of
    // one size in hashed order, so concurrent copies land in different directories
    // instead of queueing on one directory's lock.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    let spread = |index: usize| blake3::hash(jobs[index].dest.as_os_str().as_encoded_bytes()).as_bytes()[..8].to_vec();
    order.sort_by_cached_key(|&index| (std::cmp::Reverse(jobs[index].size), spread(index)));
    let mut chunked: Vec<Option<Chunked>> = (0..jobs.len()).map(|_| None).collect();
    let mut units = Vec::new();
    for index in order {
        let job = &jobs[index];
        // With verify, a file is hashed in order while copied, so it is not split.
        if verify || job.size <= CHUNK_BYTES {
            units.push(Unit::Whole { job: index });
            continue;
        }
        match prepare_chunked(job) {
            Ok(state) => {
                let count = job.size.div_ceil(CHUNK_BYTES);
                state.chunks_left.store(count as usize, Ordering::Relaxed);
                chunked[index] = Some(state);
                for chunk in 0..count {
                    let offset = chunk * CHUNK_BYTES;
                    units.push(Unit::Chunk { job: index, offset, len: CHUNK_BYTES.min(job.size - offset) });
                }
            }
            Err(err) => fail(index, err),
        }
    }

    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..in_flight.max(1).min(units.len().max(1)) {
            scope.spawn(|| {
                while let Some(unit) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
                    match *unit {
                        Unit::Whole { job } => match copy_whole(&jobs[job], verify, counters) {
                            Ok(()) => {
                                counters.files_done.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(err) => fail(job, err),
                        },
                        Unit::Chunk { job, offset, len } => {
                            let state = chunked[job].as_ref().expect("chunked jobs have state");
                            if let Err(err) = copy_chunk(&jobs[job], state, offset, len, counters) {
                                state.failed.store(true, Ordering::Relaxed);
                                fail(job, err);
                            }
                            if state.chunks_left.fetch_sub(1, Ordering::AcqRel) == 1 {
                                match finish_chunked(&jobs[job], state) {
                                    Ok(()) => {
                                        counters.files_done.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(Some(err)) => fail(job, err),
                                    Err(None) => {}
                                }
                            }
                        }
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// Opens a source and checks its size against the plan's before any byte is copied
/// (a pack must hold the whole file at its place).
fn open_source(job: &CopyJob) -> Result<File, CopyError> {
    let source = job.source.open().map_err(source_error("opening", job))?;
    let found = source.metadata().map_err(source_error("checking", job))?.len();
    let fits = match job.source.packed_at {
        None => found == job.size,
        Some(start) => start.checked_add(job.size).is_some_and(|end| end <= found),
    };
    if !fits {
        return Err(CopyError::Size { path: job.source.path(), expected: job.size, found });
    }
    Ok(source)
}

fn copy_whole(job: &CopyJob, verify: bool, counters: &CopyCounters) -> Result<(), CopyError> {
    let mut source = open_source(job)?;
    let mut landing = Landing::create(&job.dest).map_err(IoError::at("creating", &job.dest))?;
    let result = if verify {
        copy_hashing(&mut source, &mut landing.file, job, counters)
    } else {
        copy_range(&source, &landing.file, 0, job.size, job, counters)
    };
    drop_cached(&source, job.source.start(), job.size);
    match result {
        Ok(()) => Ok(landing.land(&job.dest).map_err(IoError::at("landing", &job.dest))?),
        Err(err) => {
            landing.discard();
            Err(err)
        }
    }
}

/// Drops a copied range of the shared copy from this node's page cache: the
/// trainer reads the local copy, so those pages are dead weight, and freeing them
/// now hands warm memory to the next copies (and leaves it to the trainer) rather
/// than leaving it to reclaim. Only advice: where it is ignored, nothing changes.
fn drop_cached(source: &File, offset: u64, len: u64) {
    // A length of 0 would mean "to the end of the file": a pack's other files.
    let Some(len) = std::num::NonZeroU64::new(len) else { return };
    let _ = rustix::fs::fadvise(source, offset, Some(len), rustix::fs::Advice::DontNeed);
}

thread_local! {
    /// One copy buffer per worker, for the read/write paths (a network filesystem
    /// to a local disk is the common case, and `copy_file_range` refuses it).
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn with_buffer<T>(work: impl FnOnce(&mut [u8]) -> T) -> T {
    BUFFER.with_borrow_mut(|buffer| {
        buffer.resize(BUFFER_BYTES, 0);
        work(buffer)
    })
}

/// Copies through a buffer, hashing on the way: verification without a second read.
fn copy_hashing(source: &mut File, dest: &mut File, job: &CopyJob, counters: &CopyCounters) -> Result<(), CopyError> {
    let mut hasher = blake3::Hasher::new();
    let mut copied = 0u64;
    let mut source = Read::take(&*source, job.size);
    if job.source.start() > 0 {
        io::Seek::seek(source.get_mut(), io::SeekFrom::Start(job.source.start()))
            .map_err(source_error("reading", job))?;
    }
    with_buffer(|buffer| {
        loop {
            let n = source.read(buffer).map_err(source_error("reading", job))?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            dest.write_all(&buffer[..n]).map_err(IoError::at("writing", &job.dest))?;
            copied += n as u64;
            counters.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok::<(), CopyError>(())
    })?;
    if copied != job.size {
        return Err(CopyError::Size { path: job.source.path(), expected: job.size, found: copied });
    }
    let found = hasher.finalize().to_hex().to_string();
    match &job.blake3 {
        Some(expected) if *expected != found => {
            Err(CopyError::Hash { path: job.source.path(), expected: expected.clone(), found })
        }
        _ => Ok(()),
    }
}

fn prepare_chunked(job: &CopyJob) -> Result<Chunked, CopyError> {
    drop(open_source(job)?);
    let landing = Landing::create(&job.dest).map_err(IoError::at("creating", &job.dest))?;
    if let Err(err) = landing.file.set_len(job.size) {
        landing.discard();
        return Err(IoError { doing: "sizing", path: job.dest.clone(), source: err }.into());
    }
    Ok(Chunked { landing, chunks_left: AtomicUsize::new(0), failed: Default::default() })
}

fn copy_chunk(job: &CopyJob, state: &Chunked, offset: u64, len: u64, counters: &CopyCounters) -> Result<(), CopyError> {
    let source = job.source.open().map_err(source_error("opening", job))?;
    copy_range(&source, &state.landing.file, offset, offset + len, job, counters)?;
    drop_cached(&source, job.source.start() + offset, len);
    Ok(())
}

/// Whether `copy_file_range` worked for this pair of filesystems; after the first
/// refusal every copy goes straight to the read/write loop.
static IN_KERNEL_COPY: AtomicBool = AtomicBool::new(true);

/// Copies bytes `offset..end` of the file (its source's start added when packed)
/// to the same place in `dest`, in the kernel where it allows, else through a buffer.
fn copy_range(
    source: &File,
    dest: &File,
    offset: u64,
    end: u64,
    job: &CopyJob,
    counters: &CopyCounters,
) -> Result<(), CopyError> {
    let start = job.source.start();
    let (mut source_offset, mut dest_offset) = (start + offset, offset);
    while dest_offset < end && IN_KERNEL_COPY.load(Ordering::Relaxed) {
        let want = (end - dest_offset) as usize;
        match rustix::fs::copy_file_range(source, Some(&mut source_offset), dest, Some(&mut dest_offset), want) {
            Ok(0) => {
                return Err(CopyError::Size { path: job.source.path(), expected: job.size, found: dest_offset });
            }
            Ok(n) => {
                counters.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(
                rustix::io::Errno::XDEV
                | rustix::io::Errno::NOSYS
                | rustix::io::Errno::OPNOTSUPP
                | rustix::io::Errno::INVAL,
            ) => IN_KERNEL_COPY.store(false, Ordering::Relaxed),
            Err(errno) => {
                return Err(IoError { doing: "copying", path: job.source.path(), source: errno.into() }.into());
            }
        }
    }
    if dest_offset < end {
        copy_range_by_buffer(source, dest, dest_offset, end, job, counters)?;
    }
    Ok(())
}

fn copy_range_by_buffer(
    source: &File,
    dest: &File,
    mut offset: u64,
    end: u64,
    job: &CopyJob,
    counters: &CopyCounters,
) -> Result<(), CopyError> {
    let start = job.source.start();
    with_buffer(|buffer| {
        while offset < end {
            let want = buffer.len().min((end - offset) as usize);
            let n = source.read_at(&mut buffer[..want], start + offset).map_err(source_error("reading", job))?;
            if n == 0 {
                return Err(CopyError::Size { path: job.source.path(), expected: job.size, found: offset });
            }
            dest.write_all_at(&buffer[..n], offset).map_err(IoError::at("writing", &job.dest))?;
            counters.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
            offset += n as u64;
        }
        Ok(())
    })
}

/// Lands a chunked file once its last chunk is done; `Err(None)` when a chunk
/// already reported its failure.
fn finish_chunked(job: &CopyJob, state: &Chunked) -> Result<(), Option<CopyError>> {
    if state.failed.load(Ordering::Relaxed) {
        state.landing.discard();
        return Err(None);
    }
    state
        .landing
        .land(&job.dest)
        .map_err(|source| Some(IoError { doing: "landing", path: job.dest.clone(), source }.into()))
}

impl Failure for CopyError {
    fn fault(&self) -> Fault {
        Fault::Cause
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn job(dir: &Path, name: &str, bytes: &[u8]) -> CopyJob {
        let source = dir.join("src").join(name);
        std::fs::create_dir_all(source.parent().unwrap()).unwrap();
        std::fs::write(&source, bytes).unwrap();
        let dest = dir.join("dest").join(name);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&source, &dest).unwrap();
        let source = Source::whole(Arc::new(Dir::open(&dir.join("src")).unwrap()), name);
        CopyJob { source, dest, size: bytes.len() as u64, blake3: Some(blake3::hash(bytes).to_hex().to_string()) }
    }

    #[test]
    fn copies_replace_symlinks_with_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..(CHUNK_BYTES as usize * 2 + 12345)).map(|i| (i % 251) as u8).collect();
        let jobs =
            vec![job(dir.path(), "small", b"hello"), job(dir.path(), "big", &big), job(dir.path(), "empty", b"")];
        let counters = CopyCounters::default();
        let failures = copy_all(&jobs, 4, false, &counters);
        assert!(failures.is_empty(), "{failures:?}");
        for job in &jobs {
            assert!(job.dest.symlink_metadata().unwrap().file_type().is_file());
            assert_eq!(std::fs::read(&job.dest).unwrap(), std::fs::read(job.source.path()).unwrap());
        }
        assert_eq!(counters.files_done.load(Ordering::Relaxed), 3);
        assert_eq!(counters.bytes_done.load(Ordering::Relaxed), big.len() as u64 + 5);
    }

    /// Bytes of `path` in the page cache, as util-linux's `fincore` reports them.
    fn resident(path: &Path) -> Option<u64> {
        let out = std::process::Command::new("fincore")
            .args(["--bytes", "--noheadings", "--output", "RES"])
            .arg(path)
            .output()
            .ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok().filter(|_| out.status.success())
    }

    #[test]
    fn copied_sources_leave_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = vec![
            job(dir.path(), "whole", &vec![1u8; 1 << 20]),
            job(dir.path(), "chunked", &vec![2u8; CHUNK_BYTES as usize + 4096]),
        ];
        let cache_sources = || {
            for job in &jobs {
                let source = File::open(job.source.path()).unwrap();
                source.sync_all().unwrap();
                io::copy(&mut &source, &mut io::sink()).unwrap();
            }
        };
        // Only where the filesystem caches and honours the advice (tmpfs keeps its
        // pages whatever is advised) and `fincore` is there to tell.
        cache_sources();
        let cached = jobs.iter().all(|job| resident(&job.source.path()).is_some_and(|bytes| bytes > 0));
        let honoured = cached
            && jobs.iter().all(|job| {
                drop_cached(&File::open(job.source.path()).unwrap(), 0, job.size);
                resident(&job.source.path()) == Some(0)
            });
        if !honoured {
            eprintln!("skipped: no fincore here, or this filesystem keeps pages whatever is advised");
            return;
        }
        cache_sources();
        let failures = copy_all(&jobs, 2, false, &CopyCounters::default());
        assert!(failures.is_empty(), "{failures:?}");
        for job in &jobs {
            assert_eq!(resident(&job.source.path()), Some(0), "{} is still cached", job.source.path().display());
            assert_eq!(std::fs::read(&job.dest).unwrap(), std::fs::read(job.source.path()).unwrap());
        }
    }

    #[test]
    fn files_packed_in_one_source_are_copied_from_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..(CHUNK_BYTES as usize + 4097)).map(|i| (i % 253) as u8).collect();
        let mut pack = vec![7u8; 1000];
        pack.extend_from_slice(&big);
        pack.extend_from_slice(b"tail");
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/pack"), &pack).unwrap();
        let source_dir = Arc::new(Dir::open(&dir.path().join("src")).unwrap());
        for verify in [false, true] {
            let dest = dir.path().join(format!("dest-{verify}"));
            std::fs::create_dir_all(&dest).unwrap();
            let packed = |name: &str, at: usize, bytes: &[u8]| CopyJob {
                source: Source { dir: source_dir.clone(), relative: "pack".into(), packed_at: Some(at as u64) },
                dest: dest.join(name),
                size: bytes.len() as u64,
                blake3: Some(blake3::hash(bytes).to_hex().to_string()),
            };
            let jobs = [packed("big", 1000, &big), packed("tail", 1000 + big.len(), b"tail")];
            let failures = copy_all(&jobs, 4, verify, &CopyCounters::default());
            assert!(failures.is_empty(), "{failures:?}");
            assert!(std::fs::read(dest.join("big")).unwrap() == big, "verify: {verify}");
            assert_eq!(std::fs::read(dest.join("tail")).unwrap(), b"tail");
        }
        // A file said to lie past the pack's end is refused before anything lands.
        let past = CopyJob {
            source: Source { dir: source_dir, relative: "pack".into(), packed_at: Some(pack.len() as u64 - 2) },
            dest: dir.path().join("past"),
            size: 4,
            blake3: None,
        };
        let failures = copy_all(&[past], 1, false, &CopyCounters::default());
        assert!(matches!(failures.as_slice(), [(0, CopyError::Size { .. })]), "{failures:?}");
        assert!(!dir.path().join("past").exists());
    }

    #[test]
    fn verify_catches_a_corrupted_source_and_keeps_the_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = job(dir.path(), "bad", b"original bytes");
        bad.blake3 = Some(blake3::hash(b"other bytes").to_hex().to_string());
        let failures = copy_all(&[bad.clone()], 2, true, &CopyCounters::default());
        assert!(matches!(failures.as_slice(), [(0, CopyError::Hash { .. })]), "{failures:?}");
        assert!(bad.dest.symlink_metadata().unwrap().file_type().is_symlink());
        let leftovers: Vec<_> =
            std::fs::read_dir(dir.path().join("dest")).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
    }
}
