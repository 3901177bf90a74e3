"""Sphinx configuration for tenfold's documentation (``pip install .[docs]``)."""

project = "tenfold"
author = "tenfold developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.doctest"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
html_theme = "alabaster"
