"""The strict parser: every violation is a tenfold error naming the line; fuzzing."""

import re

import numpy as np
import pytest
from _wtxt_helpers import write
from hypothesis import given, settings
from hypothesis import strategies as st

from tenfold import errors, wtxt
from tenfold.errors import FormatError, IntegrityError, TruncatedError, UnsupportedError


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    p = tmp_path_factory.mktemp("p") / "g.wtxt"
    arrays = {"a": np.arange(40, dtype=np.float64), "b": np.arange(6, dtype=np.int8)}
    write(p, arrays, rows_per_chunk=16, audit={"note": "x y"})
    return p.read_bytes()


def parse_err(data: bytes, cls=FormatError, match=None):
    with pytest.raises(cls) as ei:
        wtxt.read(data)
    msg = str(ei.value)
    assert msg.startswith("wtxt: ")
    if match is not None:
        assert re.search(match, msg), msg
    return msg


def lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def join(ls: list[bytes]) -> bytes:
    return b"\n".join(ls)


def find(ls, prefix: bytes, nth=0) -> int:
    return [i for i, line in enumerate(ls) if line.startswith(prefix)][nth]


def first_b64(ls) -> int:
    return find(ls, b"ch ") + 1


def test_good_reads(good):
    got = wtxt.read(good)
    assert list(got) == ["a", "b"]


@pytest.mark.parametrize("where", ["meta", "arr", "b64", "endch"])
def test_crlf_line_named(good, where):
    ls = lines(good)
    i = {"meta": 1, "arr": find(ls, b"arr "), "b64": first_b64(ls), "endch": find(ls, b"endch")}[
        where
    ]
    ls[i] = ls[i] + b"\r"
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*carriage return")


@pytest.mark.parametrize(
    "bad, what",
    [(b"\t", "tab"), (b" ", "trailing"), (b"\xc3\xa9", "non-ASCII"), (b"\x01", "control")],
)
def test_character_rules_on_header(good, bad, what):
    ls = lines(good)
    ls[1] = ls[1] + bad
    parse_err(join(ls), FormatError, rf"line 2\b.*{what}")


@pytest.mark.parametrize("bad, what", [(b"\t", "tab"), (b" ", "space"), (b"\xc3", "non-ASCII")])
def test_character_rules_on_base64_line(good, bad, what):
    ls = lines(good)
    i = first_b64(ls)
    ls[i] = ls[i] + bad
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*{what}")


def test_meta_field_order(good):
    ls = lines(good)
    ls[1] = ls[1].replace(b"gen=000123 ts=", b"ts=").replace(b"build=", b"gen=000123 build=")
    parse_err(join(ls), FormatError, r"line 2\b.*field order; expected schema gen ts")


@pytest.mark.parametrize(
    "old, new, match",
    [
        (b"ix=000001", b"ix=1", "field 'ix' malformed"),
        (b"off=000000000128", b"off=128", "field 'off' malformed"),
        (b"crc32c=", b"crc32c=A", "field 'crc32c' malformed"),
        (b" b64=on", b" b64=off", "field 'b64' malformed"),
        (b"width=76", b"width=64", "field 'width' malformed"),
    ],
)
def test_ch_field_widths(good, old, new, match):
    ls = lines(good)
    i = find(ls, b"ch ix=000001")
    ls[i] = re.sub(
        re.escape(old) + rb"[0-9a-f]*" if old.endswith(b"=") else re.escape(old),
        new.replace(b"\\", b""),
        ls[i],
        count=1,
    )
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*{match}")


def test_ch_field_order(good):
    ls = lines(good)
    i = find(ls, b"ch ")
    parts = ls[i].split(b" ")
    parts[2], parts[3] = parts[3], parts[2]
    ls[i] = b" ".join(parts)
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*field order")


@pytest.mark.parametrize(
    "field, value, match",
    [
        (b"ix=", b"000002", "'ix' not contiguous"),
        (b"off=", b"000000000127", "'off' mismatch"),
        (b"len=", b"127", "'len' mismatch"),
        (b"lines=", b"4", "'lines' mismatch"),
    ],
)
def test_ch_lying_fields(good, field, value, match):
    ls = lines(good)
    i = find(ls, b"ch ix=000001")
    ls[i] = re.sub(re.escape(field) + rb"[0-9]+", field + value, ls[i])
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*{match}")


def test_parity_mismatch_names_line(good):
    ls = lines(good)
    i = first_b64(ls) + 1
    nib = ls[i][-1:]
    ls[i] = ls[i][:-1] + (b"0" if nib != b"0" else b"1")
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*parity nibble mismatch; expected")


