"""scripts/perf_docs.py: docs/performance.md's history section is what the stored asv results
say, each figure with its commit, date, machine and load; the rest of the page is untouched."""

from __future__ import annotations

import importlib.util
import json
import subprocess
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


# --- the tables: docs/perf_results/<section>.json -> docs/performance.md ---


def test_every_table_on_the_page_is_rendered_from_stored_results():
    text = pd.DOC.read_text()
    assert pd.problems(text) == []
    assert pd.render_tables(text) == text, "stale: run python scripts/perf_docs.py"
    assert pd.load_tables(), "no stored results"


def test_a_hand_edited_figure_is_caught():
    text = pd.DOC.read_text()
    line = "| open + map all tensors | 0.001573 |"
    assert line in text
    found = pd.problems(text.replace(line, "| open + map all tensors | 0.0012 |"))
    assert found == ["table ztensor: differs from its stored results (edited by hand?)"]


def test_a_hand_edited_caption_is_caught():
    text = pd.DOC.read_text()
    old = "*Measured 2026-11-22 on `box-epyc-2core`"
    assert old in text
    found = pd.problems(text.replace(old, "*Measured 2026-11-27 on `box-epyc-2core`", 1))
    assert found == ["table ztensor: differs from its stored results (edited by hand?)"]


def _copy_results(tmp_path: Path) -> Path:
    res = tmp_path / "perf_results"
    res.mkdir()
    for f in pd.RESULTS_DOCS.glob("*.json"):
        (res / f.name).write_bytes(f.read_bytes())
    return res


def test_a_results_file_without_its_section_is_caught(tmp_path):
    res = _copy_results(tmp_path)
    run = {"date": "2026-11-27", "machine": "m", "rows": [{"case": "c", "tenfold": 1.0}]}
    pd.store_run("xxh3", "main", run, results=res)
    found = pd.problems(pd.DOC.read_text(), res)
    assert "docs/perf_results/xxh3.json: no section in the page" in found
    assert "table xxh3: shown 0 times in the page (once expected)" in found
    # rendering adds the section before the history, and then the page agrees
    new = pd.render_tables(pd.DOC.read_text(), res)
    assert new.index("<!-- BEGIN xxh3 -->") < new.index(pd.BEGIN)
    assert pd.problems(new, res) == []


def test_a_table_without_stored_results_or_outside_its_section_is_caught(tmp_path):
    res = _copy_results(tmp_path)
    (res / "hdf5.json").unlink()
    found = pd.problems(pd.DOC.read_text(), res)
    assert "table hdf5: no stored results (docs/perf_results/hdf5.json)" in found
    text = pd.DOC.read_text()
    start = text.index("<!-- table onnx (")
    end = text.index("<!-- end table onnx -->") + len("<!-- end table onnx -->\n")
    moved = text[:start] + text[end:] + text[start:end]  # the block after the history
    assert "table onnx: not inside its section's BEGIN/END markers" in pd.problems(moved)


ENV_LINE = (
    "Measured 2026-11-27 on x86_64 (cpu), Python 3.11.7, numpy 2.4.6, tenfold 0.1.0, "
    "by `scripts/bench_peers.py`."
)
OLD_STYLE = f"""# P

<!-- BEGIN xxh3 -->
## xxh3

{ENV_LINE}

| case | tenfold | peer | peer value | unit | ratio | target | note |
|---|---|---|---|---|---|---|---|
| xxh3 256 MiB | 29.57 | xxhash | 28.13 | GB/s | 1.05x | >= 1x |  |
| open | 0.000286 | - | - | s | - |  |  |
| requests | 131072 | - | - | bytes | - | <= 2 | counted |

![xxh3 ratios](perf_xxh3.png)

Then by hand (2026-11-28, load 1.5):

| case | before | after |
|---|---|---|
| hash 1 GiB | 40 ms | 35 ms |
<!-- END xxh3 -->
"""


