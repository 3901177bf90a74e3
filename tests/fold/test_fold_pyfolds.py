"""FOLD against the reference implementation, pyfolds 1.0.2 (``FoldWriter`` / ``FoldReader``).

Files written by pyfolds are read by tenfold and files written by tenfold are read by pyfolds;
for the same chunks, metadata and ``created_at_unix`` the two writers produce the same bytes.
ECC cases that go through pyfolds' reader stay within one RS block: pyfolds 1.0.2 stores a wrong
tail as the parity of longer chunks and cannot read its own multi-block ECC files.
"""

from __future__ import annotations

import io
import json
import struct
import types

import numpy as np
import pytest

import tenfold.fold as fold

pytestmark = pytest.mark.peer

foldio = pytest.importorskip(
    "pyfolds.serialization.foldio",
    reason="pyfolds 1.0.2 (FOLD reference; pip install --no-deps pyfolds==1.0.2 google-crc32c) "
    "not installed",
)
ecc_mod = pytest.importorskip("pyfolds.serialization.ecc", reason="pyfolds not installed")

CREATED = 1712345678.123456
METADATA = {"model_type": "peer-test", "b": [1, 2.5, None], "ação": {"z": True, "a": "ü"}}


@pytest.fixture
def fixed_clock(monkeypatch):
    """pyfolds stamps ``created_at_unix`` with ``time.time()``: pin it."""
    monkeypatch.setattr(foldio, "time", types.SimpleNamespace(time=lambda: CREATED))


def _chunks(seed: int, max_len: int) -> list[tuple[str, str, bytes]]:
    """Random chunks: random bytes, a compressible run, a JSON chunk, an empty chunk."""
    rng = np.random.default_rng(seed)
    out = [
        ("blob", "BLOB", rng.integers(0, 256, int(rng.integers(1, max_len)), np.uint8).tobytes()),
        ("zeros", "RAW0", bytes(int(rng.integers(1, max_len)))),
        ("meta", "JSON", json.dumps({"seed": seed, "x": "é"}, ensure_ascii=False).encode()),
        ("vazio-ç", "BLOB", b""),
    ]
    return [c for c in out if len(c[2]) <= max_len]


def _pyfolds_ecc(nsym: int | None):
    return ecc_mod.ReedSolomonECC(nsym) if nsym else ecc_mod.NoECC()


def _write_pyfolds(path, chunks, compress: str, nsym: int | None) -> None:
    with foldio.FoldWriter(str(path), compress=compress, ecc=_pyfolds_ecc(nsym)) as w:
        for name, ctype, data in chunks:
            w.add_chunk(name, ctype, data)
        w.finalize(METADATA)


def _write_tenfold(path, chunks, compress: str, nsym: int | None) -> None:
    with fold.Writer(
        path,
        compress=None if compress == "none" else compress,
        ecc=f"rs({nsym})" if nsym else None,
        created_at_unix=CREATED,
    ) as w:
        for name, ctype, data in chunks:
            w.add_chunk(name, ctype, data)
        w.finalize(METADATA)


def _index(path) -> bytes:
    b = path.read_bytes()
    off, n = struct.unpack(">QQ", b[12:28])
    return b[off : off + n]


# Single-block ECC: a zstd frame of random bytes is at most ~12 bytes longer than its input.
CASES = [
    ("none", None, 5000),
    ("zstd", None, 5000),
    ("none", 2, 253),
    ("zstd", 16, 200),
    ("none", 32, 223),
    ("zstd", 32, 200),
    ("zstd", 64, 170),
    ("none", 200, 55),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("compress", "nsym", "max_len"), CASES)
def test_pyfolds_written_read_by_tenfold(tmp_path, fixed_clock, seed, compress, nsym, max_len):
    chunks = _chunks(seed, max_len)
    p = tmp_path / "peer.fold"
    _write_pyfolds(p, chunks, compress, nsym)
    with fold.Reader(p, strict=True) as r:
        assert r.manifest_ok is True
        assert [(c.name, c.ctype) for c in r.chunks] == [(n, t) for n, t, _ in chunks]
        for name, _ctype, data in chunks:
            assert r.read_bytes(name) == data
            assert (r.chunk(name).nsym or 0) == (nsym or 0)
        assert r.read_json("meta")["seed"] == seed
    assert fold.verify(p).ok


