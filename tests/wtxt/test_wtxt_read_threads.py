"""Reading and verifying a WTXT file uses the CPUs the process may use by default (issue 28:
thread counts from the cores, never a constant): the array digests are computed on a second
thread while the chunks are checked and decoded. Before, every read path defaulted to one
thread."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest

from tenfold import wtxt
from tenfold.core import parallel

parse_mod = importlib.import_module("tenfold.formats.wtxt.parse")
codec = importlib.import_module("tenfold.formats.wtxt.codec")


@pytest.fixture
def sample(tmp_path):
    rng = np.random.default_rng(5)
    arrays = {f"a{i}": rng.standard_normal((64, 300)).astype(np.float32) for i in range(4)}
    path = tmp_path / "m.wtxt"
    wtxt.save(path, arrays, fsync=False)
    return path, arrays


def _spy(monkeypatch):
    """Records how many workers each parse was given and which threads fed array digests."""
    got: dict[str, object] = {"workers": [], "threads": set()}
    real = codec.ArrayDigests

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, workers):
            got["workers"].append(workers)
            super().__init__(workers)

        def submit(self, fn, *args):
            def run(*a):
                got["threads"].add(threading.current_thread().name)
                return fn(*a)

            super().submit(run, *args)

    monkeypatch.setattr(parse_mod, "ArrayDigests", Spy)
    return got


@pytest.mark.parametrize("how", ["open", "verify", "load"])
def test_reads_use_a_second_thread_by_default(sample, monkeypatch, how):
    path, arrays = sample
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)
    got = _spy(monkeypatch)
    if how == "open":
        with wtxt.open(path) as f:
            assert all(np.array_equal(f[k], v) for k, v in arrays.items())
    elif how == "verify":
        assert wtxt.verify(path).ok
    else:
        back = wtxt.load(path)
        assert all(np.array_equal(back[k], v) for k, v in arrays.items())
    assert got["workers"] and all(w == 2 for w in got["workers"])
    assert got["threads"] and threading.current_thread().name not in got["threads"]


def test_one_cpu_or_the_cap_reads_on_this_thread(sample, monkeypatch):
    path, arrays = sample
    monkeypatch.setenv(parallel.THREADS_ENV, "1")
    got = _spy(monkeypatch)
    with wtxt.open(path) as f:
        assert all(np.array_equal(f[k], v) for k, v in arrays.items())
    assert got["workers"] == [1]
    assert got["threads"] == {threading.current_thread().name}
