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
is refused as incomplete.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .._dcp_format import META_NAME, RANK_PREFIX
from .._dispatch import open_any, save_one
from ..core.atomic import atomic_write
from ..core.dtypes import canonical, numpy_dtype
from ..core.jsonio import loads
from ..core.reader import BaseReader, TensorInfo
from ..errors import FormatError, TenfoldError, factory
from ..formats.ztensor import _format as zt_format
from ..formats.ztensor.v2writer import V2Writer
from ..tensor_source import Source

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
    "parse_document",
    "read_document",
]

FMT = "dcp"
E = factory(FMT)
#: this layout's version (the document's ``tenfold_dcp``)
LAYOUT_VERSION = 1
#: ``Metadata.version`` of the torch.distributed.checkpoint this layout was written for
DCP_VERSION = "1.0.0"
#: the largest document read (a checkpoint of a million chunks is about 300 MB)
MAX_DOCUMENT = 1 << 30
#: rank files a reader keeps open at once
MAX_OPEN_FILES = 32


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


def read_document(directory: str | os.PathLike[str]) -> Document:
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
            detail=f"incomplete: no {META_NAME} (a save that did not finish, or not a "
            "checkpoint written by tenfold)",
        ) from None
    return parse_document(data, META_NAME)


# -- writing ----------------------------------------------------------------------------------
def rank_file_name(rank: int, file_format: str | None = None) -> str:
    """The name of rank ``rank``'s file (``file_format``: a registered format's name; None:
    zTensor v2)."""
    return f"{RANK_PREFIX}{rank:05d}{_target(file_format).suffixes[0]}"


def _target(file_format: str | None) -> Any:
    from ..registry import get

    fmt = zt_format.FORMAT if file_format is None else get(file_format)
    if not fmt.dtypes or not fmt.suffixes or fmt.opens_path:
        raise E.unsupported(
            f"file_format {file_format!r}", detail="not a single-file tensor format tenfold writes"
        )
    return fmt


def write_rank_file(
    path: str,
    items: Iterable[tuple[str, np.ndarray]],
    file_format: str | None = None,
    fsync: bool = True,
) -> dict[str, Any]:
    """Write ``(object name, array)`` items to the file ``path`` (atomically) and return
    ``{name: (byte_range, digest)}`` read back from the written file's index."""
    fmt = _target(file_format)
    names: list[str] = []
    if fmt is zt_format.FORMAT:  # streamed: each array is written and dropped
        with V2Writer(path, canonical=False, align=4096, fsync=fsync) as w:
            for name, arr in items:
                w.add(name, arr)
                names.append(name)
    else:
        arrays = dict(items)
        names = list(arrays)
        save_one(path, arrays, fmt.name)
    import xxhash

    out = {}
    with open_any(path, {}) as r:
        for name in names:
            info = r.info(name)
            digest = info.checksum
            if digest is None:
                digest = "xxh3:" + xxhash.xxh3_64_hexdigest(r.read_raw(name))
            out[name] = ((int(info.byte_range[0]), int(info.byte_range[1])), digest)
    return out


def staging_path(final: str, save_id: str) -> str:
    """The staging directory of a save to ``final``: beside it, hidden, named by the save."""
    final = os.path.abspath(final)
    return os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tenfold-{save_id}")


