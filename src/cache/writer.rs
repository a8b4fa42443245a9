//! Writes rows of token ids as Hugging Face `datasets` cache files: Arrow IPC
//! *stream* files with the `huggingface` schema metadata, and the split's
//! `dataset_info.json` and `state.json`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int8Array, Int32Array, ListArray, RecordBatch, UInt16Array, UInt32Array};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};

use serde_json::{Value, json};

use crate::cache::hashed_file::HashedFile;
use crate::cache::manifest::WrittenFile;
use crate::errors::{Failure, Fault, IoError};
use crate::fsutil;
use crate::spec::{SequenceSpec, TokenType};

/// Rows per record batch, as `datasets`' default writer batch size.
const BATCH_ROWS: usize = 1000;
/// Flush earlier when long rows (pack = "none") make a batch large. A batch is held
/// three times while it is written (the rows, the Arrow arrays, the encoded
/// message), by every shard's writer at once: at 1 Mi tokens that is about 12 MiB a
/// writer. At 4 Mi, a one-worker build of a 128k-token vocabulary peaked 30 MiB
/// higher and ran no faster.
const BATCH_TOKENS: usize = 1 << 20;
/// The batch's ids are kept in one buffer, reserved whole at the first row rather
/// than grown by doubling: each growth copied the ids into fresh pages, a tenth of
/// a build's page faults. A quarter more than a batch, as the row that fills a
/// batch goes past `BATCH_TOKENS`.
const VALUES_CAPACITY: usize = BATCH_TOKENS + BATCH_TOKENS / 4;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("writing {path}")]
    Arrow { path: PathBuf, source: arrow_schema::ArrowError },
}

/// The columns an entry's files have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    pub token_type: TokenType,
    pub labels: bool,
    pub attention_mask: bool,
    pub position_ids: bool,
    /// Rows may end in padding (best_fit): the mask and labels then differ from
    /// all ones and the ids.
    pub padded: bool,
}

/// One training row as a view writes it: `tokens` ends in `padding` pad tokens,
/// and a document starts at each of `starts` (ascending, inside the row's tokens
/// before the padding; the row's own start is not listed). A row that begins in
/// the middle of a document starts a segment all the same.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub tokens: &'a [u32],
    pub starts: &'a [u32],
    pub padding: usize,
}

impl Row<'_> {
    /// Tokens of documents, before the padding.
    pub fn content(&self) -> usize {
        self.tokens.len() - self.padding
    }

    /// Each run of one document inside the row, as (start, length): the pieces a
    /// trainer's attention keeps apart. Padding is none of them.
    pub fn segments(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let content = self.content();
        let bounds = std::iter::once(0).chain(self.starts.iter().map(|&start| start as usize));
        let ends = self.starts.iter().map(|&start| start as usize).chain(std::iter::once(content));
        bounds.zip(ends).filter(|(start, end)| end > start).map(|(start, end)| (start, end - start))
    }

    /// Positions that restart at 0 at the row's start, at each document start and
    /// at the padding.
    pub fn extend_positions(&self, out: &mut Vec<i32>) {
        let mut segment_start = 0;
        let mut starts =
            self.starts.iter().map(|&start| start as usize).chain(std::iter::once(self.content())).peekable();
        for index in 0..self.tokens.len() {
            if starts.peek() == Some(&index) {
                segment_start = index;
                while starts.peek() == Some(&index) {
                    starts.next();
                }
            }
            out.push((index - segment_start) as i32);
        }
    }
}

/// The label of a padding token: what PyTorch's cross-entropy ignores.
pub const IGNORED_LABEL: i32 = -100;

impl Columns {
    pub fn new(token_type: TokenType, sequence: &SequenceSpec) -> Columns {
        Columns {
            token_type,
            labels: sequence.labels,
            attention_mask: sequence.attention_mask,
            position_ids: sequence.position_ids,
            padded: sequence.pack == crate::spec::PackMode::BestFit,
        }
    }

    fn token_data_type(&self) -> DataType {
        match self.token_type {
            TokenType::Int32 => DataType::Int32,
            TokenType::Uint16 => DataType::UInt16,
            TokenType::Uint32 => DataType::UInt32,
        }
    }

    fn names_and_types(&self) -> Vec<(&'static str, DataType, &'static str)> {
        let token = (self.token_data_type(), self.token_type.dtype());
        let mut columns = vec![("input_ids", token.0.clone(), token.1)];
        if self.attention_mask {
            columns.push(("attention_mask", DataType::Int8, "int8"));
        }
        if self.labels {
            columns.push(("labels", token.0, token.1));
        }
        if self.position_ids {
            columns.push(("position_ids", DataType::Int32, "int32"));
        }
        columns
    }

