"""Checked range reads over HTTP(S) and S3 for :mod:`tenfold.core.source`.

fsspec's ``cat_file`` reads a response's whole body before anyone can look at it and checks
nothing but the status. Here every response to a range request is checked on its own, before
its body is read (the rules are in ``docs/readers.md``, "Remote reads: consistency model"):

* status ``206`` with a ``Content-Range`` of exactly the bytes asked for and the size seen at
  open, or ``200`` (a server that ignores ``Range``) only for a range that starts at 0, of
  which only the bytes asked for are read before the connection is dropped;
* the ``ETag`` and ``Last-Modified`` it carries equal the ones seen at open (ETags compared
  without their weak ``W/`` mark); a strong ETag is also sent as ``If-Match``, else a
  ``Last-Modified`` as ``If-Unmodified-Since`` (a weak ETag is never sent: RFC 9110 makes
  ``If-Match`` with one fail every time);
* no ``Content-Encoding`` other than ``identity`` (``Accept-Encoding: identity`` is sent:
  offsets refer to the object's own bytes).

Bodies are streamed into the caller's array and reading stops at the bytes asked for.
"""

from __future__ import annotations

import errno
import re
from email.utils import parsedate_to_datetime
from typing import Any

import numpy as np

from ..errors import IntegrityError, describe

_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
_CHUNK = 1 << 20


class RemoteOSError(OSError):
    """An :class:`OSError` of a remote read that already names the object and what was being
    read (``fmt: url: what: detail``): :mod:`tenfold.core.source` passes it on as it is. The
    subclasses below are also the builtin class a caller catches."""


class RemoteNotFoundError(RemoteOSError, FileNotFoundError):
    """A remote object that is not there (a :class:`FileNotFoundError`)."""


class RemotePermissionError(RemoteOSError, PermissionError):
    """A remote object the server refuses to give (a :class:`PermissionError`)."""


class RemoteTimeoutError(RemoteOSError, TimeoutError):
    """A remote read that made no progress within the timeouts (a :class:`TimeoutError`)."""


def opaque(etag: str) -> str:
    """An ETag without its weak mark (RFC 9110 weak comparison)."""
    return etag[2:] if etag[:2] in ("W/", "w/") else etag


