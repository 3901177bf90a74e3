"""Structured exceptions: attributes, message built from them, pickling and copying."""

from __future__ import annotations

import copy
import pickle

import pytest

from tenfold.core.optional import MissingDependencyError
from tenfold.errors import (
    FIELDS,
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
)

CLASSES = [
    TenfoldError,
    FormatError,
    TruncatedError,
    UnsupportedError,
    LimitError,
    IntegrityError,
    UncorrectableError,
    EncodeError,
    LockedError,
]


def test_message_from_attributes() -> None:
    exc = FormatError(
        fmt="oinf", obj="tensor 'w1'", offset=0x1F8, field="data_nbytes", expected=36, got=32
    )
    assert (
        str(exc) == "oinf: tensor 'w1' at offset 0x1f8: data_nbytes mismatch; expected 36, got 32"
    )
    assert (exc.fmt, exc.obj, exc.field, exc.offset, exc.expected, exc.got) == (
        "oinf",
        "tensor 'w1'",
        "data_nbytes",
        0x1F8,
        36,
        32,
    )
    assert exc.rule is None and exc.line is None and exc.detail is None


def test_rule_and_line() -> None:
    exc = TruncatedError(
        fmt="oinf", obj="header", offset=0, detail="too small", expected=">= 64 bytes", got=10,
        rule="header-size",
    )  # fmt: skip
    assert (
        str(exc)
        == "oinf: header at offset 0x0: too small; expected >= 64 bytes, got 10 [header-size]"
    )
    assert exc.rule == "header-size"
    w = FormatError(fmt="wtxt", line=4, offset=0x20, detail="bad token")
    assert str(w) == "wtxt: line 4 at offset 0x20: bad token"
    assert w.line == 4 and w.lines == (4, 4)
    r = FormatError(fmt="wtxt", lines=(4, 6), detail="bad chunk")
    assert str(r) == "wtxt: lines 4-6: bad chunk" and r.line == 4


def test_positional_message_kept() -> None:
    exc = FormatError("something odd")
    assert str(exc) == "something odd" and exc.args == ("something odd",)
    assert all(getattr(exc, k) is None for k in FIELDS)
    with_attrs = IntegrityError("custom text", fmt="fold", offset=8)
    assert str(with_attrs) == "custom text" and with_attrs.offset == 8


def test_describe_carries_parts() -> None:
    msg = describe("zt", "tensor 'w'", offset=0x40, field="size", expected=36, got=32)
    exc = IntegrityError(msg)
    assert str(exc) == str(msg)
    assert type(exc.args[0]) is str  # a plain str crosses process boundaries without tenfold
    assert (exc.fmt, exc.obj, exc.offset, exc.field, exc.expected, exc.got) == (
        "zt",
        "tensor 'w'",
        0x40,
        "size",
        36,
        32,
    )
    assert exc.rule is None and exc.line is None and exc.lines is None and exc.detail is None
    assert exc.fields() == {**dict.fromkeys(FIELDS), **exc.fields()}
    assert IntegrityError(msg, rule="digest").rule == "digest"


@pytest.mark.parametrize("cls", CLASSES)
def test_pickle_and_copy(cls: type[TenfoldError]) -> None:
    exc = cls(fmt="fold", obj="chunk 3", offset=4096, detail="crc32c mismatch", expected=1, got=2)
    for clone in (
        pickle.loads(pickle.dumps(exc)),
        copy.copy(exc),
        copy.deepcopy(exc),
    ):
        assert type(clone) is cls
        assert str(clone) == str(exc)
        assert clone.fields() == exc.fields()
    legacy = pickle.loads(pickle.dumps(cls("plain message")))
    assert str(legacy) == "plain message" and legacy.offset is None


def test_pickle_missing_dependency() -> None:
    exc = MissingDependencyError("needs zstandard", module="zstandard", extra="zstd")
    clone = pickle.loads(pickle.dumps(exc))
    assert str(clone) == "needs zstandard"
    assert (clone.name, clone.extra) == ("zstandard", "zstd")


def test_evolve_rebuilds_message() -> None:
    exc = FormatError(fmt="zt", obj="object 'a'", detail="bad layout", rule="layout-rule")
    new = exc.evolve(detail="bad layout (v1)")
    assert type(new) is FormatError
    assert str(new) == "zt: object 'a': bad layout (v1) [layout-rule]"
