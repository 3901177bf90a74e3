"""scripts/fuzz.py, run briefly with a fixed seed: every operation of every format on mutated
files ends in ok or a tenfold error (no other exception, MemoryError, signal or hang).

Run it for minutes on demand: ``python scripts/fuzz.py --minutes 10``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "scripts" / "fuzz.py"

#: every plain format (hdf5 where h5py is installed: its cases go through the HDF5 check)
_ALL = "ztensor,oinf,fold,wtxt,taridx,npz,safetensors,onnx,gguf,torchpickle"
_ALL += ",hdf5" if importlib.util.find_spec("h5py") is not None else ""
FORMATS = os.environ.get("TENFOLD_FUZZ_FORMATS", _ALL)


@pytest.mark.fuzz
def test_fuzz_briefly_finds_nothing(tmp_path):
    # A fixed number of cases (not a time budget) so that the outcome does not depend on the
    # machine's load: the same seed and count give the same cases everywhere, with or without
    # torch (whose seed files only change the torch formats' own cases). The seconds are only a
    # ceiling.
    cases = int(os.environ.get("TENFOLD_FUZZ_CASES", str(8 * len(FORMATS.split(",")))))
    seconds = float(os.environ.get("TENFOLD_FUZZ_SECONDS", "600"))
    out = tmp_path / "findings"
    proc = subprocess.run(
        [
            sys.executable,
            str(FUZZ),
            "--seconds",
            str(seconds),
            "--cases",
            str(cases),
            "--seed",
            "1",
            "--format",
            FORMATS,
            "--round-robin",
            "--out",
            str(out),
            "--timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 240,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["total_cases"] == cases, proc.stdout + proc.stderr
    assert proc.returncode == 0 and summary["findings"] == [], proc.stdout + proc.stderr[-3000:]
    for fmt in FORMATS.split(","):
        outcomes = summary["outcomes"][fmt]
        assert outcomes.get("ok", 0) and outcomes.get("tenfold", 0), (fmt, outcomes)
    # every tenfold error the children caught names its format and object (issue #22)
    assert summary["unnamed"] == [], summary["unnamed"]


@pytest.mark.fuzz
@pytest.mark.parametrize(
    ("plant", "outcome", "exc"),
    [
        ("raise KeyError('planted')", "other", "KeyError"),
        ("raise MemoryError", "memory", "MemoryError"),
        ("os.kill(os.getpid(), signal.SIGSEGV)", "signal", "SIGSEGV"),
        ("time.sleep(60)", "timeout", "> 3.0s"),
    ],
)
def test_fuzz_reports_each_kind_of_finding_with_a_reproducer(tmp_path, plant, outcome, exc):
    # the harness itself: a reader that fails in each way must be reported, not counted as ok
    out = tmp_path / "findings"
    code = (
        "import os, runpy, signal, sys, time, tenfold.interop.npz as n\n"
        f"def boom(*a, **k):\n    {plant}\n"
        "n.parse_npz = boom\n"
        f"sys.argv = ['fuzz.py', '--cases', '1', '--seed', '1', '--format', 'npz', "
        f"'--out', {str(out)!r}, '--subprocess-rate', '0', '--timeout', '3']\n"
        f"runpy.run_path({str(FUZZ)!r}, run_name='__main__')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TENFOLD_FUZZ_TORCH": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    found = summary["findings"]
    assert found and found[0]["outcome"] == outcome and found[0]["exc"] == exc, found
    d = out / found[0]["id"]
    assert (d / "case.npz").exists() and json.loads((d / "finding.json").read_text())["replay"]


@pytest.mark.fuzz
def test_fuzz_lists_tenfold_errors_without_their_names(tmp_path):
    # the harness itself: a refusal whose error lacks fmt/obj is not a finding, but the summary
    # lists it with where tenfold raised it (the check above relies on that list)
    out = tmp_path / "findings"
    code = (
        "import runpy, sys, tenfold.interop.npz as n\n"
        "from tenfold.errors import FormatError\n"
        "def boom(*a, **k):\n    raise FormatError('npz: planted without its names')\n"
        "n.parse_npz = boom\n"
        f"sys.argv = ['fuzz.py', '--cases', '1', '--seed', '1', '--format', 'npz', "
        f"'--out', {str(out)!r}, '--subprocess-rate', '0', '--timeout', '30']\n"
        f"runpy.run_path({str(FUZZ)!r}, run_name='__main__')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TENFOLD_FUZZ_TORCH": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    unnamed = json.loads((out / "summary.json").read_text())["unnamed"]
    assert unnamed and {u["exc"] for u in unnamed} == {"FormatError"}, unnamed
    # raised in the test's stand-in: the site is the last frame of tenfold's, which called it
    assert all(
        u["fmt"] is None
        and u["site"].startswith("formats/npz/writer.py:")
        and "planted" in u["msg"]
        for u in unnamed
    ), unnamed
    assert "tenfold errors without fmt/obj" in proc.stdout
