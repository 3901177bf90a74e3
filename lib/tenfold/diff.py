"""Compare two checkpoints tensor by tensor: :func:`diff` and ``tenfold diff A B``.

The two sides are anything :func:`tenfold.open` opens (a file of any format, a sharded index, an
fsspec URL) or an already opened reader, so a ``.safetensors`` file can be compared with its
``.zt`` conversion, a v2 file with a 0.1.0 one, an index of shards with one file, two training
steps on a server. Tensors are matched by name, then compared one pair at a time: each pair is
read, compared block by block and dropped before the next is read, so memory is bounded by the
largest pair, whatever the number of tensors (see :mod:`tenfold._diffstats` for the arithmetic).

For each name in both files, a :class:`TensorDiff` with a ``status``:

``identical``
    same dtype, same shape, same bytes (``0.0`` and ``-0.0``, or two NaN payloads, differ);
``close``
    same dtype and shape, different bytes, but every element within the tolerance
    (only when ``atol`` or ``rtol`` is given);
``different``
    same dtype and shape, and some element differs (beyond the tolerance when one is given);
``dtype``
    the element types differ (the values are still compared when the shapes match);
``shape``
    the shapes differ (nothing is read).

Dtypes are compared as NumPy (and ``ml_dtypes``) types, whatever each format calls them
(safetensors ``F32`` and zTensor ``float32`` are one type). Numbers, bools and the
``ml_dtypes`` types are compared by value: ``max_abs`` (exact for integer pairs),
``max_rel`` (``|a - b| / max(|a|, |b|)``, 0 where both are 0), ``cosine`` and the NaN and
infinity counts of each side; the differences are taken over the elements finite on both
sides, and a NaN or an infinity on one side only counts as a mismatch. Anything else a reader
gives (a packed or quantized tensor given as its parts, raw bytes) is compared by its bytes
(``kind`` ``"raw"``: identical or not, no statistics). A sparse tensor is compared as its dense
array.

Tolerance: with neither ``atol`` nor ``rtol`` (the default), two tensors are equal only when
they are identical. With either (the other then defaults to 0), an element pair ``a`` (from A),
``b`` (from B) is equal when ``|a - b| <= atol + rtol * |b|`` (:func:`numpy.isclose`'s rule,
B being the reference), when both are NaN (at the same place: a NaN against a number is
never equal) or when both are the same infinity.

The result is equal (``exit_code`` 0) when every tensor is identical or close, no name is on
one side only and, unless ``metadata=False``, the file metadata agree. Metadata are compared as
the readers give them, which includes what a format reports of itself (zTensor 0.1.0's
``version``, a sharded index's ``total_size``).

>>> import tempfile, os, numpy as np, tenfold
>>> d = tempfile.mkdtemp()
>>> a, b = os.path.join(d, "a.safetensors"), os.path.join(d, "b.npz")
>>> tenfold.save(a, {"w": np.ones(3, np.float32)})
>>> tenfold.save(b, {"w": np.array([1, 1, 1.5], np.float32)})
>>> r = tenfold.diff(a, b)
>>> r.tensors[0].status, r.tensors[0].max_abs, r.exit_code
('different', 0.5, 1)
>>> tenfold.diff(a, b, atol=0.5).equal
True
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

__all__ = [
    "diff",
    "DiffResult",
    "TensorDiff",
    "MetadataDiff",
    "Side",
    "SCHEMA",
    "SCHEMA_ID",
    "STATUSES",
    "reading",
    "failed_source",
]

SCHEMA_ID = "tenfold.diff/1"
IDENTICAL, CLOSE, DIFFERENT, DTYPE, SHAPE = "identical", "close", "different", "dtype", "shape"
#: every tensor status, the equal ones first
STATUSES = (IDENTICAL, CLOSE, DIFFERENT, DTYPE, SHAPE)
ONLY_IN_A, ONLY_IN_B, CHANGED = "only_in_a", "only_in_b", "changed"
NUMERIC, RAW = "numeric", "raw"


@dataclasses.dataclass
class TensorDiff:
    """One name present in both files (see the module doc for ``status``)."""

    name: str
    status: str
    dtype_a: str
    dtype_b: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    nbytes_a: int | None = None
    nbytes_b: int | None = None
    #: ``"numeric"`` (compared by value), ``"raw"`` (by bytes) or None (shapes differ)
    kind: str | None = None
    identical: bool = False
    elements: int | None = None
    mismatched: int | None = None
    max_abs: float | int | None = None
    max_rel: float | None = None
    cosine: float | None = None
    nan_a: int | None = None
    nan_b: int | None = None
    inf_a: int | None = None
    inf_b: int | None = None

    @property
    def equal(self) -> bool:
        """Identical, or close within the tolerance."""
        return self.status in (IDENTICAL, CLOSE)


@dataclasses.dataclass
class MetadataDiff:
    """A metadata key whose value differs, or that one file only has (the missing side is
    None)."""

    key: str
    status: str  # "only_in_a", "only_in_b" or "changed"
    a: Any = None
    b: Any = None


@dataclasses.dataclass
class Side:
    """One compared file: what was given, its format (the registry's name) and tensor count."""

    path: str
    format: str | None
    tensors: int


@dataclasses.dataclass
class DiffResult:
    """What :func:`diff` found (``to_json()`` gives the ``tenfold diff --json`` document)."""

    a: Side
    b: Side
    atol: float | None
    rtol: float | None
    tensors: list[TensorDiff]
    only_in_a: list[str]
    only_in_b: list[str]
    #: the metadata keys that differ, or None when metadata were not compared
    metadata: list[MetadataDiff] | None

    @property
    def identical(self) -> bool:
        """Same names, dtypes, shapes and bytes, and the same metadata (when compared)."""
        return self.equal and all(t.status == IDENTICAL for t in self.tensors)

    @property
    def equal(self) -> bool:
        """What the exit status says: every tensor identical or close, no name on one side
        only, no metadata difference (when compared)."""
        return (
            not self.only_in_a
            and not self.only_in_b
            and not self.metadata
            and all(t.equal for t in self.tensors)
        )

    @property
    def exit_code(self) -> int:
        """0 when :attr:`equal`, else 1."""
        return 0 if self.equal else 1

    def counts(self) -> dict[str, int | None]:
        """How many tensors have each status, names on one side only, metadata differences."""
        out: dict[str, int | None] = {"compared": len(self.tensors)}
        out.update({s: sum(t.status == s for t in self.tensors) for s in STATUSES})
        out["only_in_a"], out["only_in_b"] = len(self.only_in_a), len(self.only_in_b)
        out["metadata"] = None if self.metadata is None else len(self.metadata)
        return out

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON-ready ``dict`` (schema :data:`SCHEMA`)."""
        return {
            "schema": SCHEMA_ID,
            "a": dataclasses.asdict(self.a),
            "b": dataclasses.asdict(self.b),
            "atol": self.atol,
            "rtol": self.rtol,
            "identical": self.identical,
            "equal": self.equal,
            "exit_code": self.exit_code,
            "summary": self.counts(),
            "only_in_a": list(self.only_in_a),
            "only_in_b": list(self.only_in_b),
            "tensors": [_tensor_json(t) for t in self.tensors],
            "metadata": None
            if self.metadata is None
            else [
                {"key": m.key, "status": m.status, "a": _jsonable(m.a), "b": _jsonable(m.b)}
                for m in self.metadata
            ],
        }


def _tensor_json(t: TensorDiff) -> dict[str, Any]:
    doc = dataclasses.asdict(t)
    doc["shape_a"], doc["shape_b"] = list(t.shape_a), list(t.shape_b)
    for key in ("max_abs", "max_rel", "cosine"):
        doc[key] = _number(doc[key])
    return doc


def _number(x: Any) -> Any:
    """JSON has no infinity: a float difference that overflows float64 is ``"inf"``."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def _jsonable(v: Any) -> Any:
    """A metadata value as JSON: strings, numbers, bools and None as they are; lists and
    mappings element by element; arrays as lists; anything else as its ``str``."""
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        return _number(v)
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "tolist") and hasattr(v, "dtype"):
        return _jsonable(v.tolist())
    return str(v)


