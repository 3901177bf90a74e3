"""FOLD reader: corruption (flip, truncate, extend, lying lengths, bombs), limits, strictness,
zero copy, and a Hypothesis fuzz of the whole read path."""

from __future__ import annotations

import json
import struct
import warnings

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

import tenfold.fold as fold
from tenfold.core.report import ERROR, REPAIRABLE, WARNING
from tenfold.errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UncorrectableError,
    UnsupportedError,
)

RNG = np.random.default_rng(5)
BLOB = RNG.integers(0, 256, 1000, dtype=np.uint8).tobytes()


def _write(path, *, compress=None, ecc="rs(32)", **kw):
    with fold.Writer(path, compress=compress, ecc=ecc, **kw) as w:
        w.add_json("meta", {"a": [1, 2, 3], "t": "ação"})
        w.add_chunk("blob", "BLOB", BLOB)
        w.add_chunk("empty", "RAW0", b"")
        w.finalize({"model_type": "t"})
    return path


def _index(path) -> tuple[int, int, dict]:
    b = path.read_bytes()
    off, n = struct.unpack(">QQ", b[12:28])
    return off, n, json.loads(b[off : off + n])


def _rewrite_index(path, fn) -> None:
    """Apply ``fn`` to the index dict and rewrite it in place (header updated)."""
    off, _, idx = _index(path)
    fn(idx)
    new = json.dumps(idx, ensure_ascii=False, separators=(",", ":")).encode()
    b = bytearray(path.read_bytes()[:off]) + new
    b[12:28] = struct.pack(">QQ", off, len(new))
    path.write_bytes(bytes(b))


def _patch_header(path, name, field, value) -> None:
    _, _, idx = _index(path)
    c = next(c for c in idx["chunks"] if c["name"] == name)
    fmt, rel = {
        "flags": (">I", 4),
        "uncomp_len": (">Q", 8),
        "comp_len": (">Q", 16),
        "crc32c": (">I", 24),
        "ecc_len": (">I", 28),
    }[field]
    b = bytearray(path.read_bytes())
    struct.pack_into(fmt, b, c["offset"] + rel, value)
    path.write_bytes(bytes(b))


def _lie(path, name, field, value) -> None:
    """The same lie in the binary header and the index (so they agree)."""
    _patch_header(path, name, field, value)

    def fn(idx):
        next(c for c in idx["chunks"] if c["name"] == name)[field] = value

    _rewrite_index(path, fn)


def _read_all(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fold.FoldWarning)
        with fold.Reader(path, **kw) as r:
            return {c.name: r.read_bytes(c.name) for c in r.chunks}


def test_roundtrip_and_zero_copy(tmp_path):
    p = _write(tmp_path / "a.fold")
    with fold.Reader(p) as r:
        blob = r.read("blob")
        assert blob.tobytes() == BLOB and not blob.flags.writeable
        assert np.shares_memory(blob, r._mf.buffer())  # zero copy from the mapping
        assert r.read_json("meta") == {"a": [1, 2, 3], "t": "ação"}
        assert r.read_bytes("empty") == b""
        assert "blob" in r and len(r) == 3 and not r.is_mind
        with pytest.raises(KeyError, match="no chunk named 'nope'"):
            r.read("nope")
    assert blob.tobytes() == BLOB  # the view outlives the reader


def test_zstd_bounded_output(tmp_path):
    p = _write(tmp_path / "z.fold", compress="zstd")
    with fold.Reader(p) as r:
        assert r.read_bytes("blob") == BLOB and r.chunks[1].flags == 1


def test_flip_every_byte_of_a_chunk_is_repaired(tmp_path):
    p = _write(tmp_path / "a.fold")
    _, _, idx = _index(p)
    c = idx["chunks"][1]
    base = p.read_bytes()
    for pos in range(c["offset"] + 32, c["offset"] + 32 + c["comp_len"] + c["ecc_len"], 37):
        b = bytearray(base)
        b[pos] ^= 0x5A
        p.write_bytes(bytes(b))
        assert _read_all(p)["blob"] == BLOB
    # damage in the data: correctable; damage in the parity only: data intact, parity stale
    for pos, status in (
        (c["offset"] + 40, REPAIRABLE),
        (c["offset"] + 32 + c["comp_len"], WARNING),
    ):
        b = bytearray(base)
        b[pos] ^= 1
        p.write_bytes(bytes(b))
        rep = fold.verify(p)
        assert {f.obj: f.status for f in rep.findings}["chunk 'blob'"] == status
        out = p.with_suffix(".fixed")
        assert fold.repair(p, out).ok
        assert out.read_bytes() == base


