//! `tokenizers`' BPE model read from a `tokenizer.json` the way its own
//! deserializer reads it, but with the merges read as they come. Its
//! deserializer takes the merges as an untagged enum (pairs, or the older
//! `"a b"` lines), so serde first copies the whole array into a generic tree
//! and then tries each spelling on it: for GPT-4o's 200k merges that is two
//! thirds of the time `tokenizers` takes to parse the file, on the path to the
//! first document.
//!
//! It answers only where its answer is surely the same `BPE`: keys, types and
//! spellings exactly as that deserializer takes them. Anything else is an
//! error here, and the caller then parses with `tokenizers` alone, which
//! answers as it always does.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use ahash::AHashMap;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use tokenizers::models::ModelWrapper;
use tokenizers::models::bpe::{BPE, BpeBuilder, BpeTrainer};
use tokenizers::{Model, Token};

use super::serialized::{MergeSpelling, MergeTokens};

/// A `BPE`, read as above; it is one only to be read inside a whole tokenizer
/// (whose added tokens ask the model for their ids) and then turned into one.
pub struct DirectBpe(BPE);

impl From<DirectBpe> for ModelWrapper {
    fn from(model: DirectBpe) -> ModelWrapper {
        ModelWrapper::BPE(model.0)
    }
}

impl Model for DirectBpe {
    type Trainer = BpeTrainer;

    fn tokenize(&self, sequence: &str) -> tokenizers::Result<Vec<Token>> {
        self.0.tokenize(sequence)
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.0.token_to_id(token)
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        self.0.id_to_token(id)
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        self.0.get_vocab()
    }

    fn get_vocab_size(&self) -> usize {
        self.0.get_vocab_size()
    }

    fn save(&self, folder: &Path, prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        self.0.save(folder, prefix)
    }

    fn get_trainer(&self) -> BpeTrainer {
        self.0.get_trainer()
    }
}

impl<'de> Deserialize<'de> for DirectBpe {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<DirectBpe, D::Error> {
        deserializer.deserialize_map(BpeVisitor)
    }
}

struct BpeVisitor;

impl<'de> Visitor<'de> for BpeVisitor {
    type Value = DirectBpe;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a BPE model")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DirectBpe, A::Error> {
        let mut builder = BPE::builder();
        let mut vocab: Option<AHashMap<String, u32>> = None;
        let mut merges: Option<Vec<(String, String)>> = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "dropout" => builder = with_value(&mut map, builder, BpeBuilder::dropout)?,
                "unk_token" => builder = with_value(&mut map, builder, BpeBuilder::unk_token)?,
                "continuing_subword_prefix" => {
                    builder = with_value(&mut map, builder, BpeBuilder::continuing_subword_prefix)?
                }
                "end_of_word_suffix" => builder = with_value(&mut map, builder, BpeBuilder::end_of_word_suffix)?,
                "fuse_unk" => builder = with_value(&mut map, builder, BpeBuilder::fuse_unk)?,
                "byte_fallback" => builder = with_value(&mut map, builder, BpeBuilder::byte_fallback)?,
                "ignore_merges" => builder = with_value(&mut map, builder, BpeBuilder::ignore_merges)?,
                "vocab" => vocab = Some(map.next_value()?),
                "merges" => merges = Some(map.next_value::<MergeList>()?.0),
                // Borrowed, as `tokenizers` reads it: an escaped name is its error.
                "type" => match map.next_value::<&str>()? {
                    "BPE" => {}
                    other => return Err(de::Error::custom(format!("not a BPE model: {other}"))),
                },
                // `tokenizers` reads no value for a key it does not know.
                other => return Err(de::Error::custom(format!("an unknown key: {other}"))),
            }
        }
        let (Some(vocab), Some(merges)) = (vocab, merges) else {
            return Err(de::Error::custom("Missing vocab/merges"));
        };
        builder.vocab_and_merges(vocab, merges).build().map(DirectBpe).map_err(de::Error::custom)
    }
}

/// `builder` with `set` given the next value, or as it is where that is null.
fn with_value<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    builder: BpeBuilder,
    set: fn(BpeBuilder, T) -> BpeBuilder,
) -> Result<BpeBuilder, A::Error> {
    Ok(match map.next_value::<Option<T>>()? {
        Some(value) => set(builder, value),
        None => builder,
    })
}

/// The merges, all pairs or all `"a b"` lines (lines starting `#version` left
/// out), as `tokenizers` takes them.
struct MergeList(Vec<(String, String)>);

impl<'de> Deserialize<'de> for MergeList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MergeList, D::Error> {
        deserializer.deserialize_seq(MergeListVisitor)
    }
}

struct MergeListVisitor;

impl<'de> Visitor<'de> for MergeListVisitor {
    type Value = MergeList;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of merges")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MergeList, A::Error> {
        // `serde_json` gives no length, so the list grows as merges come. Made as
        // large as an estimate from the text (its separators counted first), this
        // list, the vocabulary's map and ferry's own reading's touched 5% fewer
        // fresh pages in GPT-4o's start, at the same CPU time (medians of 10
        // alternated runs), so they grow.
        let mut merges = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut lines = None;
        while let Some(merge) = seq.next_element::<MergeSpelling>()? {
            let is_line = matches!(merge, MergeSpelling::Line(_));
            if *lines.get_or_insert(is_line) != is_line {
                return Err(de::Error::custom("merges written both ways"));
            }
            if let MergeSpelling::Line(line) = &merge
                && line.starts_with("#version")
            {
                continue;
            }
            let MergeTokens { left, right } = merge.into_tokens()?;
            merges.push((left.0.into_owned(), right.0.into_owned()));
        }
        Ok(MergeList(merges))
    }
}
