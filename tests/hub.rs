//! Tokenizers and datasets named by hub repo id, found in a local Hugging Face hub
//! cache laid out as `huggingface_hub` lays it out (refs, snapshots, symlinks into
//! blobs, two revisions), and checked against `huggingface_hub.try_to_load_from_cache`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{TestEnv, describe, entry_rows, gpt2_spec, python, python_script, read_manifest};
use serde_json::{Value, json};

/// Adds a commit of a repo to the hub cache: each file's bytes in `blobs/<blake3>`,
/// `snapshots/<commit>/<path>` a relative symlink to it, and `refs/<name>` naming the
/// commit for each branch or tag given.
fn add_commit(hub: &Path, folder: &str, commit: &str, refs: &[&str], files: &[(&str, &[u8])]) {
    let repo = hub.join(folder);
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    for (path, bytes) in files {
        let blob = blake3::hash(bytes).to_hex().to_string();
        std::fs::write(repo.join("blobs").join(&blob), bytes).unwrap();
        let link = repo.join("snapshots").join(commit).join(path);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let up = "../".repeat(path.split('/').count() + 1);
        std::os::unix::fs::symlink(format!("{up}blobs/{blob}"), link).unwrap();
    }
    for name in refs {
        let ref_file = repo.join("refs").join(name);
        std::fs::create_dir_all(ref_file.parent().unwrap()).unwrap();
        std::fs::write(ref_file, commit).unwrap();
    }
}

/// GPT-2's tokenizer.json, and a variant with one more special token (another tokenizer).
fn gpt2_tokenizers() -> (String, String) {
    let gpt2 = ferry::tokenizer::builtin_gpt2_json().unwrap().to_string();
    let mut other: Value = serde_json::from_str(&gpt2).unwrap();
    other["added_tokens"].as_array_mut().unwrap().push(json!({
        "id": 50257, "content": "<|pad|>", "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": false, "special": true
    }));
    (gpt2, other.to_string())
}

/// GPT-2's vocabulary as `vocab.json` + `merges.txt`, as its first uploads ship it.
fn gpt2_vocab_and_merges() -> (String, String) {
    let gpt2: Value = serde_json::from_str(ferry::tokenizer::builtin_gpt2_json().unwrap()).unwrap();
    let merges: Vec<String> = gpt2["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|merge| match merge {
            Value::String(text) => text.clone(),
            pair => format!("{} {}", pair[0].as_str().unwrap(), pair[1].as_str().unwrap()),
        })
        .collect();
    (gpt2["model"]["vocab"].to_string(), format!("#version: 0.2\n{}\n", merges.join("\n")))
}

/// A hub cache with a GPT-2 model repo (`main`, and tag `v2` with another tokenizer),
/// a vocab + merges model repo, and a dataset repo whose `main` and `v2` hold the same
/// shards under `sample/10BT/` (plus a file no pattern names).
fn hub_cache(env: &TestEnv) -> PathBuf {
    let hub = env.path("hf/hub");
    let (gpt2, other) = gpt2_tokenizers();
    add_commit(&hub, "models--test-org--gpt2-hub", "aaaa1111", &["main"], &[("tokenizer.json", gpt2.as_bytes())]);
    add_commit(&hub, "models--test-org--gpt2-hub", "bbbb2222", &["v2"], &[("tokenizer.json", other.as_bytes())]);
    let (vocab, merges) = gpt2_vocab_and_merges();
    let vocab_files: &[(&str, &[u8])] = &[("vocab.json", vocab.as_bytes()), ("merges.txt", merges.as_bytes())];
    add_commit(&hub, "models--test-org--vocab-only", "cccc3333", &["main"], vocab_files);
    let shards = env.shards("raw", "train", 2, 40, 7);
    let shard_bytes: Vec<Vec<u8>> = shards.iter().map(|shard| std::fs::read(shard).unwrap()).collect();
    let dataset_files: Vec<(&str, &[u8])> = vec![
        ("sample/10BT/000.jsonl.zst", &shard_bytes[0]),
        ("sample/10BT/001.jsonl.zst", &shard_bytes[1]),
        ("other/skip.jsonl.zst", &shard_bytes[0]),
    ];
    add_commit(&hub, "datasets--test-org--pile-hub", "dddd4444", &["main"], &dataset_files);
    add_commit(&hub, "datasets--test-org--pile-hub", "eeee5555", &["v2"], &dataset_files);
    hub
}

