"""Trains small byte-level BPE tokenizers with the pre-tokenizer (and normalizer)
configurations of today's families, writes each tokenizer.json, and the ids that
Python `tokenizers` gives for the documents in DOCUMENTS.

usage: byte_level_families.py OUT_DIR DOCUMENTS_JSON
writes OUT_DIR/<family>/tokenizer.json and OUT_DIR/expected.json
({family: [[ids of document 0], ...]}).
"""

import glob
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
O200K = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# As DeepSeek-V3's tokenizer.json spells them, line breaks as the characters themselves.
DEEPSEEK_V3 = [
    r"\p{N}{1,3}",
    "[一-龥\u3040-ゟ゠-ヿ]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^"""
    "\r\n"
    r"\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+["
    "\r\n"
    r"]*|\s*["
    "\r\n"
    r"]+|\s+(?!\S)|\s+",
]


def byte_level(use_regex=False):
    return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=use_regex)


def families():
    """name -> (normalizer, pre_tokenizer, ignore_merges) of the byte-level families; the
    SentencePiece-style ones are trained beside llama3 in main."""
    split = lambda pattern, behavior="isolated", invert=False: pre_tokenizers.Split(  # noqa: E731
        Regex(pattern), behavior=behavior, invert=invert
    )
    return {
        "llama3": (None, pre_tokenizers.Sequence([split(LLAMA3), byte_level()]), True),
        "qwen2": (normalizers.NFC(), pre_tokenizers.Sequence([split(QWEN2), byte_level()]), False),
        "gpt4o": (None, pre_tokenizers.Sequence([split(O200K, "removed", True), byte_level()]), False),
        "deepseek_v3": (
            None,
            pre_tokenizers.Sequence([split(p) for p in DEEPSEEK_V3] + [byte_level()]),
            False,
        ),
        # The other behaviours, a literal pattern and ByteLevel's own regex after them.
        "behaviors": (
            normalizers.Sequence([normalizers.NFC()]),
            pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(" ", behavior="merged_with_next"),
                    split(r"\d", "contiguous"),
                    split(r"[.,;]", "merged_with_previous"),
                    byte_level(use_regex=True),
                ]
            ),
            False,
        ),
    }


def training_text():
    """Real text that travels with Python: its standard library's sources and docstrings."""
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:60]
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            yield f.read()
    yield "Grüße aus Köln, naïve café, 東京都の天気は晴れです。中文分词测试。 Привет мир! مرحبا 😀 3.14159 2024"


def train(normalizer, pre_tokenizer, ignore_merges):
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(training_text(), trainer=trainer)
    tokenizer.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    # A non-special added token matched after normalization (NFC for the families that use it).
    tokenizer.add_tokens([AddedToken("café", normalized=True), AddedToken("<tab>", normalized=False)])
    return tokenizer


def train_sentencepiece(prepend):
    """SentencePiece-style BPE as Llama-2 (prepend) or Gemma (no prepend) ship it: spaces
    become ▁, byte fallback on <0xXX> tokens, fuse_unk, and no pre-tokenizer."""
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    replace = normalizers.Replace(" ", "▁")
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), replace]) if prepend else replace
    # Trained on words: a whole document as one word is far too slow to train on.
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=specials + byte_tokens, show_progress=False)
    tokenizer.train_from_iterator(training_text(), trainer=trainer)
    tokenizer.pre_tokenizer = None
    tokenizer.add_tokens([AddedToken("<tab>", normalized=False)])
    value = json.loads(tokenizer.to_str())
    # The byte tokens are ordinary vocabulary, not added tokens.
    value["added_tokens"] = [t for t in value["added_tokens"] if t["content"] not in byte_tokens]
    return json.dumps(value)


def permuted(tokenizer_json, seed):
    """The same tokenizer with its vocabulary ids shuffled: merge order no longer follows id order."""
    value = json.loads(tokenizer_json)
    vocab = value["model"]["vocab"]
    ids = sorted(vocab.values())
    shuffled = ids[:]
    random.Random(seed).shuffle(shuffled)
    remap = dict(zip(ids, shuffled))
    value["model"]["vocab"] = {token: remap[i] for token, i in vocab.items()}
    return json.dumps(value)


def main():
    out, documents_path = sys.argv[1], sys.argv[2]
    with open(documents_path, encoding="utf-8") as f:
        documents = json.load(f)
    expected = {}
    for name, config in families().items():
        text = train(*config).to_str()
        variants = {name: text}
        if name == "llama3":
            variants["llama3_permuted"] = permuted(text, seed=15)
        if name == "llama3":
            variants["llama2_sentencepiece"] = train_sentencepiece(prepend=True)
            variants["gemma_sentencepiece"] = train_sentencepiece(prepend=False)
        for variant, variant_text in variants.items():
            tokenizer = Tokenizer.from_str(variant_text)
            os.makedirs(os.path.join(out, variant), exist_ok=True)
            tokenizer.save(os.path.join(out, variant, "tokenizer.json"))
            encodings = tokenizer.encode_batch(documents, add_special_tokens=False)
            expected[variant] = [encoding.ids for encoding in encodings]
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main()
