//! JSON lines, plain or compressed with zstd or gzip, read one line at a time.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{DocumentReader, Item, RecordProblem, Selector, SourceError};
use crate::spec::SourceFormat;

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
        const BUFFER: usize = 1 << 20;
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
            self.line.clear();
            let read = self.lines.read_until(b'\n', &mut self.line).map_err(|source| SourceError::Read {
                path: self.path.clone(),
                record: self.number,
                source,
            })?;
            if read == 0 {
                return Ok(None);
            }
            self.number += 1;
            let line = self.line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            let text = match std::str::from_utf8(line) {
                Ok(text) => text,
                Err(err) => {
                    return Ok(Some(Item::Bad {
                        record: self.number,
                        problem: RecordProblem::InvalidUtf8 { byte: err.valid_up_to() },
                    }));
                }
            };
            return Ok(Some(self.selector.select_json_line(text, self.number)));
        }
    }

    fn input_bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }
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
