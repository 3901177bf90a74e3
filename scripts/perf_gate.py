"""Performance regression gate: two builds of tenfold, their benchmarks run interleaved.

    python scripts/perf_gate.py BASE HEAD                 # the stable kernel benchmarks
    python scripts/perf_gate.py BASE HEAD --quick         # the same in a few seconds (CI)
    python scripts/perf_gate.py BASE HEAD --all           # every time_* benchmark of asv_bench
    python scripts/perf_gate.py BASE HEAD --bench 'RSSuite' --json report.json
    python scripts/perf_gate.py --stored asv_bench/results HEAD --quick   # no BASE build

BASE and HEAD are each one of

* a git revision (``HEAD~1``, ``main``, a hash): exported with ``git archive`` and its kernels
  compiled in place (``setup.py build_ext --inplace``), once per commit, in a cache folder
  (``--cache``, default ``$TENFOLD_PERF_CACHE`` or ``~/.cache/tenfold-perf-gate``);
* a folder: a source tree whose ``lib/tenfold`` holds compiled kernels, or a folder holding a
  ``tenfold`` package (an unpacked wheel, a site-packages);
* a ``.whl`` file, unpacked into the cache.

How it measures. One worker process per build (``PYTHONPATH`` set to that build, the benchmark
code taken from this checkout's ``asv_bench/benchmarks`` for both, so only the library differs)
sets each benchmark up once. A timing is ``number`` calls, ``number`` calibrated on each side so
that a timing lasts about ``--target`` seconds (a few milliseconds: a timing that short often
runs without being preempted; equal lengths on both sides keep a slower side from being more
exposed). The parent asks the two workers for timings one by one in turn (old, new, new, old,
...), and a round's sample of each side is the fastest of its ``--repeat`` timings: the two
samples of a round come from the same fraction of a second, so a change of the machine's load
falls on both. ``--rounds`` rounds make a pass.

How it judges (:func:`judge`). A benchmark is a regression only when all three hold:

1. the median of HEAD's samples is at least ``--threshold`` (1.3) times BASE's median;
2. the median of the per-round ratios HEAD/BASE (each ratio taken from two samples measured
   next to each other) is at least the threshold as well;
3. the spreads do not overlap: HEAD's lower quartile is above BASE's upper quartile.

and then the whole measurement is repeated (``2 * rounds - 1`` fresh rounds, with
:data:`CONFIRM_PROCESSES` fresh worker processes per side, a side's timing the fastest of its
processes') and must say so again (``confirm``).

Every worker is pinned to one CPU (``--cpu``, default the lowest this process may use), the
same for both sides. Why: on the shared 2-core virtual machines this runs on, a CPU can run
everything about 1.5x slower for seconds at a time (the 4-bit pack at 51 or 72-79 us, the pax
scan at 184 or 313 us, a pure-Python loop and a 16 KiB cache-resident pack alike; seen in 7 of
40 fresh processes on a quiet box; memory copies barely change). Unpinned, the two workers
often sit on different CPUs, so one side is slow and the other not for a whole pass, and a
fresh pair of processes can land the same way again: CI failed on unchanged code like that
(``time_pack_int`` x1.39, confirmed). Pinned, both sides take their turns on the same CPU and
share its state. Measured (the same tree on both sides, 12 quick runs of the stable set each
way, alternating, 480 rounds each): unpinned, 48 per-round ratios were 1.3x or more apart
either way and the per-benchmark medians of the ratios ranged 0.65-1.75; pinned, 4 rounds and
0.86-1.10. The confirming pass's several processes per side cover what belongs to one process
rather than to the CPU (where its buffers landed, say): an unchanged HEAD is flagged only when
all of its processes are slow at once.

Why a false alarm on unchanged code is then unlikely. The two samples of a round come from the
same CPU in the same fraction of a second (the turns alternate, so neither side is
systematically measured first, and a load burst longer than a couple of timings lands on both),
and each is the fastest of several timings, which removes most of what a loaded machine adds.
Condition 2 needs at least half of the rounds (3 of 5 in ``--quick``) to show HEAD 30% slower;
the confirming pass needs it again in 5 of 9 rounds of fresh processes. With pinning, 4 of 480
rounds reached 1.3x either way (above); taking p = 0.01 per round as if rounds were independent,
a pass alarms with probability below 1e-5. They are not quite independent (a slow state can
outlast several rounds, which is how the unpinned gate failed), so the figure is a guide, not a
bound. A real 2x slowdown moves every round, so both passes see it.

``--stored`` compares HEAD alone against the most recent stored asv result of the machine
(``--machine``; default: the only machine stored): timings of another day and another load,
so the threshold is wider (``--stored-threshold``, 2.0) and it is a coarse net, not a gate.

Exit status: 0 no regression, 1 a regression, 2 a usage or build error. ``--json FILE``
(``-`` for stdout) writes the report (schema ``tenfold.perf_gate/1``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import importlib
import importlib.util
import io
import itertools
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "asv_bench" / "benchmarks"
SCHEMA = "tenfold.perf_gate/1"

#: The stable kernel benchmarks CI gates on: (asv name, parameters).
STABLE: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("oinf.BitpackSuite.time_unpack_int", (4, "compiled")),
    ("oinf.BitpackSuite.time_pack_int", (4, "compiled")),
    ("fold.RSSuite.time_encode_1mib", (32,)),
    ("fold.RSSuite.time_correct_64_blocks_at_capacity", (32,)),
    ("core.ChecksumSuite.time_crc32c", ()),
    ("taridx.TarscanSuite.time_scan_pax", ()),
    ("taridx.TaridxSuite.time_build_no_fsync", (1000,)),
    ("ztensor.OpenSuite.time_open_and_map_all", (1024,)),
)

#: Short timings, many of them: on a loaded machine a timing of a few milliseconds often runs
#: without being preempted, and the fastest of several is one that did.
QUICK = {"rounds": 5, "repeat": 7, "target": 0.002, "budget": 0.02}
FULL = {"rounds": 9, "repeat": 15, "target": 0.004, "budget": 0.08}
#: Worker processes per side in the confirming pass (see the module docstring).
CONFIRM_PROCESSES = 4


class UsageError(Exception):
    """A bad argument or a build that could not be made (exit status 2)."""


# ---------------------------------------------------------------------------------------------
# statistics: the part the tests call directly


def summarize(xs: Sequence[float]) -> dict[str, Any]:
    """Median, quartiles (inclusive method) and extremes of samples."""
    xs = sorted(xs)
    if len(xs) >= 2:
        q1, med, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = med = q3 = xs[0]
    return {"median": med, "q1": q1, "q3": q3, "min": xs[0], "max": xs[-1], "samples": list(xs)}


def judge(old: Sequence[float], new: Sequence[float], threshold: float = 1.3) -> dict[str, Any]:
    """The verdict on one pass: ``old[i]`` and ``new[i]`` were measured in the same round."""
    if len(old) != len(new) or not old:
        raise ValueError(f"old and new need the same number of rounds, got {len(old)}, {len(new)}")
    so, sn = summarize(old), summarize(new)
    paired = statistics.median(n / o for o, n in zip(old, new, strict=True))
    ratio = sn["median"] / so["median"]
    if ratio >= threshold and paired >= threshold and sn["q1"] > so["q3"]:
        verdict = "regression"
    elif ratio <= 1 / threshold and paired <= 1 / threshold and sn["q3"] < so["q1"]:
        verdict = "faster"
    else:
        verdict = "ok"
    return {
        "old": so,
        "new": sn,
        "pairs": [[o, n] for o, n in zip(old, new, strict=True)],
        "ratio": ratio,
        "paired_ratio": paired,
        "verdict": verdict,
    }


def interleave(
    old: Callable[[], float], new: Callable[[], float], rounds: int, repeat: int = 1
) -> tuple[list[float], list[float]]:
    """``rounds`` samples of each side. A sample is the fastest of ``repeat`` timings, and the
    timings of the two sides are taken one by one in turn (old/new, then new/old, ...), so
    that a round's two samples come from the same stretch of time and a change of load
    falls on both."""
    olds: list[float] = []
    news: list[float] = []
    turn = 0
    for _ in range(rounds):
        o = n = float("inf")
        for _ in range(repeat):
            if turn % 2 == 0:
                o = min(o, old())
                n = min(n, new())
            else:
                n = min(n, new())
                o = min(o, old())
            turn += 1
        olds.append(o)
        news.append(n)
    return olds, news


def gate(
    old: Callable[[], float],
    new: Callable[[], float],
    rounds: int = 5,
    threshold: float = 1.3,
    confirm: bool = True,
    fresh: Callable[[], tuple[Callable[[], float], Callable[[], float]]] | None = None,
    repeat: int = 1,
) -> dict[str, Any]:
    """One benchmark judged: a pass, and when it finds a regression a second (confirming) pass.

    ``old`` and ``new`` each return one timing (seconds per call; see :func:`sampler`);
    :func:`interleave` makes samples of ``repeat`` of them. The confirming pass has
    ``2 * rounds - 1`` rounds, taken from ``fresh()`` when given (new worker processes: a
    slowdown that belongs to one process, its memory layout or its files, is not confirmed).
    The result is the first pass's :func:`judge` dict, its verdict replaced by the confirming
    pass's when there was one (``confirm`` holds that pass).
    """
    first = judge(*interleave(old, new, rounds, repeat), threshold)
    first["confirm"] = None
    if first["verdict"] == "regression" and confirm:
        if fresh is not None:
            old, new = fresh()
        second = judge(*interleave(old, new, 2 * rounds - 1, repeat), threshold)
        first["confirm"] = second
        if second["verdict"] != "regression":
            first["verdict"] = "ok"
    return first


def fastest_of(samplers: Sequence[Callable[[], float]]) -> Callable[[], float]:
    """One sampler from several (one per worker process): a timing from each, the fastest
    kept. A process can be slow for a reason of its own for its whole life (where its buffers
    landed, say); a real slowdown is in every process of its build."""
    if not samplers:
        raise ValueError("fastest_of needs at least one sampler")
    if len(samplers) == 1:
        return samplers[0]
    return lambda: min(s() for s in samplers)


def best_time(fn: Callable[[], Any], number: int, repeat: int) -> float:
    """The fastest of ``repeat`` timings of ``number`` calls, in seconds per call."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / number


