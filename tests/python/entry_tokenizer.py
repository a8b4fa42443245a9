"""Loads the tokenizer an entry carries, offline, as trainers and users would, and
checks it against the entry's rows (one row per document) and the documents.

usage: entry_tokenizer.py ENTRY_DIR DOCUMENTS_JSON
prints JSON: {"class", "bos", "eos", "rows", "mismatches": [...]}; a mismatch names
the row and what differs.
"""

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import datasets  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402

entry, documents_path = sys.argv[1], sys.argv[2]
documents = json.load(open(documents_path))
auto = transformers.AutoTokenizer.from_pretrained(entry)
raw = tokenizers.Tokenizer.from_file(os.path.join(entry, "tokenizer.json"))
rows = datasets.load_from_disk(entry)["train"]["input_ids"]
specials = {auto.convert_tokens_to_ids(t) for t in (auto.bos_token, auto.eos_token) if t is not None}

mismatches = []
for index, (row, document) in enumerate(zip(rows, documents)):
    decoded = auto.decode(row, skip_special_tokens=True)
    if decoded != document:
        mismatches.append({"row": index, "what": "AutoTokenizer.decode", "got": decoded, "want": document})
    body = [token for token in row if token not in specials]
    encoded = raw.encode(document, add_special_tokens=False).ids
    if encoded != body:
        mismatches.append({"row": index, "what": "Tokenizer.from_file encode", "got": encoded[:20], "want": body[:20]})
    marked = auto.decode(row)
    if auto.eos_token is not None and not marked.endswith(auto.eos_token):
        mismatches.append({"row": index, "what": "EOS at the document's end", "got": marked[-40:]})
if len(rows) != len(documents):
    mismatches.append({"what": "row count", "got": len(rows), "want": len(documents)})
print(json.dumps({
    "class": type(auto).__name__,
    "bos": auto.bos_token,
    "eos": auto.eos_token,
    "rows": len(rows),
    "mismatches": mismatches,
}))
