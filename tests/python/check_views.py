"""A reference for views, independent of ferry's code: reads a token store's documents
with numpy (Megatron's document-level .bin/.idx, parsed here by hand), computes what a
view's rows must be, and compares with the view as `datasets.load_from_disk` reads it.

--check concat STORE VIEW    rows are each shard's documents end to end, cut every
                             seq_len (the shard's remainder dropped); position_ids restart
                             at 0 at each row's start and where a document starts in it;
                             flat/<split>.documents.npy (if written) holds those pieces.
--check best_fit STORE VIEW  every row is seq_len long; padding (pad_id) is at the end,
                             masked 0 and labelled -100; the pieces between position resets
                             are whole documents, or aligned seq_len slices of documents
                             longer than seq_len, each exactly once; every token is kept;
                             the manifest's fill and split count are these rows'.
--check shuffled PLAIN VIEW  VIEW's rows are a reordering of PLAIN's rows.

Prints one JSON line of what it counted.
"""

import argparse
import collections
import json
import os
import struct
import sys

import numpy as np


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def manifest(entry):
    return json.load(open(os.path.join(entry, "manifest.json")))


def store_documents(store):
    """{split: [[documents of shard 0], [documents of shard 1], ...]} as int64 arrays."""
    record = manifest(store)
    if record.get("kind") != "tokens":
        fail(f"{store} is not a token store")
    dtype = {"uint16": "<u2", "int32": "<i4"}[record["documents"]["dtype"]]
    result = {}
    for split, split_record in record["splits"].items():
        shards = []
        for bin_path in split_record["data_files"]:
            index = open(os.path.join(store, bin_path[: -len(".bin")] + ".idx"), "rb").read()
            if index[:9] != b"MMIDIDX\x00\x00" or struct.unpack("<Q", index[9:17])[0] != 1:
                fail(f"{bin_path}: not a Megatron index, version 1")
            sequences, documents = struct.unpack("<QQ", index[18:34])
            if documents != sequences + 1:
                fail(f"{bin_path}: {documents} documents for {sequences} sequences")
            lengths = np.frombuffer(index, dtype="<i4", count=sequences, offset=34).astype(np.int64)
            tokens = np.fromfile(os.path.join(store, bin_path), dtype=dtype).astype(np.int64)
            starts = np.concatenate([[0], np.cumsum(lengths)])
            if starts[-1] != len(tokens):
                fail(f"{bin_path}: lengths add up to {starts[-1]}, the file holds {len(tokens)} tokens")
            shards.append([tokens[starts[i] : starts[i + 1]] for i in range(sequences)])
        result[split] = shards
    return result


def view_rows(view):
    import datasets

    loaded = datasets.load_from_disk(view)
    return {split: loaded[split] for split in loaded}


def segments(positions):
    """Where a new segment starts: every place position_ids is 0."""
    return [i for i, p in enumerate(positions) if p == 0]