_NUM = {"type": ["number", "null", "string"]}
_INT = {"type": ["integer", "null"]}
_SIDE = {
    "type": "object",
    "required": ["path", "format", "tensors"],
    "properties": {
        "path": {"type": "string"},
        "format": {"type": ["string", "null"]},
        "tensors": {"type": "integer"},
    },
}
_SHAPE = {"type": "array", "items": {"type": "integer"}}
_TENSOR_PROPS: dict[str, Any] = {
    "name": {"type": "string"},
    "status": {"enum": list(STATUSES)},
    "dtype_a": {"type": "string"},
    "dtype_b": {"type": "string"},
    "shape_a": _SHAPE,
    "shape_b": _SHAPE,
    "nbytes_a": _INT,
    "nbytes_b": _INT,
    "kind": {"enum": [NUMERIC, RAW, None]},
    "identical": {"type": "boolean"},
    "elements": _INT,
    "mismatched": _INT,
    "max_abs": _NUM,
    "max_rel": _NUM,
    "cosine": {"type": ["number", "null"]},
    "nan_a": _INT,
    "nan_b": _INT,
    "inf_a": _INT,
    "inf_b": _INT,
}
#: The JSON Schema of :meth:`DiffResult.to_json` (``tenfold diff --json``).
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "schema",
        "a",
        "b",
        "atol",
        "rtol",
        "identical",
        "equal",
        "exit_code",
        "summary",
        "only_in_a",
        "only_in_b",
        "tensors",
        "metadata",
    ],  # fmt: skip
    "properties": {
        "schema": {"enum": [SCHEMA_ID]},
        "a": _SIDE,
        "b": _SIDE,
        "atol": {"type": ["number", "null"]},
        "rtol": {"type": ["number", "null"]},
        "identical": {"type": "boolean"},
        "equal": {"type": "boolean"},
        "exit_code": {"enum": [0, 1]},
        "summary": {
            "type": "object",
            "additionalProperties": False,
            "required": ["compared", *STATUSES, "only_in_a", "only_in_b", "metadata"],
            "properties": {
                **{k: {"type": "integer"} for k in ("compared", *STATUSES)},
                "only_in_a": {"type": "integer"},
                "only_in_b": {"type": "integer"},
                "metadata": _INT,
            },
        },
        "only_in_a": {"type": "array", "items": {"type": "string"}},
        "only_in_b": {"type": "array", "items": {"type": "string"}},
        "tensors": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": list(_TENSOR_PROPS),
                "properties": _TENSOR_PROPS,
            },
        },
        "metadata": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "status", "a", "b"],
                "properties": {
                    "key": {"type": "string"},
                    "status": {"enum": [ONLY_IN_A, ONLY_IN_B, CHANGED]},
                    "a": {},
                    "b": {},
                },
            },
        },
    },
}


