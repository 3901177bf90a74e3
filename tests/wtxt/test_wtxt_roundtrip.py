"""Writer/reader round trips, layout rules, determinism, atomicity and encode errors."""

import datetime
import hashlib
import math

import numpy as np
import pytest
from _wtxt_helpers import HKEY, SEED, sample, write
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tenfold
from tenfold import wtxt
from tenfold.errors import EncodeError
from tenfold.wtxt import _spec as S


def lines_of(path):
    return path.read_bytes().decode("ascii").split("\n")


def test_roundtrip_all_dtypes(tmp_path):
    arrays = {tag: (np.arange(24) - 5).astype(dt).reshape(2, 3, 4) for tag, dt in S.DTYPES.items()}
    p = write(tmp_path / "a.wtxt", arrays)
    got = wtxt.read(p)
    assert list(got) == sorted(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        assert np.array_equal(got[k], v)


def test_big_endian_and_noncontiguous_inputs_are_stored_le(tmp_path):
    a = np.arange(12, dtype=">i4").reshape(3, 4)[:, ::2]
    p = write(tmp_path / "a.wtxt", {"a": a})
    got = wtxt.read(p)["a"]
    assert got.dtype == np.dtype("<i4") and np.array_equal(got, a)


def test_scalar_and_empty(tmp_path):
    p = write(tmp_path / "a.wtxt")
    text = lines_of(p)
    got = wtxt.read(p)
    assert got["s"].shape == (1,) and got["s"][0] == 2.5
    assert got["z"].shape == (0, 3)
    assert any(line.startswith("arr name=s dtype=f32 shape=1 order=C bytes=4 ") for line in text)
    i = next(i for i, line in enumerate(text) if line.startswith("arr name=z "))
    assert text[i + 1].startswith("ch ix=000000 off=000000000000 len=0 ")
    assert text[i + 1].endswith(" lines=0") and text[i + 2] == "endch"


@pytest.mark.parametrize(
    "nbytes, lines", [(1, 1), (57, 1), (58, 2), (4096, 72), (32768, 575), (65536, 1150)]
)
def test_lines_rule(nbytes, lines):
    assert S.b64_lines(nbytes) == lines
    assert lines == math.ceil(4 * math.ceil(nbytes / 3) / 76)


def test_default_chunking_and_widths(tmp_path):
    a = np.arange(20000, dtype=np.float32)  # 80000 bytes -> 32768, 32768, 14464
    p = write(tmp_path / "a.wtxt", {"a": a})
    text = lines_of(p)
    chs = [line for line in text if line.startswith("ch ")]
    assert [c.split()[1:4] for c in chs] == [
        ["ix=000000", "off=000000000000", "len=32768"],
        ["ix=000001", "off=000000032768", "len=32768"],
        ["ix=000002", "off=000000065536", "len=14464"],
    ]
    assert chs[0].endswith("lines=575")
    body = [line for line in text if len(line) > 70 and line[-2] == " "]
    assert {len(line) for line in body[:-1]} <= {78, 72, 64}
    for line in body:
        b64, nib = line[:-2], line[-1]
        x = 0
        for c in b64.encode():
            x ^= c
        assert nib == f"{x & 15:x}"
    assert "idx " not in p.read_text()


def test_row_blocking_layout(tmp_path):
    a = np.zeros((300, 5), np.float64)
    p = write(tmp_path / "a.wtxt", {"R": a}, rows_per_chunk=128)
    text = lines_of(p)
    assert "idx rows_per_chunk=128 row_size=40 row_blocking=on" in text
    chs = [c.split()[3] for c in text if c.startswith("ch ")]
    assert chs == ["len=5120", "len=5120", "len=1760"]
    assert "row_blocking" in text[2]


def test_header_lines(tmp_path):
    p = write(tmp_path / "a.wtxt", hmac_key=HKEY)
    text = lines_of(p)
    assert text[0] == "WTXT 1"
    assert text[1] == (
        "meta schema=weights/v1 gen=000123 ts=2025-10-09T03:12:45Z build=abc123 "
        "endian=LE host=cpu cuda=off"
    )
    assert text[2] == "cap ext=crc32c,line_parity,arr_hmac"
    assert text[3].startswith("root sha256_all=") and text[-2] == "endwtxt" and text[-1] == ""


def test_root_hash_definitions(tmp_path):
    """sha256_all over arr lines + raw, merkle_this, fastxor recomputed independently."""
    arrays = sample()
    p = write(tmp_path / "a.wtxt", arrays, hmac_key=HKEY, merkle_prev="ab" * 32)
    text = lines_of(p)
    h = hashlib.sha256()
    fx = 0
    for name in sorted(arrays):
        line = next(t for t in text if t.startswith(f"arr name={name} "))
        raw = np.ascontiguousarray(arrays[name]).astype(arrays[name].dtype.newbyteorder("<"))
        raw = raw.tobytes()
        h.update(line.encode() + raw)
        padded = raw + bytes(-len(raw) % 8)
        for i in range(0, len(padded), 8):
            fx ^= int.from_bytes(padded[i : i + 8], "little")
        fields = dict(t.split("=") for t in line.split()[1:])
        assert fields["sha256"] == hashlib.sha256(raw).hexdigest()
        salt = hashlib.sha256(b"wtxt-salt" + b"000123" + name.encode()).digest()[:8]
        assert fields["salt"] == salt.hex()
        import hmac

        assert fields["hmac"] == hmac.new(HKEY, salt + raw, "sha256").hexdigest()
    root = dict(t.split("=") for t in text[3].split()[1:])
    assert root["sha256_all"] == h.hexdigest()
    assert root["fastxor"] == f"{fx:016x}"
    m = hashlib.sha256(
        bytes.fromhex("ab" * 32) + h.digest() + b"2025-10-09T03:12:45Z" + b"000123" + b"abc123"
    ).hexdigest()
    assert root["merkle_this"] == m and root["merkle_prev"] == "ab" * 32


def test_deterministic_and_workers_identical(tmp_path):
    a = write(tmp_path / "a.wtxt", hmac_key=HKEY, signing_key=SEED, rows_per_chunk=8)
    b = write(tmp_path / "b.wtxt", hmac_key=HKEY, signing_key=SEED, rows_per_chunk=8, workers=2)
    c = write(tmp_path / "c.wtxt", hmac_key=HKEY, signing_key=SEED, rows_per_chunk=8)
    assert a.read_bytes() == b.read_bytes() == c.read_bytes()
    assert wtxt.read(a, workers=2).keys() == wtxt.read(a).keys()


def test_datetime_ts(tmp_path):
    ts = datetime.datetime(2025, 10, 9, 3, 12, 45, tzinfo=datetime.UTC)
    a = write(tmp_path / "a.wtxt", ts=ts)
    b = write(tmp_path / "b.wtxt")
    assert a.read_bytes() == b.read_bytes()


def test_atomic_failure_keeps_previous_file(tmp_path, monkeypatch):
    p = write(tmp_path / "a.wtxt")
    before = p.read_bytes()
    from tenfold.wtxt import codec

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(codec.ChunkEncoder, "put", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        write(p, {"x": np.ones(3)})
    assert p.read_bytes() == before
    assert [f.name for f in tmp_path.iterdir()] == ["a.wtxt"]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"arrays": {"bad-name": np.ones(2)}}, "name must match"),
        ({"arrays": {"h": np.ones(2, np.float16)}}, "dtype"),
        ({"arrays": {"b": np.ones(2, bool)}}, "dtype"),
        ({"gen": 1_000_000}, "gen"),
        ({"gen": "12"}, "6 digits"),
        ({"ts": "2025-10-09 03:12:45"}, "ts"),
        ({"ts": "2025-13-09T03:12:45Z"}, "valid date"),
        ({"schema": "has space"}, "token"),
        ({"salt": b"short"}, "salt"),
        ({"rows_per_chunk": 0}, "rows_per_chunk"),
        ({"merkle_prev": "xyz"}, "merkle_prev"),
        ({"sign_all": True}, "signing_key"),
        ({"audit": {"Bad": 1}}, "audit key"),
        ({"audit": {"k": 'has "quote"'}}, "audit"),
        ({"root_pending": True, "signing_key": SEED}, "WSUM"),
    ],
)
def test_encode_errors(tmp_path, kw, match):
    with pytest.raises(EncodeError, match=match):
        write(tmp_path / "a.wtxt", **kw)
    assert not (tmp_path / "a.wtxt").exists()


