"""WTXT and npz sources convert one tensor at a time (issue 10 item 4), through one hardened
npz parser; the progress bar advances per tensor for every target."""

from __future__ import annotations

import os
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest

import tenfold
from tenfold import wtxt
from tenfold.convert import convert
from tenfold.errors import FormatError, IntegrityError
from tenfold.interop import npz as npz_mod
from tenfold.interop import npz_reader, write_npz

MiB = 1 << 20
TARGETS = (".zt", ".safetensors", ".oinf", ".fold", ".wtxt", ".npz")
N, EACH = 12, MiB  # 12 tensors of 1 MiB: 12 MiB in all


def _model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        f"layer{i:02d}.weight": rng.standard_normal(EACH // 4).astype(np.float32) for i in range(N)
    }


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream-src")
    m = _model()
    out = {
        "wtxt": d / "m.wtxt",
        "npz": d / "m.npz",
        "npz-deflated": d / "d.npz",
    }
    wtxt.save(out["wtxt"], m, fsync=False)
    write_npz(out["npz"], m, fsync=False)
    write_npz(out["npz-deflated"], m, compressed=True, fsync=False)
    return m, out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["wtxt", "npz", "npz-deflated"])
def test_conversion_holds_about_one_tensor(sources, tmp_path, kind, target):
    # Before: the WTXT reader decoded every array when it opened the file and the npz loader
    # read every member, so the traced peak was the whole model (12 MiB), not one tensor.
    model, paths = sources
    dst = tmp_path / ("out" + target)
    tracemalloc.start()
    try:
        convert(paths[kind], dst, fsync=False, progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    bound = 2 * EACH + 3 * MiB  # the tensor, one transient copy at most, fixed buffers
    assert peak < bound, f"{kind} -> {target}: traced peak {peak / MiB:.1f} MiB"
    back = tenfold.load(dst)
    assert list(back) == list(model) or sorted(back) == sorted(model)
    for k, v in model.items():
        assert np.array_equal(back[k], v)


def test_wtxt_reader_keeps_no_decoded_arrays(tmp_path):
    p = tmp_path / "a.wtxt"
    m = {"a": np.arange(10, dtype=np.int32), "b": np.ones((3, 5), np.float64)}
    wtxt.save(p, m)
    with wtxt.open(p) as f:
        assert all(a.raw is None for a in f.arrays)
        x, y = f["a"], f["a"]
        assert np.array_equal(x, m["a"]) and x is not y and x.flags.writeable
        x[0] = 99
        assert f["a"][0] == 0  # every read is a fresh, owned array


@pytest.mark.parametrize("shape, rpc", [((10, 3), 3), ((7, 5), 2), ((1000,), None)])
def test_streamed_digests_match_the_whole_array_ones(tmp_path, shape, rpc):
    # row blocks of 12 or 20 bytes: chunks that are not whole u64 words for fastxor
    p = tmp_path / "r.wtxt"
    rng = np.random.default_rng(3)
    arrays = {"x": rng.standard_normal(shape).astype(np.float32), "y": np.arange(11, dtype="u1")}
    wtxt.write(p, arrays, schema="s", gen=1, ts="2026-01-01T00:00:00Z", build="b",
               rows_per_chunk=rpc)  # fmt: skip
    from tenfold.core.mapped import MappedFile
    from tenfold.wtxt.reader import parse

    mf = MappedFile(p, fmt="wtxt")
    try:
        whole = parse(mf.buffer(), keep=True)
        streamed = parse(mf.buffer(), keep=False)
    finally:
        mf.close()
    assert streamed.computed_fastxor == whole.computed_fastxor
    assert streamed.computed_all == whole.computed_all
    assert [a.computed_sha256 for a in streamed.arrays] == [a.sha256 for a in whole.arrays]
    # the compact chunk index gives back the rows the list of ChunkInfo holds
    for sa, wa in zip(streamed.arrays, whole.arrays, strict=True):
        assert list(sa.chunks) == list(wa.chunks) and sa.chunks[-1] == wa.chunks[-1]
    assert wtxt.read(p)["x"].tobytes() == arrays["x"].tobytes()  # the root check passes


def test_wtxt_bytes_changed_after_open_are_refused_on_read(tmp_path):
    a, b = tmp_path / "a.wtxt", tmp_path / "b.wtxt"
    wtxt.save(a, {"w": np.zeros(64, np.float32)})
    wtxt.save(b, {"w": np.ones(64, np.float32)})
    assert a.stat().st_size == b.stat().st_size
    with wtxt.open(a) as f:
        with open(a, "r+b") as fh:  # rewritten in place: the map sees the new bytes
            fh.write(b.read_bytes())
        with pytest.raises(IntegrityError, match=r"wtxt: line \d+.*sha256 mismatch"):
            f["w"]


# -- one npz parser -------------------------------------------------------------------------


def test_npz_reader_and_parse_npz_share_the_parser(tmp_path):
    p = tmp_path / "a.npz"
    np.savez(p, w=np.arange(6, dtype=np.int16))
    with npz_reader.Reader(p) as r:
        assert isinstance(r._npz, npz_mod.Archive)


def _dup_npz(path):
    import io
    import warnings

    with zipfile.ZipFile(path, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns: Duplicate name
        for v in (1, 2):
            buf = io.BytesIO()
            np.save(buf, np.full(2, v, np.uint8))
            z.writestr("w.npy", buf.getvalue())


@pytest.mark.parametrize("entry", ["parse_npz", "reader", "convert"])
def test_duplicate_npz_member_is_refused_everywhere(tmp_path, entry):
    # parse_npz kept the last of two 'w.npy' members silently
    p = tmp_path / "dup.npz"
    _dup_npz(p)
    with pytest.raises(FormatError, match="appears twice"):
        if entry == "parse_npz":
            npz_mod.read_npz(p)
        elif entry == "reader":
            npz_reader.Reader(p)
        else:
            convert(p, tmp_path / "o.zt")
    assert not (tmp_path / "o.zt").exists()


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_member_crc_checked_on_the_map_path(tmp_path, compressed):
    p = tmp_path / "c.npz"
    w = np.arange(4096, dtype=np.uint32)
    write_npz(p, {"w": w}, compressed=compressed)
    data = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        zi = z.getinfo("w.npy")
    # change the CRC the directory and the local header record (the data stays intact)
    bad = (zi.CRC ^ 1).to_bytes(4, "little")
    data[zi.header_offset + 14 : zi.header_offset + 18] = bad
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 16 : cd + 20] = bad
    p.write_bytes(bytes(data))
    with npz_reader.Reader(p) as r:
        with pytest.raises(IntegrityError, match="w.npy.*CRC"):
            r.read("w")
        with pytest.raises(IntegrityError, match="CRC"):
            r.read("w", copy=False)
    with pytest.raises(IntegrityError, match="CRC"):
        convert(p, tmp_path / "o.zt")


def test_npz_stored_member_is_a_zero_copy_view(tmp_path):
    p = tmp_path / "s.npz"
    w = np.arange(1000, dtype=np.float64).reshape(10, 100)
    f = np.asfortranarray(w)
    write_npz(p, {"w": w, "f": f})
    with npz_reader.Reader(p) as r:
        v = r.read("w", copy=False)
        assert not v.flags.owndata and not v.flags.writeable and np.array_equal(v, w)
        g = r.read("f", copy=False)
        assert g.flags.f_contiguous and np.array_equal(g, f)
        c = r.read("w")
        assert c.flags.writeable and not np.shares_memory(c, v)


def test_npz_local_header_naming_another_member_is_refused(tmp_path):
    p = tmp_path / "n.npz"
    write_npz(p, {"ab": np.arange(3, dtype=np.int8)}, compressed=True)
    data = bytearray(p.read_bytes())
    i = data.find(b"ab.npy")  # the local header's name (the directory's comes later)
    data[i : i + 2] = b"xy"
    p.write_bytes(bytes(data))
    with npz_reader.Reader(p) as r, pytest.raises(FormatError, match=r"'ab.npy'.*differ"):
        r.read("ab")


def test_npz_truncated_deflate_stream_is_a_format_error(tmp_path):
    import io

    p = tmp_path / "t.npz"
    w = np.random.default_rng(1).standard_normal(5000)
    write_npz(p, {"w": w}, compressed=True)
    data = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        zi = z.getinfo("w.npy")
    ho = zi.header_offset
    start = ho + 30 + len(b"w.npy") + int.from_bytes(data[ho + 28 : ho + 30], "little")
    # a valid deflate stream of the .npy header and only part of the data, same stored size
    npy = io.BytesIO()
    np.save(npy, w)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = c.compress(npy.getvalue()[:-800]) + c.flush()
    assert len(body) <= zi.compress_size
    data[start : start + zi.compress_size] = body.ljust(zi.compress_size, b"\x00")
    p.write_bytes(bytes(data))
    with npz_reader.Reader(p) as r, pytest.raises(FormatError, match="member ends early"):
        r.read("w")


# -- progress -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_progress_advances_per_tensor_for_every_target(tmp_path, monkeypatch, target):
    # .oinf, .wtxt and .fold jumped from 0 to the total at the end
    import sys

    progress = sys.modules["tenfold.core.progress"]
    seen: list[tuple[int, int]] = []

    class Spy(progress.ByteProgress):
        def update(self, n: int) -> None:
            super().update(n)
            seen.append((n, self.done))

    monkeypatch.setattr(progress, "ByteProgress", Spy)
    m = {f"t{i}": np.full(1000 + i, i, np.float32) for i in range(5)}
    src = tmp_path / "m.safetensors"
    tenfold.save(src, m)
    total = sum(v.nbytes for v in m.values())
    convert(src, tmp_path / ("o" + target), progress=False)
    steps = [n for n, _ in seen if n]
    assert len(steps) >= len(m), seen  # at least one step per tensor
    assert max(steps) < total
    assert seen[-1][1] == total


def test_wtxt_source_names_are_decoded(tmp_path):
    p = tmp_path / "n.wtxt"
    m = {"enc.der/0": np.arange(3, dtype=np.int64), "scalar": np.array(2.5)}
    wtxt.save(p, m)
    convert(p, tmp_path / "o.safetensors")
    back = tenfold.load(tmp_path / "o.safetensors")
    assert set(back) == set(m) and back["scalar"].shape == ()
    assert os.path.getsize(tmp_path / "o.safetensors") > 0


def test_write_npz_large_arrays_match_numpy_bytes(tmp_path):
    # large C-contiguous arrays are written in slices of themselves, not through NumPy's
    # 16 MiB copy buffer; the member bytes stay exactly np.savez's
    arrays = {
        "c": np.arange(3 << 18, dtype=np.float32).reshape(-1, 256),
        "be": np.arange(1 << 18, dtype=">i8"),
        "f": np.asfortranarray(np.ones((700, 500), np.float64)),
    }
    ours, theirs = tmp_path / "o.npz", tmp_path / "t.npz"
    write_npz(ours, arrays)
    np.savez(theirs, **arrays)
    with zipfile.ZipFile(ours) as a, zipfile.ZipFile(theirs) as b:
        for n in arrays:
            assert a.read(n + ".npy") == b.read(n + ".npy")


def test_threads_reach_the_zt_zstd_compressor_and_keep_wtxt_bytes(tmp_path, monkeypatch):
    # --threads only reached the FOLD writer
    from tenfold.ztensor import writer as ztw

    seen: list[int] = []
    real = ztw.zstd_compress

    def spy(data, level=3, *, threads=0, checksum=True):
        seen.append(threads)
        return real(data, level, threads=threads, checksum=checksum)

    monkeypatch.setattr(ztw, "zstd_compress", spy)
    m = {f"t{i}": np.arange(50000, dtype=np.int32) * i for i in range(3)}
    src = tmp_path / "m.safetensors"
    tenfold.save(src, m)
    convert(src, tmp_path / "o.zt", compress="zstd", threads=2)
    assert seen == [2, 2, 2]
    back = tenfold.load(tmp_path / "o.zt")
    assert all(np.array_equal(back[k], v) for k, v in m.items())
    convert(src, tmp_path / "one.wtxt")
    convert(src, tmp_path / "two.wtxt", threads=2)
    assert (tmp_path / "one.wtxt").read_bytes() == (tmp_path / "two.wtxt").read_bytes()


@pytest.mark.parametrize("op", ["verify", "inspect"])
def test_wtxt_verify_and_inspect_keep_no_arrays(sources, op):
    # both decoded the whole file into memory (parse kept every array)
    _, paths = sources
    fn = wtxt.verify if op == "verify" else wtxt.inspect
    tracemalloc.start()
    try:
        out = fn(paths["wtxt"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * MiB, f"{op}: traced peak {peak / MiB:.1f} MiB"
    if op == "verify":
        assert out.ok
    else:
        arrays = [r for r in out if not r.get("part")]  # not the chunk and root rows
        assert len(arrays) == N and all("MISMATCH" not in r["checksum"] for r in arrays)
