"""WTXT speed: tenfold vs a straightforward NumPy + stdlib implementation of the same format.

No other WTXT implementation exists, so the "peer" is a baseline written here: the same bytes
(it is checked against tenfold's output) produced with ``base64``/``hashlib``/``hmac`` and NumPy
framing, and a reader that checks the same things line by line with NumPy. Data: 64 MiB of
float32 (16 MiB in --quick), keyed HMAC, default 32 KiB chunks, files in a temp dir, each timed
write to a new file, no fsync for either side.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import tempfile

import _timing
import crc32c
import numpy as np

from tenfold import wtxt
from tenfold.wtxt import _spec as S

KEY = b"bench-hmac-key"
META = dict(schema="weights/v1", gen=1, ts="2025-10-09T03:12:45Z", build="bench")
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def _frame(b64: bytes) -> bytes:
    n = len(b64)
    nl = -(-n // 76)
    full = np.zeros(nl * 76, np.uint8)
    full[:n] = np.frombuffer(b64, np.uint8)
    mat = full.reshape(nl, 76)
    par = np.bitwise_xor.reduce(mat, axis=1) & 15
    out = np.empty((nl, 79), np.uint8)
    out[:, :76] = mat
    out[:, 76] = 32
    out[:, 77] = _HEX[par]
    out[:, 78] = 10
    flat = out.reshape(-1).tobytes()
    last = n - (nl - 1) * 76
    return flat[: (nl - 1) * 79] + flat[(nl - 1) * 79 : (nl - 1) * 79 + last] + flat[-3:]


def baseline_write(path: str, name: str, a: np.ndarray) -> None:
    raw = a.tobytes()
    salt = S.derive_salt("000001", name)
    sha = hashlib.sha256(raw).hexdigest()
    mac = hmac.new(KEY, salt + raw, "sha256").hexdigest()
    line = S.arr_line(name, "f32", a.shape, len(raw), sha, mac, salt.hex())
    all_hex = hashlib.sha256(line.encode() + raw).hexdigest()
    pad = raw + bytes(-len(raw) % 8)
    fx = int(np.bitwise_xor.reduce(np.frombuffer(pad, "<u8")))
    this = S.merkle(S.ZERO64, all_hex, META["ts"], "000001", META["build"])
    with open(path, "wb") as f:
        f.write(
            (
                "WTXT 1\n"
                + S.meta_line(
                    {**META, "gen": "000001", "endian": "LE", "host": "cpu", "cuda": "off"}
                )
                + "\ncap ext=crc32c,line_parity,arr_hmac\n"
                + S.root_line(all_hex, S.ZERO64, this, fx)
                + "\n"
                + line
                + "\n"
            ).encode()
        )
        for ix, off in enumerate(range(0, len(raw), 32768)):
            c = raw[off : off + 32768]
            f.write(
                (
                    S.ch_line(ix, off, len(c), hashlib.sha256(c).hexdigest(), crc32c.crc32c(c))
                    + "\n"
                ).encode()
            )
            f.write(_frame(base64.b64encode(c)))
            f.write(b"endch\n")
        f.write(b"endarr\nendwtxt\n")


def baseline_read(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    arr = lines[4].decode().split(" ")
    fields = dict(t.split("=", 1) for t in arr[1:])
    n = int(fields["bytes"])
    buf = bytearray(n)
    i = 5
    while lines[i].startswith(b"ch "):
        ch = dict(t.split("=", 1) for t in lines[i].decode().split(" ")[1:])
        nl = int(ch["lines"])
        body = lines[i + 1 : i + 1 + nl]
        mat = np.frombuffer(b"".join(ln[:-2] for ln in body[:-1]), np.uint8).reshape(-1, 76)
        nib = np.frombuffer(b"".join(ln[-1:] for ln in body[:-1]), np.uint8)
        par = _HEX[np.bitwise_xor.reduce(mat, axis=1) & 15]
        assert (par == nib).all()
        raw = base64.b64decode(b"".join(ln[:-2] for ln in body), validate=True)
        assert crc32c.crc32c(raw) == int(ch["crc32c"], 16)
        assert hashlib.sha256(raw).hexdigest() == ch["sha256"]
        off = int(ch["off"])
        buf[off : off + len(raw)] = raw
        assert lines[i + 1 + nl] == b"endch"
        i += nl + 2
    assert hashlib.sha256(buf).hexdigest() == fields["sha256"]
    salt = bytes.fromhex(fields["salt"])
    assert hmac.compare_digest(
        hmac.new(KEY, salt + bytes(buf), "sha256").hexdigest(), fields["hmac"]
    )
    all_hex = hashlib.sha256(lines[4] + bytes(buf)).hexdigest()
    assert all_hex in lines[3].decode()
    return np.frombuffer(buf, np.float32)


def run(quick: bool) -> list[dict]:
    n = (16 if quick else 64) << 20
    a = np.random.default_rng(0).standard_normal(n // 4).astype(np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        p_t, p_b = os.path.join(d, "t.wtxt"), os.path.join(d, "b.wtxt")
        wtxt.write(p_t, {"x": a}, hmac_key=KEY, fsync=False, **META)
        baseline_write(p_b, "x", a)
        with open(p_t, "rb") as f1, open(p_b, "rb") as f2:
            assert f1.read() == f2.read(), "baseline writes different bytes"
        mb = a.nbytes / 1e6

        def fresh(path: str):
            # each timed write goes to a new file: renaming or truncating over an existing one
            # makes ext4 start writeback, which would be timed too (untimed: removal + sync)
            def setup() -> None:
                if os.path.exists(path):
                    os.unlink(path)
                os.sync()

            return setup

        peer_w = mb / _timing.best(lambda: baseline_write(p_b, "x", a), 3, fresh(p_b))
        peer_r = mb / _timing.best(lambda: baseline_read(p_b), 3)
        for workers in (1, 2):
            tag = "1 thread" if workers == 1 else "2 threads"
            w = mb / _timing.best(
                lambda workers=workers: wtxt.write(
                    p_t, {"x": a}, hmac_key=KEY, fsync=False, workers=workers, **META
                ),  # noqa: B023
                3,
                fresh(p_t),
            )
            r = mb / _timing.best(lambda: wtxt.read(p_t, hmac_keys=[KEY], workers=workers), 3)  # noqa: B023
            rows.append(
                _timing.row(
                    f"write {n >> 20} MiB f32 + HMAC, {tag}",
                    w,
                    "numpy+stdlib baseline",
                    peer_w,
                    unit="MB/s",
                    higher_is_better=True,
                    target=">= 200" if workers == 1 else ">= 300",
                )
            )
            rows.append(
                _timing.row(
                    f"read+verify {n >> 20} MiB f32 + HMAC, {tag}",
                    r,
                    "numpy+stdlib baseline",
                    peer_r,
                    unit="MB/s",
                    higher_is_better=True,
                    target=">= 200" if workers == 1 else ">= 300",
                )
            )
        w = mb / _timing.best(
            lambda: wtxt.write(p_t, {"x": a}, hmac_key=KEY, fsync=True, workers=1, **META),
            3,
            fresh(p_t),
        )
        rows.append(
            _timing.row(
                f"write {n >> 20} MiB f32 + HMAC, 1 thread, with fsync",
                w,
                unit="MB/s",
                higher_is_better=True,
                note="disk-bound",
            )
        )
        rows.append(
            _timing.row(
                "text size / raw size",
                os.path.getsize(p_t) / a.nbytes,
                unit="ratio",
                target="about 1.39",
            )
        )
    return rows
