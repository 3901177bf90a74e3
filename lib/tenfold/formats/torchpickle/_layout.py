"""Where a checkpoint's pickle and storages are: the zip layout and the legacy layout.

Zip layout (``torch.save`` since 1.6)::

    <archive>/data.pkl          the pickle of the saved object (the first member)
    <archive>/byteorder         "little" or "big" (absent in files older than PyTorch 1.10:
                                little)
    <archive>/data/<key>        storage <key>: numel * itemsize raw bytes, stored (not
                                deflated), aligned to 64 bytes by recent versions
    <archive>/version, .format_version, .storage_alignment, .data/serialization_id
                                not needed to read the tensors

Legacy layout (``_use_new_zipfile_serialization=False``), pickles one after the other::

    pickle  the magic number 0x1950a86a20f9469cfc6c
    pickle  the protocol version, 1001
    pickle  the system info: {"protocol_version": 1001, "little_endian": bool, "type_sizes":...}
    pickle  the saved object (storages by persistent id, as in the zip layout)
    pickle  the list of storage keys
    then, for each key in that order: numel as an 8-byte little-endian integer, and the
    storage's numel * itemsize bytes

Every storage a tensor names must be there with exactly the bytes its persistent id announces.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...core.bounds import Limits
from ...errors import factory
from ._format import DATA_PKL, FMT, LEGACY_MAGIC_NUMBER, zip_prefix
from ._pickle import Storage, Unpickler
from ._zip import Member, member_bytes, members

__all__ = ["Layout", "Placed", "zip_layout", "legacy_layout", "LEGACY_PROTOCOL"]

E = factory(FMT)

#: ``torch.serialization.PROTOCOL_VERSION``: the second pickle of a legacy file.
LEGACY_PROTOCOL = 1001


@dataclasses.dataclass
class Placed:
    """A storage and where its bytes are: ``offset`` in the file (None: a deflated member,
    read through ``member``)."""

    storage: Storage
    offset: int | None
    member: Member | None = None


@dataclasses.dataclass
class Layout:
    """What opening found: the saved object, its storages, the byte order and the pickle's
    size (which bounds the walk of :func:`tenfold.formats.torchpickle._tree.flatten`)."""

    kind: str  # "zip" or "legacy"
    root: Any
    storages: dict[str, Placed]
    big_endian: bool
    pickle_bytes: int
    details: dict[str, Any]
    pickle_member: Member | None = None


def _data_pkl(found: dict[str, Member], what: str) -> tuple[str, Member]:
    heads = [n for n in found if zip_prefix(n.encode("utf-8", "replace")) is not None]
    if len(heads) != 1:
        raise E.format(what, field=f"<archive>/{DATA_PKL}", expected="one such member",
                       got=len(heads))  # fmt: skip
    return heads[0][: -len(DATA_PKL)], found[heads[0]]


def _byteorder(mf: Any, found: dict[str, Member], prefix: str, limits: Limits) -> bool:
    m = found.get(prefix + "byteorder")
    if m is None:
        return False  # written before PyTorch 1.10: little-endian
    if m.size > 16:
        raise E.format(f"member {m.name!r}", offset=m.offset, field="byteorder",
                       expected="'little' or 'big'", got=f"{m.size} bytes")  # fmt: skip
    text = member_bytes(mf, m, limits.budget(), 16).tobytes()
    if text not in (b"little", b"big"):
        raise E.format(f"member {m.name!r}", offset=m.offset, field="byteorder",
                       expected="'little' or 'big'", got=text)  # fmt: skip
    return text == b"big"


def zip_layout(mf: Any, limits: Limits, what: str) -> Layout:
    """The zip layout of ``mf`` (see the module doc)."""
    found = members(mf, what, limits)
    prefix, pkl = _data_pkl(found, what)
    if pkl.size > limits.max_index_bytes:
        raise E.limit(f"member {pkl.name!r}", offset=pkl.offset, field="size",
                      expected=f"<= {limits.max_index_bytes}", got=pkl.size)  # fmt: skip
    big = _byteorder(mf, found, prefix, limits)
    data = member_bytes(mf, pkl, limits.budget(), limits.max_index_bytes)
    u = Unpickler(data.tobytes(), where=0 if pkl.deflated else pkl.offset,
                  what=f"pickle {pkl.name!r}")  # fmt: skip
    root, end = u.load()
    if end != len(data):
        raise E.format(f"pickle {pkl.name!r}", offset=u.where + end,
                       detail=f"{len(data) - end} bytes after its STOP opcode")  # fmt: skip
    placed = {}
    for key, s in u.storages.items():
        name = f"{prefix}data/{key}"
        m = found.get(name)
        if m is None:
            raise E.format(f"storage {key!r}", offset=s.at, detail=f"no member {name!r}")
        if m.size != s.nbytes:
            raise E.format(f"storage {key!r}", offset=m.offset, field="member size",
                           detail=f"{name!r} does not hold the storage's bytes",
                           expected=f"{s.nbytes} ({s.numel} x {s.dtype})", got=m.size)  # fmt: skip
        placed[key] = Placed(s, None if m.deflated else m.offset, m)
    details = {"archive": prefix[:-1], "byteorder": "big" if big else "little",
               "members": len(found)}  # fmt: skip
    return Layout("zip", root, placed, big, len(data), details, pkl)


def legacy_layout(mf: Any, limits: Limits, what: str) -> Layout:
    """The legacy layout of ``mf`` (see the module doc)."""
    cut = min(mf.size, limits.max_index_bytes)
    data = mf.u8(0, cut, "pickles").data
    pos = 0

    def one(label: str, storages: dict[str, Storage] | None = None) -> Any:
        nonlocal pos
        u = Unpickler(data, what=f"{label} pickle", storages=storages, cut=cut < mf.size)
        value, pos = u.load(pos)
        return value

    if one("magic number") != LEGACY_MAGIC_NUMBER:
        raise E.format(what, offset=0, field="magic number", expected=hex(LEGACY_MAGIC_NUMBER))
    version = one("protocol version")
    if version != LEGACY_PROTOCOL:
        raise E.unsupported(what, field="protocol version", expected=LEGACY_PROTOCOL,
                            got=repr(version)[:40])  # fmt: skip
    info = one("system info")
    if not isinstance(info, dict) or type(info.get("little_endian")) is not bool:
        raise E.format(what, field="system info", detail="no little_endian flag")
    if not info["little_endian"]:
        raise E.unsupported(what, field="little_endian", detail="a big-endian legacy checkpoint")
    start = pos
    storages: dict[str, Storage] = {}
    root = one("object", storages)
    pickle_bytes = pos - start
    keys = one("storage keys")
    if type(keys) is not list or not all(type(k) is str for k in keys):
        raise E.format(what, offset=pos, field="storage keys", detail="not a list of strings")
    placed = _legacy_storages(mf, storages, keys, pos, what)
    return Layout("legacy", root, placed, False, pickle_bytes, {"protocol_version": version})


def _legacy_storages(
    mf: Any, storages: dict[str, Storage], keys: list[str], pos: int, what: str
) -> dict[str, Placed]:
    if sorted(keys) != sorted(storages) or len(set(keys)) != len(keys):
        raise E.format(what, offset=pos, field="storage keys",
                       detail="not the storages the object names, each once",
                       expected=len(storages), got=len(keys))  # fmt: skip
    placed = {}
    for key in keys:
        s = storages[key]
        where = f"storage {key!r}"
        if pos + 8 > mf.size:
            raise E.truncated(where, offset=pos, detail=f"truncated: the file has {mf.size} "
                              f"bytes, the storage's size field needs {pos + 8}")  # fmt: skip
        n = int(np.frombuffer(mf.bytes(pos, 8, where), "<i8")[0])
        if n != s.numel:
            raise E.format(where, offset=pos, field="numel", expected=s.numel, got=n)
        if pos + 8 + s.nbytes > mf.size:
            raise E.truncated(where, offset=pos + 8, detail=f"truncated: the file has {mf.size} "
                              f"bytes, the storage needs {pos + 8 + s.nbytes}")  # fmt: skip
        placed[key] = Placed(s, pos + 8)
        pos += 8 + s.nbytes
    if pos != mf.size:
        raise E.format(what, offset=pos, detail=f"{mf.size - pos} bytes after the last storage")
    return placed
