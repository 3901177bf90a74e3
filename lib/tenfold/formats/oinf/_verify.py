"""OINF verifier: every rule openinfer-oinf's verifier checks, plus the ones it misses.

Structural rules (header, offsets, table bounds, names, types, sizes; the reader's checks) stop
the verification at the first violation, since nothing after it can be trusted. Then come the
rules the reader is lenient about, each reported as its own finding: header flags and reserved
fields, unknown v1 tensor flag bits, non-zero padding (header, strings, between tables, inside
and between payloads), unused tail bits of packed data, the invalid T2 code 0b10, BOOL bytes
other than 0/1, overlapping payloads. BITSET tensors are accepted with a warning (the runtime
reads them, the Python tooling rejects them).

Every finding names the rule in brackets, the entry and the offset. Each tensor gets a row with
its dtype, shape, bytes and statistics over its finite values (min, max, mean, std) plus its
NaN and inf counts; the statistics are computed in bounded chunks and never fail on inf/NaN.
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct
from typing import Any

import numpy as np

from ... import _kernels
from ...core.report import ERROR, INFO, OK, WARNING, Report
from ...errors import TenfoldError
from . import _spec as S
from .reader import OinfReader

__all__ = ["verify", "OinfReport", "tensor_stats"]

_CHUNK = 1 << 20


@dataclasses.dataclass
class OinfReport(Report):
    """A :class:`Report` plus ``stats``: tensor name -> statistics dict."""

    stats: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def tensor_stats(arr: np.ndarray) -> dict[str, Any]:
    """min / max / mean / std over the finite values, and the NaN and inf counts (chunked)."""
    flat = arr.reshape(-1)
    n = 0
    mean = 0.0
    m2 = 0.0
    lo, hi = math.inf, -math.inf
    nan = inf = 0
    for start in range(0, flat.size, _CHUNK):
        with np.errstate(invalid="ignore"):  # a signalling NaN warns as it is widened
            c = flat[start : start + _CHUNK].astype(np.float64)
        fin = np.isfinite(c)
        if not fin.all():
            nan += int(np.isnan(c).sum())
            inf += int(np.isinf(c).sum())
            c = c[fin]
        k = c.size
        if not k:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            cm = float(np.sum(c / k))  # no overflow even for values near float64 max
            cm2 = float(((c - cm) ** 2).sum())  # may overflow to inf: reported as None
        lo, hi = min(lo, float(c.min())), max(hi, float(c.max()))
        tot = n + k
        delta = cm - mean
        mean += delta * (k / tot)
        m2 += cm2 + delta * delta * n * k / tot
        n = tot
    if not n:
        return {
            "numel": int(flat.size),
            "min": None,
            "max": None,
            "mean": None,
            "std": None,
            "nan": nan,
            "inf": inf,
        }
    std = math.sqrt(m2 / n) if math.isfinite(m2) else None
    return {
        "numel": int(flat.size),
        "min": lo,
        "max": hi,
        "mean": mean if math.isfinite(mean) else None,
        "std": std,
        "nan": nan,
        "inf": inf,
        "overflow": std is None or not math.isfinite(mean),
    }


def _fmt_stats(s: dict[str, Any]) -> str:
    if s["min"] is None:
        core = "no finite values" if s["numel"] else "empty"
    else:

        def g(v: float | None) -> str:
            return "overflow" if v is None else f"{v:.6g}"

        core = f"min={g(s['min'])} max={g(s['max'])} mean={g(s['mean'])} std={g(s['std'])}"
    return f"{core} nan={s['nan']} inf={s['inf']}"


def verify_reader(reader: OinfReader) -> OinfReport:
    """Check every OINF rule on the file an open reader has (``OinfReader.verify()``): the
    file again from its path, or its buffer, with the reader's limits."""
    mf = reader.file
    local = mf.path is not None and not mf.remote
    return verify(mf.path if local else mf.buffer(), limits=reader.limits)


def verify(source: Any, **kw: Any) -> OinfReport:
    """Verify an OINF file (path or buffer); never raises on a damaged file."""
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<buffer>"
    report = OinfReport(S.FMT, path)
    try:
        reader = OinfReader(source, **kw)
    except TenfoldError as exc:
        report.add_error(exc)
        return report
    except OSError as exc:
        report.add("file", ERROR, f"oinf: cannot read: {exc}")
        return report
    with reader:
        try:
            _verify_open(reader, report)
        except TenfoldError as exc:  # pragma: no cover - the checks below report, not raise
            report.add_error(exc)
        else:  # OINF stores no checksum: the values themselves cannot be checked
            report.unverified.extend(t.name for t in reader.infos() if t.has_data)
    return report