fn hub_spec(name: &str, dataset_revision: &str, tokenizer: &str) -> String {
    format!(
        "name = \"{name}\"\n[splits]\ntrain = {{ hub = \"test-org/pile-hub\", files = [\"sample/10BT/*.jsonl.zst\"], \
         revision = \"{dataset_revision}\" }}\n[tokenizer]\n{tokenizer}\n[sequence]\nseq_len = 64\n"
    )
}

/// Runs `ferry prepare --json` with the hub cache in `HF_HUB_CACHE`.
fn prepare_with_hub(env: &TestEnv, hub: &Path, spec: &Path) -> std::process::Output {
    env.ferry().env("HF_HUB_CACHE", hub).args(["prepare", spec.to_str().unwrap(), "--json"]).output().unwrap()
}

fn prepared(env: &TestEnv, hub: &Path, name: &str, spec_text: &str) -> Value {
    let spec = env.write(&format!("{name}.toml"), spec_text);
    let output = prepare_with_hub(env, hub, &spec);
    assert!(output.status.success(), "prepare {name} failed:\n{}", describe(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// What `huggingface_hub.try_to_load_from_cache` answers for each
/// (repo type, repo id, revision, file), or None without Python.
fn python_resolves(hub: &Path, queries: &[(&str, &str, &str, &str)]) -> Option<Vec<Option<String>>> {
    let python = python()?;
    let mut child = Command::new(python)
        .arg(python_script("hub_paths.py"))
        .env("HF_HUB_CACHE", hub)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), &queries).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "hub_paths.py failed:\n{}", describe(&output));
    Some(serde_json::from_slice(&output.stdout).unwrap())
}

/// The input paths of an entry's train split, as its manifest records them.
fn train_inputs(entry: &Value) -> Vec<String> {
    let manifest = read_manifest(Path::new(entry["entry"].as_str().unwrap()));
    manifest["splits"]["train"]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap().into())
        .collect()
}

fn tokenizer_source(entry: &Value) -> String {
    read_manifest(Path::new(entry["entry"].as_str().unwrap()))["tokenizer"]["source"].as_str().unwrap().into()
}

