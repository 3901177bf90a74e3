"""PyTorch checkpoints (``.pt``, ``.pth``, ``pytorch_model.bin``) read without unpickling.

Opening maps the file, finds the pickle and the storages (:mod:`._layout`: the zip layout
``torch.save`` writes since PyTorch 1.6, and the legacy layout), runs the pickle through
tenfold's own bounded opcode reader (:mod:`._pickle`: it imports nothing the file names and
calls nothing but its own builders of dicts, lists, tensors and storages; every other global is
refused by name), checks every tensor's offset, shape and strides against its storage, and
names the tensors by their paths in the saved object (:mod:`._tree`; what is not a tensor is
file metadata).

A tensor is a read-only NumPy view of its storage's bytes in the map (zero copy: strides and
storage offsets kept, so a transposed or sliced tensor is a strided view, and tensors that share
a storage, tied weights, are views of the same bytes). A storage in a deflated member is
inflated first, and a checkpoint written on a big-endian machine (``byteorder`` "big") gives
native-order copies: both charged to the call's decode budget.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Budget, Limits, checked_numel
from ...core.cli_support import inspect_row
from ...core.reader import MappedReader, Span, TensorInfo, verify_file
from ...core.report import ERROR, OK, Report
from ...errors import TenfoldError, factory
from ._format import FMT, ZIP_LOCAL, sniff
from ._layout import Layout, Placed, legacy_layout, zip_layout
from ._pickle import DTYPES, Tensor
from ._tree import flatten
from ._zip import crc_of, member_bytes

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "demo", "sniff"]

E = factory(FMT)


def _dtype(t: Tensor) -> np.dtype:
    dt = DTYPES[t.dtype]
    assert dt is not None  # the pickle reader refuses the others
    return dt


def _extent(t: Tensor) -> int:
    """Elements of the storage from ``t.offset`` the view reaches (0 for an empty tensor)."""
    if 0 in t.shape:
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride, strict=True))


def _contiguous(t: Tensor) -> bool:
    want = 1
    for d, s in zip(reversed(t.shape), reversed(t.stride), strict=True):
        if d != 1 and s != want:
            return False
        want *= d
    return True


class Reader(MappedReader, Mapping[str, np.ndarray]):
    """A PyTorch checkpoint: ``Mapping`` of tensor name (its dotted path in the saved object)
    to a read-only NumPy array; :attr:`metadata` holds what is not a tensor.

    Examples
    --------
    >>> import tempfile, tenfold
    >>> from tenfold.formats.torchpickle import reader
    >>> p = reader.demo(tempfile.mkdtemp())
    >>> with tenfold.open(p) as r:
    ...     r["model.layer.weight"].shape, r.info("model.layer.weight").dtype, r.metadata
    ((4, 3), 'float32', {'epoch': 3})
    """

    fmt = FMT

    def __init__(
        self, source: Any, *, copy: bool = False, limits: Limits = DEFAULT_LIMITS, mmap: bool = True
    ) -> None:
        self.copy = copy
        self.limits = limits
        self._map(source, FMT, mmap=mmap)
        self._inflated: dict[str, np.ndarray] = {}
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        mf = self._mf
        what = self.path or "<buffer>"
        if mf.size < 4:
            raise E.truncated(what, detail=f"the file has {mf.size} bytes")
        zipped = mf.bytes(0, 4, "magic") == ZIP_LOCAL
        lay = zip_layout(mf, self.limits, what) if zipped else legacy_layout(mf, self.limits, what)
        self._layout: Layout = lay
        tensors, self._meta = flatten(lay.root, lay.pickle_bytes + 16, what)
        if len(tensors) > self.limits.max_objects:
            raise E.limit(what, field="tensors", expected=f"<= {self.limits.max_objects}",
                          got=len(tensors))  # fmt: skip
        for name, t in tensors.items():
            self._check(name, t)
        self._tensors = tensors

    def _check(self, name: str, t: Tensor) -> None:
        """Refuse a tensor whose view would reach outside its storage."""
        dt = _dtype(t)
        where = f"tensor {name!r}"
        checked_numel(FMT, where, t.shape, self.limits, itemsize=dt.itemsize, offset=t.at)
        need = (t.offset + _extent(t)) * dt.itemsize if _extent(t) else 0
        have = t.storage.nbytes
        if need > have:
            raise E.format(where, offset=t.at, field="storage extent",
                           detail=f"the view (offset {t.offset}, shape {list(t.shape)}, "
                           f"stride {list(t.stride)}) reaches past storage {t.storage.key!r}",
                           expected=f"<= {have} bytes", got=need)  # fmt: skip

    # -- Mapping ------------------------------------------------------------------------------
    def _keys(self) -> Mapping[str, Any]:
        return self._tensors

    def _get(self, name: str) -> Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"{FMT}: no tensor named {name!r}") from None

    def _storage(self, p: Placed, budget: Budget) -> np.ndarray:
        """The storage's bytes: a view of the map, or its inflated member (kept)."""
        if self.closed:
            raise ValueError(f"{FMT}: I/O operation on a closed file")
        if p.offset is not None:
            return self._mf.u8(p.offset, p.storage.nbytes, f"storage {p.storage.key!r}")  # type: ignore[no-any-return]
        got = self._inflated.get(p.storage.key)
        if got is None:
            assert p.member is not None
            got = member_bytes(self._mf, p.member, budget, self.limits.max_decoded_bytes)
            self._inflated[p.storage.key] = got
        return got

    def read(self, name: str, index: Any = None, *, copy: bool | None = None) -> np.ndarray:
        """Tensor ``name``: a read-only view of the file (``copy=True``: an owned array);
        ``index`` (a basic slice) is applied to that view."""
        t = self._get(name)
        copy = self.copy if copy is None else copy
        budget = self.limits.budget()
        dt = _dtype(t)
        p = self._layout.storages[t.storage.key]
        if 0 in t.shape:
            out = np.empty(t.shape, dt)
            out.flags.writeable = copy
            return out
        base = self._storage(p, budget)
        size = dt.itemsize
        strides = tuple(s * size for s in t.stride)
        where = f"tensor {name!r}"
        if self._layout.big_endian:
            raw = np.ndarray(t.shape, np.dtype(f"V{size}"), base, t.offset * size, strides)
            budget.take(raw.nbytes, FMT, where, offset=t.at)
            arr = _swapped(raw, dt)
            copy = False
        else:
            arr = np.ndarray(t.shape, dt, base, t.offset * size, strides)
        if index is not None:
            arr = arr[index]
        if copy:
            budget.take(arr.nbytes, FMT, where, offset=t.at)
            return np.array(arr)
        return arr

    def span(self, name: str) -> Span | None:
        """Where tensor ``name`` lies raw in the file: a C-contiguous tensor of a stored,
        little-endian storage (see :mod:`tenfold.core.reader`); None for the others."""
        t = self._get(name)
        p = self._layout.storages[t.storage.key]
        if p.offset is None or self._layout.big_endian or not _contiguous(t):
            return None
        dt = _dtype(t)
        return Span(p.offset + t.offset * dt.itemsize, dt, t.shape)

    def info(self, name: str) -> TensorInfo:
        t = self._get(name)
        dt = _dtype(t)
        p = self._layout.storages[t.storage.key]
        span = self.span(name)
        rng = None
        if span is not None:
            rng = (span.offset, span.offset + _extent(t) * dt.itemsize)
        extras = {
            "storage": t.storage.key,
            "storage_offset": t.offset,
            "stride": t.stride,
            "contiguous": _contiguous(t),
            "layout": self._layout.kind,
        }
        if p.member is not None:
            extras["member"] = p.member.name
        return TensorInfo(name, t.dtype, t.shape, rng,
                          "deflate" if p.offset is None else "raw", None, extras, dt)  # fmt: skip

    @property
    def metadata(self) -> dict[str, Any]:
        """What the saved object holds besides tensors, by dotted path (JSON values; see
        :mod:`tenfold.formats.torchpickle._tree`)."""
        return dict(self._meta)

    @property
    def layout(self) -> Layout:
        """The layout found at open (``kind`` "zip" or "legacy", byte order, details)."""
        return self._layout

    def verify(self) -> Report:
        """The CRC-32 of ``data.pkl`` and of every zip member a tensor reads (the legacy
        layout has none) and every tensor's view (checked at open)."""
        report = Report(FMT, self.path or "<buffer>")
        lay = self._layout
        report.add("pickle", OK, f"{lay.kind} layout, {len(self)} tensors")
        pm = lay.pickle_member
        members: list[tuple[str, Any]] = [(f"member {pm.name!r}", pm)] if pm is not None else []
        members += [(f"storage {key!r}", p.member) for key, p in lay.storages.items()]
        for what, m in members:
            if m is None:
                continue
            try:
                got = crc_of(self._mf, m)
            except TenfoldError as exc:
                report.add(what, ERROR, str(exc))
                continue
            if got != m.crc:
                report.add(what, ERROR, f"crc32 mismatch; expected {m.crc:08x}, got {got:08x}",
                           offset=m.offset)  # fmt: skip
            else:
                report.add(what, OK, f"crc32 {got:08x}", offset=m.offset)
        for name in self:
            try:
                self.read(name)
                report.add(f"tensor {name!r}", OK)
            except TenfoldError as exc:
                report.add(f"tensor {name!r}", ERROR, str(exc))
        return report


