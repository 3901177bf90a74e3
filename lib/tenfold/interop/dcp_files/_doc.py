"""The document of a checkpoint directory (``dcp-metadata.json``): its classes, parsing and
checks (the layout is described in :mod:`tenfold.interop.dcp_files`)."""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..._dcp_format import META_NAME
from ...core.dtypes import numpy_dtype
from ...core.jsonio import loads
from ...errors import FormatError, factory

FMT = "dcp"
E = factory(FMT)
#: this layout's version (the document's ``tenfold_dcp``)
LAYOUT_VERSION = 1
#: ``Metadata.version`` of the torch.distributed.checkpoint this layout was written for
DCP_VERSION = "1.0.0"
#: the largest document read (a checkpoint of a million chunks is about 300 MB)
MAX_DOCUMENT = 1 << 30


# -- the document -----------------------------------------------------------------------------
class Chunk:
    """Where one stored object lies: a tensor chunk (``offsets`` and ``sizes`` in the tensor)
    or a non-tensor entry's bytes (``offsets == sizes == ()``)."""

    __slots__ = ("offsets", "sizes", "file", "object", "byte_range", "digest")

    def __init__(
        self,
        offsets: tuple[int, ...],
        sizes: tuple[int, ...],
        file: str,
        obj: str,
        byte_range: tuple[int, int],
        digest: str | None,
    ) -> None:
        self.offsets, self.sizes, self.file, self.object = offsets, sizes, file, obj
        self.byte_range, self.digest = byte_range, digest

    def to_json(self) -> dict[str, Any]:
        return {
            "offsets": list(self.offsets),
            "sizes": list(self.sizes),
            "file": self.file,
            "object": self.object,
            "byte_range": list(self.byte_range),
            "digest": self.digest,
        }

    @property
    def numel(self) -> int:
        return int(np.prod(self.sizes, dtype=np.int64))


class Entry:
    """One state-dict entry: a tensor (``dtype``, ``shape``, its chunks) or bytes."""

    def __init__(
        self,
        name: str,
        kind: str,
        chunks: list[Chunk],
        dtype: str | None = None,
        shape: tuple[int, ...] = (),
        requires_grad: bool = False,
        pin_memory: bool = False,
    ) -> None:
        self.name, self.kind, self.chunks, self.dtype, self.shape = name, kind, chunks, dtype, shape
        self.requires_grad, self.pin_memory = requires_grad, pin_memory

    @property
    def is_tensor(self) -> bool:
        return self.kind == "tensor"

    @property
    def np_dtype(self) -> np.dtype:
        assert self.dtype is not None
        return numpy_dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        if not self.is_tensor:
            return sum(c.byte_range[1] - c.byte_range[0] for c in self.chunks)
        return int(np.prod(self.shape, dtype=np.int64)) * self.np_dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        if not self.is_tensor:
            c = self.chunks[0].to_json()
            return {
                "type": "bytes",
                **{k: c[k] for k in ("file", "object", "byte_range", "digest")},
            }
        return {
            "type": "tensor",
            "dtype": self.dtype,
            "shape": list(self.shape),
            "requires_grad": self.requires_grad,
            "pin_memory": self.pin_memory,
            "chunks": [c.to_json() for c in self.chunks],
        }


class Document:
    """The checkpoint's description (the JSON document, parsed and checked)."""

    def __init__(
        self,
        world_size: int,
        files: dict[str, dict[str, int]],
        entries: dict[str, Entry],
        planner_data: Any = None,
        storage_meta: dict[str, Any] | None = None,
        dcp_version: str | None = DCP_VERSION,
    ) -> None:
        self.world_size, self.files, self.entries = world_size, files, entries
        self.planner_data, self.storage_meta, self.dcp_version = (
            planner_data,
            storage_meta,
            dcp_version,
        )

    def tensors(self) -> list[str]:
        return [n for n, e in self.entries.items() if e.is_tensor]

    def non_tensors(self) -> list[str]:
        return [n for n, e in self.entries.items() if not e.is_tensor]

    def rank_of(self, file: str) -> int:
        return self.files[file]["rank"]

    def to_bytes(self) -> bytes:
        doc = {
            "tenfold_dcp": LAYOUT_VERSION,
            "dcp_version": self.dcp_version,
            "world_size": self.world_size,
            "files": self.files,
            "entries": {n: e.to_json() for n, e in self.entries.items()},
            "planner_data": self.planner_data,
            "storage_meta": self.storage_meta,
        }
        return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False).encode("utf-8")


