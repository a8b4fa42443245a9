//! `ferry demo`: a small Pile-style corpus, prepared with the embedded GPT-2
//! tokenizer, a second view of the same token store (best-fit rows of 2048 with
//! position_ids, made without tokenizing again), the first staged into a local
//! folder as a job would, then how to load it. No network.

use std::path::Path;

use anyhow::Context;

use crate::cache::layout::CacheLayout;
use crate::corpus;
use crate::prepare::{self, PrepareOptions};
use crate::progress::ProgressMode;
use crate::spec::Spec;
use crate::stage::{self, StageOptions};

const DEMO_SPEC: &str = r#"# A ferry pipeline spec: Pile-style shards -> GPT-2 tokens packed in 1024-token rows.
name = "pile-demo-gpt2-1024"

[splits]
train = ["corpus/train-*.jsonl.zst"]
validation = ["corpus/val-*.jsonl.zst"]

[filter]
# Keep every subset but EuroParl.
meta.pile_set_name = ["Pile-CC", "Github", "ArXiv", "Wikipedia (en)", "StackExchange"]
min_chars = 1

[tokenizer]
builtin = "gpt2"

[sequence]
pack = "concat"
seq_len = 1024
"#;

pub fn run(dir: &Path, jobs: usize, progress: ProgressMode) -> anyhow::Result<()> {
    let corpus_dir = dir.join("corpus");
    if !corpus_dir.exists() {
        eprintln!("writing a Pile-style corpus to {}", corpus_dir.display());
        corpus::write_pile_shards(&corpus_dir, "train", 4, 3000, 1).context("writing the demo corpus")?;
        corpus::write_pile_shards(&corpus_dir, "val", 1, 600, 2).context("writing the demo corpus")?;
    }
    let spec_path = dir.join("pile-demo.toml");
    crate::fsutil::write_atomic(&spec_path, DEMO_SPEC.as_bytes()).context("writing the demo spec")?;
    let spec = Spec::load(&spec_path)?;
    let cache = CacheLayout::new(dir.join("cache"));
    let options = PrepareOptions { jobs, progress, rebuild_tokens: false };
    let prepared = prepare::prepare(&spec, &cache, &options).context("preparing the demo corpus")?;
    let counts = &prepared.manifest.totals.counts;
    out!("spec        {}", spec_path.display())?;
    out!("fingerprint {}", prepared.manifest.fingerprint)?;
    out!("entry       {}", prepared.entry.root().display())?;
    out!(
        "{} documents, {} tokens in {} rows of {} ({}, {:.2} s to tokenize)",
        counts.documents,
        counts.tokens,
        counts.rows,
        spec.sequence.seq_len,
        if prepared.built { "built now" } else { "cached" },
        prepared.manifest.timings.tokenize_seconds,
    )?;

    // Another view of the same documents: nothing is tokenized again.
    let other_path = dir.join("pile-demo-best-fit.toml");
    let other_text = DEMO_SPEC
        .replace("pile-demo-gpt2-1024", "pile-demo-gpt2-best-fit-2048")
        .replace("pack = \"concat\"\nseq_len = 1024", "pack = \"best_fit\"\nseq_len = 2048\nposition_ids = true");
    crate::fsutil::write_atomic(&other_path, other_text.as_bytes()).context("writing the demo spec")?;
    let other = prepare::prepare(&Spec::load(&other_path)?, &cache, &options).context("preparing the second view")?;
    let packing = other.manifest.packing.as_ref();
    out!(
        "another view {} of the same token store: best-fit rows of 2048 with position_ids, {:.2}% filled, {:.2} s, {}",
        other.entry.root().display(),
        packing.map_or(1.0, |packing| packing.fill) * 100.0,
        other.manifest.timings.view_seconds,
        if other.token_store.built { "tokenized" } else { "nothing tokenized" },
    )?;

    // Stage the first as a job would onto a node's local disk.
    let dest = std::path::absolute(dir.join("node-local"))?;
    let plan = stage::plan_entry(&cache, &prepared.manifest, &dest)?;
    let options = StageOptions { dest: dest.clone(), jobs: 16, verify: true, progress };
    let report = stage::stage(&plan, &options).context("staging the demo entry")?;
    out!(
        "staged      {} ({} files copied and verified, {} already there, {:.2} s)",
        report.dest_root.display(),
        report.files_copied,
        report.files_skipped,
        report.seconds
    )?;
    let by_name = crate::cache::destination::DestLayout::new(&dest).mirror().by_name(&spec.name);
    out!("\nload it with:\n  python3 -c \"import datasets; print(datasets.load_from_disk('{}'))\"", by_name.display())?;
    Ok(())
}
