"""FOLD conformance: every pyfolds 1.0.2 (v102) and main-branch (head) vector, read in place.

Clean files read to the sidecar's payloads and decoded values, the index JSON and chunk headers
rebuild byte-identically, and every corrupted file gives its expected result: repaired where
the Reed-Solomon parity can correct it, else a tenfold error naming chunk and offset.
"""

from __future__ import annotations

import hashlib
import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import tenfold.fold as fold
from tenfold.core.report import ERROR, REPAIRED, WARNING
from tenfold.core.report import REPAIRABLE as REPAIRABLE_  # verify's status (REPAIRABLE: cases)
from tenfold.errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UncorrectableError,
    UnsupportedError,
)

GENS = ("v102", "head")
FILES = [
    "basic_none_noecc.fold",
    "basic_none_rs32.fold",
    "basic_zstd_noecc.fold",
    "basic_zstd_rs16.fold",
    "basic_zstd_rs32.fold",
    "basic_zstd_rs64.fold",
    "small_rs32.fold",
    "model_none_rs32.mind",
    "model_zstd_noecc.mind",
    "highlevel/neuron_off.fold",
    "highlevel/neuron_med.fold",
]
ALL = [(g, f) for g in GENS for f in FILES] + [("head", "basic_zstd_noecc_hmac.fold")]
HMAC_KEY = "vector-hmac-key"


def _sidecar(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".json").read_text())


def _sha(b) -> str:
    return hashlib.sha256(memoryview(b)).hexdigest()


@pytest.mark.parametrize("gen, name", ALL)
def test_vector_reads_clean(conformance, gen, name):
    path = conformance / "fold" / gen / name
    side = _sidecar(path)
    key = side.get("hmac_key")
    with fold.Reader(path, hmac_key=key) as r:
        assert [c.name for c in r.chunks] == [c["name"] for c in side["index"]["chunks"]]
        assert r.metadata == side["index"]["metadata"]
        assert r.manifest_ok is True
        assert r.is_mind == name.endswith(".mind")
        for c in r.chunks:
            data = r.read(c.name)
            assert data.size == c.uncomp_len
            if "chunks" in side:
                assert _sha(data) == side["chunks"][c.name]["payload_sha256"]
        rep = r.verify()
    assert rep.ok, rep.format()


@pytest.mark.parametrize("gen", GENS)
def test_vector_decoded_values(conformance, gen):
    path = conformance / "fold" / gen / "basic_zstd_rs32.fold"
    chunks = _sidecar(path)["chunks"]
    with fold.Reader(path) as r:
        assert r.read_json("meta") == chunks["meta"]["decoded"]["value"]
        arrays = r.read_arrays("arrays")
        for k, want in chunks["arrays"]["decoded"]["arrays"].items():
            assert str(arrays[k].dtype) == want["dtype"] and list(arrays[k].shape) == want["shape"]
            assert _sha(np.ascontiguousarray(arrays[k])) == want["sha256_of_tobytes"]
        assert r.read_bytes("empty") == b""
        assert _sha(r.read("blob")) == chunks["blob"]["decoded"]["sha256"]
        if gen == "head":  # STEN (safetensors): readable without torch
            sd = r.read_state_dict("torch_state")
            for k, want in chunks["torch_state"]["decoded"]["tensors"].items():
                assert str(sd[k].dtype) == want["dtype"] and list(sd[k].shape) == want["shape"]
                assert _sha(sd[k].tobytes()) == want["sha256_of_tobytes"]
                assert not sd[k].flags.writeable


def test_vector_highlevel_state_dict(conformance):
    path = conformance / "fold" / "head" / "highlevel" / "neuron_med.fold"
    want = _sidecar(path)["state_dict"]
    with fold.Reader(path) as r:
        sd = r.read_state_dict("torch_state")
    assert set(sd) == set(want)
    for k, w in want.items():
        assert list(sd[k].shape) == w["shape"]
        assert _sha(np.ascontiguousarray(sd[k]).tobytes()) == w["sha256"]


def test_vector_tsav_needs_torch(conformance):
    path = conformance / "fold" / "v102" / "basic_none_noecc.fold"
    try:
        import torch  # noqa: F401
    except ImportError:
        with fold.Reader(path) as r, pytest.raises(UnsupportedError, match="torch"):
            r.read_state_dict("torch_state")
    else:
        with fold.Reader(path) as r:
            sd = r.read_state_dict("torch_state")
        assert set(sd) == {"weight", "bias", "steps"}