def test_generic_api(tmp_path):
    p = tmp_path / "g.wtxt"
    tenfold.save(p, {"a": np.arange(4.0)})
    assert tenfold.detect(p) == "wtxt"
    assert np.array_equal(tenfold.load(p)["a"], np.arange(4.0))
    with tenfold.open(p) as f:
        assert list(f.keys()) == ["a"] and f.meta["gen"] == "000000"
    rows = wtxt.inspect(p)
    assert rows[0]["name"] == "a" and rows[0]["bytes"] == 32
    assert {"name", "dtype", "shape", "bytes", "encoding", "layout", "checksum"} <= set(rows[0])


_dtypes = st.sampled_from(list(S.DTYPES.values()))


@settings(max_examples=40)
@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z0-9_]{1,6}", fullmatch=True),
        _dtypes.flatmap(
            lambda dt: hnp.arrays(
                dt, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=9)
            )
        ),
        max_size=4,
    ),
    st.one_of(st.none(), st.integers(1, 5)),
)
def test_roundtrip_hypothesis(tmp_path_factory, arrays, rpc):
    p = tmp_path_factory.mktemp("h") / "h.wtxt"
    write(p, arrays, rows_per_chunk=rpc, hmac_key=HKEY)
    got = wtxt.read(p, hmac_keys=[HKEY])
    assert sorted(got) == sorted(arrays)
    for k, v in arrays.items():
        assert got[k].tobytes() == v.astype(v.dtype.newbyteorder("<")).tobytes()
        assert got[k].shape == v.shape


