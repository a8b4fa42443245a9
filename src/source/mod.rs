//! Streaming readers that turn raw shards into documents: JSON lines (plain, zstd,
//! gzip) and Parquet. Memory stays bounded by one record (or one Parquet batch),
//! whatever the shard's size.

mod fields;
mod jsonl;
mod parquet;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::errors::{Failure, Fault};
use crate::spec::{FilterSpec, SourceFormat};
use fields::{Found, Wanted};

/// One document kept by the selector.
#[derive(Debug)]
pub struct Document {
    pub text: String,
    /// 1-based line (JSON lines) or row (Parquet) number, for error messages.
    pub record: u64,
    /// The value of the spec's first field filter (`meta.pile_set_name`, say), the
    /// document's source for the entry's per-source token counts.
    pub source: Option<String>,
}

/// What a reader yields for each record.
#[derive(Debug)]
pub enum Item {
    Document(Document),
    /// Dropped by a filter (field value or length).
    Filtered,
    Bad {
        record: u64,
        problem: RecordProblem,
    },
}

/// Why a record cannot be used. `reason()` is the key counted in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordProblem {
    MalformedJson(String),
    InvalidUtf8 { byte: usize },
    MissingText { field: String },
    NonStringText { field: String },
}

impl RecordProblem {
    pub fn reason(&self) -> &'static str {
        match self {
            RecordProblem::MalformedJson(_) => "malformed_json",
            RecordProblem::InvalidUtf8 { .. } => "invalid_utf8",
            RecordProblem::MissingText { .. } => "missing_text",
            RecordProblem::NonStringText { .. } => "non_string_text",
        }
    }
}

impl fmt::Display for RecordProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordProblem::MalformedJson(message) => write!(f, "malformed JSON ({message})"),
            RecordProblem::InvalidUtf8 { byte } => write!(f, "invalid UTF-8 at byte {byte} of the line"),
            RecordProblem::MissingText { field } => write!(f, "no text field {field:?}"),
            RecordProblem::NonStringText { field } => write!(f, "field {field:?} is not a string"),
        }
    }
}

/// Failures that stop reading a whole file.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("opening input {path}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error(
        "input {path}: read failed after record {record} (the file looks truncated or corrupt: re-copy or regenerate it, or remove it from the spec)"
    )]
    Read { path: PathBuf, record: u64, source: std::io::Error },
    #[error("input {path} is not a readable Parquet file: {message}")]
    Parquet { path: PathBuf, message: String },
    #[error("input {path}: {message}")]
    Column { path: PathBuf, message: String },
    #[error(
        "cannot tell the format of input {path} from its name; set source.format to jsonl, jsonl.zst, jsonl.gz or parquet"
    )]
    UnknownFormat { path: PathBuf },
}

/// A stream of records from one input file.
pub trait DocumentReader: Send {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError>;
    /// Bytes of the input file consumed so far, for progress.
    fn input_bytes_read(&self) -> u64;
}

/// Opens `path` for reading, detecting the format from the file name when `auto`.
pub fn open(path: &Path, format: SourceFormat, selector: &Selector) -> Result<Box<dyn DocumentReader>, SourceError> {
    // Every variant by name: a new format must choose its reader here, not fall to JSON lines.
    match format {
        // `detect_format` never answers `Auto`, so this recurses once.
        SourceFormat::Auto => open(path, detect_format(path)?, selector),
        SourceFormat::Parquet => Ok(Box::new(parquet::ParquetReader::open(path, selector.clone())?)),
        SourceFormat::Jsonl | SourceFormat::JsonlZst | SourceFormat::JsonlGz => {
            Ok(Box::new(jsonl::JsonlReader::open(path, format, selector.clone())?))
        }
    }
}

fn detect_format(path: &Path) -> Result<SourceFormat, SourceError> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let format = if name.ends_with(".zst") || name.ends_with(".zstd") {
        SourceFormat::JsonlZst
    } else if name.ends_with(".gz") {
        SourceFormat::JsonlGz
    } else if name.ends_with(".parquet") {
        SourceFormat::Parquet
    } else if name.ends_with(".jsonl") || name.ends_with(".json") || name.ends_with(".ndjson") {
        SourceFormat::Jsonl
    } else {
        return Err(SourceError::UnknownFormat { path: path.to_path_buf() });
    };
    Ok(format)
}

