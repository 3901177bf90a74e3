"""zTensor 0.1.0 writer: streams blobs to a temporary file, then renames it into place.

For the same dense raw tensors the output is byte-identical to ztensor 0.1.4: blobs in the
order added, each at the next multiple of 64 (zero padding, also before an empty tensor), the
CBOR index right after the last blob, maps written indefinite-length with keys in 0.1.4's order.
Memory use does not grow with the file: each array is written from its own memory (in bounded
slices when it must be converted first) and only the index is kept.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...core import cbor, parallel, prealloc
from ...core.bounds import padding
from ...core.buffers import byte_view, exact_pieces
from ...core.compression import zstd_compress
from ...core.dtypes import canonical
from ...core.prealloc import preallocate
from ...errors import EncodeError, describe
from . import _checksum
from ._spec import ALIGN, DTYPES, FMT, KNOWN_KEYS, MAGIC, E
from ._v2values import le_pieces
from ._writerbase import AtomicFileWriter, size_refusal
from .sparse import SparseTensor, from_input, write_components

__all__ = ["Writer", "save"]

_ZEROS = bytes(ALIGN)


class Writer(AtomicFileWriter):
    """Write a zTensor 0.1.0 file atomically.

    Use as a context manager; the file appears under ``path`` only when the block exits
    without an exception (an existing file is replaced then, and survives any failure).

    Parameters
    ----------
    path
        Destination.
    fsync
        Flush to stable storage before the rename (default True).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "w.zt")
    >>> with Writer(path) as w:
    ...     w.add("a", np.ones(3, np.float32), checksum="crc32c")
    ...     w.add("b", np.arange(4, dtype=np.int64), encoding="zstd", attrs={"unit": "m"})
    >>> os.path.getsize(path) > 0
    True
    """

    def __new__(cls, path: str | os.PathLike[str], *, generation: int | str = 0, **options: Any):
        """``generation=2`` (or ``"v2"``) gives a :class:`~tenfold.ztensor.v2writer.V2Writer`;
        the default ``0`` (or ``"0.1.0"``) this 0.1.0 writer."""
        if generation in (2, "2", "v2"):
            if options.pop("append", False):
                from ._append import V2Appender

                return V2Appender(path, **options)
            from .v2writer import V2Writer

            return V2Writer(path, **options)
        if generation not in (0, "0", "0.1.0"):
            raise ValueError(f"zt: generation must be 0 (0.1.0) or 2 (v2), not {generation!r}")
        return super().__new__(cls)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = True,
        generation: int | str = 0,
        threads: int = 0,
    ) -> None:
        #: the thread that checksums a large piece while it is written (started on first use)
        self._hashing = parallel.Pool(1, "tenfold-zt-sum")
        self._open(path, fsync)
        #: zstd worker threads per tensor (``encoding="zstd"``); 0 = single-threaded, the
        #: frames ztensor 0.1.4 writes; more: other (equally valid) frames, made faster
        self.threads = threads
        self._f.write(MAGIC)
        self._pos = self._handed = len(MAGIC)  # with fsync, bytes before _handed are on their way
        self._entries: list[dict[str, Any]] = []
        self._names: set[str] = set()

    # -- public -------------------------------------------------------------------------------
    def add(
        self,
        name: str,
        array: Any,
        *,
        encoding: str = "raw",
        level: int = 3,
        checksum: str | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one tensor (dense array-like, :class:`SparseTensor` or SciPy CSR/COO)."""
        self._check_open()
        if not isinstance(name, str):
            raise E.name_not_str("tensor", name)
        if name in self._names:
            raise EncodeError(
                describe(FMT, f"tensor {name!r}", field="name", detail="duplicate name")
            )
        if encoding not in ("raw", "zstd"):
            raise EncodeError(
                describe(
                    FMT,
                    f"tensor {name!r}",
                    field="encoding",
                    detail="unknown",
                    expected="raw | zstd",
                    got=encoding,
                )
            )
        algo = _checksum.check_algorithm(checksum)
        extra = self._check_attrs(name, attrs)
        sparse = from_input(array)
        start = self._pos
        try:
            if sparse is not None:
                entry = self._add_sparse(name, sparse, encoding, level, algo)
            else:
                entry = self._add_dense(name, array, encoding, level, algo)
        except EncodeError:
            if self._pos != start:  # bytes were written: the offsets no longer line up
                self._failed = E.encode(f"tensor {name!r}", detail="partly written")
            raise
        except BaseException as exc:
            self._failed = exc
            raise
        entry.update(extra)
        self._names.add(name)
        self._entries.append(entry)

    def add_sparse(
        self,
        name: str,
        sparse_format: str,
        shape: Sequence[int],
        values: Any,
        *,
        indptr: Any = None,
        indices: Any = None,
        coords: Any = None,
        **options: Any,
    ) -> None:
        """Append a sparse tensor from explicit arrays.

        ``sparse_format`` is ``"csr"`` (2-D; give ``indptr`` of rows + 1 and ``indices`` of
        nnz column indices) or ``"coo"`` (any rank; give ``coords`` of shape ndim x nnz).
        ``options`` are those of :meth:`add`.
        """
        t = SparseTensor(
            sparse_format,
            tuple(int(d) for d in shape),
            np.asarray(values),
            indices=indices,
            indptr=indptr,
            coords=coords,
        )
        self.add(name, t, **options)

    def add_raw(
        self,
        name: str,
        dtype: Any,
        shape: Sequence[int],
        pieces: Iterable[Any],
        *,
        checksum: str | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> str | None:
        """Append a dense tensor that is not in memory, from its little-endian C-order bytes
        given as an iterable of buffers (e.g. blocks read from another file or a socket). The
        pieces are written and checksummed as they come and never joined, so memory stays at
        one piece. More or fewer bytes than ``dtype`` and ``shape`` take is an
        :class:`EncodeError` (raised before an extra byte is written), after which the writer
        is failed and the file is never committed. Returns the hex digest of the ``checksum``
        algorithm (``None`` without one). The bytes are those :meth:`add` writes for the same
        array (the same call as :meth:`V2Writer.add_raw <tenfold.ztensor.V2Writer.add_raw>`)."""
        self._check_open()
        if not isinstance(name, str) or name in self._names:
            raise EncodeError(
                describe(FMT, f"tensor {name!r}", field="name", detail="duplicate or not a str")
            )
        dname = self._dtype_name(name, np.dtype(dtype))
        algo = _checksum.check_algorithm(checksum)
        extra = self._check_attrs(name, attrs)
        shape = [int(d) for d in shape]
        if any(d < 0 for d in shape):
            raise EncodeError(describe(FMT, f"tensor {name!r}", field="shape", got=shape))
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        offset = self._align()
        preallocate(self._f.fileno(), self._pos, nbytes)
        try:
            size, digest = self._stream(name, pieces, nbytes, algo)
        except BaseException as exc:
            self._failed = exc
            raise
        self._pos += size
        self._hand_off()
        entry: dict[str, Any] = {
            "name": name,
            "offset": offset,
            "size": size,
            "dtype": dname,
            "layout": "dense",
            "shape": shape,
            "encoding": "raw",
        }
        if np.dtype(dtype).itemsize > 1:
            entry["data_endianness"] = "little"
        if algo:
            entry["checksum"] = _checksum.render(algo, digest)  # type: ignore[arg-type]
        entry.update(extra)
        self._names.add(name)
        self._entries.append(entry)
        return digest

    def _stream(
        self, name: str, pieces: Iterable[Any], nbytes: int, algo: str | None
    ) -> tuple[int, str | None]:
        """Write ``pieces`` (exactly ``nbytes`` bytes) as they come; ``(size, digest)``."""
        summer = _checksum.Summer(algo, self._hashing)
        size = 0
        for mv in exact_pieces(
            pieces, nbytes, size_refusal(FMT, f"tensor {name!r}", "size", nbytes)
        ):
            summer.write(self._f, mv)
            size += mv.nbytes
        return size, summer.hexdigest()

    def _release(self) -> None:
        self._hashing.close()

    def _finish(self) -> None:
        """The index and its size: the end of a 0.1.0 file."""
        index = cbor.encode(self._entries, indefinite_maps=True)
        self._f.write(index)
        self._f.write(len(index).to_bytes(8, "little"))

    # -- internals ----------------------------------------------------------------------------
    def _check_attrs(self, name: str, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        if not attrs:
            return {}
        out = {}
        for k, v in attrs.items():
            if not isinstance(k, str):
                raise EncodeError(
                    describe(
                        FMT,
                        f"tensor {name!r}",
                        field="attrs",
                        detail="non-string key",
                        expected="str",
                        got=repr(k),
                    )
                )
            if k in KNOWN_KEYS:
                raise EncodeError(
                    describe(
                        FMT,
                        f"tensor {name!r}",
                        field="attrs",
                        detail=f"key {k!r} is reserved by the format",
                    )
                )
            try:
                cbor.encode(v)
            except (TypeError, ValueError) as exc:
                raise EncodeError(
                    describe(
                        FMT,
                        f"tensor {name!r}",
                        field=f"attrs[{k!r}]",
                        detail=f"not CBOR-encodable ({exc})",
                    )
                ) from None
            out[k] = v
        return out

    def _align(self) -> int:
        pad = padding(self._pos, ALIGN)
        if pad:
            self._f.write(_ZEROS[:pad])
            self._pos += pad
        return self._pos

    def _write_blob(
        self, a: np.ndarray, encoding: str, level: int, algo: str | None
    ) -> tuple[int, int, str | None]:
        """Write ``a`` (any layout/byte order) as little-endian bytes; return offset, size, sum."""
        offset = self._align()
        if encoding == "zstd":
            data = zstd_compress(_le_contiguous(a), level, threads=self.threads)
            self._f.write(data)
            size = len(data)
            digest = _checksum.compute(algo, data) if algo else None
        else:
            size, digest = self._write_raw(a, algo)
        self._pos += size
        self._hand_off()
        return offset, size, digest

    def _hand_off(self) -> None:
        """With fsync: start writing what was written since the last call to the disk, once
        that is :data:`~tenfold.core.prealloc.WRITEBACK_STEP` bytes or more (the final fsync
        then waits for less)."""
        if self._fsync and self._pos - self._handed >= prealloc.WRITEBACK_STEP:
            prealloc.start_writeback(self._f.fileno(), self._handed, self._pos - self._handed)
            self._handed = self._pos

    def _write_raw(self, a: np.ndarray, algo: str | None) -> tuple[int, str | None]:
        preallocate(self._f.fileno(), self._pos, a.nbytes)
        summer = _checksum.Summer(algo, self._hashing)
        size = 0
        for piece in le_pieces(a):
            mv = byte_view(piece)
            summer.write(self._f, mv)
            size += mv.nbytes
        return size, summer.hexdigest()

    def _dtype_name(self, name: str, dtype: np.dtype) -> str:
        try:
            dname = canonical(dtype)
        except Exception:
            dname = str(dtype)
        if dname not in DTYPES:
            raise EncodeError(
                describe(
                    FMT,
                    f"tensor {name!r}",
                    field="dtype",
                    detail="cannot be stored",
                    expected=" | ".join(DTYPES),
                    got=str(dtype),
                )
            )
        return dname

    def _add_dense(
        self, name: str, array: Any, encoding: str, level: int, algo: str | None
    ) -> dict[str, Any]:
        a = np.asarray(array)
        dname = self._dtype_name(name, a.dtype)
        offset, size, digest = self._write_blob(a, encoding, level, algo)
        entry: dict[str, Any] = {
            "name": name,
            "offset": offset,
            "size": size,
            "dtype": dname,
            "layout": "dense",
            "shape": [int(d) for d in a.shape],
            "encoding": encoding,
        }
        if encoding == "raw" and a.dtype.itemsize > 1:
            entry["data_endianness"] = "little"
        if algo:
            entry["checksum"] = _checksum.render(algo, digest)  # type: ignore[arg-type]
        return entry

    def _add_sparse(
        self, name: str, t: SparseTensor, encoding: str, level: int, algo: str | None
    ) -> dict[str, Any]:
        data = np.asarray(t.data)
        dname = self._dtype_name(name, data.dtype)
        shape, nnz, comps = write_components(name, t, data)
        offset, size, digest = self._write_blob(data, encoding, level, algo)
        entry: dict[str, Any] = {
            "name": name,
            "offset": offset,
            "size": size,
            "dtype": dname,
            "layout": "sparse",
            "shape": shape,
            "encoding": encoding,
        }
        if encoding == "raw" and data.dtype.itemsize > 1:
            entry["data_endianness"] = "little"
        if algo:
            entry["checksum"] = _checksum.render(algo, digest)  # type: ignore[arg-type]
        entry["sparse_format"] = t.format
        entry["nnz"] = nnz
        for label, arr in comps:
            off, sz, _ = self._write_blob(arr, encoding, level, None)
            entry[f"{label}_offset"] = off
            entry[f"{label}_size"] = sz
        return entry


def _le_dtype(dt: np.dtype) -> np.dtype:
    if dt.itemsize > 1 and dt.byteorder == ">":
        return dt.newbyteorder("<")
    return dt


def _le_contiguous(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=_le_dtype(a.dtype))


class _Unset:
    """``save``'s ``checksum`` when it is not given."""

    def __repr__(self) -> str:
        return "<not given>"


_UNSET: Any = _Unset()


def v2_checksum_refusal(path: Any, checksum: Any) -> EncodeError:
    """The error for a ``checksum`` given for a zTensor v2 file (every path that writes one
    raises it before anything is written)."""
    return E.encode(
        os.fspath(path),
        field="checksum",
        detail=f"{checksum!r} does not apply to zTensor v2 (every part carries an xxh3 "
        "digest); leave checksum out",
    )


def _encoding_of(compress: Any, encoding: str) -> str:
    """The ``encoding`` that ``compress`` (``"zstd"`` or ``None``) asks for."""
    if compress not in ("zstd", None):
        raise E.encode("save", field="compress", expected="'zstd' or None", got=repr(compress))
    want = "raw" if compress is None else "zstd"
    if encoding not in ("raw", want):
        raise E.encode(
            "save",
            field="compress",
            detail=f"encoding={encoding!r} given too",
            expected=f"encoding {want!r} or none given",
            got=repr(compress),
        )
    return want


def save(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    encoding: str = "raw",
    level: int = 3,
    checksum: Any = _UNSET,
    fsync: bool = True,
    generation: int | str = 0,
    metadata: Mapping[str, Any] | None = None,
    compress: Any = _UNSET,
    **v2_options: Any,
) -> None:
    """Write ``tensors`` (name -> array) to ``path`` atomically, in mapping order.

    ``compress`` is :func:`tenfold.save`'s name for ``encoding``: ``"zstd"`` or ``None``
    (raw); given with another ``encoding`` it is an :class:`EncodeError`.

    ``metadata`` (file metadata, like safetensors' ``__metadata__``): zTensor 0.1.0 has no
    file-level map, so it goes into the first tensor's attributes under ``__metadata__``
    (where ``tenfold convert`` puts it and reads it back); in v2 it becomes the file
    attributes. Metadata with no tensor to carry it is refused.

    ``checksum`` (0.1.0): ``None`` (the default), ``"crc32c"`` or ``"sha256"`` in every
    tensor's entry.

    ``generation=2`` writes zTensor v2 instead (names sorted, canonical form unless
    ``canonical=False``; ``encoding="zstd"`` means ``zt.zstd-seekable/1``). Every v2 part
    carries an xxh3 digest, so ``checksum`` has nothing to choose there: giving it (any
    value, ``None`` included) is an :class:`EncodeError`, raised before the file is
    created. ``canonical``, ``align`` and ``attributes`` are v2 options; any other keyword
    is a ``TypeError``.
    """
    if not isinstance(tensors, Mapping):
        raise EncodeError(
            describe(
                FMT,
                "save",
                detail="tensors must be a mapping",
                expected="Mapping[str, array]",
                got=type(tensors).__name__,
            )
        )
    if metadata is not None and not isinstance(metadata, Mapping):
        raise EncodeError(
            describe(
                FMT, "save", field="metadata", expected="a mapping", got=type(metadata).__name__
            )
        )
    if compress is not _UNSET:
        encoding = _encoding_of(compress, encoding)
    if generation in (2, "2", "v2"):
        _save_v2(path, tensors, encoding, checksum, fsync, metadata, v2_options)
        return
    if v2_options:
        raise TypeError(
            f"ztensor.save() got unexpected keyword arguments: {', '.join(sorted(v2_options))} "
            "(canonical, align and attributes are zTensor v2 options: pass generation=2)"
        )
    if metadata and not tensors:
        raise EncodeError(
            describe(
                FMT,
                "save",
                field="metadata",
                detail="zTensor 0.1.0 keeps file metadata on the first tensor and there is none",
            )
        )
    checksum = None if checksum is _UNSET else checksum
    with Writer(path, fsync=fsync) as w:
        for i, (name, value) in enumerate(tensors.items()):
            attrs = {"__metadata__": dict(metadata)} if i == 0 and metadata else None
            w.add(name, value, encoding=encoding, level=level, checksum=checksum, attrs=attrs)


def _save_v2(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    encoding: str,
    checksum: Any,
    fsync: bool,
    metadata: Mapping[str, Any] | None,
    v2_options: dict[str, Any],
) -> None:
    """:func:`save` with ``generation=2``."""
    from .v2writer import V2Writer

    if checksum is not _UNSET:
        raise v2_checksum_refusal(path, checksum)

    if metadata:
        if v2_options.get("attributes") is not None:
            raise EncodeError(
                describe(
                    FMT,
                    "save",
                    field="metadata",
                    detail="give metadata or attributes, not both",
                )
            )
        v2_options["attributes"] = dict(metadata)
    if encoding != "raw":
        v2_options.setdefault("canonical", False)
    with V2Writer(path, fsync=fsync, **v2_options) as w2:
        for name in sorted(tensors, key=lambda n: n.encode()):
            w2.add(name, tensors[name], encoding=None if encoding == "raw" else encoding)
