"""zTensor 0.1.0 ``read_all(copy=True)``: tensors copied and checked in parallel, over tensors
and over 16 MiB blocks of large ones (CRC-32C computed while copying, the block CRCs joined),
with the same results and errors as reading them one by one."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from _meet import Meet
from tenfold import ztensor
from tenfold.core import checksums, parallel
from tenfold.errors import IntegrityError
from tenfold.ztensor import reader as zt_reader
from tenfold.ztensor.reader import Reader

BIG = (zt_reader._FILL_BLOCK * 2 + 12345) // 4  # float32 elements: three blocks


def _model():
    rng = np.random.default_rng(28)
    return {
        "big": rng.standard_normal(BIG).astype(np.float32),
        "sha": rng.standard_normal((300, 7)).astype(np.float64),
        "zstd": np.arange(1000, dtype=np.int32),
        "empty": np.zeros((0, 3), np.float16),
        "small": np.arange(5, dtype=np.uint8),
    }


def _save(path, model):
    with ztensor.Writer(path) as w:
        w.add("big", model["big"], checksum="crc32c")
        w.add("sha", model["sha"], checksum="sha256")
        w.add("zstd", model["zstd"], encoding="zstd", checksum="crc32c")
        w.add("empty", model["empty"], checksum="crc32c")
        w.add("small", model["small"], checksum="crc32c")


def _saved_with_a_flipped_bit(tmp_path, where):
    """The model saved, then one bit flipped in tensor ``where`` (``big-last-block``: near its
    end; otherwise its second byte): (path, model, tensor name)."""
    path = tmp_path / "m.zt"
    model = _model()
    _save(path, model)
    name = where.split("-")[0]
    with Reader(path) as r:
        info = r.info(name)
        at = info.offset + (info.size - 3 if where == "big-last-block" else 1)
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x10
    path.write_bytes(bytes(raw))
    return path, model, name


@pytest.fixture
def three_threads(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)


def test_read_all_copy_checks_on_several_threads_in_one_pass(tmp_path, monkeypatch, three_threads):
    path = tmp_path / "m.zt"
    model = _model()
    _save(path, model)
    seen: list[str] = []
    fused = checksums.copy_crc32c

    meet = Meet()

    def spy(src, dst, value=0):
        seen.append(threading.current_thread().name)
        meet()  # the first two blocks on two threads at once
        return fused(src, dst, value)

    monkeypatch.setattr(checksums, "copy_crc32c", spy)
    with Reader(path) as r:
        got = r.read_all(copy=True)
        assert {"big", "sha", "small"} <= r._verified
    for name, a in model.items():
        assert got[name].dtype == a.dtype and np.array_equal(got[name], a), name
        assert got[name].flags.writeable
    assert len(seen) == 4  # big's three blocks and small, copied and checked together
    # this thread and the shared pool's workers
    here = threading.current_thread().name
    assert all(n == here or n.startswith("tenfold-shared") for n in seen)
    assert len(set(seen)) > 1


@pytest.mark.parametrize("where", ["big-first-block", "big-last-block", "sha", "small"])
@pytest.mark.parametrize("threads", ["1", "3"])
def test_a_corrupt_tensor_raises_what_a_single_read_raises(tmp_path, monkeypatch, where, threads):
    monkeypatch.setenv(parallel.THREADS_ENV, threads)
    path, model, name = _saved_with_a_flipped_bit(tmp_path, where)
    with Reader(path) as r, pytest.raises(IntegrityError) as one:
        r.read(name, copy=True)
    with Reader(path) as r:
        with pytest.raises(IntegrityError) as every:
            r.read_all(copy=True)
        assert name not in r._verified
    assert str(every.value) == str(one.value)
    assert f"tensor {name!r}" in str(every.value)
    # unverified, the bytes come through as they are
    with Reader(path, verify_checksums=False) as r:
        got = r.read_all(copy=True)
    assert got[name].tobytes() != np.ascontiguousarray(model[name]).tobytes()


def test_read_all_views_check_every_checksum_on_several_threads(
    tmp_path, monkeypatch, three_threads
):
    """``read_all()`` / ``tenfold.load`` without a copy (views of the map, the default): the
    checksums are computed over the map on every core first (CRC-32C per 16 MiB block, the
    block CRCs joined), then each view is given without being checked again."""
    path = tmp_path / "m.zt"
    model = _model()
    _save(path, model)
    seen: list[tuple[str, int]] = []
    plain = checksums.crc32c

    meet = Meet()

    def spy(data, value=0, *, threads=None):
        seen.append((threading.current_thread().name, memoryview(data).nbytes))
        meet()  # the first two blocks on two threads at once
        return plain(data, value, threads=threads)

    monkeypatch.setattr(checksums, "crc32c", spy)
    with Reader(path) as r:
        got = r.read_all(copy=False)
        assert {"big", "sha", "small"} <= r._verified
    for name, a in model.items():
        assert np.array_equal(got[name], a), name
    names = {n for n, _ in seen}
    # this thread and the shared pool's workers (this one may be busy with the SHA-256)
    here = threading.current_thread().name
    assert all(n == here or n.startswith("tenfold-shared") for n in names), seen
    assert any(n.startswith("tenfold-shared") for n in names), seen
    # big's three blocks and small, each hashed once; none again when the views are made
    assert sorted(size for _, size in seen) == sorted(
        [
            zt_reader._FILL_BLOCK,
            zt_reader._FILL_BLOCK,
            model["big"].nbytes - 2 * zt_reader._FILL_BLOCK,
            5,
        ]
    )


@pytest.mark.parametrize("where", ["big-last-block", "sha", "small"])
def test_read_all_views_a_corrupt_tensor_raises_in_file_order(
    tmp_path, monkeypatch, where, three_threads
):
    path, model, name = _saved_with_a_flipped_bit(tmp_path, where)
    with Reader(path) as r, pytest.raises(IntegrityError) as one:
        r.read(name)
    with pytest.raises(IntegrityError) as every:
        ztensor.load(path)
    assert str(every.value) == str(one.value)


def test_torch_load_file_checks_ahead_on_several_threads(tmp_path, monkeypatch, three_threads):
    """``tenfold.torch.load_file`` of a checksummed .zt on the CPU: every checksum computed on
    the pool before the tensors are made (not one by one on the calling thread); a corrupt
    tensor still raises the single read's error."""
    torch = pytest.importorskip("torch")
    import tenfold.torch as tt

    path = tmp_path / "m.zt"
    model = _model()
    _save(path, model)
    seen: list[str] = []
    plain = checksums.crc32c

    def spy(data, value=0, *, threads=None):
        seen.append(threading.current_thread().name)
        return plain(data, value, threads=threads)

    monkeypatch.setattr(checksums, "crc32c", spy)
    got = tt.load_file(path)
    assert torch.equal(got["big"], torch.from_numpy(model["big"]))
    assert any(n.startswith("tenfold-shared") for n in seen), seen
    raw = bytearray(path.read_bytes())
    with Reader(path) as r:
        raw[r.info("big").offset + 7] ^= 1
    path.write_bytes(bytes(raw))
    with Reader(path) as r, pytest.raises(IntegrityError) as one:
        r.read("big")
    with pytest.raises(IntegrityError) as every:
        tt.load_file(path)
    assert str(every.value) == str(one.value)
