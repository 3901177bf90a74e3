"""A small GGUF sample for ``tenfold demo`` (tenfold writes no GGUF: this builds the bytes of
one fixed file by the layout of :mod:`._spec`)."""

from __future__ import annotations

import pathlib
import struct

import numpy as np

from . import _spec as S


def _str(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def sample() -> bytes:
    """The bytes of the demo file: three key/values, an F32, an F16 and a Q8_0 tensor."""
    kvs = (
        _str(b"general.architecture") + struct.pack("<I", S.STRING) + _str(b"demo"),
        _str(b"demo.context_length") + struct.pack("<II", S.UINT32, 128),
        _str(b"tokenizer.ggml.tokens")
        + struct.pack("<IIQ", S.ARRAY, S.STRING, 3)
        + b"".join(_str(t) for t in (b"<s>", b"hello", b"world")),
    )
    rng = np.random.default_rng(11)
    q8 = np.zeros(2, [("d", "<f2"), ("qs", "i1", (32,))])
    q8["d"] = 0.25
    q8["qs"] = rng.integers(-127, 128, (2, 32))
    tensors = [
        (b"token_embd.weight", (8, 4), 0, rng.standard_normal(32).astype("<f4").tobytes()),
        (b"output_norm.weight", (8,), 1, np.ones(8, "<f2").tobytes()),
        (b"blk.0.attn_q.weight", (32, 2), 8, q8.tobytes()),
    ]
    head = S.MAGIC + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    body = b""
    for name, ne, code, data in tensors:
        head += _str(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, code, len(body))
        body += data + bytes(-len(data) % S.DEFAULT_ALIGNMENT)
    return head + bytes(-len(head) % S.DEFAULT_ALIGNMENT) + body


def demo(directory: pathlib.Path) -> pathlib.Path:
    """Write the demo file in ``directory``; its path."""
    path = pathlib.Path(directory) / "demo.gguf"
    path.write_bytes(sample())
    return path
