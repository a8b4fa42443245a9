//! Parquet shards: only the text column (and filtered columns) are read, one
//! record batch at a time.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::ParquetMetaData;

use super::{DocumentReader, Item, RecordProblem, Selector, SourceError};
use crate::errors::caught_quietly;

const BATCH_ROWS: usize = 1024;

pub struct ParquetReader {
    path: PathBuf,
    batches: ParquetRecordBatchReader,
    pending: VecDeque<Item>,
    rows_read: u64,
    total_rows: u64,
    file_size: u64,
    selector: Selector,
}

/// The parquet crate asserts (panics) on some corruptions instead of returning an
/// error; a panic while reading one file becomes that file's error, with the
/// panic's message and without its report on stderr.
fn decoder_panicked(path: &Path, panic: String) -> SourceError {
    SourceError::Parquet { path: path.to_path_buf(), message: format!("the parquet decoder failed on it: {panic}") }
}

impl ParquetReader {
    pub fn open(path: &Path, selector: Selector) -> Result<ParquetReader, SourceError> {
        caught_quietly(AssertUnwindSafe(|| ParquetReader::open_unguarded(path, selector)))
            .unwrap_or_else(|panic| Err(decoder_panicked(path, panic)))
    }

    fn open_unguarded(path: &Path, selector: Selector) -> Result<ParquetReader, SourceError> {
        let parquet_error = |err: parquet::errors::ParquetError| SourceError::Parquet {
            path: path.to_path_buf(),
            message: err.to_string(),
        };
        let file = File::open(path).map_err(|source| SourceError::Open { path: path.to_path_buf(), source })?;
        let file_size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(parquet_error)?;
        check_chunks(builder.metadata(), file_size)
            .map_err(|message| SourceError::Parquet { path: path.to_path_buf(), message })?;
        let columns = selector.columns();
        for column in &columns {
            let first = column.split('.').next().unwrap_or(column);
            if builder.schema().field_with_name(first).is_err() {
                return Err(SourceError::Column {
                    path: path.to_path_buf(),
                    message: format!(
                        "no column {column:?}; set source.text_field (or the filter) to one of its columns"
                    ),
                });
            }
        }
        let total_rows = builder.metadata().file_metadata().num_rows().max(0) as u64;
        let mask = ProjectionMask::columns(builder.parquet_schema(), columns.iter().map(String::as_str));
        let batches = builder.with_projection(mask).with_batch_size(BATCH_ROWS).build().map_err(parquet_error)?;
        Ok(ParquetReader {
            path: path.to_path_buf(),
            batches,
            pending: VecDeque::new(),
            rows_read: 0,
            total_rows,
            file_size,
            selector,
        })
    }

    fn load_batch(&mut self, batch: RecordBatch) -> Result<(), SourceError> {
        let columns = self.selector.columns();
        let strings = columns.iter().map(|column| self.string_column(&batch, column)).collect::<Result<Vec<_>, _>>()?;
        let (text, filters) = strings.split_first().expect("columns() always starts with the text column");
        for row in 0..batch.num_rows() {
            let number = self.rows_read + row as u64 + 1;
            let values: BTreeMap<&str, Option<&str>> = columns[1..]
                .iter()
                .zip(filters)
                .map(|(name, array)| (name.as_str(), array.is_valid(row).then(|| array.value(row))))
                .collect();
            let item = if !self.selector.keeps_fields(&values) {
                Item::Filtered
            } else if text.is_null(row) {
                Item::Bad { record: number, problem: RecordProblem::MissingText { field: columns[0].clone() } }
            } else {
                self.selector.select_text(text.value(row).to_string(), number, self.selector.source_of(&values))
            };
            self.pending.push_back(item);
        }
        self.rows_read += batch.num_rows() as u64;
        Ok(())
    }

    /// The column at a dotted path, as UTF-8 strings.
    fn string_column(&self, batch: &RecordBatch, column: &str) -> Result<StringArray, SourceError> {
        let column_error = |message: String| SourceError::Column { path: self.path.clone(), message };
        let mut parts = column.split('.');
        let first = parts.next().unwrap_or(column);
        let mut array: ArrayRef =
            batch.column_by_name(first).cloned().ok_or_else(|| column_error(format!("no column {column:?}")))?;
        for part in parts {
            let DataType::Struct(_) = array.data_type() else {
                return Err(column_error(format!("column {column:?}: {part:?} is not inside a struct")));
            };
            array = array
                .as_struct()
                .column_by_name(part)
                .cloned()
                .ok_or_else(|| column_error(format!("no column {column:?}")))?;
        }
        let strings = arrow_cast::cast(&array, &DataType::Utf8)
            .map_err(|err| column_error(format!("column {column:?} is not text ({err})")))?;
        Ok(strings.as_string::<i32>().clone())
    }
}

