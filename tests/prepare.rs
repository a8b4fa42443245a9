//! `ferry prepare`: caching, fingerprint stability, determinism.

mod common;

use std::time::SystemTime;

use std::path::Path;

use common::{TestEnv, entry_data_files, entry_rows, gpt2_spec};

const SMALL_SEQ: &str = "[sequence]\nseq_len = 64\n";

#[test]
fn prepare_builds_once_then_hits_the_cache() {
    let env = TestEnv::new();
    env.shards("data", "train", 3, 40, 1);
    let spec = env.write("spec.toml", gpt2_spec("small", "data/*.jsonl.zst", SMALL_SEQ));
    let first = env.prepare(&spec, &[]);
    assert_eq!(first["built"], true);
    assert_eq!(first["shards_tokenized_here"], 3);
    let second = env.prepare(&spec, &[]);
    assert_eq!(second["built"], false);
    assert_eq!(second["shards_tokenized_here"], 0);
    assert_eq!(first["fingerprint"], second["fingerprint"]);
    let fingerprint = first["fingerprint"].as_str().unwrap();
    let entry = env.cache().join("entries").join(&fingerprint[..16]);
    assert!(entry.join("manifest.json").is_file());
    assert!(entry.join("dataset_dict.json").is_file());
    assert!(entry.join("train/state.json").is_file());
    assert_eq!(
        std::fs::read_link(env.cache().join("by-name/small")).unwrap(),
        std::path::Path::new("../entries").join(&fingerprint[..16])
    );
    assert!(!env.cache().join("building").join(&fingerprint[..16]).exists(), "build directory removed after publish");
    let rows = first["totals"]["rows"].as_u64().unwrap();
    assert!(rows > 10, "{first}");
    assert_eq!(first["totals"]["tokens"].as_u64().unwrap(), rows * 64);
}

#[test]
fn output_is_byte_identical_whatever_the_thread_count_and_cache_location() {
    let env = TestEnv::new();
    env.shards("data", "train", 4, 60, 2);
    let spec = env.write("spec.toml", gpt2_spec("t", "data/*.jsonl.zst", SMALL_SEQ));
    let one = env.prepare(&spec, &["--jobs", "1", "--cache", env.path("cache-one").to_str().unwrap()]);
    let all = env.prepare(&spec, &["--jobs", "4", "--cache", env.path("elsewhere/cache-all").to_str().unwrap()]);
    assert_eq!(one["fingerprint"], all["fingerprint"]);
    let files_one = entry_data_files(std::path::Path::new(one["entry"].as_str().unwrap()));
    let files_all = entry_data_files(std::path::Path::new(all["entry"].as_str().unwrap()));
    assert!(files_one.iter().any(|(name, _)| name.ends_with(".arrow")));
    assert_eq!(files_one, files_all);
}

fn fingerprint_of(env: &TestEnv, spec_text: &str) -> String {
    let spec = env.write("variant.toml", spec_text);
    env.prepare(&spec, &[])["fingerprint"].as_str().unwrap().to_string()
}

#[test]
fn fingerprint_ignores_name_touch_and_location_but_not_content_or_output_fields() {
    let env = TestEnv::new();
    let shards = env.shards("data", "train", 2, 20, 3);
    let base_text = gpt2_spec("base", "data/*.jsonl.zst", SMALL_SEQ);
    let base = fingerprint_of(&env, &base_text);

    assert_eq!(fingerprint_of(&env, &base_text.replace("\"base\"", "\"renamed\"")), base, "name is cosmetic");
    // Re-touching an input without changing its bytes.
    let file = std::fs::File::options().write(true).open(&shards[0]).unwrap();
    file.set_modified(SystemTime::now() + std::time::Duration::from_secs(5)).unwrap();
    assert_eq!(fingerprint_of(&env, &base_text), base, "mtime alone does not matter");
    // The same inputs reached through another path.
    std::fs::rename(env.path("data"), env.path("moved")).unwrap();
    assert_eq!(fingerprint_of(&env, &base_text.replace("data/", "moved/")), base, "input location does not matter");
    std::fs::rename(env.path("moved"), env.path("data")).unwrap();

    let variants = [
        base_text.replace("seq_len = 64", "seq_len = 65"),
        format!("{base_text}[output]\ntoken_type = \"uint16\"\n"),
        base_text.replace("seq_len = 64", "seq_len = 64\npack = \"truncate\""),
        base_text.replace("seq_len = 64", "seq_len = 64\nlabels = true"),
        format!("{base_text}[filter]\nmin_chars = 5\n"),
        base_text.replace("builtin = \"gpt2\"", "builtin = \"gpt2\"\nensure_bos_eos = false"),
    ];
    for variant in &variants {
        assert_ne!(fingerprint_of(&env, variant), base, "spec change must change the fingerprint:\n{variant}");
    }

    // One byte of input.
    let mut bytes = std::fs::read(&shards[1]).unwrap();
    let mut decoded = zstd::decode_all(&bytes[..]).unwrap();
    let position = decoded.iter().position(|&b| b == b'e').unwrap();
    decoded[position] = b'a';
    bytes = zstd::encode_all(&decoded[..], 3).unwrap();
    std::fs::write(&shards[1], bytes).unwrap();
    assert_ne!(fingerprint_of(&env, &base_text), base, "input bytes matter");
}