def calibrate(
    fn: Callable[[], Any], target: float, repeat: int = 1, budget: float = 0.0
) -> tuple[int, int]:
    """``(number, repeat)``: calls per timing so that a timing lasts about ``target`` seconds
    (at least one call), and timings per sample, at least ``repeat`` and enough for a sample to
    last ``budget`` seconds (slow benchmarks get more timings to take the fastest of)."""
    fn()  # warm up: first-call costs (imports, page faults) are not what is measured
    one = max(best_time(fn, 1, 3), 1e-7)
    number = max(1, min(10_000, round(target / one)))
    return number, max(repeat, min(200, math.ceil(budget / (number * one))))


def sampler(fn: Callable[[], Any], number: int) -> Callable[[], float]:
    """A zero-argument callable giving one timing of ``number`` calls of ``fn``, in seconds
    per call (for :func:`gate`)."""
    return lambda: best_time(fn, number, 1)


# ---------------------------------------------------------------------------------------------
# benchmarks: asv suites, loaded by name


def _param_sets(cls: type) -> list[tuple[Any, ...]]:
    params = getattr(cls, "params", [])
    if not params:
        return [()]
    if not isinstance(params[0], list | tuple):  # one parameter given as a flat list
        params = [params]
    return [tuple(p) for p in itertools.product(*params)]