def check_target(final: str, overwrite: bool) -> None:
    """Refuse a save to ``final`` that could not be committed: an existing path (unless
    ``overwrite`` and it is a tenfold checkpoint or an empty directory). Missing parent
    directories are created when the staging directory is."""
    final = os.path.abspath(final)
    where = f"checkpoint {final!r}"
    if not os.path.lexists(final):
        return
    if not overwrite:
        raise E.encode(where, detail="exists; pass overwrite=True to replace it")
    if os.path.islink(final) or not os.path.isdir(final):
        raise E.encode(where, detail="exists and is not a directory: not replaced")
    if not os.path.isfile(os.path.join(final, META_NAME)) and os.listdir(final):
        raise E.encode(
            where,
            detail=f"is a directory holding no {META_NAME}: not replaced "
            "(only a tenfold checkpoint or an empty directory is)",
        )


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(
    staging: str, final: str, doc: Document, *, overwrite: bool = False, fsync: bool = True
) -> None:
    """Check the staging directory against ``doc`` (every file present at its size), write
    the document into it last, and rename it to ``final``. With ``overwrite``, a previous
    checkpoint at ``final`` is exchanged atomically where the system can (Linux
    ``renameat2(RENAME_EXCHANGE)``), else moved aside first (``final`` is then absent for a
    moment, never partial); then removed."""
    final = os.path.abspath(final)
    for f, info in doc.files.items():
        try:
            size = os.stat(os.path.join(staging, f)).st_size
        except FileNotFoundError:
            raise E.format(
                f"rank {info['rank']} file {f!r}", detail="missing from the staging directory"
            ) from None
        if size != info["size"]:
            raise E.format(
                f"rank {info['rank']} file {f!r}", field="size", expected=info["size"], got=size
            )
    with atomic_write(os.path.join(staging, META_NAME), fsync=fsync) as out:
        out.write(doc.to_bytes())
    if fsync:
        fsync_dir(staging)
    check_target(final, overwrite)
    if not os.path.lexists(final):
        os.rename(staging, final)  # fails if another save created it meanwhile
    else:
        old = staging_path(final, "old-" + uuid.uuid4().hex[:12])
        if _exchange(staging, final):
            os.rename(staging, old)  # staging now holds the previous checkpoint
        else:
            os.rename(final, old)
            os.rename(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    if fsync:
        fsync_dir(os.path.dirname(final))


def _exchange(a: str, b: str) -> bool:
    """Swap the paths ``a`` and ``b`` atomically (Linux ``renameat2``); False where the
    system cannot (then nothing was changed)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return bool(rc == 0)


# -- reading ----------------------------------------------------------------------------------
class RankFiles:
    """The rank files of one checkpoint, each opened on first use (at most
    :data:`MAX_OPEN_FILES` at once), and the checked read of one stored object."""

    def __init__(
        self,
        directory: str,
        doc: Document,
        options: Mapping[str, Any] | None = None,
        max_open: int = MAX_OPEN_FILES,
    ) -> None:
        self.directory, self.doc = os.fspath(directory), doc
        self._options = dict(options or {})
        self._open: dict[str, Any] = {}
        self._max_open = max(1, max_open)
        self._lock = threading.Lock()
        self._real = os.path.realpath(self.directory)

    def where(self, file: str, name: str, chunk: Chunk) -> str:
        what = f"tensor {name!r}" + (f" chunk at {list(chunk.offsets)}" if chunk.offsets else "")
        if not chunk.sizes and not chunk.offsets and not self.doc.entries[name].is_tensor:
            what = f"entry {name!r}"
        return f"rank {self.doc.rank_of(file)} file {file!r} {what}"

    def reader(self, file: str) -> Any:
        with self._lock:
            r = self._open.pop(file, None)
            if r is None:
                path = os.path.join(self.directory, file)
                if not os.path.realpath(path).startswith(self._real + os.sep):
                    raise E.format(
                        f"rank {self.doc.rank_of(file)} file {file!r}",
                        detail="is a link leading outside the checkpoint",
                    )
                r = open_any(path, dict(self._options))
            self._open[file] = r  # most recent last
            while len(self._open) > self._max_open:
                self._open.pop(next(iter(self._open))).close()
            return r

    def read(self, name: str, chunk: Chunk, index: Any = None, verify: bool = True) -> Any:
        """The stored object of ``chunk`` (of entry ``name``): whole (its digest checked), or
        the basic slice ``index`` of it (only the rows it touches read; checked against the
        digest too when ``verify``, by reading it whole). Any failure is a tenfold error
        naming the rank, the file and the tensor."""
        where = self.where(chunk.file, name, chunk)
        try:
            r = self.reader(chunk.file)
            return self._read(r, name, chunk, index, verify, where)
        except (TenfoldError, OSError, KeyError, ValueError) as exc:
            if isinstance(exc, TenfoldError) and exc.fmt == FMT and exc.obj == where:
                raise  # named already
            cls = type(exc) if isinstance(exc, TenfoldError) else FormatError
            detail = str(exc) if not isinstance(exc, FileNotFoundError) else "missing file"
            raise E(cls, where, detail=detail) from exc

    def _read(self, r: Any, name: str, chunk: Chunk, index: Any, verify: bool, where: str) -> Any:
        entry = self.doc.entries[name]
        if chunk.object not in r:
            raise E.format(where, detail=f"no object {chunk.object!r} in the file")
        info = r.info(chunk.object)
        got_range = tuple(int(x) for x in info.byte_range) if info.byte_range else None
        if got_range != chunk.byte_range:
            raise E.format(
                where,
                field="byte_range",
                expected=list(chunk.byte_range),
                got=list(got_range) if got_range else None,
            )
        nbytes = chunk.byte_range[1] - chunk.byte_range[0]
        want_shape = chunk.sizes if entry.is_tensor else (nbytes,)
        want_dtype = entry.dtype if entry.is_tensor else "uint8"
        if tuple(info.shape) != want_shape or canonical(info.np_dtype) != want_dtype:
            raise E.format(
                where,
                detail="stored object differs from the document",
                expected=f"{want_dtype} {list(want_shape)}",
                got=f"{canonical(info.np_dtype)} {list(info.shape)}",
            )
        if index is not None and not verify:
            return r.read(chunk.object, index)
        if info.checksum is not None and info.checksum != chunk.digest:
            raise E.integrity(where, field="digest", expected=chunk.digest, got=info.checksum)
        arr = r[chunk.object]  # a reader with a stored digest checks it on the first read
        if info.checksum is None:
            _check_digest(arr, chunk.digest, where)
        return arr if index is None else arr[index]

    def close(self) -> None:
        with self._lock:
            readers, self._open = list(self._open.values()), {}
        for r in readers:
            r.close()


def _check_digest(arr: np.ndarray, digest: str | None, where: str) -> None:
    if digest is None:
        return
    algo, _, want = digest.partition(":")
    if algo != "xxh3":
        raise E.unsupported(where, field="digest", detail=f"unknown algorithm {algo!r}")
    import xxhash

    flat = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    got = xxhash.xxh3_64_hexdigest(flat.data)
    if got != want:
        raise E.integrity(where, field="xxh3 digest", expected=want, got=got)


def box(chunk: Chunk) -> tuple[slice, ...]:
    """The chunk's place in its tensor, as slices."""
    return tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes, strict=True))