def _bad(where: str, detail: str, **kw: Any) -> FormatError:
    return E.format(where, detail=detail, **kw)


def _int_list(v: Any, where: str, field: str) -> tuple[int, ...]:
    if not isinstance(v, list) or any(type(x) is not int or x < 0 for x in v):
        raise _bad(where, f"{field} is not a list of non-negative integers", got=repr(v)[:60])
    return tuple(v)


def _file_name(v: Any, where: str) -> str:
    if (
        not isinstance(v, str)
        or not v
        or v in (".", "..")
        or "/" in v
        or "\\" in v
        or "\x00" in v
        or v == META_NAME
    ):
        raise _bad(where, "file is not a plain file name in the checkpoint", got=repr(v)[:80])
    return v


def _chunk(d: Any, where: str, tensor: bool) -> Chunk:
    if not isinstance(d, dict):
        raise _bad(where, "not an object")
    br = _int_list(d.get("byte_range"), where, "byte_range")
    if len(br) != 2 or br[1] < br[0]:
        raise _bad(where, "byte_range is not [start, end]", got=list(br))
    obj, digest = d.get("object"), d.get("digest")
    if not isinstance(obj, str) or not obj:
        raise _bad(where, "object is not a name", got=repr(obj)[:60])
    if digest is not None and (not isinstance(digest, str) or ":" not in digest):
        raise _bad(where, "digest is not 'algorithm:hex'", got=repr(digest)[:60])
    offsets = _int_list(d.get("offsets"), where, "offsets") if tensor else ()
    sizes = _int_list(d.get("sizes"), where, "sizes") if tensor else ()
    return Chunk(offsets, sizes, _file_name(d.get("file"), where), obj, (br[0], br[1]), digest)


def _entry(name: str, d: Any, files: Mapping[str, Any]) -> Entry:
    where = f"entry {name!r}"
    if not isinstance(d, dict) or d.get("type") not in ("tensor", "bytes"):
        raise _bad(where, "not an object of type 'tensor' or 'bytes'")
    if d["type"] == "bytes":
        chunks = [_chunk(d, where, False)]
        entry = Entry(name, "bytes", chunks)
    else:
        dtype = d.get("dtype")
        try:
            numpy_dtype(dtype)  # type: ignore[arg-type]
        except (TypeError, ValueError, KeyError):
            raise _bad(where, "unknown dtype", got=repr(dtype)[:40]) from None
        shape = _int_list(d.get("shape"), where, "shape")
        raw = d.get("chunks")
        if not isinstance(raw, list):
            raise _bad(where, "chunks is not a list")
        chunks = [_chunk(c, f"{where} chunk {i}", True) for i, c in enumerate(raw)]
        entry = Entry(
            name,
            "tensor",
            chunks,
            dtype,
            shape,
            bool(d.get("requires_grad")),
            bool(d.get("pin_memory")),
        )
        check_cover(entry)
    for c in entry.chunks:
        if c.file not in files:
            raise _bad(where, "names a file the document does not list", got=c.file)
    return entry


