"""Deterministic, atomic WTXT writer.

Arrays are written in bytewise name order, as little-endian C-order bytes cut into chunks
(32 KiB, or ``rows_per_chunk`` rows), each chunk base64-encoded on its own and framed by the
``b64lines`` kernel. The same arrays and options always give the same bytes. The file appears
under its name only once complete (``core.atomic_write``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import hashlib
import hmac as _hmac
import io
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ... import _kernels
from ...core import parallel
from ...core.atomic import atomic_write
from ...core.dtypes import registry
from ...core.release import release
from ...errors import EncodeError, factory
from . import _spec as S
from ._crypto import prev_hex, private_key, sign_line
from .codec import BatchWriter

__all__ = ["write", "save", "Prepared", "prepare_arrays", "private_key", "Digests"]


def _bad(what: str, detail: str, **kw: Any) -> EncodeError:
    return S.E.encode(what, detail=detail, **kw)


@dataclasses.dataclass
class Prepared:
    """One array ready to write: tag, shape, raw little-endian bytes, salt and chunking."""

    name: str
    tag: str
    shape: tuple[int, ...]
    raw: np.ndarray | None  # uint8, C-contiguous (None: fetched from ``lazy`` on each pass)
    salt: str
    rpc: int | None
    lazy: Any = None
    nbytes: int = 0

    @property
    def clen(self) -> int:
        return S.chunk_length(self.shape, S.DTYPES[self.tag].itemsize, self.rpc)

    @property
    def size(self) -> int:
        return self.raw.size if self.raw is not None else self.nbytes

    def data(self) -> np.ndarray:
        """The raw little-endian bytes; a deferred array is fetched (and checked) now, once
        per writing pass, so only one array is held at a time."""
        if self.raw is not None:
            return self.raw
        a = np.asarray(self.lazy)
        shape = tuple(int(d) for d in a.shape) or (1,)
        if shape != self.shape or S.DTYPES[self.tag].itemsize * a.size != self.nbytes:
            raise _bad(f"array {self.name!r}", "changed while it was written", got=a.shape)
        out: np.ndarray = np.ascontiguousarray(a, dtype=S.DTYPES[self.tag]).reshape(-1)
        return out.view(np.uint8)


def _token(name: str, value: Any) -> str:
    s = str(value)
    if not S.TOKEN_RE.fullmatch(s):
        raise _bad(f"meta '{name}'", "must be a token [A-Za-z0-9._:/+-]+", got=s)
    return s


def make_meta(schema: str, gen: int | str, ts: Any, build: str, host: str, cuda: str) -> dict:
    """Validated ``meta`` fields as text."""
    if isinstance(gen, str):
        if not (len(gen) == 6 and gen.isdigit()):
            raise _bad("meta 'gen'", "must be 6 digits", got=gen)
    elif isinstance(gen, (int, np.integer)) and not isinstance(gen, bool) and 0 <= gen <= 999999:
        gen = f"{int(gen):06d}"
    else:
        raise _bad("meta 'gen'", "must be an integer in [0, 999999]", got=repr(gen))
    if isinstance(ts, datetime.datetime):
        if ts.tzinfo is None or ts.utcoffset() != datetime.timedelta(0):
            raise _bad("meta 'ts'", "a datetime must be timezone-aware UTC")
        ts = ts.strftime("%Y-%m-%dT%H:%M:%SZ")
    if not isinstance(ts, str) or not S.TS_RE.fullmatch(ts):
        raise _bad("meta 'ts'", "must be UTC 'YYYY-MM-DDTHH:MM:SSZ'", got=repr(ts))
    try:
        datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise _bad("meta 'ts'", "not a valid date and time", got=ts) from None
    return {
        "schema": _token("schema", schema),
        "gen": gen,
        "ts": ts,
        "build": _token("build", build),
        "endian": "LE",
        "host": _token("host", host),
        "cuda": _token("cuda", cuda),
    }


def _salt_hex(salt: Any, name: str, gen: str) -> str:
    if isinstance(salt, Mapping):
        salt = salt.get(name)
    if salt is None:
        return S.derive_salt(gen, name).hex()
    if isinstance(salt, str):
        if len(salt) == 16 and all(c in "0123456789abcdef" for c in salt):
            return salt
        raise _bad(f"array {name!r}", "salt must be 16 lowercase hex digits or 8 bytes", got=salt)
    b = bytes(salt)
    if len(b) != 8:
        raise _bad(f"array {name!r}", "salt must be 8 bytes", got=len(b))
    return b.hex()


def prepare_arrays(
    arrays: Mapping[str, Any], gen: str, salt: Any = None, rows_per_chunk: Any = None
) -> list[Prepared]:
    """Validate names and dtypes and lay the arrays out in writing order."""
    out = []
    for name in sorted(arrays, key=lambda n: str(n).encode("utf-8", "surrogateescape")):
        if not isinstance(name, str) or not S.NAME_RE.fullmatch(name):
            raise _bad(f"array {name!r}", "name must match [A-Za-z0-9_]+")
        value = arrays[name]
        deferred = _deferred(value)
        a = np.empty(0, np.dtype(value.dtype)) if deferred else np.asarray(value)
        tag = str(registry.to_tag(S.FMT, a.dtype, what=f"array {name!r}"))
        shape = tuple(int(d) for d in (value.shape if deferred else a.shape)) or (1,)
        le = None if deferred else np.ascontiguousarray(a, dtype=S.DTYPES[tag]).reshape(-1)
        rpc = rows_per_chunk.get(name) if isinstance(rows_per_chunk, Mapping) else rows_per_chunk
        if rpc is not None and (
            isinstance(rpc, bool) or not isinstance(rpc, (int, np.integer)) or rpc < 1
        ):
            raise _bad(f"array {name!r}", "rows_per_chunk must be an integer >= 1", got=rpc)
        out.append(
            Prepared(
                name,
                tag,
                shape,
                None if le is None else le.view(np.uint8),
                _salt_hex(salt, name, gen),
                None if rpc is None else int(rpc),
                value if deferred else None,
                math.prod(shape) * S.DTYPES[tag].itemsize,
            )
        )
    return out


def _deferred(value: Any) -> bool:
    """An array-like that says its dtype and shape and is fetched only when written (e.g. a
    tensor ``convert`` reads from its source on demand)."""
    return (
        not isinstance(value, np.ndarray)
        and hasattr(value, "__array__")
        and hasattr(value, "dtype")
        and hasattr(value, "shape")
    )


def audit_line(audit: Mapping[str, Any]) -> str:
    """``audit k=v ...`` in the caller's key order; values quoted when not a token."""
    parts = []
    for k, v in audit.items():
        if not isinstance(k, str) or not S.AUDIT_KEY_RE.fullmatch(k):
            raise _bad(f"audit key {k!r}", "must match [a-z0-9_]+")
        s = repr(float(v)) if isinstance(v, float) else str(v)
        if not S.TOKEN_RE.fullmatch(s):
            if '"' in s or not all(0x20 <= ord(c) <= 0x7E for c in s):
                raise _bad(f"audit {k!r}", "value must be printable ASCII without '\"'", got=s)
            s = f'"{s}"'
        parts.append(f"{k}={s}")
    if not parts:
        raise _bad("audit", "needs at least one key=value pair")
    return "audit " + " ".join(parts)


