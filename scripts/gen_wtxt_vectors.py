"""Generate the WTXT golden vectors in tests/vectors/wtxt/ (once; never silently regenerated).

    python scripts/gen_wtxt_vectors.py          # writes only missing files
    python scripts/gen_wtxt_vectors.py --force  # rewrite (review the git diff!)

``build()`` returns every vector as bytes; tests/wtxt/test_wtxt_vectors.py rebuilds them in memory
and compares with the committed files, so a change in the writer's output cannot go unnoticed.
Good vectors cover each rule of docs/formats/wtxt.md; bad vectors (``bad_*``) each break one
rule, and MANIFEST.json names the error class and message part a reader must give.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "vectors" / "wtxt"
HKEY = b"golden-hmac-key"
SEED = bytes(range(32))
META = dict(schema="weights/v1", gen=123, ts="2025-10-09T03:12:45Z", build="abc123")


def _arrays() -> dict[str, dict[str, np.ndarray]]:
    return {
        "basic": {"W_base": np.arange(24, dtype=np.float64).reshape(4, 6) / 8},
        "all_dtypes": {
            **{
                f"a_{t}": (np.arange(6) - 2).astype(dt).reshape(2, 3)
                for t, dt in [
                    ("f64", "<f8"),
                    ("f32", "<f4"),
                    ("i64", "<i8"),
                    ("u64", "<u8"),
                    ("i32", "<i4"),
                    ("u32", "<u4"),
                    ("i16", "<i2"),
                    ("u16", "<u2"),
                    ("i8", "i1"),
                    ("u8", "u1"),
                ]
            },
            "scalar": np.array(1.5, np.float32),
            "empty": np.zeros((0, 4), np.int32),
        },
        "row_blocking": {"R": np.arange(300, dtype=np.float32).reshape(50, 6)},
        "multichunk": {"blob": (np.arange(70000) % 251).astype(np.uint8)},
    }


def build() -> dict[str, bytes]:
    """Every vector, by file name."""
    from tenfold import wtxt

    arrs = _arrays()
    out: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)

        def w(name: str, arrays: dict, **kw: object) -> bytes:
            opts = {**META, **kw}
            wtxt.write(tmp / name, arrays, fsync=False, **opts)  # type: ignore[arg-type]
            out[name] = (tmp / name).read_bytes()
            return out[name]

        w("basic.wtxt", arrs["basic"])
        w("all_dtypes.wtxt", arrs["all_dtypes"])
        w("row_blocking.wtxt", arrs["row_blocking"], rows_per_chunk=16)
        w("multichunk.wtxt", arrs["multichunk"])
        w("hmac.wtxt", arrs["basic"], hmac_key=HKEY)
        w("hmac_salt.wtxt", arrs["basic"], hmac_key=HKEY, salt=bytes.fromhex("0011223344556677"))
        w("signed.wtxt", arrs["basic"], hmac_key=HKEY, signing_key=SEED)
        w(
            "signed_all.wtxt",
            arrs["basic"],
            signing_key=SEED,
            sign_all=True,
            audit={"note": "covered by sign_all"},
        )
        w(
            "audit.wtxt",
            arrs["basic"],
            audit={
                "kahan_max_resid": 1.1e-15,
                "denom_min": 0.004,
                "notes": "Sera gamma=0.96 r=4096",
            },
        )
        with wtxt.open(tmp / "basic.wtxt") as f:
            prev = f.root["merkle_this"]
        w(
            "gen124_merkle.wtxt",
            arrs["basic"],
            gen=124,
            ts="2025-10-09T05:01:23Z",
            build="def456",
            merkle_prev=prev,
        )
        w("pending.wtxt", arrs["basic"], root_pending=True)
        wtxt.finalize_wsum(tmp / "pending.wtxt", signing_key=SEED)
        out["pending.wtxt.wsum"] = (tmp / "pending.wtxt.wsum").read_bytes()
        base = tmp / "row_blocking.wtxt"
        new = {"R": arrs["row_blocking"]["R"].copy()}
        new["R"][20] = -1
        wtxt.make_delta(base, new, tmp / "delta.wtxtdelta", gen=124, ts="2025-10-10T00:00:00Z")
        out["delta.wtxtdelta"] = (tmp / "delta.wtxtdelta").read_bytes()
        wtxt.apply_delta(base, tmp / "delta.wtxtdelta", tmp / "delta_applied.wtxt")
        out["delta_applied.wtxt"] = (tmp / "delta_applied.wtxt").read_bytes()
    good = out["basic.wtxt"]
    for name, (data, _cls, _msg) in _bad(good).items():
        out[name] = data
    out["MANIFEST.json"] = (json.dumps(manifest(good), indent=1, sort_keys=True) + "\n").encode()
    return out


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _bad(good: bytes) -> dict[str, tuple[bytes, str, str]]:
    ls = _lines(good)
    ch = next(i for i, x in enumerate(ls) if x.startswith(b"ch "))
    b64 = ch + 1

    def edit(i: int, new: bytes) -> bytes:
        c = list(ls)
        c[i] = new
        return b"\n".join(c)

    def drop(i: int) -> bytes:
        c = list(ls)
        del c[i]
        return b"\n".join(c)

    nib = ls[b64][-1:]
    flipped = b"0" if nib != b"0" else b"1"
    arr = next(i for i, x in enumerate(ls) if x.startswith(b"arr "))
    return {
        "bad_crlf.wtxt": (good.replace(b"\n", b"\r\n", 2), "FormatError", "carriage return"),
        "bad_tab.wtxt": (edit(1, ls[1].replace(b" host", b"\thost")), "FormatError", "tab"),
        "bad_trailing_space.wtxt": (edit(2, ls[2] + b" "), "FormatError", "trailing space"),
        "bad_non_ascii.wtxt": (
            edit(1, ls[1].replace(b"abc123", b"abc\xc3\xa9")),
            "FormatError",
            "non-ASCII",
        ),
        "bad_field_order.wtxt": (
            edit(ch, re.sub(rb"(off=\S+) (len=\S+)", rb"\2 \1", ls[ch])),
            "FormatError",
            "field order",
        ),
        "bad_off_width.wtxt": (
            edit(ch, ls[ch].replace(b"off=000000000000", b"off=0")),
            "FormatError",
            "'off' malformed",
        ),
        "bad_parity.wtxt": (
            edit(b64, ls[b64][:-1] + flipped),
            "FormatError",
            "parity nibble mismatch",
        ),
        "bad_lines_count.wtxt": (
            edit(ch, re.sub(rb"lines=\d+", b"lines=9", ls[ch])),
            "FormatError",
            "'lines' mismatch",
        ),
        "bad_missing_endch.wtxt": (drop(ls.index(b"endch")), "FormatError", "expected 'endch'"),
        "bad_missing_endarr.wtxt": (drop(ls.index(b"endarr")), "FormatError", "endarr"),
        "bad_missing_endwtxt.wtxt": (drop(ls.index(b"endwtxt")), "TruncatedError", "endwtxt"),
        "bad_crc32c.wtxt": (
            edit(ch, re.sub(rb"crc32c=\w+", b"crc32c=00000000", ls[ch])),
            "IntegrityError",
            "crc32c mismatch",
        ),
        "bad_root.wtxt": (
            edit(3, re.sub(rb"fastxor=\w+", b"fastxor=" + b"0" * 16, ls[3])),
            "IntegrityError",
            "fastxor",
        ),
        "bad_arr_bytes.wtxt": (
            edit(arr, ls[arr].replace(b"bytes=192", b"bytes=200")),
            "FormatError",
            "does not match shape",
        ),
        "bad_version.wtxt": (edit(0, b"WTXT 2"), "UnsupportedError", "unsupported version"),
    }


def manifest(good: bytes) -> dict[str, dict[str, str]]:
    return {n: {"error": c, "message": m} for n, (_d, c, m) in _bad(good).items()}


def main() -> int:
    force = "--force" in sys.argv
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in build().items():
        p = OUT / name
        if p.exists() and not force:
            continue
        p.write_bytes(data)
        print(f"wrote {p.relative_to(ROOT)} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
