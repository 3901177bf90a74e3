"""safetensors as a first-class format: a zero-copy ``Mapping`` reader over a memory map.

Layout (the rules every file is checked against when it is opened)::

    offset  size  content
    0       8     N, u64 little-endian: header length (at most 100 MiB)
    8       N     UTF-8 JSON object; first byte '{', may end in spaces (padding)
    8+N     ...   data buffer; every offset in the header is relative to its start

Each header key but ``"__metadata__"`` names a tensor: ``{"dtype": <tag>, "shape": [ints >= 0],
"data_offsets": [begin, end]}``. ``__metadata__``, when present, maps strings to strings. The
tensors, sorted by ``begin``, tile the data buffer exactly: the first begins at 0, each begins
where the previous ends (no gap, no overlap), the last ends at the end of the file, and
``end - begin`` is ``prod(shape) * itemsize``. A key appears once. Violations raise
:mod:`tenfold.errors` classes naming the tensor and the absolute file offset.

Tensors are read-only views of the map (``copy=True`` gives owned arrays). The format has no
checksums: :meth:`Reader.verify` re-checks the layout and touches every tensor.
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.cli_support import inspect_row
from ...core.reader import MappedReader, Span, TensorInfo, verify_file
from ...core.report import ERROR, OK, Report
from ...core.slicing import plan
from ...errors import TenfoldError
from ._dtypes import DTYPES, PACKED_BITS
from ._format import MAX_HEADER, sniff
from ._parse import header_length, parse_header, tensor_of
from .writer import write_safetensors

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "demo", "MAX_HEADER", "sniff"]

FMT = "safetensors"


class Reader(MappedReader, Mapping[str, np.ndarray]):
    """A safetensors file: ``Mapping`` of tensor name to read-only array (zero copy).

    Names are in file order (by offset). Also offers the ``safe_open`` vocabulary:
    :meth:`get_tensor` and :meth:`metadata` values.

    Examples
    --------
    >>> import numpy as np, tempfile, os, tenfold
    >>> p = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> tenfold.save(p, {"w": np.arange(4, dtype=np.float32)})
    >>> with tenfold.open(p) as r:
    ...     r["w"].tolist(), r.info("w").shape, r.info("w").dtype
    ([0.0, 1.0, 2.0, 3.0], (4,), 'F32')
    """

    fmt = FMT

    def __init__(
        self,
        source: Any,
        *,
        copy: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        mmap: bool = True,
    ) -> None:
        self.copy = copy
        self.limits = limits
        self._map_and_parse(source, lambda mf: self._parse(), FMT, mmap=mmap)

    def _parse(self) -> None:
        # The one hardened parser (tenfold.interop.safetensors.parse_header), with tiling.
        mf = self._mf
        size = mf.size
        n = header_length(
            mf.bytes(0, min(8, size), "header length"), size, limit=self.limits.max_index_bytes
        )
        self.data_start = 8 + n
        self._entries, self._metadata = parse_header(
            mf.bytes(8, n, "header"), size - self.data_start, limits=self.limits, tile=True
        )

    # -- Mapping ------------------------------------------------------------------------------
    def _keys(self) -> Mapping[str, Any]:
        return self._entries

    def span(self, name: str) -> Span | None:
        """Where tensor ``name`` lies in the file (every type but the packed ``F4``): see
        :mod:`tenfold.core.reader`."""
        tag, shape, begin, end = self._get(name)
        dt = DTYPES.get(tag)
        if tag in PACKED_BITS or dt is None:
            return None
        n = dt.itemsize
        for d in shape:
            n *= d
        return Span(self.data_start + begin, dt, tuple(shape)) if end - begin == n else None

    def _get(self, name: str) -> tuple[str, tuple[int, ...], int, int]:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"safetensors: no tensor named {name!r}") from None

    def read(self, name: str, index: Any = None, *, copy: bool | None = None) -> np.ndarray:
        """Tensor ``name``: a read-only view of the map (``copy=True``: an owned array).

        With ``index`` (a basic slice) only the rows the slice touches are read (``F4``,
        packed two to a byte, is read whole and sliced).
        """
        entry = self._get(name)
        tag, shape, begin, end = entry
        copy = self.copy if copy is None else copy
        where = f"tensor {name!r}"
        off = self.data_start + begin
        if index is not None:
            pl = plan(FMT, where, shape, index)
            if tag not in PACKED_BITS and shape:
                dt = DTYPES[tag]
                row = dt.itemsize * math.prod(shape[1:])
                rows = self._mf.array(off + pl.lo * row, dt, (pl.hi - pl.lo, *shape[1:]), where)
                result = pl.finish(rows)
                return np.array(result) if copy or not isinstance(result, np.ndarray) else result
            return pl.apply(self.read(name, copy=copy))
        if tag not in PACKED_BITS:
            arr = self._mf.array(off, DTYPES[tag], shape, where)
            if arr.flags.writeable:  # an empty array is a fresh one: keep the read-only rule
                arr.flags.writeable = False
            return np.array(arr) if copy else arr
        return tensor_of(
            self._mf.u8(off, end - begin, where),
            entry,
            copy=copy,
            fmt=FMT,
            where=where,
            offset=off,
            budget=self.limits.budget(),
        )

    def read_many(self, names: Any, *, copy: bool | None = None) -> dict[str, np.ndarray]:
        """Several tensors; on a remote file neighbours are fetched in one request."""
        names = list(names)
        ranges = [(self.data_start + e[2], e[3] - e[2]) for e in map(self._get, names)]
        self._mf.prefetch(ranges)
        try:
            return {k: self.read(k, copy=copy) for k in names}
        finally:
            self._mf.release()

    def get_tensor(self, name: str) -> np.ndarray:
        """``safe_open``'s name for :meth:`read`."""
        return self.read(name)

    def info(self, name: str) -> TensorInfo:
        tag, shape, begin, end = self._get(name)
        return TensorInfo(
            name,
            tag,
            shape,
            (self.data_start + begin, self.data_start + end),
            "raw",
            None,
            {"numpy_dtype": str(DTYPES[tag])},
            DTYPES[tag],
        )

    @property
    def metadata(self) -> dict[str, str]:
        """The ``__metadata__`` object (``{}`` without one; :attr:`has_metadata` tells)."""
        return dict(self._metadata or {})

    @property
    def has_metadata(self) -> bool:
        """Whether the header has a ``__metadata__`` object (``safetensors`` gives None for
        ``metadata()`` when it does not)."""
        return self._metadata is not None

    def verify(self) -> Report:
        """Every layout rule (checked at open) and every tensor's byte range in the file.

        safetensors has no checksums, so nothing more can be checked.
        """
        report = Report(FMT, self.path or "<buffer>")
        report.add("header", OK, f"{len(self)} tensors, header {self.data_start - 8} bytes")
        for name, (_tag, _shape, begin, end) in self._entries.items():
            try:
                self._mf.check(self.data_start + begin, end - begin, f"tensor {name!r}")
                report.add(f"tensor {name!r}", OK, offset=self.data_start + begin)
            except TenfoldError as exc:  # pragma: no cover - the layout was checked at open
                report.add(f"tensor {name!r}", ERROR, str(exc))
        return report