def _same_date(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return parsedate_to_datetime(a) == parsedate_to_datetime(b)
    except (TypeError, ValueError):
        return False


class Expect:
    """What every response must agree with: the object as seen at open (``size`` -1 and
    validators None where they are not known)."""

    def __init__(
        self,
        fmt: str,
        name: str,
        size: int,
        etag: str | None,
        last_modified: str | None,
    ) -> None:
        self.fmt, self.name, self.size = fmt, name, size
        self.etag = etag or None
        self.last_modified = last_modified or None
        self.strong = self.etag is not None and opaque(self.etag) == self.etag

    @property
    def validated(self) -> bool:
        """Whether anything tells one version of the object from another."""
        return self.etag is not None or self.last_modified is not None

    def preconditions(self) -> dict[str, str]:
        if self.strong:
            assert self.etag is not None
            return {"If-Match": self.etag}
        if self.last_modified is not None:
            return {"If-Unmodified-Since": self.last_modified}
        return {}

    def changed(self, field: str, expected: Any, got: Any) -> IntegrityError:
        msg = describe(
            self.fmt,
            f"object {self.name}",
            detail=f"changed on the server since it was opened ({field})",
            expected=expected,
            got=got,
        )
        return IntegrityError(msg, field=field)

    def broken(self, what: str, detail: str) -> RemoteOSError:
        return RemoteOSError(errno.EIO, f"{self.fmt}: {self.name}: {what}: {detail}")

    def validators(self, etag: str | None, last_modified: str | None) -> None:
        """Each validator a response carries equals the one seen at open."""
        if self.etag is not None and etag and opaque(etag) != opaque(self.etag):
            raise self.changed("ETag", self.etag, etag)
        if self.last_modified is not None and last_modified:
            if not _same_date(last_modified, self.last_modified):
                raise self.changed("Last-Modified", self.last_modified, last_modified)

    def status(self, status: int, content_range: str | None, offset: int, length: int) -> None:
        """A response to ``Range: bytes=offset-(offset+length-1)`` answers exactly that."""
        what = f"bytes {offset}-{offset + length}"
        if status == 200:
            if offset != 0:
                raise self.broken(
                    what,
                    "the server ignored the Range header (HTTP 200 with the whole object); "
                    "tenfold reads ranges and does not download a whole object to skip into "
                    "it: serve it from a server that honours Range, or copy it locally",
                )
            return
        if status != 206:
            raise self.broken(what, f"unexpected HTTP {status} to a range request")
        m = _CONTENT_RANGE.match(content_range or "")
        if m is None:
            raise self.broken(what, f"HTTP 206 without a valid Content-Range ({content_range!r})")
        if m.group(3) != "*" and self.size >= 0 and int(m.group(3)) != self.size:
            raise self.changed("size (Content-Range)", self.size, int(m.group(3)))
        first, last = int(m.group(1)), int(m.group(2))
        if (first, last) != (offset, offset + length - 1):
            raise self.broken(
                what,
                f"Content-Range mismatch; expected 'bytes {offset}-{offset + length - 1}/"
                f"{self.size}', got {content_range!r}",
            )


def _error_status(expect: Expect, r: Any, what: str) -> None:
    """The exception for a status >= 300, if it is one."""
    s = r.status
    if s < 300:
        return
    if s == 412:
        field = "ETag" if expect.strong else "Last-Modified"
        v = expect.etag if expect.strong else expect.last_modified
        raise expect.changed(field, v, "a different version (HTTP 412)")
    if s == 416:
        m = re.match(r"^\s*bytes\s+\*/(\d+)\s*$", r.headers.get("Content-Range", ""))
        if m is not None and expect.size >= 0 and int(m.group(1)) != expect.size:
            raise expect.changed("size (Content-Range)", expect.size, int(m.group(1)))
    if s in (404, 410):
        raise RemoteNotFoundError(
            errno.ENOENT, f"{expect.fmt}: {expect.name}: {what}: not found (HTTP {s})", expect.name
        )
    if s in (401, 403):
        raise RemotePermissionError(
            errno.EACCES, f"{expect.fmt}: {expect.name}: {what}: HTTP {s} {r.reason}", expect.name
        )
    raise expect.broken(what, f"HTTP {s} {r.reason}")


def _identity(expect: Expect, headers: Any, what: str) -> None:
    enc = headers.get("Content-Encoding", "identity").strip().lower()
    if enc not in ("", "identity"):
        raise expect.broken(
            what, f"the server sent a range with Content-Encoding {enc!r} (identity was asked)"
        )


async def _stream_into(content: Any, out: memoryview, expect: Expect, what: str) -> None:
    """Fill ``out`` from an aiohttp stream (or an S3 body: the same ``read(n)``), reading no
    further."""
    n, got = len(out), 0
    while got < n:
        chunk = await content.read(min(n - got, _CHUNK))
        if not chunk:
            raise expect.broken(what, f"the response ended after {got} of {n} bytes")
        out[got : got + len(chunk)] = chunk
        got += len(chunk)


def _headers(fs: Any, extra: dict[str, str]) -> dict[str, Any]:
    """The request options fsspec would use, with our headers added to the caller's."""
    kw = dict(fs.kwargs)
    kw["headers"] = {**kw.get("headers", {}), "Accept-Encoding": "identity", **extra}
    return kw


async def http_range(
    fs: Any, url: str, offset: int, out: np.ndarray, expect: Expect, timeout: dict[str, Any]
) -> None:
    """Fill the uint8 array ``out`` with bytes ``[offset, offset + out.size)`` of ``url``,
    each check of the module doc applied to the response."""
    n = out.size
    what = f"bytes {offset}-{offset + n}"
    kw = _headers(fs, {"Range": f"bytes={offset}-{offset + n - 1}", **expect.preconditions()})
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), **kw, **timeout) as r:
        _error_status(expect, r, what)
        expect.validators(r.headers.get("ETag"), r.headers.get("Last-Modified"))
        expect.status(r.status, r.headers.get("Content-Range"), offset, n)
        _identity(expect, r.headers, what)
        whole = r.status == 200
        if whole and r.content_length not in (None, expect.size) and expect.size >= 0:
            raise expect.changed("size (Content-Length)", expect.size, r.content_length)
        if not whole and r.content_length is not None and r.content_length != n:
            raise expect.broken(
                what, f"Content-Length mismatch; expected {n}, got {r.content_length}"
            )
        await _stream_into(r.content, memoryview(out), expect, what)  # type: ignore[arg-type]
        if whole and not r.content.at_eof():
            r.close()  # the rest of the object is not wanted: drop the connection
        elif not whole and await r.content.read(1):
            raise expect.broken(what, "the response is longer than its Content-Range")