def check_concat(store, view):
    seq_len = manifest(view)["spec"]["sequence"]["seq_len"]
    report = {}
    for split, dataset in view_rows(view).items():
        expected_rows, expected_positions, expected_pieces = [], [], []
        for shard in store_documents(store)[split]:
            joined = np.concatenate(shard) if shard else np.zeros(0, dtype=np.int64)
            document_starts = set(np.cumsum([0] + [len(d) for d in shard])[:-1].tolist())
            for row in range(len(joined) // seq_len):
                start = row * seq_len
                expected_rows.append(joined[start : start + seq_len].tolist())
                positions, position = [], 0
                for i in range(seq_len):
                    if i > 0 and start + i in document_starts:
                        position = 0
                    positions.append(position)
                    position += 1
                expected_positions.append(positions)
        rows = [list(r) for r in dataset["input_ids"]]
        if rows != expected_rows:
            fail(f"{split}: {len(rows)} rows differ from the {len(expected_rows)} the reference cuts")
        positions = [list(p) for p in dataset["position_ids"]]
        if positions != expected_positions:
            bad = next(i for i, (a, b) in enumerate(zip(positions, expected_positions)) if a != b)
            fail(f"{split}: position_ids of row {bad} are {positions[bad][:20]}..., the reference {expected_positions[bad][:20]}...")
        base = 0
        for row in expected_positions:
            starts = segments(row) + [len(row)]
            expected_pieces.extend([base + a, base + b] for a, b in zip(starts, starts[1:]))
            base += len(row)
        check_flat_documents(view, split, expected_pieces)
        report[split] = {"rows": len(rows), "resets": sum(len(segments(p)) for p in positions)}
    return report


def check_flat_documents(view, split, expected_pieces):
    path = os.path.join(view, "flat", f"{split}.documents.npy")
    if not os.path.exists(path):
        return
    pieces = np.load(path)
    if pieces.dtype != np.uint64 or pieces.shape != (len(expected_pieces), 2):
        fail(f"{path}: {pieces.dtype} {pieces.shape}, expected uint64 ({len(expected_pieces)}, 2)")
    if pieces.tolist() != expected_pieces:
        fail(f"{path}: document pieces differ from the rows' segments")


def check_best_fit(store, view):
    record = manifest(view)
    seq_len = record["spec"]["sequence"]["seq_len"]
    pad_id = record["packing"]["pad_id"]
    report = {}
    content_total = padded_total = 0
    for split, dataset in view_rows(view).items():
        documents = [d for shard in store_documents(store)[split] for d in shard if len(d) > 0]
        allowed = collections.Counter()
        for document in documents:
            if len(document) <= seq_len:
                allowed[tuple(document.tolist())] += 1
            else:
                for start in range(0, len(document), seq_len):
                    allowed[tuple(document[start : start + seq_len].tolist())] += 1
        found = collections.Counter()
        expected_pieces, base = [], 0
        for index, row in enumerate(dataset):
            ids, mask, labels, positions = row["input_ids"], row["attention_mask"], row["labels"], row["position_ids"]
            if len(ids) != seq_len:
                fail(f"{split}: row {index} has {len(ids)} tokens, not {seq_len}")
            content = sum(mask)
            if list(mask) != [1] * content + [0] * (seq_len - content):
                fail(f"{split}: row {index}: the mask is not ones then zeros")
            padding = ids[content:]
            if any(t != pad_id for t in padding) or any(l != -100 for l in labels[content:]):
                fail(f"{split}: row {index}: padding is not pad_id {pad_id} labelled -100")
            if list(labels[:content]) != list(ids[:content]):
                fail(f"{split}: row {index}: labels differ from the ids before the padding")
            starts = [s for s in segments(positions) if s < content] + [content]
            if content < seq_len and positions[content] != 0:
                fail(f"{split}: row {index}: positions do not restart at the padding")
            for a, b in zip(starts, starts[1:]):
                found[tuple(ids[a:b])] += 1
                expected_pieces.append([base + a, base + b])
            base += seq_len
            content_total += content
            padded_total += seq_len
        if found != allowed:
            fail(f"{split}: {sum(found.values())} pieces in rows, {sum(allowed.values())} whole documents and "
                 f"pieces of long ones expected; {len(found - allowed)} unexpected, {len(allowed - found)} missing")
        check_flat_documents(view, split, expected_pieces)
        split_count = sum(1 for d in documents if len(d) > seq_len)
        report[split] = {"rows": len(dataset), "documents": len(documents), "split": split_count}
    fill = content_total / padded_total
    if abs(fill - record["packing"]["fill"]) > 1e-9:
        fail(f"fill {fill} differs from the manifest's {record['packing']['fill']}")
    if sum(r["split"] for r in report.values()) != record["packing"]["documents_split"]:
        fail(f"documents split: manifest {record['packing']['documents_split']}, rows {report}")
    return {"splits": report, "fill": fill}


def check_shuffled(plain, view):
    report = {}
    shuffled_rows = view_rows(view)
    for split, dataset in view_rows(plain).items():
        before = [tuple(r) for r in dataset["input_ids"]]
        after = [tuple(r) for r in shuffled_rows[split]["input_ids"]]
        if collections.Counter(before) != collections.Counter(after):
            fail(f"{split}: the shuffled rows are not the unshuffled ones")
        if len(before) > 3 and before == after:
            fail(f"{split}: the rows kept their order")
        report[split] = {"rows": len(after), "in_place": sum(a == b for a, b in zip(before, after))}
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", choices=["concat", "best_fit", "shuffled"], required=True)
    parser.add_argument("first", help="the token store (concat, best_fit) or the unshuffled view")
    parser.add_argument("view")
    args = parser.parse_args()
    check = {"concat": check_concat, "best_fit": check_best_fit, "shuffled": check_shuffled}[args.check]
    print(json.dumps({"check": args.check, "result": check(args.first, args.view)}))


if __name__ == "__main__":
    main()
