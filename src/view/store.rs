//! A token store as a view reads it: its entry opened without following symlinks
//! (others may write a shared cache), and each shard's `.idx` and `.bin` checked
//! against the store's manifest (size and blake3) before a row is made of them.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::cache::layout::{CacheLayout, ENTRIES_DIR};
use crate::cache::manifest::{Manifest, StoreDtype, WrittenFile};
use crate::cache::token_store;
use crate::errors::IoError;
use crate::fsutil::untrusted::Dir;

use super::ViewError;
use super::rows::document_offsets;

/// A published token store, opened; or a published view whose Arrow files another
/// view of the same rows links (`open_view`).
pub struct TokenStore<'a> {
    pub manifest: &'a Manifest,
    pub dtype: StoreDtype,
    dir: Dir,
    files: HashMap<&'a str, &'a WrittenFile>,
    /// A view opened for its files, not a token store: damage is said of it so.
    view: bool,
}

/// One shard's documents, checked: the open `.bin` and where each document starts.
pub struct StoreShard {
    pub file: File,
    pub path: PathBuf,
    /// The `.bin`'s size in bytes.
    pub size: u64,
    pub dtype: StoreDtype,
    /// `documents + 1` offsets in tokens: document `i` is `offsets[i]..offsets[i + 1]`.
    pub offsets: Vec<u64>,
}

impl<'a> TokenStore<'a> {
    pub fn open(cache: &CacheLayout, manifest: &'a Manifest) -> Result<TokenStore<'a>, ViewError> {
        let short = manifest.short_fingerprint();
        let path = cache.entry(short).root().to_path_buf();
        let dir = match Dir::open(cache.root()).and_then(|root| root.open_dir(Path::new(ENTRIES_DIR).join(short))) {
            Ok(dir) => dir,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(ViewError::StoreGone { path }),
            Err(err) => return Err(IoError::at("opening the token store", &path)(err).into()),
        };
        let damaged = |problem: String| ViewError::DamagedStore {
            store: dir.path().to_path_buf(),
            file: "manifest.json".into(),
            problem,
        };
        let dtype = manifest.documents.map(|documents| documents.dtype);
        let dtype = dtype.ok_or_else(|| damaged("records no document layout".into()))?;
        // The type follows the vocabulary: a uint16 view of the store then holds every id.
        let vocab_size = manifest.tokenizer.vocab_size;
        if dtype != StoreDtype::for_vocabulary(vocab_size) {
            return Err(damaged(format!("records ids as {dtype:?} for a vocabulary of {vocab_size}")));
        }
        let files = manifest.files.iter().map(|file| (file.path.as_str(), file)).collect();
        Ok(TokenStore { manifest, dtype, dir, files, view: false })
    }

    /// A published view, opened to link its files into a view of the same rows.
    pub fn open_view(cache: &CacheLayout, manifest: &'a Manifest) -> Result<TokenStore<'a>, ViewError> {
        let short = manifest.short_fingerprint();
        let path = cache.entry(short).root().to_path_buf();
        let dir = Dir::open(cache.root())
            .and_then(|root| root.open_dir(Path::new(ENTRIES_DIR).join(short)))
            .map_err(IoError::at("opening the view", &path))?;
        let files = manifest.files.iter().map(|file| (file.path.as_str(), file)).collect();
        Ok(TokenStore { manifest, dtype: StoreDtype::Int32, dir, files, view: true })
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The split's shards' `.bin` files, in shard order.
    pub fn shard_files(&self, split: &str) -> &'a [String] {
        self.manifest.splits.get(split).map_or(&[], |record| &record.data_files)
    }

    fn damaged(&self, file: &str, problem: String) -> ViewError {
        let (file, problem) = (file.to_string(), problem);
        match self.view {
            true => ViewError::DamagedView { view: self.root().to_path_buf(), file, problem },
            false => ViewError::DamagedStore { store: self.root().to_path_buf(), file, problem },
        }
    }

    fn record(&self, relative: &str) -> Result<&'a WrittenFile, ViewError> {
        self.files.get(relative).copied().ok_or_else(|| self.damaged(relative, "is not in its manifest".into()))
    }

    /// Reads and checks one shard: its index whole, its `.bin` hashed through. A file
    /// that cannot be read is an I/O error (permissions, open files), not damage.
    pub fn load_shard(&self, bin: &str) -> Result<StoreShard, ViewError> {
        let Some(stem) = bin.strip_suffix(".bin") else {
            return Err(self.damaged(bin, "is not a .bin file".into()));
        };
        let idx = format!("{stem}.idx");
        let (bin_record, idx_record) = (self.record(bin)?, self.record(&idx)?);
        let unreadable = |file: &str, err: std::io::Error| self.unreadable(file, err);
        let index = self.dir.read(&idx, idx_record.size).map_err(|err| unreadable(&idx, err))?;
        self.check(&idx, idx_record, index.len() as u64, blake3::hash(&index))?;
        let lengths =
            token_store::read_index(&index, self.dtype, bin_record.size).map_err(|why| self.damaged(&idx, why))?;
        drop(index);
        let file = self.dir.open_file(bin).map_err(|err| unreadable(bin, err))?;
        let size = file.metadata().map_err(|err| unreadable(bin, err))?.len();
        let hash = crate::fsutil::blake3_of_reader(&file).map_err(|err| unreadable(bin, err))?;
        self.check(bin, bin_record, size, hash)?;
        Ok(StoreShard {
            file,
            path: self.dir.display_path(bin),
            size,
            dtype: self.dtype,
            offsets: document_offsets(&lengths),
        })
    }

    /// Puts the store's file `relative` at `target` (a new path in an assembly) and
    /// checks it against the store's manifest. A hard link where the file is this
    /// user's and no one else may write it (then no one can change it under the
    /// entry that links it); a copy otherwise, or where the file system refuses a
    /// link. Returns the store's record of it.
    pub fn place(&self, relative: &str, target: &Path) -> Result<&'a WrittenFile, ViewError> {
        use std::os::unix::fs::MetadataExt;
        let record = self.record(relative)?;
        let file = self.dir.open_file(relative).map_err(|err| self.unreadable(relative, err))?;
        let opened = file.metadata().map_err(|err| self.unreadable(relative, err))?;
        let writing = IoError::at("writing", target);
        let ours = opened.uid() == rustix::process::geteuid().as_raw() && opened.mode() & 0o022 == 0;
        // Linked by path, then checked to be the very file opened without following
        // symlinks: a link to anything else is undone and the file copied instead.
        if ours && std::fs::hard_link(self.dir.display_path(relative), target).is_ok() {
            let linked = std::fs::symlink_metadata(target).map_err(&writing)?;
            if linked.is_file() && (linked.dev(), linked.ino()) == (opened.dev(), opened.ino()) {
                let hash = crate::fsutil::blake3_of_reader(&file).map_err(|err| self.unreadable(relative, err))?;
                self.check(relative, record, opened.len(), hash)?;
                return Ok(record);
            }
            std::fs::remove_file(target).map_err(&writing)?;
        }
        self.copy_checked(relative, &file, record, target)?;
        Ok(record)
    }

