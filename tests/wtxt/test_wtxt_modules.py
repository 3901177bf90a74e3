"""The wtxt package's module structure: every module imports on its own, the import graph has no
cycle, and no module reaches into another's private names.

The graph counts every ``from .x import ...`` wherever it stands (top level or inside a function):
an import deferred into a function still ties the two modules together.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tenfold.wtxt

PKG = Path(tenfold.wtxt.__file__ or "").parent
MODULES = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")

#: Import edges allowed to close a cycle, each with its reason (none: verify.py builds on the
#: parser and the checks, not on the reader, so WtxtFile.verify() calling it closes no cycle).
ALLOWED_EDGES: dict[tuple[str, str], str] = {}
#: ``(importer, module, name)`` private-name imports allowed, each with its reason.
ALLOWED_PRIVATE: dict[tuple[str, str, str], str] = {}


def imports(path: Path) -> list[tuple[str, str, int]]:
    """``(module, name, line)`` for each name the file imports from a sibling module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                if node.module:
                    out.append((node.module.split(".")[0], alias.name, node.lineno))
                else:  # from . import x: the sibling module x itself
                    out.append((alias.name, "", node.lineno))
    return out


def graph(pkg: Path) -> dict[str, set[str]]:
    mods = {p.stem for p in pkg.glob("*.py")}
    return {
        p.stem: {m for m, _, _ in imports(p) if m in mods and m not in (p.stem, "__init__")}
        for p in pkg.glob("*.py")
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    edges = graph(PKG)
    for (src, dst), reason in ALLOWED_EDGES.items():
        assert dst in edges[src], f"allowlisted edge {src} -> {dst} is gone; drop it ({reason})"
        edges[src].discard(dst)
    assert cycles(edges) == []


def private_imports(pkg: Path) -> list[tuple[str, str, str, int]]:
    mods = {p.stem for p in pkg.glob("*.py")}
    return [
        (p.stem, mod, name, line)
        for p in sorted(pkg.glob("*.py"))
        for mod, name, line in imports(p)
        if mod in mods and name.startswith("_")
    ]


def test_no_private_names_across_modules():
    found = [
        f"{src}.py:{line}: from .{mod} import {name}"
        for src, mod, name, line in private_imports(PKG)
        if (src, mod, name) not in ALLOWED_PRIVATE
    ]
    assert found == []


def test_private_import_finder_finds_one(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from .b import _x, y\n", encoding="utf-8")
    (tmp_path / "b.py").write_text("from . import a\n_x = y = 1\n", encoding="utf-8")
    assert private_imports(tmp_path) == [("a", "b", "_x", 2)]
    assert cycles(graph(tmp_path)) == [["a", "b"]]


_ALONE = """
import importlib, importlib.util, sys, types
spec = importlib.util.find_spec("tenfold.formats")
pkg = types.ModuleType("tenfold.formats.wtxt")  # the package without its __init__ (imports all)
pkg.__path__ = [spec.submodule_search_locations[0] + "/wtxt"]
sys.modules["tenfold.formats.wtxt"] = pkg
mod = importlib.import_module("tenfold.formats.wtxt." + sys.argv[1])
loaded = sorted(m for m in sys.modules if m.startswith("tenfold.formats.wtxt."))
print(" ".join(loaded))
"""


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_alone_in_a_fresh_interpreter(name):
    out = subprocess.run(
        [sys.executable, "-c", _ALONE, name],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    assert f"tenfold.formats.wtxt.{name}" in out.stdout.split()


#: Longest function (def line through its last line, docstring included) the package keeps.
MAX_FUNCTION_LINES = 80


def long_functions(pkg: Path, limit: int) -> list[str]:
    out = []
    for p in sorted(pkg.glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    out.append(f"{p.name}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_over_the_limit():
    assert long_functions(PKG, MAX_FUNCTION_LINES) == []


def test_long_function_finder_finds_one(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(5))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n\ndef g():\n    pass\n", encoding="utf-8")
    assert long_functions(tmp_path, 5) == ["m.py:1 f (6 lines)"]
