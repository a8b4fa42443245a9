//! `ferry prepare SPEC`: prints the fingerprint and the entry path, and a summary.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use serde_json::json;

use crate::cache::layout::CacheLayout;
use crate::mixture::{self, AnySpec, MixtureSpec, PreparedMixture};
use crate::prepare::{self, PrepareOptions, Prepared};
use crate::progress;

pub fn run(spec_path: &Path, cache: &CacheLayout, options: &PrepareOptions, as_json: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let spec = match AnySpec::load(spec_path)? {
        AnySpec::Pipeline(spec) => spec,
        AnySpec::Mixture(mixture) => return run_mixture(spec_path, &mixture, cache, options, as_json),
    };
    let prepared =
        prepare::prepare(&spec, cache, options).with_context(|| format!("preparing {}", spec_path.display()))?;
    let elapsed = started.elapsed();
    if as_json {
        out!("{}", serde_json::to_string_pretty(&summary_json(&prepared, cache, elapsed.as_secs_f64()))?)?;
    } else {
        print_summary(&prepared, cache, elapsed)?;
    }
    Ok(())
}

fn run_mixture(
    spec_path: &Path,
    mixture: &MixtureSpec,
    cache: &CacheLayout,
    options: &PrepareOptions,
    as_json: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    if options.rebuild_tokens {
        anyhow::bail!(super::UserError(
            "--rebuild-tokens goes with a component's own spec: run `ferry prepare COMPONENT.toml --rebuild-tokens`"
                .into()
        ));
    }
    let prepared =
        mixture::prepare(mixture, cache, options).with_context(|| format!("preparing {}", spec_path.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    if as_json {
        out!("{}", serde_json::to_string_pretty(&mixture_json(&prepared, cache, seconds))?)?;
    } else {
        print_mixture(&prepared, cache, seconds)?;
    }
    Ok(())
}

fn mixture_json(prepared: &PreparedMixture, cache: &CacheLayout, seconds: f64) -> serde_json::Value {
    let manifest = &prepared.manifest;
    let stores: Vec<serde_json::Value> = prepared
        .stores
        .iter()
        .map(|(name, store)| {
            json!({
                "name": name,
                "fingerprint": store.fingerprint.full(),
                "entry": cache.entry(&store.fingerprint.short()).root(),
                "tokenized": store.built,
            })
        })
        .collect();
    json!({
        "fingerprint": manifest.fingerprint,
        "entry": prepared.entry.root(),
        "name": manifest.name,
        "built": prepared.built,
        "token_stores": stores,
        "mixture": manifest.mixture,
        "totals": manifest.totals,
        "packing": manifest.packing,
        "seconds": seconds,
    })
}

fn print_mixture(prepared: &PreparedMixture, cache: &CacheLayout, seconds: f64) -> std::io::Result<()> {
    let manifest = &prepared.manifest;
    let counts = &manifest.totals.counts;
    out!("fingerprint {}", manifest.fingerprint)?;
    out!("entry {}", prepared.entry.root().display())?;
    if !prepared.built {
        out!("cached {}: {} tokens in {} rows (nothing to do)", manifest.name, counts.tokens, counts.rows)?;
        return Ok(());
    }
    for (name, store) in &prepared.stores {
        let path = cache.entry(&store.fingerprint.short());
        let what = if store.built { "tokenized into" } else { "found" };
        out!("component {name}: {what} the token store {}", path.root().display())?;
    }
    if let Some(record) = &manifest.mixture {
        for component in &record.components {
            for (split, used) in &component.splits {
                out!(
                    "  {split}: {} took {} of {} tokens ({} epoch(s)), weight {:.4} realized {:.4}",
                    component.name,
                    used.tokens_used,
                    used.tokens_available,
                    used.epochs,
                    component.weight,
                    used.realized_weight
                )?;
            }
        }
    }
    out!(
        "built mixture {}: {} tokens in {} rows, {} written in {:.2} s",
        manifest.name,
        counts.tokens,
        counts.rows,
        bytesize::ByteSize(manifest.totals.bytes),
        seconds
    )
}

fn summary_json(prepared: &Prepared, cache: &CacheLayout, seconds: f64) -> serde_json::Value {
    let manifest = &prepared.manifest;
    let store = &prepared.token_store;
    json!({
        "fingerprint": manifest.fingerprint,
        "entry": prepared.entry.root(),
        "name": manifest.name,
        "built": prepared.built,
        "shards_tokenized_here": store.shards_tokenized_here,
        "token_store": {
            "fingerprint": store.fingerprint.full(),
            "entry": cache.entry(&store.fingerprint.short()).root(),
            "tokenized": store.built,
        },
        "totals": manifest.totals,
        "packing": manifest.packing,
        "encoder": manifest.tokenizer.encoder,
        "fast_unavailable": manifest.tokenizer.fast_unavailable,
        "seconds": seconds,
    })
}

fn print_summary(prepared: &Prepared, cache: &CacheLayout, elapsed: std::time::Duration) -> std::io::Result<()> {
    let manifest = &prepared.manifest;
    let counts = &manifest.totals.counts;
    let store = &prepared.token_store;
    out!("fingerprint {}", manifest.fingerprint)?;
    out!("entry {}", prepared.entry.root().display())?;
    if !prepared.built {
        out!("cached {}: {} tokens in {} rows (nothing to do)", manifest.name, counts.tokens, counts.rows)?;
        return Ok(());
    }
    let store_path = cache.entry(&store.fingerprint.short());
    if store.built {
        let tokenizer = &manifest.tokenizer;
        out!(
            "tokenized {} documents ({} filtered, {} skipped) into the token store {} in {:.2} s ({}tokens/s, {} shards here); encoder {}{}",
            counts.documents,
            counts.filtered_documents,
            counts.skipped_total(),
            store_path.root().display(),
            store.tokenize_seconds,
            progress::per_second(store.tokens, std::time::Duration::from_secs_f64(store.tokenize_seconds)),
            store.shards_tokenized_here,
            tokenizer.encoder.name(),
            tokenizer.fast_unavailable.as_ref().map(|reason| format!(" (fast path off: {reason})")).unwrap_or_default(),
        )?;
    } else {
        out!("token store {} already holds the documents: nothing tokenized", store_path.root().display())?;
    }
    let packing = manifest.packing.as_ref();
    out!(
        "built {}: {} tokens in {} rows{}, {} written; whole prepare {}",
        manifest.name,
        counts.tokens,
        counts.rows,
        packing
            .filter(|packing| packing.padding_tokens > 0 || packing.documents_split > 0)
            .map(|packing| format!(
                " ({:.2}% filled, {} documents split)",
                packing.fill * 100.0,
                packing.documents_split
            ))
            .unwrap_or_default(),
        bytesize::ByteSize(manifest.totals.bytes),
        humantime::format_duration(std::time::Duration::from_millis(elapsed.as_millis() as u64)),
    )?;
    Ok(())
}
