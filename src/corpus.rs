//! Synthetic Pile-style corpora (`{"text": ..., "meta": {"pile_set_name": ...}}`
//! lines in `.jsonl.zst` shards) for the demo, tests and benchmarks. Deterministic
//! for a seed, with prose, code, markup, Unicode and whitespace edge cases.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

/// Subsets of the Pile this generator imitates.
pub const PILE_SETS: &[&str] = &["Pile-CC", "Github", "ArXiv", "Wikipedia (en)", "StackExchange", "EuroParl"];

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "river",
    "model",
    "data",
    "training",
    "cluster",
    "node",
    "memory",
    "theorem",
    "proof",
    "function",
    "network",
    "language",
    "history",
    "century",
    "government",
    "system",
    "between",
    "through",
    "during",
    "against",
    "university",
    "science",
    "number",
    "energy",
    "research",
    "development",
    "information",
    "important",
    "different",
    "following",
    "without",
    "however",
    "population",
    "community",
    "management",
    "particular",
    "experience",
    "international",
    "performance",
    "café",
    "naïve",
    "façade",
    "Zürich",
    "São",
    "Paulo",
    "Ελλάδα",
    "Москва",
    "東京",
    "北京",
    "한국어",
    "🙂",
    "🚀",
    "d'état",
    "don't",
    "it's",
    "we're",
    "they've",
    "I'm",
    "you'll",
    "he'd",
    "1984",
    "3.14159",
    "42",
    "2nd",
    "10,000",
    "$5",
    "100%",
];

const CODE: &[&str] = &[
    "def {w}(x, y=None):\n    \"\"\"Return the {w} of x.\"\"\"\n    if y is None:\n        return x\n    return x + y\n",
    "fn {w}(items: &[u32]) -> u64 {\n\titems.iter().map(|&i| i as u64).sum()\n}\n",
    "for (int i = 0; i < n; ++i) {\n  total += {w}[i] * 2;  // {w}\n}\n",
    "const {w} = async (req, res) => {\n  res.json({ ok: true, value: `${req.query.{w}}` });\n};\n",
    "SELECT {w}, COUNT(*) FROM events WHERE day >= '2024-01-01' GROUP BY {w};\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", {w}); return 0; }\n",
];

/// A small deterministic generator of documents.
pub struct Generator {
    rng: fastrand::Rng,
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        Generator { rng: fastrand::Rng::with_seed(seed) }
    }

    fn word(&mut self) -> &'static str {
        WORDS[self.rng.usize(..WORDS.len())]
    }

    fn sentence(&mut self) -> String {
        let count = self.rng.usize(4..18);
        let mut words: Vec<&str> = (0..count).map(|_| self.word()).collect();
        let mut sentence = String::new();
        let first = words.remove(0);
        let mut chars = first.chars();
        if let Some(c) = chars.next() {
            sentence.extend(c.to_uppercase());
            sentence.push_str(chars.as_str());
        }
        for word in words {
            // Mostly single spaces, sometimes the whitespace runs real text has.
            sentence.push_str(match self.rng.u8(..40) {
                0 => "  ",
                1 => "\t",
                2 => ", ",
                _ => " ",
            });
            sentence.push_str(word);
        }
        sentence.push_str([".", ".", ".", "?", "!", ":", "..."][self.rng.usize(..7)]);
        sentence
    }

    fn prose(&mut self, sentences: usize) -> String {
        let mut text = String::new();
        for i in 0..sentences {
            if i > 0 {
                text.push_str(if self.rng.u8(..6) == 0 { "\n\n" } else { " " });
            }
            text.push_str(&self.sentence());
        }
        text
    }

    /// One document of the given Pile subset.
    pub fn document(&mut self, set: &str) -> String {
        let size = self.rng.usize(2..24);
        match set {
            "Github" => {
                let mut text = String::new();
                for _ in 0..size / 3 + 1 {
                    let word = self.word().replace(|c: char| !c.is_ascii_alphanumeric(), "_");
                    text.push_str(&CODE[self.rng.usize(..CODE.len())].replace("{w}", &word));
                    text.push('\n');
                }
                text
            }
            "ArXiv" => format!(
                "\\section{{{}}}\n{} $E = mc^2$, $\\sum_{{i=1}}^{{n}} x_i^2 \\leq \\alpha$.\n",
                self.word(),
                self.prose(size)
            ),
            "StackExchange" => format!("Q:\n\n{}\n\nA:\n\n{}\n    code_block();\n", self.prose(2), self.prose(size)),
            "EuroParl" => format!("{} — Monsieur le Président, «{}» über die Würde.", self.prose(size), self.word()),
            _ => self.prose(size),
        }
    }
}

/// Writes `shards` zstd-compressed JSON-lines shards of `documents` documents each
/// into `dir` as `<prefix>-NN.jsonl.zst`; returns their paths.
pub fn write_pile_shards(
    dir: &Path,
    prefix: &str,
    shards: usize,
    documents: usize,
    seed: u64,
) -> std::io::Result<Vec<PathBuf>> {
    fs_err::create_dir_all(dir)?;
    let mut paths = Vec::new();
    for shard in 0..shards {
        let mut generator = Generator::new(seed.wrapping_mul(1000).wrapping_add(shard as u64));
        let path = dir.join(format!("{prefix}-{shard:02}.jsonl.zst"));
        let mut encoder = zstd::Encoder::new(fs_err::File::create(&path)?, 3)?;
        for _ in 0..documents {
            let set = PILE_SETS[generator.rng.usize(..PILE_SETS.len())];
            let line = json!({"text": generator.document(set), "meta": {"pile_set_name": set}});
            writeln!(encoder, "{line}")?;
        }
        encoder.finish()?;
        paths.push(path);
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_corpus() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let pa = write_pile_shards(a.path(), "t", 2, 50, 7).unwrap();
        let pb = write_pile_shards(b.path(), "t", 2, 50, 7).unwrap();
        for (x, y) in pa.iter().zip(&pb) {
            assert_eq!(std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
        }
    }
}
