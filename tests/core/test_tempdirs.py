"""The suite's temporary files stay inside pytest's base directory and are removed.

Docs examples make directories with ``tempfile.mkdtemp()`` and never remove them (that keeps
them readable); ``tests/conftest.py`` points ``tempfile`` (and ``TMPDIR`` for subprocesses) at
one directory of the session, removed at its end, so CI does not pile up ``/tmp/tmpXXXX``.
"""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tenfold.oinf.writer


def test_tempfile_points_into_the_session_dir(_suite_tempdir, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    assert Path(tempfile.gettempdir()) == _suite_tempdir
    assert _suite_tempdir.parent == base
    assert os.environ["TMPDIR"] == str(_suite_tempdir)
    made = Path(tempfile.mkdtemp())
    assert made.parent == _suite_tempdir
    made.rmdir()


def test_a_doctest_that_makes_a_tempdir_writes_into_the_session_dir(_suite_tempdir):
    before = set(_suite_tempdir.iterdir())
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(tenfold.oinf.writer, "tenfold.oinf.writer")
    assert any("mkdtemp" in ex.source for t in tests for ex in t.examples)
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0
    assert set(_suite_tempdir.iterdir()) - before  # its directory landed here, not in /tmp


def test_subprocesses_inherit_the_session_dir(_suite_tempdir):
    out = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(out) == _suite_tempdir


def test_demo_without_a_dir_keeps_its_files_and_says_where(_suite_tempdir, capsys):
    from tenfold.cli import main

    assert main(["demo"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("demo files are in ")
    where = Path(last.removeprefix("demo files are in "))
    assert where.parent == _suite_tempdir and where.name.startswith("tenfold-demo-")
    assert any(where.iterdir())  # kept for the user to look at