def _swapped(raw: np.ndarray, dt: np.dtype) -> np.ndarray:
    """A native-order copy of big-endian elements ``raw`` (a void view): each element's bytes
    reversed, per half for a complex number."""
    unit = dt.itemsize // 2 if dt.kind == "c" else dt.itemsize
    flat = np.ascontiguousarray(raw).view(np.uint8).reshape(-1, unit)
    out = np.ascontiguousarray(flat[:, ::-1]).reshape(-1).view(dt).reshape(raw.shape)
    out.flags.writeable = False
    return out


def open(source: Any, **kw: Any) -> Reader:  # noqa: A001 - the format API name
    """Open a PyTorch checkpoint (path or buffer); see :class:`Reader`."""
    return Reader(source, **kw)


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """Every tensor (read-only views of the file unless ``copy=True``)."""
    with Reader(source, **kw) as r:
        return {k: r.read(k, copy=copy) for k in r}


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """Refused: tenfold reads PyTorch checkpoints but does not write pickles."""
    raise E.unsupported(os.fspath(path), detail="tenfold reads PyTorch checkpoints but does "
                        "not write them; write .safetensors or .zt instead")  # fmt: skip


def inspect(source: Any) -> list[dict]:
    """One row per tensor."""
    with Reader(source) as r:
        rows = []
        for name in r:
            i = r.info(name)
            assert i.np_dtype is not None
            rows.append(
                inspect_row(
                    name,
                    i.dtype,
                    i.shape,
                    int(np.prod(i.shape, dtype=object)) * i.np_dtype.itemsize,
                    i.encoding,
                    layout="dense" if i.extras["contiguous"] else "strided",
                    offset=i.byte_range[0] if i.byte_range else "-",
                )
            )
        return rows


def verify(source: Any, **kw: Any) -> Report:
    """Check every storage's CRC-32 and every tensor; never raises on a damaged file."""
    out: Report = verify_file(FMT, Reader, source, **kw)
    return out


def demo(directory: Any) -> pathlib.Path:
    """Write a small checkpoint in the zip layout (without PyTorch); return its path."""
    from ._demo import write_checkpoint

    path = pathlib.Path(directory) / "demo.pt"
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    write_checkpoint(
        path,
        {
            "model": {"layer.weight": w, "layer.bias": np.zeros(4, np.float32)},
            "epoch": 3,
        },
    )
    return path
