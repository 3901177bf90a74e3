"""Sharded checkpoints in the Hugging Face layout: ``name-00001-of-0000N.<ext>`` files and a
``name.<ext>.index.json`` that maps every tensor to its shard.

The index is the JSON ``transformers`` and ``huggingface_hub`` write and read::

    {
      "metadata": {"total_size": 2000000000},
      "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors", ...}
    }

``total_size`` is the sum of the tensors' sizes in bytes (elements x item size, as
``huggingface_hub`` counts it), not of the files. Shards are any tensor format tenfold
writes (the suffix chooses it); an index from the Hub (``model.safetensors.index.json``
beside its shards) opens the same way.

* :func:`save` splits a ``dict`` of arrays as ``huggingface_hub`` does: tensors in order, a
  new shard when the next tensor would take the current one past ``max_shard_size``, a
  tensor larger than that alone in its shard; a model that fits in one shard is one plain
  file (no index). Every file is written atomically, the index last; then what an earlier
  save to the same path left in another layout goes (:func:`replace_layout`).
* :func:`open` returns a :class:`ShardedReader`: one read-only ``Mapping`` over every
  shard's tensors with the reader protocol of :mod:`tenfold.core.reader`, opening each
  shard on first use.
* Refused with a :class:`~tenfold.errors.FormatError` naming them, before any shard is
  opened: shard names that leave the index's directory (``..``, absolute paths), shards that
  do not exist, shards that are symbolic links (or lie under one) resolving outside the
  index's directory (see *Symbolic links* below); when a shard is opened: a shard that is
  itself an index (an index naming itself, two naming each other), tensors the index puts in
  it that it lacks.
* At most ``max_open_shards`` shards (default :data:`MAX_OPEN_SHARDS`) stay open at once: the
  least recently used one is closed when another must open (arrays already handed out stay
  valid), so a checkpoint of thousands of shards needs no more file descriptors than that.

Symbolic links: a shard is followed through a link only when its target resolves inside the
index's directory or, in the Hugging Face cache layout
(``models--org--name/snapshots/<rev>/x -> ../../blobs/<sha>``), inside that repository's cache
folder (``models--org--name``). Anything else is refused naming the link, so that an untrusted
directory (a clone, an extracted archive) cannot make tenfold read a file elsewhere on the
machine. ``trust_links=True`` (on :func:`open`, :func:`load`, :func:`verify`,
:func:`inspect` and the framework loaders given an index) follows every link, for trees one
trusts.
"""

from __future__ import annotations

# split by job: _index (the index document, its limits and checks), _write (planning and
# writing shards), _reader (ShardedReader and what reads through it), _source (conversion through
# a sharded checkpoint); every name of the module before the split is importable from here
from ._index import FMT as FMT
from ._index import INDEX_SUFFIX, MAX_OPEN_SHARDS, sniff
from ._index import MAX_INDEX_BYTES as MAX_INDEX_BYTES
from ._index import E as E
from ._index import array_nbytes as array_nbytes
from ._index import check_index_metadata as check_index_metadata
from ._index import index_document as index_document
from ._index import parse_index as parse_index
from ._index import url_dir as _url_dir  # noqa: F401 - tests resolve shard URLs with it
from ._reader import ShardedReader, inspect, load, open, verify
from ._source import convert_source as convert_source
from ._source import open_source as open_source
from ._source import write_source as write_source
from ._write import demo as demo
from ._write import layout_files as layout_files
from ._write import parse_size, plan, save, shard_paths
from ._write import replace_layout as replace_layout
from ._write import write as write

__all__ = [
    "ShardedReader",
    "open",
    "load",
    "save",
    "inspect",
    "verify",
    "parse_size",
    "plan",
    "shard_paths",
    "sniff",
    "INDEX_SUFFIX",
    "MAX_OPEN_SHARDS",
]