def test_flip_without_ecc_is_integrity_error(tmp_path):
    p = _write(tmp_path / "a.fold", ecc=None)
    _, _, idx = _index(p)
    b = bytearray(p.read_bytes())
    b[idx["chunks"][1]["offset"] + 40] ^= 1
    p.write_bytes(bytes(b))
    with fold.Reader(p) as r, pytest.raises(IntegrityError, match="chunk 'blob' at offset 0x"):
        r.read("blob")
    assert not fold.verify(p).ok


def test_damage_beyond_capacity_is_uncorrectable(tmp_path):
    p = _write(tmp_path / "a.fold")
    _, _, idx = _index(p)
    c = idx["chunks"][1]
    b = bytearray(p.read_bytes())
    for i in range(20):  # 20 > 16 errors in block 0
        b[c["offset"] + 32 + i] ^= 0xFF
    p.write_bytes(bytes(b))
    with fold.Reader(p) as r, pytest.raises(UncorrectableError, match="block 0"):
        r.read("blob")
    rep = fold.repair(p, tmp_path / "out.fold")
    assert not rep.ok and rep.errors[0].obj == "chunk 'blob'"


@pytest.mark.parametrize("region", ["header", "chunk0", "chunk1_payload", "chunk1_ecc", "index"])
def test_truncate_every_region(tmp_path, region):
    p = _write(tmp_path / "a.fold")
    off, n, idx = _index(p)
    c0, c1 = idx["chunks"][0], idx["chunks"][1]
    cut = {
        "header": 27,
        "chunk0": c0["offset"] + 10,
        "chunk1_payload": c1["offset"] + 100,
        "chunk1_ecc": c1["offset"] + 32 + c1["comp_len"] + 5,
        "index": off + n // 2,
    }[region]
    data = p.read_bytes()
    # plain truncation: the index (last) is always cut
    p.write_bytes(data[:cut])
    with pytest.raises(TruncatedError):
        fold.Reader(p)
    assert not fold.verify(p).ok
    # the region cut out but the index kept (index_off moved): chunks after it are refused
    if region not in ("header", "index"):
        b = bytearray(data[:cut] + data[cut + 50 :])
        struct.pack_into(">Q", b, 12, off - 50)
        p.write_bytes(bytes(b))
        with fold.Reader(p) as r:
            for c in r.chunks:
                try:
                    got = r.read_bytes(c.name)
                except TenfoldError as exc:
                    assert f"chunk {c.name!r}" in str(exc)
                else:
                    assert got == {"meta": None, "blob": BLOB, "empty": b""}[c.name] or (
                        c.name == "meta"
                    )


def test_extend_is_reported_not_fatal(tmp_path):
    p = _write(tmp_path / "a.fold")
    p.write_bytes(p.read_bytes() + b"garbage")
    assert _read_all(p)["blob"] == BLOB
    rep = fold.verify(p)
    assert rep.ok and any(
        f.status == WARNING and "after the index" in f.message for f in rep.findings
    )


@pytest.mark.parametrize(
    "field, value, cls, part",
    [
        ("comp_len", 10**6, TruncatedError, "past end of file"),
        ("comp_len", 1001, FormatError, "overlaps the next chunk"),
        ("comp_len", 2**31 + 1, LimitError, "MAX_CHUNK_SIZE"),
        ("ecc_len", 32, FormatError, "ecc_len"),
        ("uncomp_len", 999, FormatError, "uncompressed chunk"),
        ("flags", 3, UnsupportedError, "compression"),
    ],
)
def test_lying_length_fields(tmp_path, field, value, cls, part):
    p = _write(tmp_path / "a.fold")
    _lie(p, "blob", field, value)
    with fold.Reader(p) as r, pytest.raises(cls, match=part) as ei:
        r.read("blob")
    assert "chunk 'blob'" in str(ei.value)
    assert not fold.verify(p).ok


def test_lying_index_len_and_offset(tmp_path):
    p = _write(tmp_path / "a.fold")
    b = bytearray(p.read_bytes())
    struct.pack_into(">Q", b, 20, 2**40)
    p.write_bytes(bytes(b))
    with pytest.raises(LimitError, match="index_len"):
        fold.Reader(p)
    struct.pack_into(">QQ", b, 12, 2**63, 10)
    p.write_bytes(bytes(b))
    with pytest.raises(TruncatedError, match="index"):
        fold.Reader(p)


