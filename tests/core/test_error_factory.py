"""One way to raise (issue #22 item 4): each format's bound error factory builds the same
message as :func:`describe` and carries the format and the object; no module of tenfold builds
a tenfold error from a plain message; and the session-wide check that every error tenfold
builds names its format and object does catch one that does not."""

from __future__ import annotations

import ast
import copy
import pickle
from pathlib import Path

import pytest

import _errcheck
from tenfold import errors
from tenfold.errors import (
    EncodeError,
    FormatError,
    IntegrityError,
    LimitError,
    LockedError,
    TenfoldError,
    TruncatedError,
    UncorrectableError,
    UnsupportedError,
    describe,
    factory,
)

LIB = _errcheck.LIB
METHODS = {
    "format": FormatError,
    "truncated": TruncatedError,
    "unsupported": UnsupportedError,
    "limit": LimitError,
    "integrity": IntegrityError,
    "uncorrectable": UncorrectableError,
    "encode": EncodeError,
    "locked": LockedError,
}
PARTS = [
    {},
    {"detail": "bad magic"},
    {"offset": 0x1F8, "field": "data_nbytes", "expected": 36, "got": 32},
    {"field": "name", "detail": "empty name"},
    {"offset": 0, "detail": "too many", "expected": "<= 10", "got": 12},
]


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("parts", PARTS)
def test_each_method_gives_its_class_and_describes_message(method, parts):
    exc = getattr(factory("oinf"), method)("tensor 'w1'", **parts)
    assert type(exc) is METHODS[method]
    assert str(exc) == describe("oinf", "tensor 'w1'", **parts)
    assert (exc.fmt, exc.obj) == ("oinf", "tensor 'w1'")
    assert {k: getattr(exc, k) for k in parts} == parts


def test_rule_and_lines_render_as_the_keywords_do():
    E = factory("wtxt")
    exc = E.format(None, lines=(3, 5), offset=0x20, detail="bad chunk", rule="R7")
    assert str(exc) == str(FormatError(fmt="wtxt", lines=(3, 5), offset=0x20, detail="bad chunk",
                                       rule="R7"))  # fmt: skip
    assert str(exc) == "wtxt: lines 3-5 at offset 0x20: bad chunk [R7]" and exc.line == 3


def test_a_message_given_is_kept_with_the_parts():
    exc = factory("npz").encode("tensor 'b'", detail="has dtype |V0", message="npz: tensor 'b' x")
    assert str(exc) == "npz: tensor 'b' x" and (exc.fmt, exc.obj, exc.detail) == (
        "npz",
        "tensor 'b'",
        "has dtype |V0",
    )


@pytest.mark.parametrize("clone", [copy.copy, lambda e: pickle.loads(pickle.dumps(e))])
def test_factory_errors_copy_and_pickle_with_their_parts(clone):
    for exc in (
        factory("zt").truncated("tensor 'w'", offset=64, detail="ends early"),
        factory("zt").integrity("tensor 'w'", detail="x", message="zt: tensor 'w' is damaged"),
    ):
        again = clone(exc)
        assert type(again) is type(exc) and str(again) == str(exc)
        assert again.fields() == exc.fields()


def test_recast_keeps_message_and_parts_and_fills_the_names():
    inner = factory("zt").format("tensor 'w'", offset=8, field="name", detail="empty name")
    outer = factory("zt").recast(EncodeError, inner, "ignored: inner has an object")
    assert type(outer) is EncodeError and str(outer) == str(inner)
    assert outer.fields() == inner.fields()
    plain = factory("zt").recast(EncodeError, ValueError("indptr must grow"), "tensor 'm'")
    assert str(plain) == "indptr must grow" and (plain.fmt, plain.obj) == ("zt", "tensor 'm'")
    more = factory("taridx").recast(IntegrityError, inner, message=f"{inner}; rebuild")
    assert str(more) == f"{inner}; rebuild" and more.offset == 8


def test_each_format_has_its_factory():
    import tenfold.formats.fold._spec as fold
    import tenfold.formats.oinf._spec as oinf
    import tenfold.formats.taridx._spec as taridx
    import tenfold.formats.wtxt._spec as wtxt
    import tenfold.formats.ztensor._spec as zt

    for spec in (fold, oinf, taridx, wtxt, zt):
        assert isinstance(spec.E, errors.ErrorFactory) and spec.E.fmt == spec.FMT


def test_local_factories_build_through_the_format_factory():
    from tenfold.formats.oinf._parse import fail
    from tenfold.formats.wtxt._text import err
    from tenfold.formats.ztensor._v2spec import reject

    exc = reject("name", "object 'a'", field="name", detail="empty name")
    assert (exc.fmt, exc.obj, exc.rule) == ("zt", "object 'a'", "name")
    with pytest.raises(FormatError) as info:
        fail(FormatError, "R1", "header", 0, "bad magic")
    assert (info.value.fmt, info.value.obj, info.value.rule) == ("oinf", "header", "R1")
    exc = err(FormatError, 4, 0x40, "bad field", last_line=6)
    assert (exc.fmt, exc.lines, str(exc)) == ("wtxt", (4, 6), "wtxt: lines 4-6 at offset 0x40: "
                                              "bad field")  # fmt: skip


