//! The pieces the extra formats are made of: per-shard token and row-length parts,
//! and a kernel-side concatenation.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::cache::hashed_file::HashedFile;
use crate::cache::layout::BuildLayout;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::WriteError;
use crate::fsutil;
use crate::spec::TokenType;

use crate::errors::IoError;

/// One shard's rows for the extra formats: `<shard>.tokens` (the ids in the entry's
/// dtype, little-endian, row after row) and `<shard>.lengths` (u32 per row).
pub struct TokenParts {
    tokens: HashedFile,
    lengths: HashedFile,
    token_type: TokenType,
    rows: u64,
    count: u64,
    buffer: Vec<u8>,
}

impl TokenParts {
    pub fn create(build: &BuildLayout, split: &str, shard: usize, token_type: TokenType) -> Result<Self, WriteError> {
        Ok(TokenParts {
            tokens: HashedFile::create(&build.format_part(split, shard, "tokens"))?,
            lengths: HashedFile::create(&build.format_part(split, shard, "lengths"))?,
            token_type,
            rows: 0,
            count: 0,
            buffer: Vec::new(),
        })
    }

    pub fn push_row(&mut self, row: &[u32]) -> Result<(), WriteError> {
        self.buffer.clear();
        encode_tokens(row, self.token_type, &mut self.buffer);
        self.tokens.append(&self.buffer)?;
        // Rows are far below 2^31 tokens: one row is held in memory as it is packed.
        self.lengths.append(&(row.len() as u32).to_le_bytes())?;
        self.rows += 1;
        self.count += row.len() as u64;
        Ok(())
    }

    pub fn finish(self) -> Result<Vec<WrittenFile>, WriteError> {
        let name =
            |file: &HashedFile| file.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (tokens_name, lengths_name) = (name(&self.tokens), name(&self.lengths));
        let mut tokens = self.tokens.finish(tokens_name)?;
        let mut lengths = self.lengths.finish(lengths_name)?;
        for file in [&mut tokens, &mut lengths] {
            (file.rows, file.tokens) = (self.rows, self.count);
        }
        Ok(vec![tokens, lengths])
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
    let mut block = vec![0u8; 1 << 20];
    for part in parts {
        let mut input = std::io::BufReader::new(File::open(part).map_err(IoError::at("reading", part))?);
        loop {
            let read = read_full(&mut input, &mut block).map_err(IoError::at("reading", part))?;
            for length in block[..read].chunks_exact(4) {
                each(u32::from_le_bytes([length[0], length[1], length[2], length[3]]))?;
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
}
