//! Raw encoder throughput on text held in memory: the fast byte-level BPE path
//! and the `tokenizers` crate, on all cores, for the same documents.
//!
//! `cargo bench --bench encoders -- SPEC SHARD...` (the shards' `text` fields are
//! read once timed, shards in parallel, then loaded; then each encoder is timed on
//! the texts in memory). Prints one JSON line.
//!
//! `cargo bench --bench encoders -- --cores TEXT_FILE...` compares the fast core
//! with tiktoken-rs on one thread, on GPT-2 and on a Llama-3-structured tokenizer
//! with the 100k `cl100k_base` vocabulary, over the files cut into documents;
//! prints one JSON line per vocabulary with tokens/s of each (the fast core with its
//! cache cold each pass, and warm), their ratio, and how many documents' ids differ
//! from tiktoken-rs and (on a sample) from `tokenizers`.
//!
//! `cargo bench --bench encoders -- --fast TOKENIZER_JSON TEXT_FILE [PASSES]` times
//! the fast core alone on one thread, cold each pass, in CPU time: for A/B runs.
//!
//! `cargo bench --bench encoders -- --build TOKENIZER_JSON PASSES` times building
//! the fast encoder from a tokenizer, in CPU time: for A/B runs of a build's start.
//!
//! `cargo bench --bench encoders -- --llama3-tokenizer OUT` writes that
//! Llama-3-structured tokenizer.json, for the benchmark's peers to load.

#[path = "encoders/cores.rs"]
mod cores;

use std::path::{Path, PathBuf};
use std::time::Instant;

use ferry::cache::manifest::EncoderKind;
use ferry::source::{self, Item, Selector};
use ferry::spec::Spec;
use ferry::tokenizer::{Encoders, Ranks};
use rayon::prelude::*;

/// CPU time of this process (all threads), which contention on the machine does not inflate.
fn cpu_seconds() -> f64 {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    time.tv_sec as f64 + time.tv_nsec as f64 * 1e-9
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    match args.first().map(String::as_str) {
        Some("--cores") => return cores::run(&args[1..]),
        Some("--llama3-tokenizer") => return cores::write_llama3_style(Ranks::Cl100kBase, args.get(1).map(Path::new)),
        Some("--long-word") => return cores::long_word(&args[1..]),
        Some("--build") => return cores::build_only(&args[1..]),
        Some("--fast") => return cores::fast_only(&args[1..]),
        Some("--gpt2-tokenizer") => return cores::write_gpt2(args.get(1).map(Path::new)),
        Some("--o200k-tokenizer") => return cores::write_llama3_style(Ranks::O200kBase, args.get(1).map(Path::new)),
        _ => {}
    }
    let Some((spec_path, shards)) = args.split_first() else {
        eprintln!("usage: cargo bench --bench encoders -- SPEC SHARD...");
        return Ok(());
    };
    let spec = Spec::load(Path::new(spec_path))?;
    let encoders = Encoders::load(&spec)?;
    let selector = Selector::new(&spec.source.text_field, &spec.filter);
    // Reading alone (decompression and the text field of each line), on the same
    // cores as the encoders: what a build does besides encoding that cannot be
    // made to cost nothing, so it bounds how close a build comes to the encoder.
    // Timed on a pass that lets each text go once read, as a build does: holding
    // them all would charge first touches of hundreds of MB to reading.
    let read_shard = |shard: &String, keep: bool| -> anyhow::Result<Vec<String>> {
        let mut reader = source::open(&PathBuf::from(shard), spec.source.format, &selector)?;
        let mut texts = Vec::new();
        while let Some(item) = reader.next_item()? {
            if let Item::Document(document) = item
                && keep
            {
                texts.push(document.text);
            }
        }
        Ok(texts)
    };
    let (started, cpu_started) = (Instant::now(), cpu_seconds());
    shards.par_iter().try_for_each(|shard| read_shard(shard, false).map(drop))?;
    let (read_seconds, read_cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu_started);
    let per_shard: Vec<Vec<String>> =
        shards.par_iter().map(|shard| read_shard(shard, true)).collect::<anyhow::Result<_>>()?;
    let texts: Vec<String> = per_shard.into_iter().flatten().collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    let mut report =
        serde_json::json!({"documents": texts.len(), "text_bytes": bytes, "threads": rayon::current_num_threads()});
    report["read"] = serde_json::json!({"seconds": read_seconds, "cpu_seconds": read_cpu});
    for (kind, label) in
        [(EncoderKind::FastBytelevelBpe, "fast_bytelevel_bpe"), (EncoderKind::Tokenizers, "tokenizers")]
    {
        if kind == EncoderKind::FastBytelevelBpe && !encoders.fast_available() {
            continue;
        }
        let (started, cpu_started) = (Instant::now(), cpu_seconds());
        let tokens: usize =
            texts.par_iter().map(|text| encoders.encode(text, kind).map(|ids| ids.len()).unwrap_or(0)).sum();
        let (seconds, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu_started);
        report[label] = serde_json::json!({
            "tokens": tokens, "seconds": seconds, "cpu_seconds": cpu,
            "tokens_per_second": tokens as f64 / seconds, "tokens_per_cpu_second": tokens as f64 / cpu,
        });
    }
    println!("{report}");
    Ok(())
}
