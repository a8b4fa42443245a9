//! The Parquet reader on any file: documents, or an error naming the file.
//!
//! The parquet crate panics on some corrupt pages instead of failing; ferry's
//! reader catches that and reports the file (`source/parquet.rs`). libFuzzer's
//! panic hook would abort on the caught panic too, so this target installs a
//! quiet hook: what it finds is a panic that escapes ferry, as a user would see.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

use ferry::source::{self, Selector};
use ferry::spec::{FilterSpec, SourceFormat};

fn path() -> &'static std::path::Path {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    PATH.get_or_init(|| std::env::temp_dir().join(format!("ferry-fuzz-{}.parquet", std::process::id())))
}

fuzz_target!(|bytes: &[u8]| {
    static QUIET: OnceLock<()> = OnceLock::new();
    QUIET.get_or_init(|| std::panic::set_hook(Box::new(|_| {})));
    std::fs::write(path(), bytes).unwrap();
    let selector = Selector::new("text", &FilterSpec::default());
    let Ok(mut reader) = source::open(path(), SourceFormat::Parquet, &selector) else { return };
    for _ in 0..10_000 {
        match reader.next_item() {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
});
