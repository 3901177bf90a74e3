"""Adding a tensor that is not in memory: ``add_raw(name, dtype, shape, chunks)`` on the v2 and
the 0.1.0 writers, from an iterator of byte chunks, the digest computed on the way, the chunks
never joined; byte-identical to adding the same array from memory; a wrong total length refused
before the file is committed; ztensor 2.1.2 opens and verifies a streamed v2 file."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tenfold.ztensor as zt
from tenfold.errors import EncodeError

PEER_SCRIPT = Path(__file__).with_name("_zt2_peer.py")
#: an interpreter with ztensor==2.1.2 (see test_ztensor_v2_writer.py)
PEER = os.environ.get("TENFOLD_ZTENSOR2_PYTHON")


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(23)
    return {
        "a.big": rng.standard_normal((300, 257), dtype=np.float32),  # not a chunk multiple
        "b.bf16": rng.standard_normal(1000).astype(ml_dtypes.bfloat16),
        "c.bool": rng.random((7, 3)) < 0.5,
        "d.empty": np.zeros((0, 4), np.int64),
        "e.scalar": np.array(7, np.uint16),
        "f.same_as_a": None,  # filled below: equal bytes share a blob
        "g.f8": rng.standard_normal(9).astype(ml_dtypes.float8_e4m3fn),
        "h.i8": np.arange(-5, 5, dtype=np.int8),
    }


TENSORS = _tensors()
TENSORS["f.same_as_a"] = TENSORS["a.big"].copy()
V010 = {k: v for k, v in TENSORS.items() if k not in ("g.f8",)}  # no float8 in 0.1.0


class Chunks:
    """The bytes of ``a`` in chunks of ``size`` bytes (fresh bytes each, never the whole
    array), recording the largest chunk handed out."""

    def __init__(self, a: np.ndarray, size: int) -> None:
        self.data, self.size, self.largest = memoryview(a.tobytes()), size, 0

    def __iter__(self) -> Iterator[bytes]:
        for i in range(0, len(self.data), self.size):
            chunk = bytes(self.data[i : i + self.size])
            self.largest = max(self.largest, len(chunk))
            yield chunk


def _from_memory(path: Path, gen: int, tensors: dict) -> None:
    with zt.Writer(path, generation=gen) as w:
        for n, a in tensors.items():
            w.add(n, a) if gen == 2 else w.add(n, a, checksum="crc32c")


def _streamed(path: Path, gen: int, tensors: dict, size: int) -> list[Chunks]:
    streams = []
    with zt.Writer(path, generation=gen) as w:
        for n, a in tensors.items():
            s = Chunks(a, size)
            streams.append(s)
            if gen == 2:
                w.add_raw(n, a.dtype, a.shape, s)
            else:
                w.add_raw(n, a.dtype, a.shape, s, checksum="crc32c")
    return streams


@pytest.mark.parametrize("size", [1000, 4096, 1 << 20])
@pytest.mark.parametrize("gen", [0, 2])
def test_stream_is_byte_identical_to_memory(tmp_path, gen, size):
    # Before (v2): V2Writer had no way to add a tensor that is not in memory.
    tensors = TENSORS if gen == 2 else V010
    mem, streamed = tmp_path / "mem.zt", tmp_path / "stream.zt"
    _from_memory(mem, gen, tensors)
    streams = _streamed(streamed, gen, tensors, size)
    assert streamed.read_bytes() == mem.read_bytes()
    assert max(s.largest for s in streams) <= size  # one chunk at a time, as given
    back = zt.load(streamed)
    for n, a in tensors.items():
        assert back[n].dtype == a.dtype and back[n].tobytes() == a.tobytes()


def test_v2_stream_returns_the_digest_and_shares_equal_blobs(tmp_path):
    p = tmp_path / "s.zt"
    a = TENSORS["a.big"]
    with zt.V2Writer(p) as w:
        d1 = w.add_raw("a", a.dtype, a.shape, Chunks(a, 5000))
        d2 = w.add_raw("b", a.dtype, a.shape, Chunks(a, 3000))
    with zt.open(p) as r:
        assert d1 == d2 == r.info("a").checksum
        assert r.info("a").offset == r.info("b").offset
        assert r.verify().ok


@pytest.mark.parametrize("gen", [0, 2])
@pytest.mark.parametrize("delta", [-1, 1, -4000, 4000])
def test_a_wrong_length_is_refused_and_nothing_is_committed(tmp_path, gen, delta):
    p = tmp_path / "m.zt"
    p.write_bytes(b"the file that was there")
    a = np.arange(3000, dtype=np.float32)
    data = a.tobytes() + bytes(max(delta, 0))
    data = data[: len(data) + min(delta, 0)]
    fed = []

    def chunks():
        for i in range(0, len(data), 1000):
            fed.append(i)
            yield data[i : i + 1000]

    with pytest.raises(EncodeError, match="fewer bytes" if delta < 0 else "more bytes"):
        with zt.Writer(p, generation=gen) as w:
            w.add("first", np.ones(3))
            w.add_raw("w", a.dtype, a.shape, chunks())
    assert p.read_bytes() == b"the file that was there"  # the old file, untouched
    assert [f.name for f in tmp_path.iterdir()] == ["m.zt"]  # no temporary file left
    if delta > 0:  # refused at the first chunk past the end, not after reading them all
        assert len(fed) == 13


@pytest.mark.parametrize("gen", [0, 2])
def test_after_a_refused_stream_the_writer_discards_the_file(tmp_path, gen):
    p = tmp_path / "m.zt"
    w = zt.Writer(p, generation=gen)
    with pytest.raises(EncodeError):
        w.add_raw("w", np.float32, (4,), [bytes(15)])
    with pytest.raises(ValueError, match="failed earlier"):
        w.add("x", np.ones(2))
    with pytest.raises(ValueError, match="file discarded"):
        w.close()
    assert not p.exists()


def test_v2_stream_checks_bool_bytes(tmp_path):
    p = tmp_path / "m.zt"
    with pytest.raises(EncodeError, match="bool byte is not 0 or 1"):
        with zt.V2Writer(p) as w:
            w.add_raw("m", np.bool_, (4,), [b"\x00\x01", b"\x02\x00"])
    assert not p.exists()


def test_v2_stream_refuses_before_writing(tmp_path):
    p = tmp_path / "m.zt"
    with zt.V2Writer(p) as w:
        w.add("a", np.ones(2))
        with pytest.raises(EncodeError, match="ascending order"):
            w.add_raw("0", np.float32, (1,), [bytes(4)])
        with pytest.raises(EncodeError, match="shape"):
            w.add_raw("b", np.float32, (-1,), [])
        with pytest.raises(EncodeError, match="cannot be stored"):
            w.add_raw("c", np.dtype("U3"), (1,), [bytes(12)])
        w.add_raw("d", np.float32, (0,), [])  # nothing written before: the writer goes on
    with zt.open(p) as r:
        assert list(r) == ["a", "d"] and r["d"].shape == (0,)


def test_ztensor_2_1_2_opens_a_streamed_v2_file(tmp_path):
    p = tmp_path / "s.zt"
    _streamed(p, 2, TENSORS, 4096)
    if not PEER:
        pytest.skip("TENFOLD_ZTENSOR2_PYTHON (an interpreter with ztensor==2.1.2) not set")
    r = subprocess.run([PEER, str(PEER_SCRIPT), "verify", str(p)], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)[str(p)]
    assert found["verified"] == [len(TENSORS), 0]
    import hashlib

    for n, a in TENSORS.items():
        assert found["objects"][n]["shape"] == list(a.shape)
        assert found["objects"][n]["parts"]["data"] == hashlib.sha256(a.tobytes()).hexdigest()


F4 = ml_dtypes.float4_e2m1fn


def _packed_f4(a: np.ndarray) -> bytes:
    """The bytes a v2 file stores for ``a``: two codes a byte, low nibble first."""
    codes = np.ascontiguousarray(a).reshape(-1).view(np.uint8) & 0x0F
    if codes.size % 2:
        codes = np.append(codes, np.uint8(0))
    return (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8).tobytes()


@pytest.mark.parametrize("shape", [(4, 6), (3, 5), (7,), (), (0, 3)])
def test_v2_stream_takes_packed_float4(tmp_path, shape):
    # Before: add_raw refused float4_e2m1fn ("add_raw takes no packed float4 (use add)").
    rng = np.random.default_rng(4)
    a = rng.standard_normal(shape).astype(np.float32).astype(F4)
    raw = _packed_f4(a)
    mem, streamed = tmp_path / "mem.zt", tmp_path / "stream.zt"
    with zt.V2Writer(mem) as w:
        w.add("f4", a)
    with zt.V2Writer(streamed) as w:
        w.add_raw("f4", F4, shape, [raw[i : i + 2] for i in range(0, len(raw), 2)])
    assert streamed.read_bytes() == mem.read_bytes()
    with zt.open(streamed) as r:
        assert r["f4"].dtype == F4 and r["f4"].tobytes() == a.tobytes()
        assert r.verify().ok


def test_v2_stream_of_packed_float4_checks_length_and_final_nibble(tmp_path):
    p = tmp_path / "m.zt"
    with pytest.raises(EncodeError, match="more bytes"):  # 5 codes take 3 bytes, not 5
        with zt.V2Writer(p) as w:
            w.add_raw("f4", F4, (5,), [bytes(5)])
    with pytest.raises(EncodeError, match="final odd f4 nibble is not zero"):
        with zt.V2Writer(p) as w:
            w.add_raw("f4", F4, (5,), [b"\x21\x43", b"\x15"])  # the 6th nibble is not 0
    assert not p.exists()
    with zt.V2Writer(p) as w:  # a high nibble in a byte that is not the last is a code
        w.add_raw("f4", F4, (5,), [b"\x21", b"\x43\x05"])
    assert zt.load(p)["f4"].view(np.uint8).tolist() == [1, 2, 3, 4, 5]
