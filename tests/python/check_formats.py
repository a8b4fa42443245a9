"""Checks an entry's extra formats against its Arrow files, with the readers trainers use.

--check flat:     `flat/<split>.bin` through numpy.memmap and `<split>.offsets.npy` through
                  numpy.load equal the `input_ids` of `datasets.load_from_disk(entry)`.
--check megatron: `megatron/<split>_text_document` through megatron-core's
                  `IndexedDataset(prefix)` has one sequence per Arrow row with the same
                  ids and dtype (the Arrow files are read with pyarrow); where the view
                  keeps documents apart (position_ids, best_fit), one sequence per run of
                  one document inside a row (where position_ids restart), padding in none.
--check store:    a token store's `tokens/<split>/<shard>` through `IndexedDataset(prefix)`:
                  one sequence per document, in the store's dtype, the documents' tokens
                  adding up to the manifest's.
The dtype expected is the entry's declared `output.token_type`. Prints one JSON
line with what it checked, per entry.
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


def hf_rows(entry):
    import datasets

    loaded = datasets.load_from_disk(entry)
    return {split: [list(row) for row in loaded[split]["input_ids"]] for split in loaded}


def arrow_rows(entry, column="input_ids"):
    import pyarrow as pa

    splits = json.load(open(os.path.join(entry, "dataset_dict.json")))["splits"]
    result = {}
    for split in splits:
        rows = []
        for path in sorted(glob.glob(os.path.join(entry, split, "data-*.arrow"))):
            with pa.OSFile(path) as source:
                table = pa.ipc.open_stream(source).read_all()
            rows.extend(table.column(column).to_pylist())
        result[split] = rows
    return result


def document_pieces(entry, split, rows):
    """Each run of one document inside a row: cut where position_ids restart, padding
    (attention_mask 0) left out."""
    positions = arrow_rows(entry, "position_ids")[split]
    sequence = json.load(open(os.path.join(entry, "manifest.json")))["spec"]["sequence"]
    masks = arrow_rows(entry, "attention_mask")[split] if sequence["attention_mask"] else [None] * len(rows)
    pieces = []
    for row, position, mask in zip(rows, positions, masks):
        content = sum(mask) if mask is not None else len(row)
        starts = [i for i, p in enumerate(position[:content]) if p == 0] + [content]
        pieces.extend(row[a:b] for a, b in zip(starts, starts[1:]))
    return pieces


def check_flat(entry, dtype):
    report = {}
    for split, rows in hf_rows(entry).items():
        meta = json.load(open(os.path.join(entry, "flat", f"{split}.json")))
        if meta["dtype"] != dtype:
            fail(f"{split}: flat dtype {meta['dtype']} is not {dtype}")
        tokens = np.memmap(os.path.join(entry, "flat", meta["data"]), dtype=np.dtype(meta["dtype"]).newbyteorder("<"), mode="r")
        offsets = np.load(os.path.join(entry, "flat", meta["offsets"]))
        expected = np.array([t for row in rows for t in row], dtype=np.int64)
        if len(tokens) != meta["tokens"] or len(tokens) != len(expected):
            fail(f"{split}: {len(tokens)} flat tokens, json says {meta['tokens']}, Arrow has {len(expected)}")
        if not np.array_equal(tokens.astype(np.int64), expected):
            fail(f"{split}: flat tokens differ from the concatenated input_ids")
        boundaries = np.cumsum([0] + [len(row) for row in rows]).astype(np.uint64)
        if offsets.dtype != np.uint64 or not np.array_equal(offsets, boundaries) or meta["rows"] != len(rows):
            fail(f"{split}: flat offsets {offsets[:5]}... differ from the row boundaries {boundaries[:5]}...")
        report[split] = {"rows": len(rows), "tokens": int(len(tokens))}
    return report


def check_megatron(entry, dtype):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    sequence = json.load(open(os.path.join(entry, "manifest.json")))["spec"]["sequence"]
    by_document = sequence["position_ids"] or sequence["pack"] == "best_fit"
    report = {}
    for split, rows in arrow_rows(entry).items():
        if by_document:
            rows = document_pieces(entry, split, rows)
        dataset = IndexedDataset(os.path.join(entry, "megatron", f"{split}_text_document"))
        if len(dataset) != len(rows):
            fail(f"{split}: IndexedDataset has {len(dataset)} sequences, Arrow has {len(rows)} rows")
        for index, row in enumerate(rows):
            sequence = dataset[index]
            if sequence.dtype != np.dtype(dtype):
                fail(f"{split}: sequence {index} has dtype {sequence.dtype}, not {dtype}")
            if sequence.tolist() != row:
                fail(f"{split}: sequence {index} differs from Arrow row {index}")
        documents = dataset.document_indices
        if not np.array_equal(documents, np.arange(len(rows) + 1)):
            fail(f"{split}: document indices {documents[:5]}... are not one document per row")
        report[split] = {"sequences": len(dataset), "tokens": int(dataset.sequence_lengths.sum())}
    return report


def check_store(entry, dtype):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    manifest = json.load(open(os.path.join(entry, "manifest.json")))
    report = {}
    for split, record in manifest["splits"].items():
        documents = tokens = 0
        for bin_path in record["data_files"]:
            dataset = IndexedDataset(os.path.join(entry, bin_path[: -len(".bin")]))
            documents += len(dataset)
            for index in range(len(dataset)):
                sequence = dataset[index]
                if sequence.dtype != np.dtype(dtype):
                    fail(f"{bin_path}: document {index} has dtype {sequence.dtype}, not {dtype}")
                tokens += len(sequence)
            if not np.array_equal(dataset.document_indices, np.arange(len(dataset) + 1)):
                fail(f"{bin_path}: not one document per sequence")
        if (documents, tokens) != (record["documents"], record["tokens"]):
            fail(f"{split}: {documents} documents of {tokens} tokens, the manifest says {record['documents']} of {record['tokens']}")
        report[split] = {"documents": documents, "tokens": tokens}
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--entry", action="append", required=True, help="repeat to check several entries")
    parser.add_argument("--check", choices=["flat", "megatron", "store"], required=True)
    args = parser.parse_args()
    check = {"flat": check_flat, "megatron": check_megatron, "store": check_store}[args.check]
    entries = {}
    for entry in args.entry:
        manifest = json.load(open(os.path.join(entry, "manifest.json")))
        # The declared token type, which both formats must keep (a token store's: its own).
        if args.check == "store":
            dtype = manifest["documents"]["dtype"]
        else:
            dtype = manifest["spec"]["output"]["token_type"]
        entries[entry] = {"dtype": dtype, "splits": check(entry, dtype)}
    print(json.dumps({"check": args.check, "entries": entries}))


if __name__ == "__main__":
    main()
