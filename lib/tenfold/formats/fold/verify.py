"""Verify and repair FOLD files.

:func:`verify` never raises on a damaged file: it reports every chunk as ok, repaired (damaged
but correctable with its Reed-Solomon parity) or error, plus the manifest and stale ECC parity.
:func:`repair` writes a copy in which every correctable chunk is corrected, binary chunk
headers that disagree with the index are rewritten from it (when the payload verifies against
the index's SHA-256), and every verified chunk's parity is recomputed (which also fixes the
multi-block parity pyfolds 1.0.2 wrote wrongly). What cannot be repaired is reported.
"""

from __future__ import annotations

import os
import shutil
import warnings
from typing import Any

import numpy as np

from ... import _kernels
from ...core.atomic import atomic_write
from ...core.locking import lock_if_rewritten
from ...core.report import ERROR, INFO, OK, REPAIRABLE, REPAIRED, WARNING, Report
from ...errors import TenfoldError
from ._spec import CHUNK_HEADER, FMT
from .reader import ChunkInfo, FoldWarning, Reader

__all__ = ["verify", "verify_reader", "repair"]


def _parity(comp: np.ndarray, nsym: int, ecc_len: int) -> np.ndarray:
    out = np.empty(ecc_len, np.uint8)
    _kernels.load("rs").encode_blocks(comp, nsym, out)
    return out