# -- no plain messages ------------------------------------------------------------------------
CLASSES = {c.__name__ for c in METHODS.values()} | {"TenfoldError"}


def _plain_raises(tree: ast.AST) -> list[int]:
    """Lines that build a tenfold error from a bare message (a literal, an f-string or
    ``str(...)``) with no ``fmt=``: the form that loses the structured parts."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if isinstance(f, ast.Call) and isinstance(f.func, ast.Name) and f.func.id == "type":
            name = "TenfoldError"  # type(exc)(message): the class of a caught error, rebuilt
        if name not in CLASSES or not node.args:
            continue
        first = node.args[0]
        bare = isinstance(first, (ast.JoinedStr, ast.Constant)) or (
            isinstance(first, ast.Call) and isinstance(first.func, ast.Name)
            and first.func.id == "str"
        )  # fmt: skip
        if bare and not any(k.arg == "fmt" for k in node.keywords):
            lines.append(node.lineno)
    return lines


def _plain_by_module() -> dict[str, list[int]]:
    out = {}
    for path in sorted(LIB.rglob("*.py")):
        found = _plain_raises(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            out[path.relative_to(LIB).as_posix()] = found
    return out


PLAIN = _plain_by_module()


def test_no_tenfold_error_is_built_from_a_plain_message():
    assert PLAIN == {}, "raise through the format's factory (tenfold.errors.factory) instead"


def test_the_plain_message_finder_finds_one():
    src = """
raise FormatError(f"zt: {x}")
raise EncodeError(str(e))
raise type(exc)(f"{exc}; rebuild")
raise FormatError("a", fmt="b")
raise FormatError(describe("zt", "header", detail="bad magic"))
"""
    assert _plain_raises(ast.parse(src)) == [2, 3, 4]


# -- the session-wide check -------------------------------------------------------------------
def _build_in(path: Path, source: str) -> None:
    exec(compile(source, str(path), "exec"), {"errors": errors, "factory": factory})


def test_the_session_check_records_an_unnamed_error_built_by_tenfold():
    _errcheck.take()
    try:
        _build_in(LIB / "formats" / "_planted.py", "errors.FormatError('zt: bad magic')")
        _build_in(LIB / "formats" / "_planted.py", "errors.FormatError(fmt='zt', detail='x')")
        # evolve() is the caller's: a prefix-less copy asked for by tenfold is recorded there
        _build_in(
            LIB / "formats" / "_planted.py",
            "\nerrors.FormatError(fmt='zt', obj='header', detail='y').evolve(fmt=None)",
        )
        found = _errcheck.take()
        assert [r.split(": ", 1)[0] for r in found] == ["formats/_planted.py:1"] * 2 + [
            "formats/_planted.py:2"
        ], found
        # named ones and errors built outside tenfold are not recorded
        _build_in(LIB / "formats" / "_planted.py", "factory('zt').format('header', detail='x')")
        _build_in(LIB / "formats" / "_planted.py", "errors.FormatError(fmt='wtxt', line=3)")
        _build_in(Path(__file__), "errors.FormatError('a test may build any error')")
        clone = pickle.loads(pickle.dumps(TenfoldError(fmt="zt", obj="x")))
        assert clone.obj == "x" and _errcheck.take() == []
    finally:
        _errcheck.take()  # leave nothing for the teardown check


@pytest.mark.parametrize(
    ("what", "fmt", "obj", "shown"),
    [
        ("fold: a TSAV chunk", "fold", "a TSAV chunk", "fold: a TSAV chunk needs"),
        ("tenfold: reading a URL", "tenfold", "reading a URL", "reading a URL needs"),
        ("this command", "tenfold", "this command", "this command needs"),
    ],
)
def test_a_missing_dependency_names_format_and_object(what, fmt, obj, shown):
    from tenfold.core.optional import MissingDependencyError, require

    with pytest.raises(MissingDependencyError) as info:
        require("tenfold_no_such_module", extra="torch", what=what)
    exc = info.value
    assert (exc.fmt, exc.obj, exc.name, exc.extra) == (fmt, obj, "tenfold_no_such_module", "torch")
    # the CLI drops a "tenfold: " prefix with evolve(fmt=None): the install hint stays
    shown_by_cli = str(exc.evolve(fmt=None)) if exc.fmt == "tenfold" else str(exc)
    assert shown_by_cli.startswith(shown) and shown_by_cli.endswith('"tenfold[torch]"')
    again = exc.evolve(obj="x")
    assert type(again) is MissingDependencyError and (again.name, again.extra, again.obj) == (
        "tenfold_no_such_module",
        "torch",
        "x",
    )
