"""The resources the core owns (issue 11 item 1): descriptors, thread pools across fork,
kernel modules resolved once."""

from __future__ import annotations

import gc
import os
import warnings

import numpy as np
import pytest

from _child import wait_child
from tenfold import _kernels
from tenfold.core import parallel
from tenfold.core.mapped import MappedFile


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_dropped_mapped_file_closes_its_descriptor_quietly(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"\1" * 100)
    gc.collect()
    before = _fds()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a bare MappedFile is a building block: no warning
        files = [MappedFile(p) for _ in range(50)]
        views = [m.u8(0, 4) for m in files[:5]]
        assert _fds() >= before + 50
        del files
        gc.collect()
    # the 5 maps that views still use hold no descriptor (the fmap kernel's map), or a dup
    # each (Python's mmap, which the pure-Python twin uses)
    held = 5 if _kernels.load("fmap").__name__.endswith("._ref_fmap") else 0
    assert _fds() == before + held
    assert all(v.tolist() == [1, 1, 1, 1] for v in views)  # the views keep their maps
    del views
    gc.collect()
    assert _fds() == before


def _wait(pid: int, timeout: float = 30.0) -> int:
    status = wait_child(pid, timeout, poll=0.02)
    if status is None:
        pytest.fail("forked child hung")
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_pools_work_in_a_forked_child():
    assert parallel.submit(sum, [1, 2]).result() == 3  # the parent's shared pool has a worker
    own = parallel.Pool(1, "test")
    assert own.submit(abs, -4).result() == 4
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        ok = (
            parallel.submit(sum, [3, 4]).result(timeout=10) == 7
            and own.submit(abs, -5).result(timeout=10) == 5
        )
        own.close()
        os._exit(0 if ok else 1)
    assert _wait(pid) == 0
    own.close()
    assert parallel.shared() is parallel.shared()


def test_scoped_pool_is_shut_down_at_exit():
    with parallel.scoped(2, "t") as pool:
        assert sorted(pool.map(abs, [-1, -2])) == [1, 2]
    with pytest.raises(RuntimeError):
        pool.submit(abs, 1)


def test_kernels_are_resolved_once():
    assert _kernels.load("scan") is _kernels.load("scan")
    assert _kernels.load("scan", "reference") is _kernels.load("scan", "reference")
    a = np.zeros(9, np.uint8)
    a[7] = 1
    assert _kernels.load("scan").first_nonzero(a) == 7


def test_wtxt_keys_may_be_any_iterable(tmp_path):
    from tenfold import wtxt
    from tenfold.errors import IntegrityError

    p = tmp_path / "k.wtxt"
    wtxt.save(p, {"a": np.arange(3, dtype=np.int32)}, hmac_key=b"right")
    with pytest.raises(IntegrityError, match="hmac"):
        wtxt.open(p, hmac_keys=iter([b"wrong"]))  # a one-shot iterator is still checked
    with wtxt.open(p, hmac_keys=iter([b"right"])) as f:
        assert f["a"].tolist() == [0, 1, 2] and f.verify().ok