class Benchmarks:
    """asv benchmark suites from a folder, each set up once per (name, params) and torn down at
    :meth:`close`."""

    def __init__(self, bench_dir: Path = BENCH_DIR) -> None:
        self.bench_dir = Path(bench_dir)
        self._live: dict[tuple[str, tuple[Any, ...]], tuple[Any, Callable[[], Any]]] = {}

    def _module(self, name: str) -> Any:
        # under a name of its own: "core" or "fold" must not shadow or be shadowed by anything
        modname = f"_tenfold_asv_{name}"
        if modname not in sys.modules:
            spec = importlib.util.spec_from_file_location(modname, self.bench_dir / f"{name}.py")
            if spec is None or spec.loader is None:
                raise ImportError(f"no asv benchmark module {name!r} in {self.bench_dir}")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            spec.loader.exec_module(mod)
        return sys.modules[modname]

    def discover(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Every ``time_*`` benchmark with every parameter combination."""
        found = []
        for path in sorted(self.bench_dir.glob("*.py")):
            if path.stem.startswith("_"):
                continue
            mod = self._module(path.stem)
            for cname, cls in sorted(vars(mod).items()):
                if not isinstance(cls, type) or cls.__module__ != mod.__name__:
                    continue
                for meth in sorted(m for m in vars(cls) if m.startswith("time_")):
                    for ps in _param_sets(cls):
                        found.append((f"{path.stem}.{cname}.{meth}", ps))
        return found

    def get(self, name: str, params: Sequence[Any]) -> Callable[[], Any]:
        """The benchmark as a zero-argument callable, its suite set up."""
        key = (name, tuple(params))
        if key not in self._live:
            modname, cname, meth = name.split(".")
            obj = getattr(self._module(modname), cname)()
            if hasattr(obj, "setup"):
                obj.setup(*params)
            bound = getattr(obj, meth)
            self._live[key] = (obj, lambda: bound(*params))
        return self._live[key][1]

    def close(self) -> None:
        for (_, params), (obj, _) in self._live.items():
            if hasattr(obj, "teardown"):
                with contextlib.suppress(Exception):
                    obj.teardown(*params)
        self._live.clear()


# ---------------------------------------------------------------------------------------------
# workers: one process per build


def _check_build(root: str) -> dict[str, Any]:
    import tenfold
    import tenfold._kernels as k

    where = os.path.realpath(tenfold.__file__)
    if not where.startswith(os.path.realpath(root) + os.sep):
        raise RuntimeError(f"tenfold imported from {where}, not from the build {root}")
    missing = []
    for fam in k.FAMILIES:
        try:
            k.load(fam, "compiled")
        except ImportError:
            missing.append(fam)
    if missing:
        raise RuntimeError(f"build {root} lacks compiled kernels: {', '.join(missing)}")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"tenfold": where, "version": getattr(tenfold, "__version__", "?"), "cpus": cpus}


def worker_main(root: str, bench_dir: str) -> int:
    """The worker loop: one JSON request per line on stdin, one JSON answer per line."""
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever a benchmark prints must not break the protocol
    benches = Benchmarks(Path(bench_dir))
    try:
        for line in sys.stdin:
            req = json.loads(line)
            try:
                ans = _serve(benches, root, req)
            except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
                ans = {"error": f"{type(exc).__name__}: {exc}"}
            out.write(json.dumps(ans) + "\n")
            out.flush()
    finally:
        benches.close()
    return 0


def _serve(benches: Benchmarks, root: str, req: dict[str, Any]) -> dict[str, Any]:
    op = req["op"]
    if op == "hello":
        return _check_build(root)
    if op == "list":
        return {"benchmarks": [[n, list(p)] for n, p in benches.discover()]}
    fn = benches.get(req["name"], req["params"])
    if op == "calibrate":
        number, repeat = calibrate(fn, req["target"], req.get("repeat", 1), req.get("budget", 0.0))
        return {"number": number, "repeat": repeat}
    if op == "sample":
        return {"t": best_time(fn, req["number"], req["repeat"])}
    raise ValueError(f"unknown op {op!r}")


class Worker:
    """A worker process importing tenfold from ``root``."""

    def __init__(self, root: Path, python: str, bench_dir: Path, cpu: int | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k != "TENFOLD_PUREPYTHON"}
        env["PYTHONPATH"] = str(root)
        self.cwd = tempfile.mkdtemp(prefix="tenfold-gate-w-")  # nothing importable from cwd
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--worker", str(root), str(bench_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self.cwd,
        )
        if cpu is not None:
            os.sched_setaffinity(self.proc.pid, {cpu})
        self.info = self.ask(op="hello")

    def ask(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker for {self.info_root()} exited ({self.proc.wait()})")
        ans = json.loads(line)
        if "error" in ans:
            raise RuntimeError(ans["error"])
        return ans

    def info_root(self) -> str:
        return str(self.proc.args[3])  # type: ignore[index]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        shutil.rmtree(self.cwd, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# builds


def _git(*args: str, repo: Path) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    except OSError as exc:  # no git on this machine
        raise UsageError(f"git {' '.join(args)}: {exc}") from None
    if proc.returncode != 0:
        raise UsageError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout.strip()


def _import_root(tree: Path) -> Path | None:
    if (tree / "lib" / "tenfold" / "__init__.py").is_file():
        return tree / "lib"
    if (tree / "tenfold" / "__init__.py").is_file():
        return tree
    return None


def _run_build(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float | None, what: str):
    """Run a build in a session of its own: on a timeout the compilers it started end too."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise UsageError(f"building {what} took longer than {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise UsageError(f"building {what} failed:\n{out[-3000:]}")


def _build_commit(
    sha: str, repo: Path, cache: Path, python: str, timeout: float | None = None
) -> Path:
    dest = cache / sha
    if (dest / "BUILT").is_file():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=f"{sha[:12]}.", dir=cache))
    try:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", sha],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
            tf.extractall(tmp, filter="data")
        t = time.monotonic()
        cmd = [python, "setup.py", "-q", "build_ext", "--inplace", "--build-temp", "build/k"]
        env = dict(os.environ, TENFOLD_BUILD_EXT="1")
        env.pop("TENFOLD_KERNELS", None)
        _run_build(cmd, tmp, env, timeout, sha[:12])
        print(f"perf_gate: built {sha[:12]} in {time.monotonic() - t:.0f} s", file=sys.stderr)
        shutil.rmtree(tmp / "build", ignore_errors=True)
        (tmp / "BUILT").write_text(sha + "\n")
        if dest.exists():  # another gate built it meanwhile
            shutil.rmtree(tmp)
        else:
            tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _unpack_wheel(path: Path, cache: Path) -> Path:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:20]
    dest = cache / f"wheel-{digest}"
    if not (dest / "tenfold").is_dir():
        tmp = Path(tempfile.mkdtemp(prefix="wheel.", dir=cache))
        with zipfile.ZipFile(path) as zf:
            zf.extractall(tmp)
        if dest.exists():
            shutil.rmtree(tmp)
        else:
            tmp.rename(dest)
    return dest


