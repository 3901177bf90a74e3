"""Regression vectors from ``scripts/fuzz.py`` (run of 2026-11-23, seed 20261123) on npz.

Each test is named after the promise the finding broke; the vectors are the fuzzer's files.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tenfold
from tenfold.cli import main
from tenfold.errors import TenfoldError

FUZZ = Path(__file__).resolve().parents[1] / "vectors" / "fuzz"


def test_only_tenfold_errors_for_an_unknown_zip_version(capsys):
    # the central directory claims "version needed 18.3": zipfile raised NotImplementedError
    p = FUZZ / "fuzz_npz_zip_version_18_3.npz"
    with pytest.raises(TenfoldError, match="zip file version"):
        tenfold.load(p)
    for cmd in (["inspect", str(p)], ["verify", str(p)]):
        assert main(cmd) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err


def test_no_hang_on_a_zero_itemsize_array_of_2pow34_elements(tmp_path):
    # b.npy declares descr '|V0' and shape (131072, 131072): 0 bytes but 2**34 elements; the
    # convert pipeline copied it element by element (over a minute). Run in a child with a
    # deadline so that a regression fails instead of hanging the suite.
    p = FUZZ / "fuzz_npz_void0_shape_2pow17_squared.npz"
    code = (
        "import sys, tenfold.convert as c\n"
        "from tenfold.errors import TenfoldError\n"
        f"t = c.read_any({str(p)!r})\n"
        "assert t['b'].dtype.itemsize == 0 and t['b'].shape == (131072, 131072), t['b']\n"
        "for ext in ('.zt', '.safetensors', '.npz', '.oinf', '.fold', '.wtxt'):\n"
        "    try:\n"
        f"        c.write_any({str(tmp_path)!r} + '/out' + ext, t)\n"
        "    except TenfoldError as e:\n"
        "        assert 'V0' in str(e), e\n"
        "    else:\n"
        "        raise SystemExit('a |V0 tensor was written to ' + ext)\n"
        "print('done')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-2000:]


def test_only_tenfold_errors_for_a_u0_array_numpy_cannot_shape(capsys):
    # f.npy declares descr '<U0' and shape (2**63 - 1, 0): no bytes, but NumPy makes U0 arrays
    # U1 (4 bytes an element) and refuses the shape, so reshape raised a bare ValueError in
    # read/verify (fuzz run of 2026-11-23, seed 20261123, case 1247)
    p = FUZZ / "fuzz_npz_u0_shape_2pow63m1_by_0.npz"
    with tenfold.open(p) as r:
        with pytest.raises(TenfoldError, match=r"'f.npy'.*shape.*itemsize 4"):
            r["f"]
        report = r.verify()
    assert not report.ok
    assert main(["verify", str(p)]) == 1
    assert "Traceback" not in capsys.readouterr().err
