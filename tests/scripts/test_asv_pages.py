"""The asv pages built from the stored results (``scripts/perf_docs.py publish``, what the docs
build runs) render their graphs in a real headless browser: the page of one benchmark is
served on 127.0.0.1, loaded by Chromium, and its screenshot must show a drawn graph (the plot
canvases in the page, coloured plot lines in the picture), not asv's "dependencies failed to
load" page.

Needs a Chromium (the Debian package ``chromium-headless-shell`` or ``chromium``) and the
system copies of the scripts asv loads from CDNs (``libjs-jquery``, ``libjs-jquery-flot``,
``libjs-bootstrap``, ``node-blueimp-md5``); without them it skips, naming what is missing.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import shutil
import struct
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
PAGE = "core.ChecksumSuite.time_crc32c"


def _load_perf_docs():
    spec = importlib.util.spec_from_file_location("perf_docs", ROOT / "scripts" / "perf_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["perf_docs"] = mod
    spec.loader.exec_module(mod)
    return mod


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
    assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r[i : i + 3]) for r in rows for i in range(0, stride, bpp)]


def test_png_reader_on_a_known_image():
    # 2x1 RGB: one red pixel, one white, written with filter 1 (sub) on the one row
    row = bytes([1, 255, 0, 0, 0, 255, 255])
    body = zlib.compress(row)
    ihdr = struct.pack(">IIBBBBB", 2, 1, 8, 2, 0, 0, 0)

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    assert _png_pixels(png) == (2, 1, [b"\xff\x00\x00", b"\xff\xff\xff"])


@pytest.fixture
def browser():
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        pytest.skip(f"no headless browser: none of {', '.join(BROWSERS)} is on PATH")
    return found


@pytest.fixture
def pages(tmp_path):
    pytest.importorskip("asv", reason="asv (the test extra) builds the pages")
    pd = _load_perf_docs()
    out = tmp_path / "asv"
    assert pd.publish(out, offline=False) == 0
    remote = pd.localize(out)
    if remote:
        pytest.skip(f"no local copy of {', '.join(remote)} (system JavaScript packages)")
    return out


def _serve(folder: Path):
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _chromium(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    cmd += ["--window-size=1200,800", "--virtual-time-budget=20000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def test_published_asv_page_renders_its_graph(browser, pages, tmp_path):
    server = _serve(pages)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/#{PAGE}"
        dom = _chromium(browser, "--dump-dom", url).stdout
        shot = tmp_path / "shot.png"
        proc = _chromium(browser, f"--screenshot={shot}", url)
    finally:
        server.shutdown()
        server.server_close()
    assert shot.is_file(), proc.stderr[-2000:]
    assert "failed to load" not in dom and "Can not determine" not in dom
    assert "flot-base" in dom and "flot-overlay" in dom, "no plot canvases in the page"
    assert PAGE in dom and "box-epyc-2core" in dom
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 800)
    # right of the 250-pixel sidebar (whose selected buttons are blue) only the plot lines and
    # markers are in colour; text, grid and frames are grey (a page with no graph has none)
    coloured = sum(1 for i, p in enumerate(pixels) if i % width >= 250 and max(p) - min(p) > 60)
    assert coloured > 500, f"only {coloured} coloured pixels in the plot area: no graph drawn"
