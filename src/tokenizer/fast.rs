//! The fast encoder for byte-level BPE tokenizers (GPT-2, Llama-3, Qwen2, GPT-4o,
//! DeepSeek-V3 and the like): added tokens, NFC, the tokenizer's own split
//! regexes, then merges by rank with a per-thread cache of pre-token ids. And for
//! SentencePiece-style BPE (Llama-2, Gemma): added tokens, spaces to `▁`, pieces
//! that start at each run of `▁`, characters with byte fallback, then the same merges.
//!
//! It is used only for tokenizers whose every component it reproduces (see
//! `recognize`), and every run still compares its ids with the reference encoder
//! on a sample of documents (see `tokenizer::Encoders`).

use serde::Deserialize;
use serde_json::Value;

use super::added::{AddedTokens, Part};
use super::bpe::{BytePairMerger, Pieces};
use super::kind::EncoderKind;
use super::piece_sink::PieceSink;
use super::pretokenize::PreTokenizer;
use super::recognize::{self, JoinablePairs};
use super::serialized::{Large, Serialized};

pub struct FastEncoder {
    added: AddedTokens,
    split: Split,
    merger: BytePairMerger,
}

/// A fast encoder built from the text of a `tokenizer.json` as given, while
/// `tokenizers` parses that text and writes its canonical form (the form the
/// encoder must follow). The encoder is a function of the parts `Serialized`
/// reads, so it stands when the canonical text reads as the same parts; building
/// it alongside takes it off a build's start, a tenth of a second for a large
/// vocabulary. Where the other parts read the same, the canonical form is
/// assembled from this reading instead of written again by `tokenizers`
/// (`assembled_canonical`), and the encoder stands unless `tokenizers` then writes
/// another text (`Encoders::fast_path_confirmed`).
pub struct Provisional<'a> {
    /// The parts but the vocabulary and merges, which are in `large`.
    parts: Serialized<'a>,
    large: Large,
    built: Result<FastEncoder, Unsupported>,
}

impl<'a> Provisional<'a> {
    /// `None` when the text cannot be read as a tokenizer's parts at all.
    pub fn build(json: &'a str) -> Option<Provisional<'a>> {
        let mut parts: Serialized = serde_json::from_str(json).ok()?;
        let built = FastEncoder::from_serialized(&parts);
        // Written here, while `tokenizers` still works, so that `confirm` compares text.
        let large = parts.take_large();
        Some(Provisional { parts, large, built })
    }

    /// The canonical form of `tokenizer`, parsed by `tokenizers` from the same
    /// text, assembled with this reading's vocabulary and merges (see `canonical`):
    /// `None` unless its model is BPE and every other part reads as this reading's.
    /// That this reading's vocabulary and merges are also `tokenizers`' is not
    /// checked here (see `Encoders`).
    pub fn assembled_canonical(&self, tokenizer: &tokenizers::Tokenizer) -> Option<String> {
        let (vocab, merges) = self.large.texts()?;
        let text = super::canonical::assemble(tokenizer, vocab, merges)?;
        self.parts.with_large_read_from(&self.large, &text).then_some(text)
    }

    /// The largest id in the vocabulary of this reading. Where the canonical form
    /// assembled from it is what `tokenizers` writes, it is the largest id of
    /// `tokenizers`' model too: that form lists the model's vocabulary by id.
    pub fn largest_model_id(&self) -> Option<u32> {
        self.large.largest_id()
    }

    /// The encoder built from this reading, for a canonical form assembled from it.
    pub fn into_built(self) -> Result<FastEncoder, Unsupported> {
        self.built
    }

    /// The encoder for the tokenizer whose canonical form is `canonical`: this one
    /// when it reads as the same parts, else one built from its parts.
    pub fn confirm(self, canonical: &str) -> Result<FastEncoder, Unsupported> {
        if self.parts.with_large_read_from(&self.large, canonical) {
            return self.built;
        }
        FastEncoder::for_tokenizer_json(canonical)
    }
}

/// How text between added tokens becomes the pieces the merges work on.
enum Split {
    /// Byte-level BPE: the tokenizer's split regexes.
    Regex(PreTokenizer),
    /// SentencePiece-style BPE: `▁` first (with `prepend`) and for every space; the
    /// whole text is one word to `tokenizers`, but it splits wherever two characters
    /// are side by side in no merge's result, since no merge can cross there.
    Metaspace { prepend: bool, joinable: JoinablePairs },
}

/// Why the fast encoder cannot reproduce a tokenizer (recorded in the manifest as
/// `fast_unavailable`; the tokenizer's own encoder is used instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

fn unreadable(err: impl std::fmt::Display) -> Unsupported {
    Unsupported(format!("the tokenizer's model cannot be read: {err}"))
}

impl crate::errors::Failure for Unsupported {
    fn fault(&self) -> crate::errors::Fault {
        crate::errors::Fault::Internal
    }
}

impl FastEncoder {
    /// Builds the fast encoder from a tokenizer's serialized form, or says why it
    /// cannot reproduce that tokenizer.
    pub fn for_tokenizer(serialized: &Value) -> Result<FastEncoder, Unsupported> {
        FastEncoder::from_serialized(&Serialized::deserialize(serialized).map_err(unreadable)?)
    }

