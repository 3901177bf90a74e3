"""Index of the reference twins: ``module(family)`` returns ``_ref_<family>``.

The twins themselves live one per family (``_ref_scan.py``, ...) so that each kernel's
executable specification sits beside nothing else.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from . import FAMILIES

__all__ = ["module", "FAMILIES"]


def module(family: str) -> ModuleType:
    """The reference module of a kernel family."""
    return importlib.import_module(f"{__package__}._ref_{family}")