class DcpReader(BaseReader):
    """A checkpoint directory as one consolidated read-only ``Mapping`` of its tensors (the
    reader protocol of :mod:`tenfold.core.reader`): ``reader[fqn]`` assembles the tensor
    from its chunks (every chunk read whole, its digest checked). Non-tensor entries are not
    keys (``non_tensors``; ``raw_entry(name)`` gives their bytes: DCP's pickles, never
    unpickled here)."""

    fmt = FMT

    def __init__(self, path: Any, **options: Any) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise E.unsupported("checkpoint", detail="must be opened from a directory's path")
        self.path = os.fspath(path)
        self.doc = read_document(self.path)
        self._files = RankFiles(self.path, self.doc, options)
        self._names = self.doc.tensors()
        self._closed = False

    @property
    def non_tensors(self) -> list[str]:
        return self.doc.non_tensors()

    @property
    def size(self) -> int:
        return sum(info["size"] for info in self.doc.files.values())

    def _keys(self) -> Any:
        return dict.fromkeys(self._names)

    def _entry(self, name: str) -> Entry:
        e = self.doc.entries.get(name)
        if e is None or not e.is_tensor:
            raise KeyError(f"{FMT}: no tensor named {name!r}")
        return e

    def read(self, name: str, index: Any = None, **kw: Any) -> Any:
        """Tensor ``name`` assembled from its chunks (then the basic slice ``index`` of it)."""
        if self._closed:
            raise ValueError("I/O operation on a closed file")
        e = self._entry(name)
        out = np.empty(e.shape, e.np_dtype)
        for c in e.chunks:
            if c.numel:
                out[box(c)] = self._files.read(name, c)
        return out if index is None else out[index]

    def raw_entry(self, name: str) -> bytes:
        """The stored bytes of non-tensor entry ``name`` (digest checked)."""
        e = self.doc.entries[name]
        return bytes(self._files.read(name, e.chunks[0]))

    def info(self, name: str) -> TensorInfo:
        e = self._entry(name)
        return TensorInfo(
            name,
            e.dtype or "",
            tuple(e.shape),
            None,
            "chunks",
            None,
            {"chunks": len(e.chunks), "files": sorted({c.file for c in e.chunks})},
            e.np_dtype,
        )

    @property
    def metadata(self) -> dict[str, Any]:
        return {}

    def verify(self) -> Any:
        return verify(self.path)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._files.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self)} tensors, {len(self.doc.files)} files"
        return f"<tenfold.interop.dcp_files.DcpReader {self.path!r} {state}>"

    __eq__ = object.__eq__  # type: ignore[assignment]
    __hash__ = object.__hash__  # type: ignore[assignment]


