//! Token stores and views: a spec tokenizes once into a token store, and every other
//! packing, length, column or format of it is a view made without opening an input
//! or running a tokenizer, byte-identical to the same view built from scratch.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use common::observe::{entry_files, prepare_traced, scramble};
use common::{TestEnv, describe, gpt2_spec, python, python_script, read_manifest};

const BASE: &str = "[sequence]\nseq_len = 64\n";

/// What follows tokenizing, each changed on its own or together.
const VIEWS: [&str; 8] = [
    "[sequence]\nseq_len = 32\n",
    "[sequence]\nseq_len = 64\npack = \"truncate\"\nlabels = true\nattention_mask = true\n",
    "[sequence]\npack = \"none\"\n[output]\ntoken_type = \"uint16\"\nformats = [\"flat\"]\n",
    "[sequence]\nseq_len = 64\n[output]\nformats = [\"hf\", \"megatron\", \"flat\"]\ntarget_shard_bytes = \"1MiB\"\n",
    "[sequence]\nseq_len = 48\nposition_ids = true\n[output]\nformats = [\"megatron\", \"flat\"]\n",
    "[sequence]\nseq_len = 64\npack = \"best_fit\"\nlabels = true\nattention_mask = true\nposition_ids = true\n",
    "[sequence]\nseq_len = 64\npack = \"best_fit\"\n[output]\nformats = [\"megatron\", \"flat\"]\n",
    "[sequence]\nseq_len = 40\nshuffle_seed = 11\nposition_ids = true\n",
];

/// A corpus of two splits, its base spec prepared; returns the corpus's input files.
fn tokenized_once(env: &TestEnv) -> Vec<PathBuf> {
    let mut inputs = env.shards("data", "train", 3, 80, 31);
    inputs.extend(env.shards("data", "val", 1, 30, 32));
    let base = env.write("base.toml", spec_text("base", BASE));
    let prepared = env.prepare(&base, &[]);
    assert_eq!(prepared["token_store"]["tokenized"], true, "{prepared}");
    assert_eq!(prepared["shards_tokenized_here"], 4);
    inputs
}

fn spec_text(name: &str, view: &str) -> String {
    gpt2_spec(name, "data/train-*.jsonl.zst", view)
        .replace("[tokenizer]", "validation = \"data/val-*.jsonl.zst\"\n[tokenizer]")
}

#[test]
fn a_new_view_opens_no_input_tokenizes_nothing_and_equals_a_fresh_build() {
    let env = TestEnv::new();
    let inputs = tokenized_once(&env);
    let restores: Vec<_> = inputs.iter().map(|input| scramble(input)).collect();
    let mut views = Vec::new();
    for (index, view) in VIEWS.iter().enumerate() {
        let spec = env.write(&format!("view-{index}.toml"), spec_text(&format!("view-{index}"), view));
        let (prepared, opened) = prepare_traced(&env, &spec, &[]);
        assert_eq!(prepared["built"], true, "{view}: {prepared}");
        assert_eq!(prepared["token_store"]["tokenized"], false, "{view}: {prepared}");
        assert_eq!(prepared["shards_tokenized_here"], 0, "{view}");
        for input in &inputs {
            let name = input.file_name().unwrap().to_str().unwrap();
            let reads: Vec<&String> = opened.iter().filter(|line| line.contains(name)).collect();
            assert!(reads.is_empty(), "{view}: the view opened an input: {reads:?}");
        }
        views.push((spec, prepared));
    }
    restores.into_iter().for_each(|restore| restore());
    for (index, (spec, prepared)) in views.iter().enumerate() {
        let fresh_cache = env.path(&format!("fresh-{index}"));
        let fresh = env.prepare(spec, &["--cache", fresh_cache.to_str().unwrap()]);
        assert_eq!(fresh["token_store"]["tokenized"], true);
        assert_eq!(fresh["fingerprint"], prepared["fingerprint"], "{}", VIEWS[index]);
        let (made, built) = (Path::new(prepared["entry"].as_str().unwrap()), fresh["entry"].as_str().unwrap());
        let files = entry_files(made);
        assert!(files.iter().any(|(name, _)| name.ends_with(".arrow")));
        assert_eq!(files, entry_files(Path::new(built)), "{}: not byte-identical to a fresh build", VIEWS[index]);
    }
}

/// A view's Arrow column as integers, row by row, over its splits in name order.
fn column(entry: &Path, name: &str) -> Vec<Vec<i64>> {
    ["train", "validation"].iter().flat_map(|split| split_column(entry, split, name)).collect()
}

