"""What each tensor format can hold, and the one check every writer path shares.

"Lossless or loud": a value a target cannot store exactly is refused *before* anything is
written, with one line naming the tensor, its dtype and the formats that can hold it::

    npz: tensor 'w' has dtype bfloat16, which npz cannot hold; formats that can: .zt, .oinf,
    .fold/.mind, .safetensors

Each format's descriptor in :mod:`tenfold.registry` lists the canonical dtype names
(:func:`tenfold.core.dtypes.canonical`) it holds; for the built-in formats:

============  =======================================================================
format        element types
============  =======================================================================
.zt           float64 float32 float16 bfloat16, int/uint 8-64, bool; with
              ``zt_generation=2`` (zTensor v2) also float8 (e4m3fn, e5m2, e4m3fnuz,
              e5m2fnuz, e8m0fnu), float4_e2m1fn, complex64, complex128
.oinf         the same, plus float8_e5m2 (OINF ``F8``)
.fold/.mind   as .safetensors (tensors live in a ``STEN`` safetensors chunk)
.safetensors  the .oinf set plus float8_e4m3fn, float8_e8m0fnu, float4_e2m1fn,
              float8_e4m3fnuz, float8_e5m2fnuz, complex64
.npz          NumPy's own types: the .zt set without bfloat16, plus complex64 (NumPy would
              write bfloat16 / float8 / float4 as opaque ``|V2`` / ``|V1`` records that no
              reader can interpret)
.wtxt         float64 float32, int/uint 8-64 (no float16, bfloat16, bool: the spec's list)
============  =======================================================================

A format that writes several generations answers for each (its ``generation_dtypes``
hook), so the check follows the generation asked for, and the list of formats that can hold
a dtype names the option where only another generation does (``.zt (zt_generation=2)``).

0-d and empty tensors are held by every format. WTXT stores a scalar as ``shape=1``; tenfold
marks 0-d arrays in the stored name (see :mod:`tenfold.wtxt.names`), so they come back 0-d.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import registry
from .core.dtypes import canonical
from .errors import EncodeError, TenfoldError, factory

__all__ = [
    "targets",
    "target_of",
    "dtypes_of",
    "holders",
    "check_dtype",
    "check_tensors",
    "check_all",
    "option_refusal",
    "check_checksum_option",
]


def __getattr__(name: str) -> Any:
    # the tables, built from the registry when first asked for (a format registered later is
    # in the next answer: they are rebuilt each time)
    if name == "TARGETS":
        return targets()
    if name == "HOLDS":
        return {n: dts for n, (_, dts) in targets().items()}
    if name == "NOT_TENSOR_FORMATS":
        return {s: f.holds for f in registry.formats() if not f.tensors for s in f.suffixes}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def targets() -> dict[str, tuple[tuple[str, ...], frozenset[str]]]:
    """``target name -> (suffixes, canonical dtype names it holds)`` for every format tenfold
    writes tensors to (the registry's formats with dtypes)."""
    return {f.name: (f.suffixes, f.dtypes) for f in registry.targets()}


def target_of(path: Any) -> str | None:
    """The target name of a destination path, by suffix (None when unknown)."""
    import os

    low = os.fspath(path).lower()
    for f in registry.targets():
        if f.suffixes and low.endswith(f.suffixes):
            return f.name
    return None


def _dtype_name(dtype: Any) -> str | None:
    try:
        return canonical(dtype)
    except Exception:
        pass
    try:  # a NumPy number type no format of the default generations holds (complex128)
        dt = np.dtype(dtype)
    except TypeError:
        return None
    return dt.name if dt.kind in "biufc" else None


def _generations(f: registry.Format) -> dict[Any, frozenset[str]]:
    """The element types of each generation other than its default that format ``f`` writes
    (its ``generation_dtypes`` hook; keys as its ``convert_generation`` hook reads the
    ``zt_generation`` option)."""
    hook = f.hook("generation_dtypes")
    return {} if hook is None else dict(hook())


def dtypes_of(fmt: str, generation: Any = None) -> frozenset[str]:
    """The canonical dtype names target ``fmt`` holds in ``generation`` (the value of the
    ``zt_generation`` option, as given or as the format read it; None: the default
    generation). The format that owns the option answers (a value it refuses, or a format
    that has no generations, gives the default's set: the writer refuses the value itself)."""
    f = registry.get(fmt)
    if generation is None:
        return f.dtypes
    gens = _generations(f)
    read = f.hook("convert_generation")
    if not gens or read is None:
        return f.dtypes
    try:
        gen = read(f.name, generation, None)
    except TenfoldError:
        return f.dtypes
    return gens.get(gen, f.dtypes)


def holders(dtype: Any) -> list[str]:
    """Suffixes of the formats that can hold ``dtype`` (empty when none can); a format that
    holds it only in another generation than its default is listed with the option that
    chooses it (``.zt (zt_generation=2)``)."""
    name = _dtype_name(dtype)
    found = []
    for f in registry.targets():
        where = "/".join(f.suffixes)
        if f.holds_dtype(name):
            found.append(where)
            continue
        gen = next((g for g, dts in _generations(f).items() if name in dts), None)
        if gen is not None:
            found.append(f"{where} (zt_generation={gen})")
    return found


def check_dtype(
    fmt: str,
    tensor: str,
    dtype: Any,
    *,
    prefix: str | None = None,
    what: str | None = None,
    generation: Any = None,
) -> None:
    """Raise :class:`EncodeError` when target ``fmt`` cannot hold ``dtype`` exactly.

    ``prefix`` starts the message (default ``fmt``); ``what`` names the container (e.g.
    ``"a FOLD NPZ0 chunk"``; default ``fmt``); ``generation`` is the ``zt_generation``
    option's value (:func:`dtypes_of`).
    """
    name = _dtype_name(dtype)
    if name is not None and name in dtypes_of(fmt, generation):
        return
    shown = name or (str(np.dtype(dtype)) if _is_dtype(dtype) else repr(dtype))
    can = holders(dtype)
    where = f"formats that can: {', '.join(can)}" if can else "no format tenfold writes can"
    detail = f"has dtype {shown}, which {what or fmt} cannot hold; {where}"
    raise factory(prefix or fmt).encode(  # "tensor 'x' has dtype", not "tensor 'x': has"
        f"tensor {tensor!r}", detail=detail, message=f"{prefix or fmt}: tensor {tensor!r} {detail}"
    )


def _is_dtype(dtype: Any) -> bool:
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return True


def check_tensors(fmt: str, tensors: Mapping[str, Any], generation: Any = None) -> None:
    """:func:`check_dtype` for every tensor (dtype read without converting the data) in
    ``generation`` (:func:`dtypes_of`)."""
    specs = []
    for name, value in tensors.items():
        dt = getattr(value, "dtype", None)
        if dt is None:
            dt = np.asarray(value).dtype
        specs.append((name, dt))
    check_all(fmt, specs, generation)


def check_all(fmt: str, specs: Any, generation: Any = None) -> None:
    """:func:`check_dtype` for every ``(tensor, dtype)``; one :class:`EncodeError` that names
    the first refusal in full and lists the others (so that one run says everything to fix).

    >>> import numpy as np
    >>> try:
    ...     check_all("npz", [("a", np.dtype("f4")), ("b", np.dtype("V0")), ("c", np.dtype("V0"))])
    ... except Exception as e:
    ...     print(str(e).split("; ")[1])
    no format tenfold writes can (also refused: 'c' |V0)
    """
    first: EncodeError | None = None
    others: list[str] = []
    for name, dt in specs:
        try:
            check_dtype(fmt, name, dt, generation=generation)
        except EncodeError as exc:
            if first is None:
                first = exc
            else:
                others.append(f"{name!r} {_dtype_name(dt) or np.dtype(dt)}")
    if first is None:
        return
    if not others:
        raise first
    more = ", ".join(others[:8]) + (f" and {len(others) - 8} more" if len(others) > 8 else "")
    parts = first.fields()
    raise factory(parts.pop("fmt")).encode(
        parts.pop("obj"), **parts, message=f"{first} (also refused: {more})"
    ) from None


def option_refusal(fmt: Any, option: str, value: Any, why: str) -> EncodeError:
    """The :class:`EncodeError` for an option value format ``fmt`` (a descriptor) cannot
    honour, raised before anything is written: ``<fmt>: <option> <value>: <why>``."""
    return factory(fmt.name).encode(f"{option} {value!r}", detail=why)


def check_checksum_option(fmt: Any, checksum: Any) -> None:
    """Refuse a per-tensor ``checksum`` given explicitly for a format (a descriptor) with no
    per-tensor checksum field (``save_checksum="refuse"``); ``None`` (none) it honours."""
    if fmt.save_checksum == "refuse" and checksum is not None:
        raise option_refusal(
            fmt, "checksum", checksum, f"{fmt.description} has no per-tensor checksum field"
        )
