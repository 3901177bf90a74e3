"""FOLD ``Writer.add_chunk_pieces``: the chunk written from pieces (``tenfold convert`` and
``fold.save`` uncompressed) is byte-identical to ``add_chunk`` of the joined bytes, however
it is cut and whatever the source does with a piece once the next is asked for; the SHA-256
runs behind the writing."""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest

import tenfold.fold as fold
from tenfold.core import parallel
from tenfold.errors import EncodeError

MiB = 1 << 20


def _reused(data: np.ndarray, cuts: list[int]):
    """``data`` cut at ``cuts``, each piece handed out in one reused buffer that is
    overwritten with garbage as soon as the next piece is asked for (a block reader's
    contract: a piece is valid until the next is requested)."""
    buf = bytearray(max(b - a for a, b in zip(cuts, cuts[1:], strict=False)) or 1)
    for a, b in zip(cuts, cuts[1:], strict=False):
        buf[: b - a] = data[a:b].tobytes()
        yield memoryview(buf)[: b - a]
        buf[:] = b"\xa5" * len(buf)


def _file(path, data, pieces, **kw) -> bytes:
    with fold.Writer(path, fsync=False, **kw) as w:
        w.add_json("meta", {"k": 1})
        if pieces is None:
            w.add_chunk("blob", "BLOB", data)
        else:
            w.add_chunk_pieces("blob", "BLOB", pieces, data.size)
        w.add_chunk("tail", "RAWB", b"after" * 100)
        w.finalize({"m": "v"})
    return path.read_bytes()


@pytest.mark.parametrize("threads", [None, "1"])
@pytest.mark.parametrize("compress", [None, "zstd"])
@pytest.mark.parametrize("ecc", [None, "med", "rs(7)"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pieces_same_bytes_as_one_chunk(tmp_path, monkeypatch, threads, compress, ecc, seed):
    # pieces smaller, equal to and larger than the hashing ring's buffers (512 KiB), empty
    # ones, cuts off RS block boundaries; one hashing thread or none (TENFOLD_THREADS=1)
    if threads is not None:
        monkeypatch.setenv(parallel.THREADS_ENV, threads)
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, 3 * MiB + 12345, dtype=np.uint8)
    inner = sorted(rng.integers(0, data.size, 12).tolist() + [1 << 19, 1 << 19, 5 * (1 << 18)])
    cuts = [0, *inner, data.size]
    kw = {"compress": compress, "ecc": ecc}
    want = _file(tmp_path / "one.fold", data, None, **kw)
    got = _file(tmp_path / "pieces.fold", data, _reused(data, cuts), **kw)
    assert got == want
    with fold.Reader(tmp_path / "pieces.fold", strict=True) as r:
        assert r.read_bytes("blob") == data.tobytes()


@pytest.mark.skipif(parallel.threads() < 2, reason="one CPU: the SHA-256 runs inline")
def test_next_piece_read_while_previous_still_hashing(tmp_path, monkeypatch):
    # Before: the writer waited for a piece's SHA-256 before asking the source for the next
    # one, so the hashing thread idled while the source read (a quarter of the time the
    # SHA-256 of a 1 MiB block takes): convert to .fold took 1.4x the .zt target's time. Now
    # the hashing runs behind the writer. The SHA-256 here waits (at most 3 s) until the
    # source is asked for the second piece.
    real = hashlib.sha256
    gate = threading.Event()
    hashed: list[int] = []

    class GatedSha:
        def __init__(self, *a):
            self._h = real(*a)

        def update(self, b):
            gate.wait(3)
            self._h.update(b)
            hashed.append(memoryview(b).nbytes)

        def hexdigest(self):
            return self._h.hexdigest()

    monkeypatch.setattr(hashlib, "sha256", GatedSha)
    data = np.random.default_rng(3).integers(0, 256, 4 << 19, dtype=np.uint8)
    seen = []

    def pieces():
        for i in range(4):
            if i == 1:
                seen.append(sum(hashed))  # bytes hashed when the second piece is asked for
                gate.set()
            yield data[i << 19 : (i + 1) << 19]

    with fold.Writer(tmp_path / "a.fold", compress=None, fsync=False) as w:
        entry = w.add_chunk_pieces("blob", "BLOB", pieces(), data.size)
        w.finalize()
    monkeypatch.setattr(hashlib, "sha256", real)
    assert seen == [0]
    assert entry["sha256"] == hashlib.sha256(data.tobytes()).hexdigest()
    with fold.Reader(tmp_path / "a.fold", strict=True) as r:
        assert r.read_bytes("blob") == data.tobytes()


@pytest.mark.parametrize("compress", [None, "zstd"])
@pytest.mark.parametrize("extra", [-1, 1])
def test_pieces_other_than_size_refused(tmp_path, compress, extra):
    # Before: with zstd the pieces were joined whatever their total, and a chunk of another
    # size than the one announced was written without a word
    data = np.arange(3000, dtype=np.uint8)
    p = tmp_path / "a.fold"
    with pytest.raises(EncodeError, match="chunk 'blob'.*size"):
        with fold.Writer(p, compress=compress, fsync=False) as w:
            w.add_chunk_pieces("blob", "BLOB", [data[:1000], data[1000:]], data.size + extra)
    assert not p.exists()


def test_source_failure_mid_chunk_leaves_nothing(tmp_path):
    p = tmp_path / "a.fold"
    p.write_bytes(b"previous")
    data = np.ones(3 * MiB, np.uint8)

    def pieces():
        yield data[:MiB]
        yield data[MiB : 2 * MiB]
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output"):
        with fold.Writer(p, compress=None, fsync=False) as w:
            w.add_chunk_pieces("blob", "BLOB", pieces(), data.size)
    assert p.read_bytes() == b"previous" and sorted(x.name for x in tmp_path.iterdir()) == [
        "a.fold"
    ]
    assert not [t for t in threading.enumerate() if t.name.startswith("tenfold-fold")]


@pytest.mark.parametrize("fsync", [True, False])
def test_durable_pieces_handed_to_disk_on_the_way(tmp_path, monkeypatch, fsync):
    # Before: a chunk written in pieces had no extent reserved and went to the disk only at
    # the final fsync (the .zt writer and add_chunk hand it over as they write)
    from tenfold.fold import writer as wmod

    reserved, handed = [], []
    monkeypatch.setattr(wmod, "preallocate", lambda fd, off, n: reserved.append((off, n)))
    monkeypatch.setattr(wmod, "start_writeback", lambda fd, off, n: handed.append((off, n)))
    monkeypatch.setattr(wmod, "WRITEBACK_STEP", MiB, raising=False)
    data = np.arange(4 * MiB + 100, dtype=np.uint32).astype(np.uint8)
    pieces = (data[i : i + (1 << 18)] for i in range(0, data.size, 1 << 18))
    with fold.Writer(tmp_path / "a.fold", compress=None, ecc="low", fsync=fsync) as w:
        e = w.add_chunk_pieces("blob", "BLOB", pieces, data.size)
        w.finalize()
    assert (e["offset"], 32 + data.size + e["ecc_len"]) in reserved
    if fsync:
        start = e["offset"] + 32
        assert handed[0][0] == start and len(handed) == 4
        assert all(a + n == b for (a, n), (b, _) in zip(handed, handed[1:], strict=False))
        assert sum(n for _, n in handed) == 4 * MiB
    else:
        assert handed == []
    with fold.Reader(tmp_path / "a.fold", strict=True) as r:
        assert r.read_bytes("blob") == data.tobytes()