def test_hmac_vector_needs_key(conformance):
    path = conformance / "fold" / "head" / "basic_zstd_noecc_hmac.fold"
    with fold.Reader(path) as r:
        assert r.manifest_ok is None
        with pytest.raises(IntegrityError, match="no hmac_key"):
            r.read("meta")
        assert r.read("meta", verify=False).size == 138
    with pytest.warns(fold.FoldWarning, match="manifest_hash"):
        r = fold.Reader(path, hmac_key=b"wrong-key")
    with r, pytest.raises(IntegrityError, match="sha256"):
        r.read("blob")
    with pytest.raises(IntegrityError, match="no hmac_key"):
        fold.Reader(path, strict=True)
    rep = fold.verify(path)
    assert any(f.status == WARNING and "hmac" in f.message for f in rep.findings)


@pytest.mark.parametrize("gen, name", ALL)
def test_vector_rebuilds_byte_identical(conformance, tmp_path, gen, name):
    """Same payloads, metadata, options and created_at_unix: same index and chunk headers.

    Whole files are identical too, except the ECC of multi-block chunks in v102 files, where
    pyfolds 1.0.2 stored wrong parity (docs/formats/fold.md) and tenfold writes each block's parity.
    """
    path = conformance / "fold" / gen / name
    orig = path.read_bytes()
    key = HMAC_KEY if "hmac" in name else None
    with fold.Reader(path, hmac_key=key) as r:
        c0 = r.chunks[0]
        style = "hex"
        for prefix in ("sha256:", "hmac-sha256:"):
            if c0.sha256.startswith(prefix):
                style = prefix
        md = {k: v for k, v in r.metadata.items() if k not in ("chunk_hashes", "manifest_hash")}
        payloads = [(c.name, c.ctype, r.read_bytes(c.name)) for c in r.chunks]
        opts = dict(
            compress="zstd" if c0.flags else None,
            ecc=c0.ecc_algo,
            digest=style,
            hmac_key=key,
            created_at_unix=r.created_at_unix,
        )
        entries = [json.loads(json.dumps(c.__dict__)) for c in r.chunks]
    out = tmp_path / "rebuilt.fold"
    with fold.Writer(out, **opts) as w:
        for n, t, p in payloads:
            w.add_chunk(n, t, p)
        w.finalize(md)
    new = out.read_bytes()
    (o1, l1), (o2, l2) = struct.unpack(">QQ", orig[12:28]), struct.unpack(">QQ", new[12:28])
    assert new[o2 : o2 + l2] == orig[o1 : o1 + l1]
    assert new[:28] == orig[:28]
    multi = []
    for e in entries:
        assert new[e["offset"] : e["offset"] + 32] == orig[e["offset"] : e["offset"] + 32]
        if e["ecc_len"] > (e["ecc_len"] and int(e["ecc_algo"][3:-1])):
            multi.append((e["offset"] + 32 + e["comp_len"], e["ecc_len"]))
    if gen == "head" or not multi:
        assert new == orig
    else:
        a, b = bytearray(orig), bytearray(new)
        for off, n in multi:
            a[off : off + n] = b[off : off + n] = bytes(n)
        assert a == b and new != orig


# -- corrupted vectors ------------------------------------------------------------------------

OPEN_ERRORS = {
    "truncate_0": (TruncatedError, "file too short"),
    "truncate_20": (TruncatedError, "file too short"),
    "truncate_in_index": (TruncatedError, "index at offset"),
    "truncate_in_chunks": (TruncatedError, "index at offset"),
    "truncate_last_byte": (TruncatedError, "index at offset"),
    "bad_magic": (FormatError, "magic"),
    "bad_header_len": (FormatError, "header_len"),
    "index_off_lt_header": (FormatError, "index_off"),
    "header_zeroed_unfinalized": (FormatError, "unfinalized"),
    "index_off_beyond_eof": (TruncatedError, "index at offset"),
    "index_len_plus1": (TruncatedError, "index at offset"),
    "index_len_max_plus1": (LimitError, "index_len"),
    "index_len_u64max": (LimitError, "index_len"),
    "index_len_minus1": (FormatError, "invalid JSON"),
    "index_bad_json": (FormatError, "invalid JSON"),
    "index_bad_utf8": (FormatError, "invalid UTF-8"),
    "index_format_not_fold": (FormatError, "format"),
    "index_version_999": (UnsupportedError, "version"),
}

