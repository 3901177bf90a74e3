"""One registry of element types for every format.

Each format names its element types differently (zTensor ``"bfloat16"``, OINF tag 10, FOLD
none, WTXT ``"f4"``). :class:`DTypeRegistry` maps a format's names or tags to NumPy dtypes and
back, so readers and writers never keep private tables. Non-NumPy float types come from
``ml_dtypes`` (bfloat16, float8_e5m2, float8_e4m3fn, float8_e8m0fnu, float4_e2m1fn).
"""

from __future__ import annotations

from collections.abc import Hashable

import ml_dtypes
import numpy as np

from ..errors import EncodeError, UnsupportedError, factory

__all__ = [
    "DTypeRegistry",
    "BFLOAT16",
    "FLOAT8_E5M2",
    "FLOAT8_E4M3FN",
    "FLOAT8_E8M0",
    "FLOAT4_E2M1",
    "registry",
    "canonical",
]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT8_E5M2 = np.dtype(ml_dtypes.float8_e5m2)
FLOAT8_E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
#: OCP MX scale type (exponent only, unsigned, no zero): safetensors ``F8_E8M0``.
FLOAT8_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
#: OCP MX FP4 (one element per byte in memory; safetensors ``F4`` packs two per byte).
FLOAT4_E2M1 = np.dtype(ml_dtypes.float4_e2m1fn)
FLOAT8_E4M3FNUZ = np.dtype(ml_dtypes.float8_e4m3fnuz)
FLOAT8_E5M2FNUZ = np.dtype(ml_dtypes.float8_e5m2fnuz)
_ML = {BFLOAT16: "bfloat16", FLOAT8_E5M2: "float8_e5m2", FLOAT8_E4M3FN: "float8_e4m3fn",
       FLOAT8_E8M0: "float8_e8m0fnu", FLOAT4_E2M1: "float4_e2m1fn",
       FLOAT8_E4M3FNUZ: "float8_e4m3fnuz", FLOAT8_E5M2FNUZ: "float8_e5m2fnuz"}  # fmt: skip

#: Canonical names (NumPy-style, byte order free) of every element type tenfold knows.
_CANONICAL: dict[str, np.dtype] = {
    "float64": np.dtype("<f8"),
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "bfloat16": BFLOAT16,
    "float8_e5m2": FLOAT8_E5M2,
    "float8_e4m3fn": FLOAT8_E4M3FN,
    "float8_e8m0fnu": FLOAT8_E8M0,
    "float4_e2m1fn": FLOAT4_E2M1,
    "float8_e4m3fnuz": FLOAT8_E4M3FNUZ,
    "float8_e5m2fnuz": FLOAT8_E5M2FNUZ,
    "complex64": np.dtype("<c8"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "int16": np.dtype("<i2"),
    "int8": np.dtype("i1"),
    "uint64": np.dtype("<u8"),
    "uint32": np.dtype("<u4"),
    "uint16": np.dtype("<u2"),
    "uint8": np.dtype("u1"),
    "bool": np.dtype("?"),
}


def canonical(dtype: object) -> str:
    """The canonical name of a NumPy dtype, ignoring byte order.

    >>> canonical(np.dtype(">f4")), canonical(BFLOAT16)
    ('float32', 'bfloat16')
    """
    dt = np.dtype(dtype)  # type: ignore[call-overload]
    if dt.kind == "V":
        for ref, name in _ML.items():
            if dt == ref:
                return name
    le = dt.newbyteorder("<") if dt.byteorder in "<>=" and dt.itemsize > 1 else dt
    for name, ref in _CANONICAL.items():
        if ref == le:
            return name
    raise factory("tenfold").unsupported(f"dtype {dt}", detail="no canonical name")


class DTypeRegistry:
    """Per-format tables from a name or tag to a canonical dtype name, and back.

    >>> reg = DTypeRegistry()
    >>> reg.register("demo", "f4", "float32")
    >>> reg.to_numpy("demo", "f4")
    dtype('float32')
    >>> reg.to_tag("demo", np.float32)
    'f4'
    """

    def __init__(self) -> None:
        self._fwd: dict[str, dict[Hashable, str]] = {}
        self._rev: dict[str, dict[str, Hashable]] = {}

    def register(self, fmt: str, tag: Hashable, name: str, *, writable: bool = True) -> None:
        if name not in _CANONICAL:
            raise KeyError(name)
        self._fwd.setdefault(fmt, {})[tag] = name
        if writable:
            self._rev.setdefault(fmt, {}).setdefault(name, tag)

    def tags(self, fmt: str) -> dict[Hashable, str]:
        return dict(self._fwd.get(fmt, {}))

    def to_name(
        self, fmt: str, tag: Hashable, *, what: str = "dtype", offset: int | None = None
    ) -> str:
        try:
            return self._fwd[fmt][tag]
        except KeyError:
            raise UnsupportedError(
                fmt=fmt,
                obj=what,
                offset=offset,
                field="dtype",
                detail="unknown",
                expected=" | ".join(map(str, self._fwd.get(fmt, {}))),
                got=tag,
            ) from None

    def to_numpy(
        self, fmt: str, tag: Hashable, *, what: str = "dtype", offset: int | None = None
    ) -> np.dtype:
        return _CANONICAL[self.to_name(fmt, tag, what=what, offset=offset)]

    def to_tag(self, fmt: str, dtype: object, *, what: str = "array") -> Hashable:
        try:
            name = canonical(dtype)
            return self._rev[fmt][name]
        except (KeyError, UnsupportedError, TypeError):
            raise EncodeError(
                fmt=fmt,
                obj=what,
                field="dtype",
                detail="cannot be stored",
                expected=" | ".join(self._rev.get(fmt, {})),
                got=_dtype_str(dtype),
            ) from None


#: The process-wide registry every format fills at import.
registry = DTypeRegistry()


def numpy_dtype(name: str) -> np.dtype:
    """The little-endian NumPy dtype of a canonical name."""
    return _CANONICAL[name]


def _dtype_str(dtype: object) -> str:
    try:
        return str(np.dtype(dtype))  # type: ignore[call-overload]
    except TypeError:
        return repr(dtype)
