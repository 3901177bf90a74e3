"""Structure gate (#22): no module reads another module's private attributes.

``x._name`` (and ``getattr``/``hasattr``/``setattr``/``delattr`` of ``x`` and a literal
``"_name"``) where ``x`` is not ``self``, ``cls``, ``super()`` or ``type(self)`` is allowed only
when a class of the *same* module defines ``_name`` (as a class attribute, method or annotation,
or by assigning ``self._name``): a module may reach into the objects of its own classes, never
into another module's. What another module needs gets a public, documented method or property
on the owning class.

Private names of other libraries that tenfold has to use are listed in ``FOREIGN`` with the
reason; that list only shrinks, and no entry may name a private attribute a tenfold class
defines (so a tenfold class's private cannot hide there).
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_structure import ROOT

#: "module path: expression" -> why tenfold reads that other library's private name (only shrinks)
FOREIGN: dict[str, str] = {
    "core/_http.py: fs._call_s3": "s3fs's one way to send a GetObject with Range and IfMatch",
    "core/source.py: fs._info": "fsspec's async API: the coroutine behind fs.info (timeouts)",
    "formats/taridx/_remote_reads.py: fs._call_s3": "s3fs: GetObject giving the ETag with the body",
    "formats/taridx/_remote_reads.py: fs._cat_file": "fsspec's async API (coroutine of cat_file)",
    "formats/taridx/_remote_reads.py: fs._ls": "fsspec's async API (coroutine of ls)",
    "formats/taridx/_remote_reads.py: fs._strip_protocol": "fsspec: a URL as its filesystem's path",
    "formats/npz/archive.py: self._zip._lock": "the lock zipfile's member readers seek the "
    "shared file under (a seek of ours must hold it too)",
}

#: names in FOREIGN that tenfold classes happen to use for their own attributes too (the entry
#: is the other library's: ``self._zip`` is a ``zipfile.ZipFile``)
COMMON = {"_lock"}

#: "module path: expression" of tenfold's own cross-module private reads allowed today (only
#: shrinks): zTensor's plan kernel twin walks CBOR items with the CBOR kernel twin's walkers, as
#: the compiled kernels share C functions; a kernel module's public names must match its
#: compiled twin's, so these need their own shared module (a move of the dcbor twin's walkers)
ALLOWED: set[str] = {
    "_kernels/_ref_ztplan.py: _ref_dcbor._head",
    "_kernels/_ref_ztplan.py: _ref_dcbor._item",
}

#: public API spelled with an underscore: namedtuple's methods and ``os._exit``
PUBLIC = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
PUBLIC_EXPR = {"os._exit"}

_SELF = {"self", "cls", "mcs"}
_ATTR_FUNCS = {"getattr", "hasattr", "setattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_self(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _SELF
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "super":
            return True
        if node.func.id == "type" and len(node.args) == 1:
            return _is_self(node.args[0])
    return False


def _literal_attr(node: ast.Call) -> str | None:
    """``"_x"`` of ``getattr(obj, "_x", ...)`` and its kin, else None."""
    if isinstance(node.func, ast.Name) and node.func.id in _ATTR_FUNCS and len(node.args) >= 2:
        arg = node.args[1]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
    return None


def defined_names(tree: ast.AST) -> set[str]:
    """Attribute names the module's classes define: class-body names and ``self.x`` stores."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(st.name)
                elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                    for t in targets:
                        names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if _is_self(node.value):
                names.add(node.attr)
        elif isinstance(node, ast.Call) and _literal_attr(node) and _is_self(node.args[0]):
            if isinstance(node.func, ast.Name) and node.func.id == "setattr":
                names.add(str(_literal_attr(node)))
    return names


def cross_module_reads(source: str) -> list[tuple[int, str, str]]:
    """``(line, expression, name)`` of each private attribute of an object other than
    ``self``/``cls`` whose name no class of this module defines."""
    tree = ast.parse(source)
    own = defined_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not _is_self(node.value):
            name, obj = node.attr, node.value
            expr = f"{ast.unparse(obj)}.{name}"
        elif isinstance(node, ast.Call) and _literal_attr(node) and not _is_self(node.args[0]):
            name, obj = str(_literal_attr(node)), node.args[0]
            expr = f"{ast.unparse(obj)}.{name}"
        else:
            continue
        if _private(name) and name not in own and name not in PUBLIC and expr not in PUBLIC_EXPR:
            found.append((node.lineno, expr, name))
    return sorted(found)


def _scan(root: Path = ROOT) -> dict[str, list[tuple[int, str, str]]]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        got = cross_module_reads(path.read_text(encoding="utf-8"))
        if got:
            out[path.relative_to(root).as_posix()] = got
    return out


FOUND = _scan()


def test_no_module_reads_another_modules_private_attributes():
    bad = [
        f"{mod}:{line}: {expr}"
        for mod, reads in FOUND.items()
        for line, expr, _name in reads
        if f"{mod}: {expr}" not in FOREIGN and f"{mod}: {expr}" not in ALLOWED
    ]
    assert not bad, "private attributes read across modules (give the owner a public method):\n" + (
        "\n".join(bad)
    )


def test_the_allow_lists_only_shrink():
    seen = {f"{mod}: {expr}" for mod, reads in FOUND.items() for _line, expr, _name in reads}
    gone = (set(FOREIGN) | ALLOWED) - seen
    assert not gone, f"no longer read: remove from FOREIGN/ALLOWED: {sorted(gone)}"


def test_no_foreign_entry_names_a_tenfold_private():
    ours: set[str] = set()
    for path in ROOT.rglob("*.py"):
        ours |= defined_names(ast.parse(path.read_text(encoding="utf-8")))
    hidden = {k for k in FOREIGN if k.rsplit(".", 1)[1] in ours - COMMON}
    assert not hidden, f"these name a private attribute some tenfold class defines: {hidden}"


def test_the_checker_finds_a_planted_read():
    src = """
class Mine:
    _limit = 3

    def __init__(self, other):
        self._own = 1
        self._peer = other._hidden          # another module's private: found
        setattr(self, "_set", 2)

    def same(self, m: "Mine"):
        return m._own + m._limit + m._set + type(self)._limit + super()._anything

def f(r, fs):
    r._cache = None                         # a write is found too
    x = getattr(r, "_shards", None)         # so is a literal getattr
    return r._own, fs._cat_file, t._replace(a=1), os._exit
"""
    got = [(line, expr) for line, expr, _name in cross_module_reads(src)]
    assert got == [(7, "other._hidden"), (14, "r._cache"), (15, "r._shards"), (16, "fs._cat_file")]


def test_the_scan_sees_the_package():
    # the walk is not blind: the foreign reads it must see are there
    assert ("npz" in " ".join(FOUND)) and any("_remote_reads" in m for m in FOUND)
