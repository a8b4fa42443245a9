//! The one way a recorded cache file is written: under a temporary name beside
//! its final path, hashed and counted as it is written, synced and renamed into
//! place once complete (the manifest's size and blake3 come from here, so nothing
//! is read back). Dropped unfinished, it leaves nothing. The Arrow parts and the
//! Megatron and flat files are all written through it.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::cache::manifest::WrittenFile;
use crate::errors::IoError;
use crate::fsutil;

pub struct HashedFile {
    path: PathBuf,
    /// Hashing below the buffer: blake3 gets 1 MiB at a time, not each small
    /// write (its SIMD needs long inputs).
    writer: BufWriter<HashingWriter>,
}

impl HashedFile {
    /// Starts the file that will become `path`, creating its directory if needed.
    pub fn create(path: &Path) -> Result<HashedFile, IoError> {
        let error = IoError::at("writing", path);
        let dir = path.parent().unwrap_or(Path::new("."));
        fsutil::create_dir_all(dir).map_err(error)?;
        let temp = fsutil::temp_file_in(dir).map_err(error)?;
        let hashing = HashingWriter { temp, hasher: blake3::Hasher::new(), bytes: 0, written_back: 0 };
        Ok(HashedFile { path: path.to_path_buf(), writer: BufWriter::with_capacity(1 << 20, hashing) })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written so far, buffered ones included.
    pub fn bytes_written(&self) -> u64 {
        self.writer.get_ref().bytes + self.writer.buffer().len() as u64
    }

    pub fn append(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        self.writer.write_all(bytes).map_err(IoError::at("writing", &self.path))
    }

    /// Syncs and renames the file into place; `relative` is the path the record carries.
    pub fn finish(self, relative: String) -> Result<WrittenFile, IoError> {
        let error = IoError::at("writing", &self.path);
        let hashing = self.writer.into_inner().map_err(|err| error(err.into_error()))?;
        hashing.temp.as_file().sync_all().map_err(error)?;
        hashing.temp.persist(&self.path).map_err(|err| error(err.error))?;
        let blake3 = hashing.hasher.finalize().to_hex().to_string();
        Ok(WrittenFile { path: relative, size: hashing.bytes, blake3, rows: 0, tokens: 0 })
    }
}

/// For writers that take an `io::Write` (Arrow's): errors carry no path, the
/// caller names [`HashedFile::path`].
impl Write for HashedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }
}

/// Passes writes through to the temporary file while hashing and counting them.
struct HashingWriter {
    temp: tempfile::NamedTempFile,
    hasher: blake3::Hasher,
    bytes: u64,
    /// Bytes already handed to the kernel's writeback (see `start_writeback`).
    written_back: u64,
}

/// How much written data waits before its writeback is started.
const WRITEBACK_CHUNK: u64 = 8 << 20;

impl HashingWriter {
    /// Starts writing the bytes written since the last call to the device, without
    /// waiting for them. Left to the final fsync, a shard's tens of MB took it 20-40 ms,
    /// during which the shard's pool thread had nothing to encode; started as they
    /// come, that fsync finds most of them written. Only a hint: the fsync is what
    /// reports errors.
    fn start_writeback(&mut self) {
        fsutil::start_writeback(self.temp.as_file(), self.written_back, self.bytes - self.written_back);
        self.written_back = self.bytes;
    }
}

impl Write for HashingWriter {
    /// At most `fsutil::WRITE_PIECE_BYTES` at a time: a write larger than the
    /// buffer above comes here whole.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.temp.write(&buf[..buf.len().min(fsutil::WRITE_PIECE_BYTES)])?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        if self.bytes - self.written_back >= WRITEBACK_CHUNK {
            self.start_writeback();
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.temp.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_file_records_the_hash_and_size_of_what_it_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("part.tokens");
        let mut file = HashedFile::create(&path).unwrap();
        // Small writes that cross the 1 MiB buffer many times, as rows do, and
        // the point where writeback is started more than twice.
        let mut expected = Vec::new();
        for row in 0..20_000u32 {
            let bytes: Vec<u8> = (0..(row % 2000)).map(|i| (i ^ row) as u8).collect();
            file.append(&bytes).unwrap();
            expected.extend_from_slice(&bytes);
        }
        // Writes past the buffer, as an Arrow batch's body is, which reach the
        // file in pieces of at most `WRITE_PIECE_BYTES`.
        for len in [4 * fsutil::WRITE_PIECE_BYTES + 3, fsutil::WRITE_PIECE_BYTES + 1] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            file.append(&bytes).unwrap();
            expected.extend_from_slice(&bytes);
        }
        let written = file.finish("part.tokens".into()).unwrap();
        assert!(expected.len() as u64 > 2 * WRITEBACK_CHUNK + (1 << 20));
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(written.size, expected.len() as u64);
        assert_eq!(written.blake3, blake3::hash(&expected).to_hex().to_string());
    }

    #[test]
    fn a_hashed_file_dropped_unfinished_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = HashedFile::create(&dir.path().join("part.tokens")).unwrap();
        file.append(&[1; 4096]).unwrap();
        drop(file);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