/// Picks the text out of a record and applies the spec's filters.
#[derive(Debug, Clone)]
pub struct Selector {
    text_field: String,
    text_path: Vec<String>,
    field_filters: Vec<(String, Vec<String>, HashSet<String>)>,
    min_chars: usize,
    max_chars: Option<usize>,
    /// The text's path (slot 0) and the filters' (slots 1..), taken while parsing a JSON
    /// line; `None` when one path is a prefix of another (then the whole record is parsed).
    wanted: Option<Wanted>,
}

impl Selector {
    pub fn new(text_field: &str, filter: &FilterSpec) -> Selector {
        let split = |path: &str| path.split('.').map(str::to_string).collect::<Vec<_>>();
        let field_filters: Vec<_> = filter
            .field_filters()
            .into_iter()
            .map(|(path, allowed)| (path.clone(), split(&path), allowed.into_iter().collect()))
            .collect();
        let paths: Vec<Vec<String>> =
            std::iter::once(split(text_field)).chain(field_filters.iter().map(|(_, path, _)| path.clone())).collect();
        Selector {
            text_field: text_field.to_string(),
            text_path: split(text_field),
            wanted: Wanted::new(&paths),
            field_filters,
            min_chars: filter.min_chars,
            max_chars: filter.max_chars,
        }
    }

    /// Applies the selection to one JSON line, parsing only the fields it needs.
    pub fn select_json_line(&self, line: &str, number: u64) -> Item {
        let malformed = |err: serde_json::Error| Item::Bad {
            record: number,
            problem: RecordProblem::MalformedJson(err.to_string()),
        };
        let Some(wanted) = &self.wanted else {
            return serde_json::from_str(line).map_or_else(malformed, |record| self.select_json(record, number));
        };
        let mut found = match wanted.extract(line, 1 + self.field_filters.len()) {
            Ok(found) => found.into_iter(),
            Err(err) => return malformed(err),
        };
        let text = found.next().unwrap_or(Found::Absent);
        let mut source = None;
        for ((_, _, allowed), value) in self.field_filters.iter().zip(found) {
            match value {
                Found::Str(value) if allowed.contains(&value) => {
                    source.get_or_insert(value);
                }
                _ => return Item::Filtered,
            }
        }
        match text {
            Found::Str(text) => self.select_text(text, number, source),
            Found::Null | Found::Absent => {
                Item::Bad { record: number, problem: RecordProblem::MissingText { field: self.text_field.clone() } }
            }
            Found::Other => {
                Item::Bad { record: number, problem: RecordProblem::NonStringText { field: self.text_field.clone() } }
            }
        }
    }

    /// Dotted paths of every column a reader must provide (text first).
    pub fn columns(&self) -> Vec<String> {
        std::iter::once(self.text_field.clone())
            .chain(self.field_filters.iter().map(|(path, _, _)| path.clone()))
            .collect()
    }

    /// Applies the selection to one parsed JSON record.
    pub fn select_json(&self, mut record: Value, number: u64) -> Item {
        let mut source = None;
        for (_, path, allowed) in &self.field_filters {
            match lookup(&record, path) {
                Some(Value::String(value)) if allowed.contains(value) => {
                    source.get_or_insert_with(|| value.clone());
                }
                _ => return Item::Filtered,
            }
        }
        match lookup_mut(&mut record, &self.text_path).map(Value::take) {
            Some(Value::String(text)) => self.select_text(text, number, source),
            Some(Value::Null) | None => {
                Item::Bad { record: number, problem: RecordProblem::MissingText { field: self.text_field.clone() } }
            }
            Some(_) => {
                Item::Bad { record: number, problem: RecordProblem::NonStringText { field: self.text_field.clone() } }
            }
        }
    }

    /// Applies the filters that need only field values (Parquet rows).
    pub(super) fn keeps_fields(&self, values: &BTreeMap<&str, Option<&str>>) -> bool {
        self.field_filters
            .iter()
            .all(|(path, _, allowed)| matches!(values.get(path.as_str()), Some(Some(v)) if allowed.contains(*v)))
    }