def test_typed_in_tables_are_caught_then_imported_faithfully(tmp_path):
    res = tmp_path / "perf_results"
    found = pd.problems(OLD_STYLE, res)
    assert found == [
        "line 8: a table typed in, not rendered from stored results "
        "(python scripts/perf_docs.py import xxh3)",
        "line 18: a table typed in, not rendered from stored results "
        "(python scripts/perf_docs.py import xxh3)",
    ]
    new, refs = pd.import_section(OLD_STYLE, "xxh3", "box", res)
    assert refs == ["xxh3", "xxh3/xxh3"]
    assert pd.problems(new, res) == []
    table_lines = [ln for ln in OLD_STYLE.splitlines() if ln.startswith("|")]
    assert [ln for ln in new.splitlines() if ln.startswith("|")] == table_lines
    assert "Measured 2026-11-27 on x86_64" not in new  # the caption replaces that line
    doc = json.loads((res / "xxh3.json").read_text())
    main = doc["tables"]["main"]
    assert main["plot"] == "perf_xxh3.png"
    run = main["runs"][-1]
    assert run["date"] == "2026-11-27" and run["machine"] == "box"
    assert run["software"] == "Python 3.11.7, numpy 2.4.6, tenfold 0.1.0"
    assert run["command"] == "scripts/bench_peers.py" and run["platform"] == "x86_64"
    assert run["rows"][0] == {
        "case": "xxh3 256 MiB",
        "tenfold": 29.57,
        "peer": "xxhash",
        "peer_value": 28.13,
        "unit": "GB/s",
        "ratio": 1.05,
        "target": ">= 1x",
        "note": "",
    }
    assert run["rows"][1]["tenfold"] == 0.000286 and run["rows"][1]["ratio"] is None
    assert run["rows"][2]["tenfold"] == 131072
    other = doc["tables"]["xxh3"]["runs"][-1]
    assert other["date"] == "2026-11-28" and other["columns"] == ["case", "before", "after"]
    assert "load average not recorded" in new and "Then by hand" in new


def test_store_run_keeps_earlier_runs_and_the_page_shows_the_last(tmp_path):
    res = tmp_path / "perf_results"
    rows = [{"case": "c", "tenfold": 2.0, "peer": "p", "peer_value": 1.0, "unit": "s"}]
    first = {"date": "2026-11-27", "machine": "m", "load_before": 1.0, "load_after": 2.0}
    pd.store_run("s", "main", {**first, "rows": rows}, results=res)
    later = {
        **first,
        "date": "2026-11-28",
        "commit": "ab" * 20,
        "rows": [{**rows[0], "ratio": 0.5}],
    }
    pd.store_run("s", "main", later, "perf_s.png", results=res)
    doc = json.loads((res / "s.json").read_text())
    assert [r["date"] for r in doc["tables"]["main"]["runs"]] == ["2026-11-27", "2026-11-28"]
    page = pd.render_tables("# P\n", res)
    assert "*Measured 2026-11-28 on `m`, load average 1.0 -> 2.0, commit `abababab" in page
    assert "(with 1 earlier run)" in page and "| c | 2 | p | 1 | s | 0.50x |  |  |" in page
    assert "![s ratios](perf_s.png)" in page