# -- the comparison -----------------------------------------------------------------------------


def diff(
    a: Any,
    b: Any,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    metadata: bool = True,
    progress: bool | None = None,
    **options: Any,
) -> DiffResult:
    """Compare checkpoint ``a`` with checkpoint ``b`` (see :mod:`tenfold.diff`).

    Parameters
    ----------
    a, b
        Paths, sharded indexes or fsspec URLs (opened with :func:`tenfold.open` and closed
        after), or readers already opened (left open).
    atol, rtol
        Call tensors whose elements are all within ``atol + rtol * |b|`` equal (status
        ``close``); without either, equal means identical.
    metadata
        Compare the file metadata too (``False``: tensors only).
    progress
        Draw a progress bar (None: on a terminal only; see :mod:`tenfold.core.progress`).
    options
        Passed to :func:`tenfold.open` for both sides (``storage_options=``, ``mmap=``...).
    """
    from .core.progress import progress as bar

    tol = _tolerance(atol, rtol)
    with _opened(a, options) as ra, _opened(b, options) as rb:
        names_a, names_b = list(ra), list(rb)
        common = [n for n in names_a if n in rb]
        rows = [
            _compare(ra, rb, name, tol)
            for name in bar(common, total=len(common), desc="diff", unit="tensor", show=progress)
        ]
        meta = _metadata(ra, rb) if metadata else None
        return DiffResult(
            a=Side(_label(a), _format_of(ra), len(names_a)),
            b=Side(_label(b), _format_of(rb), len(names_b)),
            atol=None if tol is None else tol[0],
            rtol=None if tol is None else tol[1],
            tensors=rows,
            only_in_a=[n for n in names_a if n not in rb],
            only_in_b=[n for n in names_b if n not in ra],
            metadata=meta,
        )


def _tolerance(atol: float | None, rtol: float | None) -> tuple[float, float] | None:
    if atol is None and rtol is None:
        return None
    out = []
    for what, value in (("atol", atol), ("rtol", rtol)):
        x = 0.0 if value is None else float(value)
        if not x >= 0.0:  # NaN too
            raise ValueError(f"diff: {what} must be a number >= 0, got {value!r}")
        out.append(x)
    return out[0], out[1]


