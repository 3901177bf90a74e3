"""After a plain ``import tenfold``, the public subpackages are attributes (imported on first
use, as ``numpy.linalg`` is after ``import numpy``), and the import itself stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tenfold


def _fresh(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout


def test_subpackages_are_attributes_in_a_fresh_interpreter(tmp_path):
    path = tmp_path / "a.oinf"
    code = (
        "import sys, numpy as np, tenfold\n"
        f"tenfold.save({str(path)!r}, {{'x': np.arange(3, dtype=np.float32)}})\n"
        f"print(tenfold.oinf.verify({str(path)!r}).ok)\n"
        "print(tenfold.fold.Reader.__name__, tenfold.wtxt.__name__, tenfold.taridx.__name__)\n"
        "print(tenfold.ztensor.__name__, tenfold.sharded.__name__, tenfold.convert.__name__)\n"
    )
    assert _fresh(code).split() == [
        "True",
        "Reader",
        "tenfold.formats.wtxt",
        "tenfold.formats.taridx",
        "tenfold.formats.ztensor",
        "tenfold.sharded",
        "tenfold.convert",
    ]


def test_import_tenfold_imports_no_subpackage_until_used():
    code = (
        "import sys, tenfold\n"
        "print(sorted(m for m in ('tenfold.formats.oinf', 'tenfold.torch', 'torch', 'numpy')"
        " if m in sys.modules))\n"
        "tenfold.oinf\n"
        "print('tenfold.formats.oinf' in sys.modules)\n"
    )
    assert _fresh(code).split("\n")[:2] == ["[]", "True"]


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        tenfold.nosuch  # noqa: B018
    assert not hasattr(tenfold, "nosuch")
    assert {"oinf", "torch", "load", "save"} <= set(dir(tenfold))
