"""The Hugging Face recipe ferry replaces, timed on the same shards and cores:
`load_dataset("json")`, `map(tokenize, batched=True, num_proc=N)`, then run_clm's
`group_texts`. Prints one JSON line.

Usage: bench_hf_recipe.py VOCAB MERGES SEQ_LEN NUM_PROC CACHE_DIR SHARD...
   or: bench_hf_recipe.py TOKENIZER_JSON EOS_TOKEN SEQ_LEN NUM_PROC CACHE_DIR SHARD...
"""

import json
import sys
import time

import datasets
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

vocab, merges, seq_len, num_proc, cache_dir, shards = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6:])
datasets.disable_progress_bars()

if vocab.endswith("tokenizer.json"):
    tokenizer = Tokenizer.from_file(vocab)
    EOS = tokenizer.token_to_id(merges)
else:
    tokenizer = Tokenizer(models.BPE.from_file(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    EOS = 50256


def tokenize(batch):
    return {"input_ids": [e.ids + [EOS] for e in tokenizer.encode_batch(batch["text"])]}


def group_texts(batch):
    concatenated = [t for ids in batch["input_ids"] for t in ids]
    total = len(concatenated) // seq_len * seq_len
    return {"input_ids": [concatenated[i : i + seq_len] for i in range(0, total, seq_len)]}


started = time.time()
raw = datasets.load_dataset("json", data_files=shards, split="train", cache_dir=cache_dir)
loaded = time.time()
tokenized = raw.map(tokenize, batched=True, num_proc=num_proc, remove_columns=raw.column_names)
mapped = time.time()
tokens = sum(len(ids) for ids in tokenized.data.column("input_ids").to_pylist())
grouped = tokenized.map(group_texts, batched=True, num_proc=num_proc)
finished = time.time()
print(json.dumps({
    "tokens": tokens,
    "rows": grouped.num_rows,
    "load_seconds": loaded - started,
    "map_seconds": mapped - loaded,
    "group_seconds": finished - mapped,
    "total_seconds": finished - started - (mapped - loaded) + (mapped - loaded),
    "tokens_per_second": tokens / (finished - started),
    "map_tokens_per_second": tokens / (mapped - loaded),
}))