def open(path: Any, **options: Any) -> DcpReader:  # noqa: A001
    """The :class:`DcpReader` of checkpoint directory ``path``."""
    options.pop("mmap", None)
    return DcpReader(path, **options)


def load(path: Any, copy: bool = False, **options: Any) -> dict[str, Any]:
    """Every tensor of the checkpoint, consolidated (owned arrays)."""
    with open(path, **options) as r:
        return {n: r[n] for n in r}


def inspect(path: Any, **options: Any) -> list[dict[str, Any]]:
    """One row per tensor (its chunks and files) and per non-tensor entry; the world size
    and DCP version as metadata rows."""
    rows: list[dict[str, Any]] = []
    with open(path, **options) as r:
        for name, e in r.doc.entries.items():
            files = sorted({c.file for c in e.chunks})
            rows.append(
                {
                    "name": name,
                    "dtype": e.dtype if e.is_tensor else "bytes",
                    "shape": tuple(e.shape) if e.is_tensor else "-",
                    "bytes": e.nbytes,
                    "encoding": "raw",
                    "layout": _chunks(e) if e.is_tensor else "DCP pickle",
                    "checksum": _algos(e),
                    "files": ",".join(files),
                }
            )
        for k, v in (("world_size", r.doc.world_size), ("dcp_version", r.doc.dcp_version)):
            rows.append(
                {"name": k, "dtype": type(v).__name__, "layout": "metadata", "value": repr(v)}
            )
    return rows


def _chunks(e: Entry) -> str:
    n = len(e.chunks)
    return f"{n} chunk" + ("" if n == 1 else "s")


def _algos(e: Entry) -> str:
    algos = sorted({c.digest.partition(":")[0] for c in e.chunks if c.digest})
    return ",".join(algos) or "-"


def verify(path: Any, **options: Any) -> Any:
    """Check the document, every rank file with its format's verifier, and every stored
    object against the document (read whole, digest checked); never raises on damage."""
    from ..core.report import ERROR, OK, Report
    from ..registry import detect, module_for

    report = Report(FMT, os.fspath(path))
    try:
        r = open(path, **options)
    except (TenfoldError, OSError) as exc:
        report.add("document", ERROR, str(exc))
        return report
    with r:
        report.summary.update(
            world_size=r.doc.world_size,
            files=len(r.doc.files),
            tensors=len(r),
            entries=len(r.doc.entries),
        )
        for file in r.doc.files:
            full = os.path.join(r.path, file)
            try:
                sub = module_for(detect(full)).verify(full)
            except (TenfoldError, OSError) as exc:
                report.add(f"file {file!r}", ERROR, str(exc))
                continue
            for f in sub.findings:
                if f.status != OK:
                    report.add(f"{file}: {f.obj}", f.status, f.message, offset=f.offset)
        for name, e in r.doc.entries.items():
            try:
                for c in e.chunks:
                    r._files.read(name, c)
            except TenfoldError as exc:
                report.add(f"entry {name!r}", ERROR, str(exc))
                continue
            report.add(f"entry {name!r}", OK)
    return report


# -- convert ----------------------------------------------------------------------------------
def convert_source(path: Any, limits: Any = None, label: Any = None, open_one: Any = None) -> Any:
    """The ``convert_source`` hook (:mod:`tenfold.conversion`): the checkpoint's tensors,
    consolidated one at a time (memory: the largest tensor). Non-tensor entries are listed in
    the source's ``extras`` (convert refuses them unless ``metadata=False``)."""
    r = open(path)
    extras = []
    if r.non_tensors:
        shown = ", ".join(map(repr, r.non_tensors[:5])) + (" ..." if len(r.non_tensors) > 5 else "")
        extras.append(f"non-tensor entries pickled by DCP ({shown})")

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        e = r._entry(n)
        return e.np_dtype, tuple(e.shape)

    return Source(FMT, list(r), spec, r.read, close=r.close, path=r.path, extras=extras)