/// One split's Arrow column as integers, row by row.
fn split_column(entry: &Path, split: &str, name: &str) -> Vec<Vec<i64>> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int8Type, Int32Type, UInt16Type};
    let mut rows = Vec::new();
    let Ok(listing) = std::fs::read_dir(entry.join(split)) else { return Vec::new() };
    let mut files: Vec<PathBuf> = listing.flatten().map(|e| e.path()).collect();
    files.sort();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "arrow")) {
        let reader = arrow_ipc::reader::StreamReader::try_new(std::fs::File::open(file).unwrap(), None).unwrap();
        for batch in reader {
            let lists = batch.unwrap().column_by_name(name).unwrap().as_list::<i32>().clone();
            for row in 0..lists.len() {
                let values = lists.value(row);
                rows.push(match values.data_type() {
                    arrow_schema::DataType::Int8 => {
                        values.as_primitive::<Int8Type>().values().iter().map(|&v| v as i64).collect()
                    }
                    arrow_schema::DataType::UInt16 => {
                        values.as_primitive::<UInt16Type>().values().iter().map(|&v| v as i64).collect()
                    }
                    _ => values.as_primitive::<Int32Type>().values().iter().map(|&v| v as i64).collect(),
                });
            }
        }
    }
    rows
}

const EOS: i64 = 50256;

#[test]
fn position_ids_restart_at_each_document_inside_a_row() {
    let env = TestEnv::new();
    tokenized_once(&env);
    let spec = env.write("positions.toml", spec_text("positions", VIEWS[4]));
    let prepared = env.prepare(&spec, &[]);
    let view = Path::new(prepared["entry"].as_str().unwrap());
    let (ids, positions) = (column(view, "input_ids"), column(view, "position_ids"));
    // GPT-2's documents each end in EOS: a position restarts right after one, and only there.
    let mut resets_inside = 0;
    for (row, (ids, positions)) in ids.iter().zip(&positions).enumerate() {
        assert_eq!(positions.len(), ids.len());
        for i in 0..ids.len() {
            let restarts = i == 0 || ids[i - 1] == EOS;
            assert_eq!(positions[i] == 0, restarts, "row {row} at {i}: {positions:?}");
            if i > 0 && restarts {
                resets_inside += 1;
            } else if i > 0 {
                assert_eq!(positions[i], positions[i - 1] + 1);
            }
        }
    }
    assert!(resets_inside > 10, "documents start inside rows: {resets_inside}");
    let Some(python) = python() else { return };
    let store = prepared["token_store"]["entry"].as_str().unwrap();
    let report = check_views(&python, "concat", store, view.to_str().unwrap());
    assert!(report["result"]["train"]["resets"].as_u64().unwrap() > 10, "{report}");
}

