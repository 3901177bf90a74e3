"""The docs' examples leave their temporary directories in pytest's ``tmp_path``, not in the
system's temporary directory.

Examples make directories with ``tempfile.mkdtemp()`` and never remove them (that keeps them
readable); ``tests/conftest.py``'s ``tempdir_in_tmp_path`` points ``tempfile`` (and ``TMPDIR``
for subprocesses) at the test's ``tmp_path`` while they run, so CI does not pile up
``/tmp/tmpXXXX``.
"""

from __future__ import annotations

import doctest
import subprocess
import sys
import tempfile
from pathlib import Path

import tenfold.oinf.writer

SYSTEM_TMP = Path(tempfile.gettempdir())  # at import: before any fixture


def test_the_fixture_points_tempfile_at_tmp_path(tempdir_in_tmp_path):
    assert Path(tempfile.gettempdir()) == tempdir_in_tmp_path != SYSTEM_TMP
    made = Path(tempfile.mkdtemp())
    assert made.parent == tempdir_in_tmp_path
    out = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(out) == tempdir_in_tmp_path


def test_doctests_run_with_the_fixture():
    source = Path(__file__).with_name("test_doctests.py").read_text()
    assert "def test_doctests(name, tempdir_in_tmp_path)" in source


def test_a_doctest_that_makes_a_tempdir_writes_into_tmp_path(tempdir_in_tmp_path):
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(tenfold.oinf.writer, "tenfold.oinf.writer")
    assert any("mkdtemp" in ex.source for t in tests for ex in t.examples)
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0
    assert any(tempdir_in_tmp_path.iterdir())  # its directory landed here, not in /tmp


def test_demo_without_a_dir_keeps_its_files_and_says_where(tempdir_in_tmp_path, capsys):
    from tenfold.cli import main

    assert main(["demo"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("demo files are in ")
    where = Path(last.removeprefix("demo files are in "))
    assert where.parent == tempdir_in_tmp_path and where.name.startswith("tenfold-demo-")
    assert any(where.iterdir())  # kept for the user to look at
