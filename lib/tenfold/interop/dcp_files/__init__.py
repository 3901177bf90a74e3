"""PyTorch distributed checkpoints stored by tenfold: the directory, its document, and
reading them without torch (``tenfold inspect / verify / diff / convert CKPT_DIR``).

:mod:`tenfold.interop.dcp` plugs this layout into ``torch.distributed.checkpoint``; this
module needs no torch: what a checkpoint holds can be read, verified and consolidated on a
machine without it.

Layout of a checkpoint directory ``CKPT``::

    CKPT/dcp-rank-00000.zt     rank 0's chunks (zTensor v2: xxh3 digest per object)
    CKPT/dcp-rank-00001.zt     rank 1's ...
    CKPT/dcp-metadata.json     the document (written last, by the coordinator)

Rank files may be of another tensor format tenfold writes (``file_format=``): one object per
tensor chunk (named ``fqn`` when the chunk is the whole tensor, else ``fqn@o0,o1,...``, its
offsets) and one ``uint8`` object per non-tensor entry (the bytes DCP gives: a pickle DCP
makes and reads itself). The document is JSON with sorted keys::

    {"tenfold_dcp": 1, "dcp_version": "1.0.0", "world_size": 2,
     "files": {"dcp-rank-00000.zt": {"rank": 0, "size": 1310720}, ...},
     "entries": {
       "model.w": {"type": "tensor", "dtype": "bfloat16", "shape": [8, 4],
                   "requires_grad": false, "pin_memory": false,
                   "chunks": [{"offsets": [0, 0], "sizes": [4, 4], "file": "dcp-rank-00000.zt",
                               "object": "model.w@0,0", "byte_range": [4096, 4128],
                               "digest": "xxh3:..."}, ...]},
       "epoch": {"type": "bytes", "file": ..., "object": ..., "byte_range": [...],
                 "digest": ...}},
     "planner_data": {"model.w": ["model", "w"]},
     "storage_meta": {"checkpoint_id": "CKPT", "save_id": "...", "modules": []}}

``digest`` is the rank file's own digest of the object (zTensor v2) or, for a format without
one, the xxh3 of its stored bytes computed after writing. Reading checks: the document's fields
and types, file names (plain names inside the directory), every tensor's chunks inside its
shape and covering it exactly once, each object's shape, dtype and byte range against its
file's index, and the digest of every object read whole.

A directory is *complete* when it holds the document: :class:`~tenfold.interop.dcp.
TenfoldStorageWriter` writes the ranks' files into a staging directory beside it and renames
it into place after the document (:func:`commit`); a directory with rank files and no document
is refused as incomplete. Each save attempt has its own staging directory, and the commit of
a later save to the same path removes those of earlier attempts that died
(:mod:`~tenfold.interop.dcp_files._attempts` says how a live one is told apart).
"""

from __future__ import annotations

from . import _remote as remote  # a checkpoint under an fsspec URL
from ._attempts import Attempt, leftovers, remove_dead
from ._check import inspect, verify, verify_reader
from ._convert import convert_source, demo, from_file
from ._doc import (
    DCP_VERSION,
    FMT,
    LAYOUT_VERSION,
    MAX_DOCUMENT,
    META_NAME,
    Chunk,
    Document,
    E,
    Entry,
    check_cover,
    parse_document,
)
from ._reader import MAX_OPEN_FILES, DcpReader, RankFiles, box, load, open, read_document
from ._write import check_target, commit, fsync_dir, rank_file_name, staging_path, write_rank_file

DcpReader.use_verifier(verify_reader)  # DcpReader.verify(), without _reader importing _check

__all__ = [
    "META_NAME",
    "Chunk",
    "Entry",
    "Document",
    "DcpReader",
    "RankFiles",
    "open",
    "load",
    "inspect",
    "verify",
    "convert_source",
    "from_file",
    "demo",
    "write_rank_file",
    "rank_file_name",
    "staging_path",
    "commit",
    "Attempt",
    "leftovers",
    "remove_dead",
    "remote",
    "parse_document",
    "read_document",
    "check_cover",
    "check_target",
    "fsync_dir",
    "box",
    "E",
    "FMT",
    "LAYOUT_VERSION",
    "DCP_VERSION",
    "MAX_DOCUMENT",
    "MAX_OPEN_FILES",
]
