"""Models built with ``onnx.helper`` for the ONNX tests (the ``onnx`` package writes them and
is the differential reference: ``onnx.numpy_helper.to_array``)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx (the reference writer) is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

#: ONNX element types whose tensors tenfold reads, with values in their range
ALL_TYPES = [
    "FLOAT",
    "UINT8",
    "INT8",
    "UINT16",
    "INT16",
    "INT32",
    "INT64",
    "BOOL",
    "FLOAT16",
    "DOUBLE",
    "UINT32",
    "UINT64",
    "COMPLEX64",
    "COMPLEX128",
    "BFLOAT16",
    "FLOAT8E4M3FN",
    "FLOAT8E4M3FNUZ",
    "FLOAT8E5M2",
    "FLOAT8E5M2FNUZ",
    "UINT4",
    "INT4",
    "FLOAT4E2M1",
    "FLOAT8E8M0",
    "UINT2",
    "INT2",
    "FLOAT6E2M3",
    "FLOAT6E3M2",
]


def values(type_name: str, n: int, seed: int = 0) -> np.ndarray:
    """``n`` values of ONNX type ``type_name`` (an array of the NumPy type ``onnx`` maps it
    to), spread over the type's range."""
    rng = np.random.default_rng(seed)
    dt = helper.tensor_dtype_to_np_dtype(getattr(TensorProto, type_name))
    if type_name == "BOOL":
        return rng.integers(0, 2, n).astype(bool)
    ints = {"UINT4": (0, 15), "INT4": (-8, 7), "UINT2": (0, 3), "INT2": (-2, 1)}
    if type_name in ints:
        lo, hi = ints[type_name]
        return rng.integers(lo, hi, n, endpoint=True).astype(dt)
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, endpoint=True, dtype=dt)
    if type_name.startswith("COMPLEX"):
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    if type_name == "FLOAT8E8M0":
        return (2.0 ** rng.integers(-10, 10, n)).astype(dt)
    small = type_name.startswith(("FLOAT8", "FLOAT4", "FLOAT6"))
    return (rng.standard_normal(n) * (2 if small else 100)).astype(dt)


def tensor(name: str, type_name: str, dims: list[int], raw: bool, seed: int = 0):
    """A ``TensorProto``: ``raw_data`` (``numpy_helper.from_array``) or the typed field
    (``helper.make_tensor``)."""
    n = int(np.prod(dims)) if dims else 1
    a = values(type_name, n, seed).reshape(dims)
    if raw:
        return numpy_helper.from_array(a, name)
    dt = getattr(TensorProto, type_name)
    return helper.make_tensor(
        name,
        dt,
        dims,
        a.reshape(-1).tolist()
        if a.dtype.kind in "biufc"
        else a.reshape(-1).astype(np.float32).tolist(),
    )


def model(initializers, sparse=(), props=None, **kw):
    graph = helper.make_graph(
        [], "g", [], [], initializer=list(initializers), sparse_initializer=list(sparse)
    )
    m = helper.make_model(graph, producer_name="tenfold-test", **kw)
    if props:
        helper.set_model_props(m, props)
    return m


def reference(m) -> dict[str, np.ndarray]:
    """What ``onnx`` reads for every initializer (sparse ones made dense)."""
    out = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for s in m.graph.sparse_initializer:
        vals = numpy_helper.to_array(s.values)
        idx = numpy_helper.to_array(s.indices)
        dense = np.zeros(int(np.prod(s.dims)), vals.dtype)
        flat = idx if idx.ndim == 1 else np.ravel_multi_index(tuple(idx.T), tuple(s.dims))
        dense[flat] = vals
        out[s.values.name] = dense.reshape(tuple(s.dims))
    return out


def same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, what
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.tobytes() == want.tobytes(), what


# -- a protobuf encoder of the test's own, for what onnx never writes (unpacked repeated
# fields, lies in lengths and varints)
def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(number: int, wire: int, value) -> bytes:
    """One field: ``value`` an int (wire 0), bytes (wire 2, length added) or the 4 or 8
    bytes of a fixed field (wire 5 / 1)."""
    tag = varint(number << 3 | wire)
    if wire == 0:
        return tag + varint(value)
    if wire == 2:
        return tag + varint(len(value)) + value
    return tag + value


def raw_model(*tensors: bytes, ir: int = 8) -> bytes:
    """A ``ModelProto`` with ``ir_version`` and a graph of these ``TensorProto`` bytes."""
    graph = b"".join(field(5, 2, t) for t in tensors)
    return field(1, 0, ir) + field(7, 2, graph)


def raw_tensor(name: str, code: int, dims, *rest: bytes) -> bytes:
    return (
        b"".join(field(1, 0, d) for d in dims)
        + field(2, 0, code)
        + field(8, 2, name.encode())
        + b"".join(rest)
    )
