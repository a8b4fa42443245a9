//! `tokenizers`' canonical form of a BPE tokenizer (what its `to_string(false)`
//! writes), assembled from the small parts as `tokenizers` writes them and the
//! vocabulary and merges as ferry's own reading of the file already wrote them
//! (`serialized::Large`). `tokenizers` writing a large vocabulary and its merges
//! again took 0.16 s (GPT-4o's) between its parse and a build's first document.
//! Whether it would write the same is still checked, off that path: `Encoders`
//! compares the two before a build publishes what its fast encoder made.

use serde::Serialize;
use tokenizers::{
    AddedVocabulary, DecoderWrapper, ModelWrapper, NormalizerWrapper, PaddingParams, PostProcessorWrapper,
    PreTokenizerWrapper, TruncationParams,
};

/// Field for field what `TokenizerImpl`'s `Serialize` writes, but for the model's
/// vocabulary and merges, its last two fields, which `assemble` appends.
#[derive(Serialize)]
struct SmallParts<'a> {
    version: &'static str,
    truncation: Option<&'a TruncationParams>,
    padding: Option<&'a PaddingParams>,
    added_tokens: &'a AddedVocabulary,
    normalizer: Option<&'a NormalizerWrapper>,
    pre_tokenizer: Option<&'a PreTokenizerWrapper>,
    post_processor: Option<&'a PostProcessorWrapper>,
    decoder: Option<&'a DecoderWrapper>,
    model: BpeSettings<'a>,
}

/// What `BPE`'s `Serialize` writes before its vocabulary and merges.
#[derive(Serialize)]
struct BpeSettings<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    dropout: Option<f32>,
    unk_token: Option<&'a str>,
    continuing_subword_prefix: Option<&'a str>,
    end_of_word_suffix: Option<&'a str>,
    fuse_unk: bool,
    byte_fallback: bool,
    ignore_merges: bool,
}

/// The canonical form of `tokenizer`, a BPE one, with `vocab` and `merges` as its
/// model's vocabulary and merges (JSON texts written the way `tokenizers` writes
/// them); `None` for another model.
pub fn assemble(tokenizer: &tokenizers::Tokenizer, vocab: &str, merges: &str) -> Option<String> {
    let ModelWrapper::BPE(bpe) = tokenizer.get_model() else {
        return None;
    };
    let small = SmallParts {
        // `tokenizers`' SERIALIZATION_VERSION; the tests compare whole texts with its own.
        version: "1.0",
        truncation: tokenizer.get_truncation(),
        padding: tokenizer.get_padding(),
        added_tokens: tokenizer.get_added_vocabulary(),
        normalizer: tokenizer.get_normalizer(),
        pre_tokenizer: tokenizer.get_pre_tokenizer(),
        post_processor: tokenizer.get_post_processor(),
        decoder: tokenizer.get_decoder(),
        model: BpeSettings {
            kind: "BPE",
            dropout: bpe.dropout,
            unk_token: bpe.unk_token.as_deref(),
            continuing_subword_prefix: bpe.continuing_subword_prefix.as_deref(),
            end_of_word_suffix: bpe.end_of_word_suffix.as_deref(),
            fuse_unk: bpe.fuse_unk,
            byte_fallback: bpe.byte_fallback,
            ignore_merges: bpe.ignore_merges,
        },
    };
    let mut text = serde_json::to_string(&small).ok()?;
    // The model's settings end the text, and its `}` the tokenizer's.
    text.truncate(text.strip_suffix("}}")?.len());
    text.reserve(vocab.len() + merges.len() + 24);
    for part in [",\"vocab\":", vocab, ",\"merges\":", merges, "}}"] {
        text.push_str(part);
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fast::Provisional;
    use super::super::{
        Ranks, builtin_gpt2_json, from_json, llama3_style_tokenizer_json, vocab_size, vocab_size_given,
    };

    /// The form assembled from ferry's reading of `json`, and the one `tokenizers` writes.
    fn assembled_and_written(json: &str) -> (Option<String>, String) {
        let tokenizer = from_json("test", json).unwrap();
        let assembled = Provisional::build(json).unwrap().assembled_canonical(&tokenizer);
        (assembled, tokenizer.to_string(false).unwrap())
    }

    #[test]
    fn the_assembled_form_is_the_one_tokenizers_writes() {
        let mut tokenizers = vec![builtin_gpt2_json().unwrap().to_string()];
        for ranks in [Ranks::Cl100kBase, Ranks::O200kBase] {
            tokenizers.push(llama3_style_tokenizer_json(ranks).unwrap().to_string());
        }
        // Llama-2's structure: byte fallback, `fuse_unk`, an unknown token, a normalizer.
        let mut vocab = serde_json::Map::new();
        for (id, token) in ["<unk>", "<s>", "</s>", "▁", "a", "▁a", "é\"\\"].into_iter().enumerate() {
            vocab.insert(token.into(), json!(id));
        }
        let sentencepiece = json!({
            "added_tokens": [{"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                "vocab": vocab, "merges": ["▁ a"]}
        });
        tokenizers.push(serde_json::to_string_pretty(&sentencepiece).unwrap());
        for json in &tokenizers {
            let (assembled, written) = assembled_and_written(json);
            assert!(assembled.as_ref() == Some(&written), "{assembled:?}\n{written}");
            assert_eq!(size_from_reading(json), vocab_size(&from_json("test", json).unwrap()));
        }
        // A part left to its default reads otherwise than `tokenizers` writes it:
        // nothing is assembled, and the build takes `tokenizers`' own text.
        let mut older = sentencepiece;
        older["model"].as_object_mut().unwrap().remove("ignore_merges");
        assert_eq!(assembled_and_written(&older.to_string()).0, None);
    }

    /// The vocabulary's size with the model's largest id from ferry's reading.
    fn size_from_reading(json: &str) -> u64 {
        vocab_size_given(&from_json("test", json).unwrap(), Provisional::build(json).unwrap().largest_model_id())
    }

    #[test]
    fn the_size_from_ferrys_reading_is_the_one_counted_in_tokenizers_model() {
        let added = r#"{"id":9,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}"#;
        // Dense, with holes, with two tokens on one id, with an added token past the rest, and empty.
        for (vocab, added) in [
            (r#"{"a":0,"b":1}"#, ""),
            (r#"{"a":0,"b":5}"#, ""),
            (r#"{"a":0,"b":1,"c":1}"#, ""),
            (r#"{"a":0}"#, added),
            ("{}", ""),
        ] {
            let json = format!(
                r#"{{"added_tokens":[{added}],"normalizer":null,"pre_tokenizer":null,"model":{{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{vocab},"merges":[]}}}}"#
            );
            assert_eq!(size_from_reading(&json), vocab_size(&from_json("test", &json).unwrap()), "{json}");
        }
    }

    #[test]
    fn a_vocabulary_tokenizers_reads_differently_still_assembles_from_ferrys_reading() {
        // Two tokens on one id: `tokenizers` keeps one of them, ferry's reading both.
        let model = json!({"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": {"a": 0, "b": 1, "c": 1}, "merges": []});
        let json = json!({"added_tokens": [], "normalizer": null, "pre_tokenizer": null, "model": model}).to_string();
        let (assembled, written) = assembled_and_written(&json);
        let assembled = assembled.unwrap();
        assert!(assembled.contains(r#""vocab":{"a":0,"b":1,"c":1}"#) && assembled != written, "{assembled}\n{written}");
    }
}
