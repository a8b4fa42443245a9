//! The JSON lines reader (plain, zstd, gzip; the first byte picks) on any file:
//! documents, filtered records and bad records, or an error naming the file.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

use ferry::source::{self, Selector};
use ferry::spec::{FilterSpec, SourceFormat};

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ferry-fuzz-jsonl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

fuzz_target!(|bytes: &[u8]| {
    let Some((&kind, contents)) = bytes.split_first() else { return };
    let (name, format) = match kind % 3 {
        0 => ("input.jsonl", SourceFormat::Jsonl),
        1 => ("input.jsonl.zst", SourceFormat::JsonlZst),
        _ => ("input.jsonl.gz", SourceFormat::JsonlGz),
    };
    let path = dir().join(name);
    std::fs::write(&path, contents).unwrap();
    let filter: FilterSpec = toml::from_str("meta.pile_set_name = [\"Pile-CC\", \"Github\"]").unwrap();
    let selector = Selector::new("text", &filter);
    let Ok(mut reader) = source::open(&path, format, &selector) else { return };
    // Bounded: a decompression bomb must not take the fuzzer's memory.
    for _ in 0..10_000 {
        match reader.next_item() {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(err) => {
                assert!(err.to_string().contains(name), "{err}");
                break;
            }
        }
    }
});
