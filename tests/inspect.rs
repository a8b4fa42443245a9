//! `ferry inspect` on the demo entry: its decoded rows are the input documents with
//! EOS between them, and its counts are the manifest's, consistent with each other.

mod common;

use std::path::Path;

use common::{TestEnv, read_manifest};
use serde_json::Value;

/// The demo's kept documents of its first train shard, in order (the spec keeps every
/// subset but EuroParl).
fn first_shard_documents(corpus: &Path) -> Vec<String> {
    let mut shards: Vec<_> = std::fs::read_dir(corpus)
        .unwrap()
        .map(|item| item.unwrap().path())
        .filter(|path| path.file_name().unwrap().to_string_lossy().starts_with("train-"))
        .collect();
    shards.sort();
    let bytes = zstd::stream::decode_all(std::fs::File::open(&shards[0]).unwrap()).unwrap();
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record["meta"]["pile_set_name"] != "EuroParl" && !record["text"].as_str().unwrap().is_empty())
        .map(|record| record["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn inspect_decodes_the_demo_rows_back_to_its_documents_and_counts_as_the_manifest() {
    let env = TestEnv::new();
    let demo = env.path("demo");
    env.run_ok(&["demo", "--dir", demo.to_str().unwrap()]);
    let cache = demo.join("cache");
    let args = ["inspect", "pile-demo-gpt2-1024", "--cache", cache.to_str().unwrap(), "--rows", "2"];
    let report = env.json(&[&args[..], &["--json"]].concat());
    let manifest = read_manifest(&cache.join("entries").join(&report["fingerprint"].as_str().unwrap()[..16]));

    for (split, view) in report["splits"].as_object().unwrap() {
        let recorded = &manifest["splits"][split];
        for count in ["rows", "documents", "tokens"] {
            assert_eq!(view[count], recorded[count], "{split} {count}");
        }
        let histogram: u64 =
            view["document_lengths"].as_array().unwrap().iter().map(|b| b["documents"].as_u64().unwrap()).sum();
        assert_eq!(histogram, recorded["documents"].as_u64().unwrap(), "{split}: the histogram counts every document");
        // Every kept document has a source here, and concat keeps all its tokens but the
        // shard remainders: the per-source tokens add up to exactly that.
        let by_source: u64 = view["tokens_by_source"].as_object().unwrap().values().map(|t| t.as_u64().unwrap()).sum();
        let expected = recorded["tokens"].as_u64().unwrap() + recorded["remainder_tokens"].as_u64().unwrap();
        assert_eq!(by_source, expected, "{split}: tokens by source");
        assert!(view["tokens_by_source"].get("EuroParl").is_none() && view["tokens_by_source"].get("Github").is_some());
    }

    assert_eq!(report["split"], "train");
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let documents = first_shard_documents(&demo.join("corpus"));
    let text = rows[0]["text"].as_str().unwrap();
    let pieces: Vec<&str> = text.split("<|endoftext|>").collect();
    assert!(pieces.len() >= 2, "row 0 holds no document boundary: {text}");
    let (last, whole) = pieces.split_last().unwrap();
    for (index, piece) in whole.iter().enumerate() {
        assert_eq!(*piece, documents[index], "document {index} of row 0 differs from the input");
    }
    // The row ends inside the next document (possibly mid-character).
    let next = &documents[whole.len()];
    assert!(next.starts_with(last.trim_end_matches('\u{fffd}')), "row 0 ends with {last:?}, not a start of {next:?}");

    let shown = env.run_ok(&args);
    assert!(shown.contains("── train row 0 (1024 tokens) ──"), "{shown}");
    assert!(
        shown.contains(&format!("{}⟦<|endoftext|>⟧", documents[0])),
        "document 0 and its EOS are not shown:\n{shown}"
    );
    assert!(shown.contains("train: tokens by source") && shown.contains("Github"), "{shown}");
}

#[test]
fn inspect_shows_a_token_stores_documents_and_a_views_store_and_packing() {
    let env = TestEnv::new();
    let demo = env.path("demo");
    env.run_ok(&["demo", "--dir", demo.to_str().unwrap()]);
    let cache = demo.join("cache");
    let cache_args = ["--cache", cache.to_str().unwrap()];
    let view = env.json(&[&["inspect", "pile-demo-gpt2-best-fit-2048", "--json"][..], &cache_args].concat());
    assert_eq!(view["kind"], "view");
    assert_eq!(view["packing"]["pack"], "best_fit", "{view}");
    assert_eq!(view["token_store"]["present"], true, "{view}");
    let store = view["token_store"]["fingerprint"].as_str().unwrap()[..16].to_string();

    let args = [&["inspect", &store, "--rows", "3"][..], &cache_args].concat();
    let report = env.json(&[&args[..], &["--json"]].concat());
    assert_eq!(report["kind"], "tokens");
    let documents = first_shard_documents(&demo.join("corpus"));
    for (index, row) in report["rows"].as_array().unwrap().iter().enumerate() {
        // A token store's rows are its documents, each with its EOS.
        assert_eq!(row["text"].as_str().unwrap(), format!("{}<|endoftext|>", documents[index]), "document {index}");
    }
    let shown = env.run_ok(&args);
    assert!(shown.contains("token store") && shown.contains("── train document 0 ("), "{shown}");
    let shown = env.run_ok(&[&["inspect", "pile-demo-gpt2-best-fit-2048"][..], &cache_args].concat());
    assert!(
        shown.contains(&format!("view of token store {store}")) && shown.contains("best_fit, rows of 2048"),
        "{shown}"
    );
}

#[test]
fn inspect_names_what_is_missing() {
    let env = TestEnv::new();
    let output = env.run(&["inspect", "no-such-entry"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no entry no-such-entry in") && stderr.contains("ferry status"), "{stderr}");
}
