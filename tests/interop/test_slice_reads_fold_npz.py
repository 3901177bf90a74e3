"""``read(name, index)`` for FOLD and npz (issue 13 item 2): a slice of a raw stored tensor
reads only the rows it touches, and ``safe_open(...).get_slice`` takes that path for both
formats; compressed tensors are decoded whole (and checked), then sliced."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

import tenfold
from tenfold import fold
from tenfold.errors import IntegrityError

ROWS, COLS = 256, 64  # 64 KiB of float32
W = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
TENSORS = {"w": W, "b": np.arange(7, dtype=np.int16), "s": np.array(2.5)}
INDICES = [
    (slice(32, 64),),
    5,
    -1,
    (slice(None, None, -3), 2),
    (slice(10, 200, 7), slice(1, None, 2)),
    (Ellipsis, 3),
    (slice(50, 40),),
]


@pytest.fixture(params=["none", "zstd"])
def fold_file(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    p = tmp_path / "m.fold"
    fold.save(p, TENSORS, compress=None if request.param == "none" else "zstd")
    return p


@pytest.mark.parametrize("mmap", [True, False])
def test_fold_read_tensor_index_equals_numpy(fold_file: Path, mmap: bool) -> None:
    with fold.Reader(fold_file, mmap=mmap) as r:
        for verify in (True, False):
            assert np.array_equal(r.read_tensor("tensors", "w", verify=verify), W)
            for idx in INDICES:
                got = r.read_tensor("tensors", "w", idx, verify=verify)
                assert np.array_equal(got, W[idx]), idx
                assert got.dtype == W.dtype
            assert r.read_tensor("tensors", "s", (), verify=verify) == 2.5
            assert r.read_tensor("tensors", "b", slice(2, 4), verify=verify).tolist() == [2, 3]


def test_fold_slice_of_an_uncompressed_chunk_reads_only_its_rows(tmp_path: Path) -> None:
    p = tmp_path / "m.fold"
    fold.save(p, TENSORS, compress=None)
    with fold.Reader(p, mmap=False) as r:
        before = r._mf.stats["bytes"]
        got = r.read_tensor("tensors", "w", slice(0, ROWS // 8), verify=False)
        fetched = r._mf.stats["bytes"] - before
    assert np.array_equal(got, W[: ROWS // 8])
    # the rows (1/8 of the tensor) plus the chunk's small safetensors header
    assert W.nbytes // 8 <= fetched < W.nbytes // 8 + 1024, fetched


def test_fold_errors_name_the_tensor_and_shape(tmp_path: Path) -> None:
    p = tmp_path / "m.fold"
    fold.save(p, TENSORS, compress=None)
    with fold.Reader(p) as r:
        with pytest.raises(IndexError, match=r"\(256, 64\)"):
            r.read_tensor("tensors", "w", ROWS, verify=False)
        with pytest.raises(KeyError, match="nope"):
            r.read_tensor("tensors", "nope", 0, verify=False)


def test_fold_verify_true_checks_the_chunk(tmp_path: Path) -> None:
    p = tmp_path / "m.fold"
    fold.save(p, TENSORS, compress=None)
    with fold.Reader(p) as r:
        begin = r.sten_entries("tensors")["w"][2]
    data = bytearray(p.read_bytes())
    last_row = begin + (ROWS - 1) * COLS * 4
    data[last_row] ^= 0xFF  # damage the last row only
    p.write_bytes(bytes(data))
    with fold.Reader(p) as r:
        with pytest.raises(IntegrityError):
            r.read_tensor("tensors", "w", slice(0, 8))  # verify=True: the whole chunk
        # rows only: the damaged row is not read, and the chunk digest is not checked
        assert np.array_equal(r.read_tensor("tensors", "w", slice(0, 8), verify=False), W[:8])


def test_safe_open_get_slice_on_fold_reads_rows_not_the_chunk(tmp_path: Path) -> None:
    p = tmp_path / "m.fold"
    fold.save(p, TENSORS, compress=None)
    with tenfold.safe_open(p, mmap=False) as f:
        mf = f._t.reader._mf
        before = mf.stats["bytes"]
        sl = f.get_slice("w")
        assert sl.get_shape() == [ROWS, COLS] and sl.get_dtype() == "F32"
        got = sl[ROWS // 2 : ROWS // 2 + 16, ::4]
        fetched = mf.stats["bytes"] - before
        assert np.array_equal(got, W[ROWS // 2 : ROWS // 2 + 16, ::4])
        assert fetched < W.nbytes // 4, fetched
        assert sorted(f.keys()) == ["b", "s", "w"]
        assert np.array_equal(f.get_tensor("w"), W)  # whole tensor: chunk read and checked
        assert np.array_equal(f.get_slice("w")[3], W[3])


def _npz(path: Path, *, compressed: bool = False) -> Path:
    arrays = {"w": W, "b": TENSORS["b"], "s": TENSORS["s"], "f": np.asfortranarray(W)}
    arrays["be"] = W.astype(">f4")
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return path


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("mmap", [True, False])
def test_npz_read_index_equals_numpy(tmp_path: Path, compressed: bool, mmap: bool) -> None:
    p = _npz(tmp_path / "a.npz", compressed=compressed)
    with tenfold.open(p, mmap=mmap) as r:
        for name in ("w", "f", "be"):
            full = r.read(name)
            for idx in INDICES:
                for copy in (True, False):
                    got = r.read(name, idx, copy=copy)
                    assert np.array_equal(got, full[idx]), (name, idx)
                    assert got.dtype == full.dtype
                    if copy and isinstance(got, np.ndarray) and got.ndim:
                        assert got.flags.writeable and got.flags.owndata
        assert r.read("s", ()) == 2.5
        with pytest.raises(IndexError, match=r"\(256, 64\)"):
            r.read("w", (0, COLS))


def test_npz_slice_of_a_stored_member_reads_only_its_rows(tmp_path: Path) -> None:
    p = _npz(tmp_path / "a.npz")
    with zipfile.ZipFile(p) as z:
        zi = z.getinfo("w.npy")
    with tenfold.open(p) as r:
        start = r._npz.data_offset("w")
    data = bytearray(p.read_bytes())
    data[start + W.nbytes - 1] ^= 0xFF  # the last row is damaged (the zip CRC-32 fails)
    p.write_bytes(bytes(data))
    with tenfold.open(p) as r:
        with pytest.raises(IntegrityError, match=zi.filename):
            r.read("w")  # whole: the CRC-32 is checked
        assert np.array_equal(r.read("w", slice(0, 16)), W[:16])  # the first rows only
    with tenfold.safe_open(p) as f:  # get_slice takes the same path
        assert np.array_equal(f.get_slice("w")[:16, 2], W[:16, 2])


def test_safe_open_on_fold_with_a_damaged_header_uses_the_repairing_read(tmp_path: Path) -> None:
    p = tmp_path / "m.fold"
    fold.save(p, TENSORS, compress=None, ecc="rs(32)")
    with fold.Reader(p) as r:
        c = r.chunk("tensors")
    data = bytearray(p.read_bytes())
    data[c.payload_offset + 12] ^= 0xFF  # inside the STEN chunk's safetensors header JSON
    p.write_bytes(bytes(data))
    with tenfold.safe_open(p) as f:  # the header alone does not parse: read, repaired
        assert sorted(f.keys()) == ["b", "s", "w"]
        assert np.array_equal(f.get_slice("w")[4:9, 1], W[4:9, 1])