    /// `datasets` features matching the stored types exactly.
    pub fn features(&self) -> Value {
        let mut features = serde_json::Map::new();
        for (name, _, dtype) in self.names_and_types() {
            features.insert(name.into(), json!({"feature": {"dtype": dtype, "_type": "Value"}, "_type": "List"}));
        }
        Value::Object(features)
    }

    /// The Arrow schema, carrying `datasets`' own `huggingface` metadata key.
    pub fn schema(&self) -> Arc<Schema> {
        let fields: Vec<Field> = self
            .names_and_types()
            .into_iter()
            .map(|(name, data_type, _)| {
                Field::new(name, DataType::List(Arc::new(Field::new("item", data_type, true))), true)
            })
            .collect();
        let metadata = json!({"info": {"features": self.features()}}).to_string();
        Arc::new(
            Schema::new(fields).with_metadata(std::collections::HashMap::from([("huggingface".to_string(), metadata)])),
        )
    }
}

/// Writes one input shard's rows into one or more Arrow files, each landing under
/// its final name only once complete. A new file starts once the current one
/// reaches the target size.
pub struct PartWriter<F: Fn(usize) -> PathBuf> {
    columns: Columns,
    schema: Arc<Schema>,
    part_path: F,
    target_bytes: u64,
    open: Option<OpenPart>,
    offsets: Vec<i32>,
    values: Vec<u32>,
    /// Ones for the attention mask, shared by every batch (sliced to its length).
    ones: Buffer,
    /// The batch's positions, mask and labels, where they are not the shared ones
    /// or the ids (position_ids; padded rows).
    positions: Vec<i32>,
    mask: Vec<i8>,
    labels: Vec<i32>,
    finished: Vec<WrittenFile>,
}

struct OpenPart {
    writer: StreamWriter<HashedFile>,
    rows: u64,
    tokens: u64,
}

impl<F: Fn(usize) -> PathBuf> PartWriter<F> {
    /// `part_path(k)` names the k-th file.
    pub fn new(columns: Columns, target_bytes: u64, part_path: F) -> Self {
        PartWriter {
            columns,
            schema: columns.schema(),
            part_path,
            target_bytes,
            open: None,
            offsets: vec![0],
            values: Vec::new(),
            ones: Buffer::from_vec(Vec::<i8>::new()),
            positions: Vec::new(),
            mask: Vec::new(),
            labels: Vec::new(),
            finished: Vec::new(),
        }
    }

    pub fn push_row(&mut self, row: Row) -> Result<(), WriteError> {
        if self.values.capacity() == 0 {
            self.values.reserve(VALUES_CAPACITY);
        }
        // The batch's offsets are i32: a row that would take them past i32::MAX (a
        // document of billions of tokens, pack = "none") starts a batch of its own.
        // Rows themselves are at most i32::MAX tokens (the spec's seq_len, a token
        // store's document lengths).
        if self.values.len() + row.tokens.len() > i32::MAX as usize {
            self.flush_batch()?;
        }
        self.values.extend_from_slice(row.tokens);
        self.offsets.push(self.values.len() as i32);
        if self.columns.position_ids {
            row.extend_positions(&mut self.positions);
        }
        if self.columns.padded && self.columns.attention_mask {
            self.mask.extend(std::iter::repeat_n(1i8, row.content()));
            self.mask.extend(std::iter::repeat_n(0i8, row.padding));
        }
        if self.columns.padded && self.columns.labels {
            self.labels.extend(row.tokens[..row.content()].iter().map(|&id| id as i32));
            self.labels.extend(std::iter::repeat_n(IGNORED_LABEL, row.padding));
        }
        if self.offsets.len() > BATCH_ROWS || self.values.len() >= BATCH_TOKENS {
            self.flush_batch()?;
        }
        Ok(())
    }

