//! Trees that other users may write: a shared cache, and anything a request names.
//!
//! Anyone with write access to a shared cache can put a symlink, a FIFO, a huge
//! file or a path with `..` where ferry expects its own files. So below a root the
//! user chose, nothing is taken on trust:
//! - paths and names read from files are plain relative components (`check_relative`,
//!   `check_name`), never `..`, `.`, empty or absolute;
//! - directories are opened with no symlink followed anywhere below the root
//!   (`openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)`, or one `O_NOFOLLOW` component at a
//!   time where the kernel lacks it), and changed only through their descriptors, so a
//!   symlink swapped in mid-way is never followed to delete or write elsewhere;
//! - files are read only if regular and at most a bounded size, opened with
//!   `O_NOFOLLOW | O_NONBLOCK` (a FIFO never blocks the reader).
//!
//! The root itself may be reached through symlinks: `$SCRATCH` often is one.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

/// Checks a relative path read from a file others may write (a manifest's file list):
/// `/`-separated plain components, none empty, `.` or `..`, no NUL.
pub fn check_relative(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("an empty path".into());
    }
    if path.starts_with('/') {
        return Err(format!("{path:?} is absolute; only paths inside the entry are allowed"));
    }
    path.split('/').try_for_each(|component| check_name(component).map_err(|why| format!("{path:?}: {why}")))
}

/// Checks one file name read from a file others may write (an entry's name, a split):
/// not empty, `.` or `..`, no `/`, no NUL, no control character.
pub fn check_name(name: &str) -> Result<(), String> {
    match name {
        "" => Err("an empty name".into()),
        "." | ".." => Err(format!("{name:?} is not a plain name")),
        _ if name.contains('/') => Err(format!("{name:?} contains '/'")),
        _ if name.chars().any(char::is_control) => Err(format!("{name:?} contains a control character")),
        _ => Ok(()),
    }
}

/// Reads a regular file of at most `max_bytes`, not following a symlink at `path`
/// and never blocking on a FIFO. For files in a directory others may write.
pub fn read_regular(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let fd = rustix::fs::open(path, read_flags(), Mode::empty()).map_err(|errno| described(errno, None))?;
    read_bounded(fd, None, max_bytes)
}

fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY
}

fn read_bounded(fd: OwnedFd, path: Option<&Path>, max_bytes: u64) -> io::Result<Vec<u8>> {
    let stat = rustix::fs::fstat(&fd)?;
    check_regular(&stat, path)?;
    if stat.st_size as u64 > max_bytes {
        return Err(too_large(path, max_bytes));
    }
    let mut bytes = Vec::with_capacity(stat.st_size as usize);
    // The file may grow after the fstat: read one byte past the bound to notice.
    File::from(fd).take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(path, max_bytes));
    }
    Ok(bytes)
}

fn check_regular(stat: &Stat, path: Option<&Path>) -> io::Result<()> {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(()),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}a {} where a regular file was expected; remove it", prefix(path), kind_name(other)),
        )),
    }
}

fn too_large(path: Option<&Path>, max_bytes: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}larger than {}, more than such a file ever holds", prefix(path), bytesize::ByteSize(max_bytes)),
    )
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

/// `"<path>: "`, or nothing where the caller names the path itself.
fn prefix(path: Option<&Path>) -> String {
    path.map(|path| format!("{}: ", path.display())).unwrap_or_default()
}

/// An `io::Error` for `errno`, saying what a refused symlink means. `path` is
/// named where the caller knows only a name relative to a directory; a caller
/// that gave the whole path names it in its own error.
fn described(errno: Errno, path: Option<&Path>) -> io::Error {
    let error = io::Error::from(errno);
    let message = match errno {
        // O_NOFOLLOW and RESOLVE_NO_SYMLINKS answer ELOOP on a symlink.
        Errno::LOOP => format!(
            "{}a symbolic link stands on the way, and ferry follows none inside a cache or destination \
             (whoever can write there could point it anywhere); remove the link",
            prefix(path)
        ),
        Errno::NOTDIR => format!("{}not a directory where one was expected", prefix(path)),
        _ if path.is_none() => return error,
        _ => format!("{}{error}", prefix(path)),
    };
    io::Error::new(error.kind(), message)
}

