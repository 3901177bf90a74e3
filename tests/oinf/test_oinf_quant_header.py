"""OINF v2 quantization header: each enumerated field refused with its rule, offset and values."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import tenfold.oinf as oinf
from tenfold.errors import FormatError
from tenfold.oinf import _spec as S

CASES = [
    # field, bad value, rule, message tail
    ("scheme", 3, "quant-scheme", "unknown quant scheme; expected 1 or 2, got 3 [quant-scheme]"),
    ("scale_mode", 0, "quant-scale-mode", "unknown scale_mode; expected 1 or 2, got 0"),
    ("zp_mode", 7, "quant-zp-mode", "unknown zp_mode; expected 0, 1 or 2, got 7"),
    ("reserved", 5, "quant-reserved", "quant reserved must be 0; expected 0, got 5"),
]


@pytest.mark.parametrize(("field", "value", "rule", "tail"), CASES)
def test_quant_header_field_refused(
    conformance: Path, tmp_path: Path, field: str, value: int, rule: str, tail: str
) -> None:
    src = conformance / "oinf" / "v2" / "13_v2_quant_per_tensor.oinf"
    with oinf.open(src) as r:
        (qo,) = [e[8] for e in r._t.tensors if e[7]]
    raw = bytearray(src.read_bytes())
    at = qo + S.QUANT.offset(field)
    struct.pack_into("<I", raw, at, value)
    bad = tmp_path / "bad.oinf"
    bad.write_bytes(bytes(raw))
    with pytest.raises(FormatError) as info, oinf.open(bad) as r:
        r.tensor("q")
    exc = info.value
    assert (exc.rule, exc.offset, exc.obj, exc.got) == (rule, at, "tensor 'q'", value)
    assert str(exc) == f"oinf: tensor 'q' at offset {at:#x}: {tail}" + (
        "" if tail.endswith("]") else f" [{rule}]"
    )
