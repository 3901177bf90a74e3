"""Does a row point at the member it claims? The check run before a payload is returned.

A row stores ``(fid, offset, size, extid, keyhash)``; the 512-byte tar header block at
``offset`` sits in the same page as the payload start, so reading it costs next to nothing. The
check (kernel ``tarscan.check_member``) wants there:

* a regular file (typeflag ``0``, NUL or ``7``), whose payload ``offset + 512 + size`` fits;
* the name and size the index builder would have read for it: split exactly as the builder
  splits (basename, first dot, extension lower-cased; a non-ASCII basename decoded with U+FFFD
  replacements first), ``xxh64(stem) == keyhash``, extension == the row's, size == the row's;
* a valid header (not a zero block, checksum right) whenever the ustar fields alone do not
  settle it. When they do (the usual case) a read touches bytes 0-191 of the block only and
  skips the checksum, which sums all 512: a block that is not this member's header but has a
  regular typeflag, the row's size and a name whose stem has the row's 64-bit hash and the
  row's extension does not occur by accident. The staleness checks verify the checksum too.

Which name? The ustar name and size fields are tried first: that is every plain ustar member and
every pax member whose extended header carries only times or ids (CPython's and webdataset's
float mtimes). When they do not match, the member's extended headers decide: the kernel follows
the headers whose data ends exactly where the next header starts back from the member (at most
8 of them, within 1 MiB before it) until one gives a local path (pax ``x`` ``path``, GNU ``L``
long name), and takes the nearest local path and pax ``size``, else the nearest global (``g``)
ones in that chain, else the ustar fields, as the scanner does. Not seen: a global pax header
that is not directly before the member (its ``path`` or ``size`` then fails the check; such
archives name every member alike and do not occur in practice), and extended headers larger
than 1 MiB. Reading a row of such a member needs ``verify_headers=False``.

Bad member names (:func:`bad_name`): the index joins extensions and crash stems with ``\\n``, so
a basename holding a newline cannot be indexed; the builder refuses it or skips the member.
"""

from __future__ import annotations

from typing import Any

import xxhash

from ... import _kernels
from ...errors import IntegrityError, TenfoldError, TruncatedError, describe
from ._spec import BLOCK, FMT

__all__ = ["member_problem", "check_member", "split_name", "bad_name", "name_at"]


def split_name(name: bytes) -> tuple[bytes, str]:
    """``(stem as UTF-8, extension)`` of a member name, exactly as the index builder splits it."""
    base = name.rsplit(b"/", 1)[-1]
    if base.isascii():
        stem, _, ext = base.partition(b".")
        return stem, ext.decode("ascii").lower()
    stem_t, _, ext_t = base.decode("utf-8", "replace").partition(".")
    # the builder decodes the stem from the whole basename and the extension bytes on their own;
    # a '.' byte is never part of a multi-byte sequence, so both give the same text
    return stem_t.encode("utf-8"), ext_t.lower()


def bad_name(name: bytes) -> str | None:
    """Why a member name cannot be indexed, or ``None``: a newline in its basename (the stem or
    extension could not be stored in the ``\\n``-joined blocks)."""
    base = name.rsplit(b"/", 1)[-1]
    if b"\n" in base:
        return "newline in the basename (extension and crash-stem blocks are joined by newlines)"
    return None


def name_at(buf: Any, offset: int, extended: bool = True) -> tuple[bytes, int] | None:
    """``(name, size)`` the scanner would give the member whose header is at ``offset``
    (``extended``: with its extended headers), or ``None`` when there is no header there."""
    code, n_off, n_len, size, _t = _kernels.load("tarscan").member_name(buf, offset, extended)
    if code:
        return None
    return bytes(memoryview(buf).cast("B")[n_off : n_off + n_len]), size