def _bench_peers():
    spec = importlib.util.spec_from_file_location(
        "bench_peers", ROOT / "scripts" / "bench_peers.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_peers_write_docs_stores_the_run_and_renders_it(tmp_path, monkeypatch):
    peers = tmp_path / "peers"
    peers.mkdir()
    (peers / "fake.py").write_text(
        "def run(quick):\n"
        "    return [{'case': 'open', 'tenfold': 0.5, 'peer': 'other', 'peer_value': 1.5,\n"
        "             'unit': 's', 'ratio': 3.0, 'target': '>= 2x', 'note': f'quick={quick}'}]\n"
    )
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Performance\n\n{pd.BEGIN}\nhistory\n{pd.END}\n")
    bp = _bench_peers()
    monkeypatch.setattr(bp, "PEERS", peers)
    # bench_peers finds perf_docs in sys.modules; another test module may have put its own
    # copy there (test_asv_pages): this test's copy is the one patched below
    monkeypatch.setitem(sys.modules, "perf_docs", pd)
    monkeypatch.setattr(pd, "DOC", doc)
    monkeypatch.setattr(pd, "RESULTS_DOCS", tmp_path / "perf_results")
    monkeypatch.setattr(pd, "plot_ratios", lambda *a: False)  # no matplotlib needed
    assert bp.main(["--format", "fake", "--quick", "--write-docs", "--machine", "m1"]) == 0
    stored = json.loads((tmp_path / "perf_results" / "fake.json").read_text())
    run = stored["tables"]["main"]["runs"][-1]
    assert (
        run["machine"] == "m1" and run["command"] == "scripts/bench_peers.py --format fake --quick"
    )
    assert run["rows"][0]["note"] == "quick=True" and run["rows"][0]["ratio"] == 3.0
    for key in ("date", "time", "load_before", "load_after", "platform", "software", "commit"):
        assert run.get(key) is not None, key
    text = doc.read_text()
    assert text.index("<!-- BEGIN fake -->") < text.index(pd.BEGIN)
    assert "| open | 0.5 | other | 1.5 | s | 3.00x | >= 2x | quick=True |" in text
    assert pd.problems(text, tmp_path / "perf_results") == []
    # a second run replaces the table in place and keeps the first in the file
    assert bp.main(["--format", "fake", "--write-docs", "--machine", "m1"]) == 0
    text2 = doc.read_text()
    assert text2.count("<!-- BEGIN fake -->") == 1 and "quick=False" in text2
    assert "(with 1 earlier run)" in text2


def test_a_section_rewritten_by_an_older_bench_peers_is_imported_as_a_new_run(tmp_path):
    """At a merge: a branch's bench_peers.py --write-docs replaced a section already stored."""
    res = tmp_path / "perf_results"
    page, _ = pd.import_section(OLD_STYLE, "xxh3", "box", res)
    typed_again = OLD_STYLE.replace("29.57", "31.2").replace("2026-11-27", "2026-11-29")
    start, end = page.index("<!-- BEGIN xxh3 -->"), page.index("<!-- END xxh3 -->")
    theirs = typed_again[typed_again.index("<!-- BEGIN xxh3 -->") : typed_again.index("<!-- END")]
    merged = page[:start] + theirs + page[end:]
    # their subsection table stays typed in, next to nothing generated: both are imported
    new, refs = pd.import_section(merged, "xxh3", "box", res)
    assert refs == ["xxh3", "xxh3/xxh3"]
    doc = json.loads((res / "xxh3.json").read_text())
    assert [r["date"] for r in doc["tables"]["main"]["runs"]] == ["2026-11-27", "2026-11-29"]
    assert [r["rows"][0]["tenfold"] for r in doc["tables"]["main"]["runs"]] == [29.57, 31.2]
    assert "| xxh3 256 MiB | 31.2 |" in new and "(with 1 earlier run)" in new
    assert pd.problems(new, res) == []
    # a table added beside the generated ones gets an id of its own
    extra = new.replace(
        "<!-- END xxh3 -->",
        "### More (2026-11-30)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n<!-- END xxh3 -->",
    )
    new2, refs2 = pd.import_section(extra, "xxh3", "box", res)
    assert refs2 == ["xxh3/more"]
    assert pd.problems(new2, res) == []
    assert json.loads((res / "xxh3.json").read_text())["tables"]["more"]["runs"][0]["date"] == (
        "2026-11-30"
    )


def test_run_gives_asv_the_stored_machine_file_and_a_fixed_discovery_commit(tmp_path, monkeypatch):
    res = _results(tmp_path)
    monkeypatch.setattr(pd, "RESULTS", res)
    home = tmp_path / "home"
    home.mkdir()
    pd._machine_file(home, "m1")
    written = json.loads((home / ".asv-machine.json").read_text())
    assert written == {"version": 1, "m1": {"cpu": "Test CPU", "num_cpu": "2"}}
    pd._machine_file(home, "new-box")  # not stored: described from the system
    assert json.loads((home / ".asv-machine.json").read_text())["new-box"]["machine"] == "new-box"
    conf = json.loads(pd._run_config(home).read_text())
    assert conf["repo"] == str(pd.ROOT)
    assert conf["results_dir"] == str(pd.ROOT / "asv_bench" / "results")
    assert conf["benchmark_dir"] == str(pd.ROOT / "asv_bench" / "benchmarks")
    newest = ["git", "-C", str(pd.ROOT), "log", "-1", "--format=%H", "--", "lib", "setup.py"]
    out = subprocess.run([*newest, "pyproject.toml"], capture_output=True, text=True).stdout
    assert conf["branches"] == [out.strip()] and len(out.strip()) == 40


def test_a_rerun_of_a_stored_commit_shows_its_own_load(tmp_path):
    res = _results(tmp_path)
    cond = json.loads((res / "conditions.json").read_text())
    again = {"load_before": 7.0, "load_after": 8.0, "run_started": "2026-11-27 02:00"}
    cond["m1"]["a" * 40]["reruns"] = [again]
    (res / "conditions.json").write_text(json.dumps(cond))
    text = pd.section(res)
    assert "4.2 -> 5.5; 7.0 -> 8.0 (2026-11-27 02:00, later benchmarks)" in text
