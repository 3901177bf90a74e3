"""safetensors and npz interop: validation of hostile files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tenfold.errors import EncodeError, FormatError, LimitError, TruncatedError
from tenfold.interop import read_npz, read_safetensors, write_npz, write_safetensors


def st_file(tmp_path, header, data=b"", raw=None):
    text = raw if raw is not None else json.dumps(header).encode()
    p = tmp_path / "x.safetensors"
    p.write_bytes(len(text).to_bytes(8, "little") + text + data)
    return p


def test_round_trip_and_views(tmp_path):
    t = {"a": np.arange(6, dtype=np.int32).reshape(2, 3), "b": np.ones(3, np.float64)}
    write_safetensors(tmp_path / "r.safetensors", t, {"k": "v"})
    back = read_safetensors(tmp_path / "r.safetensors")
    for k in t:
        np.testing.assert_array_equal(back[k], t[k])
        assert not back[k].flags.writeable


def test_safetensors_peer_reads_ours(tmp_path):
    st = pytest.importorskip("safetensors.numpy", reason="safetensors (peer) not installed")
    t = {"a": np.arange(6, dtype=np.int32).reshape(2, 3), "b": np.ones(3, np.float16)}
    write_safetensors(tmp_path / "r.safetensors", t)
    back = st.load_file(str(tmp_path / "r.safetensors"))
    for k in t:
        np.testing.assert_array_equal(back[k], t[k])


@pytest.mark.parametrize(
    "header, data, cls, text",
    [
        (
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
            b"\0" * 4,
            TruncatedError,
            "outside the data buffer",
        ),
        (
            {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
            b"\0" * 8,
            FormatError,
            "does not match",
        ),
        (
            {"a": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}},
            b"\0" * 8,
            FormatError,
            "unknown",
        ),
        (
            {"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}},
            b"\0" * 8,
            FormatError,
            "shape",
        ),
        (
            {
                "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
            },
            b"\0" * 8,
            FormatError,
            "overlaps",
        ),
        ([1, 2], b"", FormatError, "not a JSON object"),
    ],
)
def test_safetensors_bad(tmp_path, header, data, cls, text):
    with pytest.raises(cls, match=text):
        read_safetensors(st_file(tmp_path, header, data))


def test_safetensors_bad_json_and_lengths(tmp_path):
    with pytest.raises(FormatError, match="invalid JSON"):
        read_safetensors(st_file(tmp_path, None, raw=b"{nope"))
    p = tmp_path / "h.safetensors"
    p.write_bytes((1 << 40).to_bytes(8, "little"))
    with pytest.raises(LimitError):
        read_safetensors(p)
    p.write_bytes(b"\1\2")
    with pytest.raises(TruncatedError):
        read_safetensors(p)
    with pytest.raises(EncodeError, match="dtype"):
        write_safetensors(tmp_path / "o.safetensors", {"x": np.ones(2, np.complex128)})


def test_npz_never_unpickles(tmp_path):
    p = tmp_path / "o.npz"
    np.savez(p, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(FormatError, match="pickle"):
        read_npz(p)
    with pytest.raises(EncodeError, match="pickle"):
        write_npz(tmp_path / "p.npz", {"x": np.array([None], dtype=object)})
    (tmp_path / "bad.npz").write_bytes(b"PK\3\4garbage")
    with pytest.raises(FormatError):
        read_npz(tmp_path / "bad.npz")


def test_safetensors_one_header_parser_for_reader_and_parse(tmp_path):
    """Regressions of the merge onto interop/safetensors.parse_header: parse() (FOLD STEN
    chunks, convert) refused nothing the reader refused, and the reader sized F4 wrongly."""
    import struct

    import tenfold
    from tenfold.core.dtypes import FLOAT4_E2M1

    q = np.arange(8, dtype=np.uint8).view(FLOAT4_E2M1)
    p = tmp_path / "f4.safetensors"
    tenfold.save(p, {"q": q})
    with tenfold.open(p) as r:  # was: "size is not shape x itemsize; expected 8, got 4"
        assert np.array_equal(r["q"].view(np.uint8), q.view(np.uint8))
        assert np.array_equal(r.read("q", slice(2, 5)).view(np.uint8), q[2:5].view(np.uint8))
    e = '{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}'
    h = f'{{"w": {e}, "w": {e}}}'.encode()
    h += b" " * (-len(h) % 8)
    dup = tmp_path / "dup.safetensors"
    dup.write_bytes(struct.pack("<Q", len(h)) + h + b"\x07")
    with pytest.raises(FormatError, match=r"^safetensors: header at offset 0x8: key 'w' appears"):
        read_safetensors(dup)  # was: the last 'w' silently won
    extra = tmp_path / "extra.safetensors"
    h = b'{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1}}'
    h += b" " * (-len(h) % 8)
    extra.write_bytes(struct.pack("<Q", len(h)) + h + b"\x07")
    with pytest.raises(FormatError, match=r"tensor 'w'.*unknown \['x'\]"):
        read_safetensors(extra)
