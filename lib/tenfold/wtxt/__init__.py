"""WTXT/Chunks v1.1: armored, deterministic, diffable ASCII snapshots of named arrays.

See ``docs/formats/wtxt.md`` for the normative description.
"""

from __future__ import annotations

from .reader import WtxtFile, inspect, load, open, read
from .writer import save, write

__all__ = ["WtxtFile", "open", "read", "load", "inspect", "write", "save"]