def _is_reader(x: Any) -> bool:
    return isinstance(x, Mapping) and callable(getattr(x, "info", None))


def _label(x: Any) -> str:
    if isinstance(x, (str, os.PathLike)):
        return os.fsdecode(x)
    path = getattr(x, "path", None)
    return os.fsdecode(path) if isinstance(path, (str, os.PathLike)) else f"<{type(x).__name__}>"


def reading(source: Any) -> AbstractContextManager[None]:
    """Add a note naming ``source`` to a tenfold or OS error raised inside (which file of the
    two could not be read: :func:`failed_source` gives it back; the CLI's own rule,
    :func:`tenfold.core.cli_support.reading`)."""
    from .core.cli_support import reading as noting

    return noting(_label(source))


def failed_source(exc: BaseException) -> str | None:
    """The file :func:`reading` noted on ``exc``, or None."""
    from .core.cli_support import failed_source as noted

    return noted(exc)


@contextmanager
def _opened(source: Any, options: dict[str, Any]) -> Iterator[Any]:
    if _is_reader(source):
        yield source
        return
    from ._dispatch import open_any

    with reading(source):
        reader = open_any(source, dict(options))
    with reader:
        yield reader


def _format_of(reader: Any) -> str | None:
    """The registry's name of the format whose package the reader's class lives in (the
    longest package that holds its module), else the reader's ``fmt``."""
    from .registry import formats

    mod = type(reader).__module__
    best = None
    for f in formats():
        pkg = f.package
        if (mod == pkg or mod.startswith(pkg + ".")) and (best is None or len(pkg) > len(best[0])):
            best = (pkg, f.name)
    return best[1] if best else getattr(reader, "fmt", None)


def _metadata(ra: Any, rb: Any) -> list[MetadataDiff]:
    with reading(ra):
        ma = _given_metadata(ra)
    with reading(rb):
        mb = _given_metadata(rb)
    out = []
    for k, v in ma.items():
        if k not in mb:
            out.append(MetadataDiff(str(k), ONLY_IN_A, v, None))
        elif not _same_value(v, mb[k]):
            out.append(MetadataDiff(str(k), CHANGED, v, mb[k]))
    out += [MetadataDiff(str(k), ONLY_IN_B, None, v) for k, v in mb.items() if k not in ma]
    return out


def _given_metadata(reader: Any) -> dict[Any, Any]:
    """The metadata a writer gave the file: without the keys the reader reports about the file
    itself (``own_metadata``: an index's total size)."""
    own: frozenset[str] = getattr(reader, "own_metadata", frozenset())
    return {k: v for k, v in (reader.metadata or {}).items() if k not in own}


def _same_value(x: Any, y: Any) -> bool:
    """Metadata values: the same type and value (arrays: dtype, shape and bytes)."""
    if type(x) is not type(y):
        return False
    if hasattr(x, "dtype") and hasattr(x, "tobytes"):
        return bool(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes())
    try:
        return bool(x == y) or repr(x) == repr(y)
    except Exception:  # noqa: BLE001 - an odd value's == may raise: compare what it shows
        return repr(x) == repr(y)


def _compare(ra: Any, rb: Any, name: str, tol: Any) -> TensorDiff:
    """One pair: described from the readers' ``info``, then read (unless the shapes differ),
    compared and dropped."""
    from . import _diffstats as pair

    with reading(ra):
        ia = pair.describe(ra, name)
    with reading(rb):
        ib = pair.describe(rb, name)
    row = TensorDiff(name, SHAPE, ia.dtype, ib.dtype, ia.shape, ib.shape, ia.nbytes, ib.nbytes)
    if ia.shape != ib.shape:
        return row
    with reading(ra):
        va = pair.value(ra, name)
    with reading(rb):
        vb = pair.value(rb, name)
    for key, v in pair.compare(va, vb, tol).items():
        setattr(row, key, v)
    del va, vb  # the pair goes before the next one is read
    if row.identical:
        row.status = IDENTICAL
    elif row.dtype_a != row.dtype_b:
        row.status = DTYPE
    elif row.shape_a != row.shape_b:
        row.status = SHAPE
    elif tol is not None and row.kind == NUMERIC and row.mismatched == 0:
        row.status = CLOSE
    else:
        row.status = DIFFERENT
    return row