# chunk -> (exception, message part); chunks not listed read correctly
CHUNK_ERRORS = {
    "ecc_blob_b0_17bytes": {"blob": (UncorrectableError, "more errors than the code corrects")},
    "ecc_blob_b0_40bytes": {"blob": (UncorrectableError, "more errors than the code corrects")},
    "ecc_meta_17bytes": {"meta": (UncorrectableError, "more errors than the code corrects")},
    "small_ecc_meta_17bytes": {"meta": (UncorrectableError, "more errors")},
    "noecc_blob_1byte": {"blob": (IntegrityError, "crc32c mismatch")},
    "noecc_meta_1byte": {"meta": (IntegrityError, "crc32c mismatch")},
    "index_chunk_sha_tamper": {"meta": (IntegrityError, "sha256")},
    "index_chunk_hashes_tamper": {"meta": (IntegrityError, "chunk_hashes")},
    "chunkhdr_crc_flip": {"meta": (IntegrityError, "header crc32c")},
    "chunkhdr_uncomp_len_huge": {"meta": (LimitError, "uncomp_len")},
    "chunkhdr_uncomp_len_plus1": {"meta": (FormatError, "header uncomp_len")},
    "chunkhdr_comp_len_past_eof": {"meta": (TruncatedError, "past end of file")},
    "chunkhdr_ecc_len_huge": {"meta": (LimitError, "ecc_len")},
    "chunkhdr_flags_zstd_on_raw": {"meta": (FormatError, "header flags")},
    "chunkhdr_flags_7": {"meta": (FormatError, "header flags")},
    "chunkhdr_ctype_changed": {"meta": (FormatError, "header ctype")},
    "ecc_algo_unknown": {"meta": (UnsupportedError, "ecc_algo")},
    "ecc_algo_rs16_mismatch": {"meta": (FormatError, "ecc_len")},
    "ecc_algo_none_with_ecc": {"meta": (UnsupportedError, "ecc_algo")},
}
# v102 multi-block parity is wrong (pyfolds 1.0.2 bug): damage there cannot be corrected
_V102_STALE = (UncorrectableError, "more errors")
V102_CHUNK_ERRORS = {
    **{
        c: {"blob": _V102_STALE}
        for c in (
            "ecc_blob_b0_1byte",
            "ecc_blob_b0_16bytes",
            "ecc_blob_allblocks_16each",
            "ecc_blob_b0_8data_8parity",
            "ecc_blob_last_block_16",
            "zstd_ecc_blob_b1_16bytes",
        )
    },
    "zstd_ecc_arrays_b0_10bytes": {"arrays": _V102_STALE},
}
MANIFEST_WARN = {"index_metadata_tamper", "index_chunk_hashes_tamper"}
# a damaged binary chunk header: read() refuses it; verify/repair rebuild it from the index
# (the payload still verifies against the index's CRC-32C and SHA-256)
HEADER_CASES = {c for c in CHUNK_ERRORS if c.startswith("chunkhdr_")}
# chunks whose CRC fails but whose RS parity corrects them
REPAIRABLE = {
    "ecc_blob_b0_1byte": "blob",
    "ecc_blob_b0_16bytes": "blob",
    "ecc_blob_allblocks_16each": "blob",
    "ecc_blob_b0_8data_8parity": "blob",
    "ecc_blob_last_block_16": "blob",
    "ecc_meta_1byte": "meta",
    "ecc_meta_16bytes": "meta",
    "small_ecc_meta_16bytes": "meta",
    "zstd_ecc_blob_b1_16bytes": "blob",
    "zstd_ecc_arrays_b0_10bytes": "arrays",
}


def _cases(conformance_dir: Path) -> list:
    out = []
    for gen in GENS:
        results = json.loads(
            (conformance_dir / "fold" / gen / "corrupt" / "corrupt_results.json").read_text()
        )
        out += [(gen, case["case"], case["source"]) for case in results]
    return out


def _expected_chunk_errors(gen: str, case: str) -> dict:
    errs = dict(CHUNK_ERRORS.get(case, {}))
    if gen == "v102":
        errs.update(V102_CHUNK_ERRORS.get(case, {}))
    return errs


def pytest_generate_tests(metafunc):
    if "corrupt_case" in metafunc.fixturenames:
        from conftest import CONFORMANCE

        cases = _cases(CONFORMANCE) if CONFORMANCE.is_dir() else []
        metafunc.parametrize("corrupt_case", cases, ids=[f"{g}-{c}" for g, c, _ in cases])


