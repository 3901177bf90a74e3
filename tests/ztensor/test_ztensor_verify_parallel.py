"""zTensor 0.1.0 verification checks tensors side by side on the threads parallel.threads()
allows (large ones one at a time, their checksum itself in parallel blocks), with the same
report, in the same order, as one thread gives."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest

from _meet import Meet
from tenfold import ztensor
from tenfold.core import parallel

zt_verify = importlib.import_module("tenfold.ztensor.verify")  # the package's name is a function


def _save(path):
    rng = np.random.default_rng(7)
    with ztensor.Writer(path) as w:
        for i in range(24):  # 24 x 512 KiB, crc32c and sha256, raw and zstd
            a = rng.standard_normal(1 << 16)
            w.add(f"t{i:02d}", a, checksum="sha256" if i % 3 == 0 else "crc32c",
                  encoding="zstd" if i % 5 == 0 else "raw")  # fmt: skip
        w.add("none", np.arange(10, dtype=np.int16))
    return path


def _corrupt(path, names):
    with ztensor.Reader(path) as r:
        spots = [r.info(n).offset + 7 for n in names]
    raw = bytearray(path.read_bytes())
    for at in spots:
        raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


def _lines(report):
    return [f.format() for f in report.findings]


@pytest.mark.parametrize("corrupt", [[], ["t04", "t09", "t20"]])
def test_verify_in_parallel_gives_the_one_thread_report(tmp_path, monkeypatch, corrupt):
    path = _save(tmp_path / "m.zt")
    _corrupt(path, corrupt)
    monkeypatch.setenv(parallel.THREADS_ENV, "1")
    one = ztensor.verify(path)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.delenv(parallel.THREADS_ENV)
    seen: set[str] = set()
    check = zt_verify.check_dense

    meet = Meet()

    def spy(reader, info):
        seen.add(threading.current_thread().name)
        meet()  # the first two tensors on two threads at once
        return check(reader, info)

    monkeypatch.setattr(zt_verify, "check_dense", spy)
    many = ztensor.verify(path)
    assert _lines(many) == _lines(one)
    assert [e.obj for e in many.errors] == [f"tensor {n!r}" for n in corrupt]
    assert many.unverified == ["none"] and many.ok == (not corrupt)
    here = threading.current_thread().name
    assert len(seen) > 1 and all(n == here or n.startswith("tenfold-shared") for n in seen)