def open(source: Any, **kw: Any) -> Reader:  # noqa: A001 - the format API name
    """Open a safetensors file (path or buffer); see :class:`Reader`."""
    return Reader(source, **kw)


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """Every tensor (read-only views of the file unless ``copy=True``)."""
    with Reader(source, **kw) as r:
        return r.read_many(list(r), copy=copy)


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """Write ``tensors`` (``metadata=`` a dict of strings) atomically."""
    write_safetensors(path, tensors, **kw)


def inspect(source: Any) -> list[dict]:
    """One row per tensor."""
    with Reader(source) as r:
        rows = []
        for name in r:
            i = r.info(name)
            assert i.byte_range is not None
            rows.append(
                inspect_row(
                    name,
                    i.dtype,
                    i.shape,
                    i.byte_range[1] - i.byte_range[0],
                    "raw",
                    offset=i.byte_range[0],
                )
            )
        return rows


def verify(source: Any, **kw: Any) -> Report:
    """Check every layout rule and every tensor's range; never raises on a damaged file."""
    out: Report = verify_file(FMT, Reader, source, **kw)
    return out


def demo(directory: pathlib.Path) -> pathlib.Path:
    """Write a small deterministic sample; return its path."""
    path = pathlib.Path(directory) / "demo.safetensors"
    rng = np.random.default_rng(11)
    save(
        path,
        {
            "embedding": rng.standard_normal((16, 8)).astype(np.float32),
            "bias": np.zeros(8, np.float16),
            "step": np.array(3, np.int64),
        },
        metadata={"format": "pt", "source": "tenfold demo"},
    )
    return path