def test_parity_uppercase(good):
    ls = lines(good)
    i = first_b64(ls)
    ls[i] = ls[i][:-1] + ls[i][-1:].upper().replace(b"0", b"G")
    if ls[i][-1:] in b"0123456789":
        ls[i] = ls[i][:-1] + b"G"
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*parity is not one lowercase hex")


def test_width_violation(good):
    ls = lines(good)
    i = first_b64(ls)
    ls[i] = ls[i][:10] + ls[i][11:]
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*width")


def test_non_canonical_padding(tmp_path):
    p = write(tmp_path / "a.wtxt", {"x": np.array([65], np.uint8)})  # "QQ=="
    ls = lines(p.read_bytes())
    i = first_b64(ls)
    assert ls[i].startswith(b"QQ== ")
    x = 0
    for c in b"QR==":
        x ^= c
    ls[i] = b"QR== " + b"%x" % (x & 15)
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*non-canonical padding")


def test_crc_and_sha_mismatch_are_integrity_errors(good):
    ls = lines(good)
    i = find(ls, b"ch ")
    ls[i] = re.sub(rb"crc32c=[0-9a-f]{8}", b"crc32c=00000000", ls[i])
    parse_err(join(ls), IntegrityError, rf"line {i + 1}\b.*crc32c mismatch")
    ls = lines(good)
    ls[i] = re.sub(rb"sha256=[0-9a-f]{64}", b"sha256=" + b"0" * 64, ls[i])
    parse_err(join(ls), IntegrityError, rf"line {i + 1}\b.*sha256 mismatch")


def test_array_sha_and_root_mismatch(good):
    ls = lines(good)
    i = find(ls, b"arr name=a")
    ls[i] = re.sub(rb"sha256=[0-9a-f]{64}", b"sha256=" + b"1" * 64, ls[i])
    parse_err(join(ls), IntegrityError, r"array 'a'.*sha256 mismatch")
    ls = lines(good)
    ls[3] = re.sub(rb"fastxor=[0-9a-f]{16}", b"fastxor=" + b"0" * 16, ls[3])
    parse_err(join(ls), IntegrityError, "fastxor mismatch")
    ls = lines(good)
    ls[3] = re.sub(rb"merkle_prev=[0-9a-f]{64}", b"merkle_prev=" + b"2" * 64, ls[3])
    parse_err(join(ls), IntegrityError, "merkle_this mismatch")


def test_count_mismatch_extra_line(good):
    ls = lines(good)
    i = first_b64(ls)
    ls.insert(i, ls[i])
    j = find(ls, b"endch")
    parse_err(join(ls), FormatError, rf"line {j - 1}\b.*width")


def test_count_mismatch_missing_line(good):
    ls = lines(good)
    i = first_b64(ls)
    del ls[i]
    parse_err(join(ls), FormatError, r"line \d+\b")


@pytest.mark.parametrize("marker", [b"endch", b"endarr", b"endwtxt"])
def test_missing_end_markers(good, marker):
    ls = lines(good)
    i = find(ls, marker)
    del ls[i]
    cls = TruncatedError if marker == b"endwtxt" else FormatError
    parse_err(join(ls), cls, rf"line {i + 1}\b")


def test_name_order_and_duplicates(tmp_path):
    p = write(tmp_path / "a.wtxt", {"a": np.ones(2), "b": np.ones(2)})
    data = p.read_bytes()
    a0, b0 = data.index(b"arr name=a"), data.index(b"arr name=b")
    end = data.index(b"endwtxt")
    swapped = data[:a0] + data[b0:end] + data[a0:b0] + data[end:]
    parse_err(swapped, FormatError, r"array name order")
    dup = data[:end] + data[a0:b0] + data[end:]
    parse_err(dup.replace(b"arr name=b", b"arr name=b", 1), FormatError, r"name order|duplicate")
    dup2 = data[:b0] + data[a0:b0] + data[b0:]
    parse_err(dup2, FormatError, r"duplicate array name")


def test_bad_name_and_dtype(good):
    ls = lines(good)
    i = find(ls, b"arr name=a")
    ls[i] = ls[i].replace(b"name=a", b"name=a-b")
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*'name' malformed")
    ls = lines(good)
    ls[i] = ls[i].replace(b"dtype=f64", b"dtype=f16")
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*'dtype' malformed")


def test_bytes_lies(good):
    ls = lines(good)
    i = find(ls, b"arr name=a")
    ls[i] = ls[i].replace(b"bytes=320", b"bytes=328")
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*does not match shape")
    ls = lines(good)
    ls[i] = (
        ls[i].replace(b"shape=40", b"shape=4000000000").replace(b"bytes=320", b"bytes=32000000000")
    )
    parse_err(join(ls), TruncatedError, rf"line {i + 1}\b.*larger than the rest of the file")


