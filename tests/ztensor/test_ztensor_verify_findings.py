"""zTensor verify reports a file it cannot open from the exception's attributes (obj, offset),
as the other formats' verifiers do, not as an anonymous "file" row without an offset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.errors import TenfoldError


def _damaged(tmp_path: Path, generation: int, how: str) -> Path:
    p = tmp_path / "a.zt"
    zt.save(p, {"w": np.arange(10, dtype=np.float32)}, generation=generation)
    data = bytearray(p.read_bytes())
    if how == "truncate":
        data = data[:-4]
    elif how == "head":
        data[0] ^= 0x01
    else:  # the last magic byte but one (the v2 footer magic)
        data[-5] ^= 0xFF
    p.write_bytes(bytes(data))
    return p


@pytest.mark.parametrize(
    "generation, how", [(1, "truncate"), (1, "head"), (2, "tail"), (2, "truncate")]
)
def test_unopenable_file_reported_from_exception_attributes(tmp_path, generation, how):
    p = _damaged(tmp_path, generation, how)
    with pytest.raises(TenfoldError) as info:
        zt.open(p)
    exc = info.value
    assert exc.obj and exc.offset is not None
    rep = zt.verify(p)
    assert not rep.ok
    (err,) = rep.errors
    assert (err.obj, err.offset, err.message) == (exc.obj, exc.offset, str(exc))


def test_verify_of_0_1_0_says_the_index_has_no_checksum(tmp_path):
    # an OK for a 0.1.0 file covers the tensors' checksums only: the CBOR index has none, and
    # the report says so (new-user trial: "OK" read as "the whole file is checked")
    p = tmp_path / "a.zt"
    zt.save(p, {"w": np.arange(10, dtype=np.float32)})
    report = zt.verify(p)
    assert report.ok
    assert "no checksum" in report.summary["index"]
    v2 = tmp_path / "b.zt"
    zt.save(v2, {"w": np.arange(10, dtype=np.float32)}, generation=2)
    assert "index" not in zt.verify(v2).summary  # v2 hashes its manifest


def test_convert_of_a_sparse_tensor_too_big_for_the_memory_cap_is_a_limit_error(tmp_path):
    # fuzz run of 2026-11-23 (seed 20261126): a COO tensor of shape [2**31] float32 (8 GiB
    # dense) is within the default decode budget, but a process whose address space is capped
    # cannot make it dense: scipy's toarray raised a bare MemoryError out of convert and the
    # CLI. Run in a child under RLIMIT_AS, as the fuzzer does.
    import subprocess
    import sys

    p = (
        Path(__file__).resolve().parents[1]
        / "vectors"
        / "fuzz"
        / "fuzz_zt_coo_shape_2pow31_dense_8gib.zt"
    )
    code = (
        "import resource, sys\n"
        "import tenfold.convert as c\n"
        "from tenfold.errors import LimitError\n"
        "import scipy.sparse  # noqa: F401 (loaded before the cap)\n"
        "with open('/proc/self/status') as f:\n"
        "    vm = next(int(l.split()[1]) for l in f if l.startswith('VmSize:')) * 1024\n"
        "resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))\n"
        "try:\n"
        f"    c.read_any({str(p)!r})\n"
        "except LimitError as e:\n"
        "    assert 'made dense' in str(e) and 'allocation' in str(e), e\n"
        "    print('refused')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    if "No module named 'scipy'" in proc.stderr:
        pytest.skip("scipy (the sparse extra) is not installed")
    assert proc.returncode == 0 and proc.stdout.strip() == "refused", proc.stderr[-2000:]
