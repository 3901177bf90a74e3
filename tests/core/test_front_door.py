"""safetensors and npz through the front door (issue 9 item 5): open/load/save/detect, the CLI,
and every lie a safetensors header can tell."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tenfold
from tenfold.cli import main
from tenfold.errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TruncatedError,
    UnsupportedError,
)
from tenfold.interop import npz_reader
from tenfold.interop import safetensors_reader as st

W = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.array([7, 8], dtype=np.int64)


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_save_detect_open_load(tmp_path, suffix):
    p = tmp_path / f"m{suffix}"
    tenfold.save(p, {"w": W, "b": B})
    fmt = suffix[1:]
    assert tenfold.detect(p) == fmt
    other = tmp_path / "renamed.bin"  # detection is by content, not suffix
    other.write_bytes(p.read_bytes())
    assert tenfold.detect(other) == fmt
    got = tenfold.load(other)
    assert sorted(got) == ["b", "w"] and np.array_equal(got["w"], W) and got["b"].tolist() == [7, 8]
    with tenfold.open(p) as r:
        assert np.array_equal(r["w"], W) and r["w"].dtype == np.float32


def test_safetensors_reads_are_zero_copy_views_of_the_map(tmp_path):
    p = tmp_path / "m.safetensors"
    tenfold.save(p, {"w": W}, metadata={"k": "v"})
    with tenfold.open(p) as r:
        w = r["w"]
        assert not w.flags.writeable and not w.flags.owndata
        assert r.metadata == {"k": "v"}
        start, end = r.info("w").byte_range
        assert p.read_bytes()[start:end] == W.tobytes()
        assert r.get_tensor("w") is not w and np.array_equal(r.get_tensor("w"), W)
        assert r.read("w", copy=True).flags.writeable
    assert w.tolist() == W.tolist()  # the view outlives the reader


def test_safetensors_peer_reads_what_tenfold_writes_and_back(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="safetensors peer")
    p = tmp_path / "peer.safetensors"
    safetensors_numpy.save_file({"w": W, "b": B}, str(p), metadata={"m": "1"})
    assert tenfold.detect(p) == "safetensors"
    with tenfold.open(p) as r:
        assert np.array_equal(r["w"], W) and np.array_equal(r["b"], B)
        assert r.metadata == {"m": "1"}
    q = tmp_path / "ours.safetensors"
    tenfold.save(q, {"w": W, "b": B})
    back = safetensors_numpy.load_file(str(q))
    assert np.array_equal(back["w"], W) and np.array_equal(back["b"], B)


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_cli_inspect_and_verify(tmp_path, suffix, capsys):
    p = tmp_path / f"m{suffix}"
    tenfold.save(p, {"w": W})
    assert main(["inspect", str(p)]) == 0
    assert f"{suffix[1:]}, 1 objects" in capsys.readouterr().out
    assert main(["verify", str(p)]) == 0
    assert "OK" in capsys.readouterr().out


# -- safetensors header lies ---------------------------------------------------------------------


def _st(header: object, data: bytes, *, raw: bytes | None = None, pad: bool = True) -> bytes:
    text = raw if raw is not None else json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def _good_header() -> dict:
    return {
        "__metadata__": {"a": "b"},
        "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
    }


DATA = W.tobytes() + B.tobytes()


def _open_bytes(tmp_path: Path, blob: bytes) -> None:
    p = tmp_path / "x.safetensors"
    p.write_bytes(blob)
    with st.Reader(p):
        pass


def test_good_handmade_file_reads(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(_st(_good_header(), DATA))
    with tenfold.open(p) as r:
        assert list(r) == ["w", "b"]  # file order
        assert np.array_equal(r["w"], W) and np.array_equal(r["b"], B)


def _lie(path: str, value: object) -> dict:
    h = _good_header()
    keys = path.split(".")
    node = h
    for k in keys[:-1]:
        node = node[k]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return h


_DELETE = object()

LIES = [
    ("w.dtype", "F33", UnsupportedError, r"tensor 'w' at offset 0x8: dtype: unknown"),
    ("w.dtype", 7, UnsupportedError, r"tensor 'w'.*dtype"),
    ("w.shape", [2, -3], FormatError, r"tensor 'w'.*shape"),
    ("w.shape", [2, 3.0], FormatError, r"tensor 'w'.*shape"),
    ("w.shape", "2x3", FormatError, r"tensor 'w'.*shape"),
    ("w.shape", [2, 4], FormatError, r"tensor 'w' at offset 0x\w+: data_offsets: size is not"),
    ("w.data_offsets", [0], FormatError, r"tensor 'w'.*data_offsets"),
    ("w.data_offsets", [0, -24], FormatError, r"tensor 'w'.*data_offsets"),
    ("w.data_offsets", [24, 0], FormatError, r"tensor 'w'.*end before begin"),
    ("w.data_offsets", [0, 23], FormatError, r"tensor 'w'.*size is not"),
    ("b.data_offsets", [16, 32], FormatError, r"tensor 'b'.*overlaps"),
    ("b.data_offsets", [32, 48], TruncatedError, r"tensor 'b'.*ends past end of file"),
    ("w", [1, 2], FormatError, r"tensor 'w'.*not an object"),
    ("w.dtype", _DELETE, FormatError, r"tensor 'w'.*missing \['dtype'\]"),
    ("w.extra", 1, FormatError, r"tensor 'w'.*unknown \['extra'\]"),
    ("__metadata__", {"a": 1}, FormatError, r"__metadata__"),
    ("__metadata__", [1], FormatError, r"__metadata__"),
]


@pytest.mark.parametrize("path, value, cls, msg", LIES, ids=[f"{p}={v!r}" for p, v, *_ in LIES])
def test_every_header_field_lie_is_the_right_error(tmp_path, path, value, cls, msg):
    with pytest.raises(cls, match=msg) as ei:
        _open_bytes(tmp_path, _st(_lie(path, value), DATA))
    assert str(ei.value).startswith("safetensors: ")


def test_gap_between_tensors(tmp_path):
    h = _good_header()
    h["b"]["data_offsets"] = [32, 48]
    with pytest.raises(FormatError, match=r"tensor 'b' at offset 0x\w+: data_offsets: gap"):
        _open_bytes(tmp_path, _st(h, W.tobytes() + b"\0" * 8 + B.tobytes()))


def test_first_tensor_must_start_at_zero(tmp_path):
    h = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [8, 32]}}
    with pytest.raises(FormatError, match=r"tensor 'w'.*gap.*expected begin 0, got 8"):
        _open_bytes(tmp_path, _st(h, b"\0" * 8 + W.tobytes()))


def test_trailing_bytes_after_the_last_tensor(tmp_path):
    with pytest.raises(FormatError, match=r"tensor 'b'.*do not end where the file ends"):
        _open_bytes(tmp_path, _st(_good_header(), DATA + b"\0" * 8))


def test_truncated_data(tmp_path):
    with pytest.raises(TruncatedError, match=r"tensor 'b'.*ends past end of file"):
        _open_bytes(tmp_path, _st(_good_header(), DATA[:-1]))


def test_header_length_lies(tmp_path):
    good = _st(_good_header(), DATA)
    with pytest.raises(TruncatedError, match="header length at offset 0x0"):
        _open_bytes(tmp_path, good[:5])
    with pytest.raises(LimitError, match="header length at offset 0x0: above the limit"):
        _open_bytes(tmp_path, struct.pack("<Q", st.MAX_HEADER + 1) + good[8:])
    with pytest.raises(TruncatedError, match="truncated: the file has .* its header"):
        _open_bytes(tmp_path, struct.pack("<Q", len(good)) + good[8:])
    n = struct.unpack("<Q", good[:8])[0]
    with pytest.raises(FormatError, match=r"header at offset 0x\w+: invalid JSON"):
        _open_bytes(tmp_path, struct.pack("<Q", n - 9) + good[8:])  # cuts the JSON short


def test_header_content_lies(tmp_path):
    with pytest.raises(FormatError, match=r"header at offset 0x8: does not start with '\{'"):
        _open_bytes(tmp_path, _st(None, b"", raw=b' {"a": 1}'))
    with pytest.raises(FormatError, match="invalid JSON"):
        _open_bytes(tmp_path, _st(None, b"", raw=b'{"a": }'))
    with pytest.raises(FormatError, match="invalid UTF-8"):
        _open_bytes(tmp_path, _st(None, b"", raw=b'{"\xff": 1}'))
    with pytest.raises(FormatError, match="key 'w' appears twice"):
        e = '{"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}'
        _open_bytes(tmp_path, _st(None, b"\0", raw=f'{{"w": {e}, "w": {e}}}'.encode()))
    with pytest.raises(FormatError, match="nested too deeply"):
        _open_bytes(tmp_path, _st(None, b"", raw=b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}"))


def test_empty_file_is_a_valid_empty_safetensors(tmp_path):
    p = tmp_path / "e.safetensors"
    tenfold.save(p, {})
    assert tenfold.detect(p) == "safetensors"
    with tenfold.open(p) as r:
        assert len(r) == 0 and r.metadata == {}


def test_corrupt_safetensors_on_the_cli_exits_1(tmp_path, capsys):
    p = tmp_path / "x.safetensors"
    p.write_bytes(_st(_lie("b.data_offsets", [16, 32]), DATA))
    assert main(["verify", str(p)]) == 1
    assert "overlaps" in capsys.readouterr().out


# -- npz ---------------------------------------------------------------------------------------


def test_npz_refuses_object_arrays(tmp_path):
    p = tmp_path / "o.npz"
    np.savez(p, o=np.array([{"a": 1}], dtype=object))
    with tenfold.open(p) as r, pytest.raises(UnsupportedError, match="member 'o.npy'.*pickle"):
        r["o"]


def test_npz_lying_npy_header_is_refused_before_allocating(tmp_path):
    p = tmp_path / "l.npz"
    with zipfile.ZipFile(p, "w") as z:  # a valid zip (CRC right) of a .npy that lies
        z.writestr("w.npy", _npy(np.zeros(9, np.uint8))[:-5])  # 9 bytes announced, 4 stored
    with tenfold.open(p) as r:
        with pytest.raises(FormatError, match=r"member 'w.npy'.*size.*expected 4, got 9"):
            r["w"]
        assert not r.verify().ok


def test_npz_crc_mismatch_is_an_integrity_error(tmp_path):
    p = tmp_path / "c.npz"
    np.savez(p, w=np.arange(16, dtype=np.uint8))
    data = bytearray(p.read_bytes())
    i = data.find(bytes(range(16)))
    data[i + 3] ^= 0xFF
    p.write_bytes(bytes(data))
    with tenfold.open(p) as r, pytest.raises(IntegrityError, match="member 'w.npy'.*CRC"):
        r["w"]
    assert main(["verify", str(p)]) == 1


def test_npz_with_a_member_that_is_not_npy(tmp_path):
    p = tmp_path / "n.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("w.npy", _npy(np.ones(2)))
        z.writestr("notes.txt", b"hello")
    assert tenfold.detect(p) == "npz"
    with pytest.raises(FormatError, match="member 'notes.txt'.*not a .npy member"):
        tenfold.open(p)


def test_npz_limits(tmp_path):
    from tenfold.core import Limits

    p = tmp_path / "big.npz"
    np.savez(p, a=np.zeros(100), b=np.zeros(1))
    with pytest.raises(LimitError, match="members"):
        npz_reader.Reader(p, limits=Limits(max_objects=1))
    with pytest.raises(LimitError, match="member 'a.npy'.*max_decoded_bytes"):
        npz_reader.Reader(p, limits=Limits(max_decoded_bytes=500))


def test_a_zip_that_is_not_npz_is_not_detected(tmp_path):
    p = tmp_path / "z.zip"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("readme.txt", b"hi")
    with pytest.raises(FormatError, match="unknown format"):
        tenfold.detect(p)


def _npy(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_safetensors_limits(tmp_path):
    from tenfold.core import Limits

    p = tmp_path / "x.safetensors"
    p.write_bytes(_st(_good_header(), DATA))
    with pytest.raises(LimitError, match="header length.*above the limit"):
        st.Reader(p, limits=Limits(max_index_bytes=16))
    with pytest.raises(LimitError, match="tensors.*above max_objects"):
        st.Reader(p, limits=Limits(max_objects=1))
    with pytest.raises(LimitError, match="tensor 'w'.*too many dimensions"):
        st.Reader(p, limits=Limits(max_ndim=1))
    with st.Reader(p, limits=Limits(max_objects=2, max_ndim=2)) as r:
        assert len(r) == 2


def test_npz_huge_lying_shape_allocates_nothing(tmp_path):
    p = tmp_path / "h.npz"
    head = _npy(np.zeros(1, np.uint8))
    lie = head.replace(b"(1,)", str((10**15,)).encode())  # a petabyte announced, 1 byte stored
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("w.npy", lie)
    with tenfold.open(p) as r, pytest.raises(FormatError, match="does not describe.*got 10{15}"):
        r["w"]


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_closed_reader_refuses_reads(tmp_path, suffix):
    p = tmp_path / f"c{suffix}"
    tenfold.save(p, {"w": W})
    r = tenfold.open(p)
    kept = r["w"]
    r.close()
    assert r.closed and "closed" in repr(r)
    with pytest.raises(ValueError, match="closed file"):
        r["w"]
    assert kept.tolist() == W.tolist()


def test_npz_reader_charges_each_array_to_the_decode_budget(tmp_path):
    # found by scripts/fuzz.py: a member declaring 2**31 float128 made verify raise MemoryError
    from tenfold.core.bounds import Limits
    from tenfold.errors import LimitError
    from tenfold.interop.npz_reader import Reader as NpzReader

    p = tmp_path / "a.npz"
    f = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.savez(p, big=np.zeros(5000, np.uint8), f=f)
    with NpzReader(p) as r:
        got = r["f"]
        assert got.flags.f_contiguous and np.array_equal(got, f)
    with NpzReader(p, limits=Limits(decode_budget=4000)) as r:
        with pytest.raises(LimitError, match="member 'big.npy'"):
            r["big"]


@pytest.mark.parametrize("suffix", ["safetensors", "zt", "npz", "oinf", "fold", "wtxt"])
def test_trust_links_is_accepted_for_every_format(tmp_path, suffix):
    """``trust_links=`` is a front-door option: a one-file format has nothing to follow, and
    generic code passing it for every file must not get a TypeError from a reader's
    constructor (before: every format but zTensor raised one)."""
    p = tmp_path / f"m.{suffix}"
    tenfold.save(p, {"a": np.arange(3, dtype=np.float32)})
    with tenfold.open(p, trust_links=True) as r:
        assert np.array_equal(r["a"], np.arange(3, dtype=np.float32))
    assert list(tenfold.load(p, trust_links=True)) == ["a"]
    with tenfold.open(p, mmap=False, trust_links=False) as r:
        assert list(r) == ["a"]
