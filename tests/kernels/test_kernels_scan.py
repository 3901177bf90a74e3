import numpy as np
import pytest
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


def test_missing_compiled_kernel_warns(monkeypatch):
    monkeypatch.delenv("TENFOLD_PUREPYTHON", raising=False)
    with pytest.warns(RuntimeWarning, match="compiled kernel 'nosuch'"):
        with pytest.raises(ImportError):  # no reference twin either
            _kernels.load("nosuch")


def test_every_family_has_both_twins():
    for family in _kernels.FAMILIES:
        ref = _kernels.load(family, "reference")
        if not _kernels.pure_python():
            comp = _kernels.load(family, "compiled")
            public = {n for n in dir(comp) if not n.startswith("_") and callable(getattr(comp, n))}
            missing = {n for n in public if not hasattr(ref, n)}
            assert not missing, f"{family}: reference twin lacks {missing}"
        assert ref is not None
