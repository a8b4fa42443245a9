//! Entries load in real Hugging Face `datasets`, with exactly the ids Python
//! `tokenizers` + run_clm's `group_texts` produce, and the embedded GPT-2 equals
//! the real one.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestEnv, describe, gpt2_spec, python, python_script};

/// GPT-2's official vocab.json + merges.txt, fetched by the test script.
fn real_gpt2() -> Option<PathBuf> {
    common::provided("FERRY_TEST_GPT2_DIR", "FERRY_REQUIRE_PYTHON", "GPT-2's official vocabulary")
}

fn check_entry(python: &Path, entry: &str, args: &[&str]) -> serde_json::Value {
    let output =
        Command::new(python).arg(python_script("check_entry.py")).args(["--entry", entry]).args(args).output().unwrap();
    assert!(output.status.success(), "check_entry.py failed:\n{}", describe(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn tokenizer_args(env: &TestEnv) -> Vec<String> {
    match real_gpt2() {
        Some(dir) => vec![
            "--vocab".into(),
            dir.join("vocab.json").display().to_string(),
            "--merges".into(),
            dir.join("merges.txt").display().to_string(),
        ],
        None => {
            let path = env.write("gpt2.json", ferry::tokenizer::builtin_gpt2_json().unwrap());
            vec!["--tokenizer-json".into(), path.display().to_string()]
        }
    }
}

#[test]
fn entry_loads_in_datasets_with_the_ids_of_tokenizers_and_group_texts() {
    let Some(python) = python() else { return };
    let env = TestEnv::new();
    env.shards("data", "train", 3, 150, 11);
    env.shards("data", "val", 1, 60, 12);
    let spec_text = gpt2_spec(
        "compat",
        "data/train-*.jsonl.zst",
        "[sequence]\nseq_len = 128\n[filter]\nmin_chars = 40\nmeta.pile_set_name = [\"Pile-CC\", \"Github\", \"EuroParl\"]\n",
    )
    .replace("[tokenizer]", "validation = \"data/val-*.jsonl.zst\"\n[tokenizer]");
    let spec = env.write("spec.toml", spec_text);
    let prepared = env.prepare(&spec, &[]);
    let entry = prepared["entry"].as_str().unwrap();
    let mut args = tokenizer_args(&env);
    args.extend(
        ["--seq-len", "128", "--eos", "50256", "--min-chars", "40", "--sets", "Pile-CC", "Github", "EuroParl"]
            .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let report = check_entry(&python, entry, &args);
    assert!(report["splits"]["train"]["rows"].as_u64().unwrap() > 20, "{report}");
    assert!(report["splits"]["validation"]["rows"].as_u64().unwrap() > 2, "{report}");
    let manifest = common::read_manifest(Path::new(entry));
    assert!(manifest["splits"]["train"]["filtered_documents"].as_u64().unwrap() > 0, "the filter dropped documents");
    assert!(manifest["splits"]["train"]["remainder_tokens"].as_u64().unwrap() > 0, "each shard's remainder is dropped");
}

#[test]
fn uint16_truncated_rows_with_labels_and_mask_load_as_declared() {
    let Some(python) = python() else { return };
    let env = TestEnv::new();
    env.shards("data", "train", 2, 80, 13);
    let spec = env.write(
        "spec.toml",
        gpt2_spec(
            "u16",
            "data/*.jsonl.zst",
            "[sequence]\npack = \"truncate\"\nseq_len = 32\nlabels = true\nattention_mask = true\n[output]\ntoken_type = \"uint16\"\n",
        ),
    );
    let entry = env.prepare(&spec, &[])["entry"].as_str().unwrap().to_string();
    let mut args = tokenizer_args(&env);
    args.extend(
        [
            "--pack",
            "truncate",
            "--seq-len",
            "32",
            "--eos",
            "50256",
            "--token-type",
            "uint16",
            "--columns",
            "input_ids",
            "attention_mask",
            "labels",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let report = check_entry(&python, &entry, &args);
    assert_eq!(report["splits"]["train"]["rows"], 160, "one row per document: {report}");
}

/// Documents that stress byte-level BPE: Unicode, code, whitespace runs, special tokens in text.
fn edge_case_documents() -> Vec<String> {
    let mut documents: Vec<String> = [
        " ",
        "\n\n\n",
        "   leading spaces",
        "trailing spaces   ",
        "tabs\t\tand\r\nCRLF\r\n",
        "emoji 🙂🚀 and 👩‍👩‍👧 family",
        "東京都 北京市 한국어 テキスト",
        "مرحبا بالعالم",
        "combining e\u{301} vs é",
        "zero\u{200b}width and no\u{a0}break",
        "a<|endoftext|>b <|endoftext|> c",
        "<|endoftext|>",
        "numbers 1234567890 3.14159 1e-10 0x1F",
        "it's we're they've I'm you'll he'd",
        "IT'S WE'RE",
        "def f(x):\n    return x  # comment\n\n\n",
        "fn main() {\n\tprintln!(\"{}\", 1);\n}",
        "    \n    \n",
        "!!!???...,,,;;;",
        "x  y   z    w",
        "\u{feff}BOM at start",
        "ÿþ Latin-1 letters àéîõü",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters",
        "\\section{Intro} $\\alpha + \\beta^2$",
        "<html><body class=\"x\">&amp;</body></html>",
        "'s 't 're 've 'm 'll 'd",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    documents.push("word ".repeat(300));
    documents.push(" ".repeat(200) + "x");
    documents.push("supercalifragilisticexpialidocious".repeat(20));
    let mut generator = ferry::corpus::Generator::new(99);
    for i in 0..300 {
        documents.push(generator.document(ferry::corpus::PILE_SETS[i % ferry::corpus::PILE_SETS.len()]));
    }
    documents
}

#[test]
fn gpt2_ids_equal_python_tokenizers_on_unicode_code_and_whitespace() {
    let Some(python) = python() else { return };
    let Some(gpt2) = real_gpt2() else { return };
    let env = TestEnv::new();
    let lines: String =
        edge_case_documents().iter().map(|text| format!("{}\n", serde_json::json!({"text": text}))).collect();
    env.write("data/edge.jsonl", lines);
    let no_packing = "ensure_bos_eos = false\n[sequence]\npack = \"none\"\n";
    let builtin = env.write("builtin.toml", gpt2_spec("edge", "data/edge.jsonl", no_packing));
    let (vocab, merges) = (gpt2.join("vocab.json"), gpt2.join("merges.txt"));
    let files = env.write(
        "files.toml",
        gpt2_spec("edge-files", "data/edge.jsonl", no_packing).replace(
            "builtin = \"gpt2\"",
            &format!("vocab = \"{}\"\nmerges = \"{}\"", vocab.display(), merges.display()),
        ),
    );
    let args = ["--pack", "none", "--vocab", vocab.to_str().unwrap(), "--merges", merges.to_str().unwrap()];
    for spec in [builtin, files] {
        let prepared = env.prepare(&spec, &[]);
        let entry = prepared["entry"].as_str().unwrap();
        let manifest = common::read_manifest(Path::new(entry));
        assert_eq!(manifest["tokenizer"]["encoder"], "fast_bytelevel_bpe", "GPT-2 takes the fast path");
        let report = check_entry(&python, entry, &args);
        assert!(report["splits"]["train"]["rows"].as_u64().unwrap() >= 320, "{report}");
    }
}
