"""Round trips through ztensor 0.1.4 (the reference), both directions, every dtype."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.ztensor import _spec

ztensor = pytest.importorskip("ztensor", reason="ztensor==0.1.4 (peer) not installed")
pytestmark = pytest.mark.peer

if not hasattr(ztensor, "Writer") or not hasattr(ztensor.Reader, "read_tensor"):
    pytest.skip("installed ztensor is not the 0.1.x API", allow_module_level=True)

DTYPES = list(_spec.DTYPES)  # every dtype zTensor 0.1.0 names


def random_tensor(rng, dtype, shape):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "bfloat16":
        return rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


@pytest.fixture
def tensors():
    rng = np.random.default_rng(2026)
    out = {}
    for i, dt in enumerate(DTYPES):
        shape = [(3, 5), (17,), (2, 3, 4), (1,)][i % 4]
        out[f"t_{dt}"] = random_tensor(rng, dt, shape)
    return out


def test_reference_writes_tenfold_reads(tmp_path, tensors):
    path = tmp_path / "ref.zt"
    with ztensor.Writer(str(path)) as w:
        for name, a in tensors.items():
            w.add_tensor(name, a)
    back = zt.load(path)
    for name, a in tensors.items():
        assert back[name].dtype == a.dtype and back[name].shape == a.shape
        assert back[name].tobytes() == a.tobytes()
    assert zt.verify(path).ok


def test_tenfold_writes_reference_reads(tmp_path, tensors):
    path = tmp_path / "ours.zt"
    zt.save(path, tensors)
    with ztensor.Reader(str(path)) as r:
        assert sorted(r.get_tensor_names()) == sorted(tensors)
        for name, a in tensors.items():
            got = r.read_tensor(name)
            assert tuple(got.shape) == a.shape
            assert np.asarray(got).tobytes() == a.tobytes()


def test_identical_bytes_for_same_tensors(tmp_path, tensors):
    ref, ours = tmp_path / "ref.zt", tmp_path / "ours.zt"
    with ztensor.Writer(str(ref)) as w:
        for name, a in tensors.items():
            w.add_tensor(name, a)
    zt.save(ours, tensors)
    assert ours.read_bytes() == ref.read_bytes()


def test_reference_reads_our_zstd_and_checksums(tmp_path, tensors):
    path = tmp_path / "z.zt"
    with zt.Writer(path) as w:
        for name, a in tensors.items():
            w.add(name, a, encoding="zstd", checksum="crc32c")
    with ztensor.Reader(str(path)) as r:
        for name, a in tensors.items():
            assert np.asarray(r.read_tensor(name)).tobytes() == a.tobytes()
