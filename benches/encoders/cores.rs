//! The fast core against tiktoken-rs on one thread, same documents, same vocabulary;
//! and, for reference, the `tiktoken` crate (pure Rust, hand-written pre-tokenizer
//! scanners), which only encodes its built-in vocabularies and patterns, so ferry
//! cannot build it from a tokenizer.json.

use std::path::Path;
use std::time::Instant;

use ferry::tokenizer::{FastEncoder, Ranks, builtin_gpt2_json, llama3_style_tokenizer_json};
use serde_json::{Value, json};
use tiktoken_rs::CoreBPE;

/// Documents are cut from the files at line ends once this long, like real corpora's records.
const DOCUMENT_BYTES: usize = 16 * 1024;
/// Documents also encoded with `tokenizers` to check the fast core's ids.
const REFERENCE_SAMPLE: usize = 300;

pub fn run(files: &[String]) -> anyhow::Result<()> {
    let documents = documents(files)?;
    let bytes: usize = documents.iter().map(String::len).sum();
    eprintln!("{} documents, {bytes} bytes", documents.len());
    let gpt2: Value = serde_json::from_str(builtin_gpt2_json().map_err(anyhow::Error::msg)?)?;
    let builtin = |name| tiktoken::get_encoding(name).ok_or_else(|| anyhow::anyhow!("no {name} in the tiktoken crate"));
    compare("gpt2", &gpt2, &tiktoken_rs::r50k_base()?, builtin("r50k_base")?, &documents)?;
    let llama3_style = llama3_style_tokenizer_json(Ranks::Cl100kBase).map_err(anyhow::Error::msg)?;
    // Llama-3's split pattern is cl100k's, so the same ids are expected.
    compare("llama3_style_cl100k", &llama3_style, &tiktoken_rs::cl100k_base()?, builtin("cl100k_base")?, &documents)?;
    Ok(())
}

/// Writes a Llama-3-structured tokenizer.json on `ranks` with their split pattern:
/// cl100k's is the one `run` measures, o200k's has GPT-4o's pattern.
pub fn write_llama3_style(ranks: Ranks, out: Option<&Path>) -> anyhow::Result<()> {
    let out = out.ok_or_else(|| anyhow::anyhow!("usage: --llama3-tokenizer|--o200k-tokenizer OUT_JSON"))?;
    let tokenizer = llama3_style_tokenizer_json(ranks).map_err(anyhow::Error::msg)?;
    fs_err::write(out, serde_json::to_vec(&tokenizer)?)?;
    Ok(())
}

/// Writes ferry's embedded GPT-2 tokenizer.json.
pub fn write_gpt2(out: Option<&Path>) -> anyhow::Result<()> {
    let out = out.ok_or_else(|| anyhow::anyhow!("usage: --gpt2-tokenizer OUT_JSON"))?;
    fs_err::write(out, builtin_gpt2_json().map_err(anyhow::Error::msg)?)?;
    Ok(())
}

/// Builds the fast encoder from a `tokenizer.json` `PASSES` times, timing each build
/// alone (the part of a build's start that is ferry's own reading of the tokenizer),
/// in this thread's CPU time; prints one JSON line per pass.
pub fn build_only(args: &[String]) -> anyhow::Result<()> {
    let [tokenizer_path, passes] = args else { anyhow::bail!("usage: --build TOKENIZER_JSON PASSES") };
    let json = fs_err::read_to_string(tokenizer_path)?;
    for _ in 0..passes.parse::<usize>()? {
        let started = thread_seconds();
        let fast = FastEncoder::for_tokenizer_json(&json)?;
        let seconds = thread_seconds() - started;
        drop(fast);
        println!("{}", json!({"cpu_seconds": seconds}));
    }
    Ok(())
}