    fn flush_batch(&mut self) -> Result<(), WriteError> {
        let rows = self.offsets.len() - 1;
        if rows == 0 {
            return Ok(());
        }
        let tokens = self.values.len() as u64;
        if self.columns.attention_mask && !self.columns.padded && self.ones.len() < self.values.len() {
            self.ones = Buffer::from_vec(vec![1i8; self.values.len().max(BATCH_TOKENS)]);
        }
        let per_token = PerToken {
            positions: std::mem::take(&mut self.positions),
            mask: std::mem::take(&mut self.mask),
            labels: std::mem::take(&mut self.labels),
        };
        let (batch, lent) =
            build_batch(&self.columns, &self.schema, &self.offsets, &mut self.values, &self.ones, per_token);
        self.offsets.truncate(1);
        if self.open.is_none() {
            let path = (self.part_path)(self.finished.len());
            self.open = Some(open_part(&path, &self.schema)?);
        }
        let part = self.open.as_mut().expect("opened above");
        let written = part.writer.write(&batch);
        drop(batch);
        if let Some(values) = lent.and_then(|lent| lent.into_vec::<u32>().ok()) {
            self.values = values;
        }
        self.values.clear();
        if let Err(source) = written {
            return Err(WriteError::Arrow { path: part.writer.get_ref().path().to_path_buf(), source });
        }
        part.rows += rows as u64;
        part.tokens += tokens;
        if part.writer.get_ref().bytes_written() >= self.target_bytes {
            self.close_part()?;
        }
        Ok(())
    }

    fn close_part(&mut self) -> Result<(), WriteError> {
        let Some(part) = self.open.take() else { return Ok(()) };
        let path = part.writer.get_ref().path().to_path_buf();
        let file = part.writer.into_inner().map_err(|source| WriteError::Arrow { path: path.clone(), source })?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut written = file.finish(name)?;
        (written.rows, written.tokens) = (part.rows, part.tokens);
        self.finished.push(written);
        Ok(())
    }

    /// Flushes and closes; returns the files written, in order.
    pub fn finish(mut self) -> Result<Vec<WrittenFile>, WriteError> {
        self.flush_batch()?;
        self.close_part()?;
        Ok(self.finished)
    }
}

fn open_part(path: &Path, schema: &Schema) -> Result<OpenPart, WriteError> {
    let writer = StreamWriter::try_new(HashedFile::create(path)?, schema)
        .map_err(|source| WriteError::Arrow { path: path.to_path_buf(), source })?;
    Ok(OpenPart { writer, rows: 0, tokens: 0 })
}

/// A batch's columns that are not the ids or shared ones (empty when not written).
struct PerToken {
    positions: Vec<i32>,
    mask: Vec<i8>,
    labels: Vec<i32>,
}

/// The record batch of rows ending at `offsets` in `values`. `uint32` and `int32`
/// ids become the token column as they are, with no copy: ids are below the
/// vocabulary size, checked against the type when the tokenizer loads, so an
/// `int32` reads the same bits. `values` is lent to the batch and comes back as
/// the buffer returned, whose memory is `values`' again once the batch is dropped
/// (see `Buffer::into_vec`). Without padding the attention mask is a slice of
/// `ones` and the labels are the ids; with it, they come from `per_token`.
fn build_batch(
    columns: &Columns,
    schema: &Arc<Schema>,
    offsets: &[i32],
    values: &mut Vec<u32>,
    ones: &Buffer,
    per_token: PerToken,
) -> (RecordBatch, Option<Buffer>) {
    let list = |data_type: DataType, values: ArrayRef| -> ArrayRef {
        let field = Arc::new(Field::new("item", data_type, true));
        Arc::new(ListArray::new(field, OffsetBuffer::new(offsets.to_vec().into()), values, None))
    };
    let tokens = values.len();
    let mut lent = None;
    let mut lend = |values: &mut Vec<u32>| {
        let buffer = Buffer::from_vec(std::mem::take(values));
        lent = Some(buffer.clone());
        buffer
    };
    let token_values: ArrayRef = match columns.token_type {
        TokenType::Int32 => Arc::new(Int32Array::new(ScalarBuffer::new(lend(values), 0, tokens), None)),
        TokenType::Uint16 => Arc::new(UInt16Array::from_iter_values(values.iter().map(|&v| v as u16))),
        TokenType::Uint32 => Arc::new(UInt32Array::new(ScalarBuffer::new(lend(values), 0, tokens), None)),
    };
    let input_ids = list(columns.token_data_type(), token_values);
    let mut arrays = vec![input_ids.clone()];
    if columns.attention_mask {
        let mask = match columns.padded {
            true => Int8Array::from(per_token.mask),
            false => Int8Array::new(ScalarBuffer::new(ones.clone(), 0, tokens), None),
        };
        arrays.push(list(DataType::Int8, Arc::new(mask)));
    }
    if columns.labels {
        // Padded labels hold -100: the spec allows them with int32 ids only.
        arrays.push(match columns.padded {
            true => list(DataType::Int32, Arc::new(Int32Array::from(per_token.labels))),
            false => input_ids,
        });
    }
    if columns.position_ids {
        arrays.push(list(DataType::Int32, Arc::new(Int32Array::from(per_token.positions))));
    }
    (RecordBatch::try_new(schema.clone(), arrays).expect("arrays are built to match the schema"), lent)
}

