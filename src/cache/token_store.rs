//! A token store's documents on disk: for each input shard, Megatron-core's indexed
//! dataset with one sequence per document (`tokens/<split>/<shard>.bin` holds the
//! ids one document after another, `.idx` their lengths; see `formats::megatron`).
//! The layout is cheap to read in order and to slice (a document is a byte range
//! of the `.bin`), Megatron's own loader reads it as it is, and ids take the
//! narrowest type that holds the vocabulary.
//!
//! The index is read back from a cache that others may write: every count and
//! offset in it is checked against the file sizes before it is used.

use std::path::Path;

use crate::cache::formats::megatron;
use crate::cache::hashed_file::HashedFile;
use crate::cache::manifest::{StoreDtype, WrittenFile};
use crate::errors::IoError;

/// Writes one shard's documents: the ids to the `.bin` as they come, the lengths
/// kept (4 bytes a document) for the `.idx`, written at the end.
pub struct DocumentWriter {
    bin: HashedFile,
    idx: HashedFile,
    dtype: StoreDtype,
    lengths: Vec<u32>,
    tokens: u64,
    buffer: Vec<u8>,
}

impl DocumentWriter {
    pub fn create(bin: &Path, idx: &Path, dtype: StoreDtype) -> Result<DocumentWriter, IoError> {
        Ok(DocumentWriter {
            bin: HashedFile::create(bin)?,
            idx: HashedFile::create(idx)?,
            dtype,
            lengths: Vec::new(),
            tokens: 0,
            buffer: Vec::new(),
        })
    }

    /// Appends one document's ids (BOS/EOS included).
    pub fn push(&mut self, ids: &[u32]) -> Result<(), IoError> {
        let length = i32::try_from(ids.len()).map_err(|_| {
            let message = format!("a document of {} tokens is longer than Megatron's index can hold", ids.len());
            IoError::at("writing", self.bin.path())(std::io::Error::other(message))
        })?;
        self.buffer.clear();
        encode(ids, self.dtype, &mut self.buffer);
        self.bin.append(&self.buffer)?;
        self.lengths.push(length as u32);
        self.tokens += ids.len() as u64;
        Ok(())
    }

    /// Writes the index and lands both files; `bin_name` and `idx_name` are the
    /// paths their records carry.
    pub fn finish(mut self, bin_name: String, idx_name: String) -> Result<[WrittenFile; 2], IoError> {
        megatron::write_document_index(&mut self.idx, megatron::store_dtype_code(self.dtype), &self.lengths)?;
        let documents = self.lengths.len() as u64;
        let mut bin = self.bin.finish(bin_name)?;
        let mut idx = self.idx.finish(idx_name)?;
        for file in [&mut bin, &mut idx] {
            (file.rows, file.tokens) = (documents, self.tokens);
        }
        Ok([bin, idx])
    }
}

/// Appends `ids` to `out` as the dtype's little-endian bytes (ids were checked
/// against the vocabulary, which the dtype holds).
pub fn encode(ids: &[u32], dtype: StoreDtype, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + ids.len() * dtype.bytes(), 0);
    let bytes = &mut out[start..];
    match dtype {
        StoreDtype::Uint16 => {
            bytes.chunks_exact_mut(2).zip(ids).for_each(|(b, &id)| b.copy_from_slice(&(id as u16).to_le_bytes()))
        }
        StoreDtype::Int32 => {
            bytes.chunks_exact_mut(4).zip(ids).for_each(|(b, &id)| b.copy_from_slice(&id.to_le_bytes()))
        }
    }
}

/// Appends the ids in `bytes` (the dtype's little-endian bytes) to `out`.
pub fn decode(bytes: &[u8], dtype: StoreDtype, out: &mut Vec<u32>) {
    match dtype {
        StoreDtype::Uint16 => out.extend(bytes.chunks_exact(2).map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))),
        StoreDtype::Int32 => out.extend(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
    }
}

