//! Mixtures: token stores prepared once, then mixed by weight into training views
//! without opening an input or running a tokenizer. The components here are two
//! corpora of disjoint alphabets (letters, digits): under GPT-2 they share no token
//! but EOS and the bare space, so the test tells each row's component from its ids
//! alone and counts the shares itself.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use common::observe::{entry_files, prepare_traced, scramble};
use common::{TestEnv, describe, entry_rows, gpt2_spec, read_manifest};

/// `shards` JSON-lines files of `documents` documents of words drawn from `alphabet`.
fn corpus(env: &TestEnv, dir: &str, alphabet: &[u8], shards: usize, documents: usize, seed: u64) -> Vec<PathBuf> {
    let mut random = fastrand::Rng::with_seed(seed);
    (0..shards)
        .map(|shard| {
            let mut text = String::new();
            for _ in 0..documents {
                let words: Vec<String> = (0..random.usize(5..160))
                    .map(|_| {
                        (0..random.usize(1..7)).map(|_| alphabet[random.usize(..alphabet.len())] as char).collect()
                    })
                    .collect();
                text.push_str(&serde_json::json!({"text": words.join(" ")}).to_string());
                text.push('\n');
            }
            env.write(&format!("{dir}/part-{shard}.jsonl"), text)
        })
        .collect()
}

const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
const DIGITS: &[u8] = b"0123456789";

/// The two components prepared (each its own view, so `entry = NAME` finds them);
/// returns their inputs and each store's ids.
fn two_components(env: &TestEnv) -> (Vec<PathBuf>, [HashSet<u32>; 2]) {
    let mut inputs = corpus(env, "letters", LETTERS, 3, 60, 1);
    inputs.extend(corpus(env, "digits", DIGITS, 2, 60, 2));
    let mut ids = [HashSet::new(), HashSet::new()];
    for (index, name) in ["letters", "digits"].into_iter().enumerate() {
        let spec = env.write(&format!("{name}.toml"), gpt2_spec(name, &format!("{name}/*.jsonl"), ""));
        let prepared = env.prepare(&spec, &[]);
        assert_eq!(prepared["token_store"]["tokenized"], true, "{prepared}");
        ids[index] = store_ids(Path::new(prepared["token_store"]["entry"].as_str().unwrap()));
    }
    (inputs, ids)
}

/// Every id in a GPT-2 token store's documents (uint16), read from its files.
fn store_ids(store: &Path) -> HashSet<u32> {
    let mut ids = HashSet::new();
    for file in walkdir::WalkDir::new(store.join("tokens")).into_iter().flatten() {
        if file.path().extension().is_some_and(|extension| extension == "bin") {
            let bytes = std::fs::read(file.path()).unwrap();
            ids.extend(bytes.chunks_exact(2).map(|pair| u32::from(u16::from_le_bytes([pair[0], pair[1]]))));
        }
    }
    ids
}

/// A mixture spec of `components` (a line naming each, and its weight).
fn mixture_text(name: &str, mix: &str, components: &[(&str, f64)], view: &str) -> String {
    let mut text = format!("name = \"{name}\"\n[mix]\n{mix}\n");
    for (component, weight) in components {
        text.push_str(&format!("[[mix.components]]\n{component}\nweight = {weight}\n"));
    }
    text + view
}

/// Which component each row comes from, told by its ids.
fn row_components(rows: &[Vec<u32>], ids: &[HashSet<u32>; 2]) -> Vec<usize> {
    let shared: HashSet<u32> = ids[0].intersection(&ids[1]).copied().collect();
    rows.iter()
        .enumerate()
        .map(|(index, row)| {
            let own: Vec<&u32> = row.iter().filter(|id| !shared.contains(id)).collect();
            let of = |component: usize| !own.is_empty() && own.iter().all(|id| ids[component].contains(id));
            match (of(0), of(1)) {
                (true, false) => 0,
                (false, true) => 1,
                _ => panic!("row {index} is not one component's: {row:?}"),
            }
        })
        .collect()
}

