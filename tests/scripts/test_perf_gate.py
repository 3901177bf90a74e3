"""scripts/perf_gate.py: the regression gate catches a planted 2x slowdown and stays quiet on
unchanged code, on a loaded machine.

These tests assert the gate's verdicts, not speeds: the planted slowdown is a ratio (the kernel
run twice, or followed by a sleep as long as the call took), so it is 2x whatever the machine.

Why the unchanged-code test does not flake: both sides run the same benchmark code on their own
data, their timings are taken one by one in turn (old, new, new, old, ...), a round's sample is
the fastest of several timings, and a regression needs (1) the medians 1.3x apart, (2) the
median of the per-round ratios 1.3x, (3) the quartile boxes apart, and (4) the same again in a
confirming pass of nine fresh rounds. In-process here, so both sides share a CPU; the command
pins its worker processes to one CPU for the same reason (see scripts/perf_gate.py, which also
gives the measured rates).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import tenfold

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "scripts" / "perf_gate.py"
#: one Reed-Solomon decode of 64 damaged blocks: about 0.5 ms here, so a sample is quick
BENCH = ("fold.RSSuite.time_correct_64_blocks_at_capacity", (32,))


def _load_gate():
    spec = importlib.util.spec_from_file_location("perf_gate", GATE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["perf_gate"] = mod
    spec.loader.exec_module(mod)
    return mod


pg = _load_gate()


def _built_root() -> Path:
    """The folder holding the tenfold under test (``lib`` of a tree, or a site-packages)."""
    import tenfold._kernels as k

    try:
        k.load("rs", "compiled")
    except ImportError:
        pytest.skip("the compiled kernels are not built: the gate compares compiled builds")
    return Path(tenfold.__file__).resolve().parents[1]


@pytest.fixture
def benches():
    _built_root()
    b = [pg.Benchmarks(), pg.Benchmarks()]  # one suite instance per side, like two builds
    yield b
    for x in b:
        x.close()


def _gate(old_fn, new_fn):
    """The gate in quick mode on two callables, each side calibrated as the command does."""
    q = pg.QUICK
    n_old, r_old = pg.calibrate(old_fn, q["target"], q["repeat"], q["budget"])
    n_new, r_new = pg.calibrate(new_fn, q["target"], q["repeat"], q["budget"])
    old, new = pg.sampler(old_fn, n_old), pg.sampler(new_fn, n_new)
    return pg.gate(old, new, rounds=q["rounds"], repeat=max(r_old, r_new))


def _twice(fn):
    def run():
        fn()
        fn()

    return run


def _sleep_as_long(fn):
    def run():
        t = time.perf_counter()
        fn()
        time.sleep(time.perf_counter() - t)

    return run


@pytest.mark.parametrize("plant", [_twice, _sleep_as_long], ids=["twice", "sleep"])
def test_planted_2x_slowdown_is_caught(benches, plant):
    fn = benches[0].get(*BENCH)
    res = _gate(fn, plant(benches[1].get(*BENCH)))
    assert res["verdict"] == "regression", res
    assert res["confirm"]["verdict"] == "regression"
    # at least the planted 2x (a loaded machine can add to a sleep, never take from it)
    assert res["ratio"] > 1.6 and res["paired_ratio"] > 1.6, res


def test_unchanged_code_passes(benches):
    old, new = benches[0].get(*BENCH), benches[1].get(*BENCH)
    res = _gate(old, new)
    assert res["verdict"] != "regression", res


def test_a_faster_head_is_not_a_regression(benches):
    slow = _twice(benches[0].get(*BENCH))
    res = _gate(slow, benches[1].get(*BENCH))
    assert res["verdict"] == "faster", res


# the judgement on fixed numbers


def test_judge_flags_a_clear_slowdown():
    res = pg.judge([1.0, 1.1, 1.0, 1.05, 1.0], [2.0, 2.1, 2.0, 1.9, 2.2])
    assert res["verdict"] == "regression"
    assert res["ratio"] == pytest.approx(2.0)
    assert res["pairs"][1] == [1.1, 2.1]


def test_judge_needs_the_spreads_apart():
    # medians 1.5x apart, but one side's spread covers the other's: noise, not a verdict
    assert pg.judge([1.0, 1.0, 3.0, 3.0, 1.0], [1.5, 1.5, 1.5, 1.0, 1.5])["verdict"] == "ok"


def test_judge_needs_the_paired_ratios_too():
    # the medians are 1.4x apart and the boxes apart, but round by round new was not slower
    # (the load rose during the run and fell on both sides alike)
    old = [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
    new = [1.0, 1.4, 1.4, 1.4, 1.4, 1.4, 2.0]
    res = pg.judge(old, new)
    assert res["paired_ratio"] < 1.3
    assert res["verdict"] != "regression"


def test_judge_below_threshold_is_ok():
    assert pg.judge([1.0] * 5, [1.2] * 5)["verdict"] == "ok"
    assert pg.judge([1.0] * 5, [1.2] * 5, threshold=1.1)["verdict"] == "regression"


def test_an_unconfirmed_regression_is_ok():
    # a first pass of 5 rounds at 2x, then a confirming pass of 9 rounds unchanged
    olds = iter([1.0] * 14)
    news = iter([2.0] * 5 + [1.0] * 9)
    res = pg.gate(lambda: next(olds), lambda: next(news), rounds=5)
    assert res["verdict"] == "ok"
    assert res["confirm"]["verdict"] == "ok" and len(res["confirm"]["pairs"]) == 9
    assert next(olds, None) is None and next(news, None) is None


def test_a_confirmed_regression_uses_fresh_samplers():
    fresh_calls = []

    def fresh():
        fresh_calls.append(1)
        return (lambda: 1.0), (lambda: 2.0)

    res = pg.gate(lambda: 1.0, lambda: 2.0, rounds=3, fresh=fresh)
    assert res["verdict"] == "regression" and fresh_calls == [1]


def test_fastest_of_takes_each_process_once_and_keeps_the_fastest():
    calls = []

    def proc(tag, t):
        return lambda: calls.append(tag) or t

    side = pg.fastest_of([proc("a", 3.0), proc("b", 1.0), proc("c", 2.0)])
    assert side() == 1.0 and calls == ["a", "b", "c"]
    one = proc("x", 5.0)
    assert pg.fastest_of([one]) is one
    with pytest.raises(ValueError, match="at least one"):
        pg.fastest_of([])


@pytest.mark.parametrize(("slow", "verdict"), [(1, "ok"), (3, "ok"), (4, "regression")])
def test_confirming_pass_needs_every_head_process_slow(slow, verdict):
    # a first pass that sees HEAD 1.5x slower; in the confirming pass, `slow` of HEAD's four
    # fresh processes sit in a slow state for their whole life (a per-process effect, not code)
    def fresh():
        news = [(lambda: 1.5)] * slow + [(lambda: 1.0)] * (pg.CONFIRM_PROCESSES - slow)
        return pg.fastest_of([lambda: 1.0] * pg.CONFIRM_PROCESSES), pg.fastest_of(news)

    res = pg.gate(lambda: 1.0, lambda: 1.5, rounds=5, fresh=fresh)
    assert res["confirm"] is not None and res["verdict"] == verdict


def test_pick_cpu():
    import os

    allowed = sorted(os.sched_getaffinity(0))
    assert pg._pick_cpu("auto") == allowed[0]
    assert pg._pick_cpu(str(allowed[-1])) == allowed[-1]
    assert pg._pick_cpu("none") is None
    with pytest.raises(pg.UsageError, match="a CPU number"):
        pg._pick_cpu("fast")
    with pytest.raises(pg.UsageError, match="not one of the CPUs"):
        pg._pick_cpu(str(max(allowed) + 1000))


def _pair_args(root: Path, *extra: str):
    """The command's arguments for the same build on both sides, quick mode resolved."""
    args = pg._parser().parse_args([str(root), str(root), "--quick", *extra])
    for key, val in pg.QUICK.items():
        setattr(args, key, val)
    args.cpu = pg._pick_cpu(args.cpu)
    return args


