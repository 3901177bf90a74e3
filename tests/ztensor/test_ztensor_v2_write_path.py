"""The v2 writer's path for large raw parts: ``pwrite`` straight from the caller's memory in
blocks, the XXH3-64 computed on the writer's long-lived hashing thread (or on the writing
thread with one CPU), writeback started early when the file will be fsynced.

Block sizes are made tiny here so that parts span several blocks and end at and around block
boundaries; the digests must equal ``xxhash``'s of the same bytes, and the file the one of the
plain (buffered, one-thread) path."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest
import xxhash

import tenfold.ztensor as zt
from tenfold.ztensor import _parthash, _v2values
from tenfold.ztensor import _v2blobs as v2writer  # the raw-part write path
from tenfold.ztensor._parthash import PartHasher, pwrite_all

BLOCK = 4096


def _hash_threads() -> list[threading.Thread]:
    gc.collect()  # a writer another test dropped unclosed is aborted by its finalizer
    return [t for t in threading.enumerate() if t.name == "tenfold-zt-xxh3"]


@pytest.fixture
def small_blocks(monkeypatch):
    """Every raw part takes the pwrite path, in 4 KiB blocks."""
    monkeypatch.setattr(v2writer, "_PIPE_MIN", 1)
    monkeypatch.setattr(v2writer, "_BLOCK", BLOCK)


SIZES = [1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 3 * BLOCK - 1, 3 * BLOCK + 7, 7 * BLOCK]


def _parts() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    out = {f"p{i:02d}": rng.integers(0, 256, n, dtype=np.uint8) for i, n in enumerate(SIZES)}
    # not contiguous: converted in slices (made small below), so a part is several pieces
    # whose ends do not fall on block boundaries
    out["q_strided"] = rng.standard_normal((40, 300))[:, ::2].astype(">f8")
    return out


@pytest.mark.parametrize("ahead", [1, 2, 5])
@pytest.mark.parametrize("threaded", [True, False])
def test_digests_at_block_boundaries(tmp_path, monkeypatch, small_blocks, ahead, threaded):
    monkeypatch.setattr(v2writer, "_AHEAD", ahead)
    monkeypatch.setattr(v2writer, "_use_thread", lambda: threaded)
    monkeypatch.setattr(_v2values, "_SLICE", 3 * BLOCK + 5)
    tensors = _parts()
    piped = tmp_path / "p.zt"
    zt.save(piped, tensors, generation=2)
    with zt.open(piped) as r:
        for name, a in tensors.items():
            want = xxhash.xxh3_64_hexdigest(np.ascontiguousarray(a, a.dtype.newbyteorder("<")))
            assert r.info(name).parts["data"].digest == f"xxh3:{want}", name
            np.testing.assert_array_equal(r[name], a)
    monkeypatch.setattr(v2writer, "_PIPE_MIN", 1 << 62)
    plain = tmp_path / "s.zt"
    zt.save(plain, tensors, generation=2)
    assert piped.read_bytes() == plain.read_bytes()
    assert _hash_threads() == []


def test_one_hashing_thread_per_writer_stopped_on_close(tmp_path, small_blocks, monkeypatch):
    monkeypatch.setattr(v2writer, "_use_thread", lambda: True)
    started = []
    real = threading.Thread.start

    def counting_start(self):
        started.append(self.name)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    with zt.Writer(tmp_path / "a.zt", generation=2) as w:
        for i in range(5):
            w.add(f"t{i}", np.full(3 * BLOCK, i, np.uint8))
        assert len(_hash_threads()) == 1
    assert started == ["tenfold-zt-xxh3"]
    assert _hash_threads() == []


def test_dropped_or_aborted_writer_stops_its_thread(tmp_path, small_blocks, monkeypatch):
    monkeypatch.setattr(v2writer, "_use_thread", lambda: True)
    w = zt.Writer(tmp_path / "a.zt", generation=2)
    w.add("t", np.ones(3 * BLOCK, np.uint8))
    assert len(_hash_threads()) == 1
    w.abort()
    assert _hash_threads() == []
    w = zt.Writer(tmp_path / "b.zt", generation=2)
    w.add("t", np.ones(3 * BLOCK, np.uint8))
    del w  # never closed: the finalizer aborts it (the thread holds no reference to it)
    gc.collect()
    assert _hash_threads() == []
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("threaded", [True, False])
@pytest.mark.parametrize("fail_at", [2, 4])  # the first block of "b", one in its middle
def test_write_error_mid_part_poisons_writer_and_keeps_old_file(
    tmp_path, monkeypatch, small_blocks, threaded, fail_at
):
    """A failing write (disk full) in the middle of a part reaches the caller, the writer
    refuses more work, the hashing thread stops and the previous file is untouched."""
    monkeypatch.setattr(v2writer, "_use_thread", lambda: threaded)
    path = tmp_path / "m.zt"
    zt.save(path, {"old": np.arange(5)}, generation=2)
    before = path.read_bytes()
    calls = []

    def failing(fd, data, offset):
        calls.append(data.nbytes)
        if len(calls) == fail_at:
            raise OSError(28, "No space left on device")
        pwrite_all(fd, data, offset)

    monkeypatch.setattr(v2writer, "pwrite_all", failing)
    w = zt.Writer(path, generation=2)
    w.add("a", np.zeros(10, np.uint8))  # call 1
    with pytest.raises(OSError, match="No space"):
        w.add("b", np.ones(5 * BLOCK, np.uint8))
    with pytest.raises(ValueError, match="failed earlier"):
        w.add("c", np.ones(3, np.uint8))
    with pytest.raises(ValueError, match="file discarded"):
        w.close()
    assert calls[-1] == BLOCK
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.zt"]  # no temporary file left
    assert _hash_threads() == []


def test_short_writes_are_continued(tmp_path, monkeypatch, small_blocks):
    real = os.pwrite
    sizes = []

    def short(fd, data, offset):
        sizes.append(len(data))
        return real(fd, memoryview(data)[:1000], offset)

    tensors = {"a": np.arange(3 * BLOCK, dtype=np.uint8), "b": np.arange(9, dtype=np.int64)}
    monkeypatch.setattr(_parthash.os, "pwrite", short)
    zt.save(tmp_path / "s.zt", tensors, generation=2)
    monkeypatch.undo()
    assert len(sizes) > 3 * BLOCK // 1000
    zt.save(tmp_path / "p.zt", tensors, generation=2)
    assert (tmp_path / "s.zt").read_bytes() == (tmp_path / "p.zt").read_bytes()


def test_write_without_progress_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(_parthash.os, "pwrite", lambda fd, data, offset: 0)
    fd = os.open(tmp_path / "x", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="no progress"):
            pwrite_all(fd, memoryview(b"abc"), 0)
    finally:
        os.close(fd)


def test_part_hasher_digests_errors_and_restart():
    h = PartHasher()
    try:
        data = np.random.default_rng(0).integers(0, 256, 10 * BLOCK + 3, dtype=np.uint8)
        mv = memoryview(data)
        for i in range(0, mv.nbytes, BLOCK):
            h.update(mv[i : i + BLOCK])
        assert h.digest() == xxhash.xxh3_64_intdigest(mv)
        assert h.digest() == xxhash.xxh3_64_intdigest(b"")  # a part without blocks
        h.update(object())  # type: ignore[arg-type]
        h.update(mv)
        with pytest.raises(TypeError):
            h.digest()
        h.update(mv[:5])
        assert h.digest() == xxhash.xxh3_64_intdigest(mv[:5])  # the next part is fine
        h.update(mv)
        h.discard()
        assert h.digest() == xxhash.xxh3_64_intdigest(b"")
        assert h.alive
        h.pid = -1  # as in a forked child, where the thread does not exist
        assert not h.alive
        h.pid = os.getpid()
    finally:
        h.close()
    assert not h.alive
    h.close()  # twice is fine


def test_writer_replaces_a_hasher_from_another_process(tmp_path, monkeypatch, small_blocks):
    """After a fork the child's writer has no hashing thread: it starts its own."""
    monkeypatch.setattr(v2writer, "_use_thread", lambda: True)
    with zt.Writer(tmp_path / "a.zt", generation=2) as w:
        w.add("a", np.full(2 * BLOCK, 1, np.uint8))
        first = w._hasher
        assert first is not None
        first.pid = -1
        try:
            w.add("b", np.full(2 * BLOCK, 2, np.uint8))
            assert w._hasher is not first and w._hasher.alive
        finally:
            first.pid = os.getpid()
            first.close()
    with zt.open(tmp_path / "a.zt") as r:  # digests checked
        assert r["b"].tolist() == [2] * 2 * BLOCK


