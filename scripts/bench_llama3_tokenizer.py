"""Writes a Llama-3-structured tokenizer.json from tiktoken's cl100k_base ranks.

Usage: bench_llama3_tokenizer.py RANKS_FILE OUT_JSON

The ranks file (`cl100k_base.tiktoken`, base64 token and rank per line) ships
inside the `tiktoken-rs` crate, so this works offline. Llama-3's vocabulary is
cl100k's 100k tokens plus 28k more, with the same split pattern; the result has
Llama-3's structure: a `Split` regex pre-tokenizer with Llama-3's pattern, then
`ByteLevel(use_regex=false)`, a BPE model with `ignore_merges`, and
`<|endoftext|>` as an added special token. Ferry, the Hugging Face recipe and
datatrove all load it.
"""

import base64
import json
import os
import sys

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
EOS = "<|endoftext|>"


def byte_to_unicode():
    """GPT-2's printable stand-in for every byte, as ByteLevel uses."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def split_in_two(token, rank, ranks):
    """The two parts BPE merges into `token`: BPE with only the merges ranked below it."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best = None
        for i in range(len(parts) - 1):
            merged = ranks.get(parts[i] + parts[i + 1])
            if merged is not None and merged < rank and (best is None or merged < best[1]):
                best = (i, merged)
        if best is None:
            break
        i = best[0]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    if len(parts) != 2:
        sys.exit(f"token {token!r} (rank {rank}) is not the merge of two tokens")
    return parts


def main():
    ranks_path, out = sys.argv[1], sys.argv[2]
    ranks = {}
    for line in open(ranks_path, "rb"):
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    to_unicode = byte_to_unicode()
    text = lambda token: "".join(to_unicode[b] for b in token)  # noqa: E731
    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            left, right = split_in_two(token, rank, ranks)
            merges.append(f"{text(left)} {text(right)}")
    eos_id = max(ranks.values()) + 1
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": eos_id, "content": EOS, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", **byte_level},
            ],
        },
        "post_processor": {"type": "ByteLevel", **byte_level},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
            "vocab": vocab, "merges": merges,
        },
    }
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    os.replace(out + ".tmp", out)
    print(json.dumps({"vocab_size": len(vocab) + 1, "merges": len(merges), "eos_id": eos_id}))


if __name__ == "__main__":
    main()
