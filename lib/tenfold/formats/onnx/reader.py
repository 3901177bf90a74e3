"""ONNX models' weights as a read-only ``Mapping``: every graph initializer (and sparse
initializer, made dense) of an ``.onnx`` file, read without the ``onnx`` package.

The model is walked once at open by a small protobuf reader of tenfold's own
(:mod:`._wire`, :mod:`._model`; :mod:`._spec` has the layout): nothing is decoded until a
tensor is read, nothing in the file is executed, and every length is checked against the
message it lies in. A tensor stored in ``raw_data`` is a read-only view of the mapped file
when its bytes sit at an offset aligned to its element type (else an owned copy: protobuf
places ``raw_data`` wherever the preceding fields end, so most are unaligned); typed fields
(``float_data``, ``int32_data``...) are decoded into new arrays; external data is mapped from
the file ``location`` names, relative to the model's directory, under the symbolic-link rule
of :mod:`tenfold.core.links` (``..``, absolute paths and links leading out of the directory
refused unless ``trust_links=True``), its range checked against that file's size.

ONNX is a model format, not a weights container: tenfold reads it and converts from it, and
writes none (``save`` refuses).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core import links
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.cli_support import inspect_row
from ...core.reader import MappedReader, Span, TensorInfo, load_all, verify_file
from ...core.report import Report
from ...errors import factory
from . import _spec as S
from ._decode import densify, typed_values, unpack
from ._format import sniff
from ._model import Model, Sparse, Tensor, parse_model

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "sniff"]

FMT = "onnx"
E = factory(FMT)


class Reader(MappedReader, Mapping[str, np.ndarray]):
    """An ONNX model's initializers: ``Mapping`` of name to array, in the graph's order.

    ``metadata`` holds the model's own fields as strings (``ir_version``, ``producer_name``,
    ``producer_version``, ``domain``, ``model_version``, ``doc_string``, ``graph_name``,
    ``opset_import`` as ``domain:version`` joined by commas) where set, and every
    ``metadata_props`` entry under its key (``metadata_props:<key>`` where it would replace
    one of the former).

    Examples
    --------
    A model is a protobuf message; these bytes are one with a single ``FLOAT`` initializer
    ``w`` of two elements in ``raw_data`` (what ``onnx.helper`` builds):

    >>> import tenfold.formats.onnx as onnx_reader
    >>> tensor = (b"\\x0a\\x01\\x02" b"\\x10\\x01" b"\\x42\\x01w"
    ...           b"\\x4a\\x08" + bytes.fromhex("0000803f00000040"))
    >>> graph = b"\\x2a" + bytes([len(tensor)]) + tensor
    >>> model = b"\\x08\\x08" + b"\\x3a" + bytes([len(graph)]) + graph
    >>> with onnx_reader.open(model) as r:
    ...     list(r), r["w"].tolist(), r.metadata["ir_version"]
    (['w'], [1.0, 2.0], '8')
    """

    fmt = FMT

    def __init__(
        self,
        source: Any,
        *,
        copy: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        mmap: bool = True,
        trust_links: bool = False,
    ) -> None:
        self.copy = copy
        self.limits = limits
        self.trust_links = bool(trust_links)
        self._ext: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._model: Model = self._map_and_parse(source, self._parse, FMT, mmap=mmap)
        mf = self._mf
        self._dir = (
            None
            if self.path is None or getattr(mf, "remote", False)
            else os.path.dirname(os.path.abspath(self.path))
        )

    def _parse(self, mf: Any) -> Model:
        """The model in ``mf`` (a remote one is read whole, so no larger than
        ``limits.max_index_bytes``)."""
        limits = self.limits
        if mf.size > limits.max_index_bytes and getattr(mf, "remote", False):
            raise E.limit(
                self.path or "<buffer>",
                field="size",
                detail="a remote model is read whole",
                expected=f"<= {limits.max_index_bytes}",
                got=mf.size,
            )
        self._buf = memoryview(mf.buffer())
        return parse_model(self._buf, mf.size, limits)

    def close(self) -> None:
        """Release the model file and any external data file (arrays already returned stay
        valid)."""
        with self._lock:
            ext, self._ext = self._ext, {}
        for mf in ext.values():
            mf.close()
        super().close()

    # -- Mapping ------------------------------------------------------------------------------
    def _keys(self) -> Mapping[str, Any]:
        return self._model.tensors

    def _get(self, name: str) -> Tensor | Sparse:
        try:
            return self._model.tensors[name]
        except KeyError:
            raise KeyError(f"onnx: no initializer named {name!r}") from None

    @property
    def ir_version(self) -> int | None:
        """The model's ``ir_version``."""
        return self._model.ir_version

    def read(self, name: str, index: Any = None, *, copy: bool | None = None) -> np.ndarray:
        """Initializer ``name``: a read-only view of the mapped file where its bytes lie raw
        and aligned (``copy=True``: always an owned array), else a new array.

        With ``index`` (a basic slice, :mod:`tenfold.core.slicing`) the tensor is read and
        then sliced."""
        t = self._get(name)
        copy = self.copy if copy is None else copy
        budget = self.limits.budget()
        what = f"initializer {name!r}"
        arr = (
            self._dense(t, what, budget) if isinstance(t, Sparse) else self._value(t, what, budget)
        )
        if index is not None:
            from ...core.slicing import plan

            out = plan(FMT, what, t.shape, index).apply(arr)
            return np.array(out) if copy or not isinstance(out, np.ndarray) else out
        if copy and not arr.flags.owndata:
            return np.array(arr)
        return arr

    def _elem(self, t: Tensor, what: str) -> S.Elem:
        elem = t.elem
        if elem is None:
            raise E.unsupported(
                what,
                offset=t.at,
                field="data_type",
                detail="unknown",
                expected=f"one of {sorted(S.ELEMS)}",
                got=t.code,
            )
        if elem.dtype is None:
            why = (
                "strings are not tensors tenfold reads"
                if elem.code == 8
                else "this ml_dtypes has no such type"
            )
            raise E.unsupported(what, offset=t.at, field="data_type", detail=f"{elem.name}: {why}")
        return elem

    def _value(self, t: Tensor, what: str, budget: Any) -> np.ndarray:
        elem = self._elem(t, what)
        assert elem.dtype is not None
        if t.location == S.DATA_LOCATION_EXTERNAL:
            mf, off = self._external(t, what, elem.nbytes(t.numel))
            return self._from_raw(mf, off, elem.nbytes(t.numel), t, elem, what, budget)
        if t.location != 0:
            raise E.format(
                what,
                offset=t.at,
                field="data_location",
                detail="unknown",
                expected="0 (DEFAULT) or 1 (EXTERNAL)",
                got=t.location,
            )
        if t.raw is not None:
            if t.typed:
                field = S.TYPED_NAMES[min(t.typed)]
                raise E.format(
                    what,
                    offset=t.at,
                    field=field,
                    detail="present beside raw_data (one of them holds the data)",
                )
            off, n = t.raw
            if n != elem.nbytes(t.numel):
                raise E.format(
                    what, offset=off, field="raw_data length", expected=elem.nbytes(t.numel), got=n
                )
            return self._from_raw(self._mf, off, n, t, elem, what, budget)
        if not t.typed and t.numel:
            raise E.format(
                what,
                offset=t.at,
                field="data",
                detail="none: no raw_data, typed field or external data",
                expected=f"{t.numel} elements",
                got=0,
            )
        return typed_values(self._buf, t, elem, what, budget).reshape(t.shape)

    def _from_raw(
        self, mf: Any, off: int, n: int, t: Tensor, elem: S.Elem, what: str, budget: Any
    ) -> np.ndarray:
        assert elem.dtype is not None
        if elem.packed:
            budget.take(t.numel * elem.dtype.itemsize, FMT, what, offset=off)
            return unpack(mf.u8(off, n, what), elem, t.numel).reshape(t.shape)
        if off % elem.dtype.alignment == 0:
            arr = mf.array(off, elem.dtype, t.shape, what)
            if arr.flags.writeable:  # an empty array is a fresh one: keep the read-only rule
                arr.flags.writeable = False
            return arr  # type: ignore[no-any-return]
        budget.take(n, FMT, what, offset=off)
        out = np.empty(t.shape, elem.dtype)
        mf.pread_into(off, out, what)
        return out

    def _dense(self, s: Sparse, what: str, budget: Any) -> np.ndarray:
        values = self._value(s.values, f"{what} values", budget)
        indices = self._value(s.indices, f"{what} indices", budget)
        return densify(
            values.reshape(-1) if values.ndim == 1 else values,
            indices,
            s.shape,
            s.numel,
            what,
            s.at,
            budget,
        )

    # -- external data ------------------------------------------------------------------------
    def _external(self, t: Tensor, what: str, nbytes: int) -> tuple[Any, int]:
        """``(mapped file, offset)`` of ``t``'s external bytes, every rule checked."""
        ext = t.external or {}
        loc = ext.get("location")
        if not loc:
            raise E.format(
                what,
                offset=t.at,
                field="external_data location",
                detail="missing for data_location EXTERNAL",
            )
        if not _safe(loc):
            raise E.format(
                what,
                offset=t.at,
                field="external_data location",
                detail="must stay in the model's directory (no '..', no absolute "
                "path, no backslash or NUL)",
                got=loc,
            )
        if self._dir is None:
            raise E.unsupported(
                what,
                offset=t.at,
                field="external_data",
                detail=f"the model was not opened from a local path, so {loc!r} cannot be found",
            )
        off = _number(ext, "offset", 0, t, what) or 0
        length = _number(ext, "length", None, t, what)
        mf = self._external_file(loc, t, what)
        end = mf.size if length is None else off + length
        if end > mf.size or off > mf.size:
            raise E.truncated(
                what,
                offset=t.at,
                field="external_data offset + length",
                detail=f"past the end of {loc!r}",
                expected=f"<= {mf.size}",
                got=max(end, off),
            )
        if end - off != nbytes:
            raise E.format(
                what, offset=t.at, field="external_data length", expected=nbytes, got=end - off
            )
        return mf, off

    def _external_file(self, loc: str, t: Tensor, what: str) -> Any:
        with self._lock:
            mf = self._ext.get(loc)
        if mf is not None:
            return mf
        assert self._dir is not None
        if not self.trust_links:
            escaped = links.escape(self._dir, loc, links.roots(self._dir))
            if escaped is not None:
                raise E.format(
                    what,
                    offset=t.at,
                    field="external_data location",
                    detail=f"a symbolic link leading outside the model's directory "
                    f"refused: {escaped}; pass trust_links=True to follow links in "
                    "a tree you trust",
                )
        from ...core.mapped import MappedFile

        path = os.path.join(self._dir, loc)
        if not os.path.isfile(path):
            raise E.format(
                what, offset=t.at, field="external_data location", detail="no such file", got=loc
            )
        opened = MappedFile(path, fmt=FMT)
        with self._lock:
            if self.closed:
                opened.close()
                raise ValueError("onnx: I/O operation on a closed file")
            mf = self._ext.setdefault(loc, opened)
        if mf is not opened:
            opened.close()
        return mf

    def external_files(self) -> dict[str, str | None]:
        """The external data files the initializers name (``location -> checksum`` or None)."""
        out: dict[str, str | None] = {}
        for t in self._model.tensors.values():
            for part in (t.values, t.indices) if isinstance(t, Sparse) else (t,):
                if part.location == S.DATA_LOCATION_EXTERNAL and part.external:
                    loc = part.external.get("location", "")
                    out[loc] = out.get(loc) or part.external.get("checksum")
        return out

    # -- what frameworks and tools ask ----------------------------------------------------------
    def span(self, name: str) -> Span | None:
        """Where initializer ``name`` lies raw in the model file (``raw_data`` of a type of
        8 bits or more), else None."""
        t = self._get(name)
        if isinstance(t, Sparse) or t.raw is None or t.location or t.typed:
            return None
        elem = t.elem
        if elem is None or elem.dtype is None or elem.packed:
            return None
        off, n = t.raw
        return Span(off, elem.dtype, t.shape) if n == elem.nbytes(t.numel) else None

    def info(self, name: str) -> TensorInfo:
        t = self._get(name)
        base = t.values if isinstance(t, Sparse) else t
        elem = base.elem
        extras: dict[str, Any] = {"message_offset": t.at, "onnx_data_type": base.code}
        rng = None
        if isinstance(t, Sparse):
            encoding = "sparse"
            extras["nnz"] = t.values.numel
        elif t.location == S.DATA_LOCATION_EXTERNAL:
            encoding = "external"
            extras.update({f"external_{k}": v for k, v in (t.external or {}).items()})
        elif t.raw is not None:
            encoding = "raw" if elem is None or not elem.packed else f"raw ({elem.bits}-bit)"
            rng = (t.raw[0], t.raw[0] + t.raw[1])
        else:
            encoding = S.TYPED_NAMES[min(t.typed)] if t.typed else "empty"
        return TensorInfo(
            name,
            base.type_name,
            t.shape,
            rng,
            encoding,
            None,
            extras,
            None if elem is None else elem.dtype,
        )

    def stored_nbytes(self, name: str) -> int:
        """Bytes of initializer ``name``'s elements as ``raw_data`` holds them (of its values,
        for a sparse one; 0 for a type tenfold does not read)."""
        t = self._get(name)
        base = t.values if isinstance(t, Sparse) else t
        elem = base.elem
        return 0 if elem is None else elem.nbytes(base.numel)

    @property
    def metadata(self) -> dict[str, str]:
        """The model's fields and ``metadata_props`` (see the class doc)."""
        return dict(self._model.metadata)