def _exact(buf: Any, offset: int, size: int, keyhash: int, ext: str) -> int:
    """The kernel's decision, for a member whose deciding name is not ASCII."""
    ts = _kernels.load("tarscan")
    for extended in (False, True):
        got = name_at(buf, offset, extended)
        assert got is not None  # the kernel found a header there
        name, got_size = got
        stem, e = split_name(name)
        same = e == ext and xxhash.xxh64_intdigest(stem) == keyhash
        if same and got_size == size:
            return int(ts.M_OK)
    return int(ts.M_NAME) if not same else int(ts.M_SIZE)


def _describe_got(buf: Any, offset: int) -> str:
    got = name_at(buf, offset)
    if got is None:
        return "no member header"
    name, size = got
    stem, ext = split_name(name)
    return (
        f"{name.decode('utf-8', 'replace')!r} (stem xxh64 {xxhash.xxh64_intdigest(stem):#x},"
        f" extension {ext!r}, size {size})"
    )


def member_problem(
    buf: Any,
    offset: int,
    size: int,
    keyhash: int,
    ext: str,
    *,
    shard: str = "",
    ext_b: bytes | None = None,
    base: int = 0,
    checksum: bool = False,
) -> TenfoldError | None:
    """The error (not raised) when the header at ``offset`` does not name the member the row
    ``(offset, size, keyhash, ext)`` claims, else ``None``. ``buf`` holds the shard's bytes from
    shard offset ``base`` on (the whole shard locally, a fetched range remotely); ``shard``
    names it in the message. ``checksum``: also verify the header checksum when the name and
    size fields match (reads skip it: see the module doc)."""
    ts = _kernels.load("tarscan")
    if ext_b is None:
        ext_b = ext.encode("utf-8")
    code = ts.check_member(buf, offset - base, size, keyhash, ext_b, checksum)
    if code == ts.M_NON_ASCII:
        code = _exact(buf, offset - base, size, keyhash, ext)
    if code == ts.M_OK:
        return None
    return _error(code, buf, offset, size, keyhash, ext, base, shard)


def _error(
    code: int, buf: Any, offset: int, size: int, keyhash: int, ext: str, base: int, shard: str
) -> TenfoldError:
    ts = _kernels.load("tarscan")
    what = f"shard {shard}: member header" if shard else "member header"
    have = base + memoryview(buf).nbytes
    if code == ts.M_PAST_END:  # worded as the reads' own past-the-end check
        return TruncatedError(
            describe(
                FMT,
                f"shard {shard}" if shard else "member",
                offset=offset,
                detail="member data ends past end of file",
                expected=f"end <= {have}",
                got=offset + BLOCK + size,
            )
        )
    if code == ts.M_NO_HEADER:
        return IntegrityError(
            describe(
                FMT,
                what,
                offset=offset,
                detail=(
                    "no member header there (zero block, bad checksum or size field); the row does "
                    "not point at a member"
                ),
            )
        )
    rel = offset - base
    if code == ts.M_NOT_REGULAR:
        t = memoryview(buf).cast("B")[rel + 156]
        return IntegrityError(
            describe(
                FMT,
                what,
                offset=offset,
                field="typeflag",
                detail="not a regular file",
                expected="'0', NUL or '7'",
                got=repr(chr(t)),
            )
        )
    got = _describe_got(buf, rel)
    want = f"stem xxh64 {keyhash:#x}, extension {ext!r}, size {size}"
    field = "member size" if code == ts.M_SIZE else "member name"
    return IntegrityError(describe(FMT, what, offset=offset, field=field, expected=want, got=got))


def check_member(
    buf: Any,
    offset: int,
    size: int,
    keyhash: int,
    ext: str,
    *,
    shard: str,
    ext_b: bytes | None = None,
    base: int = 0,
) -> None:
    """Raise (``IntegrityError``, ``TruncatedError``) naming ``shard`` when the header at
    ``offset`` does not name the member the row claims; see :func:`member_problem`."""
    err = member_problem(buf, offset, size, keyhash, ext, shard=shard, ext_b=ext_b, base=base)
    if err is not None:
        raise err
