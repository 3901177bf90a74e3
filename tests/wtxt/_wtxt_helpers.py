"""Shared builders for the WTXT tests."""

from __future__ import annotations

import numpy as np

META = {"schema": "weights/v1", "gen": 123, "ts": "2025-10-09T03:12:45Z", "build": "abc123"}
HKEY = b"test-hmac-key"
SEED = bytes(range(32))


def sample() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "W_base": rng.standard_normal((40, 6)),
        "b": np.arange(7, dtype=np.int16),
        "s": np.array(2.5, np.float32),
        "z": np.zeros((0, 3), np.uint8),
    }


def write(path, arrays=None, **kw):
    from tenfold import wtxt

    opts = dict(META)
    opts.update(kw)
    wtxt.write(path, sample() if arrays is None else arrays, **opts)
    return path
