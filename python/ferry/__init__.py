"""ferry from Python: find a prepared dataset (staged on this node, or in the cache) and load it.

The ``ferry`` binary installed by the same wheel does the work; this package only
asks it (``ferry status --json``, ``ferry wait --json``), so the cache and
destination rules (flags, ``FERRY_CACHE``, ``FERRY_DEST``, ``SLURM_TMPDIR``, the
site config) are the binary's. ``datasets`` is imported only by :func:`load`, and
nothing here touches the network.

In a training script::

    import ferry
    train = ferry.load("pile-gpt2-1024", split="train")
"""

from ._binary import FerryError, binary
from ._entries import EntryNotFoundError, entry_path, load, status

__all__ = ["EntryNotFoundError", "FerryError", "binary", "entry_path", "load", "status"]
