"""Checks an entry's extra formats against its Arrow files, with the readers trainers use.

--check flat:     `flat/<split>.bin` through numpy.memmap and `<split>.offsets.npy` through
                  numpy.load equal the `input_ids` of `datasets.load_from_disk(entry)`.
--check megatron: `megatron/<split>_text_document` through megatron-core's
                  `IndexedDataset(prefix)` has one sequence per Arrow row with the same
                  ids and dtype (the Arrow files are read with pyarrow).
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


def arrow_rows(entry):
    import pyarrow as pa

    splits = json.load(open(os.path.join(entry, "dataset_dict.json")))["splits"]
    result = {}
    for split in splits:
        rows = []
        for path in sorted(glob.glob(os.path.join(entry, split, "data-*.arrow"))):
            with pa.OSFile(path) as source:
                table = pa.ipc.open_stream(source).read_all()
            rows.extend(table.column("input_ids").to_pylist())
        result[split] = rows
    return result


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

    report = {}
    for split, rows in arrow_rows(entry).items():
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--entry", action="append", required=True, help="repeat to check several entries")
    parser.add_argument("--check", choices=["flat", "megatron"], required=True)
    args = parser.parse_args()
    check = check_flat if args.check == "flat" else check_megatron
    entries = {}
    for entry in args.entry:
        # The declared token type, which both formats must keep.
        dtype = json.load(open(os.path.join(entry, "manifest.json")))["spec"]["output"]["token_type"]
        entries[entry] = {"dtype": dtype, "splits": check(entry, dtype)}
    print(json.dumps({"check": args.check, "entries": entries}))


if __name__ == "__main__":
    main()
