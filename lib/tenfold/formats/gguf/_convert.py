"""GGUF in ``tenfold convert`` and ``tenfold inspect`` (the hooks of :mod:`tenfold.conversion`
and :mod:`tenfold.registry`).

As a conversion source, unquantised tensors are copied as the raw ranges of the file they are
(bit-exact); a block-quantised tensor is refused, naming its type, since no format tenfold
writes holds GGML blocks (read it with ``dequantize=True`` and save the floats to convert it
lossily, on purpose). The key/values go along as file metadata: a target that keeps string
metadata only refuses the others, and ``metadata=False`` (``--no-metadata``) drops them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import RawRange, Source
from ._format import FORMAT


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The tensors of a GGUF file (``convert_source``)."""
    from .reader import Reader

    r = Reader(path, limits=limits)
    try:
        tensors = {n: r.tensor(n) for n in r}
        md = r.metadata
    except BaseException:
        r.close()
        raise
    refuse = [
        f"tensor {n!r} is GGML {t.type.name} (block-quantised)"
        for n, t in tensors.items()
        if t.type.quantized
    ]

    def spec(n: str) -> tuple[np.dtype, tuple[int, ...]]:
        t = tensors[n]
        return t.type.block_dtype, t.block_shape

    def raw(n: str) -> RawRange | None:
        t = tensors[n]
        return None if t.type.quantized else RawRange(t.offset, t.nbytes, None, r.file)

    src = Source(FORMAT.name, list(tensors), spec, r.read, metadata=md, close=r.close,
                 raw=raw, path=path, refuse=refuse)  # fmt: skip
    return src


def metadata(source: Any) -> dict[str, Any]:
    """The key/values ``tenfold inspect`` lists (the ``metadata`` hook)."""
    from .reader import Reader

    with Reader(source) as r:
        return r.metadata


def version(source: Any) -> str:
    """``"v2"`` or ``"v3"`` (the ``version`` hook of ``tenfold inspect``)."""
    from .reader import Reader

    with Reader(source) as r:
        return f"v{r.version}"


__all__ = ["source", "metadata", "version"]
