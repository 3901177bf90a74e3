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
bounded slices when a conversion is needed), and only the manifest is kept.
"""

from __future__ import annotations

import os
import struct
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import xxhash

from ...core.atomic import atomic_write
from ...core.buffers import byte_view
from ...core.dtypes import BFLOAT16
from ...core.prealloc import preallocate, start_writeback
from ...errors import EncodeError, describe, factory
from . import _dcbor, _seekable
from ._parthash import PartHasher, pwrite_all
from ._v2spec import (
    ALIGN,
    CANONICAL_ALIGN,
    COO,
    CSR,
    DENSE,
    DTYPES,
    LOGICAL,
    MAGIC,
    VERSION,
    ZSTD_SEEKABLE,
    check_name,
)
from ._writerbase import AtomicFileWriter
from .sparse import SparseTensor, from_input

__all__ = ["V2Writer", "storage_of", "footer_bytes"]

FMT = "zt"
E = factory(FMT)
_SLICE = 32 << 20
_CHUNK = 1 << 20  # bytes written, then hashed while still in cache
_PIPE_MIN = 8 << 20  # raw parts from this size: pwrite, hashed on a second thread
_BLOCK = 4 << 20  # a raw part is written (and hashed) in blocks of this size
_WRITEBACK = 32 << 20  # with fsync, written blocks are handed to the disk in steps of this
_AHEAD = 2  # the hashing thread is given this many blocks before the writing reaches them
_ZEROS = bytes(1 << 16)

#: NumPy dtype -> (storage dtype, logical type).
_NP_TO_V2: dict[np.dtype, tuple[str, str | None]] = {
    dt: (name, None) for name, dt in DTYPES.items()
}
_NP_TO_V2[np.dtype("?")] = ("u8", "bool")
_NP_TO_V2[BFLOAT16] = ("bf16", None)
for _lt in LOGICAL.values():
    _NP_TO_V2.setdefault(_lt.np_dtype, (_lt.dtype, _lt.name))


def storage_of(dtype: np.dtype, what: str) -> tuple[str, str | None]:
    """``(dtype, type)`` a NumPy dtype is stored as (byte order ignored)."""
    dt = np.dtype(dtype)
    if dt.itemsize > 1 and dt.byteorder == ">":
        dt = dt.newbyteorder("<")
    if dt.byteorder == "=" and dt.itemsize > 1:
        dt = dt.newbyteorder("<")
    try:
        return _NP_TO_V2[dt]
    except KeyError:
        raise EncodeError(
            describe(
                FMT, what, field="dtype", detail="cannot be stored in zTensor v2", got=str(dtype)
            )
        ) from None


def footer_bytes(moff: int, mlen: int, mhash: int) -> bytes:
    return struct.pack("<QQQII", moff, mlen, mhash, VERSION, 0) + MAGIC


def le_pieces(a: np.ndarray) -> Iterator[np.ndarray]:
    """``a``'s bytes, little-endian, C order; no copy when it already is (bounded slices
    otherwise)."""
    le = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    if a.flags.c_contiguous and a.dtype.byteorder != ">":
        if a.size:
            yield a.reshape(-1)
        return
    if a.ndim == 0:
        yield np.ascontiguousarray(a, dtype=le).reshape(-1)
        return
    if a.size == 0:
        return
    row = (a.size // a.shape[0]) * a.dtype.itemsize
    step = max(1, _SLICE // max(1, row))
    for i in range(0, a.shape[0], step):
        yield np.ascontiguousarray(a[i : i + step], dtype=le).reshape(-1)


def _two_cpus() -> bool:
    """True when this process may run on two CPUs or more (a hashing thread can help)."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return (os.cpu_count() or 1) > 1


def _use_thread() -> bool:
    """Write large parts with the hashing thread (True) or on this thread alone: the thread
    whenever this process may run on two CPUs. On a quiet machine it hid the hash (best of 8
    pairs of 1 GiB writes: 176-177 ms against 184-195 ms alone, np.save 151-157 ms); with
    every core busy the one-thread way was 5-10 % faster, a smaller loss than that gain."""
    return _two_cpus()


