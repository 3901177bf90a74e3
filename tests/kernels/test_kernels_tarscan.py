"""tarscan kernel family: known answers on both implementations, differential, fuzz."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from _kernels_isolated import differential
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
    return (
        count,
        code,
        where,
        outs[0][:count].tolist(),
        outs[1][:count].tolist(),
        names,
        bytes(outs[6][:count]),
    )


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
    assert _scan(kernels("tarscan"), data) == (
        2,
        0,
        0,
        [0, 1536],
        [600, 1],
        [b"a.jpg", b"b/c.cls"],
        b"00",
    )


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


@pytest.mark.parametrize(
    "mutate, code, where",
    [
        (lambda b: b[:700], 4, 0),  # payload past end
        (lambda b: b[:300] + b"\x01", 1, 0),  # partial header block
        (lambda b: b[:148] + b"0000000\0" + b[156:], 2, 0),  # bad checksum
        (lambda b: b[:1536] + b"\x07" + b[1537:], 2, 1536),  # second header corrupted
    ],
)
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
        kernels("tarscan").scan(
            np.zeros(1024, np.uint8), *[np.zeros(1, np.int64)] * 6, np.zeros(1, np.uint8)
        )


def test_scan_readonly_buffer(kernels):
    data = np.frombuffer(_tar([("a.b", b"z")]), np.uint8)
    assert not data.flags.writeable
    assert _scan(kernels("tarscan"), data.tobytes())[0] == 1


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
                    {"comment": "global"}, tarfile.XGLTYPE, "utf-8"
                )
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


member = st.tuples(
    st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=160),
    st.binary(max_size=700),
)


@given(
    st.lists(member, max_size=5),
    st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
    st.integers(0, 10**6),
)
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


def _pax_tar(record: bytes) -> bytes:
    """A pax 'x' header carrying ``record``, then a plain member."""
    h = bytearray(512)
    h[:8] = b"PaxHdr\0\0"
    h[124:136] = b"%011o\0" % len(record)
    h[156] = ord("x")
    h[257:263] = b"ustar\0"
    body = record + b"\0" * (-len(record) % 512)
    return _with_checksum(h) + body + _tar([("a.b", b"z")])


@pytest.mark.parametrize("digits", [14, 4301, 6000])
def test_pax_length_with_many_digits(digits):
    """A pax record length of thousands of digits: the reference converted it with int() and
    raised Python's digit-limit ValueError; both now report a bad pax header at offset 0."""
    data = _pax_tar(b"9" * digits + b" path=x\n")
    got = differential("tarscan", lambda k: _scan(k, data)[:3])
    assert got == (0, _kernels.load("tarscan", "reference").E_PAX, 0)