def check_cover(entry: Entry) -> None:
    """Every chunk of tensor ``entry`` lies inside its shape, and together they cover every
    element exactly once (volumes add up to the tensor's and no two chunks overlap)."""
    where = f"entry {entry.name!r}"
    nd = len(entry.shape)
    for i, c in enumerate(entry.chunks):
        if len(c.offsets) != nd or len(c.sizes) != nd:
            raise _bad(
                f"{where} chunk {i}",
                "offsets/sizes rank differs from the shape's",
                expected=nd,
                got=(len(c.offsets), len(c.sizes)),
            )
        if any(o + s > d for o, s, d in zip(c.offsets, c.sizes, entry.shape, strict=True)):
            raise _bad(
                f"{where} chunk {i}",
                "lies outside the tensor",
                expected=list(entry.shape),
                got=[list(c.offsets), list(c.sizes)],
            )
    total = sum(c.numel for c in entry.chunks)
    want = int(np.prod(entry.shape, dtype=np.int64))
    boxes = [c for c in entry.chunks if c.numel]
    overlap = next(
        ((a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if _overlaps(a, b)), None
    )
    if overlap is not None:
        a, b = overlap
        raise _bad(where, f"chunks at {list(a.offsets)} and {list(b.offsets)} overlap")
    if total != want:
        raise _bad(
            where, "chunks do not cover the tensor", field="elements", expected=want, got=total
        )


def _overlaps(a: Chunk, b: Chunk) -> bool:
    return all(
        ao < bo + bs and bo < ao + as_
        for ao, as_, bo, bs in zip(a.offsets, a.sizes, b.offsets, b.sizes, strict=True)
    )


def parse_document(data: bytes, where: str = META_NAME) -> Document:
    """The :class:`Document` of a checkpoint's JSON bytes (:class:`FormatError` naming what is
    wrong)."""
    doc = loads(data, fmt=FMT, what=where, limit=MAX_DOCUMENT)
    if not isinstance(doc, dict) or doc.get("tenfold_dcp") != LAYOUT_VERSION:
        raise _bad(
            where,
            "not a tenfold DCP document",
            field="tenfold_dcp",
            expected=LAYOUT_VERSION,
            got=doc.get("tenfold_dcp") if isinstance(doc, dict) else type(doc).__name__,
        )
    ws, files, entries = doc.get("world_size"), doc.get("files"), doc.get("entries")
    if type(ws) is not int or ws < 1:
        raise _bad(where, "world_size is not a positive integer", got=repr(ws)[:40])
    if not isinstance(files, dict) or not isinstance(entries, dict):
        raise _bad(where, "files or entries is not an object")
    for f, info in files.items():
        _file_name(f, f"{where}: files")
        if (
            not isinstance(info, dict)
            or type(info.get("rank")) is not int
            or type(info.get("size")) is not int
        ):
            raise _bad(f"{where}: file {f!r}", "needs an integer rank and size")
    parsed = {n: _entry(n, e, files) for n, e in entries.items()}
    pd, sm = doc.get("planner_data"), doc.get("storage_meta")
    if pd is not None and (
        not isinstance(pd, dict)
        or any(
            not isinstance(v, list) or any(type(x) not in (str, int) for x in v)
            for v in pd.values()
        )
    ):
        raise _bad(where, "planner_data is not an object of key paths")
    if sm is not None and not isinstance(sm, dict):
        raise _bad(where, "storage_meta is not an object")
    version = doc.get("dcp_version")
    return Document(ws, files, parsed, pd, sm, version if isinstance(version, str) else None)


def read_local_document(directory: str | os.PathLike[str]) -> Document:
    """The checked document of the checkpoint ``directory`` (an incomplete one is refused)."""
    directory = os.fspath(directory)
    path = os.path.join(directory, META_NAME)
    try:
        with builtins.open(path, "rb") as f:
            data = f.read(MAX_DOCUMENT + 1)
    except FileNotFoundError:
        if not os.path.isdir(directory):
            raise FileNotFoundError(2, "no such checkpoint directory", directory) from None
        raise E.format(
            f"checkpoint {directory!r}",
            detail=f"incomplete: no {META_NAME} ({_unfinished(directory)})",
        ) from None
    return parse_document(data, META_NAME)


def _unfinished(directory: str) -> str:
    """Why a directory has no document: the attempt it is the staging directory of, or a
    guess."""
    from ._attempts import describe_leftover, read_record, state_of

    record = read_record(directory)
    if record is None:
        return "a save that did not finish, or not a checkpoint written by tenfold"
    left = {
        "path": directory,
        "attempt": record.get("attempt"),
        "record": record,
        "state": state_of(directory, record),
    }
    return describe_leftover(left)
