"""The doctest examples of every module in the package run and are right.

Modules are discovered by walking the installed package, so a new module's examples are run
without being listed anywhere.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import tenfold


def _modules() -> list[str]:
    names = ["tenfold"]
    for info in pkgutil.walk_packages(tenfold.__path__, prefix="tenfold."):
        if not info.name.endswith(".__main__"):  # importing it runs the CLI
            names.append(info.name)
    return sorted(names)


MODULES = _modules()


def test_discovery_finds_the_format_packages():
    # Guards the discovery itself: if walking the package found nothing, every doctest would pass.
    for name in (
        "tenfold.formats.ztensor.reader",
        "tenfold.formats.fold.reader",
        "tenfold.formats.oinf.writer",
        "tenfold.formats.wtxt._spec",
        "tenfold.formats.taridx.reader",
        "tenfold.core.mapped",
    ):
        assert name in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name, tempdir_in_tmp_path):  # their tempfile.mkdtemp() dirs go to tmp_path
    # Every module imports on a base install (optional integrations import lazily).
    mod = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(mod, name):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0
