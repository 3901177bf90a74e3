"""DELTA v2: ship only the chunks that changed, and rebuild the new snapshot from the base.

    WTXT-DELTA 2 base_sha256_all=<hex64>
    [meta ...]                      the target's meta line
    [root ...]                      the target's root line (checked after applying)
    arr name=<name> sha256=<hex64> hmac=<hex64> salt=<hex16>     per changed array
    ch ... / base64 lines / endch                                 its changed chunks
    endarr
    enddelta

``ix``/``off``/``len`` of a delta chunk equal the base chunk's. Applying checks the base root,
replaces the chunks, checks the array hashes, and writes the file the writer would write for the
new arrays, with ``merkle_prev`` = the base's ``merkle_this``; the old signature is dropped.
"""

from __future__ import annotations

import functools
import hashlib
import hmac as _hmac
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core import parallel
from ...core.atomic import atomic_write
from ...core.cli_support import reading
from ...core.mapped import MappedFile
from ...core.release import release
from ...errors import (
    EncodeError,
    FormatError,
    IntegrityError,
    describe,
)
from . import _spec as S
from . import names as _names
from ._text import Cursor, at_lines
from .codec import ChunkEncoder, batches
from .delta_parse import Delta, DeltaArray, parse_delta
from .reader import WtxtFile
from .writer import Prepared, array_digests, make_meta, prepare_arrays, write

__all__ = ["make_delta", "apply_delta", "parse_delta", "Delta", "DeltaArray"]


def _rpc(info: Any) -> int | None:
    return (
        int(info.idx["rows_per_chunk"]) if info.idx and info.idx["row_blocking"] == "on" else None
    )


def _stored_names(
    arrays: Mapping[str, Any], cap: Any, base: Mapping[str, Any]
) -> Mapping[str, Any]:
    """``arrays`` under the names the base stores them by: a base written with tenfold's
    reversible name encoding (cap item ``tenfold_names``: dotted, slashed or 0-d names, as
    ``tenfold.save`` writes any state dict) gets the same encoding; names that already are
    the stored ones are kept."""
    if _names.CAP_ITEM not in (cap or ()) or all(n in base for n in arrays):
        return arrays
    return {_names.encode(n, np.ndim(v) == 0): v for n, v in arrays.items()}


def make_delta(
    base_path: str | os.PathLike[str],
    arrays: Mapping[str, Any],
    delta_path: str | os.PathLike[str],
    *,
    gen: int | str | None = None,
    ts: Any = None,
    build: str | None = None,
    hmac_key: bytes | None = None,
    salt: Any = None,
    base_hmac_keys: Any = (),
) -> int:
    """Write a DELTA v2 from the snapshot at ``base_path`` to ``arrays``; returns the number of
    chunks it carries.

    ``arrays`` must have the base's names, dtypes and shapes. ``gen``/``ts``/``build`` set the
    target ``meta`` (default: the base's); ``hmac_key``/``salt`` are those a direct write of the
    new snapshot would use. The target ``meta`` and ``root`` lines are always written.
    """
    with _open_base(base_path, base_hmac_keys) as base:
        base_root = _finalized_root(base, base_path)
        bm = base.meta
        meta = make_meta(
            bm["schema"],
            bm["gen"] if gen is None else gen,
            bm["ts"] if ts is None else ts,
            bm["build"] if build is None else build,
            bm["host"],
            bm["cuda"],
        )
        items = _like_base(base, arrays, meta["gen"], salt)
        lines, all_hex, fx = array_digests(
            items, None if hmac_key is None else bytes(hmac_key), None
        )
        prev = base_root["merkle_this"]
        root = S.root_line(
            all_hex, prev, S.merkle(prev, all_hex, meta["ts"], meta["gen"], meta["build"]), fx
        )
        blocks = _changed(base, items, lines)
    head = f"WTXT-DELTA 2 base_sha256_all={base_root['sha256_all']}\n{S.meta_line(meta)}\n{root}\n"
    with atomic_write(delta_path) as out:
        out.write(head.encode())
        enc = ChunkEncoder()
        for it, f, changed in blocks:
            out.write(
                f"arr name={it.name} sha256={f['sha256']} hmac={f['hmac']} "
                f"salt={f['salt']}\n".encode()
            )
            mv = S.mview(it.data())
            layout = S.chunk_layout(it.size, it.clen)
            for ix in changed:
                off, ln = layout[ix]
                out.write(enc.block(ix, off, mv[off : off + ln]))
            out.write(b"endarr\n")
        out.write(b"enddelta\n")
    return sum(len(changed) for _, _, changed in blocks)


