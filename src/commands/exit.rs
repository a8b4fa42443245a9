//! The one place that turns an error into an exit status: 1 for a failure the
//! user can fix (bad input, a missing path, no space, try again later), 2 for an
//! internal error, 0 for a reader that closed our stdout early. Each error type
//! says whose fault it is (`errors::Failure`, next to the type); this file only
//! finds the outermost cause that decides.

use std::error::Error;
use std::io;

use crate::errors::{Failure, Fault};

/// The exit status for `err`: the outermost cause that tells decides.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let closed_stdout = err
        .chain()
        .any(|cause| cause.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe));
    if closed_stdout {
        return 0;
    }
    match err.chain().find_map(|cause| fault_of(cause).filter(|fault| *fault != Fault::Cause)) {
        Some(Fault::User) => 1,
        _ => 2,
    }
}

/// Every error type ferry defines, each asked for its own fault. The test below
/// fails when a type is missing here, so none silently exits 2.
macro_rules! faults {
    ($cause:expr; $($error:ty),+ $(,)?) => {
        None$(.or_else(|| $cause.downcast_ref::<$error>().map(Failure::fault)))+
    };
}

fn fault_of(cause: &(dyn Error + 'static)) -> Option<Fault> {
    faults!(cause;
        io::Error,
        crate::errors::IoError,
        super::UserError,
        crate::cache::lookup::LookupError,
        crate::cache::manifest::ManifestError,
        crate::cache::writer::WriteError,
        crate::daemon::DaemonError,
        crate::gc::GcError,
        crate::hub::HubError,
        crate::inspect::InspectError,
        crate::inputs::InputError,
        crate::megatron_args::MegatronArgsError,
        crate::mixture::MixtureError,
        crate::prepare::PrepareError,
        crate::prepare::ShardError,
        crate::settings::ConfigError,
        crate::source::SourceError,
        crate::spec::FormatsError,
        crate::spec::SpecError,
        crate::stage::StageError,
        crate::stage::broadcast::BroadcastError,
        crate::stage::copy::CopyError,
        crate::tokenizer::EncodeError,
        crate::tokenizer::TokenizerError,
        crate::tokenizer::Unsupported,
        crate::view::ViewError,
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `thiserror` error type under `src/` is asked for its fault above.
    #[test]
    fn every_error_type_decides_its_exit_status() {
        let listed = include_str!("exit.rs");
        let listed = listed.split("#[cfg(test)]").next().unwrap();
        let mut missing = Vec::new();
        let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                // Source files only: data embedded next to them is not UTF-8.
                if path.extension().is_none_or(|extension| extension != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap();
                for derive in code.split("thiserror::Error)]").skip(1) {
                    let item = derive.lines().find(|line| line.contains("pub enum ") || line.contains("pub struct "));
                    let name = item.and_then(|line| line.split_whitespace().nth(2)).map(|name| {
                        name.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or(name).to_string()
                    });
                    if let Some(name) = name
                        && !listed.contains(&format!("::{name},"))
                    {
                        missing.push(format!("{name} ({})", path.display()));
                    }
                }
            }
        }
        assert_eq!(missing, Vec::<String>::new(), "error types without an exit status");
    }
}