/// The fast core alone on one thread, its cache cold at each pass (a new encoder):
/// the quick measure for comparing two builds of it, alternating. Prints one JSON
/// line per pass with its tokens per second of this thread's CPU time, which other
/// processes on the machine do not inflate.
pub fn fast_only(args: &[String]) -> anyhow::Result<()> {
    let (tokenizer_path, text_file, passes) = match args {
        [tokenizer, text] => (tokenizer, text, 3),
        [tokenizer, text, passes] => (tokenizer, text, passes.parse()?),
        _ => anyhow::bail!("usage: --fast TOKENIZER_JSON TEXT_FILE [PASSES]"),
    };
    let tokenizer: Value = serde_json::from_slice(&fs_err::read(tokenizer_path)?)?;
    let documents = documents(std::slice::from_ref(text_file))?;
    for _ in 0..passes {
        let fast = FastEncoder::for_tokenizer(&tokenizer)?;
        let started = thread_seconds();
        let tokens: usize = documents.iter().map(|text| fast.encode(text).map_or(0, |ids| ids.len())).sum();
        let seconds = thread_seconds() - started;
        println!(
            "{}",
            json!({"tokens": tokens, "cpu_seconds": seconds, "tokens_per_cpu_second": tokens as f64 / seconds})
        );
    }
    Ok(())
}

/// This thread's CPU time, which other processes on the machine do not inflate.
/// Through libc, not rustix's vDSO call, so that the bench also runs under valgrind.
fn thread_seconds() -> f64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    time.tv_sec as f64 + time.tv_nsec as f64 * 1e-9
}

/// One word of `bytes` pseudo-random ASCII letters, encoded by the fast core
/// (timed) and by `tokenizers`: merging must not go quadratic on long pieces.
pub fn long_word(args: &[String]) -> anyhow::Result<()> {
    let [tokenizer_path, bytes] = args else { anyhow::bail!("usage: --long-word TOKENIZER_JSON BYTES") };
    let tokenizer: Value = serde_json::from_slice(&fs_err::read(tokenizer_path)?)?;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let word: String = (0..bytes.parse::<usize>()?)
        .map(|_| {
            // xorshift64: reproducible letters without a generator crate in the bench.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (b'a' + (state % 26) as u8) as char
        })
        .collect();
    let fast = FastEncoder::for_tokenizer(&tokenizer)?;
    let reference: tokenizers::Tokenizer = tokenizer.to_string().parse().map_err(anyhow::Error::msg)?;
    let timed = |text: &str| -> anyhow::Result<(f64, usize, bool)> {
        let started = Instant::now();
        let ids = fast.encode(text).unwrap_or_default();
        let seconds = started.elapsed().as_secs_f64();
        let want = reference.encode_fast(text, false).map_err(anyhow::Error::msg)?.get_ids().to_vec();
        Ok((seconds, ids.len(), ids == want))
    };
    let (seconds, tokens, same) = timed(&word)?;
    // One whitespace run with a line break every few bytes: a scanner that reads
    // ahead to the run's end from every line break is quadratic here.
    let blank_lines = "\n  ".repeat(word.len() / 3);
    let (blank_seconds, _, blank_same) = timed(&blank_lines)?;
    let report = json!({"bytes": word.len(), "seconds": seconds, "tokens": tokens, "same_as_tokenizers": same,
        "blank_lines_seconds": blank_seconds, "blank_lines_same_as_tokenizers": blank_same});
    println!("{report}");
    Ok(())
}

fn documents(files: &[String]) -> anyhow::Result<Vec<String>> {
    let mut documents = Vec::new();
    for file in files {
        let text = String::from_utf8_lossy(&fs_err::read(Path::new(file))?).into_owned();
        let mut document = String::new();
        for line in text.split_inclusive('\n') {
            document.push_str(line);
            if document.len() >= DOCUMENT_BYTES {
                documents.push(std::mem::take(&mut document));
            }
        }
        if !document.is_empty() {
            documents.push(document);
        }
    }
    Ok(documents)
}

