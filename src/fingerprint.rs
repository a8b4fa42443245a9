//! The entry fingerprint: a stable blake3 hash of everything that determines an
//! entry's bytes, and nothing else (not paths, hosts, thread counts or names).

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
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}

/// What goes into a fingerprint.
pub struct FingerprintInputs<'a> {
    /// `Spec::canonical()`.
    pub canonical_spec: &'a serde_json::Value,
    /// Hash of the tokenizer's canonical serialization.
    pub tokenizer: &'a blake3::Hash,
    /// Per split, in split-name order: the content hashes of its inputs, in input order.
    pub splits: &'a [(String, Vec<blake3::Hash>)],
}

impl FingerprintInputs<'_> {
    pub fn fingerprint(&self) -> Fingerprint {
        let mut hasher = blake3::Hasher::new();
        // Every variable-length part is length-prefixed so no two inputs collide by concatenation.
        let mut field = |bytes: &[u8]| {
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        field(b"ferry-entry");
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
        Fingerprint(hasher.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(spec: serde_json::Value, tokenizer: &[u8], inputs: &[&[u8]]) -> Fingerprint {
        let tokenizer = blake3::hash(tokenizer);
        let splits = vec![("train".to_string(), inputs.iter().map(|i| blake3::hash(i)).collect())];
        FingerprintInputs { canonical_spec: &spec, tokenizer: &tokenizer, splits: &splits }.fingerprint()
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
}
