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
        if USER_IO_KINDS.contains(&self.kind()) { Fault::User } else { Fault::Internal }
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
        move |source| IoError { doing, path: path.to_path_buf(), source }
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
    fn chain_names_each_cause_once() {
        let err = Reading { path: "a.txt".into(), source: std::io::Error::other("gone") };
        assert_eq!(chain(&err), "reading a.txt: gone");
    }
}
