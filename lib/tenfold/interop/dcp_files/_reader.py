"""Reading a checkpoint directory: its rank files and the consolidated :class:`DcpReader`."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..._dispatch import open_any
from ...core.checksums import copy_xxh3, xxh3_hasher, xxh3_hex
from ...core.dtypes import canonical
from ...core.mapped import MappedFile
from ...core.reader import BaseReader, TensorInfo
from ...core.slicing import plan
from ...core.source import is_remote
from ...errors import FormatError, TenfoldError
from ._doc import FMT, Chunk, Document, E, Entry, read_local_document

#: rank files a reader keeps open at once
MAX_OPEN_FILES = 32


def read_document(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> Document:
    """The checked document of the checkpoint at ``path``: a local directory, or an fsspec
    URL (fetched with ``storage_options``); an incomplete checkpoint is refused."""
    if is_remote(path):
        from ._remote import read_document as read_remote

        return read_remote(os.fspath(path), storage_options)
    return read_local_document(path)


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
        self._remote = is_remote(self.directory)  # then rank files are fetched by range
        self._real = "" if self._remote else os.path.realpath(self.directory)

    def where(self, file: str, name: str, chunk: Chunk) -> str:
        what = f"tensor {name!r}" + (f" chunk at {list(chunk.offsets)}" if chunk.offsets else "")
        if not chunk.sizes and not chunk.offsets and not self.doc.entries[name].is_tensor:
            what = f"entry {name!r}"
        return f"rank {self.doc.rank_of(file)} file {file!r} {what}"

    def _path(self, file: str) -> str:
        if self._remote:
            return self.directory.rstrip("/") + "/" + file
        return os.path.join(self.directory, file)

    def reader(self, file: str) -> Any:
        with self._lock:
            r = self._open.pop(file, None)
            if r is None:
                path = self._path(file)
                if not self._remote and not os.path.realpath(path).startswith(self._real + os.sep):
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
        return _named(where, lambda: self._read(name, chunk, index, verify, where))

    def read_into(self, name: str, chunk: Chunk, dst: np.ndarray) -> bool:
        """Copy the stored object of ``chunk`` whole into ``dst`` (C-contiguous, of the
        object's byte size and item size), checking its digest in the same pass
        (:func:`tenfold.core.checksums.copy_xxh3`: stripe by stripe with the GIL released, or
        block by block hashed then copied while in the cache), so that the stored bytes are
        read from memory once (:meth:`read` then a copy reads them twice). Checked
        as :meth:`read` checks (the document's digest; a mismatch raises and ``dst`` is then
        partly written). False, with nothing read, where the rank file's reader cannot hand
        the object's raw bytes from a local map, or the digest is not xxh3: use :meth:`read`."""
        where = self.where(chunk.file, name, chunk)
        return _named(where, lambda: self._read_into(name, chunk, dst, where))

    def _read_into(self, name: str, chunk: Chunk, dst: np.ndarray, where: str) -> bool:
        r = self.reader(chunk.file)
        info = self._checked_info(r, name, chunk, where)
        mf, checked_span = getattr(r, "file", None), getattr(r, "checked_span", None)
        algo, _, want = (chunk.digest or "").partition(":")
        lo, hi = chunk.byte_range
        if (
            type(mf) is not MappedFile
            or mf.closed
            or checked_span is None
            or (chunk.digest is not None and algo != "xxh3")
            or not dst.flags.c_contiguous
            or dst.nbytes != hi - lo
            or dst.itemsize != info.np_dtype.itemsize
        ):
            return False
        got = checked_span(chunk.object)
        if got is None or got.span.offset != lo:
            return False  # stored otherwise than raw at its byte range
        src = mf.u8(lo, hi - lo, where)
        out = dst.reshape(-1).view(np.uint8)
        if chunk.digest is None:
            np.copyto(out, src)
        else:
            h = xxh3_hasher()
            copy_xxh3(src, out, h)
            if h.hexdigest() != want:
                raise E.integrity(where, field="xxh3 digest", expected=want, got=h.hexdigest())
            if got.done is not None:
                got.done()  # the reader's own check of the same digest held
        return True

    def _checked_info(self, r: Any, name: str, chunk: Chunk, where: str) -> Any:
        """The rank file reader's record of ``chunk``'s object, checked against the
        document: present, at its byte range, of its shape and dtype, with its digest."""
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
        if info.checksum is not None and info.checksum != chunk.digest:
            raise E.integrity(where, field="digest", expected=chunk.digest, got=info.checksum)
        return info

    def _read(self, name: str, chunk: Chunk, index: Any, verify: bool, where: str) -> Any:
        r = self.reader(chunk.file)
        info = self._checked_info(r, name, chunk, where)
        if index is not None and not verify:
            return r.read(chunk.object, index)
        arr = r[chunk.object]  # a reader with a stored digest checks it on the first read
        if info.checksum is None:
            _check_digest(arr, chunk.digest, where)
        return arr if index is None else arr[index]

    def close(self) -> None:
        with self._lock:
            readers, self._open = list(self._open.values()), {}
        for r in readers:
            r.close()


def _named(where: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, any failure turned into a tenfold error naming ``where`` (rank, file and
    tensor)."""
    try:
        return fn()
    except (TenfoldError, OSError, KeyError, ValueError) as exc:
        if isinstance(exc, TenfoldError) and exc.fmt == FMT and exc.obj == where:
            raise  # named already
        cls = type(exc) if isinstance(exc, TenfoldError) else FormatError
        detail = str(exc) if not isinstance(exc, FileNotFoundError) else "missing file"
        raise E(cls, where, detail=detail) from exc


def _check_digest(arr: np.ndarray, digest: str | None, where: str) -> None:
    if digest is None:
        return
    algo, _, want = digest.partition(":")
    if algo != "xxh3":
        raise E.unsupported(where, field="digest", detail=f"unknown algorithm {algo!r}")
    flat = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    got = xxh3_hex(flat)
    if got != want:
        raise E.integrity(where, field="xxh3 digest", expected=want, got=got)


def box(chunk: Chunk) -> tuple[slice, ...]:
    """The chunk's place in its tensor, as slices."""
    return tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes, strict=True))