def demo(directory: Any) -> str:
    """Write a small deterministic checkpoint (as 2 ranks would have saved it) into
    ``directory``; return its path."""
    rng = np.random.default_rng(26)
    tensors = {
        "model.embed": rng.standard_normal((32, 16)).astype(np.float32),
        "model.bias": np.zeros(16, np.float32),
        "optim.step": np.array(10.0, np.float32),
    }
    path = os.path.join(os.fspath(directory), "demo-dcp")
    src = os.path.join(os.fspath(directory), f".demo-dcp-source-{uuid.uuid4().hex}")
    save_one(src, tensors, zt_format.FORMAT.name)
    try:
        from_file(src, path, world_size=2, overwrite=True)
    finally:
        os.unlink(src)
    return path


# -- a single file as a checkpoint -----------------------------------------------------------
def _split(shape: tuple[int, ...], world_size: int) -> list[tuple[int, int]]:
    """Rows ``[lo, hi)`` of dimension 0 each rank holds (``torch.chunk``'s split)."""
    if not shape or shape[0] == 0:
        return [(0, shape[0] if shape else 0)]
    step = -(-shape[0] // world_size)
    return [(lo, min(lo + step, shape[0])) for lo in range(0, shape[0], step)]


def from_file(
    src: Any,
    ckpt_dir: str | os.PathLike[str],
    world_size: int = 1,
    *,
    file_format: str | None = None,
    overwrite: bool = False,
    fsync: bool = True,
) -> Document:
    """Write the tensors of ``src`` (any file or checkpoint :func:`tenfold.open` reads) as a
    checkpoint ``ckpt_dir`` that ``torch.distributed.checkpoint.load`` reads with
    :class:`~tenfold.interop.dcp.TenfoldStorageReader` (as if ``world_size`` ranks had saved
    it, each tensor split along its first dimension as ``torch.chunk`` splits it). Tensors are
    read one at a time. Needs no torch. Committed as a save is (:func:`commit`)."""
    if type(world_size) is not int or world_size < 1:
        raise ValueError(f"{FMT}: world_size must be a positive integer, got {world_size!r}")
    final = os.path.abspath(os.fspath(ckpt_dir))
    check_target(final, overwrite)
    staging = staging_path(final, uuid.uuid4().hex)
    os.makedirs(staging)
    try:
        doc = _write_ranks(src, staging, world_size, file_format, fsync)
        commit(staging, final, doc, overwrite=overwrite, fsync=fsync)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return doc


def _write_ranks(
    src: Any, staging: str, world_size: int, file_format: str | None, fsync: bool
) -> Document:
    entries: dict[str, Entry] = {}
    files: dict[str, dict[str, int]] = {}
    with open_any(src, {}) as r:
        names = list(r)
        for rank in range(world_size):
            file = rank_file_name(rank, file_format)
            placed: dict[str, tuple[str, tuple[int, ...], tuple[int, ...]]] = {}

            def items(rank: int = rank, placed: dict[str, Any] = placed) -> Iterator[Any]:
                for n in names:
                    info = r.info(n)
                    parts = _split(tuple(info.shape), world_size)
                    if rank >= len(parts):
                        continue
                    lo, hi = parts[rank]
                    whole = (lo, hi) == (0, info.shape[0]) if info.shape else True
                    obj = n if whole else f"{n}@{lo}" + ",0" * (len(info.shape) - 1)
                    arr = np.asarray(r[n] if whole else r.read(n, (slice(lo, hi),)))
                    offsets = (lo,) + (0,) * (len(info.shape) - 1) if info.shape else ()
                    placed[n] = (obj, offsets, tuple(arr.shape))
                    yield obj, arr

            got = write_rank_file(os.path.join(staging, file), items(), file_format, fsync)
            files[file] = {"rank": rank, "size": os.path.getsize(os.path.join(staging, file))}
            for n, (obj, offsets, sizes) in placed.items():
                info = r.info(n)
                e = entries.setdefault(
                    n, Entry(n, "tensor", [], canonical(info.np_dtype), tuple(info.shape))
                )
                e.chunks.append(Chunk(offsets, sizes, file, obj, *got[obj]))
    entries = {n: entries[n] for n in names}
    for e in entries.values():
        check_cover(e)
    return Document(
        world_size,
        files,
        entries,
        {n: [n] for n in names},
        {"checkpoint_id": None, "save_id": os.path.basename(staging), "modules": []},
    )