/// Tokens per second of `encode` over all documents on this thread, and its ids.
fn timed(documents: &[String], encode: impl Fn(&str) -> Vec<u32>) -> (f64, Vec<Vec<u32>>) {
    let started = Instant::now();
    let ids: Vec<Vec<u32>> = documents.iter().map(|text| encode(text)).collect();
    let tokens: usize = ids.iter().map(Vec::len).sum();
    (tokens as f64 / started.elapsed().as_secs_f64(), ids)
}

/// Passes over the documents per encoder, alternating, the best kept: this
/// machine's speed varies from second to second.
const ROUNDS: usize = 3;

fn compare(
    name: &str,
    tokenizer: &Value,
    tiktoken: &CoreBPE,
    tiktoken_crate: &tiktoken::CoreBpe,
    documents: &[String],
) -> anyhow::Result<()> {
    let reference: tokenizers::Tokenizer = tokenizer.to_string().parse().map_err(anyhow::Error::msg)?;
    let (mut tiktoken_rate, mut crate_rate, mut fast_rate, mut warm_rate) = (0f64, 0f64, 0f64, 0f64);
    // One encoder for every pass too: from the second pass on, its cache is warm,
    // as a peer's is when one tokenizer object encodes pass after pass.
    let warm = FastEncoder::for_tokenizer(tokenizer)?;
    let (mut tiktoken_ids, mut crate_ids, mut fast_ids) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (rate, ids) = timed(documents, |text| tiktoken.encode_ordinary(text));
        (tiktoken_rate, tiktoken_ids) = (tiktoken_rate.max(rate), ids);
        let (rate, ids) = timed(documents, |text| tiktoken_crate.encode(text));
        (crate_rate, crate_ids) = (crate_rate.max(rate), ids);
        // A new encoder each pass: its pre-token cache starts cold every time.
        let fast = FastEncoder::for_tokenizer(tokenizer)?;
        let (rate, ids) = timed(documents, |text| fast.encode(text).unwrap_or_default());
        (fast_rate, fast_ids) = (fast_rate.max(rate), ids);
        let (rate, _) = timed(documents, |text| warm.encode(text).unwrap_or_default());
        if round > 0 {
            warm_rate = warm_rate.max(rate);
        }
    }
    let differ_tiktoken = fast_ids.iter().zip(&tiktoken_ids).filter(|(a, b)| a != b).count();
    let differ_crate = fast_ids.iter().zip(&crate_ids).filter(|(a, b)| a != b).count();
    let sample = &documents[..documents.len().min(REFERENCE_SAMPLE)];
    let (reference_rate, reference_ids) = timed(sample, |text| {
        reference.encode_fast(text, false).map(|encoding| encoding.get_ids().to_vec()).unwrap_or_default()
    });
    let differ_reference = fast_ids.iter().zip(&reference_ids).filter(|(a, b)| a != b).count();
    let report = json!({
        "vocabulary": name,
        "documents": documents.len(),
        "tokens": fast_ids.iter().map(Vec::len).sum::<usize>(),
        "fast_tokens_per_second": fast_rate,
        "fast_warm_tokens_per_second": warm_rate,
        "tiktoken_rs_tokens_per_second": tiktoken_rate,
        "fast_vs_tiktoken_rs": fast_rate / tiktoken_rate,
        "tokenizers_tokens_per_second_on_sample": reference_rate,
        "documents_differing_from_tiktoken_rs": differ_tiktoken,
        "tiktoken_crate_tokens_per_second": crate_rate,
        "fast_vs_tiktoken_crate": fast_rate / crate_rate,
        "documents_differing_from_tiktoken_crate": differ_crate,
        "documents_differing_from_tokenizers": differ_reference,
        "tokenizers_sample": sample.len(),
        "rounds": ROUNDS,
        "fast_cache": "fast_tokens_per_second: cold at the start of every pass; fast_warm: one encoder, passes after the first",
    });
    println!("{report}");
    Ok(())
}
