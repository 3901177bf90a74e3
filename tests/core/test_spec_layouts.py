"""Each ``_spec.py`` byte table (docstring) agrees with the record the code packs and unpacks.

A table is a heading ``<what> (<N> bytes, <RECORD>...)::`` followed by rows ``<offset> <name>
<type> <comment>`` with types ``u1``..``u8``, ``i1``..``i8``, ``<n>s`` (bytes) and ``<n>x``
(reserved). Every :class:`~tenfold.core.records.Record` of the module must have one, and the
magic a table shows must be the module's ``MAGIC`` (which the format registry defines).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import tenfold.fold._spec as fold_spec
import tenfold.oinf._spec as oinf_spec
import tenfold.taridx._spec as taridx_spec
from tenfold.core.records import Record
from tenfold.registry import FORMATS

#: each format's magic bytes, from its descriptor in the registry
MAGICS = {f.name: f.magics for f in FORMATS if f.magics}

SPECS = {"oinf": (oinf_spec, "<"), "fold": (fold_spec, ">"), "taridx": (taridx_spec, "<")}
HEADING = re.compile(r"^(?P<what>\S.*)\((?P<size>\d+) bytes, (?P<record>[A-Z][A-Z0-9_]*)\b.*\)::$")
ROW = re.compile(
    r"^\s+(?P<off>\d+)\s+(?P<name>[a-z_0-9]+)\s+(?P<type>[0-9]*[a-z][0-9]*)\b(?P<rest>.*)$"
)


def tables(module: ModuleType) -> dict[str, tuple[int, list[tuple[int, str, str, str]]]]:
    """Record name -> (size, rows) for every byte table of the module's docstring."""
    out: dict[str, tuple[int, list[tuple[int, str, str, str]]]] = {}
    lines = (module.__doc__ or "").splitlines()
    i = 0
    while i < len(lines):
        m = HEADING.match(lines[i])
        i += 1
        if not m:
            continue
        rows = []
        while i < len(lines) and not lines[i].strip():
            i += 1
        while i < len(lines) and lines[i].strip():
            r = ROW.match(lines[i])
            assert r, f"{module.__name__}: not a table row: {lines[i]!r}"
            rows.append((int(r["off"]), r["name"], r["type"], r["rest"].strip()))
            i += 1
        assert m["record"] not in out, m["record"]
        out[m["record"]] = (int(m["size"]), rows)
    return out


def _records(module: ModuleType) -> dict[str, Record]:
    return {k: v for k, v in vars(module).items() if isinstance(v, Record)}


def _dtype(typ: str, order: str) -> np.dtype:
    if m := re.fullmatch(r"(\d+)s", typ):
        return np.dtype(f"S{m[1]}")
    if m := re.fullmatch(r"(\d+)x", typ):
        return np.dtype(f"V{m[1]}")
    kind, size = typ[0], int(typ[1:])
    return np.dtype(f"{order if size > 1 else '|'}{kind}{size}")


def check_tables(module: ModuleType, order: str) -> None:
    """Assert that the module's byte tables and its records agree, field by field."""
    found = tables(module)
    records = _records(module)
    assert records, module.__name__
    assert set(found) == set(records), (sorted(found), sorted(records))
    for name, (size, rows) in found.items():
        rec = records[name]
        assert rec.size == size, name
        fields = rec.dtype.fields or {}
        table_names = [r[1] for r in rows]
        assert table_names == list(rec.dtype.names or ()), (name, table_names)
        for off, field, typ, _ in rows:
            fdt, foff = fields[field][:2]
            assert foff == rec.offset(field) == off, (name, field, off, foff)
            assert fdt == _dtype(typ, order), (name, field, typ, fdt)
        last_off, last, _, _ = rows[-1]
        assert last_off + rec.field_size(last) == size, (name, "table does not end the record")
        # the struct and the dtype read the same values from the same bytes
        values = tuple(
            b"x" * fields[n][0].itemsize if fields[n][0].kind == "S" else 1 for n in rec.names
        )
        raw = rec.pack(*values)
        assert len(raw) == size and rec.unpack(raw) == values
        view = np.frombuffer(raw, rec.dtype)[0]
        assert tuple(view[n].item() for n in rec.names) == values


