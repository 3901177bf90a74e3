"""Sphinx configuration for tenfold's documentation (``pip install .[docs]``)."""

project = "tenfold"
author = "tenfold developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.doctest"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
html_theme = "alabaster"


def _asv_pages(app, exc):
    """asv's pages of the stored results (asv_bench/results) into <html>/asv, linked from
    asv.md; without asv installed the page's links stay empty and the build says so."""
    import pathlib
    import subprocess
    import sys

    if exc is not None or app.builder.format != "html":
        return
    root = pathlib.Path(__file__).resolve().parents[1]
    out = pathlib.Path(app.outdir) / "asv"
    cmd = [sys.executable, str(root / "scripts" / "perf_docs.py"), "publish", str(out)]
    if subprocess.run(cmd).returncode != 0:
        from sphinx.util import logging

        logging.getLogger(__name__).warning("asv pages not built (is asv installed?)")


def setup(app):
    app.connect("build-finished", _asv_pages)
