//! The formats an entry holds and, for each, the line of Python that opens one split
//! with its trainer's own reader, its arguments taken from the manifest (`ferry
//! inspect` prints them; `ferry.load(NAME, format=...)` runs the same readers).

use std::path::Path;

use serde::Serialize;

use crate::cache::manifest::Manifest;
use crate::spec::{Format, PackMode};

/// One format of an entry and how a trainer opens it.
#[derive(Debug, Clone, Serialize)]
pub struct Reader {
    /// The name `output.formats` gives it.
    pub format: String,
    /// Python that opens the split with the trainer's reader.
    pub python: String,
}

/// The formats the entry at `entry` holds (its manifest's), each with its reader for `split`.
pub fn readers(manifest: &Manifest, entry: &Path, split: &str) -> Vec<Reader> {
    let listed = manifest.spec.pointer("/output/formats").cloned().unwrap_or_default();
    let mut formats: Vec<Format> = serde_json::from_value(listed).unwrap_or_default();
    formats.insert(0, Format::Hf);
    let at = |relative: String| entry.join(relative).display().to_string();
    let seq_len = manifest.packing.as_ref().map_or(0, |packing| packing.seq_len);
    let tokenizer = &manifest.tokenizer;
    let narrow = tokenizer.vocab_size <= 1 << 16;
    let padded = manifest.packing.as_ref().is_some_and(|packing| packing.pack == PackMode::BestFit);
    formats
        .into_iter()
        .map(|format| {
            let python = match format {
                Format::Hf => format!("datasets.load_from_disk({:?})[{split:?}]", at(String::new())),
                Format::Megatron if manifest.mixture.is_some() => format!(
                    "BlendedMegatronDatasetBuilder(..., config=GPTDatasetConfig(blend=get_blend_from_list(ARGS), ...)) \
                     with ARGS from `ferry inspect {} --megatron-args --split {split}`",
                    manifest.name
                ),
                Format::Megatron => format!("IndexedDataset({:?})", at(format!("megatron/{split}_text_document"))),
                Format::Flat => {
                    format!("numpy.memmap({:?}, dtype={:?}, mode=\"r\")", at(format!("flat/{split}.bin")), {
                        manifest.spec.pointer("/output/token_type").and_then(|t| t.as_str()).unwrap_or("int32")
                    })
                }
                Format::Nanotron => format!(
                    "DatatroveFolderDataset({:?}, seq_len={}, token_size={}, recursive=False, return_positions=True)",
                    at(format!("nanotron/{split}")),
                    seq_len.saturating_sub(1),
                    if narrow { 2 } else { 4 }
                ),
                Format::Olmo => format!(
                    "NumpyFSLDataset({:?}, sequence_length={seq_len}, pad_token_id={}, eos_token_id={}, vocab_size={}, \
                     dtype=numpy.{}, generate_doc_lengths=True{})",
                    at(format!("olmo/{split}.npy")),
                    tokenizer.pad_id.or(tokenizer.eos_id).unwrap_or(0),
                    tokenizer.eos_id.unwrap_or(0),
                    tokenizer.vocab_size,
                    if narrow { "uint16" } else { "uint32" },
                    if padded {
                        format!(", label_mask_paths=[{:?}]", at(format!("olmo/{split}.mask.npy")))
                    } else {
                        String::new()
                    }
                ),
                Format::Litdata => format!(
                    "litdata.StreamingDataset({:?}, item_loader=litdata.TokensLoader(block_size={seq_len}))",
                    at(format!("litdata/{split}"))
                ),
                Format::Mds => format!("streaming.StreamingDataset(local={:?})", at(format!("mds/{split}"))),
                Format::ModdedNanogpt => format!("train_files = {:?}", at(format!("modded_nanogpt/{split}_*.bin"))),
            };
            Reader { format: format_name(format), python }
        })
        .collect()
}

/// The name a spec gives a format.
fn format_name(format: Format) -> String {
    serde_json::to_value(format).ok().and_then(|value| value.as_str().map(str::to_string)).unwrap_or_default()
}
