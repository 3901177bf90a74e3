"""The tensors of a FOLD / MIND file as one reader: what :func:`tenfold.open` gives.

:class:`TensorView` holds the arrays of the file's tensor chunks (``STEN`` and ``NPZ0``), named
as :func:`tenfold.fold.load` names them: with one tensor chunk, its arrays' names; with several,
``"<chunk>/<array>"``, and two arrays that would get the same name are refused, naming both.
The chunks stay available through the FOLD API: :attr:`TensorView.chunks_reader` is the
:class:`~tenfold.fold.Reader` (``tenfold.fold.open``) of the same opened file.

Uncompressed ``STEN`` chunks are listed from their safetensors headers alone; any other tensor
chunk is decoded (and checked) when the view is opened, to learn its names. A whole read
decodes and checks the tensor's chunk once (CRC-32C, SHA-256, Reed-Solomon repair) and keeps
its arrays, read-only, until :meth:`close`; a slice of a tensor of an uncompressed ``STEN`` chunk
not yet read whole reads only its rows, checking no chunk digest (as
:meth:`Reader.read_tensor` with ``verify=False``).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ...core.dtypes import canonical
from ...core.reader import MappedReader, TensorInfo
from ...errors import TenfoldError, UnsupportedError
from ._spec import FMT, INTERNAL_METADATA, E
from .reader import TENSOR_CTYPES, Reader

__all__ = ["TensorView", "TENSOR_CTYPES", "TensorNames", "tensor_chunks"]

#: ``(dtype tag, shape, begin, end)`` of a tensor of an uncompressed ``STEN`` chunk
_Entry = tuple[str, tuple[int, ...], int, int]


class TensorView(MappedReader):
    """A FOLD / MIND file as a ``Mapping`` of tensor name to array (see the module doc).

    ``options`` are the :class:`~tenfold.fold.Reader`'s (``strict``, ``hmac_key``,
    ``limits``, ``mmap``). A file without a tensor chunk is refused, as ``load`` refuses it.
    """

    fmt = FMT

    def __init__(self, source: Any, **options: Any) -> None:
        self._map(source, FMT, mmap=options.pop("mmap", True))
        self._lock = threading.Lock()
        self._decoded: dict[str, dict[str, np.ndarray]] = {}
        self._tables: dict[str, dict[str, _Entry]] = {}
        self._where: dict[str, tuple[str, str]] = {}
        try:
            #: the FOLD API over the same file: chunks, JSON, payloads, repair
            self.chunks_reader = Reader(self._mf, **options)
            self._list()
        except BaseException:
            self.close()
            raise

    def _list(self) -> None:
        r = self.chunks_reader
        names = TensorNames(tensor_chunks(r))
        for c in names.chunks:
            try:
                table = r.sten_entries(c)
            except TenfoldError:  # a damaged header: the checked (repairing) read decides
                table = None
            if table is not None:
                self._tables[c] = table
            for k in table if table is not None else self._chunk(c):
                names.add(c, k)
        self._where = names.where

    def _chunk(self, chunk: str) -> dict[str, np.ndarray]:
        """The arrays of ``chunk``, decoded and checked once (under the lock), read-only."""
        got = self._decoded.get(chunk)
        if got is not None:
            return got
        with self._lock:
            got = self._decoded.get(chunk)
            if got is None:
                got = self.chunks_reader.read_state_dict(chunk)
                for a in got.values():  # kept and handed out again: never written into
                    if isinstance(a, np.ndarray):
                        a.flags.writeable = False
                self._decoded[chunk] = got
            return got

    def _locate(self, name: str) -> tuple[str, str]:
        try:
            return self._where[name]
        except KeyError:
            raise KeyError(f"{FMT}: no tensor named {name!r}") from None

    # -- the reader protocol (tenfold.core.reader) ----------------------------------------------
    def _keys(self) -> dict[str, tuple[str, str]]:
        return self._where

    def read(self, name: str, index: Any = None) -> np.ndarray:
        """Tensor ``name`` (its chunk decoded and checked once), or its basic slice
        ``index`` (rows only, unchecked, for an uncompressed ``STEN`` chunk not yet decoded)."""
        c, k = self._locate(name)
        if index is not None and c in self._tables and c not in self._decoded:
            return self.chunks_reader.read_tensor(c, k, index, verify=False)
        arr = self._chunk(c)[k]
        if index is None:
            return arr
        from ...core.slicing import plan

        return np.asarray(plan(FMT, f"chunk {c!r} tensor {k!r}", arr.shape, index).apply(arr))

    def info(self, name: str) -> TensorInfo:
        """The tensor's record: from its chunk's safetensors header (an uncompressed ``STEN``
        chunk) or its decoded array; ``extras`` names the chunk and the array in it."""
        c, k = self._locate(name)
        chunk = self.chunks_reader.chunk(c)
        extras = {"chunk": c, "array": k, "ctype": chunk.ctype}
        table = self._tables.get(c)
        if table is not None:
            from ..safetensors.writer import DTYPES

            tag, shape, begin, end = table[k]
            return TensorInfo(name, tag, tuple(shape), (begin, end), "raw", None, extras,
                              DTYPES.get(tag))  # fmt: skip
        a = self._chunk(c)[k]
        return TensorInfo(name, _dtype_name(a.dtype), tuple(a.shape), None, chunk.compression,
                          None, extras, a.dtype)  # fmt: skip

    def verified(self, name: str) -> bool:
        """Whether the chunk holding ``name`` has been read whole and checked."""
        return self._locate(name)[0] in self._decoded

    @property
    def metadata(self) -> dict[str, Any]:
        """The file's metadata without the index's own bookkeeping (``chunk_hashes``...)."""
        md = self.chunks_reader.metadata or {}
        return {k: v for k, v in md.items() if k not in INTERNAL_METADATA}

    def verify(self) -> Any:
        """The chunk-by-chunk report of :func:`tenfold.fold.verify` (every chunk, not only
        the tensor chunks)."""
        return self.chunks_reader.verify()

    def close(self) -> None:
        """Release the file (arrays already returned stay valid)."""
        self._decoded = {}
        super().close()


def tensor_chunks(r: Reader) -> list[str]:
    """The names of the tensor chunks (:data:`TENSOR_CTYPES`) of the file ``r`` reads, in
    file order; a file without one is refused."""
    chunks = [c.name for c in r.chunks if c.ctype in TENSOR_CTYPES]
    if not chunks:
        raise E.unsupported(r.path or "<buffer>", detail="no tensor chunk (STEN or NPZ0)")
    return chunks


class TensorNames:
    """The names the arrays of the tensor chunks ``chunks`` get (:func:`tenfold.fold.load`'s
    and :class:`TensorView`'s): with one chunk, its arrays' names; with several,
    ``"<chunk>/<array>"``. :meth:`add` refuses a name given twice (chunk ``x`` array ``y/z``
    and chunk ``x/y`` array ``z``), naming both; :attr:`where` maps each name to its
    ``(chunk, array)``."""

    def __init__(self, chunks: list[str]) -> None:
        self.chunks = chunks
        self.where: dict[str, tuple[str, str]] = {}

    def add(self, chunk: str, array: str) -> str:
        """The name of array ``array`` of chunk ``chunk`` (recorded in :attr:`where`)."""
        key = array if len(self.chunks) == 1 else f"{chunk}/{array}"
        if key in self.where:
            c0, k0 = self.where[key]
            raise E.unsupported(
                f"chunk {chunk!r} array {array!r}",
                detail=f"named {key!r}, as chunk {c0!r} array {k0!r} is; read one chunk at a "
                "time (tenfold.fold.load(path, chunk=...))",
            )
        self.where[key] = (chunk, array)
        return key


def _dtype_name(dt: np.dtype) -> str:
    try:
        return canonical(dt)
    except UnsupportedError:  # an NPZ0 array of a type tenfold has no name for
        return str(dt)
