//! Layers point down: lower modules never name higher ones. Reads the sources.

use std::path::{Path, PathBuf};

fn sources(under: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(under).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// Every `file:line` under `src/<relative>` that names `forbidden`.
fn uses(relative: &str, forbidden: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(relative);
    let files = if path.is_dir() { sources(&path) } else { vec![path] };
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (index, line) in text.lines().enumerate() {
            if line.contains(forbidden) {
                found.push(format!("{}:{}: {}", file.display(), index + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_cache_does_not_depend_on_inputs() {
    assert_eq!(uses("cache", "use crate::inputs"), Vec::<String>::new());
    assert_eq!(uses("cache", "crate::inputs::"), Vec::<String>::new());
}

#[test]
fn status_does_not_depend_on_prepare() {
    assert_eq!(uses("status.rs", "use crate::prepare"), Vec::<String>::new());
    assert_eq!(uses("status.rs", "crate::prepare::"), Vec::<String>::new());
}

#[test]
fn gc_does_not_depend_on_stage() {
    assert_eq!(uses("gc.rs", "use crate::stage"), Vec::<String>::new());
    assert_eq!(uses("gc.rs", "crate::stage::"), Vec::<String>::new());
}