class Digests:
    """The array-level digests, fed one array at a time in name order: the array's SHA-256
    and HMAC (its ``arr`` line), then that line and the array's bytes into ``sha256_all``, and
    ``fastxor``. The SHA-256 and HMAC of an array may be computed ahead on a pool
    (:meth:`ahead`); :meth:`add` must be called in order (``sha256_all`` is one stream)."""

    def __init__(self, hmac_key: bytes | None, hmacs: Mapping[str, str] | None) -> None:
        self.key, self.hmacs = hmac_key, hmacs
        self.scan = _kernels.load("scan")
        self.lines: list[str] = []
        self.all = hashlib.sha256()
        self.fx = 0

    def keyed(self, it: Prepared) -> bool:
        """Whether ``it``'s HMAC has to be computed (no key: zeros; or given in ``hmacs``)."""
        return self.key is not None and not (self.hmacs is not None and it.name in self.hmacs)

    def mac(self, it: Prepared, raw: np.ndarray) -> str:
        if self.hmacs is not None and it.name in self.hmacs:
            return self.hmacs[it.name]
        if self.key is None:
            return S.ZERO64
        m = _hmac.new(self.key, bytes.fromhex(it.salt), "sha256")
        m.update(S.mview(raw))
        return m.hexdigest()

    def ahead(self, pool: Any, it: Prepared, raw: np.ndarray, sha: bool) -> tuple[Any, Any]:
        """Futures of ``raw``'s SHA-256 (when ``sha``) and HMAC (when one is computed) on
        ``pool``, for :meth:`add`."""
        mac = pool.submit(self.mac, it, raw) if self.keyed(it) else None
        return (pool.submit(_sha256_hex, raw) if sha else None), mac

    def add(self, it: Prepared, raw: np.ndarray, sha: Any = None, mac: Any = None) -> str:
        """Fold array ``it`` (bytes ``raw``) in; ``sha``/``mac``: futures from :meth:`ahead`
        (None: computed here). Returns its ``arr`` line."""
        digest = sha.result() if sha is not None else _sha256_hex(raw)
        line = S.arr_line(
            it.name, it.tag, it.shape, raw.size, digest,
            mac.result() if mac is not None else self.mac(it, raw), it.salt,
        )  # fmt: skip
        self.lines.append(line)
        self.all.update(line.encode())
        self.all.update(S.mview(raw))
        self.fx = self.scan.xor_u64_le(raw, self.fx)
        return line