def test_confirming_workers_are_fresh_pinned_and_several(tmp_path):
    root = _built_root()
    args = _pair_args(root, "--cpu", "auto")
    spec = {"root": str(root)}
    pair = pg.Pair(spec, spec, args)
    try:
        first = [w.proc.pid for w in pair.olds + pair.news]
        assert len(first) == 2
        old, new = pair.fresh(*BENCH)()
        assert len(pair.olds) == len(pair.news) == pg.CONFIRM_PROCESSES
        assert not set(first) & {w.proc.pid for w in pair.olds + pair.news}
        for w in pair.olds + pair.news:
            assert w.info["cpus"] == [args.cpu]
        assert old() > 0 and new() > 0
    finally:
        pair.close()


def test_after_a_confirming_pass_the_next_benchmark_has_one_process_per_side(monkeypatch):
    root = _built_root()
    args = _pair_args(root, "--bench", "RSSuite")
    sides = []

    def confirming_gate(old, new, rounds, threshold, fresh, repeat):
        sides.append((len(pair.olds), len(pair.news)))
        fresh()  # as gate() does for a first pass that found a regression
        sides.append((len(pair.olds), len(pair.news)))
        return {"verdict": "ok", "confirm": {}}

    monkeypatch.setattr(pg, "gate", confirming_gate)
    spec = {"root": str(root)}
    pair = pg.Pair(spec, spec, args)
    try:
        rows = list(pg._run_pairs(args, pair))
    finally:
        pair.close()
    n = pg.CONFIRM_PROCESSES
    assert len(rows) == 2 and sides == [(1, 1), (n, n), (1, 1), (n, n)]


def test_interleave_alternates_single_timings():
    calls = []

    def side(tag, t):
        return lambda: calls.append(tag) or t

    olds, news = pg.interleave(side("o", 1.0), side("n", 2.0), rounds=2, repeat=3)
    assert olds == [1.0, 1.0] and news == [2.0, 2.0]
    assert "".join(calls) == "onnoonnoonno"


