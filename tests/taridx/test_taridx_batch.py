"""Issue 14 item 2: ``Dataset.__getitems__`` (batched, coalesced reads) with every check of
``ds[i]``; issue 15's remainder: Index-level header switch and Limits, remote shard checks."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from test_taridx_members import (
    DIALECTS,
    FUTURE,
    _bad_fold,
    _edits,
    _fold,
    _payloads,
    _swap,
    _tar,
    _truth,
)

import tenfold.taridx as tx
from tenfold import _kernels
from tenfold.core.bounds import Limits
from tenfold.core.checksums import xxh64
from tenfold.errors import IntegrityError, LimitError, TenfoldError, TruncatedError
from tenfold.taridx._remote import LinkModel, plan_ranges


def _b(sample):
    return {k: bytes(v) for k, v in sample.items()}


# -- local batches -------------------------------------------------------------------------------
@pytest.mark.parametrize("vec, fold", DIALECTS)
@pytest.mark.parametrize("verify", [True, False])
def test_getitems_equals_getitem_every_dialect(conformance, tmp_path, vec, fold, verify):
    d = conformance / "taridx" / vec
    idx_path = tx.build(d, fold, out=tmp_path / f"{fold}.taridx", show_progress=False)
    want = _payloads(d, fold)
    with tx.Dataset(d, fold, index=idx_path, verify_headers=verify) as ds:
        n = len(ds)
        rng = np.random.default_rng(0)
        batch = [*rng.integers(0, n, 3 * n).tolist(), -1, 0, 0]  # repeats, negative
        got = ds.__getitems__(batch)
        assert [_b(s) for s in got] == [_b(ds[i]) for i in batch]
        assert [list(s) for s in got] == [list(ds[i]) for i in batch]  # same key order
        assert ds.__getitems__([]) == []
        for s in got:
            for v in s.values():
                assert bytes(v) in want.values()
        with pytest.raises(IndexError, match="out of range"):
            ds.__getitems__([0, n])
        with pytest.raises(IndexError):
            ds.__getitems__([-n - 1])


def test_getitems_extensions_decoders_and_spanning_shards(tmp_path):
    for k in range(3):
        _tar(
            tmp_path / f"m_{k:04d}.tar",
            [(f"s{j}.e{k}", bytes([16 * k + j]) * (50 + j + k)) for j in range(4)],
        )
    tx.build(tmp_path, "m", show_progress=False)
    for max_open in (1, 2, 8):
        with tx.Dataset(tmp_path, "m", max_open=max_open) as ds:
            got = ds.__getitems__([3, 0, 2, 1, 3])
            assert [_b(s) for s in got] == [
                {f"e{k}": bytes([16 * k + j]) * (50 + j + k) for k in range(3)}
                for j in (3, 0, 2, 1, 3)
            ]
            assert ds.open_shards <= max_open
    ds = tx.Dataset(tmp_path, "m", extensions=["e2", "e0"], decoders={"e0": len})
    assert ds.__getitems__([1]) == [{"e0": 51, "e2": bytes([33]) * 53}]


def test_getitems_zero_copy_and_torch_loader(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    _fold(tmp_path, shards=(0, 1), per=4)
    tx.build(tmp_path, "t", show_progress=False)
    truth = _truth(tmp_path)
    ds = tx.Dataset(tmp_path, "t")
    calls = []
    real = ds.__getitems__

    def spy(indices):
        calls.append(list(indices))
        return real(indices)

    ds.__getitems__ = spy  # type: ignore[method-assign]
    dl = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=lambda b: b)
    seen = [s for batch in dl for s in batch]
    assert calls == [[0, 1, 2], [3, 4, 5], [6, 7]]
    stems = ds.index.stems()
    assert [_b(s) for s in seen] == [
        {e: truth[(stem, e)] for e in ("jpg", "cls")} for stem in stems
    ]
    assert type(ds.__getitems__([0])[0]["jpg"]) is bytes  # the default: payloads pickle
    ds.close()
    with tx.Dataset(tmp_path, "t", payload="memoryview") as views:
        v = views.__getitems__([0])[0]["jpg"]
        assert isinstance(v, memoryview) and v.readonly


def test_getitems_swapped_and_replaced_shards_refused(tmp_path):
    _fold(tmp_path, shards=(0, 1))
    path = tx.build(tmp_path, "t", show_progress=False)
    os.utime(path, ns=(FUTURE, FUTURE))  # no open-time re-check: the header check must catch it
    _swap(tmp_path / "t_0000.tar", tmp_path / "t_0001.tar")
    with tx.Dataset(tmp_path, "t") as ds:
        with pytest.raises(IntegrityError, match=r"shard t_000[01]\.tar: member header"):
            ds.__getitems__(list(range(len(ds))))
        with pytest.raises(IntegrityError):
            ds.__getitems__([len(ds) - 1])
    with tx.Dataset(tmp_path, "t", verify_headers=False) as ds:  # the switch: trusted
        assert len(ds.__getitems__(list(range(len(ds))))) == len(ds)
    # without the utime: the open-time staleness check names the rebuild
    _swap(tmp_path / "t_0000.tar", tmp_path / "t_0001.tar")
    _tar(
        tmp_path / "t_0001.tar",
        [
            (f"z1s{j:03d}.{e}", b"q" * (300 + 7 * j + (e == "cls")))
            for j in range(5)
            for e in ("jpg", "cls")
        ],
    )
    os.utime(path, ns=(10**9, 10**9))
    with tx.Dataset(tmp_path, "t") as ds, pytest.raises(IntegrityError, match="rebuild the index"):
        ds.__getitems__([0, len(ds) - 1])


def test_getitems_truncated_shard(tmp_path):
    _fold(tmp_path, shards=(0,), per=3)
    path = tx.build(tmp_path, "t", show_progress=False)
    raw = (tmp_path / "t_0000.tar").read_bytes()
    (tmp_path / "t_0000.tar").write_bytes(raw[:2000])
    os.utime(path, ns=(FUTURE, FUTURE))
    with tx.Dataset(tmp_path, "t") as ds, pytest.raises(TruncatedError, match="t_0000.tar"):
        ds.__getitems__([0, 1, 2])


def test_getitems_every_corrupt_row_is_refused_or_harmless(tmp_path):
    """As the ``ds[i]`` test in test_taridx_members, through batches: a batch of every sample
    with one mutated row fails; batches without it return exactly the members' bytes."""
    src = tmp_path / "src"
    src.mkdir()
    _fold(src, shards=(0, 1), per=3)
    good = tx.build(src, "t", show_progress=False)
    truth = {(xxh64(stem.encode()), ext): data for (stem, ext), data in _truth(src).items()}
    with tx.Index.open(good) as idx:
        rows, ext = np.array(idx.rows), list(idx.ext)
    work = tmp_path / "work"
    work.mkdir()
    for f in src.glob("t_*.tar"):
        shutil.copy(f, work / f.name)
    n_edits = refused = served = 0
    for r in range(len(rows)):
        for field, value in _edits(rows, r):
            if int(rows[field][r]) == value:
                continue
            bad = rows.copy()
            bad[field][r] = value
            n_edits += 1
            try:
                tx.write_rows(work / "t.taridx", bad, ext, [], fsync=False)
                ds = tx.Dataset(work, "t")
                n = len(ds)
                keys = ds.index.samples.keyhash
            except TenfoldError:
                refused += 1
                continue
            with ds:
                try:
                    ds.__getitems__(list(range(n)))
                except TenfoldError:
                    refused += 1
                for i in range(n):  # singleton batches: the others still read exactly
                    try:
                        (sample,) = ds.__getitems__([i])
                    except TenfoldError:
                        continue
                    for e, view in sample.items():
                        assert bytes(view) == truth[(int(keys[i]), e)], (field, value, r, e)
                    served += 1
    assert n_edits >= 42 * 4 and refused == n_edits
    assert served


