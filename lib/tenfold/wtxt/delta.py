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

import dataclasses
import hashlib
import hmac as _hmac
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import _kernels
from ..core.atomic import atomic_write
from ..core.mapped import MappedFile
from ..core.report import ERROR, OK, Report
from ..errors import (
    EncodeError,
    FormatError,
    IntegrityError,
    TenfoldError,
    TruncatedError,
    describe,
)
from . import _spec as S
from . import names as _names
from ._text import Cursor, at_lines, err, fields
from .reader import ChunkInfo, WtxtFile, check_ts, chunk_header, decode_chunk
from .writer import ChunkEncoder, array_digests, make_meta, prepare_arrays, write

__all__ = ["make_delta", "apply_delta", "parse_delta", "Delta"]


@dataclasses.dataclass
class DeltaArray:
    name: str
    sha256: str
    hmac: str
    salt: str
    lineno: int
    chunks: list[tuple[ChunkInfo, bytes]]
    end_lineno: int = 0

    def where(self) -> str:
        last = self.end_lineno if self.end_lineno > self.lineno else self.lineno
        span = f"line {self.lineno}" if last == self.lineno else f"lines {self.lineno}-{last}"
        return f"delta array {self.name!r} ({span})"


@dataclasses.dataclass
class Delta:
    base_sha256_all: str
    meta: dict[str, str] | None
    root: dict[str, str] | None
    arrays: list[DeltaArray]
    root_lineno: int = 0


def _rpc(info: Any) -> int | None:
    return (
        int(info.idx["rows_per_chunk"]) if info.idx and info.idx["row_blocking"] == "on" else None
    )


