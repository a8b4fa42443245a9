"""Checks a staged entry's trainer formats with each trainer's own loader, against its
Arrow rows (read with pyarrow): every token, and every document boundary the loader
reports.

--check nanotron:       `nanotron/<split>/` through datatrove's `DatatroveFolderDataset`
                        (nanotron's loader) with `seq_len = row length - 1`: sample i is
                        Arrow row i, and its `positions` restart where the row's
                        `position_ids` do (where the view has them), else at each
                        document end the index records.
--check olmo:           `olmo/<split>.npy` through OLMo-core's `NumpyFSLDataset` with
                        `sequence_length = row length`: instance i is Arrow row i, its
                        `doc_lens` are the row's documents (cut after each EOS), and its
                        `label_mask` (with best_fit) is the row's attention mask.
--check litdata:        `litdata/<split>/` through litdata's `StreamingDataset` with
                        `TokensLoader(block_size = row length)` (LitGPT's loader): block i
                        is Arrow row i, in the view's token type.
--check mds:            `mds/<split>/` through mosaicml-streaming's `StreamingDataset`
                        (llm-foundry's `StreamingTextDataset` reads its `tokens`
                        column): sample i's tokens are Arrow row i, in the view's type.
--check modded_nanogpt: `modded_nanogpt/<split>_*.bin` read as modded-nanogpt's
                        `_load_data_shard` does, from the published layout (a 256 x int32
                        header: 20240520, 1, the token count; then uint16 tokens): the
                        shards' tokens are the Arrow rows end to end.
Prints one JSON line with what it checked.
"""

import argparse
import glob
import json
import os
import sys

import numpy as np


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def arrow_rows(entry, split, column="input_ids"):
    import pyarrow as pa

    rows = []
    for path in sorted(glob.glob(os.path.join(entry, split, "data-*.arrow"))):
        with pa.OSFile(path) as source:
            table = pa.ipc.open_stream(source).read_all()
        if column not in table.column_names:
            return None
        rows.extend(table.column(column).to_pylist())
    return rows


def splits_of(entry):
    return json.load(open(os.path.join(entry, "dataset_dict.json")))["splits"]


def row_length(rows):
    lengths = {len(row) for row in rows}
    if len(lengths) != 1:
        fail(f"rows of several lengths {sorted(lengths)[:5]}: the check needs one row length")
    return lengths.pop()


def check_nanotron(entry, manifest):
    from datatrove.utils.dataset import DatatroveFolderDataset

    vocab = manifest["tokenizer"]["vocab_size"]
    token_size = 2 if vocab <= 65536 else 4
    report = {}
    for split in splits_of(entry):
        rows = arrow_rows(entry, split)
        folder = os.path.join(entry, "nanotron", split)
        metadata = open(glob.glob(os.path.join(folder, "*.ds.metadata"))[0]).read()
        name, size = metadata.splitlines()[0].split("|")
        if int(size) != token_size:
            fail(f"{split}: the metadata says {size}-byte tokens, the vocabulary of {vocab} needs {token_size}")
        length = row_length(rows)
        dataset = DatatroveFolderDataset(folder, seq_len=length - 1, token_size=token_size, recursive=False, return_positions=True)
        if len(dataset) != len(rows):
            fail(f"{split}: datatrove has {len(dataset)} samples, Arrow {len(rows)} rows")
        positions = arrow_rows(entry, split, "position_ids")
        for index, row in enumerate(rows):
            sample = dataset[index]
            if sample["input_ids"].tolist() != row:
                fail(f"{split}: sample {index} differs from Arrow row {index}")
            if positions is not None and sample["positions"].tolist() != positions[index]:
                fail(f"{split}: sample {index} positions {sample['positions'].tolist()[:12]} differ from position_ids {positions[index][:12]}")
        report[split] = {"samples": len(dataset), "tokenizer": name, "positions_checked": positions is not None}
    return report


def document_lengths(row, eos):
    """A row's documents as OLMo counts them: cut after each EOS, the tail a document too."""
    lengths, start = [], 0
    for index, token in enumerate(row):
        if token == eos:
            lengths.append(index + 1 - start)
            start = index + 1
    if start < len(row):
        lengths.append(len(row) - start)
    return lengths


def check_olmo(entry, manifest):
    from olmo_core.data import NumpyFSLDataset

    tokenizer = manifest["tokenizer"]
    vocab, eos = tokenizer["vocab_size"], tokenizer["eos_id"]
    dtype = np.uint16 if vocab <= 65536 else np.uint32
    pad = tokenizer.get("pad_id") or eos
    report = {}
    for split in splits_of(entry):
        rows = arrow_rows(entry, split)
        masks = arrow_rows(entry, split, "attention_mask")
        path = os.path.join(entry, "olmo", f"{split}.npy")
        mask_path = os.path.join(entry, "olmo", f"{split}.mask.npy")
        masked = os.path.exists(mask_path)
        dataset = NumpyFSLDataset(
            path,
            sequence_length=row_length(rows),
            pad_token_id=pad,
            eos_token_id=eos,
            vocab_size=vocab,
            dtype=dtype,
            generate_doc_lengths=True,
            label_mask_paths=[mask_path] if masked else None,
        )
        dataset.work_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"olmo-work-{os.getpid()}")
        dataset.prepare()
        if len(dataset) != len(rows):
            fail(f"{split}: OLMo has {len(dataset)} instances, Arrow {len(rows)} rows")
        for index, row in enumerate(rows):
            item = dataset[index]
            if item["input_ids"].tolist() != row:
                fail(f"{split}: instance {index} differs from Arrow row {index}")
            if item["doc_lens"].tolist() != document_lengths(row, eos):
                fail(f"{split}: instance {index} doc_lens {item['doc_lens'].tolist()} are not the row's documents")
            if masked and [int(v) for v in item["label_mask"].tolist()] != masks[index]:
                fail(f"{split}: instance {index} label_mask differs from the row's attention_mask")
        report[split] = {"instances": len(dataset), "label_mask": masked}
    return report


