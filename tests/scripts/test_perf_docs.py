"""scripts/perf_docs.py: docs/performance.md's history section is what the stored asv results
say, each figure with its commit, date, machine and load; the rest of the page is untouched."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("perf_docs", ROOT / "scripts" / "perf_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["perf_docs"] = mod
    spec.loader.exec_module(mod)
    return mod


pd = _load()


def test_performance_md_section_matches_the_stored_results():
    text = pd.DOC.read_text()
    assert pd.BEGIN in text and pd.END in text, "run python scripts/perf_docs.py"
    assert pd.render(text, pd.section()) == text, "stale: run python scripts/perf_docs.py"


def test_stored_results_cover_five_commits_with_their_load():
    rows = pd.load_results()["box-epyc-2core"]
    assert len(rows) >= 5
    for r in rows:
        assert r["conditions"], f"no load recorded for {r['commit']}"
        assert r["values"]["CRC-32C 16 MiB"] is not None


def _results(tmp_path: Path) -> Path:
    res = tmp_path / "results"
    (res / "m1").mkdir(parents=True)
    (res / "m1" / "machine.json").write_text(json.dumps({"cpu": "Test CPU", "num_cpu": "2"}))
    cols = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a"]
    cols += ["stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat"]
    for sha, date, t in (("b" * 40, 2e12, 2e-3), ("a" * 40, 1e12, 1e-3)):
        row = [[t], [], "v", date + 5e8, 1.0, [None], [None], [t * 0.9], [t * 1.1], [1], [5]]
        doc = {"commit_hash": sha, "date": date, "result_columns": cols}
        doc["results"] = {"core.ChecksumSuite.time_crc32c": row}
        (res / "m1" / f"{sha[:8]}-env.json").write_text(json.dumps(doc))
    cond = {"m1": {"a" * 40: {"load_before": 4.25, "load_after": 5.5}}}
    (res / "conditions.json").write_text(json.dumps(cond))
    return res


def test_section_gives_commit_date_machine_and_load(tmp_path):
    text = pd.section(_results(tmp_path))
    assert "### Machine `m1`: Test CPU, 2 CPUs" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("| `")]
    assert [ln[3:11] for ln in lines] == ["aaaaaaaa", "bbbbbbbb"]  # oldest commit first
    assert "| 2001-09-09 01:46 |" in lines[0] and "4.2 -> 5.5" in lines[0]
    assert "1 ms (0.9-1.1)" in lines[0] and "2 ms (1.8-2.2)" in lines[1]
    assert "not recorded" in lines[1]
    assert lines[0].count("n/a") == len(pd.COLUMNS) - 1


def test_render_replaces_only_the_generated_section():
    doc = f"# P\n\nhand-typed\n\n{pd.BEGIN}\nold\n{pd.END}\n\n## after\n"
    new = pd.render(doc, "\nnew\n")
    assert new == f"# P\n\nhand-typed\n\n{pd.BEGIN}\n\nnew\n{pd.END}\n\n## after\n"
    assert pd.render("# P\n", "x\n") == f"# P\n\n{pd.BEGIN}\nx\n{pd.END}\n"
