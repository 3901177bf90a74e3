"""zTensor v2 writer: streams parts to a temporary file and renames it into place.

The output is what ztensor 2.1.2's writer produces for the same objects, attributes, encodings
and alignment, byte for byte:

* canonical form (the default): names added in ascending order (UTF-8 byte order) and in
  Unicode NFC, raw parts only, every part placed at the next multiple of 64 KiB from 65536;
* ``canonical=False``: any name order, ``align`` any multiple of 4096 (default 65536), parts
  may use ``encoding="zt.zstd-seekable/1"`` (1 MiB frames, zstd level 3, frame checksums);
* within an object, parts are written in ascending part-name order; a raw part whose bytes
  equal an earlier raw part's shares that blob (checked on the bytes, not only the hash), which
  is also where every empty raw part points; encoded parts are never shared;
* every part carries an ``xxh3`` digest of its decoded bytes; the manifest is deterministic
  CBOR, placed at the next aligned offset after the last blob, and the 40-byte footer follows it.

Memory use does not grow with the file: raw parts are written from the caller's memory (in
bounded slices when a conversion is needed) or from a stream of chunks (:meth:`V2Writer.add_raw`),
and only the manifest is kept.

Every object is checked, before a byte of it is written, by the function the reader checks it
with at open (:func:`._v2manifest.check_entry`: names, shape, part types, layout rules): the
writer never writes what the reader refuses. The raw-part placement and writing is
:mod:`._v2blobs`, the value conversions :mod:`._v2values`.
"""

from __future__ import annotations

import math
import os
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...core.atomic import atomic_write
from ...core.checksums import xxh3_64
from ...errors import EncodeError, TenfoldError, describe, factory
from . import _dcbor
from ._v2blobs import BlobWriter
from ._v2layout import check_type_data
from ._v2manifest import check_entry
from ._v2spec import (
    ALIGN,
    CANONICAL_ALIGN,
    COO,
    CSR,
    DENSE,
    DTYPES,
    MAGIC,
    ZSTD_SEEKABLE,
    check_name,
    size_of,
)
from ._v2values import footer_bytes, le_pieces, pack_f4, storage_of
from .sparse import SparseTensor, from_input

__all__ = ["V2Writer", "storage_of", "footer_bytes", "le_pieces", "pack_f4", "save_sharded"]

FMT = "zt"
E = factory(FMT)


