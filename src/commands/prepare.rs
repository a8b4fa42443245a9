//! `ferry prepare SPEC`: prints the fingerprint and the entry path, and a summary.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use serde_json::json;

use crate::cache::layout::CacheLayout;
use crate::prepare::{self, PrepareOptions, Prepared};
use crate::progress::{self, ProgressMode};
use crate::spec::Spec;

pub fn run(
    spec_path: &Path,
    cache: &CacheLayout,
    jobs: usize,
    progress: ProgressMode,
    as_json: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let spec = Spec::load(spec_path)?;
    let prepared = prepare::prepare(&spec, cache, &PrepareOptions { jobs, progress })
        .with_context(|| format!("preparing {}", spec_path.display()))?;
    let elapsed = started.elapsed();
    if as_json {
        out!("{}", serde_json::to_string_pretty(&summary_json(&prepared, elapsed.as_secs_f64()))?)?;
    } else {
        print_summary(&prepared, elapsed)?;
    }
    Ok(())
}

fn summary_json(prepared: &Prepared, seconds: f64) -> serde_json::Value {
    let manifest = &prepared.manifest;
    json!({
        "fingerprint": manifest.fingerprint,
        "entry": prepared.entry.root(),
        "name": manifest.name,
        "built": prepared.built,
        "shards_tokenized_here": prepared.shards_tokenized_here,
        "totals": manifest.totals,
        "encoder": manifest.tokenizer.encoder,
        "fast_unavailable": manifest.tokenizer.fast_unavailable,
        "seconds": seconds,
    })
}

fn print_summary(prepared: &Prepared, elapsed: std::time::Duration) -> std::io::Result<()> {
    let manifest = &prepared.manifest;
    let counts = &manifest.totals.counts;
    out!("fingerprint {}", manifest.fingerprint)?;
    out!("entry {}", prepared.entry.root().display())?;
    if prepared.built {
        out!(
            "built {}: {} documents ({} filtered, {} skipped), {} tokens in {} rows, {} written in {} ({}tokens/s, {} shards here)",
            manifest.name,
            counts.documents,
            counts.filtered_documents,
            counts.skipped_total(),
            counts.tokens,
            counts.rows,
            bytesize::ByteSize(manifest.totals.bytes),
            humantime::format_duration(std::time::Duration::from_millis(elapsed.as_millis() as u64)),
            progress::per_second(counts.tokens, elapsed),
            prepared.shards_tokenized_here,
        )?;
        let tokenizer = &manifest.tokenizer;
        match &tokenizer.fast_unavailable {
            Some(reason) => out!("encoder {} (fast path off: {reason})", tokenizer.encoder.name())?,
            None => out!("encoder {}", tokenizer.encoder.name())?,
        }
    } else {
        out!("cached {}: {} tokens in {} rows (nothing to do)", manifest.name, counts.tokens, counts.rows)?;
    }
    Ok(())
}
