"""Checks a ferry entry against an independent Python computation.

Loads the entry with `datasets.load_from_disk`, then recomputes every row from the
raw shards with Python `tokenizers` and run_clm's `group_texts` (per shard,
remainder dropped) and compares them exactly. Also checks the declared types and
the manifest's row and token counts. Prints one JSON line with what it checked.
"""

import argparse
import json
import sys

import datasets
import tokenizers
import zstandard
from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def load_tokenizer(args):
    if args.tokenizer_json:
        return Tokenizer.from_file(args.tokenizer_json)
    tokenizer = Tokenizer(models.BPE.from_file(args.vocab, args.merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    return tokenizer


def read_texts(path, sets, min_chars):
    with open(path, "rb") as f:
        raw = zstandard.ZstdDecompressor().stream_reader(f).read() if path.endswith(".zst") else f.read()
    for line in raw.decode("utf-8").split("\n"):
        if not line.strip():
            continue
        record = json.loads(line)
        if sets and record.get("meta", {}).get("pile_set_name") not in sets:
            continue
        text = record["text"]
        if len(text) < min_chars:
            continue
        yield text


def expected_rows(shards, tokenizer, args):
    rows = []
    for shard in shards:
        texts = list(read_texts(shard, args.sets, args.min_chars))
        encoded = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
        if args.eos is not None:
            encoded = [ids + [args.eos] for ids in encoded]
        if args.pack == "concat":
            # run_clm's group_texts over the whole shard.
            concatenated = [t for ids in encoded for t in ids]
            total = len(concatenated) // args.seq_len * args.seq_len
            rows.extend(concatenated[i : i + args.seq_len] for i in range(0, total, args.seq_len))
        elif args.pack == "truncate":
            rows.extend(ids[: args.seq_len] for ids in encoded if ids)
        else:
            rows.extend(ids for ids in encoded if ids)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--entry", required=True)
    parser.add_argument("--tokenizer-json")
    parser.add_argument("--vocab")
    parser.add_argument("--merges")
    parser.add_argument("--pack", default="concat")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--eos", type=int)
    parser.add_argument("--sets", nargs="*", default=[])
    parser.add_argument("--min-chars", type=int, default=0)
    parser.add_argument("--token-type", default="int32")
    parser.add_argument("--columns", nargs="*", default=["input_ids"])
    args = parser.parse_args()

    manifest = json.load(open(f"{args.entry}/manifest.json"))
    tokenizer = load_tokenizer(args)
    dataset = datasets.load_from_disk(args.entry)
    assert isinstance(dataset, datasets.DatasetDict), type(dataset)
    assert sorted(dataset.keys()) == sorted(manifest["splits"].keys()), (dataset.keys(), manifest["splits"].keys())
    report = {"datasets": datasets.__version__, "tokenizers": tokenizers.__version__, "splits": {}}
    for split, record in manifest["splits"].items():
        ds = dataset[split]
        assert ds.column_names == args.columns, (ds.column_names, args.columns)
        dtype = ds.features["input_ids"].feature.dtype
        assert dtype == args.token_type, (split, dtype, args.token_type)
        assert ds.num_rows == record["rows"], (split, ds.num_rows, record["rows"])
        actual = ds.data.column("input_ids").to_pylist()
        assert sum(len(r) for r in actual) == record["tokens"], (split, "tokens")
        if len(actual):
            # Row access through the normal API, as a trainer does.
            assert ds[0]["input_ids"] == actual[0]
        if "labels" in args.columns:
            assert ds.data.column("labels").to_pylist() == actual
        if "attention_mask" in args.columns:
            assert ds.features["attention_mask"].feature.dtype == "int8"
            assert all(all(v == 1 for v in r) for r in ds.data.column("attention_mask").to_pylist())
        shards = [i["path"] for i in record["inputs"]]
        expected = expected_rows(shards, tokenizer, args)
        if actual != expected:
            for index, (a, e) in enumerate(zip(actual, expected)):
                if a != e:
                    print(f"{split} row {index} differs:\n ferry  {a[:40]}\n python {e[:40]}", file=sys.stderr)
                    break
            sys.exit(f"{split}: {len(actual)} rows from ferry, {len(expected)} from Python; contents differ")
        report["splits"][split] = {"rows": ds.num_rows, "tokens": record["tokens"], "files": [f["filename"] for f in ds.cache_files]}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