def test_getitems_skipped_bad_names_and_staleness(tmp_path):
    _bad_fold(tmp_path)
    path = tx.build(tmp_path, "b", show_progress=False, on_bad_name="skip")
    with tx.Dataset(tmp_path, "b") as ds:
        assert [_b(s) for s in ds.__getitems__([2, 0, 1])] == [
            {"cls": b"55"},
            {"jpg": b"1"},
            {"cls": b"333"},
        ]
    # a member renamed in place after indexing (same sizes): the open-time check (newer
    # shard) and the read-time check both compare names
    raw = bytearray((tmp_path / "b_0001.tar").read_bytes())
    at = next(k for k in range(0, len(raw), 512) if raw[k : k + 6] == b"e.cls\0")
    raw[at : at + 5] = b"E.cls"
    (tmp_path / "b_0001.tar").write_bytes(bytes(raw))
    with tx.Dataset(tmp_path, "b") as ds, pytest.raises(IntegrityError, match="rebuild"):
        ds.__getitems__([0, 2])
    os.utime(path, ns=(FUTURE, FUTURE))
    with tx.Dataset(tmp_path, "b") as ds, pytest.raises(IntegrityError, match="member header"):
        ds.__getitems__([0, 2])


def test_getitems_non_ascii_names(conformance, tmp_path):
    d = conformance / "taridx" / "names_multidot_case_utf8"
    for fold in ("train", "latin1"):
        p = tx.build(d, fold, out=tmp_path / f"{fold}.taridx", show_progress=False)
        with tx.Dataset(d, fold, index=p) as ds:
            everything = list(range(len(ds)))
            assert [_b(s) for s in ds.__getitems__(everything)] == [_b(ds[i]) for i in everything]