fn check_views(python: &Path, check: &str, first: &str, view: &str) -> serde_json::Value {
    let output = Command::new(python)
        .arg(python_script("check_views.py"))
        .args(["--check", check, first, view])
        .output()
        .unwrap();
    assert!(output.status.success(), "check_views.py --check {check}:\n{}", describe(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn best_fit_keeps_every_token_cuts_only_long_documents_and_reports_its_fill() {
    let env = TestEnv::new();
    tokenized_once(&env);
    let spec = env.write("best.toml", spec_text("best", VIEWS[5]));
    let prepared = env.prepare(&spec, &[]);
    let view = Path::new(prepared["entry"].as_str().unwrap());
    let none = env.write("none.toml", spec_text("none", "[sequence]\npack = \"none\"\n"));
    let documents = column(Path::new(env.prepare(&none, &[])["entry"].as_str().unwrap()), "input_ids");
    let (ids, mask, labels) = (column(view, "input_ids"), column(view, "attention_mask"), column(view, "labels"));
    let mut kept = 0;
    for (row, ids) in ids.iter().enumerate() {
        assert_eq!(ids.len(), 64, "row {row}");
        let content = mask[row].iter().filter(|&&m| m == 1).count();
        assert!(mask[row][content..].iter().all(|&m| m == 0), "padding only at the end of row {row}");
        assert!(ids[content..].iter().all(|&id| id == EOS), "padded with EOS (GPT-2 has no pad token)");
        assert!(labels[row][content..].iter().all(|&l| l == -100));
        assert_eq!(labels[row][..content], ids[..content]);
        kept += content;
    }
    let total: usize = documents.iter().map(Vec::len).sum();
    assert_eq!(kept, total, "every token of every document is in a row");
    let manifest = read_manifest(view);
    let packing = &manifest["packing"];
    let fill = kept as f64 / (ids.len() * 64) as f64;
    assert!((packing["fill"].as_f64().unwrap() - fill).abs() < 1e-12, "{packing}");
    let long = documents.iter().filter(|d| d.len() > 64).count() as u64;
    assert_eq!(packing["documents_split"], long, "{packing}");
    assert!(fill > 0.9, "{packing}");
    let Some(python) = python() else { return };
    let store = prepared["token_store"]["entry"].as_str().unwrap();
    let report = check_views(&python, "best_fit", store, view.to_str().unwrap());
    assert!(report["result"]["fill"].as_f64().unwrap() > 0.9, "{report}");
}

#[test]
fn a_shuffled_view_is_the_same_bytes_on_one_and_four_threads_and_a_permutation_of_the_rows() {
    let env = TestEnv::new();
    tokenized_once(&env);
    let plain = env.write("plain.toml", spec_text("plain", "[sequence]\nseq_len = 40\n"));
    let shuffled = env.write("shuffled.toml", spec_text("shuffled", "[sequence]\nseq_len = 40\nshuffle_seed = 5\n"));
    let one = env.prepare(&shuffled, &["--jobs", "1"]);
    let other_cache = env.path("cache-four");
    let four = env.prepare(&shuffled, &["--jobs", "4", "--cache", other_cache.to_str().unwrap()]);
    let entry = |prepared: &serde_json::Value| PathBuf::from(prepared["entry"].as_str().unwrap());
    assert_eq!(entry_files(&entry(&one)), entry_files(&entry(&four)));
    let plain = entry(&env.prepare(&plain, &[]));
    let (before, after) = (column(&plain, "input_ids"), column(&entry(&one), "input_ids"));
    let (mut sorted_before, mut sorted_after) = (before.clone(), after.clone());
    sorted_before.sort();
    sorted_after.sort();
    assert_eq!(sorted_before, sorted_after, "the same rows");
    assert_ne!(before, after, "in another order");
    let reseeded = env.write("reseeded.toml", spec_text("reseeded", "[sequence]\nseq_len = 40\nshuffle_seed = 6\n"));
    assert_ne!(column(&entry(&env.prepare(&reseeded, &[])), "input_ids"), after, "another seed, another order");
    let Some(python) = python() else { return };
    check_views(&python, "shuffled", plain.to_str().unwrap(), entry(&one).to_str().unwrap());
}

#[test]
fn staging_a_view_copies_its_own_files_and_links_its_token_store() {
    let env = TestEnv::new();
    tokenized_once(&env);
    let spec = env.write("staged.toml", spec_text("staged", "[sequence]\nseq_len = 32\n"));
    let prepared = env.prepare(&spec, &[]);
    let dest = env.path("node/ferry");
    let report = env.json(&["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap(), "--json"]);
    let view = Path::new(prepared["entry"].as_str().unwrap());
    let own: u64 = read_manifest(view)["files"].as_array().unwrap().iter().map(|f| f["size"].as_u64().unwrap()).sum();
    let manifest_size = std::fs::metadata(view.join("manifest.json")).unwrap().len();
    // Copied, or hard-linked to an identical file copied.
    assert_eq!(report["bytes_total"].as_u64().unwrap(), own + manifest_size, "{report}");
    assert_eq!(report["bytes_done"], report["bytes_total"], "{report}");
    let entries = dest.join("entries");
    let short = |value: &serde_json::Value| value.as_str().unwrap()[..16].to_string();
    let store = entries.join(short(&prepared["token_store"]["fingerprint"]));
    assert!(store.symlink_metadata().unwrap().file_type().is_symlink(), "the token store is a link in the mirror");
    assert!(entries.join(short(&prepared["fingerprint"])).symlink_metadata().unwrap().is_dir());
    env.run_ok(&["verify", "--dest", dest.to_str().unwrap()]);
}

/// Marks an entry's last use `days` ago.
fn used_days_ago(env: &TestEnv, short: &str, days: u64) {
    let marker = env.cache().join("used").join(short);
    let file = std::fs::File::options().write(true).open(marker).unwrap();
    file.set_modified(SystemTime::now() - std::time::Duration::from_secs(days * 86400)).unwrap();
}

#[test]
fn a_view_whose_token_store_was_collected_loads_and_stages_and_the_next_view_tokenizes_once() {
    let env = TestEnv::new();
    env.shards("data", "train", 2, 50, 41);
    let spec = env.write("a.toml", gpt2_spec("a", "data/*.jsonl.zst", BASE));
    let prepared = env.prepare(&spec, &[]);
    let store = prepared["token_store"]["fingerprint"].as_str().unwrap()[..16].to_string();
    used_days_ago(&env, &store, 40);
    let report = env.json(&["gc", "--max-age", "30d", "--json"]);
    assert_eq!(report["removed"].as_array().unwrap().len(), 1, "{report}");
    assert!(report["removed"][0]["path"].as_str().unwrap().ends_with(&store), "{report}");
    let status = env.json(&["status", "--json"]);
    let view = &status["entries"][0];
    assert_eq!((view["kind"].as_str(), view["token_store_present"].as_bool()), (Some("view"), Some(false)), "{status}");
    assert!(env.run_ok(&["status"]).contains("(gone)"));
    let dest = env.path("node/ferry");
    env.run_ok(&["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap(), "--verify"]);
    assert_eq!(env.prepare(&spec, &[])["built"], false, "the view is still the spec's");
    if let Some(python) = python() {
        let script = "import datasets, sys; print(len(datasets.load_from_disk(sys.argv[1])['train']))";
        let staged = dest.join("by-name/a");
        let output = Command::new(python).args(["-c", script, staged.to_str().unwrap()]).output().unwrap();
        assert!(output.status.success(), "{}", describe(&output));
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), prepared["totals"]["rows"].to_string());
    }
    let longer = env.write("b.toml", gpt2_spec("b", "data/*.jsonl.zst", "[sequence]\nseq_len = 128\n"));
    let rebuilt = env.prepare(&longer, &[]);
    assert_eq!(
        (rebuilt["token_store"]["tokenized"].as_bool(), rebuilt["shards_tokenized_here"].as_u64()),
        (Some(true), Some(2))
    );
    let again = env.write("c.toml", gpt2_spec("c", "data/*.jsonl.zst", "[sequence]\nseq_len = 256\n"));
    assert_eq!(env.prepare(&again, &[])["token_store"]["tokenized"], false, "tokenized once");
}

#[test]
fn an_entry_made_before_token_stores_is_listed_staged_verified_and_collected() {
    let env = TestEnv::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/entry-before-token-stores");
    let short = "875cda3a50005d46";
    let entry = env.cache().join("entries").join(short);
    for file in walkdir::WalkDir::new(fixture.join("entries")).into_iter().flatten().filter(|e| e.file_type().is_file())
    {
        let target = env.cache().join(file.path().strip_prefix(&fixture).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(file.path(), target).unwrap();
    }
    let status = env.json(&["status", "--json"]);
    let listed = &status["entries"][0];
    assert_eq!(
        (listed["short"].as_str(), listed["state"].as_str(), listed["kind"].as_str()),
        (Some(short), Some("ready"), Some("view"))
    );
    assert!(listed["token_store"].is_null(), "{status}");
    assert!(env.run_ok(&["status"]).contains("entry"));
    env.run_ok(&["verify", short]);
    let dest = env.path("node/ferry");
    env.run_ok(&["stage", "--entry", short, "--dest", dest.to_str().unwrap(), "--verify"]);
    env.run_ok(&["verify", "--dest", dest.to_str().unwrap()]);
    env.run_ok(&["inspect", short]);

    // The same spec today: a token store and a view whose files are the old entry's, byte for byte.
    std::fs::copy(fixture.join("train.jsonl"), env.path("train.jsonl")).unwrap();
    let spec = env.write("spec.toml", std::fs::read_to_string(fixture.join("spec.toml")).unwrap());
    let view = PathBuf::from(env.prepare(&spec, &[])["entry"].as_str().unwrap());
    let old: Vec<(String, Vec<u8>)> =
        entry_files(&entry).into_iter().filter(|(name, _)| !name.ends_with("state.json")).collect();
    let new: Vec<(String, Vec<u8>)> =
        entry_files(&view).into_iter().filter(|(name, _)| old.iter().any(|(o, _)| o == name)).collect();
    assert_eq!(old.len(), 8);
    assert_eq!(old, new, "the rows, Megatron and flat files of before");

    used_days_ago(&env, short, 100);
    let report = env.json(&["gc", "--max-age", "30d", "--json"]);
    assert!(report["removed"][0]["path"].as_str().unwrap().ends_with(short), "{report}");
    assert!(!entry.exists());
}

#[test]
fn impossible_options_and_a_damaged_token_store_are_errors_that_say_what_to_do() {
    let env = TestEnv::new();
    env.shards("data", "train", 2, 40, 51);
    let bad = env
        .write("bad.toml", gpt2_spec("bad", "data/*.jsonl.zst", "[sequence]\npack = \"none\"\nposition_ids = true\n"));
    let output = env.run(&["prepare", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad.toml") && stderr.contains("position_ids"), "{stderr}");
    assert!(!env.cache().join("entries").exists(), "nothing made");

    let spec = env.write("a.toml", gpt2_spec("a", "data/*.jsonl.zst", BASE));
    let store = PathBuf::from(env.prepare(&spec, &[])["token_store"]["entry"].as_str().unwrap());
    let shard = store.join("tokens/train/000001.bin");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[10] ^= 1;
    std::fs::write(&shard, bytes).unwrap();
    let other = env.write("b.toml", gpt2_spec("b", "data/*.jsonl.zst", "[sequence]\nseq_len = 32\n"));
    let output = env.run(&["prepare", other.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for needle in ["damaged", "tokens/train/000001.bin", "blake3", "--rebuild-tokens"] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    assert!(env.cache().join("by-name/b").symlink_metadata().is_err(), "no view of the damaged store");
    let rebuilt = env.prepare(&other, &["--rebuild-tokens"]);
    assert_eq!((rebuilt["built"].as_bool(), rebuilt["token_store"]["tokenized"].as_bool()), (Some(true), Some(true)));
    env.run_ok(&["verify", "--all"]);
}

#[test]
fn two_views_asked_at_once_share_one_tokenization() {
    let env = TestEnv::new();
    env.shards("data", "train", 4, 200, 61);
    let children: Vec<_> = [32, 64, 96]
        .iter()
        .map(|seq_len| {
            let spec = env.write(
                &format!("s{seq_len}.toml"),
                gpt2_spec(&format!("s{seq_len}"), "data/*.jsonl.zst", &format!("[sequence]\nseq_len = {seq_len}\n")),
            );
            common::spawn_piped(env.ferry().args(["prepare", spec.to_str().unwrap(), "--json", "--jobs", "1"]))
        })
        .collect();
    let results: Vec<serde_json::Value> = children.into_iter().map(common::finished_json).collect();
    let tokenized: u64 = results.iter().map(|r| r["shards_tokenized_here"].as_u64().unwrap()).sum();
    assert_eq!(tokenized, 4, "each shard tokenized once: {results:?}");
    assert!(
        results
            .iter()
            .all(|r| r["built"] == true && r["token_store"]["fingerprint"] == results[0]["token_store"]["fingerprint"])
    );
    let status = env.json(&["status", "--json"]);
    assert_eq!((status["totals"]["entries"].as_u64(), status["totals"]["token_stores"].as_u64()), (Some(4), Some(1)));
}

#[test]
fn gc_keeps_a_token_store_while_a_view_is_made_from_it() {
    let env = TestEnv::new();
    env.shards("data", "train", 2, 50, 71);
    let base = env.write("a.toml", gpt2_spec("a", "data/*.jsonl.zst", BASE));
    let store = env.prepare(&base, &[])["token_store"]["fingerprint"].as_str().unwrap()[..16].to_string();
    // Another prepare holds the new view's claim (this live test process): ours leases the
    // token store, then waits for that claim.
    let spec = env.write("b.toml", gpt2_spec("b", "data/*.jsonl.zst", "[sequence]\nseq_len = 32\n"));
    let probe = env.prepare(&spec, &["--cache", env.path("probe-cache").to_str().unwrap()]);
    let view = probe["fingerprint"].as_str().unwrap()[..16].to_string();
    let claim = env.cache().join("building").join(&view).join("derive.lock");
    std::fs::create_dir_all(claim.parent().unwrap()).unwrap();
    let owner = serde_json::json!({"host": ferry::fsutil::host_name(), "pid": std::process::id(), "job_id": null, "task": null});
    std::fs::write(&claim, owner.to_string()).unwrap();
    let mut waiting = common::spawn_piped(env.ferry().args(["prepare", spec.to_str().unwrap(), "--json"]));
    common::wait_for_lease(&env.cache(), &store, &mut waiting);

    let report = env.json(&["gc", "--keep", "0", "--json"]);
    let kept: Vec<&str> = report["kept_in_use"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert!(kept.contains(&store.as_str()), "{report}");
    assert!(env.cache().join("entries").join(&store).is_dir(), "the token store a view is read from survives gc");

    std::fs::remove_file(&claim).unwrap();
    let made = common::finished_json(waiting);
    assert_eq!((made["built"].as_bool(), made["token_store"]["tokenized"].as_bool()), (Some(true), Some(false)));
}
