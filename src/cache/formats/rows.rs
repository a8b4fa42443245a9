//! A split's rows read back from its units' parts, in order: their ids, or only
//! their lengths and runs of documents; what the trainer formats that re-encode
//! tokens (another dtype, a header) or describe rows (a mask, document ends) are
//! written from.

use std::fs::File;
use std::io::{BufReader, Read};

use crate::cache::writer::WriteError;
use crate::errors::IoError;
use crate::spec::TokenType;

use super::SplitParts;
use super::parts::{for_each_length, for_each_record, token_size};

/// Calls `each` with every row's ids (padding included) of the split, in order.
pub fn for_each_row(
    parts: &SplitParts,
    mut each: impl FnMut(&[u32]) -> Result<(), WriteError>,
) -> Result<(), WriteError> {
    let size = token_size(parts.token_type) as usize;
    let (mut bytes, mut tokens) = (Vec::new(), Vec::new());
    for unit in parts.units {
        let path = &unit.tokens.0;
        let mut input = BufReader::with_capacity(1 << 20, File::open(path).map_err(IoError::at("reading", path))?);
        for_each_length(std::slice::from_ref(&unit.lengths), |length| {
            bytes.resize(length as usize * size, 0);
            input.read_exact(&mut bytes).map_err(IoError::at("reading", path))?;
            tokens.clear();
            decode(&bytes, parts.token_type, &mut tokens);
            each(&tokens)
        })?;
    }
    Ok(())
}

/// A run of whole rows that one file of a chunked format holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Chunk {
    pub rows: u64,
    pub tokens: u64,
    /// Bytes of its rows in the format (`row_bytes` of each, summed).
    pub bytes: u64,
}

/// The split's rows cut into chunks of at most `max_bytes` (a longer row alone),
/// from the row lengths alone: formats whose files begin with counts plan first.
pub fn plan_chunks(
    parts: &SplitParts,
    max_bytes: u64,
    row_bytes: impl Fn(u32) -> u64,
) -> Result<Vec<Chunk>, WriteError> {
    let (mut chunks, mut current) = (Vec::new(), Chunk::default());
    for_each_length(&parts.lengths(), |length| {
        let bytes = row_bytes(length);
        if current.rows > 0 && current.bytes + bytes > max_bytes {
            chunks.push(std::mem::take(&mut current));
        }
        current =
            Chunk { rows: current.rows + 1, tokens: current.tokens + u64::from(length), bytes: current.bytes + bytes };
        Ok(())
    })?;
    chunks.push(current);
    Ok(chunks)
}

/// The split's row lengths read one at a time, across its units' parts: for a
/// header that lists its rows before their tokens follow.
pub struct Lengths<'a> {
    parts: &'a [std::path::PathBuf],
    next_part: usize,
    input: Option<(BufReader<File>, &'a std::path::Path)>,
}

impl<'a> Lengths<'a> {
    pub fn new(parts: &'a [std::path::PathBuf]) -> Lengths<'a> {
        Lengths { parts, next_part: 0, input: None }
    }

    /// The next row's length; none past the last row.
    pub fn next_length(&mut self) -> Result<Option<u32>, WriteError> {
        loop {
            if let Some((input, path)) = &mut self.input {
                let mut bytes = [0u8; 4];
                match input.read_exact(&mut bytes) {
                    Ok(()) => return Ok(Some(u32::from_le_bytes(bytes))),
                    Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => self.input = None,
                    Err(err) => return Err(IoError::at("reading", path)(err).into()),
                }
            }
            let Some(path) = self.parts.get(self.next_part) else { return Ok(None) };
            self.next_part += 1;
            let file = File::open(path).map_err(IoError::at("reading", path))?;
            self.input = Some((BufReader::with_capacity(1 << 16, file), path));
        }
    }
}

/// Calls `each` with every row's length and its runs of documents, in order,
/// without reading its tokens.
pub fn for_each_layout(
    parts: &SplitParts,
    mut each: impl FnMut(u32, &[(u32, u32)]) -> Result<(), WriteError>,
) -> Result<(), WriteError> {
    let mut documents = Vec::new();
    for unit in parts.units {
        let pieces = unit_pieces(unit.pieces.as_deref())?;
        let (mut start, mut next_piece) = (0u64, 0usize);
        for_each_length(std::slice::from_ref(&unit.lengths), |length| {
            let end = start + u64::from(length);
            documents.clear();
            while let Some(&(piece_start, piece_length)) = pieces.get(next_piece).filter(|(at, _)| *at < end) {
                documents.push(((piece_start - start) as u32, piece_length));
                next_piece += 1;
            }
            start = end;
            each(length, &documents)
        })?;
    }
    Ok(())
}

/// A unit's document pieces, (start in tokens from the unit's first, length).
fn unit_pieces(path: Option<&std::path::Path>) -> Result<Vec<(u64, u32)>, WriteError> {
    let mut pieces = Vec::new();
    if let Some(path) = path {
        for_each_record::<12>(&[path.to_path_buf()], |record| {
            let start = u64::from_le_bytes(record[..8].try_into().unwrap_or_default());
            pieces.push((start, u32::from_le_bytes(record[8..].try_into().unwrap_or_default())));
            Ok(())
        })?;
    }
    Ok(pieces)
}

fn decode(bytes: &[u8], token_type: TokenType, out: &mut Vec<u32>) {
    match token_type {
        TokenType::Uint16 => out.extend(bytes.chunks_exact(2).map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))),
        TokenType::Int32 | TokenType::Uint32 => {
            out.extend(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        }
    }
}

/// Ids as little-endian `u16` (`wide` false) or `u32`, appended to `out`.
pub fn encode(tokens: &[u32], wide: bool, out: &mut Vec<u8>) {
    if wide {
        tokens.iter().for_each(|id| out.extend_from_slice(&id.to_le_bytes()));
    } else {
        tokens.iter().for_each(|&id| out.extend_from_slice(&(id as u16).to_le_bytes()));
    }
}