def resolve(
    spec: str, repo: Path, cache: Path, python: str, timeout: float | None = None
) -> dict[str, Any]:
    """A build for ``spec`` (folder, wheel or git revision): ``{"spec", "root", "commit"}``."""
    path = Path(spec).resolve()
    if path.is_file() and path.suffix == ".whl":
        cache.mkdir(parents=True, exist_ok=True)
        return {"spec": spec, "root": str(_unpack_wheel(path, cache)), "commit": None}
    if path.is_dir():
        root = _import_root(path)
        if root is None:
            raise UsageError(f"{spec}: neither lib/tenfold nor tenfold/ in this folder")
        return {"spec": spec, "root": str(root), "commit": None}
    sha = _git("rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}", repo=repo)
    cache.mkdir(parents=True, exist_ok=True)
    tree = _build_commit(sha, repo, cache, python, timeout)
    return {"spec": spec, "root": str(tree / "lib"), "commit": sha}


# ---------------------------------------------------------------------------------------------
# stored asv results (--stored)


def _asv_param_repr(p: Any) -> str:
    return repr(p)


def stored_result(
    results: Path, machine: str | None, name: str, params: Sequence[Any]
) -> dict[str, Any] | None:
    """The newest stored asv result of ``name(params)``: median, quartiles, commit, date."""
    mdirs = [d for d in sorted(results.iterdir()) if (d / "machine.json").is_file()]
    if machine is not None:
        mdirs = [d for d in mdirs if d.name == machine]
    elif len(mdirs) > 1:
        raise UsageError(f"several machines in {results}: name one with --machine")
    if not mdirs:
        return None
    best: dict[str, Any] | None = None
    for f in mdirs[0].glob("*.json"):
        if f.name == "machine.json":
            continue
        doc = json.loads(f.read_text())
        row = doc.get("results", {}).get(name)
        if row is None:
            continue
        cols = dict(zip(doc["result_columns"], row, strict=False))
        # an unparameterized benchmark has params [] and one result: the empty combination
        combos = [tuple(c) for c in itertools.product(*(cols.get("params") or []))]
        want = tuple(_asv_param_repr(p) for p in params)
        if want not in combos or not cols.get("result"):
            continue
        i = combos.index(want)
        value = cols["result"][i]
        if value is None:
            continue
        date = doc.get("date") or 0
        if best is None or date > best["date"]:
            best = {
                "median": value,
                "q1": (cols.get("stats_q_25") or [None] * (i + 1))[i] or value,
                "q3": (cols.get("stats_q_75") or [None] * (i + 1))[i] or value,
                "commit": doc.get("commit_hash"),
                "date": date,
                "machine": mdirs[0].name,
            }
    return best