def pack_f4(a: np.ndarray) -> np.ndarray:
    """4-bit codes (the low nibble of each uint8 of ``a``) packed two to a byte, the first in
    the low nibble, as v2's ``f4_e2m1`` storage holds them."""
    u = np.ascontiguousarray(a).reshape(-1).view(np.uint8) & 0x0F
    n = u.size
    out = np.zeros((n + 1) // 2, np.uint8)
    out[:] = u[0::2]
    out[: n // 2] |= u[1::2] << 4
    return out


class V2Writer(AtomicFileWriter):
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
        self._hasher: PartHasher | None = None

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
        if not isinstance(layout, str) or not layout:
            raise EncodeError(describe(FMT, what, field="layout", detail="not a text string"))
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims) or len(dims) > 64:
            raise EncodeError(describe(FMT, what, field="shape", got=dims))
        if not parts:
            raise EncodeError(describe(FMT, what, field="parts", detail="an object needs a part"))
        obj_attrs = self._check_attrs(what, attributes) if attributes is not None else None
        enc = self._encoding(what, encoding)
        start = self._pos
        try:
            out_parts: dict[str, Any] = {}
            for role in sorted(parts):
                check_name(role, what, "part name")
                value = parts[role]
                if isinstance(value, tuple):
                    arr, dtype, ltype = value
                    arr = np.asarray(arr)
                    if dtype not in DTYPES:
                        raise EncodeError(
                            describe(
                                FMT,
                                what,
                                field=f"part {role!r} dtype",
                                expected=" | ".join(DTYPES),
                                got=dtype,
                            )
                        )
                else:
                    arr = np.asarray(value)
                    dtype, ltype = storage_of(arr.dtype, f"{what} part {role!r}")
                    if ltype == "f4_e2m1":
                        arr = pack_f4(arr)
                out_parts[role] = self._write_part(arr, dtype, ltype, enc)
        except EncodeError:
            if self._pos != start:
                self._failed = E.encode(f"object {name!r}", detail="partly written")
            raise
        except BaseException as exc:
            self._failed = exc
            raise
        entry: dict[str, Any] = {"shape": dims, "layout": layout, "parts": out_parts}
        if obj_attrs is not None:
            entry["attributes"] = obj_attrs
        self._objects[name] = entry
        self._last = name

    def _finish(self) -> None:
        """The manifest and the footer: the end of a v2 file."""
        root: dict[str, Any] = {"objects": self._objects}
        if self._attributes is not None:
            root["attributes"] = self._attributes
        manifest = _dcbor.encode(root)
        moff = self._pad_to_align()
        self._f.write(manifest)
        self._f.write(footer_bytes(moff, len(manifest), xxhash.xxh3_64_intdigest(manifest)))

    # -- internals ----------------------------------------------------------------------------
    def _release(self) -> None:
        hasher, self._hasher = getattr(self, "_hasher", None), None
        if hasher is not None:
            hasher.close()

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

    def _pad_to_align(self) -> int:
        target = -(-self._pos // self.align) * self.align
        gap = target - self._pos
        while gap:
            n = min(gap, len(_ZEROS))
            self._f.write(_ZEROS[:n])
            gap -= n
        self._pos = target
        return target

    def _find(self, key: tuple[int, int], data: list[np.ndarray]) -> int | None:
        """Offset of an earlier blob with exactly these bytes (compared byte for byte)."""
        for off, length in self._blobs.get(key, ()):
            if length == 0:
                return off
            self._f.flush()
            fd = self._f.fileno()
            pos = 0
            same = True
            for piece in data:
                mv = byte_view(piece)
                for i in range(0, mv.nbytes, 4 * _CHUNK):  # bounded reads
                    want = mv[i : i + 4 * _CHUNK]
                    if os.pread(fd, want.nbytes, off + pos + i) != want:
                        same = False
                        break
                if not same:
                    break
                pos += mv.nbytes
            if same:
                return off
        return None

    def _write_part(
        self, arr: np.ndarray, dtype: str, ltype: str | None, enc: str | None
    ) -> dict[str, Any]:
        pieces = list(le_pieces(arr))
        if enc is None and hasattr(self._f, "truncate"):
            nbytes = sum(byte_view(p).nbytes for p in pieces)
            if nbytes:
                return self._write_raw(pieces, nbytes, dtype, ltype)
        h = xxhash.xxh3_64()
        decoded = 0
        for piece in pieces:
            mv = byte_view(piece)
            h.update(mv)
            decoded += mv.nbytes
        digest = h.intdigest()
        if enc is not None:
            stored = [
                np.frombuffer(_seekable.encode(b"".join(byte_view(p) for p in pieces)), np.uint8)
            ]
            length = stored[0].size
            key = (xxhash.xxh3_64_intdigest(byte_view(stored[0])), length)
        else:
            stored = pieces
            length = decoded
            key = (digest, length)
        # Raw parts with equal bytes share one blob (as ztensor 2.1.2 does); encoded parts are
        # never shared, which is also what 2.1.2 writes.
        offset = self._find(key, stored) if enc is None else None
        if offset is None:
            offset = self._pad_to_align() if length else -(-self._pos // self.align) * self.align
            if length and hasattr(self._f, "fileno"):
                preallocate(self._f.fileno(), offset, length)
            for piece in stored:
                self._f.write(byte_view(piece))
            self._pos += length
            self._blobs.setdefault(key, []).append((offset, length))
        part: dict[str, Any] = {"dtype": dtype}
        if ltype is not None:
            part["type"] = ltype
        part["blob"] = [offset, length]
        if enc is not None:
            part["encoding"] = enc
            part["decoded_length"] = decoded
        part["digest"] = f"xxh3:{digest:016x}"
        return part

    def _write_raw(
        self, pieces: list[np.ndarray], length: int, dtype: str, ltype: str | None
    ) -> dict[str, Any]:
        """One pass over a raw part's bytes: written and hashed block by block while the block
        is in cache (large parts: :meth:`_write_piped`). If an earlier blob turns out to hold
        the same bytes, the copy is cut off again (the temporary file is ours) and the part
        points at the earlier blob."""
        offset = self._pad_to_align()
        if length >= _PIPE_MIN:
            digest = self._write_piped(pieces, offset, length)
        else:
            preallocate(self._f.fileno(), offset, length)
            h = xxhash.xxh3_64()
            for piece in pieces:
                mv = byte_view(piece)
                for i in range(0, mv.nbytes, _CHUNK):
                    chunk = mv[i : i + _CHUNK]
                    self._f.write(chunk)
                    h.update(chunk)
            digest = h.intdigest()
        self._pos += length
        key = (digest, length)
        earlier = self._find(key, pieces)
        if earlier is not None:
            self._f.flush()
            self._f.seek(offset)
            self._f.truncate()
            self._pos = offset
            offset = earlier
        else:
            self._blobs.setdefault(key, []).append((offset, length))
        part: dict[str, Any] = {"dtype": dtype}
        if ltype is not None:
            part["type"] = ltype
        part["blob"] = [offset, length]
        part["digest"] = f"xxh3:{digest:016x}"
        return part

    def _write_piped(self, pieces: list[np.ndarray], offset: int, length: int) -> int:
        """Write a large raw part at ``offset`` straight from the caller's memory (``pwrite``
        of ``_BLOCK``-sized blocks, no copy through the file object's buffer) and return its
        XXH3-64.

        Either the writer's hashing thread computes the digest, kept ``_AHEAD`` blocks ahead
        of the writing (it reads each block from memory first, and the write then copies it
        from the shared cache), or each block is hashed and then written by this thread (the
        write copies it from cache); the second only with one CPU (:func:`_use_thread`).

        When the file will be fsynced, the written range is handed to the disk every
        ``_WRITEBACK`` bytes (:func:`start_writeback`), so the final fsync has less to wait for.
        """
        f = self._f
        f.flush()
        fd = f.fileno()
        preallocate(fd, offset, length)
        blocks = [
            mv[i : i + _BLOCK] for mv in map(byte_view, pieces) for i in range(0, mv.nbytes, _BLOCK)
        ]
        if _use_thread():
            digest = self._write_threaded(fd, blocks, offset)
        else:
            digest = self._write_inline(fd, blocks, offset, length)
        f.seek(offset + length)
        return digest

    def _write_inline(self, fd: int, blocks: list[memoryview], offset: int, length: int) -> int:
        h = xxhash.xxh3_64()
        pos = offset
        for block in blocks:
            h.update(block)
            pwrite_all(fd, block, pos)
            pos += block.nbytes
        if self._fsync:
            start_writeback(fd, offset, length)
        return h.intdigest()

    def _write_threaded(self, fd: int, blocks: list[memoryview], offset: int) -> int:
        hasher = self._hasher
        if hasher is None or not hasher.alive:
            hasher = self._hasher = PartHasher()
        for block in blocks[:_AHEAD]:
            hasher.update(block)
        pos = flushed = offset  # with fsync: written up to flushed is on its way to the disk
        try:
            for j, block in enumerate(blocks):
                if j + _AHEAD < len(blocks):
                    hasher.update(blocks[j + _AHEAD])
                pwrite_all(fd, block, pos)
                pos += block.nbytes
                if self._fsync and (pos - flushed >= _WRITEBACK or j == len(blocks) - 1):
                    start_writeback(fd, flushed, pos - flushed)
                    flushed = pos
        except BaseException:
            hasher.discard()
            raise
        return hasher.digest()

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


_ = ml_dtypes  # ml_dtypes registers the float8/float4 NumPy types used above


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
        hexd = (
            hashlib.sha256(data).hexdigest()
            if digest == "sha256"
            else f"{xxhash.xxh3_64_intdigest(data):016x}"
        )
        shards[label] = {"size": len(data), "digest": f"{digest}:{hexd}"}
        written.append(spath)
    manifest = _dcbor.encode({"objects": objects, "shards": shards})
    with atomic_write(root_path, fsync=fsync) as f:
        f.write(MAGIC)
        f.write(bytes(ALIGN - len(MAGIC)))
        f.write(manifest)
        f.write(footer_bytes(ALIGN, len(manifest), xxhash.xxh3_64_intdigest(manifest)))
    return [root_path, *written]
