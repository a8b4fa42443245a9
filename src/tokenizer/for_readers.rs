//! The tokenizer as an entry carries it: a Megatron or nanoGPT user staging token files,
//! or anyone checking rows, decodes with the very tokenizer that made them, offline,
//! with `transformers.AutoTokenizer.from_pretrained(entry)` or
//! `tokenizers.Tokenizer.from_file(entry/tokenizer.json)`.
//!
//! Both files follow from what the fingerprint covers (the tokenizer's canonical
//! serialization and the spec), so an entry's bytes stay a function of its fingerprint.

use serde_json::json;

/// The BOS and EOS tokens' text, where the tokenizer has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<String>,
    pub eos: Option<String>,
}

/// `tokenizer.json` (`tokenizer_json`: the canonical serialization, without truncation
/// or padding, as encoding used it) and `tokenizer_config.json` (the class `transformers` builds, the
/// BOS/EOS tokens, and the sequence length when rows have one).
pub fn files(
    tokenizer_json: &str,
    special: &SpecialTokens,
    model_max_length: Option<usize>,
) -> Result<Vec<(&'static str, String)>, String> {
    let mut config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        // Decoding must give back the documents' text, spaces before punctuation included.
        "clean_up_tokenization_spaces": false,
        "bos_token": special.bos,
        "eos_token": special.eos,
    });
    if let Some(length) = model_max_length {
        config["model_max_length"] = json!(length);
    }
    let config = serde_json::to_string_pretty(&config).map_err(|err| err.to_string())?;
    Ok(vec![("tokenizer.json", tokenizer_json.to_string()), ("tokenizer_config.json", config)])
}
