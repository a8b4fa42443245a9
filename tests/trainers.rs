//! Trainer formats beyond Arrow: nanotron's (datatrove's) `.ds` files, OLMo-core's
//! numpy files, LitData chunks (LitGPT), MDS shards (llm-foundry) and
//! modded-nanogpt's shards, each read back from a staged entry by
//! the trainer's own loader from PyPI (`check_trainers.py`, in the venv
//! `scripts/test.sh` makes beside the Megatron one), token for token and boundary
//! for boundary against the Arrow rows; a byte of the layout changed fails the
//! check. A format added to a prepared spec is a view: no input opened, nothing
//! tokenized.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::observe::{entry_files, prepare_traced, scramble};
use common::{TestEnv, describe, gpt2_spec, python_script};

fn trainers_python() -> Option<PathBuf> {
    common::provided(
        "FERRY_TEST_TRAINERS_PYTHON",
        "FERRY_REQUIRE_TRAINERS",
        "Python with datatrove, ai2-olmo-core, litdata and mosaicml-streaming",
    )
}

/// `check_trainers.py --check CHECK` on an entry: its output, and whether it passed.
fn check(python: &Path, entry: &Path, check: &str) -> (bool, String) {
    let output = Command::new(python)
        .arg(python_script("check_trainers.py"))
        .args(["--entry", entry.to_str().unwrap(), "--check", check])
        .output()
        .unwrap();
    (output.status.success(), describe(&output))
}

const CONCAT: &str = "[sequence]\nseq_len = 64\nposition_ids = true\n\
                      [output]\nformats = [\"nanotron\", \"olmo\", \"modded_nanogpt\", \"mds\"]\n";
/// LitData's blocks hold no document boundaries (no position_ids); uint16 ids.
const BLOCKS: &str = "[sequence]\nseq_len = 48\n[output]\ntoken_type = \"uint16\"\nformats = [\"litdata\", \"mds\"]\n\
                      target_shard_bytes = \"1MiB\"\n";
const BEST_FIT: &str = "[sequence]\nseq_len = 64\npack = \"best_fit\"\nlabels = true\nattention_mask = true\n\
                        [output]\nformats = [\"olmo\"]\n";

/// uint16 ids under GPT-2's vocabulary: Megatron's, flat's, OLMo's and nanotron's
/// token bytes are the same, one file hard-linked four times.
const SHARED: &str = "[sequence]\nseq_len = 64\nposition_ids = true\n\
                      [output]\ntoken_type = \"uint16\"\nformats = [\"megatron\", \"flat\", \"olmo\", \"nanotron\"]\n";

