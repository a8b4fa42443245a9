//! The pipeline spec: a TOML file naming the raw inputs and how to turn them into
//! training sequences, and its canonical form for the fingerprint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::errors::{Failure, Fault};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;

/// Errors found while reading a spec. The TOML parser's messages already carry the
/// line, column and the offending field.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("reading spec {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid spec {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid spec {path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Human name, used for `by-name/<name>`; not part of the fingerprint.
    pub name: String,
    /// Split name -> globs, relative to the spec file's directory or absolute.
    pub splits: BTreeMap<String, Globs>,
    #[serde(default)]
    pub source: SourceSpec,
    #[serde(default)]
    pub filter: FilterSpec,
    pub tokenizer: TokenizerSpec,
    #[serde(default)]
    pub sequence: SequenceSpec,
    #[serde(default)]
    pub output: OutputSpec,
    /// Directory relative paths are resolved against (the spec file's directory).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// One glob or a list of globs, on the file system or in a hub dataset repo.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Globs {
    One(String),
    Many(Vec<String>),
    /// `{ hub = "ORG/NAME", files = ["sample/*.parquet"], revision = "main" }`: files of a
    /// dataset repo in the local Hugging Face hub cache.
    Hub(HubFiles),
}

/// Files of a dataset repo in the local hub cache; `files` are globs inside the repo.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HubFiles {
    pub hub: String,
    pub files: Vec<String>,
    pub revision: Option<String>,
}

