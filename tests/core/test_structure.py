"""Structure gates: no function in ``lib/tenfold`` runs over 80 lines; no import cycles.

Functions other helpers are still splitting are listed in ``ALLOWED`` with their length today:
such a function may not grow, and once it is split (or gone) its entry must be removed, so the
list only shrinks.

Imports are read from the source (``ast``), function-level ones included: a module that imports
another inside a function still depends on it. ``ALLOWED_IMPORTS`` lists the edges that close a
cycle today (all function-level); without them the graph must have no cycle, and each must still
exist and stay inside functions, so this list only shrinks too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tenfold

ROOT = Path(tenfold.__file__).resolve().parent
MAX_LINES = 80

#: "module path:qualified name" -> its length (def line to last line) when it was listed.
ALLOWED: dict[str, int] = {}


def _functions(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            assert node.end_lineno is not None
            yield name, node.end_lineno - node.lineno + 1
            yield from _functions(node, name + ".<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:
            yield from _functions(node, prefix)


def _lengths() -> dict[str, int]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for name, n in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            out[f"{rel}:{name}"] = max(n, out.get(f"{rel}:{name}", 0))
    return out


LENGTHS = _lengths()


def test_the_walk_sees_the_package():
    assert len(LENGTHS) > 500
    assert "convert.py:convert" in LENGTHS
    assert "formats/ztensor/reader.py:Reader.read" in LENGTHS


def test_no_function_over_80_lines():
    long = {k: n for k, n in LENGTHS.items() if n > MAX_LINES and k not in ALLOWED}
    assert not long, f"functions over {MAX_LINES} lines (split them): {long}"


def test_allowed_long_functions_only_shrink():
    grown = {k: (LENGTHS[k], n) for k, n in ALLOWED.items() if LENGTHS.get(k, 0) > n}
    assert not grown, f"listed long functions grew (now, listed): {grown}"
    done = sorted(k for k in ALLOWED if LENGTHS.get(k, 0) <= MAX_LINES)
    assert not done, f"split or gone: remove them from ALLOWED in {__file__}: {done}"


#: "importer -> imported" edges that close an import cycle today, each a function-level import.
ALLOWED_IMPORTS: dict[str, str] = {}


def _import_graph() -> dict[str, dict[str, set[str]]]:
    """``{module: {imported module: {"top" | "function"}}}`` over the package's sources."""
    mods: dict[str, tuple[Path, bool]] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    graph: dict[str, dict[str, set[str]]] = {m: {} for m in mods}
    for mod, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_function = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f)
        }
        # ``if TYPE_CHECKING:`` imports are for the type checker only: no run-time edge
        typing_only = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, ast.If)
            and isinstance(f.test, ast.Name)
            and f.test.id == "TYPE_CHECKING"
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    pkg = ".".join(base + ([node.module] if node.module else []))
                else:
                    pkg = node.module or ""
                # "from pkg import name": the submodule pkg.name when there is one, else pkg
                targets = [
                    f"{pkg}.{a.name}" if f"{pkg}.{a.name}" in mods else pkg for a in node.names
                ]
            else:
                continue
            where = "function" if id(node) in in_function else "top"
            for t in targets:
                if t in mods and t != mod:
                    graph[mod].setdefault(t, set()).add(where)
    return graph


GRAPH = _import_graph()


def _a_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph ``edges`` (as a list of modules), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(edges[v]):
            if state.get(w) == 1:
                return path[path.index(w) :] + [w]
            if w not in state and (found := visit(w)):
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(edges):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_import_graph_sees_function_level_imports():
    assert GRAPH["tenfold.convert"]["tenfold.sharded"] == {"function"}
    assert "top" in GRAPH["tenfold.formats.fold.verify"]["tenfold.formats.fold.reader"]
    assert _a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycles_outside_the_allow_list():
    allowed = {tuple(k.split(" -> ")) for k in ALLOWED_IMPORTS}
    edges = {m: {t for t in ts if (m, t) not in allowed} for m, ts in GRAPH.items()}
    cycle = _a_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_allowed_import_edges_only_shrink():
    for key in ALLOWED_IMPORTS:
        a, b = key.split(" -> ")
        assert b in GRAPH[a], f"{key} is gone: remove it from ALLOWED_IMPORTS in {__file__}"
        assert GRAPH[a][b] == {"function"}, f"{key} is now a top-level import: a real cycle"
    allowed = {tuple(k.split(" -> ")) for k in ALLOWED_IMPORTS}
    for key in ALLOWED_IMPORTS:
        a, b = key.split(" -> ")
        edges = {m: {t for t in ts if (m, t) not in allowed} for m, ts in GRAPH.items()}
        edges[a].add(b)
        assert _a_cycle(edges), f"{key} closes no cycle any more: remove it from ALLOWED_IMPORTS"


def test_readers_do_not_import_their_verifiers():
    # the verifier takes the reader; the package __init__ joins them (use_verifier)
    for reader, verifier in (
        ("tenfold.formats.fold.reader", "tenfold.formats.fold.verify"),
        ("tenfold.formats.oinf.reader", "tenfold.formats.oinf._verify"),
        ("tenfold.formats.ztensor.reader", "tenfold.formats.ztensor.verify"),
    ):
        assert verifier not in GRAPH[reader]
        assert reader in GRAPH[verifier]


def test_joined_verifiers_run(tmp_path):
    import tenfold.fold
    import tenfold.oinf
    import tenfold.ztensor

    for mod in (tenfold.fold, tenfold.oinf, tenfold.ztensor):
        path = mod.demo(tmp_path)
        with mod.open(path) as r:
            report = r.verify()
        assert report.ok and report.exit_code == 0, (mod.__name__, report.format())


#: "module -> imported private name" pairs allowed today (only shrinks)
ALLOWED_PRIVATE_NAMES: set[str] = set()


def _private_name_imports(root: Path = ROOT) -> set[str]:
    """``importer -> module.name`` for every ``from m import _name`` where ``_name`` is not a
    module (importing a private *module* such as ``_spec`` is the package's convention)."""
    found = set()
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mod = ".".join(parts[:-1] if is_pkg else parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            if node.level:
                base = base[: len(base) - node.level + 1]
                pkg = ".".join(base + ([node.module] if node.module else []))
            else:
                pkg = node.module or ""
            for a in node.names:
                name = a.name
                if not name.startswith("_") or name.startswith("__"):
                    continue
                sub = root.parent.joinpath(*pkg.split("."), name)
                if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists():
                    continue  # a private module
                if any(sub.parent.glob(f"{name}.*.so")) or any(sub.parent.glob(f"{name}.pyx")):
                    continue  # a compiled private module
                found.add(f"{mod} -> {pkg}.{name}")
    return found


def test_no_module_imports_another_modules_private_names():
    found = _private_name_imports()
    assert found <= ALLOWED_PRIVATE_NAMES, (
        f"private names imported: {sorted(found - ALLOWED_PRIVATE_NAMES)}"
    )
    gone = ALLOWED_PRIVATE_NAMES - found
    assert not gone, f"no longer imported: remove from ALLOWED_PRIVATE_NAMES: {sorted(gone)}"


def test_the_private_name_finder_finds_one(tmp_path):
    # the finder is not blind: a private name is found, a private module is not
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_mod.py").write_text("X = 1\n_y = 2\n")
    (pkg / "a.py").write_text("from ._mod import _y\nfrom . import _mod\nfrom ._mod import X\n")
    assert _private_name_imports(pkg) == {"pkg.a -> pkg._mod._y"}