#[test]
fn fingerprint_follows_the_tokenizer_content_not_its_formatting() {
    let env = TestEnv::new();
    env.shards("data", "train", 1, 20, 4);
    let gpt2: serde_json::Value = serde_json::from_str(ferry::tokenizer::builtin_gpt2_json().unwrap()).unwrap();
    env.write("tok/compact.json", gpt2.to_string());
    env.write("tok/pretty.json", serde_json::to_string_pretty(&gpt2).unwrap());
    let mut smaller = gpt2.clone();
    smaller["model"]["merges"].as_array_mut().unwrap().pop();
    env.write("tok/smaller.json", smaller.to_string());
    let spec_with = |path: &str| {
        gpt2_spec("t", "data/*.jsonl.zst", SMALL_SEQ).replace("builtin = \"gpt2\"", &format!("path = \"{path}\""))
    };
    let compact = fingerprint_of(&env, &spec_with("tok/compact.json"));
    assert_eq!(fingerprint_of(&env, &spec_with("tok/pretty.json")), compact);
    assert_ne!(fingerprint_of(&env, &spec_with("tok/smaller.json")), compact);
}

#[test]
fn cache_hit_of_a_thousand_shards_reads_no_shard_bytes() {
    let env = TestEnv::new();
    let mut shards = Vec::new();
    for i in 0..1000 {
        let line = format!(
            "{{\"text\": \"document number {i} of the corpus\", \"meta\": {{\"pile_set_name\": \"Pile-CC\"}}}}\n"
        );
        shards.push(env.write(&format!("data/{i:04}.jsonl"), line));
    }
    let spec = env.write("spec.toml", gpt2_spec("many", "data/*.jsonl", "[sequence]\npack = \"none\"\n"));
    let first = env.prepare(&spec, &[]);
    assert_eq!(first["built"], true);
    assert_eq!(first["totals"]["rows"], 1000);
    // Same size, same mtime, garbage bytes: only a re-read could notice.
    for shard in &shards {
        let meta = std::fs::metadata(shard).unwrap();
        std::fs::write(shard, vec![b'#'; meta.len() as usize]).unwrap();
        std::fs::File::options().write(true).open(shard).unwrap().set_modified(meta.modified().unwrap()).unwrap();
    }
    let second = env.prepare(&spec, &[]);
    assert_eq!(second["built"], false);
    assert_eq!(second["fingerprint"], first["fingerprint"]);
}