@pytest.mark.parametrize("fmt", sorted(SPECS))
def test_every_record_has_a_table_that_matches(fmt: str) -> None:
    check_tables(*SPECS[fmt])


@pytest.mark.parametrize("fmt", sorted(SPECS))
def test_magic_defined_once(fmt: str) -> None:
    module, _ = SPECS[fmt]
    assert (module.MAGIC,) == MAGICS[fmt]
    (info,) = [f for f in FORMATS if f.name == fmt]
    assert info.matches(module.MAGIC + bytes(64)) and not info.matches(bytes(64))
    found = tables(module)
    shown = [
        rest
        for rows in (r for _, r in found.values())
        for off, name, _, rest in rows
        if name == "magic"
    ]
    assert shown, fmt
    literal = re.match(r'b"[^"]*"', shown[0])
    assert literal and ast.literal_eval(literal[0].replace("\\\\", "\\")) == module.MAGIC
    src = Path(module.__file__ or "").read_text(encoding="utf-8")
    code = src.split('"""', 2)[2]  # the module body after its docstring
    assert repr(module.MAGIC)[2:-1] not in code, f"{fmt}: magic bytes spelled in _spec again"


def test_ztensor_magics_come_from_the_registry() -> None:
    import tenfold.ztensor._spec as zt_spec
    import tenfold.ztensor._v1 as zt_v1
    import tenfold.ztensor._v2spec as zt_v2spec

    assert (zt_spec.MAGIC, zt_spec.MAGIC_V1, zt_spec.MAGIC_V2) == MAGICS["ztensor"]
    assert zt_v1.MAGIC_V1 is MAGICS["ztensor"][1]
    assert zt_v2spec.MAGIC is MAGICS["ztensor"][2]


def magic_literals(path: Path, magics: set[bytes]) -> list[str]:
    """Where the file's code (not its docstrings) spells one of ``magics`` as a bytes literal."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{path}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, bytes)
        and node.value in magics
        and id(node) not in docs
    ]


def test_magic_bytes_spelled_only_in_the_format_descriptors() -> None:
    magics = {m for ms in MAGICS.values() for m in ms}
    root = Path(oinf_spec.__file__ or "").parents[2]
    found = [
        hit
        for path in sorted(root.rglob("*.py"))
        if path.name != "_format.py"  # each format's descriptor for the registry
        for hit in magic_literals(path, magics)
    ]
    assert not found, found


def test_magic_literal_finder_finds_one(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text('"""Doc."""\nMAGIC = b"ZTEN1000"\n', encoding="utf-8")
    assert len(magic_literals(src, {b"ZTEN1000"})) == 1
    src.write_text('"""Doc."""\nMAGIC = b"ZTEN10" + b"00"\n', encoding="utf-8")
    assert magic_literals(src, {b"ZTEN1000"}) == []


@pytest.mark.parametrize(
    "table",
    [
        "    0   a  u4  x\n    5   b  u4  y\n",  # wrong offset
        "    0   a  u4  x\n    4   b  u2  y\n",  # wrong type
        "    0   a  u4  x\n    4   c  u4  y\n",  # wrong name
        "    0   a  u4  x\n",  # a field missing
    ],
)
def test_a_wrong_table_is_caught(table: str) -> None:
    """The checker is not vacuous: a table that disagrees with its record fails it."""
    fake = ModuleType("fake")
    fake.__doc__ = f"Head (8 bytes, HEAD)::\n\n{table}"
    fake.HEAD = Record("head", [("a", "<u4"), ("b", "<u4")], 8)  # type: ignore[attr-defined]
    with pytest.raises(AssertionError):
        check_tables(fake, "<")
    fake.__doc__ = "Head (8 bytes, HEAD)::\n\n    0   a  u4  x\n    4   b  u4  y\n"
    check_tables(fake, "<")
