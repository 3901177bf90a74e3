"""A signalling NaN in a tensor is a value like any other to the verifier (found by the
corruption test of tests/core/test_source.py: a flipped byte made one)."""

from __future__ import annotations

import warnings

import numpy as np

import tenfold


def test_verify_counts_a_signalling_nan_without_a_warning(tmp_path):
    w = np.arange(6, dtype=np.float32)
    w.view(np.uint32)[2] = 0x7F800001  # exponent all ones, quiet bit clear
    p = tmp_path / "m.oinf"
    tenfold.save(p, {"w": w})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: "invalid value encountered in cast"
        with tenfold.open(p) as r:
            report = r.verify()
            assert r["w"].view(np.uint32)[2] == 0x7F800001  # the bits as stored
    assert report.ok
    from tenfold.oinf import verify

    stats = verify(p).stats["w"]
    assert stats["nan"] == 1 and stats["numel"] == 6 and stats["max"] == 5.0