#[test]
fn a_cache_of_another_layout_version_is_refused_not_misread() {
    let env = TestEnv::new();
    env.shards("data", "train", 1, 10, 5);
    let spec = env.write("spec.toml", gpt2_spec("v", "data/*.jsonl.zst", SMALL_SEQ));
    env.prepare(&spec, &[]);
    assert_eq!(std::fs::read_to_string(env.cache().join("layout-version")).unwrap().trim(), "1");
    std::fs::write(env.cache().join("layout-version"), "99\n").unwrap();
    let output = env.run(&["prepare", spec.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", common::describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("layout version 99"), "{}", common::describe(&output));
}

/// Documents enough for several encoding batches in one shard, so batches are
/// encoded concurrently and must still be written in input order.
const SEVERAL_BATCHES: usize = 2800;

/// The CPUs this process may use: a pool of this many threads reads each shard
/// on the pool thread that runs it, a smaller one on a reading thread of its own.
fn usable_cpus() -> String {
    ferry::settings::usable_cpus().to_string()
}

#[test]
fn one_shard_output_is_byte_identical_whatever_the_thread_count() {
    let env = TestEnv::new();
    env.shards("data", "train", 1, SEVERAL_BATCHES, 5);
    let spec = env.write("spec.toml", gpt2_spec("one", "data/*.jsonl.zst", SMALL_SEQ));
    let runs: Vec<serde_json::Value> = ["1".to_string(), "2".into(), "5".into(), usable_cpus()]
        .iter()
        .map(|jobs| {
            let cache = env.path(&format!("cache-{jobs}"));
            env.prepare(&spec, &["--jobs", jobs, "--cache", cache.to_str().unwrap()])
        })
        .collect();
    let files: Vec<_> =
        runs.iter().map(|run| entry_data_files(std::path::Path::new(run["entry"].as_str().unwrap()))).collect();
    assert!(files[0].iter().any(|(name, _)| name.ends_with(".arrow")));
    assert_eq!(files[0], files[1], "1 vs 2 threads");
    assert_eq!(files[0], files[2], "1 vs 5 threads");
    assert_eq!(files[0], files[3], "1 thread (reading on its own thread) vs one per CPU (reading on the pool)");
    assert_eq!(runs[0]["totals"]["documents"].as_u64(), Some(SEVERAL_BATCHES as u64), "{}", runs[0]);
}

#[test]
fn one_shard_gives_the_rows_of_the_same_documents_split_in_four() {
    let env = TestEnv::new();
    let quarters = env.shards("four", "train", 4, SEVERAL_BATCHES / 4, 6);
    let mut joined = Vec::new();
    for quarter in &quarters {
        joined.extend(zstd::decode_all(std::fs::File::open(quarter).unwrap()).unwrap());
    }
    env.write("one/train-00.jsonl.zst", zstd::encode_all(&joined[..], 3).unwrap());
    // One row per document: packing across the shard boundary is the only
    // intended difference between the two layouts.
    let one_row_each = "[sequence]\npack = \"none\"\n";
    let one = env.write("one.toml", gpt2_spec("one", "one/*.jsonl.zst", one_row_each));
    let four = env.write("four.toml", gpt2_spec("four", "four/*.jsonl.zst", one_row_each));
    let one = env.prepare(&one, &["--jobs", "3"]);
    let four = env.prepare(&four, &["--jobs", "3"]);
    assert_eq!(one["shards_tokenized_here"], 1);
    assert_eq!(four["shards_tokenized_here"], 4);
    let rows = entry_rows(Path::new(one["entry"].as_str().unwrap()));
    assert_eq!(rows.len(), SEVERAL_BATCHES);
    assert!(rows == entry_rows(Path::new(four["entry"].as_str().unwrap())), "same rows in the same order");
    assert_eq!(one["totals"]["tokens"], four["totals"]["tokens"]);
}

#[test]
fn a_bad_record_in_a_late_batch_fails_naming_its_line_whatever_the_thread_count() {
    let env = TestEnv::new();
    let good = |from: usize, count: usize| -> String {
        (from..from + count).map(|i| format!("{{\"text\": \"document number {i} of a long shard\"}}\n")).collect()
    };
    let text = format!("{}{{\"text\": broken\n{}", good(0, 2500), good(2501, 300));
    env.write("data/long.jsonl", &text);
    let spec = env.write("spec.toml", gpt2_spec("bad", "data/*.jsonl", SMALL_SEQ));
    // One per CPU reads on the pool's threads; fewer read on a thread of their own.
    for jobs in ["1".to_string(), "3".into(), usable_cpus()] {
        let output = env.run(&["prepare", spec.to_str().unwrap(), "--jobs", &jobs]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{}", common::describe(&output));
        assert!(stderr.contains("long.jsonl line 2501") && stderr.contains("malformed JSON"), "{stderr}");
        assert!(
            !env.cache().join("entries").exists()
                || std::fs::read_dir(env.cache().join("entries")).unwrap().next().is_none()
        );
    }
    let skip = env.write(
        "skip.toml",
        gpt2_spec("skip", "data/*.jsonl", &format!("{SMALL_SEQ}[source]\non_bad_record = \"skip\"\n")),
    );
    let summary = env.prepare(&skip, &["--jobs", "3"]);
    assert_eq!(summary["totals"]["documents"].as_u64(), Some(2800), "{summary}");
}
