//! The pieces the extra formats are made of: per-unit token, row-length and
//! document-piece parts, and a kernel-side concatenation.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::cache::hashed_file::HashedFile;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::{Row, WriteError};
use crate::fsutil;
use crate::spec::TokenType;

use crate::errors::IoError;

/// One unit's rows for the extra formats: `tokens` (the ids in the view's dtype,
/// little-endian, row after row), `lengths` (u32 per row, padding included) and,
/// where rows hold documents a reader keeps apart, `pieces` (per run of one
/// document in a row: u64 start in tokens from the unit's first, u32 length).
pub struct TokenParts {
    tokens: HashedFile,
    lengths: HashedFile,
    pieces: Option<HashedFile>,
    token_type: TokenType,
    rows: u64,
    count: u64,
    piece_count: u64,
    buffer: Vec<u8>,
}

/// A unit's finished parts: paths, and what the publisher needs to know of them.
#[derive(Debug, Clone)]
pub struct UnitParts {
    /// The tokens part and its record (size and blake3, known from writing it).
    pub tokens: (PathBuf, WrittenFile),
    pub lengths: PathBuf,
    pub pieces: Option<PathBuf>,
    pub rows: u64,
    pub tokens_count: u64,
    pub piece_count: u64,
}

impl TokenParts {
    pub fn create(part: &impl Fn(&str) -> PathBuf, token_type: TokenType, documents: bool) -> Result<Self, WriteError> {
        Ok(TokenParts {
            tokens: HashedFile::create(&part("tokens"))?,
            lengths: HashedFile::create(&part("lengths"))?,
            pieces: match documents {
                true => Some(HashedFile::create(&part("pieces"))?),
                false => None,
            },
            token_type,
            rows: 0,
            count: 0,
            piece_count: 0,
            buffer: Vec::new(),
        })
    }

    pub fn push_row(&mut self, row: Row) -> Result<(), WriteError> {
        self.buffer.clear();
        encode_tokens(row.tokens, self.token_type, &mut self.buffer);
        self.tokens.append(&self.buffer)?;
        // Rows are far below 2^31 tokens: one row is held in memory as it is packed.
        self.lengths.append(&(row.tokens.len() as u32).to_le_bytes())?;
        if let Some(pieces) = &mut self.pieces {
            self.buffer.clear();
            for (start, length) in row.segments() {
                self.buffer.extend_from_slice(&(self.count + start as u64).to_le_bytes());
                self.buffer.extend_from_slice(&(length as u32).to_le_bytes());
                self.piece_count += 1;
            }
            pieces.append(&self.buffer)?;
        }
        self.rows += 1;
        self.count += row.tokens.len() as u64;
        Ok(())
    }

    pub fn finish(self) -> Result<UnitParts, WriteError> {
        let name =
            |file: &HashedFile| file.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tokens_path = self.tokens.path().to_path_buf();
        let lengths_path = self.lengths.path().to_path_buf();
        let tokens_name = name(&self.tokens);
        let tokens = self.tokens.finish(tokens_name)?;
        let lengths_name = name(&self.lengths);
        self.lengths.finish(lengths_name)?;
        let pieces = match self.pieces {
            Some(pieces) => {
                let (path, name) = (pieces.path().to_path_buf(), name(&pieces));
                pieces.finish(name)?;
                Some(path)
            }
            None => None,
        };
        Ok(UnitParts {
            tokens: (tokens_path, tokens),
            lengths: lengths_path,
            pieces,
            rows: self.rows,
            tokens_count: self.count,
            piece_count: self.piece_count,
        })
    }
}

/// Appends `row` to `out` in the dtype's little-endian bytes. Ids were checked
/// against the dtype's range when the tokenizer was loaded. Sizing `out` first
/// and filling fixed-size chunks lets the loop compile to vector code.
pub fn encode_tokens(row: &[u32], token_type: TokenType, out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + row.len() * token_size(token_type) as usize, 0);
    let bytes = &mut out[start..];
    match token_type {
        TokenType::Uint16 => {
            bytes.chunks_exact_mut(2).zip(row).for_each(|(b, &id)| b.copy_from_slice(&(id as u16).to_le_bytes()))
        }
        TokenType::Int32 | TokenType::Uint32 => {
            bytes.chunks_exact_mut(4).zip(row).for_each(|(b, &id)| b.copy_from_slice(&id.to_le_bytes()))
        }
    }
}

