//! The fast byte-level BPE encoder against Python `tokenizers`, for tokenizers
//! trained with the pre-tokenizer and normalizer configurations of Llama-3, Qwen2,
//! GPT-4o and DeepSeek-V3 (and one with every other `Split` behaviour), one whose
//! merge order differs from its id order, and `prepare`'s output with it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TestEnv, describe, entry_data_files, entry_rows, python, python_script};
use ferry::corpus::Generator;
use ferry::spec::Spec;
use ferry::tokenizer::Encoders;

const FAMILIES: &[&str] = &[
    "llama3",
    "llama3_permuted",
    "qwen2",
    "gpt4o",
    "deepseek_v3",
    "behaviors",
    "llama2_sentencepiece",
    "gemma_sentencepiece",
];

/// The fast encoder a family takes, as the manifest names it.
fn fast_encoder_of(family: &str) -> &'static str {
    if family.ends_with("_sentencepiece") { "fast_sentencepiece_bpe" } else { "fast_bytelevel_bpe" }
}

fn documents() -> Vec<String> {
    let mut documents: Vec<String> = [
        "",
        " ",
        "\n\n\n",
        "   leading spaces",
        "trailing spaces   ",
        "  \n\n\t  x   \t",
        "tabs\t\tand\r\nCRLF\r\n",
        "emoji 🙂🚀 and 👩‍👩‍👧 family",
        "東京都の天気は晴れです。中文分词测试 北京市 한국어 テキスト",
        "مرحبا بالعالم and Привет мир",
        // Not NFC: decomposed accents and a ring, which NFC tokenizers compose first.
        "cafe\u{301} and café, A\u{30a}ngstr\u{f6}m, Cafe\u{301}",
        "zero\u{200b}width and no\u{a0}break",
        "numbers 1234567890 3.14159 1e-10 0x1F 2024-11-23 12,345,678",
        "it's we're they've I'm you'll he'd IT'S WE'RE",
        "def f(x):\n    return x ** 2  # comment\n\n\n",
        "fn main() {\n\tprintln!(\"{}\", 1);\n}",
        "!!!???...,,,;;; a.b,c;d",
        "x  y   z    w",
        "<|begin_of_text|>Hello<|end_of_text|>",
        "a<|end_of_text|>b <|begin_of_text|> c <tab>\td café and cafe\u{301}",
        "<html><body class=\"x\">&amp;</body></html> https://example.org/a/b?c=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut generator = Generator::new(15);
    for set in ["Pile-CC", "Github", "ArXiv", "StackExchange", "EuroParl", "Wikipedia (en)"].iter().cycle().take(60) {
        documents.push(generator.document(set));
    }
    documents.push(documents.concat());
    // A 1 MB document that is one word: a single pre-token merged as a whole.
    let letters = (0..1_000_000u64).map(|i| (b'a' + ((i * i * 7919 + i / 3) % 26) as u8) as char);
    documents.push(letters.collect());
    documents
}

/// Trains the tokenizers with Python `tokenizers`; returns their folder and its ids per family.
fn trained_families(env: &TestEnv, python: &Path, documents: &[String]) -> (PathBuf, serde_json::Value) {
    let documents_path = env.write("documents.json", serde_json::to_vec(documents).unwrap());
    let out = env.path("families");
    let output = Command::new(python)
        .arg(python_script("byte_level_families.py"))
        .arg(&out)
        .arg(&documents_path)
        .output()
        .expect("run python");
    assert!(output.status.success(), "training failed:\n{}", describe(&output));
    let expected = serde_json::from_slice(&std::fs::read(out.join("expected.json")).unwrap()).unwrap();
    (out, expected)
}

fn spec_text(name: &str, tokenizer: &Path, train_glob: &str) -> String {
    format!(
        "name = \"{name}\"\n[splits]\ntrain = [\"{train_glob}\"]\n[tokenizer]\npath = \"{}\"\nensure_bos_eos = false\n[sequence]\npack = \"none\"\n",
        tokenizer.display()
    )
}

#[test]
fn families_through_the_fast_path_give_python_tokenizers_ids() {
    let Some(python) = python() else { return };
    let env = TestEnv::new();
    let documents = documents();
    let (families, expected) = trained_families(&env, &python, &documents);
    let lines: String = documents.iter().map(|text| format!("{}\n", serde_json::json!({"text": text}))).collect();
    env.write("data/documents.jsonl", lines);
    for family in FAMILIES {
        let tokenizer = families.join(family).join("tokenizer.json");
        let text = spec_text(family, &tokenizer, "data/documents.jsonl");
        let spec = Spec::parse(&text, &env.path("spec.toml"), env.path("")).unwrap();
        let encoders = Encoders::load(&spec).unwrap();
        assert!(encoders.fast_available(), "{family}: {:?}", encoders.fast_unavailable);
        let kind = encoders.fast_kind().unwrap();
        assert_eq!(kind.name(), fast_encoder_of(family));
        assert!(encoders.fast_path_confirmed(), "{family}: tokenizers writes the canonical form ferry assembled");
        for (index, document) in documents.iter().enumerate() {
            let ids = encoders.encode(document, kind).unwrap();
            let want: Vec<u32> = serde_json::from_value(expected[family][index].clone()).unwrap();
            assert_eq!(ids, want, "{family}, document {index}: {document:?}");
        }

        let spec_path = env.write(&format!("{family}.toml"), text);
        let prepared = env.prepare(&spec_path, &[]);
        assert_eq!(prepared["encoder"], fast_encoder_of(family), "{family}: {prepared}");
        let entry = Path::new(prepared["entry"].as_str().unwrap());
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(entry.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(manifest["tokenizer"]["encoder"], fast_encoder_of(family), "{family}");
        assert!(manifest["tokenizer"]["fast_unavailable"].is_null(), "{family}");
        let want: Vec<Vec<u32>> = serde_json::from_value(expected[family].clone()).unwrap();
        let want: Vec<Vec<u32>> = want.into_iter().filter(|ids| !ids.is_empty()).collect();
        assert_eq!(entry_rows(entry), want, "{family}: the entry's rows are Python's ids");
    }
    // Each family's confirmation that tokenizers writes the form ferry assembled is
    // remembered for its next builds.
    assert_eq!(confirmations_remembered(&env), FAMILIES.len());
    assert_merge_order_differs_from_id_order(&families.join("llama3_permuted").join("tokenizer.json"));
}

/// How many confirmations of assembled canonical forms the cache remembers.
fn confirmations_remembered(env: &TestEnv) -> usize {
    let Ok(memos) = std::fs::read_dir(env.cache().join("memo")) else { return 0 };
    memos
        .filter(|memo| memo.as_ref().unwrap().file_name().to_string_lossy().starts_with("tokenizer-confirmed-"))
        .count()
}

/// The permuted tokenizer really has merges whose results are not in id order.
fn assert_merge_order_differs_from_id_order(tokenizer: &Path) {
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(tokenizer).unwrap()).unwrap();
    let vocab = &value["model"]["vocab"];
    let result_ids: Vec<u64> = value["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|merge| {
            let pair: Vec<&str> = merge.as_array().unwrap().iter().map(|part| part.as_str().unwrap()).collect();
            vocab[pair.concat()].as_u64().unwrap()
        })
        .collect();
    assert!(result_ids.windows(2).any(|pair| pair[0] > pair[1]), "merge results must be out of id order");
}

