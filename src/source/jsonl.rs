//! JSON lines, plain or compressed with zstd or gzip, read one line at a time.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{DocumentReader, Item, RecordProblem, Selector, SourceError};
use crate::spec::SourceFormat;

/// Bytes each reader buffers (and a gzip decoder reads at once).
const BUFFER: usize = 1 << 20;

pub struct JsonlReader {
    path: PathBuf,
    lines: Box<dyn BufRead + Send>,
    line: Vec<u8>,
    number: u64,
    bytes_read: Arc<AtomicU64>,
    selector: Selector,
}

impl JsonlReader {
    pub fn open(path: &Path, format: SourceFormat, selector: Selector) -> Result<JsonlReader, SourceError> {
        let file = File::open(path).map_err(|source| SourceError::Open { path: path.to_path_buf(), source })?;
        let bytes_read = Arc::new(AtomicU64::new(0));
        let counted = CountingReader { inner: file, count: bytes_read.clone() };
        let decoded: Box<dyn Read + Send> = match format {
            SourceFormat::JsonlZst => Box::new(
                zstd::stream::read::Decoder::new(counted)
                    .map_err(|source| SourceError::Open { path: path.to_path_buf(), source })?,
            ),
            SourceFormat::JsonlGz => {
                Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(BUFFER, counted)))
            }
            _ => Box::new(counted),
        };
        Ok(JsonlReader {
            path: path.to_path_buf(),
            lines: Box::new(BufReader::with_capacity(BUFFER, decoded)),
            line: Vec::new(),
            number: 0,
            bytes_read,
            selector,
        })
    }
}

impl DocumentReader for JsonlReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        loop {
            // After `record` whole records, as a reader of a truncated file counts them.
            let read_error = |record, source| SourceError::Read { path: self.path.clone(), record, source };
            // A line that is whole in the reader's buffer is parsed where it is;
            // one that runs past it is gathered into `line` first.
            let buffered = self.lines.fill_buf().map_err(|source| read_error(self.number, source))?;
            if buffered.is_empty() {
                return Ok(None);
            }
            let item = if let Some(end) = memchr::memchr(b'\n', buffered) {
                self.number += 1;
                let item = item_of_line(&buffered[..end], self.number, &self.selector);
                self.lines.consume(end + 1);
                item
            } else {
                self.line.clear();
                self.lines.read_until(b'\n', &mut self.line).map_err(|source| read_error(self.number, source))?;
                self.number += 1;
                item_of_line(&self.line, self.number, &self.selector)
            };
            if item.is_some() {
                return Ok(item);
            }
        }
    }

    fn input_bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }
}

/// The item of one line (its newline included or not), or none for a blank line.
fn item_of_line(line: &[u8], number: u64, selector: &Selector) -> Option<Item> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    // A SIMD check: std's took about 0.8% of a GPT-2 build's instructions here.
    Some(match simdutf8::compat::from_utf8(line) {
        Ok(text) => selector.select_json_line(text, number),
        Err(err) => Item::Bad { record: number, problem: RecordProblem::InvalidUtf8 { byte: err.valid_up_to() } },
    })
}

/// Counts the compressed bytes consumed, for progress in bytes of input.
struct CountingReader<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::FilterSpec;
    use std::io::Write;

    fn read_all(path: &Path, format: SourceFormat) -> Result<Vec<Item>, SourceError> {
        let mut reader = JsonlReader::open(path, format, Selector::new("text", &FilterSpec::default()))?;
        let mut items = Vec::new();
        while let Some(item) = reader.next_item()? {
            items.push(item);
        }
        Ok(items)
    }

    const LINES: &[u8] = b"{\"text\": \"one\"}\n\n{\"text\": \"two\"}\r\n{bad\n\xff\xfe\n{\"text\": \"three\"}";

    #[test]
    fn reads_each_compression_with_line_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("a.jsonl");
        std::fs::write(&plain, LINES).unwrap();
        let zst = dir.path().join("a.jsonl.zst");
        std::fs::write(&zst, zstd::encode_all(LINES, 3).unwrap()).unwrap();
        let gz = dir.path().join("a.jsonl.gz");
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(LINES).unwrap();
        std::fs::write(&gz, encoder.finish().unwrap()).unwrap();
        for (path, format) in [(plain, SourceFormat::Jsonl), (zst, SourceFormat::JsonlZst), (gz, SourceFormat::JsonlGz)]
        {
            let items = read_all(&path, format).unwrap();
            let summary: Vec<String> = items
                .iter()
                .map(|item| match item {
                    Item::Document(d) => format!("{}:{}", d.record, d.text),
                    Item::Filtered => "filtered".into(),
                    Item::Bad { record, problem } => format!("{record}:{}", problem.reason()),
                })
                .collect();
            assert_eq!(
                summary,
                ["1:one", "3:two", "4:malformed_json", "5:invalid_utf8", "6:three"],
                "{}",
                path.display()
            );
        }
    }

    /// Lines are parsed in the reader's buffer where whole, else gathered: lines
    /// that cross its end, are longer than it, or end the file without a newline
    /// all read the same.
    #[test]
    fn lines_across_and_beyond_the_buffer_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.jsonl");
        let mut body = Vec::new();
        let mut expected = Vec::new();
        for (n, len) in [10, BUFFER - 40, 100, 3 * BUFFER + 7, 0, BUFFER, 5].into_iter().enumerate() {
            let text: String = (0..len).map(|i| (b'a' + ((i + n) % 26) as u8) as char).collect();
            body.extend_from_slice(format!("{{\"text\": \"{text}\"}}\n").as_bytes());
            body.extend_from_slice(b"\n");
            expected.push((2 * n as u64 + 1, text));
        }
        body.extend_from_slice(b"{\"text\": \"last\"}");
        expected.push((15, "last".to_string()));
        std::fs::write(&path, &body).unwrap();
        let documents: Vec<(u64, String)> = read_all(&path, SourceFormat::Jsonl)
            .unwrap()
            .into_iter()
            .map(|item| match item {
                Item::Document(d) => (d.record, d.text),
                _ => panic!("every line is a document"),
            })
            .collect();
        assert_eq!(documents.len(), expected.len());
        for (found, wanted) in documents.iter().zip(&expected) {
            assert!(
                found == wanted,
                "record {} (length {}) read as record {} (length {})",
                wanted.0,
                wanted.1.len(),
                found.0,
                found.1.len()
            );
        }
    }

    #[test]
    fn truncated_zstd_is_a_read_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.jsonl.zst");
        let body: Vec<u8> = (0..2000).flat_map(|i| format!("{{\"text\": \"document {i}\"}}\n").into_bytes()).collect();
        let compressed = zstd::encode_all(&body[..], 3).unwrap();
        std::fs::write(&path, &compressed[..compressed.len() / 2]).unwrap();
        let err = read_all(&path, SourceFormat::JsonlZst).unwrap_err().to_string();
        assert!(err.contains("cut.jsonl.zst") && err.contains("truncated"), "{err}");
    }
}
