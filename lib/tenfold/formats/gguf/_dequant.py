"""Opt-in dequantisation of GGML blocks to float32 (``tenfold.open(..., dequantize=True)``),
through the ``ggml`` kernel family (:mod:`tenfold._kernels._ref_ggml` is its specification)."""

from __future__ import annotations

import math

import numpy as np

from ... import _kernels
from ...errors import factory

__all__ = ["SUPPORTED", "dequantize"]

#: The types :func:`dequantize` decodes, with their block sizes.
SUPPORTED = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34}
_QK = 32


def dequantize(type_name: str, blocks: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 array of element shape ``shape`` that the GGML blocks ``blocks`` (a
    ``uint8`` array, whole blocks of type ``type_name``) hold."""
    size = SUPPORTED.get(type_name)
    if size is None:
        raise factory("gguf").unsupported(
            f"type {type_name}",
            detail="no built-in dequantiser for this type; pass dequantize=<function> or read "
            "the raw blocks",
            expected="one of " + ", ".join(SUPPORTED),
            got=type_name,
        )
    n = math.prod(shape)
    out = np.empty(n, np.float32)
    fn = getattr(_kernels.load("ggml"), f"dequantize_{type_name.lower()}")
    fn(np.ascontiguousarray(blocks, np.uint8).reshape(-1), out)
    return out.reshape(shape)
