"""Issue 15: lying zTensor index fields end in tenfold.errors in every public path (open, read,
load, verify, inspect, the CLI), never in TypeError / ValueError from Python or NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from _zt_build import build, entry, write

import tenfold
import tenfold.ztensor as zt
from tenfold.cli import main
from tenfold.errors import FormatError, LimitError, TenfoldError

X = np.arange(6, dtype=np.float32).tobytes()


def _every_path(path, capsys):
    """Each public entry point refuses the file with a tenfold error; verify reports it."""
    with pytest.raises(TenfoldError) as info:
        zt.Reader(path)
    with pytest.raises(TenfoldError):
        zt.load(path)
    with pytest.raises(TenfoldError):
        tenfold.load(path, copy=True)
    with pytest.raises(TenfoldError):
        zt.inspect(path)
    report = zt.verify(path)  # never raises on a damaged file
    assert not report.ok
    for cmd in ("verify", "inspect"):
        assert main([cmd, str(path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "tenfold: error:" in err
    return info.value


@pytest.mark.parametrize("dtype", [["float32"], {"float32": 1}, [], {}])
def test_index_dtype_that_is_a_cbor_array_or_map_is_a_format_error(tmp_path, capsys, dtype):
    # the fast path looked the dtype up in a dict: TypeError: unhashable type
    p = write(tmp_path, build([entry(dtype=dtype)], {64: X}))
    exc = _every_path(p, capsys)
    assert isinstance(exc, FormatError)
    assert "dtype: wrong type" in str(exc) and "expected str" in str(exc)


@pytest.mark.parametrize(
    "shape", [[0, 2**63], [2**63, 0], [0, 2**64 - 1], [0, 2**62, 4], [3, 0, 2**61]]
)
def test_zero_size_shape_numpy_cannot_make_is_refused_at_open(tmp_path, capsys, shape):
    # size 0 made the fast path accept it; NumPy then raised
    # ValueError: Maximum allowed dimension exceeded in open/load/verify/CLI
    p = write(tmp_path, build([entry(shape=shape, size=0, offset=0)], {}))
    exc = _every_path(p, capsys)
    assert isinstance(exc, FormatError)
    assert "shape" in str(exc) and "tensor 'x'" in str(exc)


def test_zero_size_shape_numpy_accepts_still_reads(tmp_path):
    p = write(tmp_path, build([entry(shape=[0, 2**40], size=0, offset=0)], {}))
    with zt.Reader(p) as r:
        assert r["x"].shape == (0, 2**40)


def test_huge_extent_is_a_limit_error_naming_the_tensor(tmp_path):
    p = write(tmp_path, build([entry(shape=[0, 2**61], size=0, dtype="float64", offset=0)], {}))
    with pytest.raises(LimitError, match=r"tensor 'x'.*too large for any array"):
        zt.Reader(p)


def test_sparse_tensor_without_dimensions_is_refused(tmp_path):
    # a sparse scalar reached scipy.sparse.coo_array(shape=()) -> TypeError
    e = entry(shape=[], size=4, layout="sparsecoo")
    p = write(tmp_path, build([e], {64: X[:4]}))
    with pytest.raises(FormatError, match="needs at least one dimension"):
        zt.Reader(p)


def test_todense_beyond_memory_is_a_limit_error():
    from tenfold.ztensor.sparse import SparseTensor

    t = SparseTensor(
        "coo", (2**20, 2**20, 2**20), np.array([1.0]), coords=np.zeros((3, 1), np.uint64)
    )
    with pytest.raises(LimitError, match="dense size: cannot allocate"):
        t.todense()