def _sha256_hex(raw: np.ndarray) -> str:
    return hashlib.sha256(S.mview(raw)).hexdigest()


def array_digests(
    items: list[Prepared],
    hmac_key: bytes | None,
    hmacs: Mapping[str, str] | None,
    workers: int | None = None,
) -> tuple[list[str], str, int]:
    """Array lines, ``sha256_all`` and ``fastxor`` (three SHA-256 passes when keyed).

    With ``workers`` > 1 (default :func:`~tenfold.core.parallel.threads`), the SHA-256 and
    HMAC of the next arrays already in memory run on a pool while ``sha256_all`` takes in
    the current one; an array fetched on demand (``Prepared.lazy``) is fetched only when its
    turn comes, so one is held at a time."""
    n = parallel.threads() if workers is None else max(1, workers)
    d = Digests(hmac_key, hmacs)
    with parallel.pool_for(n, "wtxt-hash") as pool:
        futs: dict[int, tuple[Any, Any]] = {}
        for i, it in enumerate(items):
            for j in range(i + 1, min(len(items), i + n)):
                if j not in futs and items[j].raw is not None and n > 1:
                    futs[j] = d.ahead(pool, items[j], items[j].data(), True)
            raw = it.data()
            d.add(it, raw, *futs.pop(i, (None, None)))
            release(raw)  # a view of a mapped source: give its pages back (read again later)
            del raw
    return d.lines, d.all.hexdigest(), d.fx


def cap_items(items: list[Prepared], keyed: bool, sign_all: bool, pending: bool) -> list[str]:
    have = {"crc32c", "line_parity"}
    if keyed:
        have.add("arr_hmac")
    if any(it.rpc is not None for it in items):
        have.add("row_blocking")
    if sign_all:
        have.add("sign_all")
    if pending:
        have.add("wsum")
    return [c for c in S.CAP_ORDER if c in have]


def _header(meta: dict, cap: list[str], root: str, sign: str | None) -> bytes:
    text = "WTXT 1\n" + S.meta_line(meta) + "\n" + "cap ext=" + ",".join(cap) + "\n" + root + "\n"
    if sign is not None:
        text += sign + "\n"
    return text.encode("ascii")


_PLACEHOLDER_SIGN = "sign ed25519=" + "A" * 86 + "== keyid=" + "0" * 16


def _write_body(
    f: Any,
    items: list[Prepared],
    tail: bytes,
    d: Digests,
    workers: int,
) -> None:
    """Write every array block and ``tail`` to ``f`` from its current position, each array
    fetched once: its digests (:class:`Digests`) on a worker while its chunks are encoded on
    the others and written here, its ``arr`` line first written with zero digests of the same
    length and put right at the end (``f`` is seekable)."""
    base = f.tell()
    pos = 0
    offsets = []
    with parallel.pool_for(workers, "wtxt-w") as pool:
        out = BatchWriter(pool, workers + 1)
        for it in items:
            offsets.append(pos)
            line0 = S.arr_line(it.name, it.tag, it.shape, it.size, S.ZERO64, S.ZERO64, it.salt)
            head = line0 + "\n"
            if it.rpc is not None:
                rs = S.row_size(it.shape, S.DTYPES[it.tag].itemsize)
                head += f"idx rows_per_chunk={it.rpc} row_size={rs} row_blocking=on\n"
            raw = it.data()
            fut = pool.submit(d.add, it, raw, *d.ahead(pool, it, raw, False))
            try:
                pos += out.write(f, S.mview(raw), it.clen, head.encode(), b"endarr\n")
            finally:
                concurrent.futures.wait([fut])  # nothing may read ``raw`` once it is released
            fut.result()
            release(raw)  # a view of a mapped source: give its pages back
            del raw
    f.write(tail)
    for off, line in zip(offsets, d.lines, strict=True):
        f.seek(base + off)
        f.write(line.encode())
    f.seek(0, os.SEEK_END)