def parse_delta(data: np.ndarray, base: WtxtFile | None = None) -> Delta:
    """Parse a DELTA v2 text strictly. With ``base``, chunk positions are checked against it."""
    kern = _kernels.load("b64lines")
    cur = Cursor(data)
    text, ln, off = cur.line("'WTXT-DELTA 2 ...'")
    if not text.startswith("WTXT-DELTA 2 "):
        raise err(
            FormatError,
            ln,
            off,
            "bad delta magic",
            expected="'WTXT-DELTA 2 ...'",
            got=repr(text[:20]),
        )
    head = fields("D " + text[13:], "D", (("base_sha256_all", S.HEX64),), ln, off)
    meta = root = None
    root_ln = 0
    raw = cur.peek_raw()
    if raw is not None and raw.startswith(b"meta "):
        text, ln, off = cur.line()
        meta = fields(text, "meta", S.META_FIELDS, ln, off)
        check_ts(meta["ts"], ln, off)
    raw = cur.peek_raw()
    if raw is not None and raw.startswith(b"root "):
        text, ln, off = cur.line()
        root = fields(text, "root", S.ROOT_FIELDS, ln, off)
        root_ln = ln
    arrays: list[DeltaArray] = []
    base_arrays = {a.name: a for a in base.arrays} if base is not None else {}
    scratch = np.empty(0, np.uint8)
    while True:
        text, ln, off = cur.line("'arr' or 'enddelta'")
        if text == "enddelta":
            break
        a = fields(text, "arr", S.DARR_FIELDS, ln, off)
        if arrays and a["name"].encode() <= arrays[-1].name.encode():
            raise err(
                FormatError,
                ln,
                off,
                "delta array name order or duplicate",
                expected=f"after {arrays[-1].name!r}",
                got=a["name"],
            )
        binfo = base_arrays.get(a["name"])
        if base is not None and binfo is None:
            raise err(FormatError, ln, off, f"array {a['name']!r} is not in the base")
        da = DeltaArray(a["name"], a["sha256"], a["hmac"], a["salt"], ln, [])
        last = -1
        while True:
            raw = cur.peek_raw()
            if raw is None:
                raise err(TruncatedError, cur.lineno, cur.pos, "file ends; expected 'endarr'")
            if raw == b"endarr":
                da.end_lineno = cur.line()[1]
                break
            m = S.CH_RE.fullmatch(raw)
            if m is None:
                t, cl, co = cur.line("ch")
                fields(t, "ch", S.CH_FIELDS, cl, co)
                raise err(FormatError, cl, co, "unexpected line")  # pragma: no cover
            ix = int(m.group(1))
            if ix <= last:
                raise err(
                    FormatError,
                    cur.lineno,
                    cur.pos,
                    "delta chunks must be in increasing ix order",
                    expected=f"> {last:06d}",
                    got=f"{ix:06d}",
                )
            last = ix
            if binfo is not None:
                if ix >= len(binfo.chunks):
                    raise err(
                        FormatError,
                        cur.lineno,
                        cur.pos,
                        "chunk ix beyond the base array",
                        expected=f"< {len(binfo.chunks):06d}",
                        got=f"{ix:06d}",
                    )
                bc = binfo.chunks[ix]
                boff, blen = bc.off, bc.length
            else:
                boff, blen = int(m.group(2)), int(m.group(3))
            ch = chunk_header(cur, kern, data, ix, boff, blen, False)
            if 4 * -(-ch.length // 3) > cur.size - cur.pos:  # before allocating for it
                raise err(
                    TruncatedError,
                    cur.lineno,
                    cur.pos,
                    "ch 'len' larger than the rest of the file can hold",
                    expected=f"<= {(cur.size - cur.pos) * 3 // 4}",
                    got=ch.length,
                )
            buf = np.zeros(ch.length, np.uint8)
            if ch.length:
                if scratch.size < ch.lines * S.WIDTH:
                    scratch = np.empty(ch.lines * S.WIDTH, np.uint8)
                ch_rel = dataclasses.replace(ch, off=0)
                decode_chunk(cur, kern, data, ch_rel, scratch, buf, False)
            t, el, eo = cur.line("endch")
            if t != "endch":
                raise err(
                    FormatError, el, eo, "expected 'endch'", expected="endch", got=repr(t[:40])
                )
            da.chunks.append((ch, buf.tobytes()))
        arrays.append(da)
    if not cur.at_end():
        raise err(FormatError, cur.lineno, cur.pos, "data after 'enddelta'")
    return Delta(head["base_sha256_all"], meta, root, arrays, root_ln)


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
    with WtxtFile(base_path, hmac_keys=base_hmac_keys) as base:
        if base.root is None:
            raise FormatError(
                describe(
                    S.FMT,
                    f"base root_pending (line {base.parsed.root_lineno})",
                    detail="root pending: finalize it first",
                )
            )
        bm = base.meta
        meta = make_meta(
            bm["schema"],
            bm["gen"] if gen is None else gen,
            bm["ts"] if ts is None else ts,
            bm["build"] if build is None else build,
            bm["host"],
            bm["cuda"],
        )
        rpc = {a.name: _rpc(a) for a in base.arrays}
        binfo = {a.name: a for a in base.arrays}
        arrays = _stored_names(arrays, base.cap, binfo)
        items = prepare_arrays(arrays, meta["gen"], salt, rpc)
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
        lines, all_hex, fx = array_digests(
            items, None if hmac_key is None else bytes(hmac_key), None
        )
        prev = base.root["merkle_this"]
        root = S.root_line(
            all_hex, prev, S.merkle(prev, all_hex, meta["ts"], meta["gen"], meta["build"]), fx
        )
        blocks = []
        nchunks = 0
        for it, line in zip(items, lines, strict=True):
            b = binfo[it.name]
            f = dict(t.split("=", 1) for t in line.split(" ")[1:])
            changed = [
                c.ix
                for c, (off, ln) in zip(b.chunks, S.chunk_layout(it.size, it.clen), strict=True)
                if hashlib.sha256(S.mview(it.data())[off : off + ln]).hexdigest() != c.sha256
            ]
            if not changed and (f["sha256"], f["hmac"], f["salt"]) == (b.sha256, b.hmac, b.salt):
                continue
            blocks.append((it, f, changed))
            nchunks += len(changed)
        base_all = base.root["sha256_all"]
    enc = ChunkEncoder()
    with atomic_write(delta_path) as out:
        out.write(
            f"WTXT-DELTA 2 base_sha256_all={base_all}\n{S.meta_line(meta)}\n{root}\n".encode()
        )
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
    return nchunks


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
        WtxtFile(base_path, hmac_keys=base_hmac_keys) as base,
        MappedFile(delta_path, fmt=S.FMT) as dm,
    ):
        if base.root is None:
            raise FormatError(
                describe(
                    S.FMT,
                    f"base root_pending (line {base.parsed.root_lineno})",
                    detail="root pending: finalize it first",
                )
            )
        d = parse_delta(dm.buffer(), base)
        if d.base_sha256_all != base.root["sha256_all"]:
            raise at_lines(
                IntegrityError(
                    describe(
                        S.FMT,
                        "delta line 1",
                        field="base_sha256_all",
                        detail=f"not the base's root (line {base.parsed.root_lineno} of the base)",
                        expected=base.root["sha256_all"],
                        got=d.base_sha256_all,
                    )
                ),
                1,
            )
        new = {a.name: a.raw_bytes().copy() for a in base.arrays}
        info = {a.name: a for a in base.arrays}
        salts = {a.name: a.salt for a in base.arrays}
        hmacs = {a.name: a.hmac for a in base.arrays}
        for da in d.arrays:
            buf = new[da.name]
            for ch, raw in da.chunks:
                buf[ch.off : ch.off + ch.length] = np.frombuffer(raw, np.uint8)
            sha = hashlib.sha256(S.mview(buf)).hexdigest()
            last = da.end_lineno
            if sha != da.sha256:
                raise at_lines(
                    IntegrityError(
                        describe(S.FMT, da.where(), field="sha256", expected=da.sha256, got=sha)
                    ),
                    da.lineno,
                    last,
                )
            if hmac_key is not None:
                # a key given makes authentication mandatory (read's policy): zero is refused
                if da.hmac == S.ZERO64:
                    raise at_lines(
                        IntegrityError(
                            describe(
                                S.FMT,
                                da.where(),
                                field="hmac",
                                detail="unauthenticated (hmac is zero) but an hmac key was given",
                            )
                        ),
                        da.lineno,
                        last,
                    )
                m = _hmac.new(bytes(hmac_key), bytes.fromhex(da.salt) + buf.tobytes(), "sha256")
                if not _hmac.compare_digest(m.hexdigest(), da.hmac):
                    raise at_lines(
                        IntegrityError(
                            describe(
                                S.FMT, da.where(), field="hmac", detail="does not authenticate"
                            )
                        ),
                        da.lineno,
                        last,
                    )
            salts[da.name], hmacs[da.name] = da.salt, da.hmac
        meta = d.meta if d.meta is not None else base.meta
        arrays = {n: new[n].view(S.DTYPES[info[n].dtype]).reshape(info[n].shape) for n in new}
        rpc = {n: _rpc(info[n]) for n in new}
        prev = base.root["merkle_this"]
        audit_text = _audit_text(base)
        if d.root is not None:
            items = prepare_arrays(arrays, meta["gen"], salts, rpc)
            _, all_hex, fx = array_digests(items, None, hmacs)
            this = S.merkle(prev, all_hex, meta["ts"], meta["gen"], meta["build"])
            got = {
                "sha256_all": all_hex,
                "merkle_prev": prev,
                "merkle_this": this,
                "fastxor": f"{fx:016x}",
            }
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
            audit=audit_text,
            _hmacs=hmacs,
        )


