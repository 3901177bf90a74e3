"""C integer arguments as the compiled kernels receive them, for the reference twins.

A compiled kernel declares its integer parameters as C types (``Py_ssize_t``, ``int``,
``uint64_t``): Cython converts the Python value before the body runs, raising ``TypeError`` for a
non-integer and ``OverflowError`` for a value outside the type. The twins convert with these
helpers first, so that both implementations refuse the same arguments with the same class.
(Not a kernel family: no ``_ref_`` prefix.)
"""

from __future__ import annotations

import operator

#: Largest ``Py_ssize_t`` (64-bit builds).
SSIZE_MAX = 2**63 - 1


def _convert(value: object, lo: int, hi: int, ctype: str) -> int:
    v = operator.index(value)  # type: ignore[arg-type]
    if not lo <= v <= hi:
        raise OverflowError(f"{v} does not fit a C {ctype}")
    return v


def ssize(value: object) -> int:
    """``value`` as a C ``Py_ssize_t``."""
    return _convert(value, -SSIZE_MAX - 1, SSIZE_MAX, "Py_ssize_t")


def cint(value: object) -> int:
    """``value`` as a C ``int``."""
    return _convert(value, -(2**31), 2**31 - 1, "int")


def u32(value: object) -> int:
    """``value`` as a C ``uint32_t``."""
    return _convert(value, 0, 2**32 - 1, "uint32_t")


def u64(value: object) -> int:
    """``value`` as a C ``uint64_t``."""
    return _convert(value, 0, 2**64 - 1, "uint64_t")
