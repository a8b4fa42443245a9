//! A split's rows read back from its units' parts, in order, each with the runs of
//! documents inside it: what the trainer formats that re-encode tokens (another
//! dtype, a header, a mask) are written from.

use std::fs::File;
use std::io::{BufReader, Read};

use crate::cache::writer::WriteError;
use crate::errors::IoError;
use crate::spec::TokenType;

use super::SplitParts;
use super::parts::{for_each_length, for_each_record, token_size};

/// One row: its ids (padding included) and each run of one document in it, as
/// (start in the row, length); padding is in none.
pub struct PartRow<'a> {
    pub tokens: &'a [u32],
    pub documents: &'a [(u32, u32)],
}

/// Calls `each` with every row of the split. The parts must record document pieces
/// (`FormatsPlan::pieces`).
pub fn for_each_row(
    parts: &SplitParts,
    mut each: impl FnMut(PartRow) -> Result<(), WriteError>,
) -> Result<(), WriteError> {
    let size = token_size(parts.token_type) as usize;
    let (mut bytes, mut tokens, mut documents) = (Vec::new(), Vec::new(), Vec::new());
    for unit in parts.units {
        let pieces = unit_pieces(unit.pieces.as_deref())?;
        let path = &unit.tokens.0;
        let mut input = BufReader::with_capacity(1 << 20, File::open(path).map_err(IoError::at("reading", path))?);
        let (mut start, mut next_piece) = (0u64, 0usize);
        for_each_length(std::slice::from_ref(&unit.lengths), |length| {
            bytes.resize(length as usize * size, 0);
            input.read_exact(&mut bytes).map_err(IoError::at("reading", path))?;
            tokens.clear();
            decode(&bytes, parts.token_type, &mut tokens);
            let end = start + u64::from(length);
            documents.clear();
            while let Some(&(piece_start, piece_length)) = pieces.get(next_piece).filter(|(at, _)| *at < end) {
                documents.push(((piece_start - start) as u32, piece_length));
                next_piece += 1;
            }
            start = end;
            each(PartRow { tokens: &tokens, documents: &documents })
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