def test_kernel_batch_matches_reference(tmp_path):
    from tenfold._kernels import _ref_tarscan

    ts = _kernels.load("tarscan")
    _fold(tmp_path, shards=(0, 1), per=4)
    tx.build(tmp_path, "t", show_progress=False)
    shards = [(tmp_path / f"t_000{k}.tar").read_bytes() for k in (0, 1)]
    with tx.Dataset(tmp_path, "t") as ds:
        ds[0]
        cols, kh, starts = ds._cols, ds._kh, ds._starts
        for mod in (ts, _ref_tarscan):
            rc = mod.RowCheck(cols, kh, starts, (b"jpg", b"cls"))
            rows = np.arange(len(cols), dtype=np.int64)[::-1].copy()
            for fid in (0, 1):
                assert rc.batch(shards[fid], rows, fid) == -1
                bad = rc.batch(shards[1 - fid], rows, fid)  # swapped: first checked row fails
                assert bad == int(rows[cols[rows, 2] == fid][0])
            assert rc.batch(shards[0], np.zeros(0, np.int64), 0) == -1
            with pytest.raises(IndexError):
                rc.batch(shards[0], np.array([len(cols)], np.int64), 0)
            with pytest.raises(IndexError):
                rc.batch(shards[0], np.array([-1], np.int64), 0)
            with pytest.raises(ValueError):
                rc.batch(shards[0], np.zeros(3, np.int32), 0)
            with pytest.raises(TypeError, match="bytes or None"):
                mod.RowCheck(cols, kh, starts, ("jpg", b"cls")).batch(shards[0], rows, 0)
            with pytest.raises(ValueError, match="extid"):
                mod.RowCheck(cols, kh, starts, (b"jpg",)).batch(shards[0], rows, 0)
            only_cls = mod.RowCheck(cols, kh, starts, (None, b"cls"))
            r0 = np.flatnonzero(cols[:, 2] == 0).astype(np.int64)
            assert only_cls.batch(shards[1], r0, 0) == int(r0[cols[r0, 3] == 1][0])
            short = shards[0][: int(cols[r0[-1], 0])]  # last payload cut off
            assert rc.batch(short, r0, 0) == int(r0[-1])


def _plan(key, lo, hi, **kw):
    kw = {"max_gap": 10, "max_range": 1 << 30, "budget": 1 << 30} | kw
    args = (np.array(key, np.int64), np.array(lo, np.int64), np.array(hi, np.int64))
    run, f, a, b = plan_ranges(*args, **kw)
    return run.tolist(), list(zip(f.tolist(), a.tolist(), b.tolist(), strict=True))


def test_plan_ranges_holes_and_objects():
    lo, hi = [100, 0, 50, 1000, 1010], [150, 40, 60, 1005, 1020]
    run, reqs = _plan([0] * 5, lo, hi)
    assert reqs == [(0, 0, 60), (0, 100, 150), (0, 1000, 1020)]
    assert run == [1, 0, 0, 2, 2]  # 40 -> 50 is a hole of 10: read; 60 -> 100 is not
    run, reqs = _plan([0] * 5, lo, hi, max_gap=0)
    assert [r[1] for r in reqs] == [0, 50, 100, 1000, 1010]
    # ranges of different objects never merge, whatever the hole
    run, reqs = _plan([1, 0, 1], [0, 10, 20], [10, 20, 30], max_gap=100)
    assert reqs == [(0, 10, 20), (1, 0, 30)] and run == [1, 0, 1]
    # overlapping or touching ranges always merge (no hole to pay for)
    run, reqs = _plan([0, 0, 0], [0, 5, 30], [10, 30, 40], max_gap=0, budget=0)
    assert reqs == [(0, 0, 40)] and run == [0, 0, 0]
    assert _plan([], [], []) == ([], [])