#[test]
fn llama3_style_output_is_identical_with_one_or_many_threads_and_one_or_four_shards() {
    let Some(python) = python() else { return };
    let env = TestEnv::new();
    let documents = documents();
    let (families, _) = trained_families(&env, &python, &documents);
    let tokenizer = families.join("llama3").join("tokenizer.json");
    let mut generator = Generator::new(3);
    let lines: Vec<String> = (0..400)
        .map(|index| {
            serde_json::json!({"text": generator.document(["Github", "Pile-CC", "ArXiv"][index % 3])}).to_string()
        })
        .collect();
    env.write("one/all.jsonl", lines.join("\n") + "\n");
    for (part, chunk) in lines.chunks(100).enumerate() {
        env.write(&format!("four/part-{part}.jsonl"), chunk.join("\n") + "\n");
    }
    let one = env.write("one.toml", spec_text("one", &tokenizer, "one/*.jsonl"));
    let four = env.write("four.toml", spec_text("four", &tokenizer, "four/*.jsonl"));
    let entry = |prepared: serde_json::Value| PathBuf::from(prepared["entry"].as_str().unwrap());
    let one_shard = entry(env.prepare(&one, &["--jobs", "1"]));
    let four_one_thread = entry(env.prepare(&four, &["--jobs", "1", "--cache", env.path("cache-1").to_str().unwrap()]));
    let four_threads = entry(env.prepare(&four, &["--jobs", "3", "--cache", env.path("cache-3").to_str().unwrap()]));
    assert_eq!(entry_data_files(&four_one_thread), entry_data_files(&four_threads), "1 vs 3 threads");
    let rows_one = entry_rows(&one_shard);
    assert_eq!(rows_one.len(), 400);
    assert_eq!(rows_one, entry_rows(&four_threads), "1 shard vs the same documents in 4");
}

/// A vocabulary `tokenizers` reads otherwise than ferry (two tokens on one id: it
/// keeps one). The fast encoder is built from ferry's reading and used from the
/// first document; the comparison of the canonical forms, done meanwhile, finds
/// the difference before anything is published, and the build is encoded again
/// by the tokenizer.
#[test]
fn a_vocabulary_read_differently_is_encoded_again_by_the_tokenizer() {
    let env = TestEnv::new();
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(ferry::tokenizer::builtin_gpt2_json().unwrap()).unwrap();
    let the = tokenizer["model"]["vocab"]["the"].clone();
    tokenizer["model"]["vocab"]["zz-the-again"] = the;
    let tokenizer_path = env.write("tokenizer.json", tokenizer.to_string());
    let documents = documents();
    let lines: String = documents.iter().map(|text| format!("{}\n", serde_json::json!({"text": text}))).collect();
    env.write("data/documents.jsonl", lines);
    let text = spec_text("dup", &tokenizer_path, "data/documents.jsonl");
    let spec = Spec::parse(&text, &env.path("spec.toml"), env.path("")).unwrap();
    let encoders = Encoders::load(&spec).unwrap();
    assert!(encoders.fast_available() && !encoders.fast_path_confirmed());

    let prepared = env.prepare(&env.write("dup.toml", text), &[]);
    assert_eq!(prepared["encoder"], "tokenizers", "{prepared}");
    let why = prepared["fast_unavailable"].as_str().unwrap_or_default();
    assert!(why.contains("vocabulary or merges otherwise than the tokenizer"), "{prepared}");
    assert_eq!(confirmations_remembered(&env), 0, "a form tokenizers writes otherwise is not remembered");
    let want: Vec<Vec<u32>> = documents
        .iter()
        .map(|document| encoders.encode_reference(document).unwrap())
        .filter(|ids| !ids.is_empty())
        .collect();
    let entry = Path::new(prepared["entry"].as_str().unwrap());
    assert_eq!(entry_rows(entry), want, "the entry's rows are the tokenizer's ids");
}