class _Checker:
    def __init__(self, reader: OinfReader, report: OinfReport) -> None:
        self.r = reader
        self.rep = report
        self.mf = reader.file
        self.k = _kernels.load("bitpack")
        self.scan = _kernels.load("scan")

    def err(self, rule: str, obj: str, offset: int | None, msg: str, status: str = ERROR) -> None:
        self.rep.add(obj, status, f"oinf: {msg} [{rule}]", offset=offset)

    def zeros(self, start: int, end: int, obj: str, what: str) -> None:
        if end <= start:
            return
        i = self.scan.first_nonzero(self.mf.u8(start, end - start, obj))
        if i >= 0:
            b = int(self.mf.u8(start + i, 1, obj)[0])
            self.err("padding", obj, start + i, f"non-zero {what} padding byte {b:#04x}")

    def tail(self, off: int, nbytes: int, numel: int, bits: int, obj: str) -> None:
        used = numel * bits
        if used % 8 and nbytes:
            last = int(self.mf.u8(off + nbytes - 1, 1, obj)[0])
            if last >> (used % 8):
                self.err(
                    "tail-bits",
                    obj,
                    off + nbytes - 1,
                    f"unused tail bits set in the last byte {last:#04x}",
                )

    def elements(self, tag: int, off: int, nbytes: int, numel: int, obj: str) -> bool:
        """Element-level rules of a payload; True when it decodes."""
        ok = True
        if tag in S.PACKED_BITS:
            self.tail(off, nbytes, numel, S.PACKED_BITS[tag], obj)
            if tag == S.T2:
                bad = self.k.find_code(self.mf.u8(off, nbytes, obj), 2, numel, 2)
                if bad >= 0:
                    self.err(
                        "t2-code",
                        obj,
                        off + bad // 4,
                        f"element {bad} has the invalid ternary code 0b10",
                    )
                    ok = False
        elif tag == S.BOOL and nbytes:
            raw = self.mf.u8(off, nbytes, obj)
            if int(raw.max()) > 1:
                i = int(np.flatnonzero(raw > 1)[0])
                self.err("bool-value", obj, off + i, f"BOOL byte {int(raw[i])} is not 0 or 1")
                ok = False
        return ok


def _verify_open(r: OinfReader, rep: OinfReport) -> None:
    c = _Checker(r, rep)
    t = r.tables
    h = t.header
    rep.summary.update(
        {
            "version": h.version,
            "file_size": h.file_size,
            "sizevars": len(t.sizevars),
            "metadata": len(t.metadata),
            "tensors": len(t.tensors),
        }
    )
    _check_layout(c, t)
    for name, value, entry in t.sizevars:
        rep.add(f"sizevar {name!r}", OK, f"{name} := {value}", offset=entry)

    regions: list[tuple[int, int, int, str]] = []  # (start, used_end, declared_end, obj)
    _check_metadata(c, r, rep, regions)
    _check_tensors(c, r, rep, regions)
    _check_data_section(c, h, regions)


def _check_layout(c: _Checker, t: Any) -> None:
    """Header fields the reader does not need, padding after names and tables, table order."""
    h = t.header
    for field, value in (("flags", f"{h.flags:#x}"), ("reserved", str(h.reserved))):
        if getattr(h, field):
            rule, at = f"header-{field}", S.HEADER.offset(field)
            c.err(rule, "header", at, f"header {field} must be 0, got {value}")
    c.zeros(S.HEADER_SIZE, S.HEADER_PADDED, "header", "header")
    for kind, entries in (
        ("sizevar", [(e[0], e[2]) for e in t.sizevars]),
        ("metadata", [(e[0], e[5]) for e in t.metadata]),
        ("tensor", [(e[0], e[6]) for e in t.tensors]),
    ):
        for name, entry in entries:
            c.zeros(
                entry + 4 + len(name), entry + S.align8(4 + len(name)), f"{kind} {name!r}", "name"
            )
    for end, nxt, what in (
        (t.ends[0], h.offset_metadata, "sizevars"),
        (t.ends[1], h.offset_tensors, "metadata"),
        (t.ends[2], h.offset_data, "tensor"),
    ):
        c.zeros(end, nxt, f"{what} table", "table")
    for kind, names in (
        ("sizevars", [e[0] for e in t.sizevars]),
        ("metadata", [e[0] for e in t.metadata]),
        ("tensors", [e[0] for e in t.tensors]),
    ):
        if names != sorted(names):
            c.err(
                "table-order",
                f"{kind} table",
                None,
                f"{kind} table not sorted by name (the reference writer sorts)",
                INFO,
            )


def _check_metadata(
    c: _Checker, r: OinfReader, rep: OinfReport, regions: list[tuple[int, int, int, str]]
) -> None:
    """Each metadata payload's element rules and value; its region for the overlap check."""
    t = r.tables
    for key, tag, _flags, nbytes, off, _entry in t.metadata:
        obj = f"metadata {key!r}"
        used, decodes = _metadata_used(c, tag, off, nbytes, obj)
        regions.append((off, off + used, off + nbytes, obj))
        if not decodes:
            continue
        try:
            value = r.metadata_value((key, tag, _flags, nbytes, off, _entry))
        except TenfoldError as exc:
            rep.add_error(exc)
            continue
        rep.add(obj, OK, f"{S.TAG_NAME[tag]} = {_preview(value)}", offset=off)