def _stale_parity(r: Reader, c: ChunkInfo, comp: np.ndarray) -> int:
    """Number of RS blocks whose stored parity does not match the (verified) data."""
    nsym = c.nsym or 0
    if nsym == 0 or c.ecc_len == 0:
        return 0
    ecc = r.file.u8(c.payload_offset + c.comp_len, c.ecc_len, f"{c.what} ecc")
    bad = np.zeros(c.ecc_len // nsym, np.int32)
    return int(_kernels.load("rs").check_blocks(comp, ecc, nsym, bad))


def verify_reader(r: Reader) -> Report:
    """Check every chunk of an open reader (full decode included, in pieces: nothing decoded
    is kept, so memory does not grow with the chunks' sizes)."""
    rep = Report(FMT, r.path or "<buffer>")
    rep.summary["chunks"] = len(r.chunks)
    rep.summary["version"] = r.version
    rep.summary["kind"] = "mind" if r.is_mind else "fold"
    if r.manifest_ok is None:
        stored = r.metadata.get("manifest_hash")
        if stored is None:
            rep.add("manifest", INFO, "no manifest_hash")
        else:
            rep.add("manifest", WARNING, "hmac-sha256 manifest_hash not checked (no hmac_key)")
    elif r.manifest_ok:
        rep.add("manifest", OK)
    else:
        rep.add(
            "manifest",
            ERROR,
            "manifest_hash does not match the metadata",
            offset=r.header["index_off"],
        )
    end = r.header["index_off"] + r.header["index_len"]
    if end < r.size:
        rep.add("file", WARNING, f"{r.size - end} bytes after the index (ignored)", offset=end)
    for c in r.chunks:
        try:
            st = r.load_comp(c.name, tolerate_header=True)
            r.check_decode(c, st.comp)
        except TenfoldError as exc:
            rep.add_error(exc, c.what, offset=c.offset)
            continue
        notes = []
        if st.state == "repaired":
            notes.append(f"{st.corrected} bytes correctable with {c.ecc_algo}")
        if st.header_fixes:
            notes.append("binary header disagrees with the index in " + ", ".join(st.header_fixes))
        stale = _stale_parity(r, c, st.comp) if st.state == "ok" else 0
        if st.state == "repaired" or st.header_fixes:
            notes.append("run `tenfold repair`")
            rep.add(c.what, REPAIRABLE, "; ".join(notes), offset=c.offset)
            rep.repairable = f"tenfold repair {rep.path}"
        elif stale:
            rep.add(
                c.what,
                WARNING,
                f"data intact but {stale} of {c.ecc_len // (c.nsym or 1)} {c.ecc_algo} "
                "parity blocks are stale (pyfolds 1.0.2 multi-block bug?); "
                "`tenfold repair` rewrites them",
                offset=c.offset,
            )
        else:
            rep.add(c.what, OK, f"{c.ctype} {c.compression} {c.ecc_algo}")
    return rep


def verify(source: Any, *, hmac_key: str | bytes | None = None, strict: bool = False) -> Report:
    """Verify a FOLD file; never raises on damage (the report says what is wrong)."""
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<buffer>"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FoldWarning)
            r = Reader(source, strict=strict, hmac_key=hmac_key)
    except TenfoldError as exc:
        rep = Report(FMT, path)
        rep.add_error(exc)
        return rep
    with r:
        return verify_reader(r)


def repair(src: Any, dst: Any, *, hmac_key: str | bytes | None = None) -> Report:
    """Write ``dst``: ``src`` with every correctable chunk corrected.

    Chunks are corrected with their Reed-Solomon parity, binary headers that disagree with the
    index are rewritten from it, and the parity of every verified chunk is recomputed. The
    layout is unchanged (same offsets, same index). ``dst`` is written atomically and may be
    ``src``. The returned report has one row per chunk: ok (unchanged), repaired (what was
    fixed) or error (left as it was: not repairable). Raises when the header or index itself
    is unreadable. Repairing in place holds the file's lock (:mod:`tenfold.core.locking`) from
    the read to the rename.
    """
    with lock_if_rewritten(src, dst, fmt=FMT):
        return _repair(src, dst, hmac_key)


def _repair(src: Any, dst: Any, hmac_key: str | bytes | None) -> Report:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FoldWarning)
        r = Reader(src, strict=False, hmac_key=hmac_key)
    rep = Report(FMT, os.fspath(dst))
    if r.manifest_ok is False:
        rep.add(
            "manifest",
            ERROR,
            "manifest_hash does not match the metadata; not repairable "
            "(no redundant copy of the metadata)",
            offset=r.header["index_off"],
        )
    patches: list[tuple[int, bytes | np.ndarray]] = []
    with r:
        for c in r.chunks:
            try:
                st = r.load_comp(c.name, tolerate_header=True)
                r.check_decode(c, st.comp)
            except TenfoldError as exc:
                rep.add(c.what, ERROR, f"not repaired: {exc}", offset=c.offset)
                continue
            fixed = []
            if st.header_fixes:
                patches.append(
                    (
                        c.offset,
                        CHUNK_HEADER.pack(
                            c.ctype.encode("latin-1"),
                            c.flags,
                            c.uncomp_len,
                            c.comp_len,
                            c.crc32c,
                            c.ecc_len,
                        ),
                    )
                )
                fixed.append("header " + ", ".join(st.header_fixes))
            if st.state == "repaired":
                patches.append((c.payload_offset, st.comp))
                fixed.append(f"{st.corrected} bytes corrected")
            nsym = c.nsym or 0
            if nsym and c.ecc_len:
                parity = _parity(st.comp, nsym, c.ecc_len)
                stored = r.file.u8(c.payload_offset + c.comp_len, c.ecc_len)
                if not np.array_equal(parity, stored):
                    patches.append((c.payload_offset + c.comp_len, parity))
                    if st.state != "repaired":
                        fixed.append("parity rewritten")
            if fixed:
                rep.add(c.what, REPAIRED, "; ".join(fixed), offset=c.offset)
            else:
                rep.add(c.what, OK)
        src_path = r.path
        with atomic_write(dst) as f:
            if src_path is not None:
                with open(src_path, "rb") as fin:
                    shutil.copyfileobj(fin, f, 16 << 20)
            else:
                f.write(memoryview(r.file.buffer()))  # type: ignore[arg-type]
            for off, data in patches:
                f.seek(off)
                f.write(memoryview(data))  # type: ignore[arg-type]
            f.seek(0, os.SEEK_END)
    rep.summary["patched regions"] = len(patches)
    return rep
