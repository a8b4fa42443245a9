"""datatrove's tokenization pipeline (what Hugging Face used for FineWeb), timed on
the same shards and cores as ferry: `JsonlReader` -> `DocumentTokenizer`, one
task per shard, WORKERS processes. Prints one JSON line.

Usage: bench_datatrove.py TOKENIZER_JSON EOS_TOKEN WORKERS OUT_DIR SHARD_DIR
"""

import glob
import json
import os
import sys
import time

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
from tokenizers import Tokenizer


def main():
    tokenizer, eos, workers, out, shards = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    tasks = len(glob.glob(os.path.join(shards, "*.jsonl.zst")))
    pipeline = [
        JsonlReader(shards, glob_pattern="*.jsonl.zst", compression="zstd"),
        DocumentTokenizer(
            os.path.join(out, "tokens"),
            tokenizer_name_or_path=tokenizer,
            eos_token=eos,
            shuffle_documents=False,
        ),
    ]
    started = time.time()
    LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers, logging_dir=os.path.join(out, "logs")).run()
    seconds = time.time() - started
    # Token files hold ids as uint16 below 65536 entries, else uint32.
    token_bytes = 2 if Tokenizer.from_file(tokenizer).get_vocab_size() < 65536 else 4
    files = glob.glob(os.path.join(out, "tokens", "**", "*.ds"), recursive=True)
    tokens = sum(os.path.getsize(f) for f in files) // token_bytes
    print(json.dumps({"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds}))


if __name__ == "__main__":
    main()