def _safe(loc: str) -> bool:
    if "\0" in loc or "\\" in loc or os.path.isabs(loc) or re.match(r"^[A-Za-z]:", loc):
        return False
    try:
        loc.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return all(part not in ("..", "") for part in loc.split("/"))


def _number(
    ext: Mapping[str, str], key: str, default: int | None, t: Tensor, what: str
) -> int | None:
    text = ext.get(key)
    if text is None:
        return default
    if not re.fullmatch(r"[0-9]{1,20}", text):
        raise E.format(
            what,
            offset=t.at,
            field=f"external_data {key}",
            detail="not a decimal integer >= 0",
            got=text[:40],
        )
    return int(text)


def open(source: Any, **kw: Any) -> Reader:  # noqa: A001 - the format API name
    """Open an ONNX model (path, buffer or opened file); see :class:`Reader`."""
    return Reader(source, **kw)


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """Every initializer (views of the file where :class:`Reader` gives them, unless
    ``copy=True``)."""
    return load_all(Reader, source, copy, **kw)


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """Refused: tenfold reads ONNX models, it does not write them."""
    raise E.unsupported(
        os.fspath(path), detail="tenfold reads ONNX models but writes none; use .safetensors or .zt"
    )


def inspect(source: Any, **kw: Any) -> list[dict]:
    """One row per initializer."""
    with Reader(source, **kw) as r:
        rows = []
        for name in r:
            i = r.info(name)
            rows.append(
                inspect_row(
                    name,
                    i.dtype,
                    i.shape,
                    r.stored_nbytes(name),
                    i.encoding,
                    layout="sparse" if i.encoding == "sparse" else "dense",
                    offset=i.extras["message_offset"],
                )
            )
        return rows


def verify(source: Any, **kw: Any) -> Report:
    """Read every initializer and check every external file's SHA-1 where the model gives
    one; never raises on a damaged file."""
    out: Report = verify_file(FMT, Reader, source, **kw)
    return out