@pytest.mark.parametrize("threaded", [True, False])
@pytest.mark.parametrize("fsync", [True, False])
def test_writeback_started_only_when_fsyncing(tmp_path, monkeypatch, small_blocks, threaded, fsync):
    monkeypatch.setattr(v2writer, "_use_thread", lambda: threaded)
    monkeypatch.setattr(v2writer, "_WRITEBACK", 2 * BLOCK)
    ranges = []
    monkeypatch.setattr(v2writer, "start_writeback", lambda fd, o, n: ranges.append((o, n)))
    tensors = {"a": np.ones(5 * BLOCK + 1, np.uint8), "b": np.zeros(3, np.uint8)}
    zt.save(tmp_path / "a.zt", tensors, generation=2, fsync=fsync)
    if not fsync:
        assert ranges == []
        return
    with zt.open(tmp_path / "a.zt") as r:
        parts = [(r.info(n).offset, r.info(n).parts["data"].length) for n in sorted(tensors)]
    covered = []
    for off, n in ranges:  # contiguous, and exactly each part's bytes
        if covered and covered[-1][1] == off:
            covered[-1][1] = off + n
        else:
            covered.append([off, off + n])
    assert covered == [[o, o + n] for o, n in parts]
    if threaded:
        assert max(n for _, n in ranges) <= 3 * BLOCK  # in steps, not one call at the end


def test_one_cpu_never_uses_the_thread(monkeypatch, tmp_path, small_blocks):
    monkeypatch.setattr(v2writer, "_two_cpus", lambda: False)
    assert not v2writer._use_thread()
    zt.save(tmp_path / "a.zt", {"a": np.ones(3 * BLOCK, np.uint8)}, generation=2)
    assert _hash_threads() == []


def test_two_cpus_use_the_thread(monkeypatch, tmp_path, small_blocks):
    monkeypatch.setattr(v2writer, "_two_cpus", lambda: True)
    assert v2writer._use_thread()
    threads = []
    real = v2writer.PartHasher

    def counting():
        threads.append(1)
        return real()

    monkeypatch.setattr(v2writer, "PartHasher", counting)
    data = {"a": np.arange(3 * BLOCK, dtype=np.uint8), "b": np.ones(3 * BLOCK, np.uint8)}
    zt.save(tmp_path / "a.zt", data, generation=2)
    assert threads == [1]  # one hashing thread for the writer, both parts through it
    with zt.open(tmp_path / "a.zt") as r:
        assert all(np.array_equal(r[k], v) for k, v in data.items())