/// A stream file with the schema and no rows: what an empty split holds.
pub fn write_empty_file(path: &Path, columns: &Columns) -> Result<WrittenFile, WriteError> {
    let mut writer = PartWriter::new(*columns, u64::MAX, |_| path.to_path_buf());
    writer.open = Some(open_part(path, &writer.schema)?);
    Ok(writer.finish()?.remove(0))
}

/// Writes a split's `dataset_info.json` and `state.json` for `datasets.load_from_disk`.
pub fn write_split_metadata(
    split_dir: &Path,
    split: &str,
    data_files: &[String],
    columns: &Columns,
    fingerprint: &str,
) -> io::Result<()> {
    let info =
        json!({"citation": "", "description": "", "features": columns.features(), "homepage": "", "license": ""});
    fsutil::write_json_atomic(&split_dir.join("dataset_info.json"), &info)?;
    let state = json!({
        "_data_files": data_files.iter().map(|f| json!({"filename": f})).collect::<Vec<_>>(),
        "_fingerprint": fingerprint,
        "_format_columns": null,
        "_format_kwargs": {},
        "_format_type": null,
        "_output_all_columns": false,
        "_split": split,
    });
    fsutil::write_json_atomic(&split_dir.join("state.json"), &state)
}

impl Failure for WriteError {
    fn fault(&self) -> Fault {
        Fault::Cause
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;
    use arrow_ipc::reader::StreamReader;

    fn plain(tokens: &[u32]) -> Row<'_> {
        Row { tokens, starts: &[], padding: 0 }
    }

    fn columns(token_type: TokenType, labels: bool, attention_mask: bool) -> Columns {
        Columns { token_type, labels, attention_mask, position_ids: false, padded: false }
    }

    #[test]
    fn a_row_knows_its_documents_positions_and_padding() {
        let tokens = [5, 6, 7, 8, 9, 0, 0];
        let row = Row { tokens: &tokens, starts: &[2, 4], padding: 2 };
        assert_eq!(row.segments().collect::<Vec<_>>(), [(0, 2), (2, 2), (4, 1)]);
        let mut positions = Vec::new();
        row.extend_positions(&mut positions);
        assert_eq!(positions, [0, 1, 0, 1, 0, 0, 1]);
        let whole = Row { tokens: &tokens[..3], starts: &[], padding: 0 };
        assert_eq!(whole.segments().collect::<Vec<_>>(), [(0, 3)]);
    }

    #[test]
    fn padded_rows_mask_and_ignore_their_padding_and_positions_restart() {
        let dir = tempfile::tempdir().unwrap();
        let columns = Columns {
            token_type: TokenType::Int32,
            labels: true,
            attention_mask: true,
            position_ids: true,
            padded: true,
        };
        let mut writer = PartWriter::new(columns, 1 << 20, |k| dir.path().join(format!("p{k}.arrow")));
        writer.push_row(Row { tokens: &[1, 2, 3, 9, 9], starts: &[1], padding: 2 }).unwrap();
        writer.push_row(Row { tokens: &[4, 5], starts: &[], padding: 0 }).unwrap();
        writer.finish().unwrap();
        let bytes = std::fs::read(dir.path().join("p0.arrow")).unwrap();
        let batch = StreamReader::try_new(&bytes[..], None).unwrap().next().unwrap().unwrap();
        let column = |name: &str| -> Vec<i64> {
            let lists = batch.column_by_name(name).unwrap().as_any().downcast_ref::<ListArray>().unwrap().clone();
            let values = lists.values();
            match values.data_type() {
                DataType::Int8 => {
                    values.as_any().downcast_ref::<Int8Array>().unwrap().values().iter().map(|&v| v as i64).collect()
                }
                _ => values.as_any().downcast_ref::<Int32Array>().unwrap().values().iter().map(|&v| v as i64).collect(),
            }
        };
        assert_eq!(column("input_ids"), [1, 2, 3, 9, 9, 4, 5]);
        assert_eq!(column("attention_mask"), [1, 1, 1, 0, 0, 1, 1]);
        assert_eq!(column("labels"), [1, 2, 3, -100, -100, 4, 5]);
        assert_eq!(column("position_ids"), [0, 0, 1, 0, 1, 0, 1]);
        assert!(batch.schema().metadata()["huggingface"].contains("position_ids"));
    }

