"""GGUF: tenfold's reader against the ``gguf`` package's ``GGUFReader`` (llama.cpp's own Python
reader) on the same file, written by the ``gguf`` package: a model-shaped file with a 32,000-token
vocabulary (strings and scores in the metadata, as real files have), F16/F32 tensors and Q8_0 /
Q4_0 blocks.

Cases (same file, same run, in turns):
* open + map: parse the header (every key/value and tensor info) and map the file;
* read every tensor: open, then touch every tensor's bytes (a sum over each array's bytes);
* dequantise every Q8_0/Q4_0 tensor to float32 (tenfold's kernel vs ``gguf.quants``).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from _timing import alternate, row

from tenfold.formats import gguf as tg


def _write(path: str, quick: bool) -> None:
    import gguf

    q = gguf.GGMLQuantizationType
    vocab = 2_000 if quick else 32_000
    width = 256 if quick else 2048
    layers = 2 if quick else 8
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "llama")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(vocab)])
    w.add_array("tokenizer.ggml.scores", rng.standard_normal(vocab).astype(np.float32).tolist())
    w.add_uint32("llama.context_length", 4096)
    w.add_tensor("token_embd.weight", rng.standard_normal((vocab // 8, width)).astype(np.float16))
    for i in range(layers):
        x = rng.standard_normal((width, width)).astype(np.float32)
        w.add_tensor(f"blk.{i}.attn_q.weight", gguf.quants.quantize(x, q.Q8_0), raw_dtype=q.Q8_0)
        w.add_tensor(f"blk.{i}.ffn_up.weight", gguf.quants.quantize(x, q.Q4_0), raw_dtype=q.Q4_0)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(width, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _touch(a: np.ndarray) -> int:
    return int(a.reshape(-1).view(np.uint8)[::4096].sum()) if a.size else 0


def run(quick: bool) -> list[dict]:
    try:
        import gguf
    except ImportError:
        return [row("gguf package not installed (the peers extra)", float("nan"))]
    from importlib.metadata import version

    peer = f"gguf {version('gguf')} GGUFReader"
    rows = []
    rounds = 5 if quick else 11
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.gguf")
        _write(path, quick)
        size = os.path.getsize(path)

        def ours_open() -> None:
            with tg.Reader(path) as r:
                r.metadata  # noqa: B018 - the key/values are parsed at open already

        def peer_open() -> None:
            gguf.GGUFReader(path)

        def ours_read() -> None:
            with tg.Reader(path) as r:
                for name in r:
                    _touch(r[name])

        def peer_read() -> None:
            for t in gguf.GGUFReader(path).tensors:
                _touch(t.data)

        def ours_deq() -> None:
            with tg.Reader(path, dequantize=True) as r:
                for name in r:
                    if r.info(name).extras["quantized"]:
                        r[name]

        def peer_deq() -> None:
            for t in gguf.GGUFReader(path).tensors:
                if t.tensor_type.name in ("Q8_0", "Q4_0"):
                    gguf.quants.dequantize(t.data, t.tensor_type)

        label = f"{size / 2**20:.1f} MiB file"
        for case, fa, fb in (
            (f"open + map ({label})", ours_open, peer_open),
            (f"read every tensor ({label})", ours_read, peer_read),
            (f"dequantise Q8_0/Q4_0 ({label})", ours_deq, peer_deq),
        ):
            ta, tb = alternate(fa, fb, rounds=rounds)
            rows.append(row(case, min(ta) * 1e3, peer, min(tb) * 1e3, unit="ms"))
    return rows
