//! Manifests as anyone who can write to a shared cache could write them: either
//! refused, or every name and path in them is plain (nothing leaves the entry).
#![no_main]

use libfuzzer_sys::fuzz_target;

use ferry::fsutil::untrusted::{check_name, check_relative};

fuzz_target!(|bytes: &[u8]| {
    if let Ok(manifest) = ferry::cache::manifest::Manifest::parse(bytes) {
        assert_eq!(manifest.short_fingerprint().len(), 16);
        assert!(check_name(&manifest.name).is_ok());
        for file in &manifest.files {
            assert!(check_relative(&file.path).is_ok(), "{:?}", file.path);
        }
        for (split, record) in &manifest.splits {
            assert!(check_name(split).is_ok());
            assert!(record.data_files.iter().all(|file| check_relative(file).is_ok()));
        }
    }
});