def test_magic_and_version(good):
    parse_err(b"WTXT 2\n" + good[7:], UnsupportedError, "unsupported version")
    parse_err(b"XTXT 1\n" + good[7:], FormatError, "bad magic")
    parse_err(b"", TruncatedError, "empty file")
    parse_err(b"WTXT-DELTA 2 base_sha256_all=" + b"0" * 64 + b"\n", FormatError, "DELTA")


def test_trailing_data_and_missing_final_lf(good):
    parse_err(good + b"x\n", FormatError, r"data after 'endwtxt'")
    parse_err(good[:-1], TruncatedError, r"no final LF")


def test_truncated_everywhere(good):
    step = max(1, len(good) // 150)
    for n in list(range(0, len(good) - 1, step)) + [len(good) - 1]:
        with pytest.raises(errors.FormatError):
            wtxt.read(good[:n])


def test_sign_line_grammar(tmp_path):
    p = write(tmp_path / "a.wtxt", signing_key=bytes(32))
    ls = lines(p.read_bytes())
    assert ls[4].startswith(b"sign ed25519=") and len(ls[4].split(b" ")[1]) == 8 + 88
    ls[4] = ls[4].replace(b"keyid=", b"keyid=0")
    parse_err(join(ls), FormatError, r"line 5\b.*'keyid' malformed")


def test_audit_grammar(good):
    ls = lines(good)
    i = find(ls, b"audit")
    assert ls[i] == b'audit note="x y"'
    for bad in [
        b'audit note="x y',
        b"audit Note=1",
        b"audit note=1  k=2",
        b"audit note=1 note=2",
        b"audit",
    ]:
        ls[i] = bad
        parse_err(join(ls), FormatError, rf"line {i + 1}\b")


def test_root_pending_cannot_be_signed(good):
    ls = lines(good)
    ls[3] = b"root_pending sha256_all=" + b"0" * 64 + b' note="finalize with WSUM"'
    ls.insert(4, b"sign ed25519=" + b"A" * 86 + b"== keyid=" + b"0" * 16)
    parse_err(join(ls), FormatError, r"line 5\b.*root_pending")


def test_idx_row_size_checked(good):
    ls = lines(good)
    i = find(ls, b"idx ")
    ls[i] = ls[i].replace(b"row_size=8", b"row_size=16")
    parse_err(join(ls), FormatError, rf"line {i + 1}\b.*row_size")


@settings(max_examples=150)
@given(st.binary(max_size=600))
def test_fuzz_random_bytes(data):
    try:
        wtxt.read(data)
    except errors.TenfoldError:
        pass
    r = wtxt.verify(data)
    assert not r.ok or data.startswith(b"WTXT")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    p = tmp_path_factory.mktemp("s") / "s.wtxt"
    write(
        p,
        {"a": np.arange(30, dtype=np.int16), "c": np.ones((3, 2), np.float32)},
        rows_per_chunk=2,
        hmac_key=b"k",
        signing_key=bytes(32),
        audit={"k": 1},
    )
    return p.read_bytes()


@settings(max_examples=300)
@given(st.data())
def test_fuzz_mutated_files(small, data):
    buf = bytearray(small)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "set", "del", "ins", "trunc", "dupline"]))
        pos = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if kind == "flip" and buf:
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and buf:
            buf[pos] = data.draw(st.sampled_from(b"\n \t\r=0aA+/\x80"))
        elif kind == "del" and buf:
            del buf[pos]
        elif kind == "ins":
            buf.insert(pos, data.draw(st.integers(0, 255)))
        elif kind == "trunc":
            del buf[pos:]
        elif kind == "dupline":
            a = buf.find(b"\n", pos)
            b = buf.find(b"\n", a + 1)
            if 0 <= a < b:
                buf[a:a] = buf[a:b]
    mutated = bytes(buf)
    try:
        got = wtxt.read(mutated, hmac_keys=[b"k"])
    except errors.TenfoldError:
        pass
    else:
        assert np.array_equal(got["a"], np.arange(30, dtype=np.int16))
    r = wtxt.verify(mutated)
    assert isinstance(r.ok, bool)
    try:
        wtxt.recover(mutated)
    except errors.TenfoldError:
        # refused only when nothing says WTXT snapshot: line 1 not the magic and no 'arr' line
        lines = mutated.split(b"\n")
        assert lines[0] != b"WTXT 1" and not any(ln.startswith(b"arr ") for ln in lines)