/// Every column chunk must lie inside the file. The parquet crate panics on a
/// negative offset or size from the footer instead of failing, so a damaged or
/// hostile footer is refused here.
fn check_chunks(metadata: &ParquetMetaData, file_size: u64) -> Result<(), String> {
    for (group_index, group) in metadata.row_groups().iter().enumerate() {
        for (column_index, column) in group.columns().iter().enumerate() {
            let start = column.dictionary_page_offset().unwrap_or(column.data_page_offset());
            let length = column.compressed_size();
            let inside = u64::try_from(start)
                .ok()
                .zip(u64::try_from(length).ok())
                .and_then(|(start, length)| start.checked_add(length))
                .is_some_and(|end| end <= file_size);
            if !inside {
                return Err(format!(
                    "row group {group_index}, column {column_index}: its chunk (offset {start}, {length} bytes) \
                     lies outside the file's {file_size} bytes; the file is damaged, write it again"
                ));
            }
        }
    }
    Ok(())
}

impl DocumentReader for ParquetReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Ok(Some(item));
            }
            let next = caught_quietly(AssertUnwindSafe(|| self.batches.next()))
                .map_err(|panic| decoder_panicked(&self.path, panic))?;
            match next {
                None => return Ok(None),
                Some(Err(err)) => {
                    return Err(SourceError::Parquet { path: self.path.clone(), message: err.to_string() });
                }
                Some(Ok(batch)) => self.load_batch(batch)?,
            }
        }
    }

    fn input_bytes_read(&self) -> u64 {
        (self.file_size * self.rows_read).checked_div(self.total_rows).unwrap_or(self.file_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::FilterSpec;
    use arrow_array::StructArray;
    use arrow_schema::{Field, Schema};
    use std::sync::Arc;

    /// The error from reading all of `bytes` as a Parquet file named `damaged.parquet`.
    fn read_damaged(bytes: &[u8]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("damaged.parquet");
        std::fs::write(&path, bytes).unwrap();
        let selector = Selector::new("text", &FilterSpec::default());
        let err = match ParquetReader::open(&path, selector) {
            Err(err) => err,
            Ok(mut reader) => loop {
                match reader.next_item() {
                    Ok(Some(_)) => continue,
                    Ok(None) => panic!("a damaged file read to its end"),
                    Err(err) => break err,
                }
            },
        };
        err.to_string()
    }

    #[test]
    fn a_footer_with_a_negative_chunk_offset_is_an_error_not_a_panic() {
        // The parquet crate asserts on this file while decoding (found by fuzz/parquet).
        let message =
            read_damaged(include_bytes!("../../fuzz/seeds/parquet/crash-6084d6ccf51fa85737ed359c595253ebf4bf2960"));
        assert!(message.contains("damaged.parquet") && message.contains("outside the file"), "{message}");
    }

    #[test]
    fn a_panic_inside_the_decoder_is_the_files_error() {
        // Corrupt definition levels: the parquet crate panics (found by fuzz/parquet).
        let message =
            read_damaged(include_bytes!("../../fuzz/seeds/parquet/crash-eabf6e2903fb727c2a27d84056905003369533df"));
        assert!(message.contains("damaged.parquet") && message.contains("decoder failed"), "{message}");
        let (_, panic) = message.split_once("decoder failed on it: ").unwrap();
        assert!(!panic.trim().is_empty(), "the panic's own message is given: {message}");
    }

    #[test]
    fn reads_text_and_filters_on_a_struct_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let text = Arc::new(StringArray::from(vec![Some("one"), None, Some("three")])) as ArrayRef;
        let set = Arc::new(StringArray::from(vec!["Github", "Github", "Pile-CC"])) as ArrayRef;
        let meta = StructArray::from(vec![(Arc::new(Field::new("pile_set_name", DataType::Utf8, false)), set)]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("text", DataType::Utf8, true),
            Field::new("meta", meta.data_type().clone(), false),
        ]));
        let batch = RecordBatch::try_new(schema.clone(), vec![text, Arc::new(meta)]).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(File::create(&path).unwrap(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();

        let filter: FilterSpec = toml::from_str("meta.pile_set_name = [\"Github\"]").unwrap();
        let mut reader = ParquetReader::open(&path, Selector::new("text", &filter)).unwrap();
        let mut seen = Vec::new();
        while let Some(item) = reader.next_item().unwrap() {
            seen.push(match item {
                Item::Document(d) => format!("{}:{}", d.record, d.text),
                Item::Filtered => "filtered".into(),
                Item::Bad { record, problem } => format!("{record}:{}", problem.reason()),
            });
        }
        assert_eq!(seen, ["1:one", "2:missing_text", "filtered"]);
    }

    #[test]
    fn missing_text_column_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.parquet");
        let schema = Arc::new(Schema::new(vec![Field::new("body", DataType::Utf8, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(vec!["x"])) as ArrayRef]).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(File::create(&path).unwrap(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let err = ParquetReader::open(&path, Selector::new("text", &FilterSpec::default())).err().unwrap().to_string();
        assert!(err.contains("b.parquet") && err.contains("\"text\""), "{err}");
    }
}