/// Removes `relative` below `root` and everything in it, following no symlink on
/// the way or inside. Nothing there is no error.
pub fn remove_tree_below(root: &Path, relative: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (relative.parent(), relative.file_name().and_then(OsStr::to_str)) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: nothing to remove", relative.display())));
    };
    let root = Dir::open(root)?;
    let dir = if parent.as_os_str().is_empty() { Some(root) } else { root.open_dir_if_exists(parent)? };
    dir.map_or(Ok(()), |dir| dir.remove_tree(name))
}

/// Opening a symlink with `O_DIRECTORY | O_NOFOLLOW` answers ENOTDIR: say ELOOP
/// when a symlink stands there, so the message names the real cause.
fn symlink_refused(errno: Errno, path: &Path) -> Errno {
    let is_link = || std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink());
    if errno == Errno::NOTDIR && is_link() { Errno::LOOP } else { errno }
}

/// Whether the kernel has `openat2`; after the first refusal, paths are resolved
/// one component at a time.
static HAVE_OPENAT2: AtomicBool = AtomicBool::new(true);

/// A directory opened once, below which no symlink is followed. Every change goes
/// through its descriptor, so replacing one of its parents with a symlink later
/// changes nothing.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// One name in a directory listing and what it is (never what a symlink points at).
#[derive(Debug, Clone)]
pub struct DirItem {
    pub name: String,
    pub kind: FileType,
}

impl DirItem {
    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }
}