def test_chunk_offset_lies(tmp_path):
    p = _write(tmp_path / "a.fold")
    for off, cls in ((3, FormatError), (10**9, TruncatedError)):

        def fn(idx, off=off):
            idx["chunks"][1]["offset"] = off

        _rewrite_index(p, fn)
        with fold.Reader(p) as r, pytest.raises(cls, match="chunk 'blob'"):
            r.read("blob")


@pytest.mark.parametrize("declare_size", [True, False])
def test_decompression_bomb(tmp_path, declare_size):
    """A zstd frame that expands past uncomp_len is refused without allocating its size."""
    p = tmp_path / "bomb.fold"
    with fold.Writer(p, compress=None) as w:
        w.add_chunk("x", "BLOB", b"\0" * 16)
    bomb = zstandard.ZstdCompressor(write_content_size=declare_size).compress(b"\0" * (64 << 20))
    from tenfold.core.checksums import crc32c, sha256_hex

    # rebuild the file by hand: one zstd chunk declaring uncomp_len 16
    hdr = struct.pack(">4sIQQII", b"BLOB", 1, 16, len(bomb), crc32c(bomb), 0)
    body = hdr + bomb
    idx = {
        "format": "fold",
        "version": "1.2.0",
        "created_at_unix": 0.0,
        "metadata": {},
        "chunks": [
            {
                "name": "x",
                "ctype": "BLOB",
                "flags": 1,
                "offset": 28,
                "header_len": 32,
                "comp_len": len(bomb),
                "uncomp_len": 16,
                "crc32c": crc32c(bomb),
                "sha256": sha256_hex(bomb),
                "ecc_algo": "none",
                "ecc_len": 0,
            }
        ],
    }
    ib = json.dumps(idx).encode()
    p.write_bytes(struct.pack(">8sIQQ", b"FOLDv1\0\0", 28, 28 + len(body), len(ib)) + body + ib)
    with fold.Reader(p) as r, pytest.raises(IntegrityError, match="chunk 'x'"):
        r.read("x")


def test_manifest_warning_and_strict(tmp_path):
    p = _write(tmp_path / "a.fold")

    def fn(idx):
        idx["metadata"]["model_type"] = "tampered"

    _rewrite_index(p, fn)
    with pytest.warns(fold.FoldWarning, match="manifest_hash"):
        r = fold.Reader(p)
    with r:
        assert r.manifest_ok is False and r.read_bytes("blob") == BLOB
    with pytest.raises(IntegrityError, match="manifest_hash"):
        fold.Reader(p, strict=True)
    rep = fold.verify(p)
    assert [f.status for f in rep.findings if f.obj == "manifest"] == [ERROR]


def test_unknown_minor_version(tmp_path):
    p = _write(tmp_path / "a.fold")

    def fn(idx):
        idx["version"] = "1.3.0"

    _rewrite_index(p, fn)
    with pytest.warns(fold.FoldWarning, match="version"):
        fold.Reader(p).close()
    with pytest.raises(UnsupportedError, match="version"):
        fold.Reader(p, strict=True)


@pytest.mark.parametrize(
    "mutate, part",
    [
        (lambda idx: idx.update(chunks={}), "chunks"),
        (lambda idx: idx["chunks"].append(dict(idx["chunks"][0])), "twice"),
        (lambda idx: idx["chunks"][0].update(ctype="TOOLONG"), "ctype"),
        (lambda idx: idx["chunks"][0].update(offset=-1), "offset"),
        (lambda idx: idx["chunks"][0].update(crc32c="x"), "crc32c"),
        (lambda idx: idx["chunks"][0].update(sha256="md5:00"), "sha256"),
        (lambda idx: idx["chunks"][0].pop("comp_len"), "missing"),
        (lambda idx: idx["chunks"][0].update(header_len=31), "header_len"),
        (lambda idx: idx.update(metadata=[]), "metadata"),
        (lambda idx: idx["metadata"].update(chunk_hashes=1), "chunk_hashes"),
        (lambda idx: idx.update(format="folx"), "format"),
    ],
)
def test_bad_index_entries(tmp_path, mutate, part):
    p = _write(tmp_path / "a.fold")
    _rewrite_index(p, mutate)
    with pytest.raises(FormatError, match=part):
        fold.Reader(p)


