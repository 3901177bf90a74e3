"""Remote .npz read by range (against the HTTP Range server and moto's S3): opening fetches
the zip directory from the archive's end, a stored member is one request for its own bytes,
a deflated member its compressed range only, never the whole object. Requests and bytes are
counted on the server side."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

import tenfold

fsspec = pytest.importorskip("fsspec", reason="fsspec (the remote extra) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (fsspec's HTTP filesystem) is not installed")

from _servers import file_server_fixtures  # noqa: E402

ARRAYS = {
    f"w{i}": np.random.default_rng(i).standard_normal((256, 512)).astype(np.float32)
    for i in range(8)
}  # 512 KiB each: 4 MiB in all
ARRAYS["ids"] = np.arange(1000, dtype=np.int64)
MEMBER = ARRAYS["w5"].nbytes


def _npz(compressed: bool) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **ARRAYS)
    return buf.getvalue()


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return {"stored.npz": _npz(False), "deflated.npz": _npz(True)}


http, s3, server = file_server_fixtures("npz")


def _sent(log: list) -> int:
    return sum(e[3] for e in log)


def test_stored_npz_opens_by_its_ends_and_reads_a_member_with_one_request(server, files):
    data = files["stored.npz"]
    server.log.clear()
    with tenfold.open(server.url("stored.npz"), **server.opts()) as r:
        assert sorted(r) == sorted(ARRAYS)
        assert len(server.log) <= 3, server.log  # size, first block, last block (directory)
        assert _sent(server.log) <= 2 * 64 * 1024 + 1024
        server.log.clear()
        got = r["w5"]
        assert np.array_equal(got, ARRAYS["w5"])
        assert len(server.log) == 1, server.log  # local header + .npy header + data
        assert _sent(server.log) <= MEMBER + 2048, server.log
        server.log.clear()
        rows = r.read("w6", (slice(8, 16),))
        assert np.array_equal(rows, ARRAYS["w6"][8:16])
        assert _sent(server.log) <= 64 * 1024 + 8 * 512 * 4, server.log  # header block + rows
        total = _sent(server.log)
    assert total < len(data) // 4


def test_deflated_member_fetches_its_compressed_range_only(server, files):
    data = files["deflated.npz"]
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        csize = z.getinfo("w3.npy").compress_size
    with tenfold.open(server.url("deflated.npz"), **server.opts()) as r:
        server.log.clear()
        assert np.array_equal(r["w3"], ARRAYS["w3"])
        assert len(server.log) == 1, server.log
        assert _sent(server.log) <= csize + 2048, (server.log, csize)


def test_remote_npz_equals_local_and_verifies(http, files, tmp_path):
    for name, data in files.items():
        p = tmp_path / name
        p.write_bytes(data)
        with tenfold.open(http.url(name)) as r, tenfold.open(p) as loc:
            assert list(r) == list(loc)
            for k in loc:
                assert np.array_equal(r[k], loc[k]), (name, k)
            assert r.verify().ok


def test_remote_npz_crc_is_still_checked(http, files):
    data = bytearray(files["stored.npz"])
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        zi = z.getinfo("w2.npy")
    data[zi.header_offset + 30 + len("w2.npy") + 200] ^= 0xFF  # inside w2's bytes
    http.srv.put("bad.npz", bytes(data))
    with tenfold.open(http.url("bad.npz")) as r:
        with pytest.raises(tenfold.IntegrityError):
            r["w2"]