class V2Writer(BlobWriter):
    """Write a zTensor v2 file atomically (see the module doc for the exact layout).

    Parameters
    ----------
    path
        Destination; the file appears there only when the writer closes without error.
    canonical
        Canonical form (64 KiB placement, sorted NFC names, raw parts). Default True.
    align
        Blob alignment when ``canonical=False``: a multiple of 4096 (default 65536).
    attributes
        File attributes (a map with text keys), also settable with :meth:`set_attributes`.
    fsync
        Flush to stable storage before the rename (default True).

    Examples
    --------
    >>> import numpy as np, tempfile, os, tenfold.ztensor as zt
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> with zt.Writer(path, generation=2) as w:
    ...     w.add("bias", np.zeros(4, np.float32))
    ...     w.add("weight", np.ones((2, 4), np.float32))
    >>> zt.detect(path), zt.load(path)["weight"].shape
    ('v2', (2, 4))
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        canonical: bool = True,
        align: int | None = None,
        attributes: Mapping[str, Any] | None = None,
        fsync: bool = True,
    ) -> None:
        if canonical and align not in (None, CANONICAL_ALIGN):
            raise EncodeError(
                describe(
                    FMT,
                    "writer",
                    field="align",
                    detail="canonical form places blobs at "
                    "65536; pass canonical=False to choose another alignment",
                    got=align,
                )
            )
        align = CANONICAL_ALIGN if align is None else align
        if type(align) is not int or align <= 0 or align % ALIGN:
            raise EncodeError(
                describe(FMT, "writer", field="align", expected="a multiple of 4096", got=align)
            )
        self.path = os.fspath(path)
        self.canonical = canonical
        self.align = align
        self._attributes: dict[str, Any] | None = None
        if attributes is not None:
            self.set_attributes(attributes)
        self._open(self.path, fsync)
        self._f.write(MAGIC)
        self._pos = len(MAGIC)
        self._objects: dict[str, dict[str, Any]] = {}
        self._last: str | None = None
        self._blobs: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._hasher = None

    # -- public -------------------------------------------------------------------------------
    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        """File attributes (replaces earlier ones)."""
        self._attributes = self._check_attrs("file attributes", attributes)

    def add(
        self,
        name: str,
        array: Any,
        *,
        encoding: str | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        """Add one tensor: a dense array (any NumPy/ml_dtypes type with a v2 mapping; ``bool``
        is stored as ``u8``/``bool``, ``float4_e2m1fn`` packed two per byte), or a sparse one
        (:class:`SparseTensor`, SciPy CSR/COO) as ``zt.sparse_csr/1`` / ``zt.sparse_coo/1``.

        ``encoding`` is None (raw) or ``"zt.zstd-seekable/1"`` (``"zstd"`` is accepted too).
        """
        sparse = from_input(array)
        if sparse is not None:
            self._add_sparse(name, sparse, encoding, attrs)
            return
        a = np.asarray(array)
        dtype, ltype = storage_of(a.dtype, f"tensor {name!r}")
        if ltype == "f4_e2m1":
            a = pack_f4(a)
            shape = list(np.shape(array))
        else:
            shape = [int(d) for d in a.shape]
        self.add_object(
            name,
            shape,
            {"data": (a, dtype, ltype)},
            layout=DENSE,
            attributes=attrs,
            encoding=encoding,
        )

    def add_object(
        self,
        name: str,
        shape: Sequence[int],
        parts: Mapping[str, Any],
        *,
        layout: str = DENSE,
        attributes: Mapping[str, Any] | None = None,
        encoding: str | None = None,
    ) -> None:
        """Add an object of any layout. ``parts`` maps a part name to an array (stored as its
        own type) or to ``(array, dtype, type)`` giving the storage dtype and logical type of
        bytes taken as they are (e.g. ``(scales_u8, "u8", "f8_e8m0")`` for ``zt.mx/1``)."""
        self._check_open()
        what = f"object {name!r}"
        self._check_name(name)
        enc = self._encoding(what, encoding)
        prepared: dict[str, tuple[np.ndarray, str, str | None]] = {}
        for role in sorted(parts):
            check_name(role, what, "part name")
            prepared[role] = _part_value(what, role, parts[role])
        sizes = {r: (dt, lt, _nbytes(a)) for r, (a, dt, lt) in prepared.items()}
        entry = self._checked_entry(name, shape, layout, attributes, sizes)
        start = self._pos
        try:
            for role, (arr, dtype, ltype) in prepared.items():
                entry["parts"][role] = self._write_part(arr, dtype, ltype, enc)
        except BaseException as exc:
            self._fail(exc, name, start)
            raise
        self._record(name, entry)

    def add_raw(
        self,
        name: str,
        dtype: Any,
        shape: Sequence[int],
        pieces: Iterable[Any],
        *,
        attrs: Mapping[str, Any] | None = None,
    ) -> str:
        """Add a dense tensor that is not in memory, from its bytes as stored (little-endian,
        C order; ``float4_e2m1fn`` packed two to a byte) given as an iterable of buffers (e.g.
        blocks read from another file or a socket). Each piece is written and hashed as it
        comes and never joined to another, so memory stays at one piece; ``bool`` bytes must
        be 0 or 1. More or fewer bytes than ``dtype`` and ``shape`` take is an
        :class:`EncodeError` (raised before an extra byte is written), after which the writer
        is failed and the file is never committed. The result is byte-identical to
        :meth:`add` of the same array. ``float4_e2m1fn`` comes packed as the file stores it:
        two codes a byte, low nibble first, ``ceil(n / 2)`` bytes, the high nibble of the last
        byte zero when ``n`` is odd (checked). Returns the part's digest (``"xxh3:<hex>"``).

        >>> import numpy as np, tempfile, os, tenfold.ztensor as zt
        >>> path = os.path.join(tempfile.mkdtemp(), "s.zt")
        >>> with zt.Writer(path, generation=2) as w:
        ...     d = w.add_raw("w", np.float32, (2, 2), [b"\\0" * 8, b"\\0" * 8])
        >>> zt.load(path)["w"].tolist(), d
        ([[0.0, 0.0], [0.0, 0.0]], 'xxh3:...')
        """
        self._check_open()
        what = f"object {name!r}"
        self._check_name(name)
        dt, lt = storage_of(np.dtype(dtype), f"tensor {name!r}")
        dims = _dims(what, shape)
        length = size_of(dt, lt, math.prod(dims))
        assert length is not None
        entry = self._checked_entry(name, dims, DENSE, attrs, {"data": (dt, lt, length)})
        start = self._pos
        try:
            if length == 0:
                entry["parts"]["data"] = self._write_part(np.empty(0, np.uint8), dt, lt, None)
                for piece in pieces:  # nothing may come
                    if memoryview(piece).nbytes:
                        raise EncodeError(describe(FMT, what, field="stream", expected=0,
                                                   got=">= 1"))  # fmt: skip
            else:
                check = _type_check(name, dims, dt, lt, length)
                offset, digest = self._write_stream(pieces, length, what, check)
                entry["parts"]["data"] = _part_entry(dt, lt, offset, length, digest)
        except BaseException as exc:
            self._fail(exc, name, start, always=True)
            raise
        self._record(name, entry)
        return str(entry["parts"]["data"]["digest"])

    def _finish(self) -> None:
        """The manifest and the footer: the end of a v2 file."""
        root: dict[str, Any] = {"objects": self._objects}
        if self._attributes is not None:
            root["attributes"] = self._attributes
        manifest = _dcbor.encode(root)
        moff = self._pad_to_align()
        self._f.write(manifest)
        self._f.write(footer_bytes(moff, len(manifest), xxh3_64(manifest)))

    # -- internals ----------------------------------------------------------------------------
    def _checked_entry(
        self,
        name: str,
        shape: Sequence[int],
        layout: str,
        attributes: Mapping[str, Any] | None,
        sizes: Mapping[str, tuple[str, str | None, int]],
    ) -> dict[str, Any]:
        """The manifest entry of a new object (its parts filled in as they are written),
        refused unless the reader would accept it: the checks the reader makes at open
        (:func:`check_entry`), on the object as it will be recorded, before anything is
        written (each part ``(dtype, type, decoded bytes)`` in ``sizes``)."""
        what = f"object {name!r}"
        if not isinstance(layout, str) or not layout:
            raise EncodeError(describe(FMT, what, field="layout", detail="not a text string"))
        if not sizes:
            raise EncodeError(describe(FMT, what, field="parts", detail="an object needs a part"))
        entry: dict[str, Any] = {"shape": _dims(what, shape), "layout": layout, "parts": {}}
        if attributes is not None:
            checked = self._check_attrs(what, attributes)
            if checked:  # an empty map is left out, as ztensor 2.1.2 leaves it out
                entry["attributes"] = checked
        planned = {
            r: {"dtype": dt, **({"type": lt} if lt is not None else {}), "blob": [ALIGN, n]}
            for r, (dt, lt, n) in sizes.items()
        }
        try:
            check_entry(name, {**entry, "parts": planned})
        except TenfoldError as exc:
            raise E.recast(EncodeError, exc, what) from None
        return entry

    def _fail(self, exc: BaseException, name: str, start: int, always: bool = False) -> None:
        """After a failed add: an :class:`EncodeError` before any byte was written leaves the
        writer usable; anything else fails it (``close`` then discards the file)."""
        if isinstance(exc, EncodeError) and not always:
            if self._pos != start:
                self._failed = E.encode(f"object {name!r}", detail="partly written")
            return
        self._failed = exc

    def _record(self, name: str, entry: dict[str, Any]) -> None:
        self._objects[name] = entry
        self._last = name

    def _check_name(self, name: object) -> None:
        try:
            check_name(name, "writer", "object name")
        except Exception as exc:
            raise E.recast(EncodeError, exc, f"object {name!r}") from None
        assert isinstance(name, str)
        if name in self._objects:
            raise EncodeError(
                describe(FMT, f"object {name!r}", field="name", detail="duplicate name")
            )
        if self.canonical:
            if unicodedata.normalize("NFC", name) != name:
                raise EncodeError(
                    describe(
                        FMT,
                        f"object {name!r}",
                        field="name",
                        detail="canonical form needs NFC names",
                    )
                )
            if self._last is not None and name.encode() < self._last.encode():
                raise EncodeError(
                    describe(
                        FMT,
                        f"object {name!r}",
                        field="name",
                        detail="canonical form needs names added in ascending order "
                        f"(after {self._last!r}); pass canonical=False, or use save()",
                    )
                )

    def _encoding(self, what: str, encoding: str | None) -> str | None:
        if encoding in (None, "raw"):
            return None
        if encoding in ("zstd", ZSTD_SEEKABLE):
            if self.canonical:
                raise EncodeError(
                    describe(
                        FMT,
                        what,
                        field="encoding",
                        detail="canonical form has raw parts only; pass "
                        "canonical=False to compress",
                    )
                )
            return ZSTD_SEEKABLE
        raise EncodeError(
            describe(FMT, what, field="encoding", expected=f"None | {ZSTD_SEEKABLE}", got=encoding)
        )

    def _check_attrs(self, what: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(attrs, Mapping):
            raise EncodeError(describe(FMT, what, field="attributes", detail="not a mapping"))
        out = {}
        for k, v in attrs.items():
            try:
                check_name(k, what, "attribute key")
                _dcbor.encode(v)
            except (TypeError, ValueError) as exc:
                raise EncodeError(
                    describe(FMT, what, field=f"attributes[{k!r}]", detail=str(exc))
                ) from None
            out[k] = v
        return out

    def _add_sparse(
        self, name: str, t: SparseTensor, encoding: str | None, attrs: Mapping[str, Any] | None
    ) -> None:
        values = np.asarray(t.data)
        if values.ndim != 1:
            raise EncodeError(
                describe(
                    FMT, f"tensor {name!r}", field="values", detail="must be 1-D", got=values.shape
                )
            )
        shape = [int(d) for d in t.shape]
        if t.format == "csr":
            if len(shape) != 2 or t.indptr is None or t.indices is None:
                raise EncodeError(
                    describe(
                        FMT,
                        f"tensor {name!r}",
                        field="csr",
                        detail="needs a 2-D shape, indptr and indices",
                    )
                )
            parts = {
                "values": values,
                "indices": np.ascontiguousarray(t.indices, dtype="<u8"),
                "indptr": np.ascontiguousarray(t.indptr, dtype="<u8"),
            }
            layout = CSR
        else:
            if t.coords is None:
                raise EncodeError(
                    describe(FMT, f"tensor {name!r}", field="coords", detail="coo needs coords")
                )
            parts = {
                "values": values,
                "coords": np.ascontiguousarray(t.coords, dtype="<u8").reshape(-1),
            }
            layout = COO
        self.add_object(name, shape, parts, layout=layout, attributes=attrs, encoding=encoding)


def _dims(what: str, shape: Sequence[int]) -> list[int]:
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims) or len(dims) > 64:
        raise EncodeError(describe(FMT, what, field="shape", got=dims))
    return dims


def _nbytes(a: np.ndarray) -> int:
    return int(a.size) * a.dtype.itemsize


def _part_value(what: str, role: str, value: Any) -> tuple[np.ndarray, str, str | None]:
    """``(array, storage dtype, logical type)`` of one part given to :meth:`V2Writer.add_object`
    (an ``f4_e2m1`` array packed two codes to a byte)."""
    if isinstance(value, tuple):
        arr, dtype, ltype = value
        if dtype not in DTYPES:
            raise EncodeError(describe(FMT, what, field=f"part {role!r} dtype",
                                       expected=" | ".join(DTYPES), got=dtype))  # fmt: skip
        return np.asarray(arr), dtype, ltype
    arr = np.asarray(value)
    dtype, ltype = storage_of(arr.dtype, f"{what} part {role!r}")
    return (pack_f4(arr) if ltype == "f4_e2m1" else arr), dtype, ltype


def _part_entry(dtype: str, ltype: str | None, offset: int, length: int, digest: int) -> dict:
    part: dict[str, Any] = {"dtype": dtype}
    if ltype is not None:
        part["type"] = ltype
    part["blob"] = [offset, length]
    part["digest"] = f"xxh3:{digest:016x}"
    return part


def _type_check(name: str, dims: list[int], dtype: str, ltype: str | None, length: int) -> Any:
    """``check(u8, start)`` for :meth:`V2Writer.add_raw`: a logical type's data rules (bool
    bytes 0 or 1; packed ``f4_e2m1``: the final odd nibble zero, checked on the piece that
    ends the part), as the reader applies them, raised as :class:`EncodeError`."""
    if ltype is None:
        return None
    from ._v2spec import ObjectInfo, PartInfo

    part = PartInfo("data", dtype, ltype, 0, 0)
    info = ObjectInfo(name, tuple(dims), DENSE, {"data": part}, None)
    count = math.prod(dims)

    def check(raw: np.ndarray, start: int) -> None:
        last = count if start + raw.size == length else None
        try:
            check_type_data(info, part, raw, last, start)
        except TenfoldError as exc:
            raise E.recast(EncodeError, exc, f"object {name!r}") from None

    return check


class _ShardWriter(V2Writer):
    """Writes a data shard: the blobs, then an all-zero footer (no manifest)."""

    def _finish(self) -> None:
        self._pad_to_align()
        self._f.write(footer_bytes(0, 0, 0))


def save_sharded(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    shard_bytes: int = 4 << 30,
    align: int = CANONICAL_ALIGN,
    digest: str = "sha256",
    fsync: bool = True,
) -> list[str]:
    """Write a multi-file model: data shards ``<stem>-00001.zt``, ... (blobs only) and the root
    ``path`` (manifest with the shard table: each shard's size and whole-file digest).

    Tensors go in sorted name order into the current shard until it would pass ``shard_bytes``
    (a tensor is never split). Every file is written atomically, the root last. Returns the
    paths written, root first.
    """
    import hashlib

    if digest not in ("sha256", "xxh3"):
        raise EncodeError(
            describe(FMT, "writer", field="digest", expected="sha256 | xxh3", got=digest)
        )
    if type(align) is not int or align <= 0 or align % ALIGN:
        raise EncodeError(
            describe(FMT, "writer", field="align", expected="a multiple of 4096", got=align)
        )
    root_path = os.fspath(path)
    stem = root_path[:-3] if root_path.endswith(".zt") else root_path
    names = sorted(tensors, key=str.encode)
    groups: list[list[str]] = [[]]
    used = 0
    for name in names:
        n = np.asarray(tensors[name]).nbytes if from_input(tensors[name]) is None else 0
        if groups[-1] and used + n > shard_bytes:
            groups.append([])
            used = 0
        groups[-1].append(name)
        used += -(-n // align) * align
    objects: dict[str, Any] = {}
    shards: dict[str, Any] = {}
    written = []
    for i, group in enumerate(groups, 1):
        label = f"{i:05d}"
        spath = f"{stem}-{label}.zt"
        with _ShardWriter(spath, canonical=False, align=align, fsync=fsync) as w:
            for name in group:
                w.add(name, tensors[name])
        for name, obj in w._objects.items():
            for part in obj["parts"].values():
                part["shard"] = label
            objects[name] = obj
        with open(spath, "rb") as f:
            data = f.read()
        hexd = hashlib.sha256(data).hexdigest() if digest == "sha256" else f"{xxh3_64(data):016x}"
        shards[label] = {"size": len(data), "digest": f"{digest}:{hexd}"}
        written.append(spath)
    manifest = _dcbor.encode({"objects": objects, "shards": shards})
    with atomic_write(root_path, fsync=fsync) as f:
        f.write(MAGIC)
        f.write(bytes(ALIGN - len(MAGIC)))
        f.write(manifest)
        f.write(footer_bytes(ALIGN, len(manifest), xxh3_64(manifest)))
    return [root_path, *written]
