"""Optional integrations, imported only where they are used.

The base install (``pip install tenfold``) reads, writes and verifies every format. A few
integrations need a package the base install does not bring: PyTorch, JAX, SciPy, fsspec, tqdm
and the age encryption library. Each is imported inside the function that needs it, through
:func:`require`, so that importing tenfold or running an unrelated command never touches it, and
a missing one gives one line naming the extra that installs it:

>>> require("json", extra="none").__name__
'json'
>>> try:
...     require("no_such_module", extra="torch", what="fold: a TSAV chunk")
... except MissingDependencyError as exc:
...     print(exc)
fold: a TSAV chunk needs no_such_module, which is not installed: pip install "tenfold[torch]"
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ..errors import UnsupportedError

__all__ = ["MissingDependencyError", "EXTRAS", "require", "available"]

#: What each optional integration is called for people, by its import name.
EXTRAS: dict[str, str] = {
    "torch": "PyTorch",
    "jax": "JAX",
    "scipy": "SciPy",
    "fsspec": "fsspec",
    "aiohttp": "aiohttp",
    "tqdm": "tqdm",
    "pyrage": "pyrage (age encryption)",
    "ray": "Ray (ray[data])",
}


class MissingDependencyError(UnsupportedError, ImportError):
    """An optional package this call needs is not installed.

    It is an :class:`~tenfold.errors.UnsupportedError` (the feature is not available in this
    install) and an :class:`ImportError` (so ``except ImportError`` keeps working). The ``tenfold``
    command prints its message on one line and exits with status 2.
    """

    def __init__(
        self,
        message: str,
        *,
        module: str = "",
        extra: str = "",
        fmt: str | None = None,
        obj: str | None = None,
    ) -> None:
        # The keywords have defaults so that unpickling (cls(message), then the state) works.
        UnsupportedError.__init__(self, message, fmt=fmt, obj=obj, detail=f"needs {module}")
        self.name = module  # ImportError's attribute: the module that is missing
        self.extra = extra

    def evolve(self, **changes: Any) -> MissingDependencyError:
        """The same error with ``fmt`` or ``obj`` changed. The message keeps its text (the
        install hint), but for its ``"<fmt>: "`` prefix, which follows a changed ``fmt``."""
        text, old = str(self), self.fmt
        fmt = changes.get("fmt", old)
        if fmt != old and old is not None and text.startswith(f"{old}: "):
            text = (f"{fmt}: " if fmt else "") + text[len(old) + 2 :]
        return MissingDependencyError(
            text,
            module=self.name or "",
            extra=self.extra,
            fmt=fmt,
            obj=changes.get("obj", self.obj),
        )


def available(module: str) -> bool:
    """Whether ``module`` can be imported (it is imported if so)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require(module: str, *, extra: str, what: str = "this") -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming ``tenfold[extra]``.

    ``what`` names the feature in the message, in the singular (``"fold: a TSAV chunk"``): the
    format before the colon and the object after it are the error's ``fmt`` and ``obj``
    (``"tenfold"`` and all of ``what`` without a colon).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] != top:
            raise  # the package is there but one of its own imports failed: show that
        label = EXTRAS.get(top, top)
        fmt, _, obj = what.rpartition(": ")
        raise MissingDependencyError(
            f'{what} needs {label}, which is not installed: pip install "tenfold[{extra}]"',
            module=module,
            extra=extra,
            fmt=fmt or "tenfold",
            obj=obj,
        ) from None
