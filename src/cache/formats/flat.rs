//! Flat token files for nanoGPT/OLMo-style trainers: `flat/<split>.bin` holds every
//! token of the split in row order (little-endian, the entry's dtype, no header,
//! for `np.memmap`); `flat/<split>.offsets.npy` holds the rows + 1 row boundaries
//! as uint64 token offsets (for `np.load`); where rows keep documents apart
//! (`position_ids`, `best_fit`), `flat/<split>.documents.npy` holds every run of one
//! document inside a row as a uint64 `[start, end)` pair of token offsets (padding
//! is in none); `flat/<split>.json` says which is which.

use std::path::Path;

use serde_json::json;

use crate::cache::layout::flat_file;
use crate::cache::manifest::WrittenFile;
use crate::cache::writer::WriteError;

use super::SplitParts;
use super::parts::for_each_length;
use crate::cache::hashed_file::HashedFile;
use crate::errors::IoError;

/// Writes the split's flat files. `shared` is a file with the same token bytes
/// (the Megatron `.bin`), hard-linked instead of copied again. Returns the `.bin`'s record.
pub fn write_split(
    entry_root: &Path,
    parts: &SplitParts,
    shared: Option<&WrittenFile>,
    files: &mut Vec<WrittenFile>,
) -> Result<WrittenFile, WriteError> {
    let (split, token_type) = (parts.split, parts.token_type);
    let (rows, tokens) = (parts.rows(), parts.tokens());
    let bin_relative = flat_file(split, ".bin");
    let bin_path = entry_root.join(&bin_relative);
    let bin = match shared {
        Some(shared) => super::link_same(entry_root, shared, bin_relative)?,
        None => parts.join_tokens(&bin_path, bin_relative)?,
    };
    files.push(bin.clone());
    let offsets_relative = flat_file(split, ".offsets.npy");
    let mut offsets = HashedFile::create(&entry_root.join(&offsets_relative))?;
    offsets.append(&npy_header("<u8", &format!("({},)", rows + 1)))?;
    offsets.append(&0u64.to_le_bytes())?;
    let mut offset = 0u64;
    for_each_length(&parts.lengths(), |length| {
        offset += length as u64;
        Ok(offsets.append(&offset.to_le_bytes())?)
    })?;
    files.push(offsets.finish(offsets_relative)?);
    let mut description = json!({
        "format": "ferry-flat",
        "version": 1,
        "dtype": token_type.dtype(),
        "byte_order": "little",
        "tokens": tokens,
        "rows": rows,
        "data": format!("{split}.bin"),
        "offsets": format!("{split}.offsets.npy"),
    });
    if let Some(pieces) = parts.pieces() {
        let documents_relative = flat_file(split, ".documents.npy");
        let mut documents = HashedFile::create(&entry_root.join(&documents_relative))?;
        documents.append(&npy_header("<u8", &format!("({pieces}, 2)")))?;
        parts.for_each_piece(|start, length| {
            documents.append(&start.to_le_bytes())?;
            Ok(documents.append(&(start + u64::from(length)).to_le_bytes())?)
        })?;
        files.push(documents.finish(documents_relative)?);
        description["documents"] = json!(format!("{split}.documents.npy"));
    }
    let json_relative = flat_file(split, ".json");
    let mut json_file = HashedFile::create(&entry_root.join(&json_relative))?;
    let mut text =
        serde_json::to_vec_pretty(&description).map_err(|err| IoError::at("writing", &bin_path)(err.into()))?;
    text.push(b'\n');
    json_file.append(&text)?;
    files.push(json_file.finish(json_relative)?);
    Ok(bin)
}

/// The header of a version 1.0 `.npy` file holding a C-order array of `shape`
/// (Python's tuple syntax): magic, version, header length, and the dict padded
/// with spaces so data starts 64-byte aligned.
fn npy_header(descr: &str, shape: &str) -> Vec<u8> {
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut header = b"\x93NUMPY\x01\x00".to_vec();
    header.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    header.extend_from_slice(dict.as_bytes());
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_names_the_shape() {
        let header = npy_header("<u8", "(12345,)");
        assert_eq!(header.len() % 64, 0);
        assert!(header.ends_with(b"\n"));
        let text = String::from_utf8_lossy(&header[10..]).into_owned();
        assert!(text.starts_with("{'descr': '<u8', 'fortran_order': False, 'shape': (12345,), }"), "{text}");
    }
}