# ---------------------------------------------------------------------------------------------
# the command


def _selection(args: argparse.Namespace, w: Worker) -> list[tuple[str, tuple[Any, ...]]]:
    if args.all:
        chosen = [(n, tuple(p)) for n, p in w.ask(op="list")["benchmarks"]]
    else:
        chosen = list(STABLE)
    if args.bench:
        rx = re.compile(args.bench)
        chosen = [(n, p) for n, p in chosen if rx.search(f"{n}{p}")]
    if not chosen:
        raise UsageError("no benchmark selected")
    return chosen


def _label(name: str, params: Sequence[Any]) -> str:
    return f"{name}({', '.join(map(repr, params))})" if params else name


class Pair:
    """The workers of a comparison, restartable: the first pass has one process per side, the
    confirming pass :data:`CONFIRM_PROCESSES` fresh ones per side, each side's timing the
    fastest of its processes' (see :func:`fastest_of`)."""

    def __init__(self, base: dict[str, Any], head: dict[str, Any], args: argparse.Namespace):
        self.roots = (Path(base["root"]), Path(head["root"]))
        self.args = args
        self.olds: list[Worker] = []
        self.news: list[Worker] = []
        self.calibration: dict[str, Any] = {}
        self.start()

    @property
    def old(self) -> Worker | None:
        return self.olds[0] if self.olds else None

    @property
    def new(self) -> Worker | None:
        return self.news[0] if self.news else None

    def start(self, per_side: int = 1) -> None:
        self.close()
        python, bench_dir = self.args.python, Path(self.args.bench_dir)
        for _ in range(per_side):
            self.olds.append(Worker(self.roots[0], python, bench_dir, self.args.cpu))
            self.news.append(Worker(self.roots[1], python, bench_dir, self.args.cpu))

    def close(self) -> None:
        for w in self.olds + self.news:
            w.close()
        self.olds, self.news = [], []

    def samplers(
        self, name: str, params: tuple[Any, ...]
    ) -> tuple[Callable[[], float], Callable[[], float]]:
        """Each side calibrated on its own (so that the timings of both last about the same,
        and a slower side is not more exposed to preemption); one timing per call (per
        process, when a side has several)."""
        assert self.olds and self.news
        a = self.args
        cal = dict(op="calibrate", name=name, params=params, target=a.target)
        co = self.olds[0].ask(**cal, repeat=a.repeat, budget=a.budget)
        cn = self.news[0].ask(**cal, repeat=a.repeat, budget=a.budget)
        for w in self.olds[1:] + self.news[1:]:  # set up and warmed like the first
            w.ask(**cal, repeat=a.repeat, budget=a.budget)
        self.calibration = {"number": [co["number"], cn["number"]]}
        self.calibration["repeat"] = max(co["repeat"], cn["repeat"])
        req = dict(op="sample", name=name, params=params, repeat=1)

        def side(workers: list[Worker], number: int) -> Callable[[], float]:
            return fastest_of([lambda w=w: w.ask(**req, number=number)["t"] for w in workers])

        return side(self.olds, co["number"]), side(self.news, cn["number"])

    def fresh(self, name: str, params: tuple[Any, ...]) -> Callable[[], Any]:
        def restart() -> tuple[Callable[[], float], Callable[[], float]]:
            self.start(CONFIRM_PROCESSES)
            return self.samplers(name, params)

        return restart


