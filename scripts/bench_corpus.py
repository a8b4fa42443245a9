"""Builds a Pile-style corpus of real text from extracted Debian packages.

Usage: bench_corpus.py OUT_DIR TARGET_MB SOURCE_DIR...

Every text file becomes one document (large files are cut at line boundaries
into ~64 kB documents), labelled by where it comes from, shuffled with a fixed
seed and written as `train-NN.jsonl.zst` shards with
{"text": ..., "meta": {"pile_set_name": ...}} lines, until TARGET_MB of text.
"""

import json
import os
import random
import sys

import zstandard

CODE = {".c", ".h", ".py", ".pl", ".pm", ".sh", ".S", ".rs", ".awk", ".y", ".l"}
PROSE = {".rst", ".txt", ".html", ".pod", ".info", ".dict", ""}
SHARDS = 16


def label(path):
    if "linux" in path:
        return "kernel-docs" if "/Documentation/" in path else "kernel-code"
    if "gcide" in path:
        return "dictionary"
    if "python" in path:
        return "python-docs"
    return "perl-docs"


def documents(root):
    for directory, subdirectories, files in os.walk(root):
        # In name order, not the file system's: the same packages give the same corpus.
        subdirectories.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            ext = os.path.splitext(name)[1]
            if ext not in CODE and ext not in PROSE or os.path.islink(path):
                continue
            try:
                text = open(path, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            if len(text) < 200:
                continue
            kind = label(path)
            chunk, size = [], 0
            for line in text.splitlines(keepends=True):
                chunk.append(line)
                size += len(line)
                if size >= 64_000:
                    yield kind, "".join(chunk)
                    chunk, size = [], 0
            if size >= 200:
                yield kind, "".join(chunk)


def main():
    out, target_mb, roots = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    docs = [d for root in roots for d in documents(root)]
    random.Random(1234).shuffle(docs)
    os.makedirs(out, exist_ok=True)
    target = int(target_mb * 1e6)
    total, kept = 0, []
    for doc in docs:
        if total >= target:
            break
        kept.append(doc)
        total += len(doc[1].encode("utf-8"))
    if total < target:
        sys.exit(f"only {total / 1e6:.0f} MB of text found, {target_mb} MB wanted")
    per_shard = (len(kept) + SHARDS - 1) // SHARDS
    for shard in range(SHARDS):
        with open(os.path.join(out, f"train-{shard:02}.jsonl.zst"), "wb") as f:
            with zstandard.ZstdCompressor(level=3).stream_writer(f) as z:
                for kind, text in kept[shard * per_shard : (shard + 1) * per_shard]:
                    z.write((json.dumps({"text": text, "meta": {"pile_set_name": kind}}) + "\n").encode())
    counts = {}
    for kind, text in kept:
        counts[kind] = counts.get(kind, 0) + len(text.encode("utf-8"))
    print(json.dumps({"documents": len(kept), "text_bytes": total, "by_set": counts}))


if __name__ == "__main__":
    main()
