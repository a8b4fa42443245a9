//! `ferry inspect NAME|FP`: an entry's counts, its document-length histogram and
//! tokens per source drawn in the terminal, and its first rows decoded with BOS/EOS
//! and row boundaries marked.

use std::collections::BTreeMap;

use crate::cache::layout::CacheLayout;
use crate::cache::manifest::{EntryKind, MixtureRecord};
use crate::inspect::{Inspection, SplitView, inspect};
use crate::megatron_args;

/// `--megatron-args`: with a split, its `--data-path` arguments on one line; else
/// a JSON for `--per-split-data-args-path` (Megatron's split names).
pub fn megatron_args(cache: &CacheLayout, entry: &str, split: Option<&str>) -> anyhow::Result<()> {
    let splits = megatron_args::data_args(cache, entry)?;
    if let Some(split) = split {
        let Some(arguments) = splits.get(split) else {
            let has: Vec<&String> = splits.keys().collect();
            anyhow::bail!(super::UserError(format!(
                "entry {entry} has no Megatron files for split {split:?}; it has {has:?}"
            )));
        };
        out!("{}", arguments.join(" "))?;
        return Ok(());
    }
    let mut per_split: BTreeMap<&str, (&String, &Vec<String>)> = BTreeMap::new();
    for (split, arguments) in &splits {
        let Some(name) = megatron_args::megatron_split(split) else { continue };
        if let Some((other, _)) = per_split.insert(name, (split, arguments)) {
            anyhow::bail!(super::UserError(format!(
                "splits {other:?} and {split:?} are both Megatron's {name:?}; name one with --split"
            )));
        }
    }
    if per_split.is_empty() {
        let has: Vec<&String> = splits.keys().collect();
        anyhow::bail!(super::UserError(format!(
            "entry {entry} has no split Megatron names train, validation or test (it has {has:?}); name one with --split"
        )));
    }
    let per_split: BTreeMap<&str, &Vec<String>> = per_split.into_iter().map(|(name, (_, args))| (name, args)).collect();
    out!("{}", serde_json::to_string_pretty(&per_split)?)?;
    Ok(())
}

/// The widest bar drawn, in characters.
const BAR_WIDTH: u64 = 40;

pub fn run(cache: &CacheLayout, entry: &str, split: Option<&str>, rows: usize, json: bool) -> anyhow::Result<()> {
    let inspection = inspect(cache, entry, split, rows)?;
    if json {
        out!("{}", serde_json::to_string_pretty(&inspection)?)?;
        return Ok(());
    }
    out!("entry       {}", inspection.entry.display())?;
    out!("name        {}", inspection.name)?;
    out!("fingerprint {}", inspection.fingerprint)?;
    match (&inspection.kind, &inspection.token_store) {
        (EntryKind::View, None) if inspection.mixture.is_some() => {
            out!("kind        mixture of token stores (its rows interleaved by weight)")?
        }
        (EntryKind::Tokens, _) => out!("kind        token store (the documents' ids; views are made from it)")?,
        (EntryKind::View, Some(store)) => out!(
            "kind        view of token store {}{}",
            &store.fingerprint[..16],
            if store.present { "" } else { " (no longer in the cache; the view is complete without it)" }
        )?,
        (EntryKind::View, None) => out!("kind        entry made before token stores")?,
    }
    if let Some(packing) = &inspection.packing {
        out!(
            "packing     {}{}, {:.2}% filled, {} padding tokens, {} documents split{}",
            packing.pack.name(),
            if packing.seq_len > 0 { format!(", rows of {}", packing.seq_len) } else { String::new() },
            packing.fill * 100.0,
            packing.padding_tokens,
            packing.documents_split,
            packing.shuffle_seed.map(|seed| format!(", shuffled with seed {seed}")).unwrap_or_default()
        )?;
    }
    if let Some(mixture) = &inspection.mixture {
        print_mixture(mixture)?;
    }
    if !inspection.formats.is_empty() {
        out!("formats     {} (the {} split with each trainer's reader:)", inspection.formats.len(), inspection.split)?;
        for reader in &inspection.formats {
            out!("  {:<15} {}", reader.format, reader.python)?;
        }
    }
    out!("")?;
    out!("{:<12} {:>12} {:>12} {:>14}", "split", "rows", "documents", "tokens")?;
    for (name, view) in &inspection.splits {
        out!("{name:<12} {:>12} {:>12} {:>14}", view.rows, view.documents, view.tokens)?;
    }
    for (name, view) in &inspection.splits {
        print_histograms(name, view)?;
    }
    Ok(print_rows(&inspection)?)
}

