//! `output.formats`: Megatron indexed datasets and flat token files beside the
//! Arrow files, read back with megatron-core and numpy, fingerprinted, byte-identical
//! across worker counts, staged and verified like every other file of the entry.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestEnv, describe, entry_data_files, gpt2_spec, python, python_script};

const ALL_FORMATS: &str = "formats = [\"hf\", \"megatron\", \"flat\"]\n";

/// Python with megatron-core (and its torch) and pyarrow, from the test script's own venv.
fn megatron_python() -> Option<PathBuf> {
    common::provided("FERRY_TEST_MEGATRON_PYTHON", "FERRY_REQUIRE_MEGATRON", "Python with megatron-core")
}

/// Runs `check_formats.py` once over several entries (megatron-core takes seconds to import).
fn check_formats(python: &Path, entries: &[&str], check: &str) -> serde_json::Value {
    let mut command = Command::new(python);
    command.arg(python_script("check_formats.py")).args(["--check", check]);
    for entry in entries {
        command.args(["--entry", entry]);
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "check_formats.py --check {check} failed:\n{}", describe(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["entries"].as_object().unwrap().len(), entries.len(), "{report}");
    report
}

/// An entry with two splits and every format; `sequence` and `output` are spec lines.
fn prepared(env: &TestEnv, name: &str, sequence: &str, output: &str) -> String {
    env.shards("data", "train", 3, 70, 21);
    env.shards("data", "val", 1, 30, 22);
    let text = gpt2_spec(name, "data/train-*.jsonl.zst", &format!("[sequence]\n{sequence}[output]\n{output}"))
        .replace("[tokenizer]", "validation = \"data/val-*.jsonl.zst\"\n[tokenizer]");
    let spec = env.write(&format!("{name}.toml"), text);
    env.prepare(&spec, &[])["entry"].as_str().unwrap().to_string()
}

fn manifest(entry: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(entry.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn flat_files_read_with_numpy_equal_the_concatenated_input_ids() {
    let Some(python) = python() else { return };
    let env = TestEnv::new();
    let concat = prepared(&env, "concat", "seq_len = 64\n", ALL_FORMATS);
    let documents = prepared(&env, "documents", "pack = \"none\"\n", "token_type = \"uint16\"\nformats = [\"flat\"]\n");
    let report = check_formats(&python, &[&concat, &documents], "flat");
    assert!(report["entries"][&concat]["splits"]["train"]["rows"].as_u64().unwrap() > 10, "{report}");
    assert_eq!(report["entries"][&documents]["dtype"], "uint16", "{report}");
    assert!(report["entries"][&documents]["splits"]["validation"]["rows"].as_u64().unwrap() > 10, "{report}");
    assert!(!Path::new(&documents).join("megatron").exists(), "only the formats asked for are written");
}

#[test]
fn megatron_files_read_with_megatron_core_have_every_arrow_row() {
    let Some(python) = megatron_python() else { return };
    let env = TestEnv::new();
    let documents = prepared(&env, "documents", "pack = \"none\"\n", "formats = [\"megatron\"]\n");
    let truncated = prepared(
        &env,
        "truncated",
        "pack = \"truncate\"\nseq_len = 32\n",
        "token_type = \"uint16\"\nformats = [\"megatron\"]\n",
    );
    let concat = prepared(&env, "concat", "seq_len = 64\n", ALL_FORMATS);
    let report = check_formats(&python, &[&documents, &truncated, &concat], "megatron");
    assert!(report["entries"][&documents]["splits"]["train"]["sequences"].as_u64().unwrap() > 100, "{report}");
    assert_eq!(report["entries"][&truncated]["dtype"], "uint16", "{report}");
    assert!(report["entries"][&concat]["splits"]["validation"]["sequences"].as_u64().unwrap() > 2, "{report}");
}

#[test]
fn megatron_core_reads_a_token_store_and_the_documents_of_packed_rows() {
    let Some(python) = megatron_python() else { return };
    let env = TestEnv::new();
    let positions = prepared(&env, "positions", "seq_len = 48\nposition_ids = true\n", "formats = [\"megatron\"]\n");
    let best_fit = prepared(
        &env,
        "best-fit",
        "seq_len = 64\npack = \"best_fit\"\nposition_ids = true\nattention_mask = true\n",
        "formats = [\"megatron\", \"flat\"]\n",
    );
    let report = check_formats(&python, &[&positions, &best_fit], "megatron");
    let rows = manifest(Path::new(&positions))["splits"]["train"]["rows"].as_u64().unwrap();
    let sequences = report["entries"][&positions]["splits"]["train"]["sequences"].as_u64().unwrap();
    assert!(sequences > rows, "documents inside rows are sequences of their own: {report}");
    let store = manifest(Path::new(&positions))["token_store"]["fingerprint"].as_str().unwrap()[..16].to_string();
    let store = env.cache().join("entries").join(store);
    let report = check_formats(&python, &[store.to_str().unwrap()], "store");
    assert_eq!(report["entries"][store.to_str().unwrap()]["dtype"], "uint16", "GPT-2's ids fit 16 bits: {report}");
}

/// The Megatron index read by hand: header, version, dtype code and counts.
fn megatron_index_header(path: &Path) -> (u8, u64, u64) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..9], b"MMIDIDX\x00\x00");
    assert_eq!(u64::from_le_bytes(bytes[9..17].try_into().unwrap()), 1, "version");
    let count = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let (sequences, documents) = (count(18), count(26));
    assert_eq!(bytes.len() as u64, 34 + sequences * 4 + sequences * 8 + documents * 8, "index size");
    (bytes[17], sequences, documents)
}