    /// `for_tokenizer` on the text of a `tokenizer.json`, without building a `Value`
    /// of its vocabulary (see `serialized`).
    pub fn for_tokenizer_json(json: &str) -> Result<FastEncoder, Unsupported> {
        FastEncoder::from_serialized(&serde_json::from_str(json).map_err(unreadable)?)
    }

    fn from_serialized(serialized: &Serialized) -> Result<FastEncoder, Unsupported> {
        if serialized.pre_tokenizer.is_null() && !serialized.normalizer.is_null() {
            return FastEncoder::for_sentencepiece(serialized);
        }
        let nfc = recognize::normalizer_is_nfc(&serialized.normalizer).map_err(Unsupported)?;
        let pre_tokenizer = PreTokenizer::new(recognize::split_steps(&serialized.pre_tokenizer).map_err(Unsupported)?);
        let merger = recognize::merger(&serialized.model).map_err(Unsupported)?;
        let added = recognize::added_tokens(&serialized.added_tokens).map_err(Unsupported)?;
        let added = AddedTokens::new(&added, nfc).map_err(Unsupported)?;
        Ok(FastEncoder { added, split: Split::Regex(pre_tokenizer), merger })
    }

    fn for_sentencepiece(serialized: &Serialized) -> Result<FastEncoder, Unsupported> {
        let prepend = recognize::metaspace_normalizer(&serialized.normalizer).map_err(Unsupported)?;
        let merger = recognize::sentencepiece_merger(&serialized.model).map_err(Unsupported)?;
        let joinable = recognize::joinable_pairs(&serialized.model).map_err(Unsupported)?;
        let added = recognize::added_tokens(&serialized.added_tokens).map_err(Unsupported)?;
        // `tokenizers` would prepend `▁` once per raw part, before finding these.
        if added.iter().any(|token| token.normalized) {
            return Err(Unsupported("an added token of a SentencePiece-style tokenizer is normalized".into()));
        }
        let added = AddedTokens::new(&added, false).map_err(Unsupported)?;
        Ok(FastEncoder { added, split: Split::Metaspace { prepend, joinable }, merger })
    }

    /// What the manifest calls this encoder.
    pub fn kind(&self) -> EncoderKind {
        match self.split {
            Split::Regex(_) => EncoderKind::FastBytelevelBpe,
            Split::Metaspace { .. } => EncoderKind::FastSentencepieceBpe,
        }
    }

    /// Token ids of `text`. `None` is kept for encoders that can give up on a
    /// text; this one never does, since its regex engine stops where `tokenizers`' stops.
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        let mut spans = Vec::new();
        let mut normalized = String::new();
        let mut pieces = self.merger.pieces();
        self.added.for_each_part(text, &mut |part| match (part, &self.split) {
            (Part::Token(id), _) => ids.push(id),
            (Part::Text(text), Split::Regex(pre_tokenizer)) => {
                let sink = EncodeInto { pieces: &mut pieces, text: text.as_bytes(), ids: &mut ids };
                pre_tokenizer.for_each_piece(text, &mut spans, sink)
            }
            (Part::Text(text), Split::Metaspace { prepend, joinable }) => {
                metaspace_normalize(text, *prepend, &mut normalized);
                let sink = EncodeInto { pieces: &mut pieces, text: normalized.as_bytes(), ids: &mut ids };
                for_each_unjoinable_piece(&normalized, joinable, sink);
            }
        });
        Some(ids)
    }
}