def _run_pairs(args: argparse.Namespace, pair: Pair) -> Iterator[dict[str, Any]]:
    assert pair.old is not None
    for name, params in _selection(args, pair.old):
        row: dict[str, Any] = {"name": name, "params": list(params)}
        try:
            old, new = pair.samplers(name, params)
        except RuntimeError as exc:
            if pair.new is not None and pair.new.proc.poll() is None:
                # probe HEAD alone: a benchmark only BASE cannot run (a newer API) is skipped
                try:
                    pair.new.ask(op="calibrate", name=name, params=params, target=1e-3)
                except RuntimeError:
                    pass
                else:
                    yield row | {"verdict": "skipped", "error": f"BASE: {exc}"}
                    continue
            yield row | {"verdict": "error", "error": str(exc)}
            continue
        try:
            row |= pair.calibration
            res = gate(
                old,
                new,
                args.rounds,
                args.threshold,
                fresh=pair.fresh(name, params),
                repeat=pair.calibration["repeat"],
            )
        except RuntimeError as exc:
            res = {"verdict": "error", "error": str(exc)}
        if len(pair.olds) > 1:  # after a confirming pass: one process per side again
            pair.start()
        yield row | res


def _run_stored(args: argparse.Namespace, new: Worker) -> Iterator[dict[str, Any]]:
    results = Path(args.stored)
    for name, params in _selection(args, new):
        row: dict[str, Any] = {"name": name, "params": list(params)}
        ref = stored_result(results, args.machine, name, params)
        try:
            cal = new.ask(
                op="calibrate",
                name=name,
                params=params,
                target=args.target,
                repeat=args.repeat,
                budget=args.budget,
            )
            n = cal["number"]
            ts = [
                new.ask(op="sample", name=name, params=params, number=n, repeat=cal["repeat"])["t"]
                for _ in range(args.rounds)
            ]
        except RuntimeError as exc:
            yield row | {"verdict": "error", "error": str(exc)}
            continue
        sn = summarize(ts)
        row |= {"number": n, "new": sn, "stored": ref}
        if ref is None:
            row["verdict"] = "no stored result"
        else:
            row["ratio"] = sn["median"] / ref["median"]
            slow = row["ratio"] >= args.stored_threshold and sn["q1"] > ref["q3"]
            row["verdict"] = "regression" if slow else "ok"
        yield row


