//! Errors every layer shares: the one error for an I/O operation on a path, and
//! turning an error and its causes into one line, for the places that keep an
//! error as text (stage state files, daemon replies): the same text `main` prints.

use std::error::Error;
use std::io;
use std::path::{Path, PathBuf};

/// An I/O operation that failed on a path: what was being done, where, and the
/// operating system's answer. Modules' errors wrap it instead of each carrying its
/// own pair of path and source.
#[derive(Debug, thiserror::Error)]
#[error("{doing} {}", path.display())]
pub struct IoError {
    pub doing: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// Whose failure an error is, which `main` turns into the exit status. Every
/// error type of ferry says it of itself (`Failure`), so a new type must decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Exit 1: the user can fix it (bad input, a missing path, no space, try again later).
    User,
    /// Exit 2: an internal error.
    Internal,
    /// This error reports a step; its cause decides (an I/O error's kind, say).
    Cause,
}

/// An error type that says whose failure it is.
pub trait Failure {
    fn fault(&self) -> Fault;
}

/// A permission error names whose the path is: on a cache a lab shares, the fix is
/// a word with the owner or a `chmod g+w`, and the bare "Permission denied" says neither.
pub fn with_owner(source: io::Error, path: &Path) -> io::Error {
    if source.kind() != io::ErrorKind::PermissionDenied {
        return source;
    }
    match access_of(path) {
        Some(access) => io::Error::new(source.kind(), format!("{source}; {access}")),
        None => source,
    }
}

/// `PATH is owned by USER:GROUP, mode drwxrwsr-x` for `path` or, when it does not
/// exist, its nearest existing ancestor (where a create was refused).
pub fn access_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let (existing, meta) = path.ancestors().find_map(|p| std::fs::symlink_metadata(p).ok().map(|m| (p, m)))?;
    let user = uzers::get_user_by_uid(meta.uid())
        .map_or_else(|| meta.uid().to_string(), |u| u.name().to_string_lossy().into_owned());
    let group = uzers::get_group_by_gid(meta.gid())
        .map_or_else(|| meta.gid().to_string(), |g| g.name().to_string_lossy().into_owned());
    Some(format!("{} is owned by {user}:{group}, mode {}", existing.display(), mode_text(meta.mode())))
}

/// `ls -l`'s mode column: `drwxrwsr-x`.
fn mode_text(mode: u32) -> String {
    let kind = if mode & 0o170000 == 0o040000 { 'd' } else { '-' };
    let bit = |mask: u32, c: char| if mode & mask != 0 { c } else { '-' };
    let special = |exec: u32, special: u32, set: char| match (mode & exec != 0, mode & special != 0) {
        (true, true) => set,
        (false, true) => set.to_ascii_uppercase(),
        (true, false) => 'x',
        (false, false) => '-',
    };
    [
        kind,
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        special(0o100, 0o4000, 's'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        special(0o010, 0o2000, 's'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        special(0o001, 0o1000, 't'),
    ]
    .iter()
    .collect()
}

/// I/O failures the user can fix: a missing or unusable path, a full or
/// read-only disk, a quota, permissions.
const USER_IO_KINDS: &[io::ErrorKind] = &[
    io::ErrorKind::NotFound,
    io::ErrorKind::NotADirectory,
    io::ErrorKind::IsADirectory,
    io::ErrorKind::PermissionDenied,
    io::ErrorKind::ReadOnlyFilesystem,
    io::ErrorKind::StorageFull,
    io::ErrorKind::QuotaExceeded,
];

impl Failure for io::Error {
    fn fault(&self) -> Fault {
        // ELOOP is a symlink where ferry follows none (in a cache or destination): the
        // user removes it. Its kind, `FilesystemLoop`, cannot be named on stable Rust.
        let symlink_refused = self.kind() == io::Error::from(rustix::io::Errno::LOOP).kind();
        if USER_IO_KINDS.contains(&self.kind()) || symlink_refused { Fault::User } else { Fault::Internal }
    }
}

impl Failure for IoError {
    fn fault(&self) -> Fault {
        self.source.fault()
    }
}

impl IoError {
    /// For `map_err`: `fs::read(path).map_err(IoError::at("reading", path))`.
    pub fn at<'a>(doing: &'static str, path: &'a Path) -> impl Fn(io::Error) -> IoError + Copy + 'a {
        move |source| IoError { doing, path: path.to_path_buf(), source: with_owner(source, path) }
    }
}

/// The error and each of its causes, outermost first, joined with ": " (as
/// anyhow's `{:#}`); every message names only its own step, so nothing repeats.
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// Runs `work`, giving a panic in it as its message instead of reporting it on
/// stderr: for a library that panics on some malformed input (the tokenizers and
/// parquet crates), which is the user's file, not a bug of this program. Panics
/// on other threads, and outside `work`, are reported as before.
pub fn caught_quietly<T>(work: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, String> {
    use std::cell::Cell;
    thread_local! { static QUIET: Cell<bool> = const { Cell::new(false) }; }
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.get() {
                report(info);
            }
        }));
    });
    let outer = QUIET.replace(true);
    let result = std::panic::catch_unwind(work);
    QUIET.set(outer);
    result.map_err(|panic| match panic.downcast::<String>() {
        Ok(message) => *message,
        Err(panic) => panic.downcast_ref::<&str>().map_or("a panic without a message", |message| message).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {path}")]
    struct Reading {
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn modes_read_as_ls_writes_them() {
        assert_eq!(mode_text(0o042775), "drwxrwsr-x");
        assert_eq!(mode_text(0o100644), "-rw-r--r--");
        assert_eq!(mode_text(0o041777), "drwxrwxrwt");
        assert_eq!(mode_text(0o102644), "-rw-r-Sr--");
    }

    #[test]
    fn a_permission_error_names_the_owner_of_the_nearest_existing_path() {
        let dir = tempfile::tempdir().unwrap();
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let err = IoError::at("creating", &dir.path().join("missing/deeper"))(denied);
        let message = chain(&err);
        let user = uzers::get_current_username().unwrap().to_string_lossy().into_owned();
        assert!(message.contains(&format!("{} is owned by {user}:", dir.path().display())), "{message}");
        let other = IoError::at("creating", dir.path())(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(!chain(&other).contains("owned by"));
    }

    #[test]
    fn chain_names_each_cause_once() {
        let err = Reading { path: "a.txt".into(), source: std::io::Error::other("gone") };
        assert_eq!(chain(&err), "reading a.txt: gone");
    }

    #[test]
    fn a_panic_caught_quietly_is_its_message() {
        assert_eq!(caught_quietly(|| 7), Ok(7));
        assert_eq!(caught_quietly(|| panic!("a {} message", "formatted")), Err::<(), _>("a formatted message".into()));
        assert_eq!(caught_quietly(|| std::panic::panic_any(3)), Err::<(), _>("a panic without a message".into()));
        assert_eq!(caught_quietly(|| caught_quietly(|| panic!("inner"))), Ok(Err("inner".into())));
    }
}
