"""Resolves files in the local Hugging Face hub cache with huggingface_hub itself.

Reads a JSON list of [repo_type, repo_id, revision, filename] from stdin and prints,
as JSON, what `huggingface_hub.try_to_load_from_cache` returns for each (a path, or
null when the file is not cached). The cache directory comes from the environment
(HF_HUB_CACHE), as for ferry.
"""

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

from huggingface_hub import try_to_load_from_cache  # noqa: E402

queries = json.load(sys.stdin)
answers = []
for repo_type, repo_id, revision, filename in queries:
    found = try_to_load_from_cache(repo_id, filename, revision=revision, repo_type=repo_type)
    answers.append(found if isinstance(found, str) else None)
print(json.dumps(answers))