    #[test]
    fn rows_round_trip_through_stream_files_with_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let columns = columns(TokenType::Uint16, true, true);
        let mut writer = PartWriter::new(columns, 1 << 20, |k| dir.path().join(format!("p{k}.arrow")));
        for i in 0..2500u32 {
            writer.push_row(plain(&[i, i + 1, i + 2])).unwrap();
        }
        let files = writer.finish().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!((files[0].rows, files[0].tokens), (2500, 7500));
        let bytes = std::fs::read(dir.path().join("p0.arrow")).unwrap();
        assert_eq!(files[0].size, bytes.len() as u64);
        assert_eq!(files[0].blake3, blake3::hash(&bytes).to_hex().to_string());
        let reader = StreamReader::try_new(&bytes[..], None).unwrap();
        assert!(reader.schema().metadata()["huggingface"].contains("uint16"));
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2500);
        let first = batches[0].column(0).as_any().downcast_ref::<ListArray>().unwrap().value(1);
        assert_eq!(first.as_any().downcast_ref::<UInt16Array>().unwrap().values(), &[1, 2, 3]);
        assert_eq!(batches[0].schema().field(1).name(), "attention_mask");
    }

    #[test]
    fn uint32_and_int32_rows_are_written_from_the_rows_own_memory_which_comes_back_for_the_next_batch() {
        for token_type in [TokenType::Uint32, TokenType::Int32] {
            let dir = tempfile::tempdir().unwrap();
            // Labels share the token column: the buffer has two users in the batch.
            let columns = columns(token_type, true, true);
            let mut writer = PartWriter::new(columns, 1 << 30, |k| dir.path().join(format!("p{k}.arrow")));
            let rows = 3 * BATCH_ROWS as u32 + 7;
            // A row longer than a batch's tokens: the attention mask's ones grow for it.
            let long = BATCH_ROWS as u32;
            let long_row: Vec<u32> = (0..BATCH_TOKENS as u32 + 5).collect();
            let row = |i: u32| if i == long { long_row.clone() } else { vec![i, i32::MAX as u32 - i] };
            let mut first_buffer = std::ptr::null();
            for i in 0..rows {
                writer.push_row(plain(&row(i))).unwrap();
                if i == 0 {
                    first_buffer = writer.values.as_ptr();
                    assert_eq!(writer.values.capacity(), VALUES_CAPACITY, "reserved whole at the first row");
                }
                if i == BATCH_ROWS as u32 - 1 {
                    assert!(writer.values.is_empty(), "the first batch was written");
                    assert_eq!(writer.values.as_ptr(), first_buffer, "the first batch's memory came back");
                }
            }
            let files = writer.finish().unwrap();
            let bytes = std::fs::read(dir.path().join("p0.arrow")).unwrap();
            let reader = StreamReader::try_new(&bytes[..], None).unwrap();
            let mut seen = 0;
            for batch in reader.map(Result::unwrap) {
                let [ids, mask, labels] =
                    [0, 1, 2].map(|column| batch.column(column).as_any().downcast_ref::<ListArray>().unwrap().clone());
                for row_at in 0..batch.num_rows() {
                    let expected = row(seen + row_at as u32);
                    let (ids, labels) = (ids.value(row_at), labels.value(row_at));
                    for written in [ids, labels] {
                        let values: Vec<u32> = match token_type {
                            TokenType::Int32 => {
                                let array = written.as_any().downcast_ref::<Int32Array>().unwrap();
                                array.values().iter().map(|&v| v as u32).collect()
                            }
                            _ => written.as_any().downcast_ref::<UInt32Array>().unwrap().values().to_vec(),
                        };
                        assert_eq!(values, expected);
                    }
                    let mask = mask.value(row_at);
                    let mask = mask.as_any().downcast_ref::<Int8Array>().unwrap();
                    assert_eq!(mask.len(), expected.len());
                    assert!(mask.values().iter().all(|&one| one == 1));
                }
                seen += batch.num_rows() as u32;
            }
            assert_eq!((seen, files[0].rows), (rows, rows as u64));
        }
    }

    #[test]
    fn files_roll_over_at_the_target_size() {
        let dir = tempfile::tempdir().unwrap();
        let columns = columns(TokenType::Int32, false, false);
        let mut writer = PartWriter::new(columns, 100_000, |k| dir.path().join(format!("p{k}.arrow")));
        let row: Vec<u32> = (0..100).collect();
        for _ in 0..5000 {
            writer.push_row(plain(&row)).unwrap();
        }
        let files = writer.finish().unwrap();
        assert_eq!(files.len(), 5, "one file per 1000-row batch of 400 kB");
        assert_eq!(files.iter().map(|f| f.rows).sum::<u64>(), 5000);
    }
}
