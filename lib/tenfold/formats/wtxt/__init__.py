"""WTXT/Chunks v1.1: armored, deterministic, diffable ASCII snapshots of named arrays.

See ``docs/formats/wtxt.md`` for the normative description. Main entry points:
:func:`write`, :func:`read`, :func:`verify`, :func:`recover`, :func:`finalize_wsum`,
:func:`make_delta`, :func:`apply_delta`, :func:`armor_encrypt`, :func:`armor_decrypt`.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from .armor import armor_decrypt, armor_encrypt
from .delta import apply_delta, make_delta
from .reader import WtxtFile, keyid_of, open, read
from .stream import finalize_wsum
from .verify import Damage, Recovery, inspect, recover, verify
from .writer import save, write

__all__ = [
    "WtxtFile",
    "open",
    "read",
    "load",
    "inspect",
    "write",
    "save",
    "verify",
    "recover",
    "Recovery",
    "Damage",
    "finalize_wsum",
    "make_delta",
    "apply_delta",
    "armor_encrypt",
    "armor_decrypt",
    "keyid_of",
    "demo",
]


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """Every array, fully verified (see :func:`read`), under its original name.

    Files written by :func:`save` with names outside ``[A-Za-z0-9_]`` or 0-d arrays carry the
    cap item ``tenfold_names``: their stored names are decoded back and 0-d arrays get shape
    ``()`` again (:mod:`tenfold.wtxt.names`). Arrays are always freshly decoded (owned).
    """
    with WtxtFile(source, **kw) as f:
        return f.to_dict()


def demo(directory: pathlib.Path) -> pathlib.Path:
    """Write a small deterministic signed, keyed, row-blocked sample; return its path."""
    directory = pathlib.Path(directory)
    path = directory / "demo.wtxt"
    rng = np.random.default_rng(5)
    arrays = {
        "R": rng.standard_normal((64, 8)).astype(np.float64),
        "W_base": np.arange(300, dtype=np.float32).reshape(30, 10),
        "ids": np.arange(10, dtype=np.int32),
    }
    write(
        path,
        arrays,
        schema="weights/v1",
        gen=1,
        ts="2025-10-09T03:12:45Z",
        build="demo",
        rows_per_chunk=16,
        hmac_key=b"demo-hmac-key",
        signing_key=bytes(range(32)),
        audit={"kahan_max_resid": 1.1e-15, "notes": "tenfold demo"},
    )
    return path