def _fmt_t(t: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t * 1e9:.3g} ns"


def _print_row(row: dict[str, Any]) -> None:
    label = _label(row["name"], row["params"])
    if row["verdict"] in ("error", "skipped"):
        print(f"  {row['verdict']:<11} {label}: {row['error']}")
        return
    new = row["new"]
    old = row.get("old") or row.get("stored")
    if old is None:
        print(f"  {row['verdict']:<11} {label}: new {_fmt_t(new['median'])}")
        return
    side = "old"
    if row.get("stored"):
        side = f"stored {(row['stored']['commit'] or '?')[:8]}"
    conf = " (confirmed)" if row.get("confirm") and row["verdict"] == "regression" else ""
    unconf = " (not confirmed by a second pass)" if row.get("confirm") and not conf else ""
    print(
        f"  {row['verdict']:<11} {label}: {side} {_fmt_t(old['median'])}"
        f" [{_fmt_t(old['q1'])}..{_fmt_t(old['q3'])}]"
        f"  new {_fmt_t(new['median'])} [{_fmt_t(new['q1'])}..{_fmt_t(new['q3'])}]"
        f"  x{row['ratio']:.2f}"
        + (f" paired x{row['paired_ratio']:.2f}" if "paired_ratio" in row else "")
        + conf
        + unconf
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="perf_gate.py",
        description="Compare two builds of tenfold on the stable kernel benchmarks, interleaved; "
        "exit 1 on a slowdown larger than the measured noise.",
    )
    p.add_argument("base", nargs="?", help="git revision, built folder or .whl (old side)")
    p.add_argument("head", help="git revision, built folder or .whl (new side)")
    p.add_argument("--stored", metavar="DIR", help="compare HEAD with stored asv results instead")
    p.add_argument(
        "--fallback-stored",
        metavar="DIR",
        help="when BASE cannot be built (no git history, --build-timeout), compare with the "
        "stored asv results in DIR instead (as --stored) rather than fail",
    )
    p.add_argument("--build-timeout", type=float, metavar="S", help="give up building BASE")
    p.add_argument("--machine", help="asv machine name in --stored (default: the only one)")
    p.add_argument("--quick", action="store_true", help="5 rounds of 3 short timings (CI)")
    p.add_argument("--all", action="store_true", help="every time_* benchmark, not the stable set")
    p.add_argument("--bench", metavar="REGEX", help="only benchmarks whose name(params) matches")
    p.add_argument("--rounds", type=int)
    p.add_argument("--repeat", type=int)
    p.add_argument("--target", type=float, help="seconds per timing (calibration)")
    p.add_argument("--budget", type=float, help="least seconds per sample (more timings)")
    p.add_argument("--threshold", type=float, default=1.3)
    p.add_argument(
        "--cpu",
        default="auto",
        help="the CPU every worker is pinned to: a number, 'auto' (the lowest this process may "
        "use) or 'none' (not pinned)",
    )
    p.add_argument("--stored-threshold", type=float, default=2.0)
    p.add_argument("--json", metavar="FILE", help="write the report as JSON ('-': stdout)")
    p.add_argument("--python", default=sys.executable, help="interpreter for builds and workers")
    p.add_argument("--repo", default=str(ROOT), help="git repository of the revisions")
    p.add_argument("--bench-dir", default=str(BENCH_DIR), help="asv benchmark folder")
    p.add_argument(
        "--cache",
        default=os.environ.get("TENFOLD_PERF_CACHE")
        or str(Path.home() / ".cache" / "tenfold-perf-gate"),
        help="where builds of git revisions are kept (one folder per commit)",
    )
    return p


