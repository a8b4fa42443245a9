//! Fingerprints: stable blake3 hashes of everything that determines a cache
//! object's bytes, and nothing else (not paths, hosts, thread counts or names).
//!
//! A token store's covers the inputs' contents, the tokenizer and the spec's
//! tokenization part; a view's covers its token store's fingerprint and the spec's
//! view part. A new `seq_len` is then a new view of the same token store.

use std::fmt;

/// Bump when the bytes ferry writes for the same inputs and spec change, so old
/// entries are never mistaken for new ones.
pub const FORMAT_VERSION: u32 = 1;

/// A 256-bit fingerprint. Entry directories use its first 16 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(blake3::Hash);

impl Fingerprint {
    pub fn short(&self) -> String {
        self.0.to_hex()[..16].to_string()
    }

    pub fn full(&self) -> String {
        self.0.to_hex().to_string()
    }

    /// A fingerprint as a manifest records it (all 64 hex digits).
    pub fn from_hex(hex: &str) -> Option<Fingerprint> {
        blake3::Hash::from_hex(hex).ok().map(Fingerprint)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}

/// What goes into a token store's fingerprint.
pub struct TokensFingerprintInputs<'a> {
    /// `Spec::tokens_canonical()`.
    pub canonical_spec: &'a serde_json::Value,
    /// Hash of the tokenizer's canonical serialization.
    pub tokenizer: &'a blake3::Hash,
    /// Per split, in split-name order: the content hashes of its inputs, in input order.
    pub splits: &'a [(String, Vec<blake3::Hash>)],
}

/// Feeds length-prefixed fields to a hasher, so that no two inputs collide by concatenation.
struct Fields(blake3::Hasher);

impl Fields {
    fn field(&mut self, bytes: &[u8]) {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }
}

impl TokensFingerprintInputs<'_> {
    pub fn fingerprint(&self) -> Fingerprint {
        let mut fields = Fields(blake3::Hasher::new());
        let mut field = |bytes: &[u8]| fields.field(bytes);
        // Its own domain: never equal to an entry's from before token stores ("ferry-entry").
        field(b"ferry-tokens");
        field(&FORMAT_VERSION.to_le_bytes());
        // serde_json writes object keys in sorted order (no `preserve_order` feature), so this is canonical.
        field(self.canonical_spec.to_string().as_bytes());
        field(self.tokenizer.as_bytes());
        field(&(self.splits.len() as u64).to_le_bytes());
        for (name, inputs) in self.splits {
            field(name.as_bytes());
            field(&(inputs.len() as u64).to_le_bytes());
            for hash in inputs {
                field(hash.as_bytes());
            }
        }
        Fingerprint(fields.0.finalize())
    }
}

/// A view's fingerprint: its token store's (all 64 hex digits, as its manifest
/// records it) and `Spec::view_canonical()`.
pub fn view_fingerprint(token_store: &str, canonical_view: &serde_json::Value) -> Fingerprint {
    let mut fields = Fields(blake3::Hasher::new());
    fields.field(b"ferry-view");
    fields.field(&FORMAT_VERSION.to_le_bytes());
    fields.field(token_store.as_bytes());
    fields.field(canonical_view.to_string().as_bytes());
    Fingerprint(fields.0.finalize())
}

/// A mixture's fingerprint: its canonical form, which names each component's
/// token store (all 64 hex digits), weight and epoch cap, the seed, the total and
/// the splits, and the view's options.
pub fn mixture_fingerprint(canonical_mixture: &serde_json::Value) -> Fingerprint {
    let mut fields = Fields(blake3::Hasher::new());
    fields.field(b"ferry-mixture");
    fields.field(&FORMAT_VERSION.to_le_bytes());
    fields.field(canonical_mixture.to_string().as_bytes());
    Fingerprint(fields.0.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(spec: serde_json::Value, tokenizer: &[u8], inputs: &[&[u8]]) -> Fingerprint {
        let tokenizer = blake3::hash(tokenizer);
        let splits = vec![("train".to_string(), inputs.iter().map(|i| blake3::hash(i)).collect())];
        TokensFingerprintInputs { canonical_spec: &spec, tokenizer: &tokenizer, splits: &splits }.fingerprint()
    }

    #[test]
    fn fingerprint_depends_on_each_part() {
        let spec = serde_json::json!({"seq_len": 8});
        let base = fingerprint(spec.clone(), b"tok", &[b"a", b"b"]);
        assert_eq!(base, fingerprint(spec.clone(), b"tok", &[b"a", b"b"]));
        assert_ne!(base, fingerprint(serde_json::json!({"seq_len": 9}), b"tok", &[b"a", b"b"]));
        assert_ne!(base, fingerprint(spec.clone(), b"tok2", &[b"a", b"b"]));
        assert_ne!(base, fingerprint(spec.clone(), b"tok", &[b"b", b"a"]), "input order matters");
        assert_ne!(base, fingerprint(spec, b"tok", &[b"a", b"c"]));
        assert_eq!(base.short().len(), 16);
        assert!(base.full().starts_with(&base.short()));
    }

    #[test]
    fn a_view_fingerprint_depends_on_its_token_store_and_its_options_only() {
        let store = fingerprint(serde_json::json!({}), b"tok", &[b"a"]).full();
        let other_store = fingerprint(serde_json::json!({}), b"tok", &[b"b"]).full();
        let view = serde_json::json!({"sequence": {"seq_len": 1024}});
        let base = view_fingerprint(&store, &view);
        assert_eq!(base, view_fingerprint(&store, &view));
        assert_ne!(base, view_fingerprint(&other_store, &view));
        assert_ne!(base, view_fingerprint(&store, &serde_json::json!({"sequence": {"seq_len": 2048}})));
        assert_ne!(base.full(), store, "a view is never its token store");
    }
}
