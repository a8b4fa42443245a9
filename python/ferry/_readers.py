"""Each trainer format of an entry opened with that trainer's own reader.

A reader's package is imported only when its format is asked for; the arguments
each takes come from the entry's manifest (row length, token type, vocabulary,
EOS), as `ferry inspect` prints them.
"""

import glob
import json
import os

from ._binary import FerryError

FORMATS = ("hf", "megatron", "flat", "nanotron", "olmo", "litdata", "mds", "modded_nanogpt")


def _manifest(path):
    with open(os.path.join(path, "manifest.json")) as file:
        return json.load(file)


def _import(package, format):
    try:
        return __import__(package, fromlist=["_"])
    except ImportError as err:
        raise FerryError(
            "format={!r} opens the files with {} (pip install it); the files are in the entry".format(format, package)
        ) from err


def _formats(manifest):
    return set(manifest["spec"]["output"].get("formats") or []) | {"hf"}


def _seq_len(manifest):
    return (manifest.get("packing") or {}).get("seq_len") or manifest["spec"]["sequence"]["seq_len"]


def _narrow(manifest):
    return manifest["tokenizer"]["vocab_size"] <= 65536


def _megatron(path, split, manifest):
    indexed = _import("megatron.core.datasets.indexed_dataset", "megatron")
    if manifest.get("mixture"):
        raise FerryError(
            "a mixture's Megatron files are blended by Megatron itself: `ferry inspect NAME --megatron-args` "
            "gives the blend for --data-path or BlendedMegatronDatasetBuilder"
        )
    return indexed.IndexedDataset(os.path.join(path, "megatron", "{}_text_document".format(split)))


def _flat(path, split, manifest):
    import numpy

    with open(os.path.join(path, "flat", "{}.json".format(split))) as file:
        meta = json.load(file)
    return numpy.memmap(os.path.join(path, "flat", meta["data"]), dtype=meta["dtype"], mode="r")


def _nanotron(path, split, manifest):
    dataset = _import("datatrove.utils.dataset", "nanotron")
    return dataset.DatatroveFolderDataset(
        os.path.join(path, "nanotron", split),
        seq_len=_seq_len(manifest) - 1,
        token_size=2 if _narrow(manifest) else 4,
        recursive=False,
        return_positions=True,
    )


def _olmo(path, split, manifest):
    import numpy

    data = _import("olmo_core.data", "olmo")
    tokenizer = manifest["tokenizer"]
    mask = os.path.join(path, "olmo", "{}.mask.npy".format(split))
    return data.NumpyFSLDataset(
        os.path.join(path, "olmo", "{}.npy".format(split)),
        sequence_length=_seq_len(manifest),
        pad_token_id=tokenizer.get("pad_id") if tokenizer.get("pad_id") is not None else tokenizer["eos_id"],
        eos_token_id=tokenizer["eos_id"],
        vocab_size=tokenizer["vocab_size"],
        dtype=numpy.uint16 if _narrow(manifest) else numpy.uint32,
        generate_doc_lengths=True,
        label_mask_paths=[mask] if os.path.exists(mask) else None,
    )


def _litdata(path, split, manifest):
    litdata = _import("litdata", "litdata")
    return litdata.StreamingDataset(
        os.path.join(path, "litdata", split), item_loader=litdata.TokensLoader(block_size=_seq_len(manifest))
    )


def _mds(path, split, manifest):
    streaming = _import("streaming", "mds")
    return streaming.StreamingDataset(local=os.path.join(path, "mds", split))


def _modded_nanogpt(path, split, manifest):
    """The shards' paths, as modded-nanogpt's `train_files` glob finds them."""
    return sorted(glob.glob(os.path.join(path, "modded_nanogpt", "{}_*.bin".format(split))))


_OPENERS = {
    "megatron": _megatron,
    "flat": _flat,
    "nanotron": _nanotron,
    "olmo": _olmo,
    "litdata": _litdata,
    "mds": _mds,
    "modded_nanogpt": _modded_nanogpt,
}


def open_format(path, format, split):
    """The reader's dataset object for `split` of the entry at `path` in `format`
    (all splits, as a dict, when `split` is None)."""
    if format not in FORMATS:
        raise FerryError("unknown format {!r}; ferry writes {}".format(format, ", ".join(FORMATS)))
    manifest = _manifest(path)
    if format not in _formats(manifest):
        raise FerryError(
            "the entry at {} has no {!r} files (it has {}); add it to the spec's output.formats "
            "(a new view: nothing is tokenized again)".format(path, format, ", ".join(sorted(_formats(manifest))))
        )
    splits = sorted(manifest["splits"])
    if split is not None and split not in splits:
        raise FerryError("the entry has no split {!r}; it has {}".format(split, ", ".join(splits)))
    opener = _OPENERS[format]
    if split is not None:
        return opener(path, split, manifest)
    return {name: opener(path, name, manifest) for name in splits}