/// The largest gap, over every prefix of the rows, between a component's tokens
/// and its weight's share of all tokens, in rows of `seq_len`.
fn worst_gap(rows: &[Vec<u32>], components: &[usize], weights: [f64; 2], seq_len: usize) -> f64 {
    let sum = weights[0] + weights[1];
    let (mut counts, mut total, mut worst) = ([0usize; 2], 0usize, 0f64);
    for (row, &component) in rows.iter().zip(components) {
        counts[component] += row.len();
        total += row.len();
        for (count, weight) in counts.iter().zip(weights) {
            worst = worst.max((*count as f64 - weight / sum * total as f64).abs() / seq_len as f64);
        }
    }
    worst
}

#[test]
fn three_mixtures_of_two_token_stores_tokenize_nothing_and_keep_each_share_within_a_row() {
    let env = TestEnv::new();
    let (inputs, ids) = two_components(&env);
    let digits_tokens = read_manifest(&env.cache().join("by-name/digits"))["token_store"]["fingerprint"].clone();
    let digits_store = env.cache().join("entries").join(&digits_tokens.as_str().unwrap()[..16]);
    let digits_total = read_manifest(&digits_store)["totals"]["tokens"].as_u64().unwrap();
    // From here on, anything that reads an input reads garbage.
    let restores: Vec<_> = inputs.iter().map(|input| scramble(input)).collect();
    let mixtures = [
        ("even", "seed = 1".to_string(), ["spec = \"letters.toml\"", "spec = \"digits.toml\""], [0.5, 0.5], 64),
        ("mostly-letters", "seed = 2".to_string(), ["entry = \"letters\"", "entry = \"digits\""], [0.8, 0.2], 32),
        (
            "digits-twice",
            format!("seed = 3\ntotal_tokens = {{ train = {} }}", 2 * digits_total),
            ["spec = \"letters.toml\"", "entry = \"digits\""],
            [0.3, 0.7],
            48,
        ),
    ];
    for (name, mix, named, weights, seq_len) in mixtures {
        let components = [(named[0], weights[0]), (named[1], weights[1])];
        let view = format!("[sequence]\nseq_len = {seq_len}\n");
        let spec = env.write(&format!("{name}.toml"), mixture_text(name, &mix, &components, &view));
        let (prepared, opened) = prepare_traced(&env, &spec, &[]);
        assert_eq!(prepared["built"], true, "{prepared}");
        for store in prepared["token_stores"].as_array().unwrap() {
            assert_eq!(store["tokenized"], false, "{name}: {prepared}");
        }
        for input in &inputs {
            let file = input.file_name().unwrap().to_str().unwrap();
            let reads: Vec<&String> = opened.iter().filter(|line| line.contains(file)).collect();
            assert!(reads.is_empty(), "{name}: the mixture opened an input: {reads:?}");
        }
        let entry = Path::new(prepared["entry"].as_str().unwrap());
        let rows = entry_rows(entry);
        assert!(rows.iter().all(|row| row.len() == seq_len), "{name}: rows of {seq_len}");
        let of = row_components(&rows, &ids);
        let gap = worst_gap(&rows, &of, weights, seq_len);
        assert!(gap < 1.0, "{name}: a share strayed {gap} rows from its weight");
        assert!(of.contains(&0) && of.contains(&1), "{name}: both components give rows");
        let record = &read_manifest(entry)["mixture"];
        let epochs: Vec<u64> = record["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["splits"]["train"]["epochs"].as_u64().unwrap())
            .collect();
        let expected = if name == "digits-twice" { vec![1, 2] } else { vec![1, 1] };
        assert_eq!(epochs, expected, "{name}: {record}");
    }
    restores.into_iter().for_each(|restore| restore());
    let status = env.json(&["status", "--json"]);
    let mixture = status["entries"].as_array().unwrap().iter().find(|entry| entry["name"] == "even").unwrap();
    assert_eq!(mixture["mixture_of"].as_array().unwrap().len(), 2, "{mixture}");
    let inspected = env.run_ok(&["inspect", "digits-twice", "--rows", "1"]);
    assert!(inspected.contains("mixture of token stores") && inspected.contains("entry digits"), "{inspected}");
}

#[test]
fn a_mixture_is_the_same_bytes_on_one_and_four_threads() {
    let env = TestEnv::new();
    corpus(&env, "letters", LETTERS, 3, 40, 5);
    corpus(&env, "digits", DIGITS, 2, 40, 6);
    env.write("letters.toml", gpt2_spec("letters", "letters/*.jsonl", ""));
    env.write("digits.toml", gpt2_spec("digits", "digits/*.jsonl", ""));
    let components = [("spec = \"letters.toml\"", 2.0), ("spec = \"digits.toml\"", 1.0)];
    let view = "[sequence]\nseq_len = 40\npack = \"best_fit\"\nposition_ids = true\n\
                [output]\nformats = [\"megatron\", \"flat\"]\ntarget_shard_bytes = \"1MiB\"\n";
    let spec = env.write("mix.toml", mixture_text("mix", "seed = 9", &components, view));
    let built: Vec<Vec<(String, Vec<u8>)>> = ["1", "4"]
        .iter()
        .map(|jobs| {
            let cache = env.path(&format!("cache-{jobs}"));
            let prepared = env.prepare(&spec, &["--jobs", jobs, "--cache", cache.to_str().unwrap()]);
            entry_files(Path::new(prepared["entry"].as_str().unwrap()))
        })
        .collect();
    assert!(built[0].iter().any(|(name, _)| name == "megatron/blend.json"));
    assert!(built[0].iter().any(|(name, _)| name.starts_with("flat/")));
    assert_eq!(built[0], built[1], "one thread and four wrote other bytes");
}

/// A minimal word-level `tokenizer.json`: another vocabulary than GPT-2's.
const WORD_LEVEL: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[
{"id":0,"content":"<eos>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"<eos>":0,"<unk>":1,"0":2,"1":3,"2":4},"unk_token":"<unk>"}}"#;

#[test]
fn a_tokenizer_mismatch_and_a_short_component_are_errors_that_name_them() {
    let env = TestEnv::new();
    two_components(&env);
    env.write("words.json", WORD_LEVEL);
    let words = "name = \"words\"\n[splits]\ntrain = [\"digits/*.jsonl\"]\n[tokenizer]\npath = \"words.json\"\neos_token = \"<eos>\"\n";
    env.write("words.toml", words);
    let components = [("spec = \"letters.toml\"", 1.0), ("spec = \"words.toml\"", 1.0)];
    let spec = env.write("mismatch.toml", mixture_text("mismatch", "", &components, ""));
    let output = env.run(&["prepare", spec.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(stderr.contains("spec letters.toml") && stderr.contains("spec words.toml"), "{stderr}");
    assert!(stderr.contains("different tokenizers"), "{stderr}");
    let entries = std::fs::read_dir(env.cache().join("entries")).unwrap().count();
    assert_eq!(entries, 4, "nothing is tokenized for a mixture that cannot be made");

    let components = [("spec = \"letters.toml\"", 1.0), ("entry = \"digits\"\nmax_epochs = 2", 1.0)];
    let spec = env.write("short.toml", mixture_text("short", "total_tokens = \"50M\"", &components, ""));
    let output = env.run(&["prepare", spec.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(stderr.contains("entry digits is short") && stderr.contains("25000000 are needed"), "{stderr}");
    assert!(stderr.contains("2 epoch(s)") && stderr.contains("max_epochs"), "{stderr}");

    // The same tokenizer, but documents without EOS: rows would run one component's documents together.
    let bare = "name = \"bare\"\n[splits]\ntrain = [\"digits/*.jsonl\"]\n[tokenizer]\nbuiltin = \"gpt2\"\nensure_bos_eos = false\n";
    env.write("bare.toml", bare);
    let components = [("spec = \"letters.toml\"", 1.0), ("spec = \"bare.toml\"", 1.0)];
    let spec = env.write("bare-mix.toml", mixture_text("bare-mix", "", &components, ""));
    let output = env.run(&["prepare", spec.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(stderr.contains("spec bare.toml") && stderr.contains("different special tokens"), "{stderr}");
}

#[test]
fn a_store_file_others_may_write_is_copied_into_a_mixture_not_linked() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let env = TestEnv::new();
    two_components(&env);
    let store = |name: &str| {
        let view = read_manifest(&env.cache().join("by-name").join(name));
        env.cache().join("entries").join(&view["token_store"]["fingerprint"].as_str().unwrap()[..16])
    };
    // The digits store's files writable by the group: linking them would let the group change the mixture.
    let digits = store("digits");
    for file in walkdir::WalkDir::new(digits.join("tokens")).into_iter().flatten().filter(|f| f.file_type().is_file()) {
        std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o664)).unwrap();
    }
    let components = [("entry = \"letters\"", 1.0), ("entry = \"digits\"", 1.0)];
    let view = "[output]\nformats = [\"megatron\"]\n";
    let spec = env.write("mix.toml", mixture_text("mix", "", &components, view));
    let entry = PathBuf::from(env.prepare(&spec, &[])["entry"].as_str().unwrap());
    let megatron = entry.join("megatron/train");
    let links = |prefix: &str| -> Vec<u64> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&megatron).unwrap().flatten().map(|e| e.path()).collect();
        files.retain(|path| path.file_name().unwrap().to_str().unwrap().starts_with(prefix));
        files.iter().map(|path| std::fs::metadata(path).unwrap().nlink()).collect()
    };
    assert!(links("c0-").iter().all(|&count| count > 1), "the letters store's own files are linked");
    assert!(links("c1-").iter().all(|&count| count == 1), "the group-writable files are copied");
    assert_eq!(
        std::fs::read(megatron.join("c1-000000.bin")).unwrap(),
        std::fs::read(digits.join("tokens/train/000000.bin")).unwrap()
    );
    env.run_ok(&["verify", entry.file_name().unwrap().to_str().unwrap()]);
}

#[test]
fn a_staged_mixture_blends_in_megatron_and_outlives_gc_of_its_token_stores() {
    let env = TestEnv::new();
    let (_, ids) = two_components(&env);
    let components = [("spec = \"letters.toml\"", 0.25), ("spec = \"digits.toml\"", 0.75)];
    let view = "[sequence]\nseq_len = 64\n[output]\nformats = [\"megatron\"]\n";
    let spec = env.write("mix.toml", mixture_text("mix", "seed = 4", &components, view));
    let prepared = env.prepare(&spec, &[]);
    let short = prepared["fingerprint"].as_str().unwrap()[..16].to_string();
    let stores: Vec<String> = prepared["token_stores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|store| store["fingerprint"].as_str().unwrap()[..16].to_string())
        .collect();
    let dest = env.path("node/ferry");
    env.run_ok(&["stage", spec.to_str().unwrap(), "--dest", dest.to_str().unwrap()]);

    // The mixture was used last: keeping one entry evicts the stores and the components' views.
    let report = env.json(&["gc", "--keep", "1", "--json"]);
    let removed: Vec<&str> =
        report["removed"].as_array().unwrap().iter().map(|r| r["path"].as_str().unwrap()).collect();
    for store in &stores {
        assert!(removed.iter().any(|path| path.ends_with(store.as_str())), "{store} evicted: {report}");
    }
    assert!(env.cache().join("entries").join(&short).is_dir(), "the mixture in use stays");
    env.run_ok(&["verify", &short]);
    env.run_ok(&["verify", "--dest", dest.to_str().unwrap()]);
    let status = env.run_ok(&["status"]);
    assert!(status.contains("(gone)"), "{status}");
    // Whole without its stores: it stages again to another node.
    let other = env.path("other/ferry");
    env.run_ok(&["stage", spec.to_str().unwrap(), "--dest", other.to_str().unwrap()]);
    assert_eq!(entry_files(&other.join("entries").join(&short)), entry_files(&dest.join("entries").join(&short)));

    let Some(python) =
        common::provided("FERRY_TEST_MEGATRON_PYTHON", "FERRY_REQUIRE_MEGATRON", "Python with megatron-core")
    else {
        return;
    };
    // What a job script does: the node's copy named to Megatron in a file.
    let data_args = env
        .write("data_args.json", env.run_ok(&["inspect", "mix", "--megatron-args", "--cache", dest.to_str().unwrap()]));
    let line =
        env.run_ok(&["inspect", "mix", "--megatron-args", "--split", "train", "--cache", dest.to_str().unwrap()]);
    assert!(
        line.split_whitespace().skip(1).step_by(2).all(|prefix| prefix.starts_with(dest.to_str().unwrap())),
        "{line}"
    );
    let script = common::python_script("check_mixture.py");
    let output = std::process::Command::new(python)
        .arg(&script)
        .args([data_args.to_str().unwrap(), "train", "64", "400"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let weights = &summary["weights"];
    assert!((weights["c0"].as_f64().unwrap() - 0.25).abs() < 1e-9, "{summary}");
    let digits = summary["drawn"]["c1"].as_f64().unwrap() / 400.0;
    assert!((digits - 0.75).abs() < 0.02, "Megatron drew {digits} of its samples from the digits: {summary}");
    assert!(!ids[1].is_empty());
}