def chunk_part(
    picks: list[range], chunk: Chunk
) -> tuple[tuple[slice, ...], tuple[slice, ...]] | None:
    """Where the selection ``picks`` (the positions taken along each axis, in result order)
    meets ``chunk``: the result's region and the chunk's local basic index of it, or None
    when they do not meet."""
    dest, local = [], []
    for p, o, n in zip(picks, chunk.offsets, chunk.sizes, strict=True):
        lo, hi = positions_within(p, o, o + n)
        if lo >= hi:
            return None
        sub = p[lo:hi]
        stop = sub[-1] - o + sub.step
        dest.append(slice(lo, hi))
        local.append(slice(sub[0] - o, stop if stop >= 0 else None, sub.step))
    return tuple(dest), tuple(local)


def positions_within(p: range, lo: int, hi: int) -> tuple[int, int]:
    """``[a, b)``: the positions ``k`` of ``p`` (a range, either direction) whose value
    ``p[k]`` lies in ``[lo, hi)`` (``a >= b`` when none does)."""
    if p.step > 0:
        a = -((p.start - lo) // p.step)  # ceil((lo - start) / step)
        b = -((p.start - hi) // p.step)
    else:
        a = (p.start - hi) // -p.step + 1
        b = (p.start - lo) // -p.step + 1
    return max(a, 0), min(b, len(p))


class DcpReader(BaseReader):
    """A checkpoint directory as one consolidated read-only ``Mapping`` of its tensors (the
    reader protocol of :mod:`tenfold.core.reader`): ``reader[fqn]`` assembles the tensor
    from its chunks (every chunk read whole, its digest checked); ``read(fqn, index)`` reads
    only the chunks a basic slice touches. Non-tensor entries are not keys (``non_tensors``;
    ``raw_entry(name)`` gives their bytes: DCP's pickles, never unpickled here).

    ``verify_partial`` (default True) is :class:`~tenfold.interop.dcp.TenfoldStorageReader`'s
    rule for a slice that needs part of a chunk: read the chunk whole and check its digest
    first, or (False) read only that part, checked for bounds, shape and dtype only. Other
    options go to the rank files' readers."""

    fmt = FMT

    def __init__(self, path: Any, *, verify_partial: bool = True, **options: Any) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise E.unsupported("checkpoint", detail="must be opened from a directory's path")
        self.path = os.fspath(path)
        self.storage_options = options.get("storage_options")
        self.doc = read_document(self.path, self.storage_options)
        self.rank_files = RankFiles(self.path, self.doc, options)
        self.verify_partial = bool(verify_partial)
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

    def tensor_entry(self, name: str) -> Entry:
        """The document's entry of tensor ``name`` (``KeyError`` for any other name)."""
        e = self.doc.entries.get(name)
        if e is None or not e.is_tensor:
            raise KeyError(f"{FMT}: no tensor named {name!r}")
        return e

    def read(self, name: str, index: Any = None, **kw: Any) -> Any:
        """Tensor ``name`` assembled from its chunks, or the basic slice ``index`` of it
        (``int``, ``slice`` with any step, ``...``, or a tuple of those) assembled from the
        chunks it touches only, into an array of the selected region's size.

        What is checked: every chunk the result covers whole (and every chunk when ``index``
        is None) is read whole and its digest checked. A chunk the slice needs only part of
        is, with ``verify_partial`` (default), read whole from its rank file and its digest
        checked before the part is copied out; without it only that part is read (its bounds,
        the stored shape, dtype and byte range checked against the document, but not the
        digest, which covers the whole chunk). Chunks the slice does not touch are not read,
        so damage there goes unseen (``verify()`` reads everything)."""
        if self._closed:
            raise ValueError("I/O operation on a closed file")
        e = self.tensor_entry(name)
        if index is None:
            out = np.empty(e.shape, e.np_dtype)
            for c in e.chunks:
                if c.numel:
                    out[box(c)] = self.rank_files.read(name, c)
            return out
        key = plan(FMT, f"tensor {name!r}", tuple(e.shape), index).key
        picks = [
            range(k, k + 1) if isinstance(k, int) else range(*k.indices(n))
            for k, n in zip(key, e.shape, strict=True)
        ]
        out = np.empty(tuple(len(p) for p in picks), e.np_dtype)
        for c in e.chunks:
            part = chunk_part(picks, c)
            if part is None:
                continue  # not touched: not read
            dest, local = part
            if all(d.stop - d.start == n for d, n in zip(dest, c.sizes, strict=True)):
                out[dest] = self.rank_files.read(name, c)[local]  # covered whole
            else:
                out[dest] = self.rank_files.read(name, c, local, verify=self.verify_partial)
        items = index if isinstance(index, tuple) else (index,)
        drop = tuple(0 if isinstance(k, int) else slice(None) for k in key)
        # as NumPy: integers on every axis give a scalar, unless the index holds an ellipsis
        return out[drop + (Ellipsis,)] if any(i is Ellipsis for i in items) else out[drop]

    def raw_entry(self, name: str) -> bytes:
        """The stored bytes of non-tensor entry ``name`` (digest checked)."""
        e = self.doc.entries[name]
        return bytes(self.rank_files.read(name, e.chunks[0]))

    def info(self, name: str) -> TensorInfo:
        e = self.tensor_entry(name)
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

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self.rank_files.close()

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