#[test]
fn formats_change_the_fingerprint_and_stay_byte_identical_across_worker_counts() {
    let env = TestEnv::new();
    env.shards("data", "train", 4, 60, 23);
    let plain = gpt2_spec("t", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n");
    let fingerprint = |text: &str, extra: &[&str]| {
        let spec = env.write("variant.toml", text);
        env.prepare(&spec, extra)
    };
    let base = fingerprint(&plain, &[])["fingerprint"].clone();
    let hf = fingerprint(&format!("{plain}[output]\nformats = [\"hf\"]\n"), &[])["fingerprint"].clone();
    assert_eq!(base, hf, "naming only hf keeps the fingerprint of a spec without formats");
    let all_text = format!("{plain}[output]\n{ALL_FORMATS}");
    let megatron = fingerprint(&format!("{plain}[output]\nformats = [\"megatron\"]\n"), &[])["fingerprint"].clone();
    let one = fingerprint(&all_text, &["--jobs", "1", "--cache", env.path("cache-one").to_str().unwrap()]);
    let four = fingerprint(&all_text, &["--jobs", "4", "--cache", env.path("cache-four").to_str().unwrap()]);
    assert_ne!(base, megatron);
    assert_ne!(megatron, one["fingerprint"]);
    assert_eq!(one["fingerprint"], four["fingerprint"]);
    let entry = Path::new(one["entry"].as_str().unwrap());
    let files_one = entry_data_files(entry);
    let files_four = entry_data_files(Path::new(four["entry"].as_str().unwrap()));
    let names: Vec<&str> = files_one.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [
        "megatron/train_text_document.bin",
        "megatron/train_text_document.idx",
        "flat/train.bin",
        "flat/train.offsets.npy",
        "flat/train.json",
    ] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    assert_eq!(files_one, files_four, "1 and 4 workers write the same bytes");
    let rows = one["totals"]["rows"].as_u64().unwrap();
    let (dtype_code, sequences, documents) = megatron_index_header(&entry.join("megatron/train_text_document.idx"));
    assert_eq!((dtype_code, sequences, documents), (4, rows, rows + 1), "int32, one sequence per row");
    let tokens = one["totals"]["tokens"].as_u64().unwrap();
    assert_eq!(std::fs::metadata(entry.join("flat/train.bin")).unwrap().len(), tokens * 4);
    let recorded: Vec<String> =
        manifest(entry)["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect();
    assert!(recorded.iter().any(|p| p == "megatron/train_text_document.idx"), "{recorded:?}");
    assert!(recorded.iter().any(|p| p == "flat/train.offsets.npy"), "{recorded:?}");
}

#[test]
fn stage_copies_the_formats_and_verify_catches_a_flipped_byte_in_a_megatron_file() {
    let env = TestEnv::new();
    let entry = PathBuf::from(prepared(&env, "staged", "seq_len = 64\n", ALL_FORMATS));
    let spec = env.path("staged.toml");
    let dest = env.path("node/ferry");
    let stage = ["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap(), "--verify", "--json"];
    let report = env.json(&stage);
    let local = dest.join("entries").join(entry.file_name().unwrap());
    for file in ["megatron/validation_text_document.bin", "flat/train.bin", "flat/validation.json"] {
        let meta = local.join(file).symlink_metadata().unwrap();
        assert!(meta.file_type().is_file(), "{file} is a local copy");
        assert_eq!(std::fs::read(local.join(file)).unwrap(), std::fs::read(entry.join(file)).unwrap());
    }
    // Files with the same bytes are copied once and the others linked: each split's
    // Megatron and flat .bin (one token array), and any identical small files.
    let mut distinct = std::collections::HashSet::new();
    let files = manifest(&entry)["files"].as_array().unwrap().clone();
    let nonempty: Vec<_> = files.iter().filter(|f| f["size"].as_u64() > Some(0)).collect();
    nonempty.iter().for_each(|f| _ = distinct.insert((f["blake3"].to_string(), f["size"].as_u64())));
    let twins = (nonempty.len() - distinct.len()) as u64;
    assert!(twins >= 2, "{files:?}");
    assert_eq!(report["files_linked"].as_u64(), Some(twins), "{report}");
    assert_eq!(report["phase"], "done", "{report}");
    for split in ["train", "validation"] {
        let megatron = local.join(format!("megatron/{split}_text_document.bin")).metadata().unwrap();
        let flat = local.join(format!("flat/{split}.bin")).metadata().unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((megatron.dev(), megatron.ino()), (flat.dev(), flat.ino()), "{split}: one local inode");
    }
    // A re-run finds both in place: nothing copied or linked again.
    let again = env.json(&stage);
    assert_eq!((again["files_copied"].as_u64(), again["files_linked"].as_u64()), (Some(0), Some(0)), "{again}");
    // With one of the two removed, the other is its original: linked back, not copied.
    std::fs::remove_file(local.join("flat/train.bin")).unwrap();
    let relinked = env.json(&stage);
    assert_eq!(
        (relinked["files_copied"].as_u64(), relinked["files_linked"].as_u64()),
        (Some(0), Some(1)),
        "{relinked}"
    );
    assert_eq!(
        std::fs::read(local.join("flat/train.bin")).unwrap(),
        std::fs::read(entry.join("flat/train.bin")).unwrap()
    );
    let short = entry.file_name().unwrap().to_str().unwrap().to_string();
    env.run_ok(&["verify", &short]);
    let damaged = entry.join("megatron/train_text_document.bin");
    let mut bytes = std::fs::read(&damaged).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    // The flat .bin shares these bytes (a hard link): break the link so only one file is damaged.
    std::fs::remove_file(&damaged).unwrap();
    std::fs::write(&damaged, bytes).unwrap();
    let output = env.run(&["verify", &short]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let shown = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(shown.contains("megatron/train_text_document.bin") && shown.contains("blake3"), "{shown}");
    assert!(!shown.contains("flat/train.bin"), "{shown}");
}

#[test]
fn megatron_with_uint32_tokens_is_refused_with_the_fix() {
    let env = TestEnv::new();
    env.shards("data", "train", 1, 5, 24);
    let spec = env.write(
        "spec.toml",
        gpt2_spec("u32", "data/*.jsonl.zst", "[output]\ntoken_type = \"uint32\"\nformats = [\"megatron\"]\n"),
    );
    let output = env.run(&["prepare", spec.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("spec.toml") && stderr.contains("token_type = \"int32\""), "{stderr}");
}
