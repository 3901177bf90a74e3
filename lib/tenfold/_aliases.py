"""The public module names of the format packages, kept where users import them.

The format packages live under :mod:`tenfold.formats` (``tenfold/formats/<name>/``), the layer
below the front door; their public names are the ones users have always imported:
``tenfold.ztensor``, ``tenfold.oinf``, ``tenfold.fold``, ``tenfold.wtxt``, ``tenfold.taridx``,
``tenfold.interop.safetensors`` / ``safetensors_reader`` and ``tenfold.interop.npz`` /
``npz_reader``. An import of a public name (or of any submodule under it) gives *the same
module object* as the real one, never a second copy: classes, ``isinstance`` and pickling are
those of the real module (whose ``__name__`` is the real name).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any

__all__ = ["ALIASES", "install", "public_name", "real_name"]

#: public name -> real module
ALIASES: dict[str, str] = {
    "tenfold.ztensor": "tenfold.formats.ztensor",
    "tenfold.oinf": "tenfold.formats.oinf",
    "tenfold.fold": "tenfold.formats.fold",
    "tenfold.wtxt": "tenfold.formats.wtxt",
    "tenfold.taridx": "tenfold.formats.taridx",
    "tenfold.interop.safetensors": "tenfold.formats.safetensors.writer",
    "tenfold.interop.safetensors_reader": "tenfold.formats.safetensors.reader",
    "tenfold.interop.npz": "tenfold.formats.npz.writer",
    "tenfold.interop.npz_reader": "tenfold.formats.npz.reader",
}


def public_name(module: str) -> str:
    """The name users import ``module`` by (``tenfold.formats.ztensor.v2reader`` ->
    ``tenfold.ztensor.v2reader``); other modules' names unchanged. For messages and reprs."""
    for public, real in ALIASES.items():
        if module == real or module.startswith(real + "."):
            return public + module[len(real) :]
    return module


def real_name(fullname: str) -> str | None:
    """The real module behind the public name ``fullname`` (or a submodule of one)."""
    if not fullname.startswith("tenfold."):  # every other import of the process: at once
        return None
    for public, real in ALIASES.items():
        if fullname == public or fullname.startswith(public + "."):
            return real + fullname[len(public) :]
    return None


class _Package(ModuleType):
    """A real package whose submodule is imported again under its public name: the import
    system then binds the submodule on the package (``setattr(package, "verify", module)``),
    which would hide a function of the same name (``tenfold.ztensor.verify``, the function,
    beside ``tenfold.ztensor.verify``, the module). A submodule never replaces an attribute
    that is not a module."""

    def __setattr__(self, name: str, value: Any) -> None:
        old = self.__dict__.get(name)
        if isinstance(value, ModuleType) and old is not None and not isinstance(old, ModuleType):
            return
        super().__setattr__(name, value)


def _guard(module: ModuleType) -> None:
    """Make ``module``'s package a :class:`_Package` (its ``__class__``, as PEP 549 allows)."""
    parent = sys.modules.get(module.__name__.rpartition(".")[0])
    if parent is not None and type(parent) is ModuleType:
        parent.__class__ = _Package


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on ``sys.meta_path``, so that the path finder never loads a public name's
    submodule a second time under that name."""

    def __init__(self) -> None:
        self._specs: dict[int, Any] = {}

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if real_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        real = real_name(spec.name)
        assert real is not None
        module = importlib.import_module(real)
        _guard(module)  # the import system binds it on the package next
        self._specs[id(module)] = module.__spec__  # the import system sets the alias's spec
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._specs.pop(id(module), module.__spec__)  # the real one again


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (the package does, on import)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