def write(
    path: str | os.PathLike[str],
    arrays: Mapping[str, Any],
    *,
    schema: str,
    gen: int | str,
    ts: Any,
    build: str,
    host: str = "cpu",
    cuda: str = "off",
    rows_per_chunk: int | Mapping[str, int | None] | None = None,
    hmac_key: bytes | None = None,
    salt: Any = None,
    signing_key: Any = None,
    sign_all: bool = False,
    merkle_prev: Any = None,
    audit: Mapping[str, Any] | str | None = None,
    root_pending: bool = False,
    workers: int | None = None,
    fsync: bool = True,
    cap_extra: Sequence[str] = (),
    _hmacs: Mapping[str, str] | None = None,
    _check: Any = None,
) -> None:
    """Write ``arrays`` to ``path`` as WTXT 1, deterministically and atomically.

    Parameters
    ----------
    path
        Destination; replaced only once the new file is complete.
    arrays
        Name -> array; names ``[A-Za-z0-9_]+``; dtypes f64 f32 i64 u64 i32 u32 i16 u16 i8 u8
        (stored little-endian). A 0-d array is stored with ``shape=1``.
    schema, gen, ts, build, host, cuda
        The ``meta`` line. ``gen`` is an int (written as 6 digits); ``ts`` is
        ``"YYYY-MM-DDTHH:MM:SSZ"`` or an aware UTC datetime: the caller supplies it.
    rows_per_chunk
        Row blocking: chunks of ``rows_per_chunk`` rows (an int for every array or a mapping
        per name). ``None``: 32 KiB chunks.
    hmac_key
        Key of the per-array HMAC-SHA256 over ``salt || raw``; ``None`` writes zeros.
    salt
        8 bytes / 16 hex digits (or a mapping per name); default derived from gen and name.
    signing_key
        Ed25519 private key (or 32-byte seed): adds the ``sign`` line; ``sign_all`` makes it
        cover every byte but the sign line itself.
    merkle_prev
        The previous generation's ``merkle_this`` (hex or 32 bytes); default 64 zeros.
    audit
        ``key=value`` pairs for the (unauthenticated) ``audit`` line (or the exact line).
    root_pending
        Write ``root_pending`` instead of ``root``; finalize later with ``finalize_wsum``.
    workers
        Threads: default :func:`tenfold.core.parallel.threads` (the CPUs this process may
        use). Each array is fetched once; its digests run on one thread while its chunks are
        encoded on the others and written in order. 1 does it all on the calling thread;
        the bytes are the same.
    fsync
        Flush the file to disk before renaming it into place (default).
    cap_extra
        Further ``cap ext=`` items, written after the spec's own (e.g. ``tenfold_names``).
    """
    meta = make_meta(schema, gen, ts, build, host, cuda)
    items = prepare_arrays(arrays, meta["gen"], salt, rows_per_chunk)
    if hmac_key is not None:
        hmac_key = bytes(hmac_key)
    key = _signing_key(signing_key, sign_all, root_pending)
    keyed = hmac_key is not None or bool(_hmacs and any(v != S.ZERO64 for v in _hmacs.values()))
    cap = cap_items(items, keyed, sign_all, root_pending) + [c for c in cap_extra]
    head = _Head(meta, cap, prev_hex(merkle_prev), root_pending, key)
    tail = _tail(audit)
    n = parallel.threads() if workers is None else max(1, int(workers))
    with atomic_write(path, fsync=fsync) as f:
        d = Digests(hmac_key, _hmacs)
        _write_file(f, head, items, tail, d, n, sign_all, _check)