impl Globs {
    pub fn patterns(&self) -> &[String] {
        match self {
            Globs::One(one) => std::slice::from_ref(one),
            Globs::Many(many) => many,
            Globs::Hub(hub) => &hub.files,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourceSpec {
    pub format: SourceFormat,
    /// Dotted path of the text field in each record (`text`, or `content.body`).
    pub text_field: String,
    pub on_bad_record: BadRecordPolicy,
}

impl Default for SourceSpec {
    fn default() -> Self {
        Self { format: SourceFormat::Auto, text_field: "text".into(), on_bad_record: BadRecordPolicy::Fail }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum SourceFormat {
    #[serde(rename = "auto")]
    Auto,
    #[serde(rename = "jsonl")]
    Jsonl,
    #[serde(rename = "jsonl.zst")]
    JsonlZst,
    #[serde(rename = "jsonl.gz")]
    JsonlGz,
    #[serde(rename = "parquet")]
    Parquet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BadRecordPolicy {
    /// Stop at the first bad record, publish nothing.
    Fail,
    /// Skip bad records and count them per reason in the manifest.
    Skip,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilterSpec {
    /// Minimum text length in characters.
    pub min_chars: usize,
    pub max_chars: Option<usize>,
    /// `meta.<key> = [allowed values]`, as Pile records carry `meta.pile_set_name`.
    pub meta: BTreeMap<String, Vec<String>>,
    /// `"<dotted.path>" = [allowed values]` for any other field.
    pub fields: BTreeMap<String, Vec<String>>,
}

impl FilterSpec {
    /// Every field filter as (dotted path, allowed values).
    pub fn field_filters(&self) -> Vec<(String, Vec<String>)> {
        let meta = self.meta.iter().map(|(key, values)| (format!("meta.{key}"), values.clone()));
        let fields = self.fields.iter().map(|(path, values)| (path.clone(), values.clone()));
        meta.chain(fields).collect()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerSpec {
    /// A Hugging Face `tokenizer.json`.
    pub path: Option<PathBuf>,
    /// GPT-2 style `vocab.json` + `merges.txt`, as an alternative to `path`.
    pub vocab: Option<PathBuf>,
    pub merges: Option<PathBuf>,
    /// A tokenizer embedded in the binary: `"gpt2"`.
    pub builtin: Option<String>,
    /// A model repo in the local Hugging Face hub cache, `"ORG/NAME"`: its
    /// `tokenizer.json`, or else its `vocab.json` + `merges.txt`.
    pub hub: Option<String>,
    /// The hub revision: a branch or tag under `refs/`, or a commit; `main` when not given.
    pub revision: Option<String>,
    #[serde(default)]
    pub add_special_tokens: bool,
    /// Add BOS/EOS only where the tokenizer does not already (epochraft semantics).
    #[serde(default = "default_true")]
    pub ensure_bos_eos: bool,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    /// Use the fast byte-level BPE encoder where it is provably equivalent.
    /// Execution-only: not part of the fingerprint.
    #[serde(default = "default_true")]
    pub fast_path: bool,
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SequenceSpec {
    pub pack: PackMode,
    pub seq_len: usize,
    /// Also write `labels` = `input_ids` (run_clm convention), -100 on padding.
    pub labels: bool,
    /// Also write an `attention_mask` (int8, as `datasets` stores it): 1 on tokens, 0 on padding.
    pub attention_mask: bool,
    /// Also write `position_ids` (int32) that restart at 0 at the start of every row
    /// and of every document inside it (Megatron's `reset_position_ids`).
    pub position_ids: bool,
    /// Shuffle each split's rows with this seed (the same seed, the same order, on any machine).
    pub shuffle_seed: Option<u64>,
}

impl Default for SequenceSpec {
    fn default() -> Self {
        Self {
            pack: PackMode::Concat,
            seq_len: 1024,
            labels: false,
            attention_mask: false,
            position_ids: false,
            shuffle_seed: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PackMode {
    /// Join documents and cut into `seq_len` blocks, per input shard (run_clm `group_texts`).
    Concat,
    /// Whole documents into rows of `seq_len` by best-fit decreasing, padded; only a
    /// document longer than a row is cut (its pieces are placed like documents).
    BestFit,
    /// One row per document, cut at `seq_len`.
    Truncate,
    /// One row per document, whole.
    None,
}

impl PackMode {
    /// The name a spec gives it.
    pub fn name(self) -> &'static str {
        match self {
            PackMode::Concat => "concat",
            PackMode::BestFit => "best_fit",
            PackMode::Truncate => "truncate",
            PackMode::None => "none",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSpec {
    pub token_type: TokenType,
    #[serde(deserialize_with = "deserialize_size")]
    pub target_shard_bytes: u64,
    /// Layouts written into the entry; `hf` (the Arrow files) is always among them.
    pub formats: Formats,
}

impl Default for OutputSpec {
    fn default() -> Self {
        Self { token_type: TokenType::Int32, target_shard_bytes: 512 << 20, formats: Formats::default() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenType {
    Int32,
    Uint16,
    Uint32,
}

impl TokenType {
    /// The `datasets` dtype name.
    pub fn dtype(self) -> &'static str {
        match self {
            TokenType::Int32 => "int32",
            TokenType::Uint16 => "uint16",
            TokenType::Uint32 => "uint32",
        }
    }

    /// Largest vocabulary this type can hold.
    pub fn max_vocab(self) -> u64 {
        match self {
            TokenType::Int32 => i32::MAX as u64 + 1,
            TokenType::Uint16 => u16::MAX as u64 + 1,
            TokenType::Uint32 => u32::MAX as u64 + 1,
        }
    }
}

pub fn deserialize_size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(deserializer)? {
        Size::Bytes(bytes) => Ok(bytes),
        Size::Text(text) => parse_size::parse_size(&text)
            .map_err(|err| serde::de::Error::custom(format!("invalid size {text:?} ({err}); write e.g. \"512MiB\""))),
    }
}

impl Spec {
    /// Reads and validates a spec file.
    pub fn load(path: &Path) -> Result<Spec, SpecError> {
        let (text, base_dir) = read_spec_file(path)?;
        Spec::parse(&text, path, base_dir)
    }

    /// Parses spec text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path, base_dir: PathBuf) -> Result<Spec, SpecError> {
        let mut spec: Spec = toml::from_str(text).map_err(|err| SpecError::Parse {
            path: path.to_path_buf(),
            message: err.to_string().trim_end().to_string(),
        })?;
        spec.base_dir = base_dir;
        spec.validate().map_err(|problem| SpecError::Invalid { path: path.to_path_buf(), problem })?;
        Ok(spec)
    }

    fn validate(&self) -> Result<(), String> {
        check_component("name", &self.name)?;
        if self.splits.is_empty() {
            return Err("[splits] is empty: name at least one split, e.g. train = [\"data/*.jsonl.zst\"]".into());
        }
        for (split, globs) in &self.splits {
            check_component("split name", split)?;
            if RESERVED_ENTRY_NAMES.contains(&split.as_str()) {
                return Err(format!("split name {split:?} is taken by a file or folder of the entry; choose another"));
            }
            if globs.patterns().is_empty() {
                return Err(format!("split {split:?} lists no input globs"));
            }
        }
        let tokenizer = &self.tokenizer;
        let sources =
            [tokenizer.path.is_some(), tokenizer.vocab.is_some(), tokenizer.builtin.is_some(), tokenizer.hub.is_some()];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err("[tokenizer] needs exactly one of path = \"tokenizer.json\", vocab + merges, \
                 hub = \"ORG/NAME\", or builtin = \"gpt2\""
                .into());
        }
        if tokenizer.revision.is_some() && tokenizer.hub.is_none() {
            return Err("[tokenizer] revision goes with hub = \"ORG/NAME\"".into());
        }
        if self.tokenizer.vocab.is_some() != self.tokenizer.merges.is_some() {
            return Err("[tokenizer] vocab and merges go together".into());
        }
        check_sequence(&self.sequence, &self.output)?;
        if let Some(max) = self.filter.max_chars
            && max < self.filter.min_chars
        {
            return Err(format!("filter.max_chars ({max}) is below filter.min_chars ({})", self.filter.min_chars));
        }
        if self.output.target_shard_bytes < 1 << 20 {
            return Err("output.target_shard_bytes must be at least 1MiB".into());
        }
        if self.source.text_field.is_empty() {
            return Err("source.text_field is empty".into());
        }
        self.output.formats.check(self.output.token_type, &self.sequence).map_err(|err| err.to_string())?;
        Ok(())
    }

    /// Resolves a path from the spec against the spec file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_path_buf() } else { self.base_dir.join(path) }
    }

    /// Everything that changes the token store (the documents' ids), with defaults
    /// filled in. Cosmetic and execution-only fields (`name`, the glob text, the
    /// tokenizer's location, `fast_path`) are left out: the tokenizer and the inputs
    /// enter the fingerprint by content instead.
    pub fn tokens_canonical(&self) -> serde_json::Value {
        json!({
            "splits": self.splits.keys().collect::<Vec<_>>(),
            "source": {
                "text_field": self.source.text_field,
                "on_bad_record": self.source.on_bad_record,
            },
            "filter": {
                "min_chars": self.filter.min_chars,
                "max_chars": self.filter.max_chars,
                "fields": self.filter.field_filters().into_iter().collect::<BTreeMap<_, _>>(),
            },
            "tokenizer": {
                "add_special_tokens": self.tokenizer.add_special_tokens,
                "ensure_bos_eos": self.tokenizer.ensure_bos_eos,
                "bos_token": self.tokenizer.bos_token,
                "eos_token": self.tokenizer.eos_token,
            },
        })
    }

    /// Everything that changes a view of the token store (see `view_canonical`).
    pub fn view_canonical(&self) -> serde_json::Value {
        view_canonical(&self.sequence, &self.output)
    }

    /// The whole spec's canonical form: the token store's part and the view's.
    pub fn canonical(&self) -> serde_json::Value {
        let mut canonical = self.tokens_canonical();
        if let (Some(all), serde_json::Value::Object(view)) = (canonical.as_object_mut(), self.view_canonical()) {
            all.extend(view);
        }
        canonical
    }
}

/// Everything that changes a view of token stores: packing, columns, shuffling,
/// token type, file sizes and formats, with defaults filled in.
pub fn view_canonical(sequence: &SequenceSpec, output: &OutputSpec) -> serde_json::Value {
    json!({
        "sequence": {
            "pack": sequence.pack,
            "seq_len": if sequence.pack == PackMode::None { 0 } else { sequence.seq_len },
            "labels": sequence.labels,
            "attention_mask": sequence.attention_mask,
            "position_ids": sequence.position_ids,
            "shuffle_seed": sequence.shuffle_seed,
        },
        "output": {
            "token_type": output.token_type,
            "target_shard_bytes": output.target_shard_bytes,
            "formats": output.formats.canonical(),
        },
    })
}

/// A spec file's text, and the directory its relative paths are resolved against
/// (the file's own).
pub fn read_spec_file(path: &Path) -> Result<(String, PathBuf), SpecError> {
    let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read { path: path.to_path_buf(), source })?;
    let base_dir =
        path.canonicalize().ok().and_then(|p| p.parent().map(Path::to_path_buf)).unwrap_or_else(|| PathBuf::from("."));
    Ok((text, base_dir))
}

/// Combinations of packing options a trainer could not use.
pub fn check_sequence(sequence: &SequenceSpec, output: &OutputSpec) -> Result<(), String> {
    if sequence.pack != PackMode::None && sequence.seq_len == 0 {
        return Err("sequence.seq_len must be at least 1".into());
    }
    // Arrow's list offsets, Megatron's lengths and position_ids are 32-bit signed.
    if sequence.seq_len > i32::MAX as usize {
        return Err(format!(
            "sequence.seq_len {} is over the longest row ferry writes ({})",
            sequence.seq_len,
            i32::MAX
        ));
    }
    if sequence.position_ids && matches!(sequence.pack, PackMode::None | PackMode::Truncate) {
        return Err(format!(
            "sequence.position_ids goes with pack = \"concat\" or \"best_fit\": with pack = \"{}\" each row is one \
             document, whose positions are 0, 1, 2, ... without a column",
            sequence.pack.name()
        ));
    }
    if sequence.pack == PackMode::BestFit && sequence.labels && output.token_type != TokenType::Int32 {
        return Err(format!(
            "sequence.labels with pack = \"best_fit\" are -100 on padding, which {} cannot hold; \
             set output.token_type = \"int32\"",
            output.token_type.dtype()
        ));
    }
    Ok(())
}

/// What an entry holds beside its split folders: a split may not be named so.
const RESERVED_ENTRY_NAMES: &[&str] = &[
    "dataset_dict.json",
    "manifest.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "megatron",
    "flat",
    "nanotron",
    "olmo",
    "modded_nanogpt",
    "litdata",
    "mds",
];

/// Names become path components: keep them to a safe alphabet.
pub fn check_component(what: &str, value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && !value.starts_with('.')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {value:?} must be non-empty, use only letters, digits, '-', '_', '.', and not start with '.'"
        ))
    }
}

/// One layout an entry can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Hugging Face `datasets` Arrow files: always written.
    Hf,
    /// `megatron/<split>_text_document.{bin,idx}`.
    Megatron,
    /// `flat/<split>.bin` with `<split>.offsets.npy` and `<split>.json`.
    Flat,
    /// nanotron's (datatrove's) `nanotron/<split>/000_<split>.ds`, `.ds.index`, `.ds.metadata`.
    Nanotron,
    /// OLMo-core's headerless `olmo/<split>.npy` (and `.mask.npy` for padded rows).
    Olmo,
    /// modded-nanogpt's `modded_nanogpt/<split>_<n>.bin` shards.
    #[serde(rename = "modded_nanogpt")]
    ModdedNanogpt,
    /// LitData's (LitGPT's) `litdata/<split>/chunk-0-<n>.bin` and `index.json`.
    Litdata,
    /// MosaicML Streaming's (llm-foundry's) `mds/<split>/shard.<n>.mds` and `index.json`.
    Mds,
}

/// A combination of formats and token type that a reader cannot load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormatsError {
    #[error(
        "output.formats has \"megatron\", whose index has no uint32 dtype code; \
         set output.token_type = \"int32\" (or \"uint16\" for vocabularies under 65536)"
    )]
    MegatronUint32,
    #[error(
        "output.formats has \"nanotron\", whose reader takes windows of seq_len + 1 tokens and trains on every one, \
         so it needs pack = \"concat\" (pack = \"{0}\" makes rows it would cut across or train on padding of)"
    )]
    NanotronPack(&'static str),
    #[error(
        "output.formats has \"olmo\", whose NumpyFSLDataset reads instances of one length: use pack = \"concat\" or \"best_fit\", \
         not \"{0}\""
    )]
    OlmoPack(&'static str),
    #[error(
        "output.formats has \"modded_nanogpt\", whose loader finds documents by <|endoftext|> and cannot skip padding, \
         so it needs pack = \"concat\", \"truncate\" or \"none\", not \"best_fit\""
    )]
    ModdedNanogptPadding,
    #[error(
        "output.formats has \"litdata\", whose TokensLoader reads blocks of one length across rows and trains on \
         every token, so it needs pack = \"concat\" without position_ids, and token_type \"int32\" or \"uint16\""
    )]
    LitdataRows,
    #[error(
        "output.formats has \"mds\", whose text dataset trains on every token of a sample, so it cannot take \
         pack = \"best_fit\"'s padding; pack = \"concat\", \"truncate\" or \"none\" can"
    )]
    MdsPadding,
}

