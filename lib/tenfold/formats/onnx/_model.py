"""The walk of a serialized ``ModelProto`` down to its initializers (:mod:`._spec` has the
layout): which fields each tensor has and where its bytes are, nothing decoded yet.

Only ``ModelProto``, its ``graph``, the graph's ``initializer`` and ``sparse_initializer``
entries, their ``external_data`` and ``opset_import``/``metadata_props`` entries are entered:
every other field (nodes, inputs, subgraphs, functions) is skipped by its length, so the
nesting depth is the schema's (four levels), whatever the file holds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...core.bounds import DEFAULT_LIMITS, Limits, checked_numel
from ...errors import factory
from . import _spec as S
from ._wire import LEN, VARINT, fields, varint

__all__ = ["Tensor", "Sparse", "Model", "parse_model"]

FMT = "onnx"
E = factory(FMT)


@dataclasses.dataclass
class Tensor:
    """One ``TensorProto``: where its fields are (offsets into the model file)."""

    name: str
    at: int  # offset of the message
    code: int = 0  # data_type
    shape: tuple[int, ...] = ()
    numel: int = 1
    raw: tuple[int, int] | None = None  # (offset, length) of raw_data
    typed: dict[int, list[tuple[int, Any, int]]] = dataclasses.field(default_factory=dict)
    external: dict[str, str] | None = None
    location: int = 0

    @property
    def elem(self) -> S.Elem | None:
        return S.ELEMS.get(self.code)

    @property
    def type_name(self) -> str:
        e = self.elem
        return e.name if e is not None else f"UNKNOWN({self.code})"


@dataclasses.dataclass
class Sparse:
    """One ``SparseTensorProto``: its values, indices and dense shape."""

    name: str
    at: int
    values: Tensor
    indices: Tensor
    shape: tuple[int, ...]
    numel: int


@dataclasses.dataclass
class Model:
    """What the walk found: initializers by name (file order) and the file metadata."""

    tensors: dict[str, Tensor | Sparse]
    metadata: dict[str, str]
    ir_version: int | None


def _wire(number: int, wire: int, want: int, what: str, at: int, name: str) -> None:
    if wire != want:
        raise E.format(
            what, offset=at, field=name, detail="wrong wire type", expected=want, got=wire
        )


def _text(buf: Any, value: tuple[int, int], what: str, at: int, name: str) -> str:
    off, n = value
    try:
        return bytes(buf[off : off + n]).decode("utf-8")
    except UnicodeDecodeError:
        raise E.format(what, offset=at, field=name, detail="not UTF-8") from None


def _ints(buf: Any, number: int, wire: int, value: Any, what: str, at: int) -> list[int]:
    """The int64 values of one occurrence of a repeated varint field (packed or not)."""
    if wire == VARINT:
        vals = [value]
    else:
        _wire(number, wire, LEN, what, at, f"field {number}")
        vals, (pos, n) = [], value
        end = pos + n
        while pos < end:
            v, pos = varint(buf, pos, end, what)
            vals.append(v)
    return [v - (1 << 64) if v >> 63 else v for v in vals]


def _pairs(buf: Any, value: tuple[int, int], what: str, at: int) -> tuple[str, str]:
    """A ``StringStringEntryProto``: ``(key, value)``."""
    key = val = ""
    off, n = value
    for number, wire, v, f_at in fields(buf, off, off + n, what):
        if number in (1, 2):
            _wire(number, wire, LEN, what, f_at, "key" if number == 1 else "value")
            text = _text(buf, v, what, f_at, "key" if number == 1 else "value")
            key, val = (text, val) if number == 1 else (key, text)
    return key, val


def parse_tensor(buf: Any, off: int, n: int, what: str, limits: Limits) -> Tensor:
    """The fields of the ``TensorProto`` in ``buf[off:off+n]`` (shape checked, nothing
    decoded)."""
    t = Tensor("", off)
    dims: list[int] = []
    for number, wire, v, at in fields(buf, off, off + n, what):
        if number == S.T_DIMS:
            dims += _ints(buf, number, wire, v, what, at)
            if len(dims) > limits.max_ndim:
                break  # checked_numel below says so
        elif number == S.T_DATA_TYPE:
            _wire(number, wire, VARINT, what, at, "data_type")
            t.code = v
        elif number == S.T_NAME:
            _wire(number, wire, LEN, what, at, "name")
            t.name = _text(buf, v, what, at, "name")
            what = f"initializer {t.name!r}"
        elif number == S.T_RAW:
            _wire(number, wire, LEN, what, at, "raw_data")
            t.raw = v
        elif number in S.TYPED_NAMES:
            t.typed.setdefault(number, []).append((wire, v, at))
        elif number == S.T_EXTERNAL:
            _wire(number, wire, LEN, what, at, "external_data")
            key, val = _pairs(buf, v, what, at)
            t.external = {**(t.external or {}), key: val}
        elif number == S.T_LOCATION:
            _wire(number, wire, VARINT, what, at, "data_location")
            t.location = v
        elif number == S.T_SEGMENT:
            raise E.unsupported(
                what, offset=at, field="segment", detail="a tensor split into segments is not read"
            )
    if any(d < 0 for d in dims):
        raise E.format(
            what,
            offset=off,
            field="dims",
            detail="negative dimension",
            expected=">= 0",
            got=dims[:8],
        )
    elem = t.elem
    itemsize = elem.dtype.itemsize if elem is not None and elem.dtype is not None else 1
    t.numel = checked_numel(FMT, what, dims, limits, itemsize=itemsize, offset=off)
    t.shape = tuple(dims)
    return t


def _sparse(buf: Any, off: int, n: int, what: str, limits: Limits) -> Sparse:
    values = indices = None
    dims: list[int] = []
    for number, wire, v, at in fields(buf, off, off + n, what):
        if number in (S.S_VALUES, S.S_INDICES):
            _wire(number, wire, LEN, what, at, "values" if number == S.S_VALUES else "indices")
            t = parse_tensor(buf, v[0], v[1], what, limits)
            values, indices = (t, indices) if number == S.S_VALUES else (values, t)
        elif number == S.S_DIMS:
            dims += _ints(buf, number, wire, v, what, at)
    if values is None or indices is None:
        raise E.format(
            what,
            offset=off,
            field="values" if values is None else "indices",
            detail="missing from a sparse initializer",
        )
    if any(d < 0 for d in dims):
        raise E.format(
            what,
            offset=off,
            field="dims",
            detail="negative dimension",
            expected=">= 0",
            got=dims[:8],
        )
    elem = values.elem
    itemsize = elem.dtype.itemsize if elem is not None and elem.dtype is not None else 1
    numel = checked_numel(FMT, what, dims, limits, itemsize=itemsize, offset=off)
    return Sparse(values.name, off, values, indices, tuple(dims), numel)


def _add(found: dict[str, Tensor | Sparse], t: Tensor | Sparse, limits: Limits) -> None:
    if not t.name:
        raise E.format(
            f"initializer at offset {t.at:#x}",
            offset=t.at,
            field="name",
            detail="empty: an initializer must be named",
        )
    if t.name in found:
        raise E.format(
            f"initializer {t.name!r}",
            offset=t.at,
            field="name",
            detail="appears twice",
            expected="unique names",
            got=f"also at offset {found[t.name].at:#x}",
        )
    if len(found) >= limits.max_objects:
        raise E.limit(
            f"initializer {t.name!r}",
            offset=t.at,
            field="count",
            expected=f"<= {limits.max_objects}",
            got=len(found) + 1,
        )
    found[t.name] = t


def _graph(buf: Any, off: int, n: int, md: dict[str, str], limits: Limits) -> dict[str, Any]:
    found: dict[str, Tensor | Sparse] = {}
    for number, wire, v, at in fields(buf, off, off + n, "graph"):
        if number == S.G_INITIALIZER:
            _wire(number, wire, LEN, "graph", at, "initializer")
            _add(
                found,
                parse_tensor(buf, v[0], v[1], f"initializer at offset {at:#x}", limits),
                limits,
            )
        elif number == S.G_SPARSE:
            _wire(number, wire, LEN, "graph", at, "sparse_initializer")
            what = f"sparse initializer at offset {at:#x}"
            _add(found, _sparse(buf, v[0], v[1], what, limits), limits)
        elif number == S.G_NAME and wire == LEN:
            md["graph_name"] = _text(buf, v, "graph", at, "name")
    return found


_TEXT_FIELDS = {
    S.M_PRODUCER: "producer_name",
    S.M_PRODUCER_VERSION: "producer_version",
    S.M_DOMAIN: "domain",
    S.M_DOC: "doc_string",
}


def parse_model(buf: Any, size: int, limits: Limits = DEFAULT_LIMITS) -> Model:
    """Walk the ``ModelProto`` in ``buf[:size]``."""
    md: dict[str, str] = {}
    props: dict[str, str] = {}
    opsets: list[str] = []
    ir = None
    tensors: dict[str, Tensor | Sparse] = {}
    seen_graph = False
    for number, wire, v, at in fields(buf, 0, size, "model"):
        if number in (S.M_IR_VERSION, S.M_MODEL_VERSION):
            name = "ir_version" if number == S.M_IR_VERSION else "model_version"
            _wire(number, wire, VARINT, "model", at, name)
            md[name] = str(v)
            ir = v if number == S.M_IR_VERSION else ir
        elif number in _TEXT_FIELDS:
            _wire(number, wire, LEN, "model", at, _TEXT_FIELDS[number])
            md[_TEXT_FIELDS[number]] = _text(buf, v, "model", at, _TEXT_FIELDS[number])
        elif number == S.M_GRAPH:
            _wire(number, wire, LEN, "model", at, "graph")
            if seen_graph:  # protobuf would merge two; a model has one graph
                raise E.format("model", offset=at, field="graph", detail="appears twice")
            seen_graph = True
            tensors = _graph(buf, v[0], v[1], md, limits)
        elif number == S.M_OPSET:
            _wire(number, wire, LEN, "model", at, "opset_import")
            opsets.append(_opset(buf, v, at))
        elif number == S.M_PROPS:
            _wire(number, wire, LEN, "model", at, "metadata_props")
            key, val = _pairs(buf, v, "metadata_props", at)
            props[key] = val
    if ir is None:
        raise E.format("model", offset=0, field="ir_version", detail="missing (not an ONNX model)")
    if opsets:
        md["opset_import"] = ",".join(opsets)
    for key, val in props.items():
        md[key if key not in md else f"metadata_props:{key}"] = val
    return Model(tensors, md, ir)


def _opset(buf: Any, value: tuple[int, int], at: int) -> str:
    domain, version = "", 0
    off, n = value
    for number, wire, v, f_at in fields(buf, off, off + n, "opset_import"):
        if number == 1 and wire == LEN:
            domain = _text(buf, v, "opset_import", f_at, "domain")
        elif number == 2 and wire == VARINT:
            version = v
    return f"{domain or 'ai.onnx'}:{version}"