impl Dir {
    /// Opens a directory the user named; symlinks on the way to it are followed.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|errno| described(errno, None))?;
        Ok(Dir { fd, path: path.to_path_buf() })
    }

    /// The path it was opened by, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `relative` below this directory, for messages.
    pub fn display_path(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.path.join(relative)
    }

    /// Opens the directory `relative` below this one; no component may be a symlink.
    pub fn open_dir(&self, relative: impl AsRef<Path>) -> io::Result<Dir> {
        let relative = relative.as_ref();
        let fd = self.resolve(relative, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Dir { fd, path: self.path.join(relative) })
    }

    /// Like `open_dir`, but a missing directory is `None`.
    pub fn open_dir_if_exists(&self, relative: impl AsRef<Path>) -> io::Result<Option<Dir>> {
        match self.open_dir(relative) {
            Ok(dir) => Ok(Some(dir)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Opens the directory `name` here, creating it first if missing (mode 0777 less the umask).
    pub fn create_dir(&self, name: &str) -> io::Result<Dir> {
        match rustix::fs::mkdirat(&self.fd, name, Mode::from(0o777)) {
            Ok(()) | Err(Errno::EXIST) => self.open_dir(name),
            Err(errno) => Err(described(errno, Some(&self.display_path(name)))),
        }
    }

    /// Opens the regular file `relative` below this directory for reading.
    pub fn open_file(&self, relative: impl AsRef<Path>) -> io::Result<File> {
        let relative = relative.as_ref();
        let fd = self.resolve(relative, read_flags(), Mode::empty())?;
        check_regular(&rustix::fs::fstat(&fd)?, Some(&self.display_path(relative)))?;
        Ok(File::from(fd))
    }

    /// Reads the regular file `relative` below this directory, at most `max_bytes` of it.
    pub fn read(&self, relative: impl AsRef<Path>, max_bytes: u64) -> io::Result<Vec<u8>> {
        let relative = relative.as_ref();
        let fd = self.resolve(relative, read_flags(), Mode::empty())?;
        read_bounded(fd, Some(&self.display_path(relative)), max_bytes)
    }

    /// What `name` here is, without following it.
    pub fn stat(&self, name: impl AsRef<Path>) -> io::Result<Stat> {
        let name = name.as_ref();
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|errno| described(errno, Some(&self.display_path(name))))
    }

    /// The names in this directory (not `.` and `..`), with their types.
    pub fn list(&self) -> io::Result<Vec<DirItem>> {
        let listing = rustix::fs::Dir::read_from(&self.fd).map_err(|errno| described(errno, Some(&self.path)))?;
        let mut items = Vec::new();
        for entry in listing {
            let entry = entry.map_err(|errno| described(errno, Some(&self.path)))?;
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let name = String::from_utf8_lossy(bytes).into_owned();
            let kind = match entry.file_type() {
                // Some filesystems leave the type to a stat.
                FileType::Unknown => match self.stat(OsStr::from_bytes(bytes)) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    Err(_) => continue,
                },
                kind => kind,
            };
            items.push(DirItem { name, kind });
        }
        Ok(items)
    }

    /// Creates the file `name` here holding `bytes`, unless something (a symlink
    /// included) stands there: then `Ok(false)`. Mode 0666 less the umask.
    pub fn create_new(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        use std::io::Write;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.fd, name, flags, Mode::from(0o666)) {
            Ok(fd) => {
                File::from(fd).write_all(bytes).map_err(|err| {
                    io::Error::new(err.kind(), format!("writing {}: {err}", self.display_path(name).display()))
                })?;
                Ok(true)
            }
            Err(Errno::EXIST) => Ok(false),
            Err(errno) => Err(described(errno, Some(&self.display_path(name)))),
        }
    }

    /// Sets the mtime of `name` here to now (a heartbeat, a last use), creating an
    /// empty file if `create` and it is missing. A symlink there is refused, not followed.
    pub fn touch(&self, name: &str, create: bool) -> io::Result<()> {
        use rustix::fs::{Timespec, Timestamps, UTIME_NOW};
        if create {
            // O_NONBLOCK: a FIFO put there answers at once instead of waiting for a reader.
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            rustix::fs::openat(&self.fd, name, flags, Mode::from(0o666))
                .map_err(|errno| described(errno, Some(&self.display_path(name))))?;
        }
        let now = Timespec { tv_sec: 0, tv_nsec: UTIME_NOW };
        rustix::fs::utimensat(
            &self.fd,
            name,
            &Timestamps { last_access: now, last_modification: now },
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|errno| described(errno, Some(&self.display_path(name))))
    }

    /// Removes the file or symlink `name` here (a symlink itself, never its target).
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
            .map_err(|errno| described(errno, Some(&self.display_path(name))))
    }

    /// Where the symlink `name` here points.
    pub fn read_link(&self, name: &str) -> io::Result<PathBuf> {
        let target = rustix::fs::readlinkat(&self.fd, name, Vec::new())
            .map_err(|errno| described(errno, Some(&self.display_path(name))))?;
        Ok(PathBuf::from(std::ffi::OsString::from_vec(target.into_bytes())))
    }

    /// Makes `name` here a symlink to `target`, atomically: a link under a temporary
    /// name, renamed over whatever stood there.
    pub fn replace_symlink(&self, name: &str, target: &Path) -> io::Result<()> {
        let temp = format!("{}{name}.{}.{}", super::TEMP_PREFIX, super::whoami().pid, super::unique_suffix());
        rustix::fs::symlinkat(target, &self.fd, temp.as_str())
            .map_err(|errno| described(errno, Some(&self.display_path(&temp))))?;
        rustix::fs::renameat(&self.fd, temp.as_str(), &self.fd, name).map_err(|errno| {
            let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
            described(errno, Some(&self.display_path(name)))
        })
    }

    /// Removes the directory `name` here if it is empty (a symlink is refused).
    pub fn remove_empty_dir(&self, name: &str) -> io::Result<()> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)
            .map_err(|errno| described(errno, Some(&self.display_path(name))))
    }

    /// Removes `name` here and, if it is a directory, everything below it. Symlinks
    /// are removed, never followed.
    pub fn remove_tree(&self, name: &str) -> io::Result<()> {
        self.remove_tree_at_depth(name, 0)
    }

    fn remove_tree_at_depth(&self, name: &str, depth: usize) -> io::Result<()> {
        /// Deeper than any tree ferry writes; a deeper one was made to exhaust the stack.
        const MAX_DEPTH: usize = 64;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => return Ok(()),
            // Linux answers EISDIR for a directory (POSIX allows EPERM).
            Err(Errno::ISDIR | Errno::PERM) => {}
            Err(errno) => return Err(described(errno, Some(&self.display_path(name)))),
        }
        if depth >= MAX_DEPTH {
            return Err(io::Error::other(format!(
                "{}: deeper than {MAX_DEPTH} levels; not removed",
                self.display_path(name).display()
            )));
        }
        let dir = self.open_dir(name)?;
        // On GlusterFS a directory emptied by its whole listing has answered
        // ENOTEMPTY (gc on one node while another built): the listing lagged
        // behind. It is listed and emptied again, for a while, before that is an error.
        let not_empty = |err: &io::Error| {
            (err.raw_os_error() == Some(Errno::NOTEMPTY.raw_os_error()))
                .then_some(std::time::Duration::from_millis(300))
        };
        super::retry_while(not_empty, || {
            for item in dir.list()? {
                dir.remove_tree_at_depth(&item.name, depth + 1)?;
            }
            match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(errno) => Err(described(errno, Some(&self.display_path(name)))),
            }
        })
    }

    /// Renames `name` here to `to_name` in `to` (both may be the same directory),
    /// replacing nothing. Returns `Ok(false)` when `to_name` exists.
    pub fn rename_no_replace(&self, name: &str, to: &Dir, to_name: &str) -> io::Result<bool> {
        use rustix::fs::RenameFlags;
        match rustix::fs::renameat_with(&self.fd, name, &to.fd, to_name, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(true),
            Err(Errno::EXIST | Errno::NOTEMPTY) => Ok(false),
            // Filesystems without RENAME_NOREPLACE: a plain rename still refuses a
            // non-empty directory, and only directories are moved this way.
            Err(Errno::INVAL | Errno::NOSYS) => match rustix::fs::renameat(&self.fd, name, &to.fd, to_name) {
                Ok(()) => Ok(true),
                Err(Errno::EXIST | Errno::NOTEMPTY) => Ok(false),
                Err(errno) => Err(described(errno, Some(&self.display_path(name)))),
            },
            Err(errno) => Err(described(errno, Some(&self.display_path(name)))),
        }
    }

    /// Bytes in regular files at and below `name` here; symlinks count nothing.
    pub fn tree_size(&self, name: &str) -> u64 {
        let Ok(stat) = self.stat(name) else { return 0 };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => stat.st_size as u64,
            FileType::Directory => match self.open_dir(name) {
                Ok(dir) => dir.list().unwrap_or_default().iter().map(|item| dir.tree_size(&item.name)).sum(),
                Err(_) => 0,
            },
            _ => 0,
        }
    }

    /// Opens `relative` with no symlink followed on the way or at its end.
    fn resolve(&self, relative: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let shown = || self.display_path(relative);
        if relative.as_os_str().is_empty()
            || relative.components().any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a plain relative path", shown().display()),
            ));
        }
        if HAVE_OPENAT2.load(Ordering::Relaxed) {
            let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH;
            match rustix::fs::openat2(&self.fd, relative, flags | OFlags::NOFOLLOW, mode, resolve) {
                Ok(fd) => return Ok(fd),
                // Old kernels, and sandboxes whose seccomp filter does not know it.
                Err(Errno::NOSYS | Errno::PERM) => HAVE_OPENAT2.store(false, Ordering::Relaxed),
                // openat2 refuses a racing rename with EAGAIN; the walk below has no such case.
                Err(Errno::AGAIN) => {}
                Err(errno) => return Err(described(symlink_refused(errno, &shown()), Some(&shown()))),
            }
        }
        self.resolve_by_components(relative, flags, mode)
            .map_err(|errno| described(symlink_refused(errno, &shown()), Some(&shown())))
    }

    fn resolve_by_components(&self, relative: &Path, flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
        let components: Vec<&OsStr> = relative.iter().collect();
        let (last, parents) = components.split_last().ok_or(Errno::INVAL)?;
        let mut current: Option<OwnedFd> = None;
        for parent in parents {
            let at = current.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd);
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            current = Some(rustix::fs::openat(at, *parent, flags, Mode::empty())?);
        }
        let at = current.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd);
        rustix::fs::openat(at, *last, flags | OFlags::NOFOLLOW, mode)
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn plain_relative_paths_pass_and_tricks_do_not() {
        for good in ["manifest.json", "train/data-00000-of-00001.arrow", "megatron/train_text_document.bin", "a..b/c"] {
            assert_eq!(check_relative(good), Ok(()), "{good}");
        }
        for bad in
            ["", "/etc/passwd", "a/../b", "..", "a/./b", "./a", "a//b", "a/", "s/../../../home/v/notes", "a\0b", "a\nb"]
        {
            assert!(check_relative(bad).is_err(), "{bad:?} passed");
        }
        assert!(check_name("pile-gpt2-1024").is_ok());
        for bad in ["", ".", "..", "../../..", "a/b", "a\nforged log line"] {
            assert!(check_name(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn reads_refuse_symlinks_fifos_and_oversized_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.json");
        std::fs::write(&file, b"{}").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), b"{}");
        assert!(read_regular(&file, 1).unwrap_err().to_string().contains("larger than"));
        let link = dir.path().join("zero");
        symlink("/dev/zero", &link).unwrap();
        assert!(read_regular(&link, 1 << 20).unwrap_err().to_string().contains("symbolic link"));
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from(0o644), 0).unwrap();
        // Returns at once (O_NONBLOCK) and names what it found.
        assert!(read_regular(&fifo, 1 << 20).unwrap_err().to_string().contains("FIFO"));
    }

    #[test]
    fn a_symlinked_directory_below_the_root_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::create_dir_all(victim.join("sub")).unwrap();
        std::fs::write(victim.join("sub/notes.txt"), b"mine").unwrap();
        let root = dir.path().join("cache");
        std::fs::create_dir(&root).unwrap();
        symlink(&victim, root.join("trash")).unwrap();
        let cache = Dir::open(&root).unwrap();
        let err = cache.open_dir("trash").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(cache.read("trash/sub/notes.txt", 100).is_err());
        // Removing the tree removes the link, not what it points at.
        cache.remove_tree("trash").unwrap();
        assert_eq!(std::fs::read(victim.join("sub/notes.txt")).unwrap(), b"mine");
        assert!(!root.join("trash").exists());
    }

    #[test]
    fn remove_tree_removes_a_tree_and_only_links_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"keep").unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("t/a/b")).unwrap();
        std::fs::write(root.join("t/a/b/f"), b"x").unwrap();
        symlink(&outside, root.join("t/a/link")).unwrap();
        let tree = Dir::open(&root).unwrap();
        assert_eq!(tree.tree_size("t"), 1);
        tree.remove_tree("t").unwrap();
        assert!(!root.join("t").exists());
        assert!(outside.join("keep").exists());
        tree.remove_tree("t").unwrap();
    }

    #[test]
    fn the_component_walk_refuses_what_openat2_refuses() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/f"), b"f").unwrap();
        symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let root = Dir::open(dir.path()).unwrap();
        let flags = read_flags();
        assert!(root.resolve_by_components(Path::new("real/f"), flags, Mode::empty()).is_ok());
        let refused = root.resolve_by_components(Path::new("link/f"), flags, Mode::empty()).unwrap_err();
        // A symlink opened as a directory with O_NOFOLLOW: ENOTDIR, or ELOOP on some kernels.
        assert!(matches!(refused, Errno::NOTDIR | Errno::LOOP), "{refused:?}");
    }
}