impl Failure for FormatsError {
    fn fault(&self) -> Fault {
        Fault::User
    }
}

/// The formats a spec asks for. The Arrow files are always written: the entry's
/// row counts, resumable shard records and `load_from_disk` all rest on them, so
/// `"hf"` may be listed or left out and means the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Formats {
    extra: BTreeSet<Format>,
}

impl<'de> Deserialize<'de> for Formats {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let listed = Vec::<Format>::deserialize(deserializer)?;
        Ok(Formats { extra: listed.into_iter().filter(|format| *format != Format::Hf).collect() })
    }
}

impl Formats {
    pub fn new(extra: impl IntoIterator<Item = Format>) -> Formats {
        Formats { extra: extra.into_iter().filter(|format| *format != Format::Hf).collect() }
    }

    pub fn megatron(&self) -> bool {
        self.extra.contains(&Format::Megatron)
    }

    /// The same formats but Megatron's.
    pub fn without_megatron(&self) -> Formats {
        Formats { extra: self.extra.iter().copied().filter(|format| *format != Format::Megatron).collect() }
    }

    pub fn flat(&self) -> bool {
        self.extra.contains(&Format::Flat)
    }

    pub fn has(&self, format: Format) -> bool {
        self.extra.contains(&format)
    }

    /// The type the formats' token parts are written in: the view's token type where a
    /// format keeps it (Megatron, flat, LitData, MDS), else the width nanotron and OLMo
    /// write (uint16 up to 65,536 tokens, else uint32), whose files are then the parts.
    pub fn parts_type(&self, token_type: TokenType, vocab_size: u64) -> TokenType {
        let keeps = [Format::Megatron, Format::Flat, Format::Litdata, Format::Mds];
        match keeps.iter().any(|format| self.has(*format)) {
            true => token_type,
            false if vocab_size > 1 << 16 => TokenType::Uint32,
            false => TokenType::Uint16,
        }
    }

