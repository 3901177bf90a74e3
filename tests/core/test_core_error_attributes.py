"""Corrupt files of every format raise structured errors: the attributes are set and agree with
the message (format prefix, object, offset, expected/got, rule, line), and survive pickling."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

import tenfold
import tenfold.taridx as tx
from tenfold.errors import TenfoldError

ARRAYS = {"w": np.arange(24, dtype=np.float32).reshape(4, 6), "b": np.arange(5, dtype=np.int16)}
SUFFIX = {"ztensor": "zt", "oinf": "oinf", "fold": "fold", "wtxt": "wtxt"}


def _show(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def _variants(raw: bytes) -> list[bytes]:
    """Truncations and single-byte flips at a fixed sample of positions."""
    out = [raw[:n] for n in (3, 8, 16, 40, len(raw) // 2, len(raw) - 1)]
    rng = np.random.default_rng(11)
    for pos in sorted(set(rng.integers(0, len(raw), 48).tolist())):
        b = bytearray(raw)
        b[pos] ^= 0x5A
        out.append(bytes(b))
    return out


def check_consistent(exc: TenfoldError) -> None:
    """Every attribute that is set shows in the message, where tenfold's form puts it."""
    msg = str(exc)
    assert exc.fmt, msg
    assert msg.startswith(f"{exc.fmt}: "), msg
    if exc.obj is not None:
        assert f": {exc.obj}" in msg, msg
    if exc.offset is not None:
        assert f" at offset {exc.offset:#x}" in msg, msg
    if exc.field is not None:
        assert f"{exc.field} mismatch" in msg or f"{exc.field}: " in msg, msg
    if exc.detail is not None:
        assert exc.detail in msg, msg
    if exc.expected is not None or exc.got is not None:
        assert f"; expected {_show(exc.expected)}, got {_show(exc.got)}" in msg, msg
    if exc.rule is not None:
        assert msg.endswith(f" [{exc.rule}]"), msg
    if exc.line is not None:
        assert exc.lines is not None and exc.lines[0] == exc.line
        assert f"line {exc.line}" in msg or f"lines {exc.line}-" in msg, msg
    clone = pickle.loads(pickle.dumps(exc))
    assert type(clone) is type(exc) and str(clone) == msg and clone.fields() == exc.fields()


def _errors(path: Path, variants: list[bytes], read) -> list[TenfoldError]:
    got = []
    for raw in variants:
        path.write_bytes(raw)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                read(path)
        except TenfoldError as exc:
            got.append(exc)
    return got


@pytest.mark.parametrize("fmt", sorted(SUFFIX))
def test_corrupt_files_raise_consistent_attributes(fmt: str, tmp_path: Path) -> None:
    good = tmp_path / f"good.{SUFFIX[fmt]}"
    tenfold.save(good, ARRAYS)
    errors = _errors(
        tmp_path / f"bad.{SUFFIX[fmt]}",
        _variants(good.read_bytes()),
        lambda p: tenfold.load(p, copy=True),
    )
    assert len(errors) >= 20, fmt  # most corruptions are caught (the rest change only values)
    for exc in errors:
        check_consistent(exc)
    own = [e for e in errors if e.fmt == {"ztensor": "zt"}.get(fmt, fmt)]
    assert len(own) >= 10, fmt
    assert sum(e.offset is not None for e in own) >= len(own) // 2, fmt
    if fmt == "oinf":
        assert all(e.rule for e in own)  # every OINF refusal names its rule
    if fmt == "wtxt":
        assert all(e.line for e in own)  # every WTXT refusal names its line


def test_corrupt_taridx_raises_consistent_attributes(conformance: Path, tmp_path: Path) -> None:
    raw = (conformance / "taridx" / "basic_ustar" / "train.taridx").read_bytes()

    def read(p: Path) -> None:
        with tx.Index.open(p) as idx:
            idx.validate_rows()

    errors = _errors(tmp_path / "bad.taridx", _variants(raw), read)
    assert len(errors) >= 10
    for exc in errors:
        check_consistent(exc)
    assert any(e.field for e in errors) and any(e.offset is not None for e in errors)


def test_verifiers_report_from_attributes(tmp_path: Path) -> None:
    p = tmp_path / "a.oinf"
    tenfold.save(p, ARRAYS)
    p.write_bytes(p.read_bytes()[:40])
    with pytest.raises(TenfoldError) as info:
        tenfold.load(p)
    rep = tenfold.oinf.verify(p)
    (row,) = rep.errors
    assert (row.obj, row.offset, row.message) == (
        info.value.obj,
        info.value.offset,
        str(info.value),
    )
    f = tmp_path / "a.fold"
    tenfold.save(f, ARRAYS)
    f.write_bytes(b"XXXX" + f.read_bytes()[4:])
    with pytest.raises(TenfoldError) as info:
        tenfold.fold.Reader(f)
    (row,) = tenfold.fold.verify(f).errors
    assert (row.obj, row.offset) == (info.value.obj, info.value.offset)


def test_corrupt_ztensor_v2_names_its_rule(tmp_path: Path) -> None:
    good = tmp_path / "good.zt"
    tenfold.save(good, ARRAYS, generation=2)
    raw = good.read_bytes()
    # v2 aligns its parts far apart: flip bytes where the structure is (head and manifest)
    variants = [raw[:n] for n in (3, 16, 64, len(raw) - 1)]
    for pos in [*range(0, 64, 7), *range(len(raw) - 600, len(raw), 29)]:
        b = bytearray(raw)
        b[pos] ^= 0x21
        variants.append(bytes(b))
    errors = _errors(tmp_path / "bad.zt", variants, lambda p: tenfold.load(p, copy=True))
    assert len(errors) >= 10
    for exc in errors:
        check_consistent(exc)
    ruled = [e for e in errors if e.rule]
    assert len(ruled) >= len(errors) // 2  # zTensor v2 refusals name the spec rule they break
