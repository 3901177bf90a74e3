"""Layer gates (#22): the formats sit below the front door and the CLI, and the CLI finds the
formats' commands through the registry.

No module under ``tenfold/formats/`` imports :mod:`tenfold.cli`, :mod:`tenfold.convert`, the
root package or its front module (:mod:`tenfold._dispatch`), function-level imports counted
(the import graph of ``test_structure``); ``cli.py`` imports no format package and holds no
string naming a registered format or one of its suffixes.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_structure import GRAPH, ROOT, _a_cycle

import tenfold.registry as reg

#: what the formats may not import: the front door and what sits above the formats
FRONT = ("tenfold", "tenfold.cli", "tenfold.convert", "tenfold._dispatch")


def _front_imports(graph: dict[str, dict[str, set[str]]]) -> dict[str, list[str]]:
    return {
        mod: sorted(t for t in targets if t in FRONT)
        for mod, targets in graph.items()
        if mod.startswith("tenfold.formats.") and any(t in FRONT for t in targets)
    }


def test_the_graph_sees_the_format_packages():
    assert "tenfold.formats.fold._cli" in GRAPH
    assert "tenfold.registry" in GRAPH["tenfold.formats.fold._format"]


def test_no_format_imports_the_cli_convert_or_the_root_package():
    found = _front_imports(GRAPH)
    assert not found, f"format modules importing the front door: {found}"


def test_the_cli_imports_no_format_package():
    for cli in ("tenfold.cli", "tenfold._cli_common"):  # the command line and its commands
        named = sorted(t for t in GRAPH[cli] if t.startswith("tenfold.formats"))
        assert not named, f"{cli} imports format packages: {named}"


def _format_words() -> set[str]:
    words = set()
    for fmt in reg.formats():
        words.add(fmt.name)
        words.update(fmt.suffixes)
    return words


def _bare_words() -> set[str]:
    """The formats' suffixes without their dot (``"zt"``, ``"safetensors"``): what a table in
    core keyed by a reader's short name would hold. Not checked outside core: ``"pt"`` is
    also the framework name safetensors users pass (``framework="pt"``)."""
    return {s[1:] for fmt in reg.formats() for s in fmt.suffixes}


def _named_formats(path: Path, bare: bool = False) -> list[tuple[int, str]]:
    """``(line, text)`` of each string constant in ``path`` that is a format's name or one of
    its suffixes, or with ``bare`` a suffix without its dot (a branch or a table on a format:
    help prose is longer text)."""
    words = _format_words() | (_bare_words() if bare else set())
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if node.value.lower() in words
    ]


def test_the_cli_names_no_format():
    found = _named_formats(ROOT / "cli.py")
    assert not found, f"cli.py names formats (ask the registry): {found}"


def test_the_name_finder_finds_one(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('if fmt == "oinf" or path.endswith((".zt", ".NPZ")):\n    pass\n')
    assert _named_formats(p) == [(1, "oinf"), (1, ".zt"), (1, ".NPZ")]


def test_core_names_no_format_not_even_bare(tmp_path):
    # core held `_TAIL_FIRST = {"zt"}` (which formats to fetch from the tail), a format's
    # short name that the check above, on names and dotted suffixes, did not see; what a
    # format is declares itself in its descriptor (Format.index_at_end)
    planted = tmp_path / "m.py"
    planted.write_text('_TAIL_FIRST = {"zt"}\n')
    assert _named_formats(planted) == [] and _named_formats(planted, bare=True) == [(1, "zt")]
    found = {
        path.relative_to(ROOT).as_posix(): hits
        for path in sorted((ROOT / "core").rglob("*.py"))
        if (hits := _named_formats(path, bare=True))
    }
    assert not found, f"core modules naming formats (let the format declare it): {found}"


#: modules that are a format's own outside ``tenfold/formats/`` (the sharded index's, the
#: torch distributed checkpoint directory's registration)
OWN = {
    "sharded/_index.py": "sharded",
    "_sharded_format.py": "sharded",
    "_dcp_format.py": "torch_dcp",
}


def _outside_the_formats() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("formats/"):
            continue
        own = OWN.get(rel)
        hits = [(n, w) for n, w in _named_formats(path) if w != own]
        if hits:
            found[rel] = hits
    return found


def test_no_module_outside_the_format_packages_names_a_format():
    # issue #22: 62 such names (branches, dict keys, `in` tuples) in convert, interop,
    # cli, _dispatch and sharded; every question about a format goes to the registry
    found = _outside_the_formats()
    assert not found, f"modules naming formats (ask the registry instead): {found}"


# -- no cycle between packages ---------------------------------------------------------------------
def _unit(mod: str, root: Path = ROOT) -> str:
    """The package ``mod`` belongs to: ``tenfold.formats.<name>`` for a format's modules,
    ``tenfold.<dir>`` for the modules of a directory under ``tenfold/`` (``core``,
    ``interop``, ``sharded``...), and a root-level module (``tenfold.cli``) its own."""
    parts = mod.split(".")
    if len(parts) > 2 and parts[1] == "formats" and (root / "formats" / parts[2]).is_dir():
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _rolled_up(graph: dict[str, dict[str, set[str]]], root: Path = ROOT) -> dict[str, set[str]]:
    """The module import graph (function-level imports counted) as a graph of packages."""
    edges: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        a = _unit(mod, root)
        edges.setdefault(a, set())
        for t in targets:
            b = _unit(t, root)
            edges.setdefault(b, set())
            if a != b:
                edges[a].add(b)
    return edges


def test_the_roll_up_finds_a_planted_package_cycle():
    # core.rangefile was interop._rangefile: the npz reader importing it while the interop
    # package imports the npz writer was a cycle between two packages, as planted here
    graph = {m: dict(ts) for m, ts in GRAPH.items()}
    graph["tenfold.formats.npz.reader"]["tenfold.interop._device"] = {"function"}
    cycle = _a_cycle(_rolled_up(graph))
    assert cycle is not None and "tenfold.formats.npz" in cycle and "tenfold.interop" in cycle
    assert _unit("tenfold.formats.npz.archive") == "tenfold.formats.npz"
    assert _unit("tenfold.core.sourcefile") == "tenfold.core"
    assert _unit("tenfold.sharded._reader") == "tenfold.sharded"
    assert _unit("tenfold.cli") == "tenfold.cli"
    assert _unit("tenfold") == "tenfold"


def test_no_cycle_between_packages():
    # issue #22: rolled up to packages, the imports ran in a cycle (npz <-> interop)
    edges = _rolled_up(GRAPH)
    assert "tenfold.formats.npz" in edges and "tenfold.core" in edges
    cycle = _a_cycle(edges)
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle or [])
