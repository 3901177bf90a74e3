"""GGUF (llama.cpp's model files): :mod:`.reader`, read-only (see ``docs/formats/gguf.md``)."""

from ._demo import demo
from .reader import FMT, Reader, inspect, load, open, save, verify

__all__ = ["FMT", "Reader", "open", "load", "save", "inspect", "verify", "demo"]
