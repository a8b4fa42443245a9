"""ferry.load(NAME) in the venv the wheel was installed into; prints what was loaded as JSON.

Usage: load_with_ferry.py NAME_OR_FINGERPRINT [SPLIT]
"""

import json
import os
import sys

import ferry

# Importing ferry must not import datasets (it is imported when load needs it).
imported_datasets_early = "datasets" in sys.modules
name = sys.argv[1]
split = sys.argv[2] if len(sys.argv) > 2 else None
path = ferry.entry_path(name)
# Where the entry's files lead the moment entry_path returns (after any wait): with a
# background stage still copying, some would still be symlinks into the shared cache.
files_at_return = sorted(
    os.path.realpath(os.path.join(directory, file))
    for directory, _, files in os.walk(path)
    for file in files
    if file.endswith(".arrow")
)
loaded = ferry.load(name, split=split)
splits = {split: loaded} if split is not None else dict(loaded)
print(
    json.dumps(
        {
            "ferry_module": os.path.realpath(ferry.__file__),
            "binary": os.path.realpath(ferry.binary()),
            "imported_datasets_early": imported_datasets_early,
            "path": path,
            "rows": {name: dataset.num_rows for name, dataset in splits.items()},
            "columns": {name: dataset.column_names for name, dataset in splits.items()},
            "files_at_return": files_at_return,
            "cache_files": sorted(
                os.path.realpath(f["filename"]) for dataset in splits.values() for f in dataset.cache_files
            ),
        }
    )
)