def test_pyfolds_multiblock_ecc_clean_read(tmp_path, fixed_clock):
    """pyfolds' multi-block parity is wrong, but a clean chunk reads: CRC-32C holds."""
    data = np.random.default_rng(3).integers(0, 256, 3000, np.uint8).tobytes()
    p = tmp_path / "peer.fold"
    _write_pyfolds(p, [("blob", "BLOB", data)], "none", 32)
    with fold.Reader(p) as r:
        assert r.read_bytes("blob") == data


# pyfolds' ECC decode returns a bytearray, which google_crc32c.value() rejects: pyfolds then
# warns and falls back to its pure-Python CRC (correct, only slow). Not a tenfold matter.
@pytest.mark.filterwarnings("ignore:google-crc32c:RuntimeWarning")
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("compress", "nsym", "max_len"), CASES)
def test_tenfold_written_read_by_pyfolds(tmp_path, seed, compress, nsym, max_len):
    chunks = _chunks(seed, max_len)
    p = tmp_path / "ours.fold"
    _write_tenfold(p, chunks, compress, nsym)
    with foldio.FoldReader(str(p)) as r:
        assert r.list_chunks() == [n for n, _, _ in chunks]
        for name, _ctype, data in chunks:
            assert r.read_chunk_bytes(name) == data
        assert r.read_json("meta")["seed"] == seed
        assert r.index["metadata"]["ação"] == METADATA["ação"]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("compress", "nsym", "max_len"), CASES)
def test_same_bytes_as_pyfolds(tmp_path, fixed_clock, seed, compress, nsym, max_len):
    chunks = _chunks(seed, max_len)
    theirs, ours = tmp_path / "peer.fold", tmp_path / "ours.fold"
    _write_pyfolds(theirs, chunks, compress, nsym)
    _write_tenfold(ours, chunks, compress, nsym)
    assert _index(ours) == _index(theirs)
    assert f'"created_at_unix":{CREATED!r}'.encode() in _index(ours)
    # chunk headers, payloads and (single-block) parity too: the whole file
    assert ours.read_bytes() == theirs.read_bytes()


def test_same_index_multiblock_ecc(tmp_path, fixed_clock):
    """Beyond one RS block only the parity region differs (pyfolds' tail is wrong); the index
    JSON, chunk headers and payloads are the same."""
    chunks = [("blob", "BLOB", np.random.default_rng(5).integers(0, 256, 1000, np.uint8).tobytes())]
    theirs, ours = tmp_path / "peer.fold", tmp_path / "ours.fold"
    _write_pyfolds(theirs, chunks, "none", 32)
    _write_tenfold(ours, chunks, "none", 32)
    assert _index(ours) == _index(theirs)
    a, b = ours.read_bytes(), theirs.read_bytes()
    end = 28 + 32 + 1000
    assert a[:end] == b[:end] and len(a) == len(b) and a[end:] != b[end:]


# -- TSAV (torch.save) both ways ----------------------------------------------------------------


def test_tsav_both_ways(tmp_path, fixed_clock):
    torch = pytest.importorskip("torch", reason="torch not installed")
    sd = {"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3), "steps": torch.tensor(7)}
    buf = io.BytesIO()
    torch.save({"state_dict": sd}, buf)
    theirs, ours = tmp_path / "peer.fold", tmp_path / "ours.fold"
    _write_pyfolds(theirs, [("torch_state", "TSAV", buf.getvalue())], "zstd", None)
    with fold.Reader(theirs) as r:
        got = r.read_state_dict("torch_state")
    assert set(got) == set(sd) and np.array_equal(got["weight"], sd["weight"].numpy())
    with fold.Writer(ours) as w:
        w.add_torch("torch_state", sd)
    with foldio.FoldReader(str(ours)) as r:
        back = r.read_torch("torch_state")
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