def test_judge_refuses_unpaired_samples():
    with pytest.raises(ValueError, match="same number of rounds"):
        pg.judge([1.0, 2.0], [1.0])


# the command


def _run(*args, timeout=300):
    return subprocess.run(
        [sys.executable, str(GATE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_cli_same_build_twice_passes(tmp_path):
    root = _built_root()
    out = tmp_path / "r.json"
    proc = _run(
        root, root, "--quick", "--bench", r"RSSuite\.time_correct|TarscanSuite", "--json", out
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads(out.read_text())
    assert rep["schema"] == "tenfold.perf_gate/1" and rep["exit"] == 0
    names = [r["name"] for r in rep["benchmarks"]]
    assert names == [
        "fold.RSSuite.time_correct_64_blocks_at_capacity",
        "taridx.TarscanSuite.time_scan_pax",
    ]
    for row in rep["benchmarks"]:
        assert row["verdict"] in ("ok", "faster")
        assert len(row["pairs"]) == 5 and min(row["number"]) >= 1
        assert row["old"]["q1"] <= row["old"]["median"] <= row["old"]["q3"]
    assert len(rep["loadavg_before"]) == 3
    # both sides pinned to one CPU, the same (see the module docstring of the gate)
    assert rep["cpu"] == min(os.sched_getaffinity(0)) and rep["worker_cpus"] == [rep["cpu"]]


def _stored(tmp_path: Path, median: float) -> Path:
    mdir = tmp_path / "results" / "box"
    mdir.mkdir(parents=True)
    (mdir / "machine.json").write_text(json.dumps({"machine": "box", "version": 1}))
    cols = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a"]
    cols += ["stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat"]
    for date, value in ((1, 99.0), (2, median)):  # the newer one counts
        row = [[value], [["32"]], "v", 0, 0, [None], [None], [value], [value], [1], [1]]
        doc = {"commit_hash": f"c{date}", "date": date, "result_columns": cols}
        plain = [[value * 2], [], "v", 0, 0, [None], [None], [value], [value], [1], [1]]
        doc["results"] = {BENCH[0]: row, "core.ChecksumSuite.time_crc32c": plain}
        (mdir / f"c{date}-env.json").write_text(json.dumps(doc))
    return tmp_path / "results"


def test_stored_result_takes_the_newest(tmp_path):
    res = pg.stored_result(_stored(tmp_path, 0.5), None, *BENCH)
    assert res["median"] == 0.5 and res["commit"] == "c2" and res["machine"] == "box"
    assert pg.stored_result(tmp_path / "results", None, BENCH[0], (16,)) is None
    # a benchmark without parameters
    res = pg.stored_result(tmp_path / "results", None, "core.ChecksumSuite.time_crc32c", ())
    assert res["median"] == 1.0 and res["commit"] == "c2"


@pytest.mark.parametrize(("stored", "rc"), [(10.0, 0), (1e-9, 1)])
def test_cli_against_stored_results(tmp_path, stored, rc):
    root = _built_root()
    results = _stored(tmp_path, stored)
    proc = _run("--stored", results, root, "--quick", "--bench", r"RSSuite\.time_correct")
    assert proc.returncode == rc, proc.stdout + proc.stderr


def test_cli_usage_errors(tmp_path):
    assert _run().returncode == 2  # argparse: HEAD missing
    proc = _run(tmp_path, tmp_path)  # a folder without tenfold
    assert proc.returncode == 2 and "neither lib/tenfold nor tenfold/" in proc.stderr
    root = _built_root()
    proc = _run("no-such-rev", root, "--repo", tmp_path)
    assert proc.returncode == 2 and "git rev-parse" in proc.stderr
    proc = _run(root, root, "--bench", "no benchmark has this name")
    assert proc.returncode == 2 and "no benchmark selected" in proc.stderr


def test_cli_falls_back_to_stored_results_when_base_cannot_be_built(tmp_path):
    root = _built_root()
    results = _stored(tmp_path, 10.0)
    out = tmp_path / "r.json"
    args = ["no-such-rev", root, "--repo", tmp_path, "--fallback-stored", results]
    proc = _run(*args, "--quick", "--bench", r"RSSuite\.time_correct", "--json", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads(out.read_text())
    assert "git rev-parse" in rep["fallback"] and rep["stored"] == str(results)
    assert rep["threshold"] == 2.0 and rep["benchmarks"][0]["stored"]["commit"] == "c2"


def test_cli_takes_a_wheel(tmp_path):
    root = _built_root()
    wheel = tmp_path / "tenfold-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for f in (root / "tenfold").rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                zf.write(f, f.relative_to(root).as_posix())
    out = tmp_path / "r.json"
    args = [root, wheel, "--quick", "--bench", "TarscanSuite", "--cache", tmp_path / "c"]
    proc = _run(*args, "--json", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    head = json.loads(out.read_text())["head"]["root"]
    assert Path(head).parent == tmp_path / "c" and Path(head).name.startswith("wheel-")