def _signing_key(signing_key: Any, sign_all: bool, root_pending: bool) -> Any:
    """The Ed25519 private key (or None), refused where the options cannot use it."""
    key = private_key(signing_key) if signing_key is not None else None
    if sign_all and key is None:
        raise _bad("sign_all", "needs a signing_key")
    if root_pending and key is not None:
        raise _bad("signing_key", "a root_pending file is signed through its WSUM sidecar")
    return key


def _tail(audit: Mapping[str, Any] | str | None) -> bytes:
    """The optional ``audit`` line (pairs, or an exact line that is checked) and ``endwtxt``."""
    if isinstance(audit, str):
        from ._text import audit_fields

        try:
            audit_fields(audit, 0, 0)
        except Exception:
            raise _bad("audit", "not a valid audit line", got=audit[:60]) from None
        aline: str | None = audit
    else:
        aline = audit_line(audit) if audit is not None else None
    return ((aline + "\n" if aline is not None else "") + "endwtxt\n").encode()


@dataclasses.dataclass
class _Head:
    """What the header lines are made of, once the arrays' digests are known."""

    meta: dict
    cap: list[str]
    prev: str
    pending: bool
    key: Any

    def root(self, all_hex: str, fx: int) -> str:
        if self.pending:
            return S.PENDING_LINE
        m = self.meta
        this = S.merkle(self.prev, all_hex, m["ts"], m["gen"], m["build"])
        return S.root_line(all_hex, self.prev, this, fx)

    def lines(self, all_hex: str, fx: int, sign: str | None = None) -> bytes:
        return _header(self.meta, self.cap, self.root(all_hex, fx), sign)

    def final(self, all_hex: str, fx: int) -> bytes:
        """The header, signed over itself when there is a key."""
        head = self.lines(all_hex, fx)
        if self.key is None:
            return head
        return self.lines(all_hex, fx, sign_line(self.key, head))


def _write_file(
    f: Any,
    head: _Head,
    items: list[Prepared],
    tail: bytes,
    d: Digests,
    workers: int,
    sign_all: bool,
    check: Any = None,
) -> None:
    """The whole file: the header, first with zero digests (and a placeholder signature) of
    the same length, written again once the body is; with ``sign_all`` the body is assembled
    in memory first, as the signature in the header covers it. ``check(sha256_all, fastxor)``
    may refuse the result before the header is final (the file then never appears)."""
    if sign_all:
        sink = io.BytesIO()
        _write_body(sink, items, tail, d, workers)
        if check is not None:
            check(d.all.hexdigest(), d.fx)
        body = sink.getbuffer()
        all_hex = d.all.hexdigest()
        sign = sign_line(head.key, head.lines(all_hex, d.fx) + bytes(body))
        f.write(head.lines(all_hex, d.fx, sign))
        f.write(body)
        return
    head0 = head.lines(S.ZERO64, 0, _PLACEHOLDER_SIGN if head.key else None)
    f.write(head0)
    _write_body(f, items, tail, d, workers)
    if check is not None:
        check(d.all.hexdigest(), d.fx)
    final = head.final(d.all.hexdigest(), d.fx)
    assert len(final) == len(head0)
    f.seek(0)
    f.write(final)
    f.seek(0, os.SEEK_END)


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """``write`` with neutral defaults for the generic ``tenfold.save`` (gen 0, epoch ts).

    Names outside ``[A-Za-z0-9_]+`` and 0-d arrays are stored under encoded names (see
    :mod:`tenfold.wtxt.names`; :func:`tenfold.wtxt.load` decodes them), so any state dict of
    WTXT's dtypes round-trips.
    """
    from ...capabilities import check_tensors
    from . import names as _names

    kw.setdefault("schema", "tenfold/v1")
    kw.setdefault("gen", 0)
    kw.setdefault("ts", "1970-01-01T00:00:00Z")
    kw.setdefault("build", "tenfold")
    if not isinstance(tensors, Mapping):
        raise _bad("save", "tensors must be a mapping", got=type(tensors).__name__)
    check_tensors(S.FMT, tensors)
    stored: dict[str, Any] = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise factory(S.FMT).name_not_str("array", name)
        scalar = getattr(value, "ndim", None) == 0 or np.ndim(value) == 0
        stored[_names.encode(name, scalar)] = value
    if any(k != n for k, n in zip(stored, tensors, strict=True)):
        kw["cap_extra"] = [*kw.get("cap_extra", ()), _names.CAP_ITEM]
    write(path, stored, **kw)
