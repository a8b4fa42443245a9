//! The pipeline spec parser on any text: a spec or an error that names the file, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match ferry::spec::Spec::parse(text, Path::new("fuzz.toml"), "/data".into()) {
        // What the fingerprint and the readers derive from a valid spec must work too.
        Ok(spec) => {
            let _ = spec.canonical();
            let _ = spec.filter.field_filters();
        }
        Err(err) => assert!(err.to_string().contains("fuzz.toml"), "{err}"),
    }
});
