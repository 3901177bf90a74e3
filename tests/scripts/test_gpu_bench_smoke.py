"""scripts/gpu_bench.py --smoke: the GPU benchmark's every case runs (tiny model, on the CPU,
through the staging ring), so the script is known to work before it is taken to a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tenfold

LIB = str(Path(tenfold.__file__).resolve().parents[1])  # the tenfold under test
ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("torch", reason="PyTorch is not installed (extra: tenfold[torch])")
pytest.importorskip("safetensors", reason="safetensors is not installed (extra: tenfold[peers])")


def test_gpu_bench_smoke_runs_every_case(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([LIB, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_bench.py"), "--smoke", "--out", str(out),
         "--dir", str(tmp_path / "files")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = {r["case"]: r for r in report["rows"]}
    assert len(rows) == 25
    assert not [r for r in rows.values() if "error" in r], rows
    kernels = report["kernels"]  # the kernel rates, each with a speed
    assert kernels and all(r["gb_per_s"] > 0 for r in kernels), kernels
    assert {"np.copyto", "crc32c package"} <= {r["case"] for r in kernels}
    assert all(r["best_s"] > 0 for r in rows.values())
    # every tenfold load gave safetensors' bits
    checked = [r for c, r in rows.items() if c.startswith(("tenfold", "diag: tenfold"))]
    assert checked and all(r["same_bits_as_safetensors"] for r in checked)
    assert report["facts"]["tensors"] == 27 and report["facts"]["staging_threads"] >= 1
    assert set(report["verdict"]) == {
        "tenfold .safetensors", "tenfold .zt crc32c verified", "tenfold .zt v2 xxh3 verified"
    }  # fmt: skip


def test_gpu_bench_check_passes_on_the_cpu(tmp_path):
    # --check is what scripts/gpu_run.sh runs first on a GPU: every path of the device load
    # against the source bits, corrupt tensors included (here through the ring on the CPU)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([LIB, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_bench.py"), "--check", "--device", "cpu",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "check: 0 failure(s)" in proc.stdout
    assert "FAIL" not in proc.stdout
