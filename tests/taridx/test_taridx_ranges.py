"""Building with shards cut into ranges walked by several threads gives the one-walk result.

Ranges are forced down to one block (``_walk.MIN_RANGE``) so the small shards here are cut at
every few members: range starts guessed inside payloads (a tar inside a tar), after extended
headers (pax per member, GNU long names), pax global headers (the chain cannot be joined),
errors and bad names in later ranges all have to give what one walk from offset 0 gives.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

import tenfold.taridx as tx
from tenfold import _kernels
from tenfold.core import parallel
from tenfold.errors import TenfoldError
from tenfold.formats.taridx import _walk


def _tar(members, fmt=tarfile.USTAR_FORMAT, pax=None, per_member=None) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt, pax_headers=pax or {}) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            if per_member:
                info.pax_headers = dict(per_member)
            tf.addfile(info, io.BytesIO(data))
    return bio.getvalue()


def _members(n: int, seed: int = 0, exts=("jpg", "cls")) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        for e in exts:
            out.append((f"d/s{i:05d}.{e}", rng.bytes(int(rng.integers(0, 1500)))))
    return out


def _inner_tar() -> bytes:
    return _tar(_members(6, seed=9, exts=("txt",)))


def _cases() -> dict[str, list[bytes]]:
    plain = _members(60)
    nested = list(plain)
    for k in range(5, 100, 17):  # payloads that are themselves tars: false header blocks
        nested[k] = (f"d/t{k:05d}.tar", _inner_tar())
    long_names = [("L" * 120 + f"/x{i}.{'a' * 110}{i % 3}", b"z" * i) for i in range(30)]
    big_inner = _tar(_members(80, seed=3, exts=("txt",)))
    cases = {
        "big_nested": [_tar(plain[:30] + [("d/inner.tar", big_inner)] + plain[30:])],
        "ustar": [_tar(plain)],
        "two_shards": [_tar(plain[:50]), _tar(plain[50:])],
        "nested_tars": [_tar(nested)],
        "pax_per_member": [_tar(plain, tarfile.PAX_FORMAT, per_member={"comment": "c" * 40})],
        "pax_global": [_tar(plain, tarfile.PAX_FORMAT, pax={"comment": "global"})],
        "gnu_long": [_tar(long_names + plain, tarfile.GNU_FORMAT)],
        "pax_long": [_tar(plain + long_names, tarfile.PAX_FORMAT)],
        "non_ascii": [_tar([(f"é{i}.JPG", b"1" * i) for i in range(40)] + plain)],
    }
    data = bytearray(_tar(plain))
    data[150 * 512 + 148 : 150 * 512 + 156] = b"0000000\0"  # a bad checksum, late
    bad_sum = bytes(data)
    cases["late_checksum"] = [_tar(plain[:10]), bad_sum]
    cases["truncated"] = [_tar(plain)[: 200 * 512 + 100]]
    newline = list(plain)
    newline[70] = ("d/bad\nname.jpg", b"x")
    newline[90] = ("d/worse\n.cls", b"y")
    cases["newline_names"] = [_tar(newline)]
    gmid = _tar(plain[:40], tarfile.PAX_FORMAT)[:-1024]  # drop the end blocks
    gmid += _tar(plain[40:], tarfile.PAX_FORMAT, pax={"path": "global.txt"})
    cases["global_path_midway"] = [gmid]
    return cases


CASES = _cases()


def _build(root, split, monkeypatch, threads: int, policy: str):
    if threads > 1:
        monkeypatch.setattr(_walk, "MIN_RANGE", 512)
        monkeypatch.setattr(_walk, "TASKS_PER_THREAD", 64)
    else:
        monkeypatch.setattr(_walk, "MIN_RANGE", _walk.MIN_RANGE)
    skipped: list = []
    out = root / f"{split}-{threads}-{policy}.taridx"
    try:
        tx.build(
            root,
            split,
            out=out,
            workers=threads,
            show_progress=False,
            on_bad_name=policy,
            skipped=skipped,
            fsync=False,
        )
    except TenfoldError as e:
        return type(e), str(e)
    return out.read_bytes(), skipped


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("policy", ["error", "skip"])
def test_ranges_give_one_walk(tmp_path, monkeypatch, case, policy):
    for k, data in enumerate(CASES[case]):
        (tmp_path / f"t_{k}.tar").write_bytes(data)
    one = _build(tmp_path, "t", monkeypatch, 1, policy)
    for threads in (2, 3, 8):
        assert _build(tmp_path, "t", monkeypatch, threads, policy) == one, threads


def test_ranges_cut_one_shard(tmp_path, monkeypatch):
    """A single shard is walked in several ranges when there are several threads."""
    (tmp_path / "t_0.tar").write_bytes(CASES["ustar"][0])
    monkeypatch.setattr(_walk, "MIN_RANGE", 512)
    calls = []
    real = _walk.walk

    def spy(buf, start, stop):
        calls.append((start, stop))
        return real(buf, start, stop)

    monkeypatch.setattr(_walk, "walk", spy)
    monkeypatch.setenv(parallel.THREADS_ENV, "3")
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    tx.build(tmp_path, "t", show_progress=False, fsync=False)
    # the threads take ranges in turn but may finish (and record them) in any order: on
    # CPython 3.13 they usually do not finish in order
    calls.sort()
    assert len(calls) >= 3 and calls[0][0] == 0
    assert [c[1] for c in calls[:-1]] == [c[0] for c in calls[1:]]  # ranges meet


def test_range_counts():
    mib = 1 << 20
    assert _walk.range_counts([100 * mib], 1) == [1]
    assert _walk.range_counts([100 * mib], 2) == [8]
    assert _walk.range_counts([3 * mib], 8) == [1]  # below MIN_RANGE: one range
    assert _walk.range_counts([10 * mib] * 20, 16) == [2] * 20
    assert _walk.range_counts([], 4) == []


_VECTORS = sorted(
    {
        tuple(e["sidecar"].rsplit("/", 1)[0:1] + [e["sidecar"].rsplit("/", 1)[1].split(".")[0]])
        for e in json.loads(
            (Path(__file__).parents[1] / "conformance" / "taridx" / "index.json").read_text()
        )
    }
)


@pytest.mark.parametrize("vec, fold", _VECTORS)
def test_conformance_vectors_in_ranges(conformance, tmp_path, monkeypatch, vec, fold):
    d = conformance / "taridx" / vec
    for policy in ("error", "skip"):
        one = _build_at(d, fold, tmp_path, monkeypatch, 1, policy)
        assert _build_at(d, fold, tmp_path, monkeypatch, 4, policy) == one


def _build_at(d, fold, tmp_path, monkeypatch, threads, policy):
    monkeypatch.undo()
    if threads > 1:
        monkeypatch.setattr(_walk, "MIN_RANGE", 512)
        monkeypatch.setattr(_walk, "TASKS_PER_THREAD", 64)
    out = tmp_path / f"{threads}.taridx"
    try:
        tx.build(d, fold, out=out, workers=threads, show_progress=False, on_bad_name=policy)
    except (TenfoldError, FileNotFoundError) as e:
        return type(e), str(e)
    return out.read_bytes()


def test_scan_shard_threads_param(tmp_path, monkeypatch):
    p = tmp_path / "t_0.tar"
    p.write_bytes(CASES["nested_tars"][0])
    one = tx.scan_shard(p, threads=1)
    monkeypatch.setattr(_walk, "MIN_RANGE", 512)
    many = tx.scan_shard(p, threads=4)
    for f in ("offset", "size", "stems", "stem_len", "ext_local", "keyhash"):
        assert np.array_equal(getattr(one, f), getattr(many, f)), f
    assert one.exts == many.exts


def test_join_walks_again_after_a_false_start():
    """A range guessed inside a payload (a tar inside the tar) is skipped: the walk before it
    jumps over the payload, lands between two starts and that range is walked again."""
    inner = _tar(_members(20, seed=4, exts=("txt",)))
    data = _tar(_members(3) + [("d/inner.tar", inner)] + _members(10, seed=5))
    buf = np.frombuffer(data, np.uint8)
    one = _walk.walk(buf, 0, _walk.NO_STOP)
    real = one.hdr_off.tolist()
    inner_at = real[6]  # the member holding the inner tar
    false = _kernels.load("tarscan").find_member(buf, inner_at + 1024, buf.size)
    assert false not in real and inner_at < false < inner_at + len(inner)
    after = [o for o in real if o > false]
    starts = [0, false, after[1]]  # after[0], where the first walk lands, is no start
    stops = [*starts[1:], _walk.NO_STOP]
    parts = [(_walk.walk(buf, a, b), (a, b)) for a, b in zip(starts, stops, strict=True)]
    again = []

    def rewalk(a, b):
        again.append((a, b))
        return _walk.walk(buf, a, b), (a, b)

    good = _walk.join(parts, rewalk)
    assert again == [(after[0], after[1])]
    got = np.concatenate([p.hdr_off for p, _ in good]).tolist()
    assert got == real
    assert [t for _, t in good] == [(0, false), (after[0], after[1]), (after[1], _walk.NO_STOP)]


def test_open_shards_bounded(tmp_path, monkeypatch):
    """A split of many shards is walked a window at a time: at most max(16, 4 x threads)
    shards are open (mapped, with a descriptor) at once."""
    from tenfold.core import mapped

    mod = sys.modules["tenfold.formats.taridx.build"]  # (the package's build is the function)
    for k in range(40):
        (tmp_path / f"t_{k:03d}.tar").write_bytes(_tar(_members(2, seed=k)))
    now, peak = [0], [0]

    class Counted(mapped.MappedFile):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            now[0] += 1
            peak[0] = max(peak[0], now[0])

        def close(self):
            if not self.closed:
                now[0] -= 1
            super().close()

    monkeypatch.setattr(mod, "MappedFile", Counted)
    one = tx.build(tmp_path, "t", out=tmp_path / "a.taridx", workers=2, show_progress=False)
    assert 0 < peak[0] <= 16 and now[0] == 0
    monkeypatch.setattr(mod, "MappedFile", mapped.MappedFile)
    monkeypatch.setattr(mod, "OPEN_PER_THREAD", 1 << 20)
    two = tx.build(tmp_path, "t", out=tmp_path / "b.taridx", workers=2, show_progress=False)
    assert one.read_bytes() == two.read_bytes()
