"""Cython kernels and their pure-Python reference twins.

A kernel family ``name`` is a compiled module ``tenfold._kernels.<name>`` (from ``<name>.pyx``,
with a ``<name>.pyi`` stub) and a reference module ``tenfold._kernels._ref_<name>`` with the same
functions written in NumPy/Python: the executable specification and the test oracle.

:func:`load` picks one. ``TENFOLD_PUREPYTHON=1`` selects the references everywhere. Otherwise a
missing compiled module is not hidden: it is reported with a :class:`RuntimeWarning` (an error
under the test suite's warning filter) before the reference is used.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

__all__ = ["load", "pure_python", "FAMILIES"]


def _families() -> tuple[str, ...]:
    here = os.path.dirname(__file__)
    names = sorted(
        f[len("_ref_") : -len(".py")]
        for f in os.listdir(here)
        if f.startswith("_ref_") and f.endswith(".py")
    )
    return tuple(names)


#: Every kernel family the package ships (one ``_ref_<name>.py`` each).
FAMILIES = _families()


def pure_python() -> bool:
    """True when ``TENFOLD_PUREPYTHON`` asks for the reference kernels."""
    return os.environ.get("TENFOLD_PUREPYTHON", "").strip().lower() in {"1", "true", "yes", "on"}


_CACHE: dict[tuple[str, str | None, bool], ModuleType] = {}


def load(family: str, impl: str | None = None) -> ModuleType:
    """Return the kernel module of ``family``.

    Parameters
    ----------
    family
        Kernel family name, e.g. ``"scan"``.
    impl
        ``"compiled"`` or ``"reference"`` to force one (tests do); ``None`` chooses by
        ``TENFOLD_PUREPYTHON`` and what is installed.

    The choice is made once per process and family (the fallback warning is given once).
    """
    key = (family, impl, impl is None and pure_python())
    mod = _CACHE.get(key)
    if mod is None:
        mod = _CACHE[key] = _resolve(family, impl)
    return mod


def _resolve(family: str, impl: str | None) -> ModuleType:
    if impl == "reference" or (impl is None and pure_python()):
        return importlib.import_module(f"{__name__}._ref_{family}")
    try:
        return importlib.import_module(f"{__name__}.{family}")
    except ImportError as exc:
        if impl == "compiled":
            raise
        warnings.warn(
            f"tenfold: compiled kernel {family!r} is not available ({exc}); using the slow "
            "pure-Python reference. Reinstall with a C compiler, or set TENFOLD_PUREPYTHON=1 "
            "to silence this.",
            RuntimeWarning,
            stacklevel=3,
        )
        return importlib.import_module(f"{__name__}._ref_{family}")