/// Encodes each piece of `text` it is given onto `ids`, inlined where the piece is found.
struct EncodeInto<'p, 'a, 't> {
    pieces: &'p mut Pieces<'a>,
    text: &'t [u8],
    ids: &'p mut Vec<u32>,
}

impl PieceSink for EncodeInto<'_, '_, '_> {
    #[inline(always)]
    fn take(&mut self, start: usize, end: usize) {
        self.pieces.encode_in(self.text, start, end, self.ids);
    }

    #[inline(always)]
    fn take_run(&mut self, start: usize, base: usize, ends: u64) -> usize {
        self.pieces.encode_run(self.text, start, base, ends, self.ids)
    }
}

/// SentencePiece's normalizer: `▁` before a non-empty text (with `prepend`), and
/// `▁` for each space.
fn metaspace_normalize(text: &str, prepend: bool, out: &mut String) {
    out.clear();
    if text.is_empty() {
        return;
    }
    if prepend {
        out.push('▁');
    }
    // One iterator over every space: a search started per word (words are a few
    // bytes) costs more in setting up than in searching.
    let mut copied = 0;
    for space in memchr::memchr_iter(b' ', text.as_bytes()) {
        out.push_str(&text[copied..space]);
        out.push('▁');
        copied = space + 1;
    }
    out.push_str(&text[copied..]);
}

