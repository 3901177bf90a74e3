"""tenfold.core.checksums.crc32c: the compiled kernel when the kernels are in use, the ``crc32c``
package otherwise (never the kernel's slow pure-Python twin on a payload)."""

from __future__ import annotations

import numpy as np
import pytest

from tenfold import _kernels
from tenfold.core import checksums

pk = pytest.importorskip("crc32c", reason="the crc32c package is the oracle")


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(checksums, "_CRC", {})


def _data():
    return np.random.default_rng(1).integers(0, 256, (3 << 20) + 5, dtype=np.uint8)


def test_crc32c_uses_the_compiled_kernel(fresh, monkeypatch):
    if _kernels.pure_python():
        pytest.skip("TENFOLD_PUREPYTHON: the kernels are not in use")
    assert checksums.crc32c_implementation().startswith("tenfold kernel (")
    data = _data()
    assert checksums.crc32c(data[1:], 5) == pk.crc32c(data[1:].tobytes(), 5)


def test_crc32c_under_purepython_uses_the_package_not_the_twin(fresh, monkeypatch):
    monkeypatch.setenv("TENFOLD_PUREPYTHON", "1")
    ref = _kernels.load("crc32c", "reference")
    monkeypatch.setattr(ref, "crc32c", lambda *a: pytest.fail("the twin checked a payload"))
    assert checksums.crc32c_implementation() == "crc32c package"
    data = _data()
    assert checksums.crc32c(data, 7) == pk.crc32c(data.tobytes(), 7)
    assert checksums.crc32c(data.reshape(-1)[::2]) == pk.crc32c(data[::2].tobytes())
