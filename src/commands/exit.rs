//! The one place that turns an error into an exit status: 1 for a failure the
//! user can fix (bad input, a missing path, no space, try again later), 2 for an
//! internal error, 0 for a reader that closed our stdout early.

use std::error::Error;
use std::io;

use crate::prepare::PrepareError;
use crate::stage::StageError;

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

/// The exit status for `err`: the outermost cause that tells decides.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let closed_stdout = err
        .chain()
        .any(|cause| cause.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe));
    if closed_stdout {
        return 0;
    }
    err.chain().find_map(decide).unwrap_or(2)
}

/// The status `cause` decides, or `None` to let its own cause decide.
fn decide(cause: &(dyn Error + 'static)) -> Option<u8> {
    if let Some(err) = cause.downcast_ref::<io::Error>() {
        return Some(if USER_IO_KINDS.contains(&err.kind()) { 1 } else { 2 });
    }
    if let Some(err) = cause.downcast_ref::<PrepareError>() {
        // Writing and I/O failures are the user's when the disk or permissions are.
        return match err {
            PrepareError::Write(_) | PrepareError::Io { .. } => None,
            _ => Some(1),
        };
    }
    if let Some(err) = cause.downcast_ref::<StageError>() {
        return match err {
            StageError::Io { .. } => None,
            _ => Some(1),
        };
    }
    let always_user = cause.is::<super::UserError>()
        || cause.is::<crate::spec::SpecError>()
        || cause.is::<crate::settings::ConfigError>()
        || cause.is::<crate::daemon::DaemonError>()
        || matches!(cause.downcast_ref::<crate::gc::GcError>(), Some(crate::gc::GcError::Busy { .. }));
    always_user.then_some(1)
}
