"""scripts/taridx_scaling.py runs (small sizes) and writes its table; its shards are real tars.

No timings are asserted: the script's figures mean something only on a quiet machine."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

import tenfold.taridx as tx
from tenfold.core import parallel

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "taridx_scaling.py"


def _load():
    spec = importlib.util.spec_from_file_location("taridx_scaling", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shards_are_tars_tenfold_and_tarfile_agree_on(tmp_path):
    s = _load()
    img = s.shard_image(7, 6, np.random.default_rng(0))
    with tarfile.open(fileobj=io.BytesIO(img.tobytes())) as tf:
        got = [(m.name, m.offset, m.size, m.isreg()) for m in tf.getmembers()]
    names = ["s000000007.jpg", "s000000007.cls", "s000000008.jpg", "s000000008.cls"]
    assert [g[0] for g in got] == names + ["s000000009.jpg", "s000000009.cls"]
    assert [g[1] for g in got] == [1024 * i for i in range(6)]
    assert all(1 <= g[2] <= 512 and g[3] for g in got)
    assert s.write_split(tmp_path, 10, 3) == (4 + 4 + 4) * 1024 + 3 * 1024  # whole samples
    with tx.Index.open(tx.build(tmp_path, "bench", show_progress=False)) as idx:
        assert idx.n_rows == 12 and idx.n_stems == 6 and idx.ext == ["jpg", "cls"]


def test_thread_counts():
    s = _load()
    assert s.thread_counts([1, 2, 4, 8, 16], 16) == [1, 2, 4, 8, 16]
    assert s.thread_counts([1, 2, 4, 8, 16], 2) == [1, 2]
    assert s.thread_counts([1, 2, 4, 8, 16], 12) == [1, 2, 4, 8, 12]
    assert s.thread_counts([1, 2, 4], 1) == [1]


def test_script_runs_and_writes_json(tmp_path):
    out = tmp_path / "scaling.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    env.pop(parallel.THREADS_ENV, None)
    cmd = [sys.executable, str(SCRIPT), "--members", "4000", "--shards", "3"]
    cmd += ["--threads", "1,2,3", "--rounds", "2", "--tmp", str(tmp_path), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    cores = min(3, len(os.sched_getaffinity(0)))
    want = [t for t in (1, 2, 3) if t <= cores]
    assert [r["threads"] for r in res["table"]] == want
    assert res["members"] == 4000 and res["rounds"] == 2 and res["cores"] >= 1
    assert all(len(res["times"][str(t)]) == 2 for t in want)
    assert res["table"][0]["speedup"] == 1.0
    assert "threads" in proc.stdout and "best s" in proc.stdout
    assert not list(tmp_path.glob("tenfold-taridx-scaling-*"))  # the split was removed
