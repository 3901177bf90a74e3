"""zTensor v1 and v2 read: every vector to its sidecar, the v2 accept/reject corpus in full,
generation detection and dispatch, v1 1.0 layout, shards, structural access."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import xxhash

import tenfold
import tenfold.ztensor as zt
from tenfold.errors import (
    FormatError,
    IntegrityError,
    TenfoldError,
    UnsupportedError,
)
from tenfold.ztensor import _dcbor
from tenfold.ztensor._v2spec import MAGIC, REFERENCE_RULES

#: The vectors copied into the repository (tests/conformance/ztensor/{v1,v2,v2-corpus}).
VECTORS = Path(__file__).resolve().parents[1] / "conformance" / "ztensor"
CORPUS = VECTORS / "v2-corpus"
CASES = json.loads((CORPUS / "cases.json").read_text())["cases"]

V1 = [
    "dense_all_dtypes",
    "empty",
    "sparse_csr_coo",
    "zero_size_and_scalar_quirk",
    "zstd_and_checksums",
]
V2 = ["dense_all_dtypes", "empty", "scalar_and_zero_size", "sparse_csr_coo", "zstd_seekable"]


def _check_sidecar(path: Path) -> None:
    meta = json.loads(path.with_suffix(".json").read_text())
    assert path.stat().st_size == meta["file_size"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == meta["file_sha256"]
    with zt.open(path, sparse="raw") as r:
        assert sorted(r) == sorted(t["name"] for t in meta["tensors"])
        for t in meta["tensors"]:
            got = r[t["name"]]
            if "components" in t:
                dense = np.asarray(t["dense_equivalent"], np.float64).reshape(t["shape"])
                np.testing.assert_array_equal(got.todense().astype(np.float64), dense)
                for role, comp in t["components"].items():
                    arr = {
                        "values": got.data,
                        "indices": got.indices,
                        "indptr": got.indptr,
                        "coords": None if got.coords is None else got.coords.reshape(-1),
                    }[role]
                    assert arr.astype(comp["numpy_dtype"]).tobytes().hex() == comp["raw_le_hex"]
                continue
            assert str(got.dtype) == t["numpy_dtype"], t["name"]
            assert list(got.shape) == t["shape"], t["name"]
            raw = np.ascontiguousarray(got).tobytes()
            assert hashlib.sha256(raw).hexdigest() == t["raw_le_sha256"], t["name"]
            np.testing.assert_array_equal(
                np.asarray(got, dtype=np.float64).reshape(-1) if got.size else got.reshape(-1),
                np.asarray(t["values"], dtype=np.float64) if got.size else got.reshape(-1),
            )
        assert r.verify().ok


def test_vector_lists_are_complete():
    assert sorted(p.stem for p in (VECTORS / "v1").glob("*.zt")) == V1
    assert sorted(p.stem for p in (VECTORS / "v2").glob("*.zt")) == V2
    assert len(CASES) == 76
    files = sorted(p.stem for p in CORPUS.glob("*/*.zt"))
    assert files == sorted(c["name"] for c in CASES)


@pytest.mark.parametrize("stem", V1)
def test_v1_vectors_read_to_sidecars(stem):
    _check_sidecar(VECTORS / "v1" / f"{stem}.zt")


@pytest.mark.parametrize("stem", V2)
def test_v2_vectors_read_to_sidecars(stem):
    _check_sidecar(VECTORS / "v2" / f"{stem}.zt")


def test_detect_names_the_generation(tmp_path):
    assert zt.detect(VECTORS / "v1" / "empty.zt") == "v1"
    assert zt.detect(VECTORS / "v2" / "empty.zt") == "v2"
    p = tmp_path / "a.zt"
    zt.save(p, {"x": np.zeros(2)})
    assert zt.detect(p) == "0.1.0"
    assert tenfold.detect(VECTORS / "v2" / "empty.zt") == "ztensor"  # the format family
    for path, cls in (
        (VECTORS / "v1" / "empty.zt", zt.V1Reader),
        (VECTORS / "v2" / "empty.zt", zt.V2Reader),
        (p, zt.Reader),
    ):
        with tenfold.open(path) as r:
            assert isinstance(r, cls)
    rows = zt.inspect(VECTORS / "v2" / "sparse_csr_coo.zt")
    assert {r["generation"] for r in rows} == {"v2"}
    assert rows[1]["layout"] == "zt.sparse_csr/1" and rows[1]["parts"] == "indptr,values,indices"


def test_cli_inspect_and_verify_name_the_generation(capsys):
    from tenfold.cli import main

    assert main(["inspect", str(VECTORS / "v1" / "zstd_and_checksums.zt")]) == 0
    out = capsys.readouterr().out
    assert "generation" in out.splitlines()[1]
    assert all(line.rstrip().endswith("v1") for line in out.splitlines()[3:])
    assert main(["verify", str(VECTORS / "v2" / "zstd_seekable.zt")]) == 0
    assert "generation: v2" in capsys.readouterr().out
    assert main(["verify", str(CORPUS / "reject" / "manifest-hash-mismatch.zt")]) == 1
    assert "[manifest-hash]" in capsys.readouterr().out


def _corpus_path(case: dict) -> Path:
    for sub in ("valid", "reject"):
        p = CORPUS / sub / f"{case['name']}.zt"
        if p.exists():
            return p
    raise AssertionError(case["name"])


def _run(case: dict, reader=zt.V2Reader):
    """Open with the v2 reader and do the case's operation; return "Valid"/"DataShard" or the
    exception."""
    op = case["op"]
    try:
        with reader(_corpus_path(case), sparse="raw") as r:
            if op.startswith("verify("):
                obj, part = op[7:-1].split(", ")
                r.verify_part(obj, part)
            elif op.startswith("view("):
                obj, part = op[5:-1].split(", ")
                r.read(obj)
            elif op.startswith("readcsr("):
                r.read(op[8:-1])
            else:
                assert op == "open"
            return "DataShard" if r.data_shard else "Valid"
    except TenfoldError as exc:
        return exc


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus(case):
    got = _run(case)
    expect = case["expect"]
    if expect in ("Valid", "DataShard"):
        assert got == expect
        return
    assert isinstance(got, TenfoldError), got
    ref = "Unsupported" if expect == "Unsupported" else expect.split(":", 1)[1]
    rule, cls = REFERENCE_RULES[ref]
    assert isinstance(got, cls), (type(got), got)
    assert got.rule == rule  # type: ignore[attr-defined]
    assert str(got).endswith(f"[{rule}]")
    assert str(got).startswith("zt: ")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_through_generic_open(case):
    """tenfold.ztensor.open (dispatch by magic) refuses every reject file too."""
    got = _run(case, zt.open)
    if case["expect"] in ("Valid", "DataShard"):
        assert got == case["expect"]
    else:
        assert isinstance(got, TenfoldError)


def test_rule_table_covers_every_corpus_rule():
    used = {c["expect"].split(":", 1)[1] for c in CASES if c["expect"].startswith("Reject")}
    assert used <= set(REFERENCE_RULES)
    assert len({r for r, _ in REFERENCE_RULES.values()}) == len(REFERENCE_RULES)


def test_valid_corpus_reads():
    with zt.open(CORPUS / "valid" / "f4-packed-odd-count.zt") as r:
        # the corpus file opens (metadata) but its final odd nibble is 0xa: decoding refuses
        with pytest.raises(FormatError, match=r"final odd f4 nibble.*\[layout-data\]"):
            r["t"]
    good = bytearray((CORPUS / "valid" / "f4-packed-odd-count.zt").read_bytes())
    good[4098] = 0x0B
    with zt.open(bytes(good)) as r:
        a = r["t"]
        assert a.shape == (5,) and str(a.dtype) == "float4_e2m1fn"
        raw = r.stored("t")
        assert raw.size == 3
        want = [raw[0] & 15, raw[0] >> 4, raw[1] & 15, raw[1] >> 4, raw[2] & 15]
        assert a.view(np.uint8).tolist() == [int(x) for x in want]
    with zt.open(CORPUS / "valid" / "aliased-identical-blobs.zt") as r:
        np.testing.assert_array_equal(r["a"], r["b"])
        assert np.shares_memory(r["a"], r["b"])
    with zt.open(CORPUS / "valid" / "unknown-layout-structural.zt") as r:
        q = r["q"]
        assert isinstance(q, zt.PartsObject) and q.layout == "x.custom/1"
        assert q["data"].size == 32 and q["scales"].size == 104
    with zt.open(CORPUS / "valid" / "unknown-ltype-structural.zt") as r:
        with pytest.raises(UnsupportedError, match=r"unknown logical type.*\[unsupported\]"):
            r["t"]
        assert r.stored("t").size == 8  # structural access still works
    with zt.open(CORPUS / "valid" / "attributes-kitchen-sink.zt") as r:
        assert r.attributes == {
            "neg": -42,
            "raw": b"\x00\x01\x02",
            "float": 1.25,
            "nested": [None, True],
        }
    with zt.open(CORPUS / "valid" / "zero-size-tensor.zt") as r:
        assert r["z"].shape == (0, 4)


def test_zero_copy_views_and_digest_on_first_read():
    path = VECTORS / "v2" / "dense_all_dtypes.zt"
    with zt.open(path) as r:
        a = r["t_float32"]
        assert not a.flags.writeable and not a.flags.owndata
        assert r.info("t_float32").zero_copy
        info = r.info("t_bool")
        assert info.parts["data"].type == "bool" and info.dtype == "bool"
        assert r["t_bool"].dtype == np.bool_
        assert r.read("t_float32", copy=True).flags.writeable
    data = bytearray(path.read_bytes())
    with zt.open(path) as r:
        off = r.info("t_int32").offset
    data[off] ^= 1
    with zt.open(bytes(data)) as r:
        with pytest.raises(IntegrityError, match=r"t_int32.*xxh3 digest mismatch.*\[digest\]"):
            r["t_int32"]
    with zt.open(bytes(data), verify_checksums=False) as r:
        r["t_int32"]
    assert not zt.verify(bytes(data)).ok


def test_zstd_seekable_parts_are_decoded_not_viewed():
    with zt.open(VECTORS / "v2" / "zstd_seekable.zt") as r:
        info = r.info("zstd_i64_100")
        assert info.encoding == "zt.zstd-seekable/1" and not info.zero_copy
        a = r["zstd_i64_100"]
        assert a.flags.owndata or a.base is not None
        assert a.shape == (100,)


def _v2_file(manifest: dict, blobs: dict[int, bytes], size_hint: int = 0) -> bytes:
    raw = _dcbor.encode(manifest)
    end = max([off + len(b) for off, b in blobs.items()] + [4096, size_hint])
    moff = -(-end // 4096) * 4096
    buf = bytearray(moff)
    buf[:8] = MAGIC
    for off, b in blobs.items():
        buf[off : off + len(b)] = b
    footer = struct.pack("<QQQII", moff, len(raw), xxhash.xxh3_64_intdigest(raw), 2, 0) + MAGIC
    return bytes(buf) + raw + footer


def _data_shard(blobs: dict[int, bytes]) -> bytes:
    end = max(off + len(b) for off, b in blobs.items())
    buf = bytearray(end)
    buf[:8] = MAGIC
    for off, b in blobs.items():
        buf[off : off + len(b)] = b
    return bytes(buf) + bytes(24) + struct.pack("<II", 2, 0) + MAGIC


def test_shards_are_resolved_checked_and_verified(tmp_path):
    payload = np.arange(6, dtype=np.float32).tobytes()
    shard = _data_shard({4096: payload})
    (tmp_path / "model-00001.zt").write_bytes(shard)
    digest = "xxh3:" + f"{xxhash.xxh3_64_intdigest(shard):016x}"
    man = {
        "objects": {
            "w": {
                "shape": [2, 3],
                "layout": "dense",
                "parts": {"data": {"dtype": "f32", "blob": [4096, 24], "shard": "00001"}},
            },
        },
        "shards": {"00001": {"size": len(shard), "digest": digest}},
    }
    (tmp_path / "model.zt").write_bytes(_v2_file(man, {}))
    with zt.open(tmp_path / "model.zt") as r:
        np.testing.assert_array_equal(r["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
        assert r.verify().ok
    with zt.open(tmp_path / "model.zt", shards={"00001": tmp_path / "model-00001.zt"}) as r:
        assert r["w"].shape == (2, 3)
    with zt.open(tmp_path / "model-00001.zt") as r:
        assert r.data_shard and len(r) == 0
    # a shard of the wrong size is refused when it is first used
    (tmp_path / "model-00001.zt").write_bytes(shard + bytes(8))
    with zt.open(tmp_path / "model.zt") as r:
        with pytest.raises(FormatError, match=r"shard '00001'.*wrong size"):
            r["w"]
    # same size, different content: verify() catches it through the shard digest
    bad = bytearray(shard)
    bad[4096] ^= 0xFF
    (tmp_path / "model-00001.zt").write_bytes(bytes(bad))
    assert not zt.verify(tmp_path / "model.zt").ok
    with zt.open(tmp_path / "model.zt", verify_shards=True) as r:
        with pytest.raises(IntegrityError, match=r"\[digest\]"):
            r["w"]


def test_shard_traversal_is_refused_before_any_file_is_opened(tmp_path, monkeypatch):
    import tenfold.core.mapped as mapped

    opened = []
    real = mapped.MappedFile.__init__

    def spy(self, source, **kw):
        opened.append(str(source))
        real(self, source, **kw)

    monkeypatch.setattr(mapped.MappedFile, "__init__", spy)
    for name in ("../etc/passwd", "sub/dir", ".hidden", "", "a" * 65, "x\\y"):
        man = {"objects": {}, "shards": {name: {"size": 48, "digest": "xxh3:" + "0" * 16}}}
        p = tmp_path / "m.zt"
        p.write_bytes(_v2_file(man, {}))
        opened.clear()
        with pytest.raises(FormatError, match=r"\[shard-name\]"):
            zt.open(p)
        assert opened == [str(p)]
    with pytest.raises(FormatError, match=r"\[shard-name\]"):
        zt.V2Reader(CORPUS / "valid" / "minimal.zt", shards={"../x": "y"})


def _v10_file(tensors: dict[str, np.ndarray]) -> bytes:
    """A zTensor 1.0 file as its spec lays it out: ZTEN1000, 64-aligned blobs, a CBOR map
    {version, tensors} and the u64 manifest size at EOF (no footer magic)."""
    import cbor2

    buf = bytearray(b"ZTEN1000")
    entries = {}
    for name, a in tensors.items():
        buf += bytes(-len(buf) % 64)
        entries[name] = {
            "dtype": str(a.dtype),
            "shape": list(a.shape),
            "format": "dense",
            "components": {"data": {"offset": len(buf), "length": a.nbytes}},
        }
        buf += a.tobytes()
    man = cbor2.dumps({"version": "1.0", "generator": "test", "tensors": entries})
    return bytes(buf) + man + len(man).to_bytes(8, "little")


def test_v1_0_layout(tmp_path):
    p = tmp_path / "old.zt"
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([True, False, True])
    p.write_bytes(_v10_file({"a": a, "b": b}))
    assert zt.detect(p) == "v1"
    with zt.open(p) as r:
        assert r.layout == "1.0"
        np.testing.assert_array_equal(r["a"], a)
        np.testing.assert_array_equal(r["b"], b)
        assert r["b"].dtype == np.bool_
    assert zt.verify(p).ok


def test_v1_damage_is_refused(tmp_path):
    src = (VECTORS / "v1" / "zstd_and_checksums.zt").read_bytes()
    with zt.open(src) as r:
        off = r.info("raw_sha_f16_4x4").offset
    bad = bytearray(src)
    bad[off] ^= 4
    with zt.open(bytes(bad)) as r:
        with pytest.raises(IntegrityError, match="sha256 checksum mismatch"):
            r["raw_sha_f16_4x4"]
    for n in range(len(src)):
        try:
            with zt.open(src[:n]) as r:
                r.read_all()
        except TenfoldError:
            continue
        raise AssertionError(f"truncation to {n} bytes was accepted")


def test_deterministic_cbor_roundtrip_and_refusals():
    for v in [
        0,
        23,
        24,
        2**64 - 1,
        -(2**64),
        1.5,
        1e300,
        float("inf"),
        "é",
        b"\x00",
        [1, [2]],
        {"b": 1, "aa": {}},
        None,
        True,
    ]:
        b = _dcbor.encode(v)
        assert _dcbor.encode(_dcbor.decode(b)) == b
    for raw, rule in [
        (b"\x18\x05", "cbor-deterministic"),
        (b"\xa2\x61b\x00\x61a\x00", "cbor-deterministic"),
        (b"\xa2\x61a\x00\x61a\x00", "cbor-duplicate-key"),
        (b"\x9f\xff", "cbor-syntax"),
        (b"\xc0\x00", "cbor-syntax"),
        (b"\xa0\x00", "cbor-syntax"),
        (b"\xfb\x3f\xf8\x00\x00\x00\x00\x00\x00", "cbor-deterministic"),
        (b"\xf9\x7e\x01", "cbor-deterministic"),
        (b"\x81" * 40 + b"\x00", "cbor-depth"),
        (b"\x9b" + b"\xff" * 8, "cbor-syntax"),
        (b"\x62\xff\xfe", "cbor-syntax"),
    ]:
        with pytest.raises(_dcbor.CborReject) as ei:
            _dcbor.decode(raw)
        assert ei.value.rule == rule, raw
