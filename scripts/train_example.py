"""A minimal trainer loop over a dataset staged by ferry.

Loads `$SLURM_TMPDIR/ferry/by-name/<name>` with `datasets.load_from_disk`,
iterates over the training split in batches as a trainer would, and reports which
files `datasets` read. Exits non-zero if any of them lies outside `$SLURM_TMPDIR`
(the point of staging is to read node-local copies).
"""

import argparse
import json
import os
import sys

import datasets


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-name", help="entry name under $SLURM_TMPDIR/ferry/by-name")
    parser.add_argument("--data", help="or a path to load directly")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    tmpdir = os.environ.get("SLURM_TMPDIR")
    path = args.data or os.path.join(tmpdir or ".", "ferry", "by-name", args.data_name)

    dataset = datasets.load_from_disk(path)
    train = dataset["train"].with_format("numpy")
    rows = tokens = 0
    for batch in train.iter(batch_size=args.batch_size):
        ids = batch["input_ids"]
        rows += len(ids)
        tokens += sum(len(row) for row in ids)
    files = [os.path.realpath(f["filename"]) for f in dataset["train"].cache_files]
    local = tmpdir is not None and all(f.startswith(os.path.realpath(tmpdir) + os.sep) for f in files)
    print(json.dumps({"trainer": "ok" if local else "not-local", "rows": rows, "tokens": tokens,
                      "files": files, "slurm_tmpdir": tmpdir, "all_files_in_slurm_tmpdir": local}))
    if not local:
        sys.exit("the trainer read files outside $SLURM_TMPDIR: staging did not happen")


if __name__ == "__main__":
    main()
