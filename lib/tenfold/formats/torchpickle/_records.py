"""The records the bounded pickle reader (:mod:`._pickle`) builds, and the tables it checks
names against: torch's dtypes (:data:`DTYPES`), typed storages (:data:`STORAGES`) and the
globals a state dict may name (:data:`GLOBALS`); nothing else is ever built.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...core.dtypes import (
    BFLOAT16,
    FLOAT8_E4M3FN,
    FLOAT8_E4M3FNUZ,
    FLOAT8_E5M2,
    FLOAT8_E5M2FNUZ,
    FLOAT8_E8M0,
)

__all__ = [
    "DTYPES", "STORAGES", "GLOBALS", "Global", "TorchDtype", "Storage", "Tensor", "ODict",
    "PickledSet",
]  # fmt: skip


#: torch dtype name -> NumPy dtype (native order; None: no NumPy type holds it).
DTYPES: dict[str, np.dtype | None] = {
    "float64": np.dtype("<f8"), "float32": np.dtype("<f4"), "float16": np.dtype("<f2"),
    "bfloat16": BFLOAT16, "int64": np.dtype("<i8"), "int32": np.dtype("<i4"),
    "int16": np.dtype("<i2"), "int8": np.dtype("i1"), "uint8": np.dtype("u1"),
    "uint16": np.dtype("<u2"), "uint32": np.dtype("<u4"), "uint64": np.dtype("<u8"),
    "bool": np.dtype("?"), "complex64": np.dtype("<c8"), "complex128": np.dtype("<c16"),
    "float8_e4m3fn": FLOAT8_E4M3FN, "float8_e5m2": FLOAT8_E5M2,
    "float8_e4m3fnuz": FLOAT8_E4M3FNUZ, "float8_e5m2fnuz": FLOAT8_E5M2FNUZ,
    "float8_e8m0fnu": FLOAT8_E8M0,
    "complex32": None, "float4_e2m1fn_x2": None, "quint8": None, "qint8": None,
    "qint32": None, "quint4x2": None, "quint2x4": None,
    "bits1x8": None, "bits2x4": None, "bits4x2": None, "bits8": None, "bits16": None,
}  # fmt: skip

#: The typed storage classes ``torch.save`` names (``torch.<Name>``) -> their element type.
STORAGES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}  # fmt: skip


def _globals() -> dict[tuple[str, str], tuple[str, str]]:
    table = {
        ("collections", "OrderedDict"): ("odict", ""),
        ("torch._utils", "_rebuild_tensor"): ("rebuild", "v1"),
        ("torch._utils", "_rebuild_tensor_v2"): ("rebuild", "v2"),
        ("torch._utils", "_rebuild_tensor_v3"): ("rebuild", "v3"),
        ("torch._utils", "_rebuild_parameter"): ("parameter", ""),
        ("torch._utils", "_rebuild_parameter_with_state"): ("parameter", "state"),
        ("torch", "Size"): ("size", ""),
        ("_codecs", "encode"): ("encode", ""),
        ("torch.storage", "UntypedStorage"): ("storage", "uint8"),
    }
    for builtins in ("builtins", "__builtin__"):
        table[(builtins, "set")] = ("set", "")
        table[(builtins, "frozenset")] = ("set", "")
        table[(builtins, "bytes")] = ("bytes", "")  # protocol 2's b"": bytes()
    for name, dtype in STORAGES.items():
        table[("torch", name)] = ("storage", dtype)
    for name in DTYPES:
        table[("torch", name)] = ("dtype", name)
    return table


#: ``(module, name)`` -> ``(kind, argument)``: every global this reader accepts.
GLOBALS = _globals()


@dataclasses.dataclass(frozen=True)
class Global:
    """An accepted global as the stack holds it (only :data:`GLOBALS` makes one)."""

    module: str
    name: str
    kind: str
    arg: str

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


@dataclasses.dataclass(frozen=True)
class TorchDtype:
    """``torch.<name>`` as a value (what ``_rebuild_tensor_v3`` takes; in metadata, a
    string)."""

    name: str


@dataclasses.dataclass(eq=False)
class Storage:
    """A persistent id: storage ``key`` of ``numel`` elements of ``dtype`` (torch's name)."""

    key: str
    dtype: str
    numel: int
    location: str
    at: int

    @property
    def nbytes(self) -> int:
        dt = DTYPES[self.dtype]
        assert dt is not None
        return self.numel * dt.itemsize


@dataclasses.dataclass(eq=False)
class Tensor:
    """A tensor: a view of ``storage`` (``offset`` and ``stride`` in elements of ``dtype``)."""

    storage: Storage
    dtype: str
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    at: int

    __hash__ = None  # type: ignore[assignment]  # never a dict key


class ODict(dict):  # type: ignore[type-arg]
    """A ``collections.OrderedDict`` (a plain dict, which keeps order; ``BUILD`` accepted)."""


class PickledSet(list):  # type: ignore[type-arg]
    """A set or frozenset, as a list of its items in pickle order."""