/// Stages the entries of `specs` (name, view) on a corpus of two shards; returns
/// each staged entry.
fn staged(env: &TestEnv, specs: &[(&str, &str)]) -> Vec<PathBuf> {
    env.shards("data", "train", 2, 60, 7);
    let dest = env.path("node/ferry");
    specs
        .iter()
        .map(|(name, view)| {
            let spec = env.write(&format!("{name}.toml"), gpt2_spec(name, "data/*.jsonl.zst", view));
            let prepared = env.prepare(&spec, &[]);
            env.run_ok(&["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap()]);
            dest.join("entries").join(&prepared["fingerprint"].as_str().unwrap()[..16])
        })
        .collect()
}

#[test]
fn each_trainer_reads_a_staged_entry_with_its_own_loader() {
    let Some(python) = trainers_python() else { return };
    let env = TestEnv::new();
    let entries = staged(&env, &[("concat", CONCAT), ("best-fit", BEST_FIT), ("blocks", BLOCKS), ("shared", SHARED)]);
    let checks = [
        (&entries[0], &["nanotron", "olmo", "modded_nanogpt", "mds"][..]),
        (&entries[1], &["olmo"][..]),
        (&entries[2], &["litdata", "mds"][..]),
        (&entries[3], &["nanotron", "olmo"][..]),
    ];
    for (entry, checks) in checks {
        for name in checks {
            let (passed, output) = check(&python, entry, name);
            assert!(passed, "{name} on {}: {output}", entry.display());
        }
    }
    assert!(entries[1].join("olmo/train.mask.npy").is_file(), "padded rows get a label mask");
    // Staged copies keep the entry's twins as hard links, as the cache does.
    use std::os::unix::fs::MetadataExt;
    let inode = |file: &str| std::fs::metadata(entries[3].join(file)).unwrap().ino();
    let same = ["flat/train.bin", "olmo/train.npy", "nanotron/train/000_train.ds"];
    assert!(same.iter().all(|file| inode(file) == inode("megatron/train_text_document.bin")), "one file, four names");
    assert!(!entries[0].join("olmo/train.mask.npy").exists(), "rows without padding need none");
}

/// A copy of the entry with one byte of `file` changed at `offset` (from the end when negative).
fn with_byte_changed(entry: &Path, copy: &Path, file: &str, offset: i64) -> PathBuf {
    let status = Command::new("cp").args(["-r"]).arg(entry).arg(copy).status().unwrap();
    assert!(status.success());
    let path = copy.join(file);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = if offset < 0 { bytes.len() - (-offset) as usize } else { offset as usize };
    bytes[at] ^= 0x01;
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, bytes).unwrap();
    copy.to_path_buf()
}

#[test]
fn a_byte_of_each_layout_changed_fails_its_loaders_check() {
    let Some(python) = trainers_python() else { return };
    let env = TestEnv::new();
    let entries = staged(&env, &[("concat", CONCAT), ("best-fit", BEST_FIT), ("blocks", BLOCKS)]);
    let changes = [
        (&entries[2], "litdata", "litdata/train/chunk-0-0.bin", 0),
        (&entries[2], "litdata", "litdata/train/chunk-0-0.bin", -1),
        (&entries[2], "mds", "mds/train/shard.00000.mds", 4),
        (&entries[2], "mds", "mds/train/shard.00000.mds", -3),
        (&entries[0], "nanotron", "nanotron/train/000_train.ds", -2),
        (&entries[0], "nanotron", "nanotron/train/000_train.ds.index", 0),
        (&entries[0], "olmo", "olmo/train.npy", 130),
        (&entries[1], "olmo", "olmo/train.mask.npy", -1),
        (&entries[0], "modded_nanogpt", "modded_nanogpt/train_000000.bin", 8),
        (&entries[0], "modded_nanogpt", "modded_nanogpt/train_000000.bin", 0),
        (&entries[0], "modded_nanogpt", "modded_nanogpt/train_000000.bin", 2000),
    ];
    for (index, (entry, name, file, offset)) in changes.into_iter().enumerate() {
        let changed = with_byte_changed(entry, &env.path(&format!("changed-{index}")), file, offset);
        let (passed, output) = check(&python, &changed, name);
        assert!(!passed, "{name} passed with a byte of {file} changed: {output}");
    }
}

#[test]
fn a_trainer_format_added_to_a_prepared_spec_opens_no_input_and_tokenizes_nothing() {
    let env = TestEnv::new();
    let inputs = env.shards("data", "train", 2, 60, 9);
    let base = env.write("base.toml", gpt2_spec("base", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let base_entry = PathBuf::from(env.prepare(&base, &[])["entry"].as_str().unwrap());
    let restores: Vec<_> = inputs.iter().map(|input| scramble(input)).collect();
    let view = "[sequence]\nseq_len = 64\n[output]\nformats = [\"nanotron\", \"olmo\", \"litdata\", \"mds\", \"modded_nanogpt\"]\n";
    let spec = env.write("trainers.toml", gpt2_spec("trainers", "data/*.jsonl.zst", view));
    let (prepared, opened) = prepare_traced(&env, &spec, &[]);
    assert_eq!(prepared["token_store"]["tokenized"], false, "{prepared}");
    for input in &inputs {
        let name = input.file_name().unwrap().to_str().unwrap();
        assert!(!opened.iter().any(|line| line.contains(name)), "the new format opened {name}");
    }
    restores.into_iter().for_each(|restore| restore());
    let entry = Path::new(prepared["entry"].as_str().unwrap());
    let files = [
        "nanotron/train/000_train.ds.metadata",
        "olmo/train.npy",
        "litdata/train/index.json",
        "mds/train/index.json",
        "modded_nanogpt/train_000000.bin",
    ];
    for file in files {
        assert!(entry.join(file).is_file(), "{file}");
    }
    let metadata = std::fs::read_to_string(entry.join("nanotron/train/000_train.ds.metadata")).unwrap();
    assert!(metadata.starts_with("gpt2|2\n"), "{metadata}");
    // The same rows as the prepared view: its Arrow files are linked, not written again.
    use std::os::unix::fs::MetadataExt;
    let arrow = |entry: &Path| -> Vec<(String, u64)> {
        let mut files: Vec<(String, u64)> = std::fs::read_dir(entry.join("train"))
            .unwrap()
            .flatten()
            .filter(|file| file.file_name().to_string_lossy().ends_with(".arrow"))
            .map(|file| (file.file_name().to_string_lossy().into_owned(), file.metadata().unwrap().ino()))
            .collect();
        files.sort();
        files
    };
    assert_eq!(arrow(entry), arrow(&base_entry), "the Arrow files are the prepared view's");
    // And every byte is what a build from scratch writes.
    let fresh = env.prepare(&spec, &["--cache", env.path("fresh-cache").to_str().unwrap()]);
    assert_eq!(fresh["fingerprint"], prepared["fingerprint"]);
    assert_eq!(entry_files(entry), entry_files(Path::new(fresh["entry"].as_str().unwrap())));
}

#[test]
fn formats_a_trainer_cannot_read_are_refused_with_the_reason() {
    let env = TestEnv::new();
    env.shards("data", "train", 1, 20, 3);
    // (a line for [tokenizer], the view, what the error says)
    let refused = [
        ("", "[sequence]\npack = \"best_fit\"\n[output]\nformats = [\"nanotron\"]\n", "seq_len + 1"),
        ("", "[sequence]\npack = \"truncate\"\n[output]\nformats = [\"olmo\"]\n", "one length"),
        ("", "[sequence]\npack = \"best_fit\"\n[output]\nformats = [\"modded_nanogpt\"]\n", "cannot skip padding"),
        ("ensure_bos_eos = false\n", "[output]\nformats = [\"olmo\"]\n", "by their EOS"),
        ("", "[sequence]\nposition_ids = true\n[output]\nformats = [\"litdata\"]\n", "without position_ids"),
        ("", "[sequence]\npack = \"best_fit\"\n[output]\nformats = [\"mds\"]\n", "padding"),
    ];
    for (index, (tokenizer, extra, reason)) in refused.into_iter().enumerate() {
        let text = gpt2_spec(&format!("refused-{index}"), "data/*.jsonl.zst", &format!("{tokenizer}{extra}"));
        let spec = env.write(&format!("refused-{index}.toml"), text);
        let output = env.run(&["prepare", spec.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{extra}: {}", describe(&output));
        assert!(stderr.contains(reason), "{extra}: {stderr}");
    }
}

/// `ferry.load(NAME, format=F, split="train")` for each format, run from the source
/// package with this build's binary: the class of what it returned, and its length.
const LOAD_EACH: &str = r#"
import json, sys, ferry
formats = sys.argv[2:]
found = {}
for format in formats:
    dataset = ferry.load(sys.argv[1], format=format, split="train")
    found[format] = [type(dataset).__module__ + "." + type(dataset).__name__, len(dataset)]
print(json.dumps(found))
"#;

#[test]
fn ferry_load_opens_each_format_with_its_reader_and_inspect_names_the_readers() {
    let Some(python) = trainers_python() else { return };
    let env = TestEnv::new();
    let entries = staged(&env, &[("concat", CONCAT), ("blocks", BLOCKS)]);
    let dest = env.path("node/ferry");
    let run = |name: &str, formats: &[&str]| -> serde_json::Value {
        let output = Command::new(&python)
            .args(["-c", LOAD_EACH, name])
            .args(formats)
            .env("PYTHONPATH", Path::new(env!("CARGO_MANIFEST_DIR")).join("python"))
            .env("FERRY_BINARY", env!("CARGO_BIN_EXE_ferry"))
            .env("FERRY_CACHE", env.cache())
            .env("FERRY_DEST", &dest)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", describe(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let concat = run("concat", &["nanotron", "olmo", "mds", "modded_nanogpt"]);
    let blocks = run("blocks", &["litdata"]);
    let class = |found: &serde_json::Value, format: &str| found[format][0].as_str().unwrap().to_string();
    assert_eq!(class(&concat, "nanotron"), "datatrove.utils.dataset.DatatroveFolderDataset", "{concat}");
    assert_eq!(class(&concat, "olmo"), "olmo_core.data.numpy_dataset.NumpyFSLDataset", "{concat}");
    assert!(class(&concat, "mds").starts_with("streaming."), "{concat}");
    assert_eq!(class(&concat, "modded_nanogpt"), "builtins.list", "{concat}");
    assert!(class(&blocks, "litdata").starts_with("litdata."), "{blocks}");
    let rows = common::read_manifest(&entries[1])["splits"]["train"]["rows"].as_u64().unwrap();
    assert_eq!(blocks["litdata"][1].as_u64(), Some(rows), "one block per row: {blocks}");
    assert_eq!(concat["nanotron"][1], concat["olmo"][1], "one sample per row in both: {concat}");

    let inspected = env.run_ok(&["inspect", "concat", "--cache", dest.to_str().unwrap(), "--rows", "0"]);
    for line in ["DatatroveFolderDataset(", "NumpyFSLDataset(", "streaming.StreamingDataset(local=", "train_files = "] {
        assert!(inspected.contains(line), "{line}: {inspected}");
    }
    assert!(inspected.contains(&format!("{}/entries/", dest.display())), "paths of the copy inspected: {inspected}");
}
