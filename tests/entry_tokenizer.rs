//! An entry carries the tokenizer that made it: `tokenizer.json` and
//! `tokenizer_config.json`, recorded in the manifest and staged like every file, so the
//! node-local copy loads with `transformers.AutoTokenizer.from_pretrained(entry)` and
//! `tokenizers.Tokenizer.from_file` offline, and decodes rows back to the documents.

mod common;

use std::path::Path;
use std::process::Command;

use common::{TestEnv, describe, python, read_manifest};
use ferry::corpus::Generator;
use ferry::tokenizer::{Ranks, llama3_style_tokenizer_json};

/// Documents that decode back exactly: prose, code, whitespace runs, Unicode, and the
/// synthetic Pile mix.
fn documents() -> Vec<String> {
    let mut documents: Vec<String> = [
        "Hello world! This is the first document.",
        "def f(x):\n    return x ** 2  # comment\n\n",
        "  leading spaces and trailing   ",
        "東京都の天気は晴れです。 한국어 and café, naïve résumé 🙂",
        "numbers 1234567890 3.14159, it's we're they've",
        // What `clean_up_tokenization_spaces` would remove: spaces before punctuation.
        "spaces before punctuation : a , b . c ! d ? it 's do n't",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut generator = Generator::new(3);
    for set in ["Pile-CC", "Github", "ArXiv", "StackExchange"].iter().cycle().take(12) {
        documents.push(generator.document(set));
    }
    documents
}

/// Prepares `documents` one row per document with the tokenizer section given, stages
/// the entry, and returns the staged entry's path.
fn staged_entry(env: &TestEnv, name: &str, tokenizer: &str) -> std::path::PathBuf {
    let lines: Vec<String> = documents().iter().map(|text| serde_json::json!({"text": text}).to_string()).collect();
    env.write("raw/docs.jsonl", lines.join("\n") + "\n");
    let spec = env.write(
        &format!("{name}.toml"),
        format!("name = \"{name}\"\n[splits]\ntrain = \"raw/docs.jsonl\"\n[tokenizer]\n{tokenizer}\n[sequence]\npack = \"none\"\n"),
    );
    env.prepare(&spec, &[]);
    let dest = env.path("node-local");
    let stage = env.json(&["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap(), "--verify", "--json"]);
    let entry = dest.join("by-name").join(name);
    assert!(entry.join("dataset_dict.json").is_file(), "not staged: {stage}");
    entry
}

fn check_carried_tokenizer(entry: &Path, bos: Option<&str>, eos: &str) {
    let manifest = read_manifest(entry);
    let recorded: Vec<&str> =
        manifest["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        assert!(recorded.contains(&file), "{file} is not in the manifest: {recorded:?}");
        let staged = entry.join(file).canonicalize().unwrap();
        let node_local = entry.join("..").join("..").canonicalize().unwrap();
        assert!(staged.starts_with(&node_local), "{file} was not copied to the node: {}", staged.display());
    }
    let Some(python) = python() else { return };
    let documents = documents();
    let documents_path = entry.join("..").join("..").join("documents.json");
    std::fs::write(&documents_path, serde_json::to_vec(&documents).unwrap()).unwrap();
    let output = Command::new(python)
        .arg(common::python_script("entry_tokenizer.py"))
        .arg(entry)
        .arg(&documents_path)
        .output()
        .unwrap();
    assert!(output.status.success(), "entry_tokenizer.py failed:\n{}", describe(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["mismatches"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["rows"], documents.len());
    assert_eq!(report["bos"].as_str(), bos);
    assert_eq!(report["eos"], eos);
}

#[test]
fn a_gpt2_entry_carries_a_tokenizer_that_transformers_loads_and_decodes_with() {
    let env = TestEnv::new();
    let entry = staged_entry(&env, "gpt2-docs", "builtin = \"gpt2\"");
    check_carried_tokenizer(&entry, Some("<|endoftext|>"), "<|endoftext|>");
}

#[test]
fn a_llama3_structured_entry_carries_a_tokenizer_that_transformers_loads_and_decodes_with() {
    let env = TestEnv::new();
    let json = llama3_style_tokenizer_json(Ranks::Cl100kBase).unwrap();
    env.write("llama3/tokenizer.json", json.to_string());
    let entry = staged_entry(&env, "llama3-docs", "path = \"llama3/tokenizer.json\"");
    check_carried_tokenizer(&entry, Some("<|begin_of_text|>"), "<|end_of_text|>");
}