    /// Copies the open store file to `target`, hashing what it read.
    fn copy_checked(&self, relative: &str, file: &File, record: &WrittenFile, target: &Path) -> Result<(), ViewError> {
        use std::io::{Read, Write};
        let writing = IoError::at("writing", target);
        let mut copy = std::fs::File::create_new(target).map_err(&writing)?;
        let (mut hasher, mut size, mut block) = (blake3::Hasher::new(), 0u64, vec![0u8; 1 << 20]);
        loop {
            let read = (&*file).read(&mut block).map_err(|err| self.unreadable(relative, err))?;
            if read == 0 {
                break;
            }
            hasher.update(&block[..read]);
            copy.write_all(&block[..read]).map_err(&writing)?;
            size += read as u64;
        }
        copy.sync_all().map_err(&writing)?;
        self.check(relative, record, size, hasher.finalize())
    }

    /// A small file of the store, read whole (at most `max_bytes`) and checked.
    pub fn read_checked(&self, relative: &str, max_bytes: u64) -> Result<Vec<u8>, ViewError> {
        let record = self.record(relative)?;
        let bytes =
            self.dir.read(relative, max_bytes.min(record.size)).map_err(|err| self.unreadable(relative, err))?;
        self.check(relative, record, bytes.len() as u64, blake3::hash(&bytes))?;
        Ok(bytes)
    }

    /// A store file that cannot be read: missing, or not the regular file of the size
    /// its manifest says, is damage; anything else (permissions, too many open files,
    /// an I/O error) is said as it is.
    fn unreadable(&self, file: &str, err: std::io::Error) -> ViewError {
        match err.kind() {
            std::io::ErrorKind::NotFound => self.damaged(file, "is missing".into()),
            std::io::ErrorKind::InvalidData => self.damaged(file, err.to_string()),
            _ => IoError::at("reading", &self.dir.display_path(file))(err).into(),
        }
    }

    fn check(&self, file: &str, record: &WrittenFile, size: u64, hash: blake3::Hash) -> Result<(), ViewError> {
        if size != record.size {
            return Err(self.damaged(file, format!("has {size} bytes, its manifest says {}", record.size)));
        }
        if hash.to_hex().as_str() != record.blake3 {
            return Err(
                self.damaged(file, format!("has blake3 {}, its manifest says {}", hash.to_hex(), record.blake3))
            );
        }
        Ok(())
    }
}