/// Calls `on_piece` with the byte range of each piece of `text` between two
/// characters no token holds side by side.
fn for_each_unjoinable_piece(text: &str, joinable: &JoinablePairs, mut on_piece: impl PieceSink) {
    let mut start = 0;
    let mut chars = text.char_indices();
    let Some((_, mut previous)) = chars.next() else { return };
    for (at, c) in chars {
        if !joinable.contains(previous, c) {
            on_piece.take(start, at);
            start = at;
        }
        previous = c;
    }
    on_piece.take(start, text.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A tiny Llama-2-shaped tokenizer: byte tokens 3..=258, then `▁ a b ▁a ▁ab`.
    fn sentencepiece(change: impl Fn(&mut Value)) -> Result<FastEncoder, Unsupported> {
        let mut vocab = serde_json::Map::new();
        for (id, token) in ["<unk>", "<s>", "</s>"].into_iter().enumerate() {
            vocab.insert(token.into(), json!(id));
        }
        for byte in 0..256 {
            vocab.insert(format!("<0x{byte:02X}>"), json!(3 + byte));
        }
        for (offset, token) in ["▁", "a", "b", "▁a", "▁ab"].into_iter().enumerate() {
            vocab.insert(token.into(), json!(259 + offset));
        }
        let mut serialized = json!({
            "added_tokens": [{"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": null,
            "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                "vocab": vocab, "merges": [["▁", "a"], ["▁a", "b"]]}
        });
        change(&mut serialized);
        FastEncoder::for_tokenizer(&serialized)
    }

    #[test]
    fn a_provisional_encoder_stands_only_when_the_canonical_text_has_the_same_parts() {
        let json = crate::tokenizer::builtin_gpt2_json().unwrap();
        let mut value: Value = serde_json::from_str(json).unwrap();
        let the = |fast: Result<FastEncoder, Unsupported>| fast.unwrap().encode(" the").unwrap();
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        assert_eq!(the(Provisional::build(json).unwrap().confirm(&pretty)), [262]);
        // Without GPT-2's first merge (`Ġ t`), ` the` is no longer one token.
        value["model"]["merges"].as_array_mut().unwrap().remove(0);
        let changed = value.to_string();
        let expected = the(FastEncoder::for_tokenizer_json(&changed));
        assert_ne!(expected, [262]);
        assert_eq!(the(Provisional::build(json).unwrap().confirm(&changed)), expected);
        assert!(Provisional::build("not json").is_none());
    }

    #[test]
    fn sentencepiece_shapes_encode_with_byte_fallback_and_added_tokens() {
        let llama2 = sentencepiece(|_| {}).unwrap();
        assert_eq!(llama2.kind(), EncoderKind::FastSentencepieceBpe);
        // ▁ab ▁ab | <s> | ▁ é as <0xC3> <0xA9>, b
        assert_eq!(llama2.encode("ab ab<s>éb").unwrap(), [263, 263, 1, 259, 3 + 0xC3, 3 + 0xA9, 261]);
        let gemma = sentencepiece(|t| t["normalizer"] = t["normalizer"]["normalizers"][1].clone()).unwrap();
        assert_eq!(gemma.encode("ab ab").unwrap(), [260, 261, 263]);
    }

    #[test]
    fn sentencepiece_components_it_cannot_reproduce_are_named() {
        let reason = |change: &dyn Fn(&mut Value)| sentencepiece(change).err().unwrap().0;
        assert!(reason(&|t| t["model"]["byte_fallback"] = json!(false)).contains("no byte fallback"));
        assert!(reason(&|t| t["added_tokens"][0]["normalized"] = json!(true)).contains("is normalized"));
        let byte_merge = |t: &mut Value| {
            t["model"]["merges"][0] = json!(["<0x41>", "a"]);
            t["model"]["vocab"]["<0x41>a"] = json!(264);
        };
        assert!(reason(&byte_merge).contains("byte fallback token"));
        let lowercase = json!({"type": "Lowercase"});
        assert!(reason(&|t| t["normalizer"] = lowercase.clone()).contains("is not SentencePiece's"));
    }

    #[test]
    fn the_normalized_text_splits_only_between_characters_no_merge_joins() {
        let mut normalized = String::new();
        metaspace_normalize("a  b", true, &mut normalized);
        assert_eq!(normalized, "▁a▁▁b");
        metaspace_normalize("a b", false, &mut normalized);
        assert_eq!(normalized, "a▁b");
        metaspace_normalize("", true, &mut normalized);
        assert_eq!(normalized, "", "an empty part gets no ▁");

        let model = json!({"merges": [["▁", "a"], ["a", "b"]]});
        let joinable =
            recognize::joinable_pairs(&crate::tokenizer::serialized::Model::deserialize(&model).unwrap()).unwrap();
        let mut pieces = Vec::new();
        let text = "▁ab▁c日b";
        for_each_unjoinable_piece(text, &joinable, |start, end| pieces.push(&text[start..end]));
        assert_eq!(pieces, ["▁ab", "▁", "c", "日", "b"]);
    }

    fn gpt2_with(change: impl Fn(&mut Value)) -> Result<FastEncoder, Unsupported> {
        let mut serialized: Value = serde_json::from_str(super::super::builtin_gpt2_json().unwrap()).unwrap();
        change(&mut serialized);
        FastEncoder::for_tokenizer(&serialized)
    }

    #[test]
    fn components_it_cannot_reproduce_are_named() {
        assert!(gpt2_with(|_| {}).is_ok());
        let reason = |change: &dyn Fn(&mut Value)| gpt2_with(change).err().unwrap().0;
        let metaspace = json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": false});
        assert!(reason(&|t| t["pre_tokenizer"] = metaspace.clone()).contains("does not end in ByteLevel"));
        assert!(reason(&|t| t["normalizer"] = json!({"type": "Lowercase"})).contains("Lowercase is not NFC"));
        assert!(reason(&|t| t["model"]["byte_fallback"] = json!(true)).contains("byte fallback"));
        assert!(reason(&|t| t["model"]["dropout"] = json!(0.1)).contains("dropout"));
        assert!(reason(&|t| t["pre_tokenizer"]["add_prefix_space"] = json!(true)).contains("prefix space"));
        let stripped = |t: &mut Value| t["added_tokens"][0]["lstrip"] = json!(true);
        assert!(reason(&stripped).contains("strips spaces"));
    }
}
