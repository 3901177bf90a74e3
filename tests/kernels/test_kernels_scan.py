import numpy as np
import pytest
from _kernels_isolated import differential
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels


@pytest.mark.parametrize(
    "hexdata, expected",
    [
        ("", -1),
        ("00", -1),
        ("01", 0),
        ("0000000000000000", -1),
        ("000000000000000000000002", 11),
        ("00000000000000ff00", 7),
    ],
)
def test_first_nonzero_known(kernels, hexdata, expected):
    assert kernels("scan").first_nonzero(bytes.fromhex(hexdata)) == expected


@pytest.mark.parametrize(
    "hexdata, acc, expected",
    [
        ("", 0, 0),
        ("01", 0, 1),
        ("0102030405060708", 0, 0x0807060504030201),
        ("01020304050607080a", 0, 0x0807060504030201 ^ 0x0A),
        ("ff", 0xFF, 0),
    ],
)
def test_xor_u64_le_known(kernels, hexdata, acc, expected):
    assert kernels("scan").xor_u64_le(bytes.fromhex(hexdata), acc) == expected


def test_kernels_accept_readonly_buffers(kernels):
    a = np.zeros(33, np.uint8)
    a[20] = 1
    a.flags.writeable = False
    assert kernels("scan").first_nonzero(a) == 20
    assert kernels("scan").first_nonzero(memoryview(bytes(a))) == 20


@given(st.binary(max_size=300), st.integers(0, 2**64 - 1))
def test_scan_differential(data, acc):
    ref = _kernels.load("scan", "reference")
    if _kernels.pure_python():
        pytest.skip("compiled kernels disabled by TENFOLD_PUREPYTHON")
    comp = _kernels.load("scan", "compiled")
    assert comp.first_nonzero(data) == ref.first_nonzero(data)
    assert comp.xor_u64_le(data, acc) == ref.xor_u64_le(data, acc)


@pytest.mark.parametrize("acc", [-1, 2**64, -(2**63)])
def test_xor_acc_outside_uint64_refused_alike(acc):
    """The accumulator is a C uint64: both implementations refuse a value outside it."""
    assert differential("scan", lambda k: k.xor_u64_le(b"abc", acc)) == "OverflowError"


@given(st.binary(max_size=40), st.integers(0, 2**64 - 1), st.integers(0, 40), st.integers(0, 40))
def test_scan_views_differential(data, acc, a, b):
    """Slices of a larger buffer (any start, any length): the kernels stay inside the view."""
    big = np.frombuffer(data + b"\x01" * 16, np.uint8)
    view = big[min(a, len(data)) : min(max(a, b), len(data))]
    assert differential("scan", lambda k: (k.first_nonzero(view), k.xor_u64_le(view, acc))) == (
        _kernels.load("scan", "reference").first_nonzero(view),
        _kernels.load("scan", "reference").xor_u64_le(view, acc),
    )
