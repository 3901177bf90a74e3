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

import json
import os
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core.bounds import DEFAULT_LIMITS, Limits, checked_numel
from ..core.reader import MappedReader, TensorInfo, verify_file
from ..core.report import ERROR, OK, Report
from ..errors import FormatError, LimitError, TenfoldError, TruncatedError, UnsupportedError
from ..errors import describe as _describe
from .safetensors import DTYPES, write_safetensors

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "demo", "MAX_HEADER", "sniff"]

FMT = "safetensors"
#: Largest header accepted (the limit of the reference implementation).
MAX_HEADER = 100 << 20


def sniff(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) looks like safetensors: a plausible
    header length followed by ``{``."""
    if len(head) < 9 or head[8:9] != b"{":
        return False
    n = int.from_bytes(head[:8], "little")
    return 2 <= n <= MAX_HEADER


def _duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise FormatError(_describe(FMT, "header", offset=8, detail=f"key {k!r} appears twice"))
        out[k] = v
    return out


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

    def __init__(self, source: Any, *, copy: bool = False, limits: Limits = DEFAULT_LIMITS) -> None:
        self.copy = copy
        self.limits = limits
        self._map(source, FMT)
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    def _parse(self) -> None:
        mf = self._mf
        size = mf.size
        if size < 8:
            raise TruncatedError(
                _describe(
                    FMT,
                    "header length",
                    offset=0,
                    detail="file shorter than the 8-byte length",
                    expected=">= 8 bytes",
                    got=size,
                )
            )
        n = int(mf.array(0, "<u8", ()))
        limit = min(MAX_HEADER, self.limits.max_index_bytes)
        if n > limit:
            raise LimitError(
                _describe(
                    FMT,
                    "header length",
                    offset=0,
                    detail="above the limit",
                    expected=f"<= {limit}",
                    got=n,
                )
            )
        if n > size - 8:
            raise TruncatedError(
                _describe(
                    FMT,
                    "header length",
                    offset=0,
                    detail="header ends past end of file",
                    expected=f"<= {size - 8}",
                    got=n,
                )
            )
        raw = mf.bytes(8, n, "header")
        if raw[:1] != b"{":
            raise FormatError(
                _describe(
                    FMT,
                    "header",
                    offset=8,
                    detail="does not start with '{'",
                    expected="'{'",
                    got=repr(raw[:1]),
                )
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(
                _describe(FMT, "header", offset=8 + exc.start, detail="invalid UTF-8")
            ) from None
        try:
            header = json.loads(text, object_pairs_hook=_duplicates)
        except RecursionError:
            raise FormatError(
                _describe(FMT, "header", offset=8, detail="nested too deeply")
            ) from None
        except json.JSONDecodeError as exc:
            raise FormatError(
                _describe(
                    FMT,
                    "header",
                    offset=8 + len(text[: exc.pos].encode()),
                    detail=f"invalid JSON: {exc.msg}",
                )
            ) from None
        except ValueError as exc:  # int() past the digit limit
            raise FormatError(
                _describe(FMT, "header", offset=8, detail=f"invalid JSON: {exc}")
            ) from None
        if not isinstance(header, dict):
            raise FormatError(
                _describe(
                    FMT, "header", offset=8, detail="not a JSON object", got=type(header).__name__
                )
            )
        meta = header.pop("__metadata__", None)
        if meta is None:
            meta = {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise FormatError(
                _describe(
                    FMT,
                    "header",
                    offset=8,
                    field="__metadata__",
                    detail="not an object of strings",
                    got=meta,
                )
            )
        self._metadata: dict[str, str] = meta
        self.data_start = 8 + n
        data_size = size - self.data_start
        if len(header) > self.limits.max_objects:
            raise LimitError(
                _describe(
                    FMT,
                    "header",
                    offset=8,
                    field="tensors",
                    detail="above max_objects",
                    expected=f"<= {self.limits.max_objects}",
                    got=len(header),
                )
            )
        entries = []
        for name, e in header.items():
            entries.append(self._entry(name, e))
        entries.sort(key=lambda t: (t[3], t[4]))
        pos = 0
        for name, _tag, _shape, begin, end in entries:
            if begin != pos:
                what = "gap before it" if begin > pos else "overlaps the tensor before it"
                raise FormatError(
                    _describe(
                        FMT,
                        f"tensor {name!r}",
                        offset=self.data_start + begin,
                        field="data_offsets",
                        detail=f"{what} (tensors must tile the data buffer)",
                        expected=f"begin {pos}",
                        got=begin,
                    )
                )
            pos = end
        if pos != data_size:
            cls = TruncatedError if pos > data_size else FormatError
            last = repr(entries[-1][0]) if entries else "(none)"
            raise cls(
                _describe(
                    FMT,
                    f"tensor {last}" if entries else "data buffer",
                    offset=self.data_start + pos,
                    field="data_offsets",
                    detail="tensors do not end where the file ends",
                    expected=f"end {data_size}",
                    got=pos,
                )
            )
        self._entries = {name: (tag, shape, begin, end) for name, tag, shape, begin, end in entries}

    def _entry(self, name: str, e: Any) -> tuple[str, str, tuple[int, ...], int, int]:
        where = f"tensor {name!r}"
        if not isinstance(e, dict):
            raise FormatError(
                _describe(
                    FMT, where, offset=8, detail="entry is not an object", got=type(e).__name__
                )
            )
        extra = sorted(set(e) - {"dtype", "shape", "data_offsets"})
        missing = sorted({"dtype", "shape", "data_offsets"} - set(e))
        if missing or extra:
            raise FormatError(
                _describe(
                    FMT,
                    where,
                    offset=8,
                    detail="keys",
                    expected="dtype, shape, data_offsets",
                    got=f"missing {missing}, unknown {extra}",
                )
            )
        tag = e["dtype"]
        if not isinstance(tag, str) or tag not in DTYPES:
            raise UnsupportedError(
                _describe(
                    FMT,
                    where,
                    offset=8,
                    field="dtype",
                    detail="unknown",
                    expected=" | ".join(DTYPES),
                    got=tag if isinstance(tag, str) else type(tag).__name__,
                )
            )
        shape = e["shape"]
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise FormatError(
                _describe(
                    FMT,
                    where,
                    offset=8,
                    field="shape",
                    detail="not a list of non-negative integers",
                    got=shape,
                )
            )
        if len(shape) > self.limits.max_ndim:
            raise LimitError(
                _describe(
                    FMT,
                    where,
                    offset=8,
                    field="shape",
                    detail="too many dimensions",
                    expected=f"<= {self.limits.max_ndim}",
                    got=len(shape),
                )
            )
        offs = e["data_offsets"]
        if not (
            isinstance(offs, list)
            and len(offs) == 2
            and all(type(o) is int and o >= 0 for o in offs)
        ):
            raise FormatError(
                _describe(
                    FMT,
                    where,
                    offset=8,
                    field="data_offsets",
                    detail="not [begin, end] non-negative integers",
                    got=offs,
                )
            )
        begin, end = offs
        if end < begin:
            raise FormatError(
                _describe(
                    FMT,
                    where,
                    offset=self.data_start + begin,
                    field="data_offsets",
                    detail="end before begin",
                    expected=f"end >= {begin}",
                    got=end,
                )
            )
        numel = checked_numel(FMT, where, shape)
        want = numel * DTYPES[tag].itemsize
        if end - begin != want:
            raise FormatError(
                _describe(
                    FMT,
                    where,
                    offset=self.data_start + begin,
                    field="data_offsets",
                    detail="size is not shape x itemsize",
                    expected=want,
                    got=end - begin,
                )
            )
        data_size = self._mf.size - self.data_start
        if end > data_size:
            raise TruncatedError(
                _describe(
                    FMT,
                    where,
                    offset=self.data_start + begin,
                    field="data_offsets",
                    detail="ends past end of file",
                    expected=f"end <= {data_size}",
                    got=end,
                )
            )
        return name, tag, tuple(shape), begin, end

    # -- Mapping ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def _get(self, name: str) -> tuple[str, tuple[int, ...], int, int]:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"safetensors: no tensor named {name!r}") from None

    def read(self, name: str, *, copy: bool | None = None) -> np.ndarray:
        """Tensor ``name``: a read-only view of the map (``copy=True``: an owned array)."""
        tag, shape, begin, _end = self._get(name)
        arr = self._mf.array(self.data_start + begin, DTYPES[tag], shape, f"tensor {name!r}")
        if arr.flags.writeable:  # an empty array is a fresh one: keep the read-only contract
            arr.flags.writeable = False
        return np.array(arr) if (self.copy if copy is None else copy) else arr

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
        )

    @property
    def metadata(self) -> dict[str, str]:
        """The ``__metadata__`` object (``{}`` without one)."""
        return dict(self._metadata)

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
        return {k: r.read(k, copy=copy) for k in r}


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
                {
                    "name": name,
                    "dtype": i.dtype,
                    "shape": "x".join(map(str, i.shape)) or "()",
                    "bytes": i.byte_range[1] - i.byte_range[0],
                    "encoding": "raw",
                    "layout": "dense",
                    "checksum": "-",
                    "offset": i.byte_range[0],
                }
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