fn print_histograms(split: &str, view: &SplitView) -> std::io::Result<()> {
    if !view.document_lengths.is_empty() {
        out!("\n{split}: documents by length in tokens (BOS/EOS included)")?;
        let widest = view.document_lengths.iter().map(|bucket| bucket.documents).max().unwrap_or(0);
        // From the shortest length present: empty buckets below it say nothing.
        for bucket in view.document_lengths.iter().skip_while(|bucket| bucket.documents == 0) {
            let range = format!("{} ..< {}", bucket.from, bucket.to);
            out!("  {range:>18}  {:<40} {}", bar(bucket.documents, widest), bucket.documents)?;
        }
    }
    if !view.tokens_by_source.is_empty() {
        out!("\n{split}: tokens by source")?;
        let total: u64 = view.tokens_by_source.values().sum();
        let widest = view.tokens_by_source.values().copied().max().unwrap_or(0);
        for (source, &tokens) in &view.tokens_by_source {
            let share = 100.0 * tokens as f64 / total.max(1) as f64;
            out!("  {source:>18}  {:<40} {tokens} ({share:.1}%)", bar(tokens, widest))?;
        }
    }
    Ok(())
}

/// A bar `value / widest` of the full width; at least one character for a nonzero value.
fn bar(value: u64, widest: u64) -> String {
    let length = if value == 0 { 0 } else { (value * BAR_WIDTH).div_ceil(widest.max(1)) };
    "█".repeat(length as usize)
}

fn print_rows(inspection: &Inspection) -> std::io::Result<()> {
    if let Some(why) = &inspection.not_decoded {
        out!("\nrows are not decoded: {why}")?;
    }
    for row in &inspection.rows {
        let what = if inspection.kind == EntryKind::Tokens { "document" } else { "row" };
        out!("\n── {} {what} {} ({} tokens) ──", inspection.split, row.row, row.ids.len())?;
        if inspection.not_decoded.is_some() {
            out!("{:?}", row.ids)?;
            continue;
        }
        // Special tokens (BOS, EOS) stand out as ⟦...⟧: they are the documents' boundaries.
        let mut text = row.text.clone();
        for token in &inspection.special_tokens {
            text = text.replace(token.as_str(), &format!("⟦{token}⟧"));
        }
        out!("{text}")?;
    }
    Ok(())
}

/// A mixture's components: each one's token store, weight, and what it gave each split.
fn print_mixture(mixture: &MixtureRecord) -> std::io::Result<()> {
    let totals: Vec<String> = mixture.total_tokens.iter().map(|(split, tokens)| format!("{split} {tokens}")).collect();
    let totals = if totals.is_empty() { "none".to_string() } else { totals.join(", ") };
    out!("mixture     seed {}; tokens asked: {totals} (other splits: as many as repeat nothing)", mixture.seed)?;
    out!(
        "  {:<28} {:<16} {:>8} {:<10} {:>14} {:>14} {:>7} {:>9}",
        "component",
        "token store",
        "weight",
        "split",
        "available",
        "used",
        "epochs",
        "realized"
    )?;
    for component in &mixture.components {
        let store = component.token_store.get(..16).unwrap_or(&component.token_store);
        for (split, used) in &component.splits {
            out!(
                "  {:<28} {:<16} {:>8.4} {:<10} {:>14} {:>14} {:>7} {:>9.4}",
                component.name,
                store,
                component.weight,
                split,
                used.tokens_available,
                used.tokens_used,
                used.epochs,
                used.realized_weight
            )?;
        }
    }
    Ok(())
}
