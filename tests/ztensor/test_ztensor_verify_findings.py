"""zTensor verify reports a file it cannot open from the exception's attributes (obj, offset),
as the other formats' verifiers do, not as an anonymous "file" row without an offset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.errors import TenfoldError


def _damaged(tmp_path: Path, generation: int, how: str) -> Path:
    p = tmp_path / "a.zt"
    zt.save(p, {"w": np.arange(10, dtype=np.float32)}, generation=generation)
    data = bytearray(p.read_bytes())
    if how == "truncate":
        data = data[:-4]
    elif how == "head":
        data[0] ^= 0x01
    else:  # the last magic byte but one (the v2 footer magic)
        data[-5] ^= 0xFF
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize(
    "generation, how", [(1, "truncate"), (1, "head"), (2, "tail"), (2, "truncate")]
)
def test_unopenable_file_reported_from_exception_attributes(tmp_path, generation, how):
    p = _damaged(tmp_path, generation, how)
    with pytest.raises(TenfoldError) as info:
        zt.open(p)
    exc = info.value
    assert exc.obj and exc.offset is not None
    rep = zt.verify(p)
    assert not rep.ok
    (err,) = rep.errors
    assert (err.obj, err.offset, err.message) == (exc.obj, exc.offset, str(exc))


def test_verify_of_0_1_0_says_the_index_has_no_checksum(tmp_path):
    # an OK for a 0.1.0 file covers the tensors' checksums only: the CBOR index has none, and
    # the report says so (new-user trial: "OK" read as "the whole file is checked")
    p = tmp_path / "a.zt"
    zt.save(p, {"w": np.arange(10, dtype=np.float32)})
    report = zt.verify(p)
    assert report.ok
    assert "no checksum" in report.summary["index"]
    v2 = tmp_path / "b.zt"
    zt.save(v2, {"w": np.arange(10, dtype=np.float32)}, generation=2)
    assert "index" not in zt.verify(v2).summary  # v2 hashes its manifest
