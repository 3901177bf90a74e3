"""Issue 21: verifying (and repairing) a FOLD file whose zstd chunk declares 2 GiB takes a
fixed amount of memory. CRC-32C and SHA-256 cover the stored bytes; the decode only has to
prove the chunk inflates to exactly ``uncomp_len``, so it runs in pieces and keeps nothing
(it used to allocate and fill the whole ``uncomp_len``).

Each check runs in a fresh interpreter and reads its peak resident size (``VmHWM``)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

import tenfold.fold as fold
from tenfold.core.checksums import crc32c, sha256_hex

DECLARED = 2 << 30  # MAX_CHUNK_SIZE: the most a FOLD chunk may declare
PEAK_LIMIT = 200 << 20
LIB = Path(fold.__file__).resolve().parents[3]

_SCRIPT = """
import json, resource, sys
import tenfold.fold as fold

def peak():
    # VmHWM: this process image's own peak (ru_maxrss would carry the forking parent's)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale

if sys.argv[2] == "verify":
    rep = fold.verify(sys.argv[1])
else:
    rep = fold.repair(sys.argv[1], sys.argv[1] + ".out")
print(json.dumps({
    "ok": rep.ok,
    "errors": [f.message for f in rep.errors],
    "findings": [[f.obj, f.status, f.message] for f in rep.findings],
    "peak": peak(),
}))
"""


def _run_in_child(path: Path, what: str = "verify") -> dict:
    env = {**os.environ, "PYTHONPATH": str(LIB)}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(path), what],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.splitlines()[-1])


def _zeros_frame(n: int, *, content_size: bool = True) -> bytes:
    """One zstd frame of ``n`` zero bytes, compressed as a stream (never in memory)."""
    co = zstandard.ZstdCompressor(level=1, write_content_size=content_size).compressobj(
        size=n if content_size else -1
    )
    z = memoryview(bytes(4 << 20))
    parts, left = [], n
    while left:
        k = min(left, z.nbytes)
        parts.append(co.compress(z[:k]))
        left -= k
    parts.append(co.flush())
    return b"".join(parts)


def _fold_file(path: Path, comp: bytes, uncomp_len: int) -> Path:
    """A FOLD file of one zstd chunk ``x`` (no ECC) holding ``comp``, built by hand."""
    hdr = struct.pack(">4sIQQII", b"BLOB", 1, uncomp_len, len(comp), crc32c(comp), 0)
    body = hdr + comp
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
                "comp_len": len(comp),
                "uncomp_len": uncomp_len,
                "crc32c": crc32c(comp),
                "sha256": sha256_hex(comp),
                "ecc_algo": "none",
                "ecc_len": 0,
            }
        ],
    }
    ib = json.dumps(idx).encode()
    path.write_bytes(struct.pack(">8sIQQ", b"FOLDv1\0\0", 28, 28 + len(body), len(ib)) + body + ib)
    return path


@pytest.fixture(scope="module")
def frame() -> bytes:
    return _zeros_frame(DECLARED)


@pytest.mark.parametrize("what", ["verify", "repair"])
def test_zstd_chunk_verifies_in_bounded_memory(tmp_path, frame, what):
    p = _fold_file(tmp_path / "big.fold", frame, DECLARED)
    assert p.stat().st_size < (1 << 20)
    got = _run_in_child(p, what)
    assert got["ok"], got["findings"]
    assert got["peak"] < PEAK_LIMIT, (
        f"peak {got['peak'] >> 20} MiB for a {DECLARED >> 20} MiB chunk"
    )


def test_stream_past_uncomp_len_stops(tmp_path):
    """A frame without a content size that inflates to 2 GiB against ``uncomp_len`` 2 GiB - 1:
    the error names the size as soon as the stream passes it; memory stays bounded."""
    p = _fold_file(tmp_path / "over.fold", _zeros_frame(DECLARED, content_size=False), DECLARED - 1)
    got = _run_in_child(p)
    assert not got["ok"] and got["peak"] < PEAK_LIMIT
    assert any(
        f"decoded size mismatch; expected {DECLARED - 1}, got more than {DECLARED - 1}" in m
        for m in got["errors"]
    ), got["errors"]


def test_short_stream_and_content_size_lie_still_reported(tmp_path):
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(1000))
    rep = fold.verify(_fold_file(tmp_path / "short.fold", frame, 1001))
    assert not rep.ok and "expected 1001, got 1000" in rep.errors[0].message
    sized = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(1000))
    rep = fold.verify(_fold_file(tmp_path / "lie.fold", sized, 999))
    assert not rep.ok and "zstd content size" in rep.errors[0].message
    rep = fold.verify(_fold_file(tmp_path / "good.fold", sized, 1000))
    assert rep.ok, rep.format()
