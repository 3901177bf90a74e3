"""OINF tensor table: its entries parsed and checked in bulk (NumPy over the table bytes, with an
entry-by-entry walk that names the first bad entry), each tensor's payload and shape, and v2
quantization blocks.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ... import _kernels
from ...core.bounds import Limits
from ...core.mapped import MappedFile
from ...core.records import Record
from ...errors import FormatError, LimitError, TruncatedError, UnsupportedError
from . import _spec as S
from ._parse import Header, check_names, check_unique, checked_shape, fail, payload_bounds

_U32 = S.STRING_LEN.struct


_QUANT = S.QUANT.struct


_TE = S.TENSOR_ENTRY


_TD = S.TENSOR_DATA_V2
_Q = S.QUANT.offset


_TENSOR_TAGS = S.TENSOR_TAGS
_EIGHTHS = np.zeros(max(S.TAG_NAME) + 1, np.float64)
for _t in S.NUMPY_DTYPE:
    _EIGHTHS[_t] = 8 * S.NUMPY_DTYPE[_t].itemsize
for _t, _b in S.PACKED_BITS.items():
    _EIGHTHS[_t] = _b
_EIGHTHS[S.BITSET] = 8


def parse_tensors(mf: MappedFile, blob: bytes, h: Header, limits: Limits) -> tuple[list, int]:
    """The tensor table, and where it ends.

    A large model has thousands of tensors, so the walk kernel only finds where each entry
    starts; the fields are then gathered and checked with NumPy, and the precise error of a
    bad entry comes from _check_tensor.
    """
    n = h.n_tensors
    st_arr, ln_arr, nd_arr = (np.empty(n, np.int64) for _ in range(3))
    _done, pos, status = _kernels.load("walk").walk_lp_records(
        blob,
        h.offset_tensors,
        h.offset_data,
        n,
        S.ALIGN,
        _TE.size,
        _TE.offset("ndim"),
        8,  # one u64 dim
        (_TD if h.version == 2 else S.TENSOR_DATA).size,
        limits.max_ndim,
        st_arr,
        ln_arr,
        nd_arr,
    )
    if status:
        _walk_tensors_slow(blob, h, limits)  # raises the precise error
    starts, lns, ndims = st_arr.tolist(), ln_arr.tolist(), nd_arr.tolist()
    return _tensor_rows(mf, h, blob, starts, lns, ndims, nd_arr, limits), pos


def _gather(u8: np.ndarray, pos: np.ndarray, nbytes: int, dtype: str) -> np.ndarray:
    """Little-endian fields of ``nbytes`` at byte positions ``pos`` (any alignment)."""
    idx = pos[:, None] + np.arange(nbytes, dtype=np.int64)
    return np.ascontiguousarray(u8[idx]).view(dtype).reshape(-1)


def _column(u8: np.ndarray, starts: np.ndarray, rec: Record, field: str) -> np.ndarray:
    """Field ``field`` of the record ``rec`` at each of the byte positions ``starts``."""
    return _gather(u8, starts + rec.offset(field), rec.field_size(field), rec.dtype[field].str)


def _walk_tensors_slow(blob: bytes, h: Header, limits: Limits) -> None:
    """Walk the tensor table in Python to name the first entry that runs past its table."""
    pos, end = h.offset_tensors, h.offset_data
    tail_size = (S.TENSOR_DATA_V2 if h.version == 2 else S.TENSOR_DATA).size
    for i in range(h.n_tensors):
        if pos + 4 > end:
            fail(
                TruncatedError,
                "table-bounds",
                f"tensor #{i}",
                pos,
                "name length runs past its table",
                f"end <= {end}",
                pos + 4,
            )
        (ln,) = _U32.unpack_from(blob, pos)
        if pos + 4 + ln > end:
            fail(
                TruncatedError,
                "table-bounds",
                f"tensor #{i}",
                pos,
                "name runs past its table",
                f"end <= {end}",
                pos + 4 + ln,
            )
        q = pos + ((ln + 11) & ~7)
        if q + _TE.size > end:
            fail(
                TruncatedError,
                "table-bounds",
                f"tensor #{i}",
                pos,
                "entry runs past its table",
                f"end <= {end}",
                q + _TE.size,
            )
        (nd,) = _U32.unpack_from(blob, q + _TE.offset("ndim"))
        if nd > limits.max_ndim:
            fail(
                LimitError,
                "tensor-ndim",
                f"tensor #{i}",
                q + _TE.offset("ndim"),
                "ndim above limit",
                f"<= {limits.max_ndim}",
                nd,
            )
        pos = q + _TE.size + 8 * nd + tail_size
        if pos > end:
            fail(
                TruncatedError,
                "table-bounds",
                f"tensor #{i}",
                q + _TE.size,
                "dims run past its table",
                f"end <= {end}",
                pos,
            )
    raise AssertionError("walk kernel and Python walk disagree")  # pragma: no cover


def _tensor_rows(
    mf: MappedFile,
    h: Header,
    blob: bytes,
    starts: list[int],
    lns: list[int],
    ndims: list[int],
    nd: np.ndarray,
    limits: Limits,
) -> list[tuple]:
    n = len(starts)
    if not n:
        return []
    v2 = h.version == 2
    u8 = np.frombuffer(blob, np.uint8)
    st = np.array(starts, np.int64)
    q = st + ((np.array(lns, np.int64) + 11) & ~7)
    tags = _column(u8, q, _TE, "dtype")
    flags = _column(u8, q, _TE, "flags")
    dpos = q + _TE.size
    total = int(nd.sum())
    if total:
        first = np.repeat(np.cumsum(nd) - nd, nd)
        dim_pos = np.repeat(dpos, nd) + 8 * (np.arange(total, dtype=np.int64) - first)
        flat = _gather(u8, dim_pos, 8, "<u8").tolist()
    else:
        flat = []
    tpos = dpos + 8 * nd
    nbytes = _column(u8, tpos, S.TENSOR_DATA_V2, "data_nbytes")
    offs = _column(u8, tpos, S.TENSOR_DATA_V2, "data_offset")
    if v2:
        qn = _column(u8, tpos, S.TENSOR_DATA_V2, "quant_nbytes")
        qo = _column(u8, tpos, S.TENSOR_DATA_V2, "quant_offset")
    else:
        qn = qo = np.zeros(n, np.uint64)
    shapes, numel, extent = _shapes(flat, nd, ndims)
    bad = _suspect_rows(h, tags, flags, nbytes, offs, qn, qo, numel, extent)
    raws = [blob[s + 4 : s + 4 + ln] for s, ln in zip(starts, lns, strict=True)]
    cols = (
        tags.tolist(),
        shapes,
        flags.tolist(),
        nbytes.tolist(),
        offs.tolist(),
        starts,
        qn.tolist(),
        qo.tolist(),
    )
    for i in np.flatnonzero(bad).tolist():
        # the precise error (or, for a v2 quantized tensor, its quant block's checks)
        row = (raws[i].decode("latin-1"),) + tuple(c[i] for c in cols)
        _check_tensor(mf, h, row, limits)  # type: ignore[arg-type]
    check_names(raws, "tensor", starts)
    tnames = b"\n".join(raws).decode("ascii").split("\n")
    check_unique(tnames, "tensor", starts)
    return list(zip(tnames, *cols, strict=True))


def _shapes(
    flat: list[int], nd: np.ndarray, ndims: list[int]
) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """Each tensor's shape from the flat dims, its element count and the product of its
    nonzero dims (float64: a value at or above 2**52 is refused by the caller)."""
    n, total = len(nd), len(flat)
    shapes: list[tuple[int, ...]]
    if int(nd.min()) == int(nd.max()):  # one rank for every tensor: split at C speed
        d0 = int(nd[0])
        shapes = list(zip(*[iter(flat)] * d0, strict=True)) if d0 else [()] * n
    else:
        it = iter(flat)
        shapes = [tuple(itertools.islice(it, d)) for d in ndims]
    if total:
        first = np.repeat(np.cumsum(nd) - nd, nd)
        mat = np.ones((n, int(nd.max())), np.float64)
        mat[np.repeat(np.arange(n), nd), np.arange(total) - first] = flat
        numel = mat.prod(axis=1)
        # a zero dimension hides the others: NumPy still needs their product to fit in intp
        extent = np.where(mat == 0, 1.0, mat).prod(axis=1)
    else:
        numel = extent = np.ones(n, np.float64)
    return shapes, numel, extent


def _suspect_rows(
    h: Header,
    tags: np.ndarray,
    flags: np.ndarray,
    nbytes: np.ndarray,
    offs: np.ndarray,
    qn: np.ndarray,
    qo: np.ndarray,
    numel: np.ndarray,
    extent: np.ndarray,
) -> np.ndarray:
    """A mask of the table rows that fail a vectorized check (each is then checked alone for
    its precise error)."""
    # element sizes in eighths of a byte (packed types: bits; others: 8 * itemsize); 0 = invalid
    tag_ok = (tags < len(_EIGHTHS)) & np.isin(tags, list(_TENSOR_TAGS))
    eighths = np.where(tag_ok, _EIGHTHS[np.minimum(tags, len(_EIGHTHS) - 1)], 0)
    expected = np.ceil(numel * eighths / 8)
    has = (flags & 1).astype(bool)
    fs, od = h.file_size, h.offset_data
    nb_f, off_f = nbytes.astype(np.float64), offs.astype(np.float64)
    bad = ~tag_ok | (numel >= 2.0**52) | (extent >= 2.0**52)
    bad |= has & (
        (expected != nb_f) | (offs % 8 != 0) | (off_f < od) | (nb_f > fs) | (off_f + nb_f > fs)
    )
    bad |= ~has & ((nbytes != 0) | (offs != 0))
    if h.version == 2:
        bad |= (flags & ~np.uint32(S.HAS_DATA | S.HAS_QUANT)) != 0
        bad |= (qn != 0) | (qo != 0)
    return bad


def _check_tensor(
    mf: MappedFile,
    h: Header,
    t: tuple[str, int, tuple[int, ...], int, int, int, int, int, int],
    limits: Limits,
) -> None:
    name, tag, shape, flags, nbytes, off, entry, qn, qo = t
    obj = f"tensor {name!r}"
    f0 = entry + S.align8(4 + len(name))
    fnb = f0 + _TE.size + 8 * len(shape)  # data_nbytes field
    if tag not in S.TENSOR_TAGS:
        cls = FormatError if tag in S.TAG_NAME else UnsupportedError
        fail(
            cls,
            "tensor-dtype",
            obj,
            f0,
            "invalid tensor dtype",
            "a numeric, bool, bf16, f8, packed or bitset tag",
            tag,
        )
    checked_shape(obj, shape, tag, f0 + _TE.size, limits)
    known = S.HAS_DATA | (S.HAS_QUANT if h.version == 2 else 0)
    if h.version == 2 and flags & ~known:
        fail(
            FormatError,
            "tensor-flags",
            obj,
            f0 + _TE.offset("flags"),
            "unknown tensor flag bits",
            f"bits within {known:#x}",
            flags,
        )
    if not flags & S.HAS_DATA:
        if nbytes or off:
            fail(
                FormatError,
                "nodata-zero",
                obj,
                fnb,
                "tensor without data must have zero data_offset and data_nbytes",
                "0, 0",
                f"{off}, {nbytes}",
            )
    else:
        payload_bounds(h, obj, entry, fnb + _TD.offset("data_offset") - entry, off, nbytes, "data")
        expected = S.element_nbytes(tag, math.prod(shape))
        if nbytes != expected:
            fail(FormatError, "data-nbytes", obj, fnb, "data_nbytes mismatch", expected, nbytes)
    if h.version == 2:
        if not flags & S.HAS_QUANT:
            if qn or qo:
                fail(
                    FormatError,
                    "noquant-zero",
                    obj,
                    fnb + _TD.offset("quant_nbytes"),
                    "tensor without quant must have zero quant_offset and quant_nbytes",
                    "0, 0",
                    f"{qo}, {qn}",
                )
        else:
            payload_bounds(h, obj, entry, fnb + _TD.offset("quant_offset") - entry, qo, qn, "quant")
            parse_quant(mf, obj, shape, qo, qn, fnb + _TD.offset("quant_nbytes"))


#: The enumerated fields of the quantization header: (field, allowed, rule, expected).
_QUANT_ENUMS = (
    ("scheme", (1, 2), "quant-scheme", "1 or 2"),
    ("scale_mode", (1, 2), "quant-scale-mode", "1 or 2"),
    ("zp_mode", (0, 1, 2), "quant-zp-mode", "0, 1 or 2"),
)


def parse_quant(
    mf: MappedFile, obj: str, shape: tuple[int, ...], qo: int, qn: int, qn_field: int
) -> tuple[int, ...]:
    """Validate a v2 quantization block; return its eight header fields."""
    if qn < S.QUANT_HEADER_SIZE:
        fail(
            FormatError,
            "quant-nbytes",
            obj,
            qn_field,
            "quant payload too small",
            f">= {S.QUANT_HEADER_SIZE}",
            qn,
        )
    q = _QUANT.unpack(mf.bytes(qo, S.QUANT.size, obj))
    scheme, smode, zmode, reserved, saxis, scount, zaxis, zcount = q
    if reserved:
        fail(
            FormatError,
            "quant-reserved",
            obj,
            qo + _Q("reserved"),
            "quant reserved must be 0",
            0,
            reserved,
        )
    fields = dict(zip(S.QUANT.names, q, strict=True))
    for field, allowed, rule, expected in _QUANT_ENUMS:
        if fields[field] not in allowed:
            what = "quant scheme" if field == "scheme" else field
            fail(FormatError, rule, obj, qo + _Q(field), f"unknown {what}", expected, fields[field])
    for mode, axis, count, name in ((smode, saxis, scount, "scale"), (zmode, zaxis, zcount, "zp")):
        if mode == 2:
            if axis >= len(shape):
                fail(
                    FormatError,
                    "quant-axis",
                    obj,
                    qo + _Q(f"{name}_axis"),
                    f"per-channel {name} axis out of range",
                    f"< {len(shape)}",
                    axis,
                )
            want = shape[axis]
        else:
            want = mode  # 1 value per tensor, 0 for none
        if count != want:
            fail(
                FormatError,
                "quant-count",
                obj,
                qo + _Q(f"{name}_count"),
                f"{name}_count mismatch",
                want,
                count,
            )
    need = S.align8(S.QUANT_HEADER_SIZE + 4 * scount + 4 * zcount)
    if qn != need:
        fail(
            FormatError,
            "quant-nbytes",
            obj,
            qn_field,
            "quant_nbytes is not the padded size",
            need,
            qn,
        )
    return q
