"""Issue 21 for remote TARIDX shards: the dataset's batched range reads go through the checked
range reader of ``tenfold.core.source`` (``cat_ranges``), so a shard replaced behind a server
that ignores ``If-Match``, or a server that ignores ``Range``, is an error naming the shard,
never other bytes. Served by the misbehaving HTTP server of ``tests/core/_badserver.py``."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_taridx_members import _fold, _truth

import tenfold.taridx as tx
from tenfold.errors import IntegrityError

pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is missing")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from _badserver import BadServer  # noqa: E402

SHARDS = ["t_0000.tar", "t_0001.tar"]


@pytest.fixture
def served(tmp_path: Path) -> Any:
    _fold(tmp_path, shards=(0, 1), per=40)
    tx.build(tmp_path, "t", show_progress=False)
    with BadServer() as srv:
        for p in [*(tmp_path / s for s in SHARDS), tmp_path / "t.taridx"]:
            srv.put(p.name, p.read_bytes())
        yield srv, tmp_path


def _dataset(srv: BadServer) -> Any:
    root = srv.url("")[:-1]
    return tx.Dataset(root, "t", shards=SHARDS, cache_bytes=0, calibrate=False)


def test_replaced_shard_behind_a_server_ignoring_if_match_is_an_integrity_error(served):
    srv, d = served
    srv.behaviour.ignore_preconditions = True
    ds = _dataset(srv)
    n = len(ds)
    truth = _truth(d)
    stems = tx.Dataset(d, "t").index.stems()
    got = ds.__getitems__([0, n - 1])
    assert bytes(got[0]["jpg"]) == truth[(stems[0], "jpg")]
    raw = bytearray((d / SHARDS[0]).read_bytes())
    with tarfile.open(d / SHARDS[0]) as tf:
        last = tf.getmembers()[-1]
    raw[last.offset_data] ^= 0xFF  # a payload byte: headers and size unchanged
    srv.put(SHARDS[0], bytes(raw))
    last_row = [i for i in range(n) if stems[i] == last.name.partition(".")[0]]
    with pytest.raises(IntegrityError, match=r"t_0000.tar.*changed on the server.*ETag"):
        ds.__getitems__(last_row)
    ds.close()


def test_server_ignoring_range_is_refused_not_misread(served):
    srv, d = served
    ds = _dataset(srv)
    n = len(ds)
    srv.behaviour.ignore_range = True
    with pytest.raises(OSError, match=r"t_000[01].tar.*ignored the Range header"):
        ds.__getitems__([n // 2 - 1, n - 1])  # rows inside the shards, not at offset 0
    ds.close()


def test_batches_still_equal_the_local_ones(served):
    srv, d = served
    srv.behaviour.validators = "weak"  # a weak ETag: never sent as If-Match
    ds = _dataset(srv)
    truth = _truth(d)
    stems = tx.Dataset(d, "t").index.stems()
    batch = np.random.default_rng(0).permutation(len(ds))[:30].tolist()
    for i, s in zip(batch, ds.__getitems__(batch), strict=True):
        assert bytes(s["jpg"]) == truth[(stems[i], "jpg")]
    ds.close()
