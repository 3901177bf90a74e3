"""A durable ``.safetensors`` save (``tenfold.save``, and ``tenfold.torch.save_file``'s
convert target) hands written bytes to the disk as it goes (every ``WRITEBACK_STEP`` bytes,
between tensors), so the final fsync waits for less; without fsync it never does. The file is
the same either way."""

from __future__ import annotations

import numpy as np
import pytest

import tenfold
from tenfold.convert import write_any
from tenfold.core import prealloc


def _save(how, p, data, fsync):
    if how == "save":
        tenfold.save(p, data, fsync=fsync)
    else:  # what tenfold.torch.save_file calls
        write_any(p, data, fsync=fsync)


@pytest.mark.parametrize("how", ["save", "write_any"])
@pytest.mark.parametrize("fsync", [True, False])
def test_safetensors_writeback_only_when_fsyncing(tmp_path, monkeypatch, how, fsync):
    ranges: list[tuple[int, int]] = []
    monkeypatch.setattr(prealloc, "start_writeback", lambda fd, o, n: ranges.append((o, n)))
    monkeypatch.setattr(prealloc, "WRITEBACK_STEP", 4096, raising=False)
    rng = np.random.default_rng(3)
    data = {f"t{i}": rng.standard_normal(700 * (i + 1)).astype(np.float32) for i in range(6)}
    p = tmp_path / "a.safetensors"
    _save(how, p, data, fsync)
    with tenfold.open(p) as r:
        assert all(np.array_equal(r[k], v) for k, v in data.items())
    if not fsync:
        assert ranges == []
        return
    size = p.stat().st_size
    assert ranges, "no writeback started"
    pos = ranges[0][0]
    for off, n in ranges:  # contiguous steps of at least _WRITEBACK bytes, inside the file
        assert off == pos and n >= 4096
        pos += n
    assert pos <= size