/// Bytes per token in the dtype.
pub fn token_size(token_type: TokenType) -> u64 {
    match token_type {
        TokenType::Uint16 => 2,
        TokenType::Int32 | TokenType::Uint32 => 4,
    }
}

/// Concatenates `parts` into `target` (temporary name, then rename) and hashes it.
/// `std::io::copy` between files uses `copy_file_range`, so the bytes stay in the
/// kernel (and are shared extents on filesystems that reflink); the hash then
/// reads the result back in blocks.
pub fn concatenate(parts: &[PathBuf], target: &Path, relative: String) -> Result<WrittenFile, WriteError> {
    let error = IoError::at("writing", target);
    let dir = target.parent().unwrap_or(Path::new("."));
    fsutil::create_dir_all(dir).map_err(&error)?;
    let temp = fsutil::temp_file_in(dir).map_err(&error)?;
    let mut out: &File = temp.as_file();
    for part in parts {
        let mut input = File::open(part).map_err(IoError::at("reading", part))?;
        std::io::copy(&mut input, &mut out).map_err(&error)?;
    }
    temp.as_file().sync_all().map_err(&error)?;
    temp.persist(target).map_err(|err| error(err.error))?;
    let hash = fsutil::blake3_of_file(target).map_err(&error)?;
    let size = std::fs::metadata(target).map_err(&error)?.len();
    Ok(WrittenFile { path: relative, size, blake3: hash.to_hex().to_string(), rows: 0, tokens: 0 })
}

/// Calls `each` with every row length of the parts, in order, reading them in blocks.
pub fn for_each_length(
    parts: &[PathBuf],
    mut each: impl FnMut(u32) -> Result<(), WriteError>,
) -> Result<(), WriteError> {
    for_each_record::<4>(parts, |record| each(u32::from_le_bytes(*record)))
}

/// Calls `each` with every `N`-byte record of the parts, in order, reading them in blocks.
pub fn for_each_record<const N: usize>(
    parts: &[PathBuf],
    mut each: impl FnMut(&[u8; N]) -> Result<(), WriteError>,
) -> Result<(), WriteError> {
    let mut block = vec![0u8; (1 << 20) / N * N];
    for part in parts {
        let mut input = std::io::BufReader::new(File::open(part).map_err(IoError::at("reading", part))?);
        loop {
            let read = read_full(&mut input, &mut block).map_err(IoError::at("reading", part))?;
            for record in block[..read].chunks_exact(N) {
                each(record.try_into().unwrap_or(&[0; N]))?;
            }
            if read < block.len() {
                break;
            }
        }
    }
    Ok(())
}

/// Reads until `buffer` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl std::io::Read, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match input.read(&mut buffer[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_little_endian_in_the_dtype_width() {
        let mut out = vec![9];
        encode_tokens(&[1, 0x1234, 0xffff], TokenType::Uint16, &mut out);
        assert_eq!(out, [9, 1, 0, 0x34, 0x12, 0xff, 0xff]);
        out.clear();
        encode_tokens(&[0x0102_0304, 7], TokenType::Int32, &mut out);
        assert_eq!(out, [4, 3, 2, 1, 7, 0, 0, 0]);
    }

    #[test]
    fn pieces_are_the_documents_of_rows_counted_from_the_units_first_token() {
        let dir = tempfile::tempdir().unwrap();
        let part = |kind: &str| dir.path().join(format!("0.{kind}"));
        let mut parts = TokenParts::create(&part, TokenType::Int32, true).unwrap();
        parts.push_row(Row { tokens: &[1, 2, 3, 0], starts: &[2], padding: 1 }).unwrap();
        parts.push_row(Row { tokens: &[4, 5], starts: &[], padding: 0 }).unwrap();
        let unit = parts.finish().unwrap();
        assert_eq!((unit.rows, unit.tokens_count, unit.piece_count), (2, 6, 3));
        let mut pieces = Vec::new();
        for_each_record::<12>(&[unit.pieces.unwrap()], |record| {
            let start = u64::from_le_bytes(record[..8].try_into().unwrap());
            pieces.push((start, u32::from_le_bytes(record[8..].try_into().unwrap())));
            Ok(())
        })
        .unwrap();
        assert_eq!(pieces, [(0, 2), (2, 1), (4, 2)]);
    }
}
