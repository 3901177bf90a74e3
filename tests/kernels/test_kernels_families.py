"""Meta-tests over every kernel family: twins, stubs, and a test file that covers each one.

Every family in ``_kernels.FAMILIES`` (one ``_ref_<family>.py`` each) must have
``tests/kernels/test_kernels_<family>.py`` that runs on both implementations (the ``kernels`` or
``impl`` fixture), holds a differential compiled-vs-reference test, and calls every public
function of the family.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from tenfold import _kernels

HERE = Path(__file__).resolve().parent
KERNELS_DIR = Path(_kernels.__file__).resolve().parent


def _functions(mod) -> set[str]:
    """Public functions of a kernel module (compiled: builtins; reference: defined there)."""
    names = set()
    for name, obj in vars(mod).items():
        if name.startswith("_") or not callable(obj) or inspect.isclass(obj):
            continue
        if inspect.isfunction(obj) and obj.__module__ != mod.__name__:
            continue  # imported helper
        if inspect.ismodule(obj):
            continue
        names.add(name)
    return names


def _reference_functions(family: str) -> set[str]:
    return _functions(_kernels.load(family, "reference"))


def test_missing_compiled_kernel_warns(monkeypatch):
    monkeypatch.delenv("TENFOLD_PUREPYTHON", raising=False)
    with pytest.warns(RuntimeWarning, match="compiled kernel 'nosuch'"):
        with pytest.raises(ImportError):  # no reference twin either
            _kernels.load("nosuch")


def test_every_family_has_both_twins():
    for family in _kernels.FAMILIES:
        ref = _kernels.load(family, "reference")
        if not _kernels.pure_python():
            comp = _kernels.load(family, "compiled")
            public = {n for n in dir(comp) if not n.startswith("_") and callable(getattr(comp, n))}
            missing = {n for n in public if not hasattr(ref, n)}
            assert not missing, f"{family}: reference twin lacks {missing}"
            extra = _reference_functions(family) - public
            assert not extra, f"{family}: compiled kernel lacks {extra}"
        assert ref is not None


def test_families_are_the_reference_files():
    found = sorted(p.stem[len("_ref_") :] for p in KERNELS_DIR.glob("_ref_*.py"))
    assert list(_kernels.FAMILIES) == found
    assert {"b64lines", "bitpack", "hashtable", "rs", "scan", "strhash", "tarscan", "walk"} <= set(
        found
    )


@pytest.mark.parametrize("family", _kernels.FAMILIES)
def test_stub_lists_every_function(family):
    """The ``.pyi`` stub declares exactly the public functions of the family (the signatures
    themselves are checked by ``mypy.stubtest`` in scripts/test.sh)."""
    tree = ast.parse((KERNELS_DIR / f"{family}.pyi").read_text())
    stubbed = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert stubbed == _reference_functions(family)
    assert (KERNELS_DIR / f"{family}.pyx").is_file()


@pytest.mark.parametrize("family", _kernels.FAMILIES)
def test_every_family_has_compiled_vs_reference_tests(family):
    path = HERE / f"test_kernels_{family}.py"
    assert path.is_file(), f"no test file for kernel family {family!r}: {path}"
    src = path.read_text()
    tree = ast.parse(src)
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    both = [t for t in tests if {a.arg for a in t.args.args} & {"kernels", "impl"}]
    assert both, f"{path.name}: no test uses the kernels/impl fixture (both implementations)"

    def compares(t: ast.FunctionDef) -> bool:
        body = ast.unparse(t)
        return "differential(" in body or ('"compiled"' in body and '"reference"' in body)

    diff = [t for t in tests if "differential" in t.name and compares(t)]
    assert diff, f"{path.name}: no differential compiled-vs-reference test"
    called = {
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
    missing = _reference_functions(family) - called
    assert not missing, f"{path.name}: never calls {sorted(missing)}"