def _audit_text(base: WtxtFile) -> str | None:
    p = base.parsed
    if p.audit_lineno is None:
        return None
    cur = Cursor(p.data)
    cur.skip_lines(p.audit_lineno - 1)
    return cur.line()[0]


def inspect_delta(data: np.ndarray) -> list[dict]:
    """Rows for ``tenfold inspect`` on a delta file."""
    d = parse_delta(data)
    rows = [
        {
            "name": "(delta)",
            "dtype": "-",
            "shape": "-",
            "bytes": int(data.size),
            "encoding": "-",
            "layout": f"base {d.base_sha256_all[:16]}",
            "checksum": "-",
        }
    ]
    for a in d.arrays:
        rows.append(
            {
                "name": a.name,
                "dtype": "-",
                "shape": "-",
                "bytes": sum(c.length for c, _ in a.chunks),
                "encoding": "base64/76+parity",
                "layout": "chunks " + ",".join(f"{c.ix:06d}" for c, _ in a.chunks),
                "checksum": "sha256 " + a.sha256[:16],
            }
        )
    return rows


def verify_delta(data: np.ndarray, report: Report, *, keys_given: bool = False) -> Report:
    """Check a delta on its own (structure, parity, chunk CRC/SHA); the base is not needed.

    A delta's HMACs cover the new arrays, which only exist once it is applied to its base, and
    a delta is not signed: nothing in it can be authenticated on its own. When keys were given
    (authentication asked for) that is an error row; apply the delta with ``apply_delta``.
    """
    report.summary["authentication"] = (
        "none: a delta is authenticated only when applied "
        "to its base (apply_delta with hmac_key, then verify the result)"
    )
    if keys_given:
        report.add(
            "delta (line 1)",
            ERROR,
            "keys were given, but a delta cannot be "
            "authenticated on its own: apply it to its base and verify the result",
        )
    try:
        d = parse_delta(data)
    except TenfoldError as exc:
        report.add("delta", ERROR, str(exc))
        return report
    report.summary["base_sha256_all"] = d.base_sha256_all
    for a in d.arrays:
        for c, _ in a.chunks:
            report.add(
                f"delta array {a.name!r} chunk {c.ix:06d} (line {c.lineno})",
                OK,
                "parity, crc32c, sha256" if c.length else "crc32c, sha256 (empty chunk)",
            )
    return report