def _open_base(path: str | os.PathLike[str], hmac_keys: Any) -> WtxtFile:
    """The base snapshot, opened; an error reading it names ``path`` (:func:`reading`), so
    that it is not taken for the delta's or the new arrays' fault."""
    with reading(path):
        return WtxtFile(path, hmac_keys=hmac_keys)


def _open_delta(path: str | os.PathLike[str]) -> MappedFile:
    with reading(path):
        return MappedFile(path, fmt=S.FMT)


def _finalized_root(base: WtxtFile, path: str | os.PathLike[str]) -> dict[str, str]:
    """The base's root; a ``root_pending`` base (no root yet) is refused, naming ``path``."""
    if base.root is None:
        with reading(path):
            raise FormatError(
                describe(
                    S.FMT,
                    f"base root_pending (line {base.parsed.root_lineno})",
                    detail="root pending: finalize it first",
                )
            )
    return base.root


def _like_base(base: WtxtFile, arrays: Mapping[str, Any], gen: str, salt: Any) -> list[Prepared]:
    """``arrays`` laid out for writing, refused unless they have the base's names (as stored),
    dtypes and shapes."""
    binfo = {a.name: a for a in base.arrays}
    arrays = _stored_names(arrays, base.cap, binfo)
    items = prepare_arrays(arrays, gen, salt, {a.name: _rpc(a) for a in base.arrays})
    if [it.name for it in items] != list(binfo):
        raise EncodeError(
            describe(
                S.FMT,
                "delta",
                detail="arrays must have the base's names",
                expected=list(binfo),
                got=[it.name for it in items],
            )
        )
    for it in items:
        b = binfo[it.name]
        if it.tag != b.dtype or it.shape != b.shape:
            raise EncodeError(
                describe(
                    S.FMT,
                    f"array {it.name!r}",
                    detail="a delta cannot change dtype or shape",
                    expected=f"{b.dtype} {b.shape}",
                    got=f"{it.tag} {it.shape}",
                )
            )
    return items


def _changed(
    base: WtxtFile, items: list[Prepared], lines: list[str]
) -> list[tuple[Prepared, dict[str, str], list[int]]]:
    """Per array that differs from the base: its new ``arr`` fields and the indices of the
    chunks whose SHA-256 changed (each array fetched once, its chunks hashed in batches on
    :func:`~tenfold.core.parallel.threads` threads)."""
    binfo = {a.name: a for a in base.arrays}
    blocks = []
    n = parallel.threads()
    with parallel.pool_for(n, "wtxt-delta") as pool:
        for it, line in zip(items, lines, strict=True):
            b = binfo[it.name]
            f = dict(t.split("=", 1) for t in line.split(" ")[1:])
            raw = it.data()
            layout = S.chunk_layout(it.size, it.clen)
            spans = [layout[i:j] for i, j in batches(layout)]
            parts = pool.map(_chunk_digests, [raw] * len(spans), spans)
            digests = [h for part in parts for h in part]
            changed = [c.ix for c, h in zip(b.chunks, digests, strict=True) if h != c.sha256]
            release(raw)
            if changed or (f["sha256"], f["hmac"], f["salt"]) != (b.sha256, b.hmac, b.salt):
                blocks.append((it, f, changed))
    return blocks


def _chunk_digests(raw: np.ndarray, layout: list[tuple[int, int]]) -> list[str]:
    mv = S.mview(raw)
    return [hashlib.sha256(mv[off : off + ln]).hexdigest() for off, ln in layout]