def test_index_not_an_object(tmp_path):
    p = _write(tmp_path / "a.fold")
    off, _, _ = _index(p)
    b = bytearray(p.read_bytes()[:off]) + b"[1,2]"
    struct.pack_into(">Q", b, 20, 5)
    p.write_bytes(bytes(b))
    with pytest.raises(FormatError, match="not a JSON object"):
        fold.Reader(p)


def test_reader_accepts_buffers(tmp_path):
    p = _write(tmp_path / "a.fold")
    with fold.Reader(p.read_bytes()) as r:
        assert r.read_bytes("blob") == BLOB and r.path is None


# -- fuzz -------------------------------------------------------------------------------------


def _exercise(buf: bytes) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fold.FoldWarning)
        try:
            r = fold.Reader(buf)
        except TenfoldError:
            return
        with r:
            for c in r.chunks:
                for call in (r.read, r.read_json, r.read_arrays, r.read_state_dict):
                    try:
                        call(c.name)
                    except TenfoldError:
                        pass
            r.verify()


@settings(max_examples=150)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data):
    _exercise(b"FOLDv1\0\0" + data)
    _exercise(data)


def _seed_file() -> bytes:
    import io
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.fold"
        with fold.Writer(p, ecc="rs(8)") as w:
            w.add_json("meta", {"k": 1})
            w.add_arrays("arr", {"a": np.arange(6, dtype=np.int16).reshape(2, 3)})
            w.add_state_dict("sd", {"w": np.ones((2, 2), np.float32)})
            w.add_chunk("b", "BLOB", bytes(range(250)) * 2)
            w.finalize({"x": 1})
        _ = io
        return p.read_bytes()


SEED = _seed_file()


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), max_size=8),
    st.integers(0, len(SEED)),
)
def test_fuzz_mutated_file(flips, cut):
    b = bytearray(SEED)
    for pos, val in flips:
        b[pos] = val
    _exercise(bytes(b))
    _exercise(bytes(b[:cut]))


def test_verify_crc_mode_and_large_chunks(tmp_path):
    """verify="crc" skips SHA-256 (a tampered digest goes unseen) but still repairs."""
    p = tmp_path / "big.fold"
    data = np.random.default_rng(2).integers(0, 256, 5 << 20, dtype=np.uint8)
    with fold.Writer(p, compress=None, ecc="rs(16)", fsync=False) as w:
        w.add_chunk("big", "BLOB", data)
    with fold.Reader(p) as r:  # > 4 MiB: SHA-256 in a second thread
        assert np.array_equal(r.read("big"), data)
        off = r.chunk("big").payload_offset

    def fn(idx):
        idx["chunks"][0]["sha256"] = "0" * 64
        idx["metadata"]["chunk_hashes"]["big"] = "0" * 64

    _rewrite_index(p, fn)
    b = bytearray(p.read_bytes())
    b[off + 12345] ^= 0x77
    p.write_bytes(bytes(b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fold.FoldWarning)
        with fold.Reader(p) as r:
            assert np.array_equal(r.read("big", verify="crc"), data)
            with pytest.raises(UncorrectableError, match="sha256"):
                r.read("big")


@pytest.mark.parametrize("payload", [b"[" * 200_000, b"1" * 5000, b'{"a": 1', b"\xff\xfe"])
def test_hostile_json_chunks_are_format_errors(tmp_path, payload):
    p = tmp_path / "j.fold"
    with fold.Writer(p, compress=None, ecc=None) as w:
        w.add_chunk("meta", "JSON", payload)
        w.finalize({})
    with fold.Reader(p) as r, pytest.raises(FormatError, match=r"chunk 'meta'.*invalid"):
        r.read_json("meta")


def test_hostile_json_index_is_a_format_error(tmp_path):
    p = _write(tmp_path / "i.fold")

    def huge_int(idx):
        idx["metadata"]["n"] = 0  # placeholder, replaced textually below

    _rewrite_index(p, huge_int)
    b = p.read_bytes().replace(b'"n":0', b'"n":' + b"7" * 5000)
    off, _ = struct.unpack(">QQ", b[12:28])
    b = b[:12] + struct.pack(">QQ", off, len(b) - off) + b[28:]
    p.write_bytes(b)
    with pytest.raises(FormatError, match="index at offset .*: invalid JSON"):
        fold.Reader(p)
    assert not fold.verify(p).ok
