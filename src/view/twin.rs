//! A view's twin: a published view of the same rows (the same token store, or the
//! same mixture, and every option but the formats the same), whose Arrow files are
//! then the new view's too. Adding a format to a prepared spec then writes the
//! format's files only: the Arrow files are hard links to the twin's, as `place`
//! makes them (or checked copies of another user's).

use std::path::Path;

use crate::cache::layout::{CacheLayout, is_short_fingerprint};
use crate::cache::manifest::{EntryKind, Manifest};

use super::Recipe;

/// The spec's canonical form without its formats: what decides a view's rows and
/// Arrow files.
fn rows_part(spec: &serde_json::Value) -> serde_json::Value {
    let mut spec = spec.clone();
    if let Some(output) = spec.get_mut("output").and_then(|output| output.as_object_mut()) {
        output.remove("formats");
    }
    spec
}

/// A published view with the rows `recipe` makes of `store` (a token store's full
/// fingerprint; none for a mixture, whose canonical form names its stores), other
/// than `own` (the view's short fingerprint). Entries that cannot be read are passed by.
pub fn find(cache: &CacheLayout, recipe: &Recipe, store: Option<&str>, own: &str) -> Option<Manifest> {
    let wanted = rows_part(&recipe.canonical);
    let listing = std::fs::read_dir(cache.entries_dir()).ok()?;
    let mut names: Vec<String> = listing
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| is_short_fingerprint(name) && name != own)
        .collect();
    // The same twin whichever order the directory lists them in.
    names.sort();
    names.into_iter().find_map(|name| {
        let manifest = Manifest::load_entry(Path::new(&cache.entry(&name).root().to_path_buf())).ok()?;
        let same_store = manifest.token_store.as_ref().map(|store| store.fingerprint.as_str()) == store;
        let twin = manifest.kind == EntryKind::View
            && same_store
            && manifest.mixture.is_some() == store.is_none()
            && rows_part(&manifest.spec) == wanted;
        twin.then_some(manifest)
    })
}