@given(
    st.integers(0, 8),
    st.sampled_from([0, 1, 3, 8, 9, 2**31 - 1, -1, 2**31, -(2**31) - 1]),
    st.integers(0, 4),
)
def test_scan_hostile_differential(short, lanes, nmembers):
    """Outputs shorter than ``len(buf) // 512`` and any ``lanes``: same result or same refusal."""
    data = _tar([(f"m{i}.x", b"q" * (i * 300)) for i in range(nmembers)])
    buf = np.frombuffer(data, np.uint8)
    cap = buf.size // 512

    def call(k):
        outs = [np.zeros(max(0, cap - short), np.int64) for _ in range(6)]
        outs.append(np.zeros(max(0, cap - (short // 2)), np.uint8))
        res = tuple(k.scan(buf, *outs, lanes=lanes))
        return res, [o[: res[0]].tolist() for o in outs]  # entries past count: scratch

    differential("tarscan", call)


# -- member checks (the read-time header check of TARIDX) --------------------------------------


def _one_member_tar(name: str, fmt: int) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as tf:
        info = tarfile.TarInfo(name)
        info.size = 5
        tf.addfile(info, io.BytesIO(b"12345"))
    return bio.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@given(
    stem=st.text(
        st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="./"),
        min_size=1,
        max_size=150,
    ),
    ext=st.sampled_from(["jpg", "cls", "JSON", ""]),
    claim_size=st.sampled_from([5, 4, 2**40]),
    lie=st.booleans(),
)
def test_member_checks_compiled_vs_reference(fmt, stem, ext, claim_size, lie):
    from xxhash import xxh64_intdigest

    name = f"dir/{stem}.{ext}" if ext else f"dir/{stem}"
    data = _one_member_tar(name, fmt)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        off = tf.getmembers()[0].offset_data - 512
    claim = (stem + "x") if lie else stem
    kh = xxh64_intdigest(claim.encode())
    got = differential(
        "tarscan", lambda m: m.check_member(data, off, claim_size, kh, ext.lower().encode())
    )
    ts = _kernels.load("tarscan")
    if claim_size == 5 and not lie:
        assert got == ts.M_OK
    else:
        assert got != ts.M_OK
    code, n_off, n_len, size, typ = differential(
        "tarscan", lambda m: m.member_name(data, off, True)
    )
    assert (code, size) == (0, 5)
    assert data[n_off : n_off + n_len].decode().endswith(f"{stem}.{ext}" if ext else stem)


# -- walk / find_member (the TARIDX build's ranges) --------------------------------------------


def _walk(mod, data: bytes, start: int, stop: int, cap: int | None = None, regular=True):
    buf = np.frombuffer(data, np.uint8)
    cap = buf.size // 512 + 1 if cap is None else cap
    outs = [np.zeros(cap, np.int64) for _ in range(6)]
    outs += [np.zeros(cap, np.uint64) for _ in range(2)] + [
        np.zeros(cap, np.uint8) for _ in range(2)
    ]
    res = tuple(mod.walk(buf, start, stop, *outs, regular_only=regular))
    return res, [o[: res[0]].tolist() for o in outs]


def test_walk_names_known(kernels):
    """The basename split at its first dot, hashed, and flagged in the walk itself."""
    from tenfold.core.checksums import xxh64

    k = kernels("tarscan")
    data = _tar([("x/Ab.C.JPG", b"1"), ("dir/", b""), ("é.cls", b"22"), ("a/no\next.j", b""),
                 ("noext", b"3")])  # fmt: skip
    (count, code, where, end, status), outs = _walk(k, data, 0, 1 << 62)
    assert (count, code, where, status) == (5, 0, 0, k.WALK_FINISHED)
    hdr, size, n_off, n_len, s_off, s_len, kh, eh, tflag, flags = outs
    stems = [data[o : o + n] for o, n in zip(s_off, s_len, strict=True)]
    assert stems == [b"Ab", b"", "é".encode(), b"no\next", b"noext"]
    assert kh == [xxh64(s) for s in stems]
    assert eh == [xxh64(e) for e in (b"c.jpg", b"", b"cls", b"j", b"")]
    a, nl = k.FLAG_ASCII, k.FLAG_NEWLINE
    assert flags == [a, a, 0, a | nl, a]
    assert size == [1, 0, 2, 0, 1]
    # regular_only=False: the same here (tarfile wrote "dir/" as a regular file) ...
    assert _walk(k, data, 0, 1 << 62, regular=False) == _walk(k, data, 0, 1 << 62)
    # ... and stopping: at the first header at or past stop, no state carried
    (count, code, where, end, status), _ = _walk(k, data, 0, hdr[2])
    assert (count, end, status) == (2, hdr[2], k.WALK_STOPPED)
    # from a later header
    (count, *_), outs2 = _walk(k, data, hdr[2], 1 << 62)
    assert count == 3 and outs2[0] == hdr[2:]


def test_walk_stops_with_state_and_capacity(kernels):
    k = kernels("tarscan")
    data = _tar([("a" * 150 + ".x", b"1"), ("b.y", b"2")], fmt=tarfile.PAX_FORMAT)
    (count, code, where, end, status), _ = _walk(k, data, 0, 512)  # past the pax 'x' header
    assert (count, status) == (0, k.WALK_STOPPED_STATE)
    (count, code, where, end, status), _ = _walk(k, data, 0, 1 << 62, cap=1)
    assert (count, code, status) == (1, k.E_CAPACITY, k.WALK_FINISHED)


@pytest.mark.parametrize("start, stop", [(-512, 0), (100, 1 << 62), (1 << 40, 1 << 62), (512, 0)])
def test_walk_refuses_bad_ranges(kernels, start, stop):
    data = _tar([("a.b", b"1" * 700)])
    with pytest.raises(ValueError):
        _walk(kernels("tarscan"), data, start, stop)
    with pytest.raises(ValueError):
        kernels("tarscan").find_member(np.frombuffer(data, np.uint8), 10, 5)


@given(
    st.lists(member, max_size=6),
    st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    st.lists(st.integers(0, 10**5), max_size=3),
)
def test_walk_ranges_differential(members, fmt, edits, cuts):
    """walk and find_member agree between the implementations, and walks from find_member's
    starts that meet give one walk's members."""
    try:
        data = bytearray(_tar(members, fmt=fmt))
    except (ValueError, UnicodeError):
        return
    for pos, val in edits:
        data[pos % len(data)] = val
    data = bytes(data)
    buf = np.frombuffer(data, np.uint8)

    def call(k):
        starts = [0]
        for c in sorted(cuts):
            s = k.find_member(buf, c % (len(data) + 1), len(data))
            if s > starts[-1]:
                starts.append(s)
        stops = [*starts[1:], 1 << 62]
        return starts, [_walk(k, data, a, b) for a, b in zip(starts, stops, strict=True)]

    starts, parts = differential("tarscan", call)
    k = _kernels.load("tarscan")
    whole = _walk(k, data, 0, 1 << 62)
    heads = [res for res, _ in parts]
    if all(h[4] == k.WALK_STOPPED and h[3] == s for h, s in zip(heads, starts[1:], strict=False)):
        cat = [sum((outs[j] for _, outs in parts), []) for j in range(10)]
        assert cat == whole[1]
        assert heads[-1][1:3] == whole[0][1:3]
