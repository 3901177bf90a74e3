"""ONNX in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source (the
initializers, one at a time, with the model's fields as string metadata; raw ones copied as
byte ranges of the model file), the suffix fallback, and the version ``inspect`` shows."""

from __future__ import annotations

from typing import Any

from ...conversion import span_source
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import Source
from ._format import FORMAT


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The initializers of a model (``convert_source``)."""
    from .reader import Reader

    return span_source(FORMAT.name, Reader(path, limits=limits), path)


def claims(head: bytes, label: str) -> bool:
    """A file named ``.onnx`` is read as a model although its head does not look like one
    (``convert_fallback``): the walk then says what is wrong."""
    return label.lower().endswith(FORMAT.suffixes)


def version(source: Any) -> str:
    """``ir <n>``: the model's IR version (``tenfold inspect``)."""
    from .reader import Reader

    with Reader(source) as r:
        return f"ir {r.ir_version}"


def metadata(source: Any) -> dict[str, str]:
    """The model's fields and ``metadata_props`` (``tenfold inspect``)."""
    from .reader import Reader

    with Reader(source) as r:
        return r.metadata