def _check_tensors(
    c: _Checker, r: OinfReader, rep: OinfReport, regions: list[tuple[int, int, int, str]]
) -> None:
    """Each tensor's flags and elements, with its statistics; its regions for the overlap check."""
    t = r.tables
    h = t.header
    for e in t.tensors:
        name, tag, shape, flags, nbytes, off, entry, qn, qo = e
        obj = f"tensor {name!r}"
        f0 = entry + S.align8(4 + len(name))
        if h.version == 1 and flags & ~S.HAS_DATA:
            c.err(
                "tensor-flags",
                obj,
                f0 + S.TENSOR_ENTRY.offset("flags"),
                f"unknown tensor flag bits {flags:#x}",
            )
        if tag == S.BITSET:
            c.err(
                "bitset-tensor",
                obj,
                f0,
                "BITSET tensor: read as one byte per element; the Python tooling rejects it",
                WARNING,
            )
        desc = f"{S.TAG_NAME[tag]}[{', '.join(map(str, shape))}]"
        info = r.info(name)
        if info.quant is not None:
            q = info.quant
            used = S.QUANT_HEADER_SIZE + 4 * q.scales.size + 4 * q.zero_points.size
            regions.append((qo, qo + used, qo + qn, f"{obj} quant"))
        if not flags & S.HAS_DATA:
            rep.add(obj, OK, f"{desc} no data (HAS_DATA=0)", offset=entry)
            continue
        regions.append((off, off + nbytes, off + nbytes, obj))
        numel = math.prod(shape)
        if not c.elements(tag, off, nbytes, numel, obj):
            continue
        try:
            arr = r.tensor(name)
        except TenfoldError as exc:
            rep.add_error(exc)
            continue
        st = tensor_stats(arr)
        st.update({"dtype": S.TAG_NAME[tag], "shape": list(shape), "bytes": nbytes})
        rep.stats[name] = st
        rep.add(obj, OK, f"{desc} {nbytes} bytes {_fmt_stats(st)}", offset=off)


def _check_data_section(c: _Checker, h: Any, regions: list[tuple[int, int, int, str]]) -> None:
    """Payloads must not overlap, and every byte between them must be zero."""
    regions.sort()
    cursor = h.offset_data
    prev_end, prev_obj = h.offset_data, "data section start"
    for start, used_end, decl_end, obj in regions:
        if decl_end == start:
            continue
        if start < prev_end:
            c.err(
                "overlap", obj, start, f"payload overlaps {prev_obj} (which ends at {prev_end:#x})"
            )
        else:
            c.zeros(cursor, start, f"data before {obj}", "data")
        c.zeros(max(used_end, cursor), decl_end, obj, "payload")
        cursor = max(cursor, decl_end)
        if decl_end > prev_end:
            prev_end, prev_obj = decl_end, obj
    c.zeros(cursor, h.file_size, "data section end", "data")


def _metadata_used(c: _Checker, tag: int, off: int, nbytes: int, obj: str) -> tuple[int, bool]:
    """Bytes of a metadata payload that carry data (the rest must be zero), after checking its
    element rules; and whether the value decodes."""
    mf = c.mf
    if tag == S.STRING:
        (n,) = S.STRING_LEN.unpack(mf.bytes(off, S.STRING_LEN.size, obj))
        return 4 + n, True
    if tag == S.BITSET:
        bit_count, byte_count = S.BITSET_HEAD.unpack(mf.bytes(off, S.BITSET_HEAD.size, obj))
        c.tail(off + 8, byte_count, bit_count, 1, obj)
        return 8 + byte_count, True
    if tag == S.NDARRAY:
        etag, ndim = S.NDARRAY_HEAD.unpack(mf.bytes(off, S.NDARRAY_HEAD.size, obj))
        dims = mf.bytes(off + S.NDARRAY_HEAD.size, 8 * ndim, obj)
        shape = struct.unpack(f"<{ndim}Q", dims) if ndim else ()
        numel = math.prod(shape)
        dnb = S.element_nbytes(etag, numel)
        ok = c.elements(etag, off + 8 + 8 * ndim, dnb, numel, obj)
        return 8 + 8 * ndim + dnb, ok
    return nbytes, c.elements(tag, off, nbytes, 1, obj)


def _preview(value: Any) -> str:
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        items = ", ".join(str(v) for v in flat[:8].tolist())
        more = ", ..." if flat.size > 8 else ""
        return f"{value.dtype}{list(value.shape)} {{{items}{more}}}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value)
