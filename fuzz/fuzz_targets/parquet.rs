//! The Parquet reader on any file: documents, or an error naming the file.
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
