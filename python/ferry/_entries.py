"""Where a prepared dataset is (staged on this node, else in the cache), and loading it."""

import os

from ._binary import FerryError, run_json
from ._readers import open_format


class EntryNotFoundError(FerryError, LookupError):
    """No staged or cached entry has this name or fingerprint."""


def status(cache=None, dest=None):
    """``ferry status --json``, parsed: the cache's entries and builds, and the staging in ``dest``."""
    return run_json(["status", "--json"] + _location_flags(cache, dest))


def entry_path(name_or_fingerprint, cache=None, dest=None):
    """The directory to load for a dataset name or fingerprint (a unique prefix is enough).

    The copy staged on this node (in ``dest``, else ``$FERRY_DEST``, else
    ``$SLURM_TMPDIR/ferry``) when one was staged, after waiting for a stage still
    running in the background to finish; else the entry in the cache. Raises
    EntryNotFoundError when neither has it.
    """
    query = str(name_or_fingerprint).strip()
    if not query:
        raise EntryNotFoundError("no dataset name or fingerprint given")
    report = status(cache, dest)
    staging = _newest(s for s in report.get("staging") or [] if _matches(query, s["name"], s["id"]))
    if staging is not None:
        return _wait(report["dest"], staging["id"])
    # Views are what a trainer loads; a token store holds documents, not rows.
    entries = [
        e for e in report.get("entries") or [] if e.get("state") == "ready" and e.get("kind", "view") == "view"
    ]
    named = [e for e in entries if e["name"] == query]
    if named:
        newest = os.path.join(os.path.abspath(report["cache"]), "by-name", query)
        return newest if os.path.isdir(newest) else _entry_dir(report["cache"], _newest(named, "created_unix"))
    prefixed = [e for e in entries if _matches(query, None, e["fingerprint"])]
    if len(prefixed) == 1:
        return _entry_dir(report["cache"], prefixed[0])
    if len(prefixed) > 1:
        shorts = ", ".join(sorted(e["short"] for e in prefixed))
        raise EntryNotFoundError("{!r} matches {} entries ({}); give more digits".format(query, len(prefixed), shorts))
    where = "not staged in {}".format(report["dest"]) if report.get("dest") else "no staging destination set"
    raise EntryNotFoundError(
        "no dataset named {!r} (nor with that fingerprint): {} and not in the cache {}; "
        "`ferry prepare SPEC` builds it, `ferry status` lists what there is".format(query, where, report["cache"])
    )


def load(name_or_fingerprint, split=None, cache=None, dest=None, format="hf", **load_from_disk_args):
    """``datasets.load_from_disk`` on :func:`entry_path`: a DatasetDict, or one split's Dataset.

    With another ``format``, that trainer's reader on the entry's files of that format:
    ``"megatron"`` megatron-core's ``IndexedDataset``, ``"flat"`` a ``numpy.memmap``,
    ``"nanotron"`` datatrove's ``DatatroveFolderDataset``, ``"olmo"`` OLMo-core's
    ``NumpyFSLDataset``, ``"litdata"`` litdata's ``StreamingDataset`` with
    ``TokensLoader``, ``"mds"`` mosaicml-streaming's ``StreamingDataset``,
    ``"modded_nanogpt"`` the shards' paths; a dict by split when ``split`` is None.
    """
    path = entry_path(name_or_fingerprint, cache=cache, dest=dest)
    if format != "hf":
        return open_format(path, format, split)
    try:
        import datasets
    except ImportError as err:
        raise FerryError(
            "ferry.load needs the datasets package (pip install datasets); "
            "ferry.entry_path({!r}) is {}".format(name_or_fingerprint, path)
        ) from err
    loaded = datasets.load_from_disk(path, **load_from_disk_args)
    if split is None:
        return loaded
    if split not in loaded:
        raise EntryNotFoundError(
            "{!r} has no split {!r}; it has {}".format(name_or_fingerprint, split, ", ".join(sorted(loaded)))
        )
    return loaded[split]


def _location_flags(cache, dest):
    flags = []
    if cache is not None:
        flags += ["--cache", os.fspath(cache)]
    if dest is not None:
        flags += ["--dest", os.fspath(dest)]
    return flags


def _matches(query, name, fingerprint):
    """A name matches exactly; a fingerprint by prefix (or a full fingerprint against a short id)."""
    if name is not None and query == name:
        return True
    lowered = query.lower()
    return fingerprint.startswith(lowered) or lowered.startswith(fingerprint)


def _newest(items, key="started_unix"):
    return max(items, key=lambda item: item.get(key) or 0, default=None)


def _wait(dest, staging_id):
    """Blocks until the staging finishes (at once when it has); the staged entry's directory."""
    report = run_json(["wait", "--json", "--dest", dest, "--entry", staging_id])
    for staged in report["staged"]:
        if staged["state"]["id"] == staging_id:
            return staged["path"]
    raise FerryError("`ferry wait` did not report the staging {} in {}".format(staging_id, dest))


def _entry_dir(cache_root, entry):
    # The cache layout (README, "The cache on disk"): entries/<short fingerprint>.
    return os.path.join(os.path.abspath(cache_root), "entries", entry["short"])
