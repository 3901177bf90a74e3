"""Parse and validate the CBOR index of a zTensor 0.1.0 file into :class:`TensorInfo` records.

Every field of every map is checked here, once, at open: types, enum values, alignment, that
each blob lies between the magic and the index, that blobs do not overlap, that sizes agree with
shapes. Readers then trust the records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ... import _kernels
from ...core import cbor
from ...core.bounds import DEFAULT_LIMITS, MAX_ARRAY_BYTES, Limits
from ...errors import FormatError, LimitError, TruncatedError, UnsupportedError, describe
from ._entries import NP_DTYPES, parse_entry
from ._info import Blob, TensorInfo
from ._spec import (
    FMT,
    MAGIC,
    MAGIC_V1,
    MAGIC_V2,
)

__all__ = [
    "TensorInfo",
    "Blob",
    "InfoTable",
    "parse_file_layout",
    "parse_index",
    "parse_index_full",
    "parse_index_table",
]


def parse_file_layout(head: bytes, size: int, footer: int | None) -> tuple[int, int]:
    """Check magic and footer; return ``(index_start, index_size)``.

    ``head`` is the first 8 bytes (fewer if the file is shorter), ``footer`` the u64 of the
    last 8 (None when the file is shorter than 16 bytes).
    """
    if head != MAGIC:
        if head in (MAGIC_V1, MAGIC_V2):
            version = "v1 (ZTEN1000)" if head == MAGIC_V1 else "v2"
            raise UnsupportedError(
                describe(
                    FMT,
                    "file",
                    offset=0,
                    field="magic",
                    detail=f"zTensor {version} file; this is the 0.1.0 reader, "
                    "tenfold.ztensor.open reads every generation",
                    expected=MAGIC,
                    got=head,
                )
            )
        if len(head) < len(MAGIC) and MAGIC.startswith(head):
            raise TruncatedError(
                describe(
                    FMT,
                    "file",
                    offset=0,
                    detail="shorter than the magic",
                    expected=">= 16 bytes",
                    got=size,
                )
            )
        raise FormatError(describe(FMT, "file", offset=0, field="magic", expected=MAGIC, got=head))
    if footer is None:
        raise TruncatedError(
            describe(
                FMT,
                "file",
                offset=size,
                detail="no room for the index size",
                expected=">= 16 bytes",
                got=size,
            )
        )
    if footer == 0:
        if size == 16:
            return 8, 0
        raise FormatError(
            describe(
                FMT,
                "index",
                offset=size - 8,
                field="index size",
                detail="zero in a file with data",
                expected=">= 1",
                got=0,
            )
        )
    room = size - 16
    if footer > room:  # a cut file ends in tensor or index bytes: no size to trust
        raise TruncatedError(
            describe(
                FMT,
                "footer",
                offset=size - 8,
                field="index size",
                detail=f"truncated: the file has {size} bytes, its footer's index size does "
                "not fit after the 8-byte magic (or that field is damaged)",
                expected=f"<= {room}",
                got=footer,
            )
        )
    return size - 8 - footer, footer


def parse_index(raw: object, index_start: int, limits: Limits = DEFAULT_LIMITS) -> list[TensorInfo]:
    """Decode and validate the CBOR index (``raw`` is its bytes, at ``index_start``).

    The common case (every entry a well-formed dense tensor) is parsed straight from the bytes
    by the ``zt01idx`` kernel, which declines anything else: then :func:`parse_index_full`
    decodes the index and checks it entry by entry, naming what is wrong. Both give the same
    records for every index the kernel accepts (tests/ztensor/test_ztensor_index_kernel.py)."""
    got = _parse_dense(raw, index_start, limits, TensorInfo)
    if got is not None:
        infos, ordered = got
        if not ordered:
            _check_overlaps(infos)
        return infos
    return parse_index_full(raw, index_start, limits)


def _parse_dense(
    raw: object, index_start: int, limits: Limits, make: Any
) -> tuple[list[Any], bool] | None:
    """The ``zt01idx`` kernel's ``(records, ordered)`` of the index, or None where it
    declines (or is not compiled, or the index is over the limit or not contiguous)."""
    mv = memoryview(raw)  # type: ignore[arg-type]
    kernel = _kernel()
    if not (kernel and mv.nbytes <= limits.max_index_bytes and mv.c_contiguous):
        return None
    return kernel.parse_dense(  # type: ignore[no-any-return]
        mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv,
        index_start,
        limits.max_objects,
        limits.max_ndim,
        max(0, min(limits.max_decoded_bytes, MAX_ARRAY_BYTES)),
        _DTYPES,
        make,
    )


def _from_compact(r: tuple[Any, ...]) -> TensorInfo:
    """The record of a compact kernel record ``(name, dtype, np_dtype, shape, encoding,
    offset, size, endianness, position)`` (a dense entry with no checksum or custom key)."""
    name, dtype, np_dtype, shape, encoding, offset, size, endianness, pos = r
    return TensorInfo(name, dtype, np_dtype, shape, "dense", encoding, offset, size, endianness,
                      None, None, None, None, None, {}, {}, pos)  # fmt: skip


class InfoTable(Mapping[str, TensorInfo]):
    """name -> :class:`TensorInfo` of one index, in index order. Entries the ``zt01idx``
    kernel parsed are kept as its compact tuples and made into records when first asked for
    (:func:`_from_compact`), so opening a file of many tensors builds none it does not use.
    ``plain``: every entry came from the kernel (dense, no custom keys: no ``attrs``
    anywhere)."""

    __slots__ = ("_items", "plain")

    def __init__(self, items: dict[str, Any], plain: bool) -> None:
        self._items = items
        self.plain = plain

    def __getitem__(self, name: str) -> TensorInfo:
        v = self._items[name]
        if type(v) is tuple:
            v = self._items[name] = _from_compact(v)
        return v  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def compact(self, name: str) -> tuple[Any, ...] | None:
        """The kernel's compact record of ``name`` while no :class:`TensorInfo` has been built
        for it (None after, or for an entry of the full parse); KeyError for no such name."""
        v = self._items[name]
        return v if type(v) is tuple else None

    def compact_span(self, name: str) -> tuple[bool, tuple[int, np.dtype, tuple[int, ...]] | None]:
        """Where ``name``'s bytes can be viewed as they are, read from its compact record:
        ``(True, (offset, np_dtype, shape))`` when it is raw and little-endian (or one byte
        wide; a compact record has no checksum), ``(True, None)`` when it is not, and
        ``(False, None)`` when its :class:`TensorInfo` is built (ask that instead)."""
        v = self._items[name]
        if type(v) is not tuple:
            return False, None
        _, _, np_dtype, shape, encoding, offset, _, endianness, _ = v
        if encoding == "raw" and (endianness == "little" or np_dtype.itemsize == 1):
            return True, (offset, np_dtype, shape)
        return True, None


def parse_index_table(raw: object, index_start: int, limits: Limits = DEFAULT_LIMITS) -> InfoTable:
    """:func:`parse_index` as an :class:`InfoTable` (the same checks, the same records, the
    same errors), its records built on first use where the kernel parsed the index."""
    got = _parse_dense(raw, index_start, limits, None)
    if got is None:
        return InfoTable({i.name: i for i in parse_index_full(raw, index_start, limits)}, False)
    recs, ordered = got
    if ordered:
        return InfoTable({r[0]: r for r in recs}, True)
    infos = [_from_compact(r) for r in recs]
    _check_overlaps(infos)
    return InfoTable({i.name: i for i in infos}, True)


def parse_index_full(
    raw: object, index_start: int, limits: Limits = DEFAULT_LIMITS
) -> list[TensorInfo]:
    """:func:`parse_index` without the kernel: decode the CBOR, then check every entry."""
    obj = cbor.decode(raw, fmt=FMT, what="index", offset=index_start, limit=limits.max_index_bytes)
    if not isinstance(obj, list):
        raise FormatError(
            describe(
                FMT,
                "index",
                offset=index_start,
                detail="not a CBOR array",
                expected="array",
                got=type(obj).__name__,
            )
        )
    if len(obj) > limits.max_objects:
        raise LimitError(
            describe(
                FMT,
                "index",
                offset=index_start,
                field="tensor count",
                detail="above limit",
                expected=f"<= {limits.max_objects}",
                got=len(obj),
            )
        )
    infos: list[TensorInfo] = []
    seen: set[str] = set()
    for pos, entry in enumerate(obj):
        info = parse_entry(pos, entry, index_start, limits)
        if info.name in seen:
            raise FormatError(
                describe(
                    FMT,
                    f"tensor {info.name!r}",
                    offset=index_start,
                    field="name",
                    detail="duplicate name",
                )
            )
        seen.add(info.name)
        infos.append(info)
    _check_overlaps(infos)
    return infos


_NP = NP_DTYPES
#: dtype name -> (the name, its NumPy dtype), for the kernel
_DTYPES = {name: (name, dt) for name, dt in _NP.items()}
_KERNEL: Any = None


def _kernel() -> Any:
    """The compiled ``zt01idx`` kernel, or False: its pure-Python twin is several times slower
    than cbor2 plus the checks below, so without the compiled kernel (or with
    ``TENFOLD_PUREPYTHON=1``) the full parse runs; tests set ``_KERNEL`` to either twin."""
    global _KERNEL
    if _KERNEL is None:
        mod = _kernels.load("zt01idx")
        _KERNEL = False if mod.__name__.rpartition(".")[2].startswith("_ref_") else mod
    return _KERNEL


def _check_overlaps(infos: list[TensorInfo]) -> None:
    spans = []
    for info in infos:
        if info.size:
            spans.append((info.offset, info.offset + info.size, info.name, "data"))
        for label, b in info.components.items():
            if b.size:
                spans.append((b.offset, b.offset + b.size, info.name, label))
    spans.sort()
    for (_s0, e0, n0, l0), (s1, _e1, n1, l1) in zip(spans, spans[1:], strict=False):
        if s1 < e0:
            raise FormatError(
                describe(
                    FMT,
                    f"tensor {n1!r}",
                    offset=s1,
                    field=f"{l1} blob",
                    detail=f"overlaps the {l0} blob of tensor {n0!r}",
                    expected=f"start >= {e0}",
                    got=s1,
                )
            )