#[test]
fn tokenizer_and_dataset_files_resolve_where_huggingface_hub_finds_them() {
    let env = TestEnv::new();
    let hub = hub_cache(&env);
    let main = prepared(&env, &hub, "main", &hub_spec("main", "main", "hub = \"test-org/gpt2-hub\""));

    let inputs = train_inputs(&main);
    let tokenizer = tokenizer_source(&main);
    let snapshot = hub.join("datasets--test-org--pile-hub/snapshots/dddd4444/sample/10BT");
    let expected_inputs = [snapshot.join("000.jsonl.zst"), snapshot.join("001.jsonl.zst")];
    assert_eq!(inputs, expected_inputs.map(|path| path.display().to_string()), "only the pattern's files, in order");
    assert_eq!(
        tokenizer,
        hub.join("models--test-org--gpt2-hub/snapshots/aaaa1111/tokenizer.json").display().to_string()
    );

    // The same shards at another revision keep the fingerprint (built in a second cache,
    // so its manifest records the paths it read); another tokenizer changes it.
    let same_files_spec = env.write("v2-data.toml", hub_spec("v2-data", "v2", "hub = \"test-org/gpt2-hub\""));
    let output = env
        .ferry()
        .env("HF_HUB_CACHE", &hub)
        .args(["prepare", same_files_spec.to_str().unwrap(), "--json", "--cache", env.path("cache2").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let same_files: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(same_files["fingerprint"], main["fingerprint"]);
    assert!(train_inputs(&same_files)[0].contains("/snapshots/eeee5555/"), "{:?}", train_inputs(&same_files));
    let other = "hub = \"test-org/gpt2-hub\"\nrevision = \"v2\"";
    let other_tokenizer = prepared(&env, &hub, "v2-tok", &hub_spec("v2-tok", "main", other));
    assert_ne!(other_tokenizer["fingerprint"], main["fingerprint"]);
    // A commit hash works as a revision, as on the hub.
    let by_commit = "hub = \"test-org/gpt2-hub\"\nrevision = \"bbbb2222\"";
    let commit = prepared(&env, &hub, "commit", &hub_spec("commit", "dddd4444", by_commit));
    assert_eq!(commit["fingerprint"], other_tokenizer["fingerprint"]);

    let queries = [
        ("dataset", "test-org/pile-hub", "main", "sample/10BT/000.jsonl.zst"),
        ("dataset", "test-org/pile-hub", "main", "sample/10BT/001.jsonl.zst"),
        ("dataset", "test-org/pile-hub", "v2", "sample/10BT/000.jsonl.zst"),
        ("model", "test-org/gpt2-hub", "main", "tokenizer.json"),
        ("model", "test-org/gpt2-hub", "v2", "tokenizer.json"),
        ("model", "test-org/gpt2-hub", "bbbb2222", "tokenizer.json"),
    ];
    let Some(answers) = python_resolves(&hub, &queries) else { return };
    let ours = [
        Some(inputs[0].clone()),
        Some(inputs[1].clone()),
        Some(train_inputs(&same_files)[0].clone()),
        Some(tokenizer),
        Some(tokenizer_source(&other_tokenizer)),
        Some(tokenizer_source(&commit)),
    ];
    assert_eq!(answers, ours, "huggingface_hub resolves {queries:?} elsewhere");
}

#[test]
fn a_model_with_only_vocab_and_merges_resolves_and_encodes_as_gpt2() {
    let env = TestEnv::new();
    let hub = hub_cache(&env);
    let from_hub = prepared(&env, &hub, "vocab", &hub_spec("vocab", "main", "hub = \"test-org/vocab-only\""));
    let source = tokenizer_source(&from_hub);
    let snapshot = hub.join("models--test-org--vocab-only/snapshots/cccc3333");
    for file in ["vocab.json", "merges.txt"] {
        assert!(source.contains(&snapshot.join(file).display().to_string()), "{file} not in {source}");
    }
    let inputs = train_inputs(&from_hub);
    let builtin = env.write("builtin.toml", gpt2_spec("builtin", "raw/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let builtin = env.prepare(&builtin, &[]);
    let rows = |entry: &Value| entry_rows(Path::new(entry["entry"].as_str().unwrap()));
    assert_eq!(rows(&from_hub), rows(&builtin), "the hub's vocab + merges encode as the embedded GPT-2");
    assert!(!rows(&builtin).is_empty());

    let queries = [
        ("model", "test-org/vocab-only", "main", "vocab.json"),
        ("model", "test-org/vocab-only", "main", "merges.txt"),
        ("model", "test-org/vocab-only", "main", "tokenizer.json"),
    ];
    let Some(answers) = python_resolves(&hub, &queries) else { return };
    let vocab = answers[0].clone().expect("huggingface_hub finds vocab.json");
    let merges = answers[1].clone().expect("huggingface_hub finds merges.txt");
    assert_eq!(source, format!("{vocab} + {merges}"));
    assert_eq!(answers[2], None, "no tokenizer.json in this repo");
    assert!(inputs.iter().all(|input| input.contains("/snapshots/dddd4444/")));
}

#[test]
fn what_the_hub_cache_lacks_is_named_with_repo_revision_directory_and_download_command() {
    let env = TestEnv::new();
    let hub = hub_cache(&env);
    let cases = [
        (
            hub_spec("no-rev", "main", "hub = \"test-org/gpt2-hub\"\nrevision = \"v9\""),
            vec!["tokenizer.json", "test-org/gpt2-hub", "revision v9", "models--test-org--gpt2-hub", "$HF_HUB_CACHE"],
            "huggingface-cli download test-org/gpt2-hub tokenizer.json --revision v9",
        ),
        (
            hub_spec("no-repo", "main", "hub = \"test-org/absent\""),
            vec!["test-org/absent", "revision main", "models--test-org--absent"],
            "huggingface-cli download test-org/absent tokenizer.json --revision main",
        ),
        (
            hub_spec("no-files", "main", "hub = \"test-org/gpt2-hub\"").replace("sample/10BT/*", "sample/100BT/*"),
            vec!["\"sample/100BT/*.jsonl.zst\"", "test-org/pile-hub", "datasets--test-org--pile-hub"],
            "huggingface-cli download test-org/pile-hub --include \"sample/100BT/*.jsonl.zst\" --revision main --repo-type dataset",
        ),
    ];
    for (spec_text, parts, command) in cases {
        let spec = env.write("missing.toml", &spec_text);
        let output = prepare_with_hub(&env, &hub, &spec);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
        for part in parts.iter().chain([&command]) {
            assert!(stderr.contains(part), "{part:?} missing from:\n{stderr}");
        }
        assert!(stderr.contains(&hub.display().to_string()), "the searched directory is not named:\n{stderr}");
    }
}
