"""Issue 15: OINF dims that NumPy cannot make (a zero dim beside a huge one) are refused with a
tenfold error at open, by verify and by the CLI, never ValueError from NumPy."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import tenfold
from tenfold import oinf
from tenfold.cli import main
from tenfold.core import Limits
from tenfold.errors import FormatError, LimitError, TenfoldError

_HDR = struct.Struct("<5sIIIIIIQQQQQ")


def _tensor_dims_at(data: bytes) -> dict[str, int]:
    """Byte position of dims[0] of each tensor entry."""
    h = _HDR.unpack_from(data, 0)
    pos, out = h[9], {}
    for _ in range(h[5]):
        (ln,) = struct.unpack_from("<I", data, pos)
        q = pos + ((ln + 11) & ~7)
        _tag, nd, _fl = struct.unpack_from("<III", data, q)
        out[data[pos + 4 : pos + 4 + ln].decode()] = q + 12
        pos = q + 12 + 8 * nd + (32 if h[1] == 2 else 16)
    return out


@pytest.fixture
def empty_tensor(tmp_path):
    p = tmp_path / "e.oinf"
    oinf.write(p, tensors={"a": np.ones(2, np.float32), "z": np.zeros((0, 4), np.float32)})
    return p


@pytest.mark.parametrize("dims", [(0, 2**63), (2**63, 0), (0, 2**64 - 1), (0, 2**62)])
def test_zero_dim_beside_a_huge_dim_is_refused(empty_tensor, capsys, dims):
    data = bytearray(empty_tensor.read_bytes())
    at = _tensor_dims_at(bytes(data))["z"]
    struct.pack_into("<QQ", data, at, *dims)
    empty_tensor.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"tensor 'z'.*shape.*\[tensor-shape\]") as info:
        oinf.open(empty_tensor)
    assert isinstance(info.value, (FormatError, LimitError))
    with pytest.raises(TenfoldError):
        tenfold.load(empty_tensor)
    report = oinf.verify(empty_tensor)
    assert not report.ok and "tensor-shape" in report.format(verbose=True)
    assert main(["verify", str(empty_tensor)]) == 1
    assert main(["inspect", str(empty_tensor)]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_zero_size_dims_numpy_accepts_still_read(empty_tensor):
    data = bytearray(empty_tensor.read_bytes())
    struct.pack_into("<QQ", data, _tensor_dims_at(bytes(data))["z"], 0, 2**40)
    empty_tensor.write_bytes(bytes(data))
    with oinf.open(empty_tensor) as r:
        assert r["z"].shape == (0, 2**40)


def test_ndarray_metadata_with_zero_and_huge_dim_is_refused(tmp_path):
    p = tmp_path / "m.oinf"
    oinf.write(
        p,
        metadata={"m": oinf.Tensor(np.zeros((0, 3), np.int32), "i32")},
        tensors={"a": np.ones(2, np.float32)},
    )
    data = bytearray(p.read_bytes())
    # the NDARRAY payload is the first thing in the data section: u32 etag, u32 ndim, dims
    off_data = _HDR.unpack_from(data, 0)[10]
    assert struct.unpack_from("<II", data, off_data)[1] == 2
    struct.pack_into("<QQ", data, off_data + 8, 0, 2**63)
    p.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"metadata 'm'.*shape"):
        oinf.open(p)
    assert not oinf.verify(p).ok


def test_packed_tensors_share_one_decode_budget(tmp_path):
    p = tmp_path / "q.oinf"
    oinf.write(
        p,
        tensors={
            "a": oinf.Tensor(np.zeros(4000, np.int8), "i4"),
            "b": oinf.Tensor(np.zeros(4000, np.int8), "i4"),
        },
    )
    with oinf.open(p, limits=Limits(decode_budget=6000)) as r:
        assert r["a"].shape == (4000,) and r["b"].shape == (4000,)  # each call: its own budget
        with pytest.raises(LimitError, match=r"tensor 'b'.*decode budget"):
            r.load()  # one call: 8000 unpacked bytes > 6000