def test_plan_ranges_smallest_holes_first_within_budget_and_max_range():
    # ranges of 10 bytes with holes 50, 5, 30, 1 between them (useful bytes: 50)
    lo = [0, 60, 75, 115, 126]
    hi = [x + 10 for x in lo]
    run, reqs = _plan([0] * 5, lo, hi, max_gap=100)
    assert reqs == [(0, 0, 136)]
    # budget 50 + 6: only the holes of 1 and 5 bytes fit (the cheapest two merges)
    run, reqs = _plan([0] * 5, lo, hi, max_gap=100, budget=56)
    assert reqs == [(0, 0, 10), (0, 60, 85), (0, 115, 136)]
    assert sum(b - a for _, a, b in reqs) <= 56
    # max_gap 30: the 50-byte hole is not worth a request
    run, reqs = _plan([0] * 5, lo, hi, max_gap=30)
    assert reqs == [(0, 0, 10), (0, 60, 136)]
    # max_range 30: no request over 30 bytes, holes still taken smallest first
    run, reqs = _plan([0] * 5, lo, hi, max_gap=100, max_range=30)
    assert reqs == [(0, 0, 10), (0, 60, 85), (0, 115, 136)]
    assert all(b - a <= 30 for _, a, b in reqs)
    # every range lies inside its request
    run, reqs = _plan([0] * 5, lo, hi, max_gap=100, budget=56)
    for k, r in enumerate(run):
        assert reqs[r][1] <= lo[k] and hi[k] <= reqs[r][2]


def test_link_model_fits_calls_and_gives_limits():
    m = LinkModel(0.010, 100e6)
    assert m.max_gap == 1_000_000 and m.max_range == 9_000_000
    # a link with 2 ms per request and 400 MB/s: calls of different shapes
    for n, b in [(1, 4_000), (256, 1_000_000), (4, 60_000_000), (1, 2_000), (8, 30_000_000)] * 8:
        m.observe(n, b, n * 0.002 + b / 400e6)
    assert m.per_request == pytest.approx(0.002, rel=0.05)
    assert m.bandwidth == pytest.approx(400e6, rel=0.05)
    assert m.max_gap == pytest.approx(800_000, rel=0.1)
    assert m.max_range == pytest.approx(7_200_000, rel=0.1)
    m.observe(0, 10, 1.0)  # ignored
    m.observe(1, 10, 0.0)
    assert m.observations == 40
    fast = LinkModel(0.010, 100e6)
    for _ in range(50):  # a link 1e6 times faster than the default is held within 1000x
        fast.observe(1, 1000, 1e-9)
    assert fast.per_request >= 0.010 / 1e3
    with pytest.raises(ValueError):
        LinkModel(0, 1)
    assert "max_gap" in repr(m)


# -- the Index: header switch and Limits ----------------------------------------------------------
def test_index_reads_header_switch(tmp_path):
    _fold(tmp_path, shards=(0, 1))
    path = tx.build(tmp_path, "t", show_progress=False)
    os.utime(path, ns=(FUTURE, FUTURE))
    _swap(tmp_path / "t_0000.tar", tmp_path / "t_0001.tar")
    with tx.Index.open(path) as idx, pytest.raises(IntegrityError, match="member header"):
        idx["k0s001"]
    with tx.Index.open(path, verify_headers=True) as idx, pytest.raises(IntegrityError):
        idx.read("k1s002")
    with tx.Index.open(path, verify_headers=False) as idx:
        assert idx.verify_headers is False
        assert set(idx["k0s001"]) == {"jpg", "cls"}  # trusted: the other shard's bytes


def test_index_limits(tmp_path):
    _fold(tmp_path, shards=(0,), per=3)
    path = tx.build(tmp_path, "t", show_progress=False)
    with tx.Index.open(path, limits=Limits(max_objects=6)) as idx:
        assert idx.n_rows == 6
    with pytest.raises(LimitError, match=r"taridx: .*rows at offset 0x18: n_rows: above limit"):
        tx.Index.open(path, limits=Limits(max_objects=5))
    with pytest.raises(LimitError, match="extension"):
        tx.Index.from_buffer(path.read_bytes(), limits=Limits(max_index_bytes=3))
    with pytest.raises(LimitError):
        tx.Dataset(tmp_path, "t", limits=Limits(max_objects=1))