/// The document lengths an `.idx` holds, checked to be the index ferry writes for
/// a `.bin` of `bin_size` bytes in `dtype`: one sequence per document, pointers
/// that follow the lengths, and lengths that add up to the `.bin`.
pub fn read_index(bytes: &[u8], dtype: StoreDtype, bin_size: u64) -> Result<Vec<u32>, String> {
    let mut reader = megatron::IndexReader::new(bytes);
    let (code, sequences) = reader.header()?;
    if code != megatron::store_dtype_code(dtype) {
        return Err(format!(
            "its dtype code is {code}, the manifest's dtype {dtype:?} has {}",
            megatron::store_dtype_code(dtype)
        ));
    }
    let lengths = reader.document_level(sequences, dtype.bytes() as u64)?;
    let tokens: u64 = lengths.iter().map(|&length| u64::from(length)).sum();
    if tokens * dtype.bytes() as u64 != bin_size {
        return Err(format!("its {tokens} tokens do not fill the .bin of {bin_size} bytes"));
    }
    Ok(lengths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_round_trip_through_bin_and_index() {
        let dir = tempfile::tempdir().unwrap();
        for dtype in [StoreDtype::Uint16, StoreDtype::Int32] {
            let (bin, idx) = (dir.path().join("0.bin"), dir.path().join("0.idx"));
            let mut writer = DocumentWriter::create(&bin, &idx, dtype).unwrap();
            let documents: [&[u32]; 4] = [&[1, 2, 3], &[], &[65535], &[7, 8]];
            for ids in documents {
                writer.push(ids).unwrap();
            }
            let [bin_file, idx_file] = writer.finish("0.bin".into(), "0.idx".into()).unwrap();
            assert_eq!((bin_file.rows, bin_file.tokens), (4, 6));
            let bin_bytes = std::fs::read(&bin).unwrap();
            assert_eq!(bin_bytes.len() as u64, bin_file.size);
            let lengths = read_index(&std::fs::read(&idx).unwrap(), dtype, bin_file.size).unwrap();
            assert_eq!(lengths, [3, 0, 1, 2]);
            let mut ids = Vec::new();
            decode(&bin_bytes, dtype, &mut ids);
            assert_eq!(ids, documents.concat());
            assert_eq!(idx_file.size, std::fs::metadata(&idx).unwrap().len());
        }
    }

    #[test]
    fn an_index_that_does_not_match_its_bin_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, idx) = (dir.path().join("0.bin"), dir.path().join("0.idx"));
        let mut writer = DocumentWriter::create(&bin, &idx, StoreDtype::Uint16).unwrap();
        writer.push(&[1, 2, 3]).unwrap();
        writer.push(&[4]).unwrap();
        let [bin_file, _] = writer.finish("0.bin".into(), "0.idx".into()).unwrap();
        let good = std::fs::read(&idx).unwrap();
        assert!(read_index(&good, StoreDtype::Uint16, bin_file.size).is_ok());
        assert!(read_index(&good, StoreDtype::Uint16, bin_file.size + 2).unwrap_err().contains("do not fill"));
        assert!(read_index(&good, StoreDtype::Int32, bin_file.size).unwrap_err().contains("dtype"));
        assert!(read_index(&good[..good.len() - 1], StoreDtype::Uint16, bin_file.size).is_err());
        let mut wrong_pointer = good.clone();
        // The second pointer (after the header and two lengths).
        let at = 34 + 2 * 4 + 8;
        wrong_pointer[at] ^= 2;
        assert!(read_index(&wrong_pointer, StoreDtype::Uint16, bin_file.size).is_err());
        let mut huge_count = good.clone();
        huge_count[18..26].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_index(&huge_count, StoreDtype::Uint16, bin_file.size).is_err());
        assert!(read_index(b"MMIDIDX", StoreDtype::Uint16, 0).is_err());
    }
}