def apply_delta(
    base_path: str | os.PathLike[str],
    delta_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    hmac_key: bytes | None = None,
    signing_key: Any = None,
    sign_all: bool = False,
    base_hmac_keys: Any = (),
) -> None:
    """Apply a DELTA v2 to the snapshot at ``base_path`` and write the new one to ``out_path``.

    Checks ``base_sha256_all`` against the base root, the changed arrays' SHA-256 (and HMAC
    when ``hmac_key`` is given), and the target ``root`` line when the delta has one. The
    output equals what :func:`write` gives for the new arrays with ``merkle_prev`` = the base's
    ``merkle_this``; the base signature is dropped (pass ``signing_key`` to sign anew).
    """
    with (
        _open_base(base_path, base_hmac_keys) as base,
        _open_delta(delta_path) as dm,
        reading(delta_path, unless=(EncodeError,)),  # its errors name it (the base's: noted)
    ):
        base_root = _finalized_root(base, base_path)
        d = parse_delta(dm.buffer(), base)
        if d.base_sha256_all != base_root["sha256_all"]:
            raise at_lines(
                IntegrityError(
                    describe(
                        S.FMT,
                        "delta line 1",
                        field="base_sha256_all",
                        detail=f"not the base's root (line {base.parsed.root_lineno} of the base)",
                        expected=base_root["sha256_all"],
                        got=d.base_sha256_all,
                    )
                ),
                1,
            )
        info = {a.name: a for a in base.arrays}
        new = {a.name: a.raw_bytes().copy() for a in base.arrays}
        salts = {a.name: a.salt for a in base.arrays}
        hmacs = {a.name: a.hmac for a in base.arrays}
        for da in d.arrays:
            _patch(new[da.name], da, hmac_key)
            salts[da.name], hmacs[da.name] = da.salt, da.hmac
        meta = d.meta if d.meta is not None else base.meta
        arrays = {n: new[n].view(S.DTYPES[info[n].dtype]).reshape(info[n].shape) for n in new}
        rpc = {n: _rpc(info[n]) for n in new}
        prev = base_root["merkle_this"]
        # the target root is checked on the digests the writer computes, before its file
        # appears (one pass over the arrays, not two)
        check = None if d.root is None else functools.partial(_check_target_root, d, meta, prev)
        write(
            out_path,
            arrays,
            schema=meta["schema"],
            gen=meta["gen"],
            ts=meta["ts"],
            build=meta["build"],
            host=meta["host"],
            cuda=meta["cuda"],
            rows_per_chunk=rpc,
            salt=salts,
            signing_key=signing_key,
            sign_all=sign_all,
            # the base's name encoding is a property of its names, which a delta keeps
            cap_extra=[c for c in base.cap if c == _names.CAP_ITEM],
            merkle_prev=prev,
            audit=_audit_text(base),
            _hmacs=hmacs,
            _check=check,
        )


def _patch(buf: np.ndarray, da: DeltaArray, hmac_key: bytes | None) -> None:
    """Write a delta array's chunks into the base array's bytes ``buf``; check the array's
    SHA-256, and its HMAC when ``hmac_key`` is given (then mandatory, as ``read`` has it)."""
    for ch, raw in da.chunks:
        buf[ch.off : ch.off + ch.length] = np.frombuffer(raw, np.uint8)
    sha = hashlib.sha256(S.mview(buf)).hexdigest()
    first, last = da.lineno, da.end_lineno
    if sha != da.sha256:
        raise at_lines(
            IntegrityError(
                describe(S.FMT, da.where(), field="sha256", expected=da.sha256, got=sha)
            ),
            first,
            last,
        )
    if hmac_key is None:
        return
    if da.hmac == S.ZERO64:
        detail = "unauthenticated (hmac is zero) but an hmac key was given"
        raise at_lines(
            IntegrityError(describe(S.FMT, da.where(), field="hmac", detail=detail)), first, last
        )
    m = _hmac.new(bytes(hmac_key), bytes.fromhex(da.salt), "sha256")
    m.update(S.mview(buf))
    if not _hmac.compare_digest(m.hexdigest(), da.hmac):
        raise at_lines(
            IntegrityError(
                describe(S.FMT, da.where(), field="hmac", detail="does not authenticate")
            ),
            first,
            last,
        )


def _check_target_root(d: Delta, meta: Mapping[str, str], prev: str, all_hex: str, fx: int) -> None:
    """The delta's target ``root`` line against the root of the patched arrays (their
    ``sha256_all`` and ``fastxor``)."""
    assert d.root is not None
    this = S.merkle(prev, all_hex, meta["ts"], meta["gen"], meta["build"])
    got = {"sha256_all": all_hex, "merkle_prev": prev, "merkle_this": this, "fastxor": f"{fx:016x}"}
    for k, v in got.items():
        if d.root[k] != v:
            raise at_lines(
                IntegrityError(
                    describe(
                        S.FMT,
                        f"delta target root (line {d.root_lineno})",
                        field=k,
                        expected=d.root[k],
                        got=v,
                    )
                ),
                d.root_lineno,
            )


def _audit_text(base: WtxtFile) -> str | None:
    p = base.parsed
    if p.audit_lineno is None:
        return None
    cur = Cursor(p.data)
    cur.skip_lines(p.audit_lineno - 1)
    return cur.line()[0]
