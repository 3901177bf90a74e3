"""tarscan and strhash kernels: known answers on both implementations, differential, fuzz."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from tenfold import _kernels


def _scan(mod, data: bytes, lanes: int = 0):
    buf = np.frombuffer(data, np.uint8)
    cap = buf.size // 512
    outs = [np.zeros(cap, np.int64) for _ in range(6)] + [np.zeros(cap, np.uint8)]
    count, code, where = mod.scan(buf, *outs, lanes=lanes)
    names = []
    for i in range(count):
        po, pl, no, nl = (int(outs[k][i]) for k in (2, 3, 4, 5))
        name = data[no : no + nl]
        names.append((data[po : po + pl] + b"/" + name) if pl else name)
    return count, code, where, outs[0][:count].tolist(), outs[1][:count].tolist(), names, \
        bytes(outs[6][:count])


def _tar(members, fmt=tarfile.USTAR_FORMAT, **kw) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt, **kw) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
    return bio.getvalue()


def test_scan_ustar_known(kernels):
    data = _tar([("a.jpg", b"x" * 600), ("b/c.cls", b"1")])
    assert _scan(kernels("tarscan"), data) == (2, 0, 0, [0, 1536], [600, 1], [b"a.jpg", b"b/c.cls"],
                                               b"00")


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_scan_long_names(kernels, fmt):
    long = "p" * 150 + "/" + "n" * 110 + ".jpg"
    data = _tar([(long, b"abc"), ("é.cls", b"1")], fmt=fmt)
    got = _scan(kernels("tarscan"), data)
    assert got[1] == 0 and got[5] == [long.encode(), "é".encode() + b".cls"]
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        assert got[3] == [m.offset_data - 512 for m in tf.getmembers()]


def test_scan_prefix_field(kernels):
    name = "d" * 130 + "/file.txt"
    got = _scan(kernels("tarscan"), _tar([(name, b"q")]))
    assert got[5] == [name.encode()]


@pytest.mark.parametrize("mutate, code, where", [
    (lambda b: b[:700], 4, 0),                      # payload past end
    (lambda b: b[:300] + b"\x01", 1, 0),             # partial header block
    (lambda b: b[:148] + b"0000000\0" + b[156:], 2, 0),  # bad checksum
    (lambda b: b[:1536] + b"\x07" + b[1537:], 2, 1536),  # second header corrupted
])
def test_scan_errors(kernels, mutate, code, where):
    data = _tar([("a.jpg", b"x" * 600), ("b.cls", b"1")])
    got = _scan(kernels("tarscan"), mutate(data))
    assert (got[1], got[2]) == (code, where)


def _with_checksum(h: bytearray) -> bytes:
    h[148:156] = b" " * 8
    h[148:155] = f"{sum(h):06o}\0".encode()
    return bytes(h)


def test_scan_base256_and_bad_octal(kernels):
    data = bytearray(_tar([("big.bin", b"hello")]))
    h = bytearray(data[:512])
    h[124:136] = b"\x80" + (5).to_bytes(11, "big")
    got = _scan(kernels("tarscan"), _with_checksum(h) + bytes(data[512:]))
    assert got[:2] == (1, 0) and got[4] == [5]
    h[124:136] = b"zzzzzzzzzzz\0"
    got = _scan(kernels("tarscan"), _with_checksum(h) + bytes(data[512:]))
    assert got[1:3] == (3, 0)
    h[124:136] = b"\xff" * 12
    assert _scan(kernels("tarscan"), _with_checksum(h) + bytes(data[512:]))[1] == 3


def test_scan_dangling_and_bad_pax(kernels):
    data = _tar([("a" * 120 + ".x", b"1")], fmt=tarfile.PAX_FORMAT)
    assert _scan(kernels("tarscan"), data[:1024])[1:3] == (6, 1024)
    bad = bytearray(data)
    bad[512:514] = b"zz"
    assert _scan(kernels("tarscan"), bytes(bad))[1:3] == (5, 0)


def test_scan_empty_and_zero(kernels):
    assert _scan(kernels("tarscan"), b"")[:3] == (0, 0, 0)
    assert _scan(kernels("tarscan"), b"\0" * 1024)[:3] == (0, 0, 0)
    with pytest.raises(ValueError):
        kernels("tarscan").scan(np.zeros(1024, np.uint8), *[np.zeros(1, np.int64)] * 6,
                                np.zeros(1, np.uint8))


def test_scan_readonly_buffer(kernels):
    data = np.frombuffer(_tar([("a.b", b"z")]), np.uint8)
    assert not data.flags.writeable
    assert _scan(kernels("tarscan"), data.tobytes())[0] == 1


@pytest.mark.parametrize("text, seed, lower, expected", [
    (b"", 0, False, 0xEF46DB3751D8E999),
    (b"abc", 0, False, 0x44BC2CF5AD770999),
    (b"ABC", 0, True, 0x44BC2CF5AD770999),
    (b"c6e609e1b6b782bf4", 0, False, 0x22C0FFF82141C152),
    (b"c5646d719f6fbcb3c", 0, False, 0x22C0FFF82141C152),
])
def test_hash_known(kernels, text, seed, lower, expected):
    out = np.zeros(1, np.uint64)
    buf = np.frombuffer(text or b"\0", np.uint8)
    kernels("strhash").hash_ranges(buf, np.array([0]), np.array([len(text)]), seed, out, lower)
    assert int(out[0]) == expected


def test_split_basenames(kernels):
    names = [b"d/x.tar.GZ", b"noext", b".hidden.cls", b"a/b/", b"\xc3\xa9.jpg"]
    buf = np.frombuffer(b"".join(names), np.uint8)
    lens = np.array([len(n) for n in names])
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]])
    outs = [np.zeros(len(names), np.int64) for _ in range(4)] + [np.zeros(len(names), np.uint8)]
    kernels("strhash").split_basenames(buf, offs, lens, *outs)
    raw = buf.tobytes()
    stems = [raw[o : o + n] for o, n in zip(outs[0], outs[1], strict=True)]
    exts = [raw[o : o + n] for o, n in zip(outs[2], outs[3], strict=True)]
    assert stems == [b"x", b"noext", b"", b"", b"\xc3\xa9"]
    assert exts == [b"tar.GZ", b"", b"hidden.cls", b"", b"jpg"]
    assert outs[4].tolist() == [1, 1, 1, 1, 0]


def test_gather_and_equal(kernels):
    k = kernels("strhash")
    buf = np.frombuffer(b"abcabdab", np.uint8)
    out = np.zeros(5, np.uint8)
    k.gather(buf, np.array([0, 6]), np.array([3, 2]), out)
    assert out.tobytes() == b"abcab"
    eq = np.zeros(3, np.uint8)
    k.ranges_equal(buf, np.array([0, 0, 0]), np.array([3, 2, 3]), np.array([3, 6, 6]),
                   np.array([3, 2, 2]), eq)
    assert eq.tolist() == [0, 1, 0]
    with pytest.raises(ValueError):
        k.gather(buf, np.array([7]), np.array([3]), np.zeros(3, np.uint8))
    with pytest.raises(ValueError):
        k.hash_ranges(buf, np.array([0]), np.array([1]), 0, np.zeros(2, np.uint64))


class _EvilStr(str):
    def encode(self, *a: object, **k: object) -> bytes:  # type: ignore[override]
        raise AssertionError("hash_strs must not call a subclass's encode")


@pytest.mark.parametrize("text, seed, expected", [
    ("", 0, 0xEF46DB3751D8E999),
    ("abc", 0, 0x44BC2CF5AD770999),
    ("c6e609e1b6b782bf4", 0, 0x22C0FFF82141C152),
])
def test_hash_strs_known(kernels, text, seed, expected):
    out = np.zeros(3, np.uint64)
    kernels("strhash").hash_strs([text, _EvilStr(text), text], seed, out)
    assert out.tolist() == [expected] * 3


def test_hash_strs_inputs(kernels):
    k = kernels("strhash")
    texts = ["\u00e9t\u00e9", "a\0b", "\ud800x", "x" * 100]
    want = [xxhash.xxh64_intdigest(t.encode("utf-8", "surrogatepass"), 7) for t in texts]
    for seq in (texts, tuple(texts), iter(texts)):
        out = np.zeros(len(texts), np.uint64)
        k.hash_strs(seq, 7, out)
        assert out.tolist() == want
    with pytest.raises(TypeError, match="expected str"):
        k.hash_strs(["a", b"b"], 0, np.zeros(2, np.uint64))
    with pytest.raises(ValueError, match="one entry per string"):
        k.hash_strs(["a"], 0, np.zeros(2, np.uint64))


@pytest.mark.parametrize("start, stride, width", [(0, 32, 8), (3, 32, 8), (21, 32, 4),
                                                  (19, 32, 2), (1, 7, 3), (5, 5, 5)])
def test_gather_strided(kernels, start, stride, width):
    data = bytes(range(256)) * 2
    buf = np.frombuffer(data, np.uint8)
    n = (len(data) - start - width) // stride + 1
    out = np.zeros(n * width, np.uint8)
    kernels("strhash").gather_strided(buf, start, stride, width, out)
    assert out.tobytes() == b"".join(data[start + i * stride :][:width] for i in range(n))
    with pytest.raises(ValueError, match="overrun"):
        kernels("strhash").gather_strided(buf, start, stride, width,
                                          np.zeros((n + 1) * width, np.uint8))


@pytest.mark.parametrize("start, stride, width, size", [(0, 4, 8, 16), (-1, 8, 8, 16),
                                                        (0, 8, 0, 0), (0, 8, 8, 12)])
def test_gather_strided_bad_layout(kernels, start, stride, width, size):
    with pytest.raises(ValueError):
        kernels("strhash").gather_strided(np.zeros(64, np.uint8), start, stride, width,
                                          np.zeros(size, np.uint8))


@given(st.lists(st.text(max_size=40), max_size=12), st.integers(0, 2**64 - 1))
def test_hash_strs_differential(texts, seed):
    ref = _kernels.load("strhash", "reference")
    impls = [ref] if _kernels.pure_python() else [ref, _kernels.load("strhash", "compiled")]
    want = [xxhash.xxh64_intdigest(t.encode("utf-8", "surrogatepass"), seed) for t in texts]
    for mod in impls:
        out = np.zeros(len(texts), np.uint64)
        mod.hash_strs(texts, seed, out)
        assert out.tolist() == want


def _lanes_tar() -> bytes:
    """Members of many sizes, pax and GNU long names, a global pax header halfway, and payloads
    that are themselves tar headers (decoys for a walk starting mid-archive)."""
    inner = _tar([("decoy.bin", b"d" * 700)])
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(400):
            name = f"s{i:05d}.{'x' * (120 if i % 37 == 0 else 1)}"
            data = inner if i % 5 == 0 else bytes([i % 251]) * (i * 131 % 3000)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if i == 300:  # a global pax header: later walks must not count without it
                blob = tarfile.TarInfo._create_pax_generic_header(  # type: ignore[attr-defined]
                    {"comment": "global"}, tarfile.XGLTYPE, "utf-8")
                tf.fileobj.write(blob)  # type: ignore[union-attr]
                tf.offset += len(blob)
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("cut", [None, 100_000, 300_000, 512 * 700 + 3])
@pytest.mark.parametrize("flip", [None, 150_000, 400_000])
def test_scan_lanes_equal_one_walk(cut, flip):
    data = bytearray(_lanes_tar())
    if flip is not None:
        data[flip % len(data)] ^= 0x55
    if cut is not None:
        del data[cut:]
    ref = _scan(_kernels.load("tarscan", "reference"), bytes(data))
    impls = [] if _kernels.pure_python() else [_kernels.load("tarscan", "compiled")]
    for mod in impls:
        for lanes in (0, 1, 2, 3, 5, 8, 64):
            assert _scan(mod, bytes(data), lanes) == ref
    with pytest.raises(ValueError, match="lanes"):
        _scan(_kernels.load("tarscan", "reference"), bytes(data), -1)


@pytest.mark.parametrize("lanes", [0, 1, 3, 8])
def test_scan_dangling_pax_past_end(kernels, lanes):
    # the pax header's data ends inside the buffer, the next header would start past its end
    data = _tar([("\x80", b"")], fmt=tarfile.PAX_FORMAT)[:765]
    ref = _kernels.load("tarscan", "reference")
    assert _scan(ref, data)[:3] == (0, ref.E_DANGLING_EXTENDED, 1024)
    assert _scan(kernels("tarscan"), data, lanes) == _scan(ref, data)


names_st = st.lists(st.binary(max_size=70), max_size=12)


@given(names_st, st.integers(0, 2**64 - 1), st.booleans())
def test_strhash_differential(names, seed, lower):
    ref = _kernels.load("strhash", "reference")
    impls = [ref] if _kernels.pure_python() else [ref, _kernels.load("strhash", "compiled")]
    buf = np.frombuffer(b"".join(names) or b"\0", np.uint8)
    lens = np.array([len(n) for n in names], np.int64)
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) if names else lens
    results = []
    for mod in impls:
        h = np.zeros(len(names), np.uint64)
        mod.hash_ranges(buf, offs, lens, seed, h, lower)
        outs = [np.zeros(len(names), np.int64) for _ in range(4)] + [
            np.zeros(len(names), np.uint8)]
        mod.split_basenames(buf, offs, lens, *outs)
        results.append((h.tolist(), [o.tolist() for o in outs]))
    for n, v in zip(names, results[0][0], strict=True):
        t = bytes(c + 32 if 65 <= c <= 90 else c for c in n) if lower else n
        assert v == xxhash.xxh64_intdigest(t, seed)
    assert all(r == results[0] for r in results)


member = st.tuples(st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1,
                           max_size=160), st.binary(max_size=700))


@given(st.lists(member, max_size=5), st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT,
                                                      tarfile.PAX_FORMAT]),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
       st.integers(0, 10**6))
def test_scan_differential_and_fuzz(members, fmt, edits, cut):
    try:
        data = bytearray(_tar(members, fmt=fmt))
    except (ValueError, UnicodeError):
        return  # tarfile cannot write this name in this format
    clean = bytes(data)
    for pos, val in edits:
        data[pos % len(data)] = val
    if cut % 3 == 0:
        data = data[: cut % (len(data) + 1)]
    ref = _kernels.load("tarscan", "reference")
    impls = [ref] if _kernels.pure_python() else [ref, _kernels.load("tarscan", "compiled")]
    got = [_scan(m, bytes(data), lanes) for m in impls for lanes in (1, 3, 8)]
    assert all(g == got[0] for g in got)
    if not edits and cut % 3:
        with tarfile.open(fileobj=io.BytesIO(clean)) as tf:
            tm = [m for m in tf.getmembers()]
        assert got[0][1] == 0
        assert got[0][3] == [m.offset_data - 512 for m in tm]
        assert got[0][4] == [m.size for m in tm]
        # (tarfile drops the trailing "/" of a name it reads as a directory's; the scanner
        # reports the name as stored)
        names = [n.decode("utf-8", "surrogateescape") for n in got[0][5]]
        assert [n.rstrip("/") for n in names] == [m.name.rstrip("/") for m in tm]


def test_hashtable_known(kernels):
    ht = kernels("hashtable")
    keys = np.array([5, 13, 5, 7, 21], np.uint64)  # 5, 13, 21 share the low bits of an 8-slot table
    table = np.full(8, -1, np.int32)
    assert ht.insert(keys, np.arange(5, dtype=np.int64), table) == 4  # duplicate 5 keeps row 0
    out = np.zeros(5, np.int64)
    ht.probe(keys, table, np.array([5, 13, 21, 7, 99], np.uint64), out)
    assert out.tolist() == [0, 1, 4, 3, -1]
    with pytest.raises(ValueError):
        ht.insert(keys, np.array([0], np.int64), np.full(6, -1, np.int32))
    with pytest.raises(ValueError):
        ht.insert(keys, np.array([9], np.int64), table)
    with pytest.raises(ValueError):
        ht.insert(np.arange(10, dtype=np.uint64), np.arange(10, dtype=np.int64),
                  np.full(8, -1, np.int32))


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40), st.lists(st.integers(0, 2**64 - 1),
                                                                  max_size=20))
def test_hashtable_differential(keys, queries):
    keys_a = np.array(keys + keys[:5], np.uint64)
    q = np.array(queries + keys[:10], np.uint64)
    impls = [_kernels.load("hashtable", "reference")]
    if not _kernels.pure_python():
        impls.append(_kernels.load("hashtable", "compiled"))
    results = []
    for mod in impls:
        table = np.full(128, -1, np.int32)
        mod.insert(keys_a, np.arange(keys_a.size, dtype=np.int64), table)
        out = np.zeros(q.size, np.int64)
        mod.probe(keys_a, table, q, out)
        results.append((table.tolist(), out.tolist()))
        first = {}
        for i, k in enumerate(keys_a.tolist()):
            first.setdefault(k, i)
        assert out.tolist() == [first.get(k, -1) for k in q.tolist()]
    assert all(r == results[0] for r in results)