    /// The source of a kept Parquet row: its value of the first field filter.
    pub(super) fn source_of(&self, values: &BTreeMap<&str, Option<&str>>) -> Option<String> {
        let (first, _, _) = self.field_filters.first()?;
        values.get(first.as_str()).copied().flatten().map(str::to_string)
    }

    pub(super) fn select_text(&self, text: String, number: u64, source: Option<String>) -> Item {
        if self.min_chars > 0 || self.max_chars.is_some() {
            let chars = text.chars().count();
            if chars < self.min_chars || self.max_chars.is_some_and(|max| chars > max) {
                return Item::Filtered;
            }
        }
        Item::Document(Document { text, record: number, source })
    }
}

fn lookup<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(value, |value, key| value.get(key))
}

fn lookup_mut<'v>(value: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    path.iter().try_fold(value, |value, key| value.get_mut(key))
}

impl Failure for SourceError {
    fn fault(&self) -> Fault {
        Fault::Cause
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(filter: &str) -> Selector {
        let filter: FilterSpec = toml::from_str(filter).unwrap();
        Selector::new("text", &filter)
    }

    #[test]
    fn filters_on_pile_set_name_and_length() {
        let s = selector("min_chars = 3\nmeta.pile_set_name = [\"Github\"]");
        let keep = json!({"text": "abc", "meta": {"pile_set_name": "Github"}});
        assert!(matches!(s.select_json(keep, 1), Item::Document(d) if d.text == "abc" && d.record == 1
            && d.source.as_deref() == Some("Github")));
        let other_set = json!({"text": "abc", "meta": {"pile_set_name": "Pile-CC"}});
        assert!(matches!(s.select_json(other_set, 2), Item::Filtered));
        let short = json!({"text": "ab", "meta": {"pile_set_name": "Github"}});
        assert!(matches!(s.select_json(short, 3), Item::Filtered));
    }

    #[test]
    fn a_line_selects_as_its_whole_parsed_record_does() {
        let filtered =
            selector("min_chars = 2\nmeta.pile_set_name = [\"Github\", \"ArXiv\"]\nfields = { lang = [\"en\"] }");
        let plain = selector("");
        for line in [
            r#"{"text": "abc", "meta": {"pile_set_name": "Github"}, "lang": "en"}"#,
            r#"{"text": "abc", "meta": {"pile_set_name": "Github"}, "lang": "fr"}"#,
            r#"{"text": "a", "meta": {"pile_set_name": "ArXiv"}, "lang": "en"}"#,
            r#"{"meta": {"pile_set_name": "ArXiv"}, "lang": "en"}"#,
            r#"{"text": 5, "meta": {"pile_set_name": "ArXiv"}, "lang": "en"}"#,
            r#"{"text": null, "meta": {"pile_set_name": "Other"}, "lang": "en"}"#,
            r#"{"text": "abc", "meta": {"pile_set_name": "Github"}, "lang": "en", "text": "later"}"#,
            r#"{"text": "abc""#,
        ] {
            for s in [&filtered, &plain] {
                let whole = match serde_json::from_str(line) {
                    Ok(record) => s.select_json(record, 7),
                    Err(err) => Item::Bad { record: 7, problem: RecordProblem::MalformedJson(err.to_string()) },
                };
                assert_eq!(format!("{:?}", s.select_json_line(line, 7)), format!("{whole:?}"), "{line}");
            }
        }
    }

    #[test]
    fn missing_and_non_string_text_are_bad_records() {
        let s = selector("");
        assert!(matches!(
            s.select_json(json!({"body": "x"}), 4),
            Item::Bad { record: 4, problem: RecordProblem::MissingText { .. } }
        ));
        assert!(matches!(
            s.select_json(json!({"text": 5}), 5),
            Item::Bad { problem: RecordProblem::NonStringText { .. }, .. }
        ));
    }

    #[test]
    fn format_is_detected_from_the_name() {
        assert_eq!(detect_format(Path::new("a/00.jsonl.zst")).unwrap(), SourceFormat::JsonlZst);
        assert_eq!(detect_format(Path::new("b.JSONL.GZ")).unwrap(), SourceFormat::JsonlGz);
        assert_eq!(detect_format(Path::new("c.parquet")).unwrap(), SourceFormat::Parquet);
        assert!(detect_format(Path::new("d.txt")).is_err());
    }
}
