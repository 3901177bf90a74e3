"""Helpers to turn a conformance sidecar into the arrays it describes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from tenfold.core.dtypes import numpy_dtype


def sidecar(path: Path) -> dict:
    return json.loads(path.with_suffix(".json").read_text())


def expected_array(t: dict) -> np.ndarray:
    """The tensor a sidecar entry describes, from its exact little-endian bytes."""
    dt = numpy_dtype(t["dtype"])
    raw = bytes.fromhex(t["raw_le_hex"])
    assert hashlib.sha256(raw).hexdigest() == t["raw_le_sha256"]
    return np.frombuffer(raw, dtype=dt).reshape(t["shape"])