async def http_probe(fs: Any, url: str, expect: Expect, timeout: dict[str, Any]) -> dict[str, Any]:
    """Size and validators of an object whose ``HEAD`` gave no size, from a one-byte range
    request's ``Content-Range`` (its body is not read)."""
    kw = _headers(fs, {"Range": "bytes=0-0"})
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), **kw, **timeout) as r:
        _error_status(expect, r, "size")
        m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
        if r.status == 206 and m is not None and m.group(3) != "*":
            size = int(m.group(3))
        elif r.status == 200 and r.content_length is not None:
            _identity(expect, r.headers, "size")
            size = r.content_length
        else:
            raise expect.broken(
                "size",
                "unknown: the server sends neither Content-Length nor a Content-Range with the "
                f"size (HTTP {r.status}, Content-Range {r.headers.get('Content-Range')!r})",
            )
        r.close()
        return {
            "size": size,
            "ETag": r.headers.get("ETag"),
            "Last-Modified": r.headers.get("Last-Modified"),
        }


async def http_prefix(fs: Any, url: str, limit: int, timeout: dict[str, Any]) -> bytes:
    """At most the first ``limit`` bytes of ``url``: a range request whose body is streamed
    and dropped past ``limit`` whether or not the server honours ``Range``."""
    expect = Expect("http", url, -1, None, None)
    kw = _headers(fs, {"Range": f"bytes=0-{limit - 1}"})
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), **kw, **timeout) as r:
        _error_status(expect, r, f"bytes 0-{limit}")
        if r.status == 206:
            m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
            if m is None or int(m.group(1)) != 0:
                raise expect.broken(
                    f"bytes 0-{limit}",
                    f"Content-Range mismatch; expected 'bytes 0-...', "
                    f"got {r.headers.get('Content-Range')!r}",
                )
        elif r.status != 200:
            raise expect.broken(f"bytes 0-{limit}", f"unexpected HTTP {r.status}")
        _identity(expect, r.headers, f"bytes 0-{limit}")
        parts, got = [], 0
        while got < limit:
            chunk = await r.content.read(min(limit - got, _CHUNK))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got >= limit and not r.content.at_eof():
            r.close()  # more than asked: drop the connection instead of reading the rest
        return b"".join(parts)


async def s3_range(
    fs: Any,
    bucket: str,
    key: str,
    version: str | None,
    offset: int,
    out: np.ndarray,
    expect: Expect,
) -> None:
    """The S3 twin of :func:`http_range` (``GetObject`` with ``Range``, ``IfMatch`` and, on a
    versioned object, ``VersionId``); the response's ETag and ContentRange are checked."""
    n = out.size
    what = f"bytes {offset}-{offset + n}"
    kw: dict[str, Any] = {"Bucket": bucket, "Key": key, "Range": f"bytes={offset}-{offset + n - 1}"}
    if expect.etag:
        kw["IfMatch"] = expect.etag
    if version:
        kw["VersionId"] = version
    resp = await fs._call_s3("get_object", **kw)
    body = resp["Body"]
    try:
        expect.validators(resp.get("ETag"), None)
        cr = resp.get("ContentRange")
        expect.status(206 if cr else 200, cr, offset, n)
        await _stream_into(body, memoryview(out), expect, what)  # type: ignore[arg-type]
    finally:
        body.close()
