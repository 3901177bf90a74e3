"""The base install is the whole product: every import that runs when a tenfold module is
imported is the standard library, tenfold itself or a core dependency of ``pyproject.toml``.

Optional integrations (torch, scipy, fsspec, tqdm, pyrage ...) may only be imported inside
functions (through :func:`tenfold.core.optional.require`), where a missing one gives one line
naming the extra instead of breaking ``import tenfold.<format>`` or an unrelated command.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "tenfold"

#: Import names of distributions whose import name is not their normalised project name.
IMPORT_NAMES = {"pyyaml": "yaml", "google-crc32c": "google_crc32c"}


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _import_name(requirement: str) -> str:
    dist = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert dist is not None, requirement
    name = re.sub(r"[-_.]+", "-", dist.group(0)).lower()
    return IMPORT_NAMES.get(name, name.replace("-", "_"))


def core_imports() -> set[str]:
    return {_import_name(r) for r in _project()["dependencies"]}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, top-level package) of every import that runs at import time: module and class
    bodies and the blocks inside them (``try``, ``if``, ``with``), but no function body and no
    ``if TYPE_CHECKING:`` block. Relative imports are tenfold's own and are left out."""
    found: list[tuple[int, str]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, a.name.split(".")[0]) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0 and node.module is not None:
                    found.append((node.lineno, node.module.split(".")[0]))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.ClassDef):
                visit(node.body)
            elif isinstance(node, ast.Try | ast.TryStar):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.With | ast.For | ast.While):
                visit(node.body)
                visit(node.orelse if not isinstance(node, ast.With) else [])

    visit(tree.body)
    return found


def _allowed() -> set[str]:
    return set(sys.stdlib_module_names) | core_imports() | {"tenfold", "__future__"}


SOURCES = sorted(LIB.rglob("*.py"))


def test_sources_found():
    assert len(SOURCES) > 40 and (LIB / "cli.py") in SOURCES


#: Modules that import an extra at module level, in a ``try`` whose ``except ImportError``
#: leaves the module importable (its classes refuse with one line naming the extra), with why
#: the import cannot move into a function. Only shrinks.
OPTIONAL_AT_IMPORT: dict[str, tuple[str, str]] = {
    "interop/dcp.py": (
        "torch",
        "its classes subclass torch.distributed.checkpoint's StorageWriter/StorageReader, "
        "which must exist when the class statement runs; without torch the module imports and "
        "the classes raise MissingDependencyError (tests/dcp/test_dcp_files.py blocks torch)",
    ),
}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(LIB)))
def test_module_level_imports_are_core(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    allowed = _allowed()
    extra = OPTIONAL_AT_IMPORT.get(path.relative_to(LIB).as_posix())
    if extra is not None:
        allowed = allowed | {extra[0]}
        assert "except ImportError" in path.read_text(encoding="utf-8"), path
    bad = [
        f"line {line}: {name}" for line, name in module_level_imports(tree) if name not in allowed
    ]
    assert not bad, (
        f"{path.relative_to(ROOT)} imports at module level what the base install lacks "
        f"({', '.join(bad)}); make it a core dependency in pyproject.toml or import it inside "
        "the function that needs it, through tenfold.core.optional.require"
    )


def test_the_checker_sees_what_it_must():
    tree = ast.parse(
        "import os\nimport torch.nn\nfrom scipy import sparse\nfrom . import x\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import fsspec\n"
        "try:\n    import tqdm\nexcept ImportError:\n    tqdm = None\n"
        "class C:\n    import aiohttp\n"
        "def f():\n    import pyrage\n"
    )
    names = [n for _, n in module_level_imports(tree)]
    assert names == ["os", "torch", "scipy", "typing", "tqdm", "aiohttp"]
    assert not {"torch", "scipy", "tqdm", "aiohttp"} & _allowed()


def test_core_dependencies_cover_every_format():
    # what every format needs to read, write and verify is in the base install
    core = core_imports()
    assert {
        "numpy",
        "ml_dtypes",
        "zstandard",
        "crc32c",
        "cbor2",
        "xxhash",
        "pybase64",
        "cryptography",
    } <= core
    assert not {"torch", "scipy", "fsspec", "tqdm", "pyrage", "safetensors"} & core


def test_every_integration_has_its_extra():
    extras = _project()["optional-dependencies"]
    assert {
        "torch",
        "scipy",
        "remote",
        "progress",
        "crypto",
        "test",
        "peers",
        "dev",
        "bench",
        "docs",
    } <= set(extras)
    from tenfold.core.optional import EXTRAS

    named = {_import_name(r) for reqs in extras.values() for r in reqs}
    assert set(EXTRAS) <= named


def test_version_is_single_sourced(capsys: pytest.CaptureFixture[str]) -> None:
    """pyproject.toml names no version of its own: setuptools reads ``tenfold.__version__``."""
    import tenfold
    from tenfold.cli import main

    with open(ROOT / "pyproject.toml", "rb") as f:
        conf = tomllib.load(f)
    assert "version" not in conf["project"] and "version" in conf["project"]["dynamic"]
    assert conf["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tenfold.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", tenfold.__version__)
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"tenfold {tenfold.__version__}\n"