    /// Formats written from each row's documents (the units record their pieces).
    pub fn reads_documents(&self) -> bool {
        self.has(Format::Nanotron) || self.has(Format::Olmo)
    }

    /// Whether any format beyond the Arrow files is asked for.
    pub fn any_extra(&self) -> bool {
        !self.extra.is_empty()
    }

    /// The extra formats for the fingerprint, in a fixed order.
    pub fn canonical(&self) -> serde_json::Value {
        serde_json::json!(self.extra)
    }

    /// Refuses combinations a reader cannot load.
    pub fn check(&self, token_type: TokenType, sequence: &SequenceSpec) -> Result<(), FormatsError> {
        let pack = sequence.pack;
        let litdata_rows = pack == PackMode::Concat && !sequence.position_ids && token_type != TokenType::Uint32;
        if self.has(Format::Litdata) && !litdata_rows {
            return Err(FormatsError::LitdataRows);
        }
        if self.has(Format::Mds) && pack == PackMode::BestFit {
            return Err(FormatsError::MdsPadding);
        }
        if self.megatron() && token_type == TokenType::Uint32 {
            return Err(FormatsError::MegatronUint32);
        }
        if self.has(Format::Nanotron) && pack != PackMode::Concat {
            return Err(FormatsError::NanotronPack(pack.name()));
        }
        if self.has(Format::Olmo) && !matches!(pack, PackMode::Concat | PackMode::BestFit) {
            return Err(FormatsError::OlmoPack(pack.name()));
        }
        if self.has(Format::ModdedNanogpt) && pack == PackMode::BestFit {
            return Err(FormatsError::ModdedNanogptPadding);
        }
        Ok(())
    }
}