@pytest.mark.slow
def test_batched_body_across_flushes(tmp_path):
    # 3 MiB of text crosses several 1 MiB write batches; the body must be exactly the chunks
    # framed one by one, and the 2-thread writer must give the same bytes
    import base64

    import crc32c

    a = np.random.default_rng(3).standard_normal(300_001)
    p1 = write(tmp_path / "a.wtxt", {"x": a}, hmac_key=HKEY)
    p2 = write(tmp_path / "b.wtxt", {"x": a}, hmac_key=HKEY, workers=2)
    text = p1.read_bytes()
    assert text == p2.read_bytes()
    raw = a.astype("<f8").tobytes()
    parts = []
    for ix, off in enumerate(range(0, len(raw), 32768)):
        c = raw[off : off + 32768]
        b64 = base64.b64encode(c)
        lines = [b64[i : i + 76] for i in range(0, len(b64), 76)]
        parts.append(
            b"ch ix=%06d off=%012d len=%d sha256=%s crc32c=%08x b64=on width=76 "
            b"lines=%d\n"
            % (
                ix,
                off,
                len(c),
                hashlib.sha256(c).hexdigest().encode(),
                crc32c.crc32c(c),
                len(lines),
            )
        )
        for ln in lines:
            par = 0
            for ch in ln:
                par ^= ch
            parts.append(ln + b" %x\n" % (par & 15))
        parts.append(b"endch\n")
    body = b"".join(parts) + b"endarr\nendwtxt\n"
    assert text.endswith(body)
    np.testing.assert_array_equal(wtxt.read(p1, hmac_keys=[HKEY])["x"], a)
