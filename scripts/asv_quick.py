"""Run every asv benchmark once against the installed tenfold (``asv run --python=same``).

Used by CI so the suites cannot rot; real measurements use ``asv run`` / ``asv continuous``.
Exits non-zero when any benchmark fails. Nothing is left behind: asv's machine file (normally
``~/.asv-machine.json``) and its work folders go to a temporary directory, removed at the end.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parents[1] / "asv_bench"


def _config(tmp: pathlib.Path) -> pathlib.Path:
    """A copy of asv.conf.json whose paths are absolute and whose work folders are in ``tmp``."""
    conf = json.loads((HERE / "asv.conf.json").read_text())
    conf["repo"] = str(HERE.parent)
    conf["benchmark_dir"] = str(HERE / conf["benchmark_dir"])
    for key in ("env_dir", "results_dir", "html_dir"):
        conf[key] = str(tmp / key)
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf))
    return path


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tenfold-asv-") as d:
        tmp = pathlib.Path(d)
        conf = _config(tmp)
        env = dict(os.environ, HOME=str(tmp))  # asv keeps its machine file in the home folder
        asv = [sys.executable, "-m", "asv"]
        subprocess.run(
            [*asv, "machine", "--yes", "--config", str(conf)],
            cwd=tmp,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        proc = subprocess.run(
            [*asv, "run", "--config", str(conf), "--python=same", "--quick", "--dry-run"]
            + ["--show-stderr"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
    out = proc.stdout + proc.stderr
    print(out[-6000:])
    failed = proc.returncode != 0 or "failed" in out.lower() or "Traceback" in out
    if failed:
        print("asv quick run: a benchmark failed", file=sys.stderr)
        return 1
    print("asv quick run: all benchmarks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