impl Failure for SpecError {
    fn fault(&self) -> Fault {
        Fault::User
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Spec, SpecError> {
        Spec::parse(text, Path::new("test.toml"), PathBuf::from("/data"))
    }

    const MINIMAL: &str = r#"
name = "pile-gpt2"
[splits]
train = "train/*.jsonl.zst"
[tokenizer]
builtin = "gpt2"
"#;

    #[test]
    fn minimal_spec_gets_documented_defaults() {
        let spec = parse(MINIMAL).unwrap();
        assert_eq!(spec.sequence.pack, PackMode::Concat);
        assert_eq!(spec.sequence.seq_len, 1024);
        assert_eq!(spec.output.token_type, TokenType::Int32);
        assert_eq!(spec.output.target_shard_bytes, 512 << 20);
        assert_eq!(spec.source.text_field, "text");
        assert!(spec.tokenizer.ensure_bos_eos);
        assert_eq!(spec.resolve(Path::new("x.json")), PathBuf::from("/data/x.json"));
    }

    #[test]
    fn unknown_field_is_named_with_its_line() {
        let err = parse(&format!("{MINIMAL}\n[sequence]\nseq_length = 5\n")).unwrap_err().to_string();
        assert!(err.contains("seq_length"), "{err}");
        assert!(err.contains("line 9"), "{err}");
        assert!(err.contains("test.toml"), "{err}");
    }

    #[test]
    fn pile_meta_filter_becomes_dotted_path() {
        let spec = parse(&format!("{MINIMAL}\n[filter]\nmeta.pile_set_name = [\"Github\"]\nmin_chars = 3\n")).unwrap();
        assert_eq!(spec.filter.field_filters(), vec![("meta.pile_set_name".to_string(), vec!["Github".to_string()])]);
    }

    #[test]
    fn sizes_are_parsed_with_units() {
        let spec = parse(&format!("{MINIMAL}\n[output]\ntarget_shard_bytes = \"64MiB\"\n")).unwrap();
        assert_eq!(spec.output.target_shard_bytes, 64 << 20);
        let err = parse(&format!("{MINIMAL}\n[output]\ntarget_shard_bytes = \"lots\"\n")).unwrap_err();
        assert!(err.to_string().contains("invalid size"), "{err}");
    }

    #[test]
    fn split_names_cannot_take_the_entry_files_names() {
        let err = parse("name='a'\n[splits]\n'tokenizer.json'='x'\n[tokenizer]\nbuiltin='gpt2'\n").unwrap_err();
        assert!(err.to_string().contains("taken by a file or folder of the entry"), "{err}");
    }

    #[test]
    fn tokenizer_source_must_be_unique() {
        let err = parse("name='a'\n[splits]\ntrain='x'\n[tokenizer]\nbuiltin='gpt2'\npath='t.json'\n").unwrap_err();
        assert!(err.to_string().contains("exactly one"), "{err}");
    }

    #[test]
    fn canonical_form_ignores_name_and_globs() {
        let a = parse(MINIMAL).unwrap();
        let b = parse(&MINIMAL.replace("pile-gpt2", "other").replace("train/*", "elsewhere/*")).unwrap();
        assert_eq!(a.canonical(), b.canonical());
        let c = parse(&format!("{MINIMAL}\n[sequence]\nseq_len = 512\n")).unwrap();
        assert_ne!(a.canonical(), c.canonical());
    }

    #[test]
    fn extra_formats_change_the_canonical_form_and_hf_alone_does_not() {
        let plain = parse(MINIMAL).unwrap().canonical();
        let hf = parse(&format!("{MINIMAL}\n[output]\nformats = [\"hf\"]\n")).unwrap().canonical();
        assert_eq!(plain, hf);
        let megatron = parse(&format!("{MINIMAL}\n[output]\nformats = [\"megatron\"]\n")).unwrap();
        let both = parse(&format!("{MINIMAL}\n[output]\nformats = [\"flat\", \"hf\", \"megatron\"]\n")).unwrap();
        assert_ne!(plain, megatron.canonical());
        assert_ne!(megatron.canonical(), both.canonical());
        assert_eq!(both.canonical()["output"]["formats"], json!(["megatron", "flat"]));
    }

    #[test]
    fn megatron_refuses_uint32_and_unknown_formats_are_named() {
        let err = parse(&format!("{MINIMAL}\n[output]\nformats = [\"megatron\"]\ntoken_type = \"uint32\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("uint32") && err.contains("int32"), "{err}");
        let err = parse(&format!("{MINIMAL}\n[output]\nformats = [\"nanogpt\"]\n")).unwrap_err().to_string();
        assert!(err.contains("nanogpt") && err.contains("megatron"), "{err}");
    }

    #[test]
    fn what_follows_tokenization_changes_only_the_view_part() {
        let base = parse(MINIMAL).unwrap();
        let after_tokenizing = [
            "[sequence]\nseq_len = 2048\n",
            "[sequence]\npack = \"best_fit\"\n",
            "[sequence]\nlabels = true\nattention_mask = true\n",
            "[sequence]\nposition_ids = true\n",
            "[sequence]\nshuffle_seed = 7\n",
            "[output]\ntoken_type = \"uint16\"\nformats = [\"megatron\"]\n",
        ];
        for extra in after_tokenizing {
            let other = parse(&format!("{MINIMAL}\n{extra}")).unwrap();
            assert_eq!(other.tokens_canonical(), base.tokens_canonical(), "{extra}");
            assert_ne!(other.view_canonical(), base.view_canonical(), "{extra}");
        }
        let tokenizing = ["[filter]\nmin_chars = 3\n", "[source]\ntext_field = \"body\"\n"];
        for extra in tokenizing {
            let other = parse(&format!("{MINIMAL}\n{extra}")).unwrap();
            assert_ne!(other.tokens_canonical(), base.tokens_canonical(), "{extra}");
            assert_eq!(other.view_canonical(), base.view_canonical(), "{extra}");
        }
        let whole = base.canonical();
        assert_eq!(whole["sequence"]["seq_len"], 1024);
        assert_eq!(whole["tokenizer"]["ensure_bos_eos"], true);
    }

    #[test]
    fn packing_options_a_trainer_could_not_use_are_refused() {
        let refused = [
            ("[sequence]\npack = \"none\"\nposition_ids = true\n", "position_ids"),
            ("[sequence]\npack = \"truncate\"\nposition_ids = true\n", "position_ids"),
            ("[sequence]\npack = \"best_fit\"\nlabels = true\n[output]\ntoken_type = \"uint16\"\n", "-100"),
            ("[sequence]\npack = \"bestfit\"\n", "best_fit"),
        ];
        for (extra, named) in refused {
            let err = parse(&format!("{MINIMAL}\n{extra}")).unwrap_err().to_string();
            assert!(err.contains(named), "{extra}: {err}");
        }
        let spec = parse(&format!("{MINIMAL}\n[sequence]\npack = \"best_fit\"\nposition_ids = true\nlabels = true\n"));
        assert_eq!(spec.unwrap().sequence.pack, PackMode::BestFit);
    }

    #[test]
    fn unsafe_names_are_refused() {
        assert!(parse(&MINIMAL.replace("pile-gpt2", "../x")).is_err());
    }
}
