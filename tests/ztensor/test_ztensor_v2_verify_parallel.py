"""zTensor v2 checks its XXH3-64 digests side by side on the threads parallel.threads() allows
(the digest releases the GIL): ``verify()`` gives the same report, in the same order, as one
thread; ``read_many`` / ``read_all`` (``tenfold.load``) check the raw dense parts' digests in
parallel before reading, and a corrupt one still raises, the first in manifest order."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest

import tenfold.ztensor as zt
from _meet import Meet
from tenfold.core import parallel
from tenfold.errors import IntegrityError

parts_mod = importlib.import_module("tenfold.formats.ztensor._v2parts")


def _ours(name: str) -> bool:
    """A thread the parallel checks run on: this one or a worker of the shared pool."""
    return name == threading.current_thread().name or name.startswith("tenfold-shared")


def _save(path):
    rng = np.random.default_rng(7)
    with zt.V2Writer(path, canonical=False, fsync=False) as w:
        for i in range(24):  # 24 x 512 KiB, raw and zstd-seekable
            a = rng.standard_normal(1 << 16)
            w.add(f"t{i:02d}", a, encoding="zstd" if i % 5 == 0 else None)
        w.add("small", np.arange(10, dtype=np.int16))
    return path


def _corrupt(path, names):
    with zt.open(path) as r:
        spots = [r.info(n).parts["data"].offset + 7 for n in names]
    raw = bytearray(path.read_bytes())
    for at in spots:
        raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


def _lines(report):
    return [f.format() for f in report.findings]


class _Spy:
    """Records the threads that hash (both the one-shot and the streaming digest); the first
    two hashes wait for each other, so they must run on two threads at once."""

    def __init__(self, monkeypatch):
        self.seen: set[str] = set()
        meet = Meet()
        hex_ = parts_mod.digest_hex
        hasher = parts_mod.digest_hasher

        def digest_hex(algo, data):
            self.seen.add(threading.current_thread().name)
            meet()
            return hex_(algo, data)

        def digest_hasher(algo):
            self.seen.add(threading.current_thread().name)
            meet()
            return hasher(algo)

        monkeypatch.setattr(parts_mod, "digest_hex", digest_hex)
        monkeypatch.setattr(parts_mod, "digest_hasher", digest_hasher)


def _three_cpus(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)


@pytest.mark.parametrize("corrupt", [[], ["t04", "t05", "t20"]])
def test_v2_verify_in_parallel_gives_the_one_thread_report(tmp_path, monkeypatch, corrupt):
    path = _save(tmp_path / "m.zt")
    _corrupt(path, corrupt)
    monkeypatch.setenv(parallel.THREADS_ENV, "1")
    with zt.open(path) as r:
        one = r.verify()
    _three_cpus(monkeypatch)
    spy = _Spy(monkeypatch)
    with zt.open(path) as r:
        many = r.verify()
    assert _lines(many) == _lines(one)
    assert [e.obj for e in many.errors] == [f"tensor {n!r}" for n in corrupt]
    assert many.ok == (not corrupt)
    workers = {n for n in spy.seen if _ours(n)}
    assert len(workers) > 1 and spy.seen == workers


def test_v2_read_all_checks_digests_in_parallel(tmp_path, monkeypatch):
    path = _save(tmp_path / "m.zt")
    _three_cpus(monkeypatch)
    spy = _Spy(monkeypatch)
    with zt.open(path) as r:
        got = r.read_all()
        assert all(r.verified(n) for n in r)
    with zt.open(path, verify_checksums=False) as r:
        want = r.read_all(copy=True)
    assert list(got) == list(want)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    assert len({n for n in spy.seen if _ours(n)}) > 1


def test_v2_read_all_raises_the_first_corrupt_in_order(tmp_path, monkeypatch):
    path = _save(tmp_path / "m.zt")
    _corrupt(path, ["t07", "t03"])
    _three_cpus(monkeypatch)
    with zt.open(path) as r:
        with pytest.raises(IntegrityError, match="t03"):
            r.read_all()
        assert r.verified("t02") and not r.verified("t03") and not r.verified("t07")
    with zt.open(path, verify_checksums=False) as r:
        assert r.read_all()["t03"].shape == (1 << 16,)  # unchecked reads still read


def test_v2_torch_load_file_checks_digests_ahead_in_parallel(tmp_path, monkeypatch):
    """``tenfold.torch.load_file`` on the CPU asks the reader to check ahead
    (``check_ahead``): a v2 file's digests are checked side by side on the pool before the
    tensors are made, and a corrupt object still raises in order."""
    torch = pytest.importorskip("torch")
    import tenfold.torch as tt

    path = _save(tmp_path / "m.zt")
    _three_cpus(monkeypatch)
    spy = _Spy(monkeypatch)
    got = tt.load_file(path)
    with zt.open(path, verify_checksums=False) as r:
        want = r.read_all(copy=True)
    assert all(torch.equal(got[k], torch.from_numpy(want[k])) for k in want)
    assert any(n.startswith("tenfold-shared") for n in spy.seen), spy.seen
    _corrupt(path, ["t07", "t03"])
    with pytest.raises(IntegrityError, match="t03"):
        tt.load_file(path)


def test_side_by_side_errors_are_raised_in_item_order_not_size_order(monkeypatch):
    """Items run largest first; an error they raise (a missing shard's OSError: the checks
    report their own errors as findings) is the first in the items' order, as one by one."""
    v2verify = importlib.import_module("tenfold.formats.ztensor._v2verify")
    monkeypatch.setattr(v2verify, "_PARALLEL_MIN", 0)
    _three_cpus(monkeypatch)

    def fn(x):
        if x in ("small", "big"):
            raise OSError(x)
        return x

    with pytest.raises(OSError, match="small"):
        v2verify._in_parallel(fn, ["small", "big", "mid"], [1, 100, 50])
    assert v2verify._in_parallel(str.upper, ["a", "b"], [1, 2]) == ["A", "B"]