def test_corrupt_table_is_complete(conformance):
    names = {c for _, c, _ in _cases(conformance)}
    assert len(names) == 49
    known = (
        set(OPEN_ERRORS)
        | set(CHUNK_ERRORS)
        | set(REPAIRABLE)
        | MANIFEST_WARN
        | {"ecc_blob_b0_parity16"}
    )
    assert names <= known, names - known


def test_corrupt_vector(conformance, corrupt_case):
    gen, case, source = corrupt_case
    path = conformance / "fold" / gen / "corrupt" / f"{case}.fold"
    payloads = {
        n: c["payload_sha256"] for n, c in _sidecar(conformance / "fold" / source)["chunks"].items()
    }
    if case in OPEN_ERRORS:
        cls, part = OPEN_ERRORS[case]
        with pytest.raises(cls, match=part) as ei:
            fold.Reader(path)
        assert "offset 0x" in str(ei.value) or case in ("truncate_0", "truncate_20")
        rep = fold.verify(path)
        assert not rep.ok and rep.findings[0].status == ERROR
        return
    if case in MANIFEST_WARN:
        with pytest.warns(fold.FoldWarning, match="manifest_hash"):
            r = fold.Reader(path)
        with pytest.raises(IntegrityError, match="manifest_hash"):
            fold.Reader(path, strict=True)
    else:
        r = fold.Reader(path, strict=True)
    errors = _expected_chunk_errors(gen, case)
    with r:
        for c in r.chunks:
            if c.name in errors:
                cls, part = errors[c.name]
                with pytest.raises(cls, match=part) as ei:
                    r.read(c.name)
                assert type(ei.value) is cls
                assert f"chunk {c.name!r} at offset 0x" in str(ei.value)
            else:
                assert _sha(r.read(c.name)) == payloads[c.name], c.name
        rep = r.verify()
    by_obj = {f.obj: f.status for f in rep.findings}
    for name in errors:
        assert by_obj[f"chunk {name!r}"] == (REPAIRABLE_ if case in HEADER_CASES else ERROR)
    if case in REPAIRABLE and REPAIRABLE[case] not in errors:
        assert by_obj[f"chunk {REPAIRABLE[case]!r}"] == REPAIRABLE_


def test_corrupt_vector_repair(conformance, corrupt_case, tmp_path):
    """repair() corrects what ECC and the index can; head files come back byte-identical."""
    gen, case, source = corrupt_case
    path = conformance / "fold" / gen / "corrupt" / f"{case}.fold"
    orig = (conformance / "fold" / source).read_bytes()
    out = tmp_path / "fixed.fold"
    if case in OPEN_ERRORS:  # no index, nothing to repair from: refused, nothing written
        with pytest.raises(OPEN_ERRORS[case][0]):
            fold.repair(path, out)
        assert not out.exists()
        return
    rep = fold.repair(path, out)
    statuses = {f.obj: f.status for f in rep.findings}
    errors = {
        n: e for n, e in _expected_chunk_errors(gen, case).items() if case not in HEADER_CASES
    }
    for name in errors:
        assert statuses[f"chunk {name!r}"] == ERROR
        assert not rep.ok
    fixed = REPAIRABLE.get(case) or ("meta" if case in HEADER_CASES else None)
    if fixed and fixed not in errors:
        assert statuses[f"chunk {fixed!r}"] == REPAIRED
        if gen == "head" or case in HEADER_CASES:
            assert out.read_bytes() == orig
    after = fold.verify(out)
    if case in MANIFEST_WARN:
        assert statuses["manifest"] == ERROR and not after.ok
    elif not errors:
        assert after.ok and not after.warnings, after.format()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fold.FoldWarning)
            with fold.Reader(out) as r:
                for c in r.chunks:
                    r.read(c.name)


def test_corrupt_errors_are_tenfold_errors(conformance):
    """pyfolds raised bare EOFError / ZstdError / ValueError; every failure here is ours."""
    for gen in GENS:
        for path in sorted((conformance / "fold" / gen / "corrupt").glob("*.fold")):
            try:
                with fold.Reader(path) as r:
                    for c in r.chunks:
                        try:
                            r.read(c.name)
                        except TenfoldError:
                            pass
            except TenfoldError:
                pass
            except fold.FoldWarning:
                pass