def _pick_cpu(spec: str | int | None) -> int | None:
    """The CPU to pin the workers to (see the module docstring), or None."""
    if spec is None or isinstance(spec, int):
        return spec
    if spec == "none" or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if spec == "auto":
        return allowed[0]
    try:
        cpu = int(spec)
    except ValueError:
        raise UsageError(f"--cpu {spec!r}: a CPU number, 'auto' or 'none'") from None
    if cpu not in allowed:
        raise UsageError(f"--cpu {cpu}: not one of the CPUs this process may use {allowed}")
    return cpu


def _loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    defaults = QUICK if args.quick else FULL
    for key, val in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    if args.rounds < 3 or args.repeat < 1:
        raise UsageError("--rounds must be at least 3 and --repeat at least 1")
    args.cpu = _pick_cpu(args.cpu)
    if (args.base is None) == (args.stored is None):
        raise UsageError("give BASE and HEAD, or --stored DIR and HEAD")
    if args.stored is not None and not Path(args.stored).is_dir():
        raise UsageError(f"--stored {args.stored}: not a folder")
    repo, cache = Path(args.repo).resolve(), Path(args.cache).resolve()
    head = resolve(args.head, repo, cache, args.python)
    base, fallback = None, None
    if args.base is not None:
        try:
            base = resolve(args.base, repo, cache, args.python, args.build_timeout)
        except UsageError as exc:
            if args.fallback_stored is None:
                raise
            fallback = f"{exc}; compared with the stored results in {args.fallback_stored}"
            print(f"perf_gate: {fallback}")
            args.stored, args.base = args.fallback_stored, None
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_before": _loadavg(),
        "base": base,
        "head": head,
        "stored": args.stored,
        "fallback": fallback,
        "cpu": args.cpu,
        "threshold": args.stored_threshold if args.stored else args.threshold,
        "rounds": args.rounds,
        "repeat": args.repeat,
        "target_s": args.target,
        "budget_s": args.budget,
        "benchmarks": [],
    }
    pair: Pair | None = None
    alone: Worker | None = None
    try:
        try:
            if base is not None:
                pair = Pair(base, head, args)
            else:
                alone = Worker(Path(head["root"]), args.python, Path(args.bench_dir), args.cpu)
        except RuntimeError as exc:
            raise UsageError(str(exc)) from exc
        first = pair.old if pair is not None else alone
        assert first is not None
        report["worker_cpus"] = first.info.get("cpus")
        rows = _run_pairs(args, pair) if pair is not None else _run_stored(args, alone)
        for row in rows:
            _print_row(row)
            report["benchmarks"].append(row)
    finally:
        if pair is not None:
            pair.close()
        if alone is not None:
            alone.close()
    report["loadavg_after"] = _loadavg()
    report["regressions"] = [
        _label(r["name"], r["params"]) for r in report["benchmarks"] if r["verdict"] == "regression"
    ]
    report["errors"] = [
        _label(r["name"], r["params"]) for r in report["benchmarks"] if r["verdict"] == "error"
    ]
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1], argv[2])
    parser = _parser()
    args = parser.parse_args(argv)
    base_txt = args.stored and f"stored results in {args.stored}" or args.base
    print(f"perf_gate: {base_txt} -> {args.head}" + (" (quick)" if args.quick else ""))
    try:
        report = _measure(args)
    except UsageError as exc:
        print(f"perf_gate: {exc}", file=sys.stderr)
        return 2
    # a regression is 1; a benchmark HEAD could not run is 2 (nothing could be judged)
    status = 1 if report["regressions"] else 2 if report["errors"] else 0
    report["exit"] = status
    print(
        f"perf_gate: {len(report['benchmarks'])} benchmarks, "
        f"{len(report['regressions'])} regressions, {len(report['errors'])} errors; "
        f"load {report['loadavg_before']} -> {report['loadavg_after']}"
    )
    if args.json == "-":
        json.dump(report, sys.stdout, indent=1)
        print()
    elif args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