def check_litdata(entry, manifest):
    from litdata import StreamingDataset, TokensLoader

    dtype = manifest["spec"]["output"]["token_type"]
    report = {}
    for split in splits_of(entry):
        rows = arrow_rows(entry, split)
        folder = os.path.join(entry, "litdata", split)
        check_litdata_headers(folder)
        dataset = StreamingDataset(input_dir=folder, item_loader=TokensLoader(block_size=row_length(rows)), shuffle=False)
        if len(dataset) != len(rows):
            fail(f"{split}: litdata has {len(dataset)} blocks, Arrow {len(rows)} rows")
        for index, row in enumerate(rows):
            block = dataset[index]
            if str(block.dtype).removeprefix("torch.") != dtype:
                fail(f"{split}: block {index} is {block.dtype}, the view's token type is {dtype}")
            if [int(token) for token in block.tolist()] != row:
                fail(f"{split}: block {index} differs from Arrow row {index}")
        report[split] = {"blocks": len(dataset)}
    return report


def check_litdata_headers(folder):
    """What TokensLoader skips but litdata's other loaders read: each chunk's item
    count (the index's chunk_size) and its items' absolute offsets, ending at its size."""
    index = json.load(open(os.path.join(folder, "index.json")))
    for chunk in index["chunks"]:
        path = os.path.join(folder, chunk["filename"])
        count = int(np.fromfile(path, dtype="<u4", count=1)[0])
        offsets = np.fromfile(path, dtype="<u4", count=count + 2)[1:]
        size = os.path.getsize(path)
        if count != chunk["chunk_size"] or size != chunk["chunk_bytes"]:
            fail(f"{path}: {count} items of {size} bytes, the index says {chunk['chunk_size']} of {chunk['chunk_bytes']}")
        if offsets[0] != 4 * (count + 2) or offsets[-1] != size or np.any(np.diff(offsets.astype(np.int64)) < 0):
            fail(f"{path}: item offsets {offsets[:4]}... do not run from the header's end to the file's")


def check_mds(entry, manifest):
    from streaming import StreamingDataset

    dtype = manifest["spec"]["output"]["token_type"]
    report = {}
    for split in splits_of(entry):
        rows = arrow_rows(entry, split)
        dataset = StreamingDataset(local=os.path.join(entry, "mds", split), shuffle=False, batch_size=1)
        if len(dataset) != len(rows):
            fail(f"{split}: MDS has {len(dataset)} samples, Arrow {len(rows)} rows")
        for index, row in enumerate(rows):
            tokens = dataset[index]["tokens"]
            if not isinstance(tokens, np.ndarray) or tokens.dtype != np.dtype(dtype):
                fail(f"{split}: sample {index} tokens are {type(tokens).__name__} {getattr(tokens, 'dtype', '')}, not {dtype}")
            # As llm-foundry's StreamingTextDataset takes an ndarray sample.
            if tokens.astype(np.int64).tolist() != row:
                fail(f"{split}: sample {index} differs from Arrow row {index}")
        report[split] = {"samples": len(dataset)}
    return report


def load_modded_shard(path):
    """modded-nanogpt's `_load_data_shard`, from its published format."""
    header = np.fromfile(path, dtype="<i4", count=256)
    if header[0] != 20240520 or header[1] != 1:
        fail(f"{path}: header {header[:3]} is not magic 20240520, version 1")
    if os.path.getsize(path) != 256 * 4 + 2 * int(header[2]):
        fail(f"{path}: {os.path.getsize(path)} bytes, the header says {header[2]} uint16 tokens after 1024 bytes")
    if any(header[3:]):
        fail(f"{path}: header slots past the third are not zero")
    return np.fromfile(path, dtype="<u2", offset=256 * 4)


def check_modded_nanogpt(entry, manifest):
    report = {}
    for split in splits_of(entry):
        rows = arrow_rows(entry, split)
        shards = sorted(glob.glob(os.path.join(entry, "modded_nanogpt", f"{split}_*.bin")))
        if not shards:
            fail(f"{split}: no modded_nanogpt shards")
        tokens = np.concatenate([load_modded_shard(path) for path in shards])
        expected = np.array([token for row in rows for token in row], dtype=np.int64)
        if not np.array_equal(tokens.astype(np.int64), expected):
            fail(f"{split}: the shards' tokens differ from the Arrow rows end to end")
        report[split] = {"shards": len(shards), "tokens": int(len(tokens))}
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--entry", required=True)
    parser.add_argument("--check", choices=["nanotron", "olmo", "litdata", "mds", "modded_nanogpt"], required=True)
    args = parser.parse_args()
    manifest = json.load(open(os.path.join(args.entry, "manifest.json")))
    check = {
        "nanotron": check_nanotron,
        "olmo": check_olmo,
        "litdata": check_litdata,
        "mds": check_mds,
        "modded_nanogpt": check_modded_nanogpt,
    }[args.check]
    print(json.dumps({"check": args.check, "splits": check(args.entry, manifest)}))


if __name__ == "__main__":
    main()
