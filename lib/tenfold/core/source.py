"""Where a reader's bytes come from: a memory map, ``pread`` into owned memory, or fsspec.

Every reader holds a :class:`~tenfold.core.mapped.MappedFile` and asks it for ranges
(``u8``, ``bytes``, ``array``, ``records``, ``pread_into``, ``buffer``). :func:`open_file`
chooses the byte source behind that interface:

==============================  ===========================================================
source                          what a range is
==============================  ===========================================================
local path (default)            a read-only view of the file's memory map (zero copy)
local path, ``mmap=False``      ``pread`` into memory the reader owns (no map is kept: the
                                case of unified-memory machines, where a map of a file shared
                                with the accelerator costs more than a copy)
buffer (bytes, array ...)       a view of the buffer
fsspec URL or open fsspec file  a range request (``s3://``, ``https://``, ``gs://``,
                                ``memory://``, ``simplecache::s3://...``)
==============================  ===========================================================

The copying sources (:class:`SourceFile`) keep what they fetched for the index or header
(pinned blocks) and the last few ranges, so a reader that checks a tensor's checksum and then
returns it fetches it once. A remote object is opened with one metadata request (size and
ETag) and one speculative block: the last :data:`TAIL_BLOCK` bytes when the index sits at
the end of the file (``tail_first``, for a format whose descriptor says so, as zTensor's
does), else the first :data:`HEAD_BLOCK` bytes (safetensors, OINF, FOLD ...), or the whole
object when it is at most twice that. A later range that a block
covers only partly is completed with one request for the missing part.

Consistency (``docs/readers.md``, "Remote reads: consistency model"): the object's size and
validators (ETag, Last-Modified, S3 VersionId; elsewhere a modification stamp) are recorded at
open. Every HTTP or S3 range response is then checked on its own before its body is read
(:mod:`tenfold.core._http`): the exact range and total size in ``Content-Range``, the
validators it carries, a strong ETag sent as ``If-Match`` (a weak one never is). Bodies are
streamed into place and never read past the bytes asked for. Other filesystems re-check the
stamp after each fetch. An object that changed between the index fetch and a tensor fetch
raises :class:`~tenfold.errors.IntegrityError`, never mixes versions; an object with no
validator at all opens with an :class:`~tenfold.errors.UnverifiedRemoteWarning`. Network
and server errors raise :class:`OSError` naming the URL (:class:`TimeoutError` after
:data:`CONNECT_TIMEOUT` or :data:`READ_TIMEOUT` seconds without progress).

Caching: wrap a URL in fsspec's caching layers to keep fetched bytes on local disk, e.g.
``simplecache::s3://bucket/model.zt`` (whole object downloaded once, then read locally) or
``blockcache::s3://bucket/model.zt`` (only the blocks read are downloaded and kept).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import (
    IntegrityError,
    TenfoldError,
    UnverifiedRemoteWarning,
    describe,
)
from . import _http
from ._http import RemoteNotFoundError, RemoteOSError, RemotePermissionError, RemoteTimeoutError
from .mapped import MappedFile
from .sourcefile import COALESCE_GAP, HEAD_BLOCK, TAIL_BLOCK, Pread, SourceFile
from .sourcefile import COALESCE_MAX as COALESCE_MAX

__all__ = [
    "SourceFile",
    "open_file",
    "is_remote",
    "HEAD_BLOCK",
    "TAIL_BLOCK",
    "COALESCE_GAP",
    "CONNECT_TIMEOUT",
    "READ_TIMEOUT",
    "fetch_prefix",
    "cat_ranges",
    "filesystem",
]

#: Seconds an HTTP connection may take to open, and a response may go without a byte, before
#: the read fails with :class:`TimeoutError` naming the URL (when the caller's storage options
#: set no ``timeout`` of their own; s3fs has its own, 5 s and 15 s, set by ``config_kwargs``).
CONNECT_TIMEOUT = 30.0
READ_TIMEOUT = 60.0
_GATHER = 64  # range requests in flight at once in cat_ranges

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*(::|://)")


def is_remote(source: Any) -> bool:
    """True for an fsspec URL (``proto://...`` or a ``cache::proto://...`` chain) or an open
    fsspec file object."""
    if isinstance(source, str):
        return bool(_URL.match(source))
    return _is_fsspec_file(source)


@contextlib.contextmanager
def _protocol_package(url: str, fmt: str) -> Iterator[None]:
    """fsspec's own ImportError for a protocol whose package is missing (``aiohttp`` for
    http(s), ``s3fs`` for s3) as a :class:`MissingDependencyError` naming the extra."""
    from .optional import MissingDependencyError

    try:
        yield
    except ImportError as exc:
        if isinstance(exc, MissingDependencyError):
            raise
        extra = "s3" if url.split("::")[-1].startswith(("s3://", "s3a://")) else "remote"
        raise MissingDependencyError(
            f'{fmt}: reading {url}: {exc}: pip install "tenfold[{extra}]"',
            module=exc.name or "",
            extra=extra,
            fmt=fmt,
            obj=url,
        ) from None


def filesystem(
    url: str, *, fmt: str, storage_options: dict[str, Any] | None = None
) -> tuple[Any, str]:
    """``(fsspec filesystem, path)`` of ``url``; a missing fsspec, or the package its
    protocol needs, is a :class:`~tenfold.core.optional.MissingDependencyError` naming the
    extra that installs it (``tenfold[remote]``, ``tenfold[s3]``)."""
    from .optional import require

    fsspec = require("fsspec", extra="remote", what=f"{fmt}: {url}")
    with _protocol_package(url, fmt):
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, path


def _is_fsspec_file(source: Any) -> bool:
    return (
        not isinstance(source, (bytes, bytearray, memoryview, np.ndarray, os.PathLike))
        and hasattr(source, "fs")
        and hasattr(source, "path")
        and hasattr(source, "read")
    )


def open_file(
    source: Any,
    *,
    fmt: str = "tenfold",
    mmap: bool = True,
    storage_options: dict[str, Any] | None = None,
    tail_first: bool = False,
) -> MappedFile:
    """The :class:`MappedFile` (or :class:`SourceFile`) for ``source``.

    ``source`` may be a path, a buffer, an fsspec URL or open fsspec file, or a
    :class:`MappedFile` already opened (returned as it is, renamed to ``fmt``). ``mmap=False``
    reads a local file with ``pread`` into owned memory instead of mapping it; a buffer is
    used in place either way. ``tail_first`` says which end of a remote object to fetch
    speculatively: its tail for a format whose index sits at the end of the file (as its
    descriptor declares, :attr:`tenfold.registry.Format.index_at_end`), else its head.
    """
    if isinstance(source, MappedFile):
        source.fmt = fmt
        return source
    if is_remote(source):
        return SourceFile(_Remote(source, fmt, storage_options), fmt=fmt, tail_first=tail_first)
    if not mmap and isinstance(source, (str, os.PathLike)):
        return SourceFile(Pread(source, fmt), fmt=fmt)
    return MappedFile(source, fmt=fmt)


_STAMPS = (
    "ETag",
    "etag",
    "generation",
    "md5Hash",
    "LastModified",
    "Last-Modified",
    "mtime",
    "created",  # memory://: a new upload is a new object
)


class _Remote:
    """An object behind fsspec, read in ranges (see the module doc for the consistency rule)."""

    remote = True

    def __init__(self, source: Any, fmt: str, storage_options: dict[str, Any] | None) -> None:
        from .optional import require

        fsspec = require("fsspec", extra="remote", what=f"{fmt}: reading a URL")
        self.fmt = fmt
        self.stats = {"requests": 0, "bytes": 0}
        self._pid = os.getpid()
        self.storage_options = storage_options
        if isinstance(source, str):
            self.name = source
            with self._errors("open"), _protocol_package(source, fmt):
                self.fs, self.path = fsspec.core.url_to_fs(source, **(storage_options or {}))
            details = None
        else:  # an open fsspec file: its details were fetched when it was opened
            self.fs, self.path = source.fs, source.path
            self.name = _unstrip(self.fs, self.path)
            details = getattr(source, "details", None)
        if not details or details.get("size") is None or _stamp(details) is None:
            with self._errors("metadata"):
                details = _info(self.fs, self.path)
            self.stats["requests"] += 1
        if details.get("type") == "directory":  # a prefix: a format of directories may own it
            raise IsADirectoryError(
                errno.EISDIR, f"{fmt}: {self.name}: a directory (object prefix), not a file"
            )
        self.mode = _mode(self.fs)
        self._timeout = _http_timeout(self.fs) if self.mode == "http" else {}
        if details.get("size") is None and self.mode == "http":
            # no Content-Length (a chunked answer): the size from a one-byte range request
            from fsspec.asyn import sync

            probe = _http.Expect(fmt, self.name, -1, None, None)
            with self._errors("metadata"):
                got = sync(self.fs.loop, _http.http_probe, self.fs, self.path, probe, self._timeout)
            self.stats["requests"] += 1
            details = {**details, **{k: v for k, v in got.items() if not details.get(k)}}
        if details.get("size") is None:
            raise RemoteOSError(
                errno.EIO, f"{fmt}: {self.name}: metadata: the object's size is unknown"
            )
        self.size = int(details["size"])
        self.etag = details.get("ETag") or details.get("etag")
        self.stamp = _stamp(details)
        self.version = details.get("VersionId")
        last_modified = details.get("Last-Modified") or details.get("LastModified")
        self.expect = _http.Expect(
            fmt,
            self.name,
            self.size,
            self.etag,
            last_modified if isinstance(last_modified, str) else None,
        )
        if self.stamp is None if self.mode == "recheck" else not self.expect.validated:
            warnings.warn(
                f"{fmt}: {self.name}: the server gives no ETag or Last-Modified: a change of "
                "the object while it is read cannot be detected beyond its size (see "
                "docs/readers.md, remote consistency model)",
                UnverifiedRemoteWarning,
                stacklevel=4,
            )

    def close(self) -> None:
        pass  # fsspec filesystems are shared, cached instances: nothing of ours to release

    def identity(self) -> dict[str, Any]:
        """The object's size and validators (what a pickled reader checks when it opens the
        URL again, :mod:`tenfold.core.reopen`)."""
        return {"size": self.size, "etag": self.etag, "stamp": self.stamp}

    def reopen_spec(self) -> tuple[Any, ...]:
        """``("remote", url, storage_options)``: the options it was opened with, else (an open
        fsspec file was given) its filesystem's."""
        so = self.storage_options
        if so is None:
            so = dict(getattr(self.fs, "storage_options", None) or {})
        return ("remote", self.name, so)

    def _errors(self, what: str) -> Any:
        return _RemoteErrors(self, what)

    def fetch(self, offset: int, length: int) -> np.ndarray:
        return self.fetch_many([(offset, length)])[0]

    def fetch_into(self, offset: int, dst: np.ndarray) -> None:
        if self.mode == "recheck" or not dst.flags.c_contiguous:
            dst[:] = self.fetch(offset, dst.nbytes)
        else:  # streamed straight into the caller's array
            self.fetch_many([(offset, dst.nbytes)], [dst.reshape(-1).view(np.uint8)])

    def fetch_many(
        self, ranges: Sequence[tuple[int, int]], outs: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        if not ranges:
            return []
        if os.getpid() != self._pid:
            # a forked worker: fsspec's async filesystems are not fork-safe, so make this
            # process its own instance (same options; fsspec's instance cache is per process)
            with self._errors("reconnect after fork"):
                self.fs = type(self.fs)(**self.fs.storage_options)
            self._pid = os.getpid()
        what = f"bytes {ranges[0][0]}-{ranges[-1][0] + ranges[-1][1]}"
        if self.mode != "recheck":
            out = list(outs) if outs is not None else [np.empty(n, np.uint8) for _o, n in ranges]
            with self._errors(what):
                self._gather(ranges, out)
            self.stats["requests"] += len(ranges)
            self.stats["bytes"] += sum(n for _o, n in ranges)
            return out
        with self._errors(what):
            blobs = [self.fs.cat_file(self.path, start=o, end=o + n) for o, n in ranges]
        self.stats["requests"] += len(ranges)
        got: list[np.ndarray] = []
        for (o, n), blob in zip(ranges, blobs, strict=True):
            if len(blob) != n:
                raise RemoteOSError(
                    errno.EIO,
                    f"{self.fmt}: {self.name}: range {o}-{o + n} returned {len(blob)} bytes, "
                    f"expected {n} (does the server honour Range requests?)",
                )
            self.stats["bytes"] += n
            got.append(np.frombuffer(blob, np.uint8))
        with self._errors("metadata"):
            now = self.fs.info(self.path)
        self.stats["requests"] += 1
        if int(now["size"]) != self.size or _stamp(now) != self.stamp:
            raise self._changed((self.size, self.stamp), (int(now["size"]), _stamp(now)))
        return got

    def _changed(self, expected: Any, got: Any) -> IntegrityError:
        return IntegrityError(
            describe(
                self.fmt,
                f"object {self.name}",
                field="ETag/size",
                detail="changed on the server since it was opened",
                expected=expected,
                got=got,
            )
        )

    def _gather(self, ranges: Sequence[tuple[int, int]], outs: Sequence[np.ndarray]) -> None:
        """Every range fetched concurrently into its array, each response checked on its own
        (:mod:`tenfold.core._http`)."""
        from fsspec.asyn import sync

        if self.mode == "s3":
            bucket, key, vers = self.fs.split_path(self.path)
            version = vers or self.version

            def one(o: int, out: np.ndarray) -> Any:
                return _http.s3_range(self.fs, bucket, key, version, o, out, self.expect)

        else:

            def one(o: int, out: np.ndarray) -> Any:
                return _http.http_range(self.fs, self.path, o, out, self.expect, self._timeout)

        async def gather() -> list[Any]:
            import asyncio

            pairs = zip(ranges, outs, strict=True)
            return await asyncio.gather(
                *(one(o, out) for (o, _n), out in pairs), return_exceptions=True
            )

        # every request ends (none is left writing into an array after we return); a changed
        # object is reported before other failures
        errors = [e for e in sync(self.fs.loop, gather) if isinstance(e, BaseException)]
        if errors:
            raise next((e for e in errors if isinstance(e, TenfoldError)), errors[0])


def fetch_prefix(fs: Any, path: str, limit: int) -> bytes:
    """At most the first ``limit`` bytes of ``path`` on fsspec filesystem ``fs``, with one
    request whose body is read no further than ``limit`` bytes, whether or not the server
    honours ``Range`` (an HTTP server answering 200 with the whole object is cut off there),
    within the remote timeouts (:data:`CONNECT_TIMEOUT`, :data:`READ_TIMEOUT`). Callers use
    ``limit = cap + 1`` to tell an object longer than ``cap`` from one that fits. Failures
    are raised as fsspec or aiohttp give them (the caller names the URL)."""
    if _mode(fs) == "http":
        from fsspec.asyn import sync

        return sync(fs.loop, _http.http_prefix, fs, path, limit, _http_timeout(fs))  # type: ignore[no-any-return]
    return bytes(fs.cat_file(path, start=0, end=limit))


def cat_ranges(
    fs: Any,
    paths: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    *,
    fmt: str,
    known: Mapping[str, tuple[int, str | None]] | None = None,
) -> list[Any]:
    """``fs.cat_ranges(paths, starts, ends, on_error="return")`` with, on HTTP and S3, every
    response checked as a remote reader's are (:mod:`tenfold.core._http`) against
    ``known[path] = (size, etag)`` where given (size -1: not known), bodies streamed and cut
    at the bytes asked for, within the remote timeouts. Each result is a bytes-like object
    or the exception that range raised (a changed object: :class:`IntegrityError`)."""
    mode = _mode(fs)
    if mode == "recheck":
        return list(fs.cat_ranges(list(paths), list(starts), list(ends), on_error="return"))
    import asyncio

    from fsspec.asyn import sync

    timeout = _http_timeout(fs)
    seen = known or {}

    async def one(gate: asyncio.Semaphore, path: str, start: int, end: int) -> Any:
        out = np.empty(max(0, end - start), np.uint8)
        size, etag = seen.get(path, (-1, None))
        expect = _http.Expect(fmt, path, size, etag, None)
        try:
            async with gate:
                if out.size and mode == "http":
                    await _http.http_range(fs, path, start, out, expect, timeout)
                elif out.size:
                    bucket, key, vers = fs.split_path(path)
                    await _http.s3_range(fs, bucket, key, vers, start, out, expect)
        except Exception as exc:  # noqa: BLE001 - returned, as fsspec's on_error="return"
            return exc
        return out.data

    async def gather() -> list[Any]:
        gate = asyncio.Semaphore(_GATHER)
        return list(
            await asyncio.gather(
                *(one(gate, p, a, b) for p, a, b in zip(paths, starts, ends, strict=True))
            )
        )

    return sync(fs.loop, gather)  # type: ignore[no-any-return]


def _mode(fs: Any) -> str:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "s3" in protocols or "s3a" in protocols:
        return "s3"
    if "http" in protocols or "https" in protocols:
        return "http"
    return "recheck"


def _info(fs: Any, path: str) -> dict[str, Any]:
    """``fs.info(path)``, within tenfold's timeouts on HTTP (``fs.info`` itself cannot take
    aiohttp's ``timeout``: fsspec's ``sync`` takes that name)."""
    timeout = _http_timeout(fs)
    if not timeout:
        return fs.info(path)  # type: ignore[no-any-return]
    from fsspec.asyn import sync

    async def info() -> dict[str, Any]:
        return await fs._info(path, **timeout)  # type: ignore[no-any-return]

    return sync(fs.loop, info)  # type: ignore[no-any-return]


def _http_timeout(fs: Any) -> dict[str, Any]:
    """tenfold's default timeouts as an aiohttp request option, for an HTTP filesystem whose
    caller set none (``timeout`` in its storage options or in ``client_kwargs``)."""
    if _mode(fs) != "http":
        return {}
    if "timeout" in getattr(fs, "kwargs", {}) or "timeout" in getattr(fs, "client_kwargs", {}):
        return {}
    import aiohttp

    return {
        "timeout": aiohttp.ClientTimeout(
            total=None,
            connect=CONNECT_TIMEOUT,
            sock_connect=CONNECT_TIMEOUT,
            sock_read=READ_TIMEOUT,
        )
    }


def _stamp(details: dict[str, Any]) -> Any:
    for k in _STAMPS:
        if details.get(k) is not None:
            return str(details[k])
    return None


def _unstrip(fs: Any, path: str) -> str:
    try:
        return str(fs.unstrip_protocol(path))
    except Exception:  # noqa: BLE001 - only a name for messages
        return str(path)


def _precondition_failed(exc: BaseException) -> bool:
    for e in (exc, exc.__cause__, exc.__context__):
        if e is None:
            continue
        if getattr(e, "status", None) == 412:
            return True
        resp = getattr(e, "response", None)
        if isinstance(resp, dict):
            err = resp.get("Error", {})
            if err.get("Code") in ("PreconditionFailed", "412"):
                return True
    return False


class _RemoteErrors:
    """Turn fsspec/aiohttp/botocore failures into a :class:`~tenfold.core._http.RemoteOSError`
    naming the URL (tenfold errors, a changed object's IntegrityError and our own
    RemoteOSErrors pass through)."""

    def __init__(self, remote: _Remote, what: str) -> None:
        self.r = remote
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, tp: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, (TenfoldError, KeyboardInterrupt, SystemExit)):
            return
        if isinstance(exc, ImportError):
            return
        r = self.r
        if _precondition_failed(exc):
            raise r._changed(r.etag, "a different ETag (HTTP 412)") from exc
        if isinstance(exc, RemoteOSError):
            return  # ours (tenfold.core._http, or an inner block's), already naming the URL
        msg = f"{r.fmt}: {r.name}: {self.what}: {type(exc).__name__}: {exc}"
        cause = exc.__cause__
        for e in (exc, cause):
            if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
                raise RemoteTimeoutError(
                    errno.ETIMEDOUT,
                    f"{r.fmt}: {r.name}: {self.what}: timed out ({type(e).__name__}: {e}); "
                    "tenfold.core.source.CONNECT_TIMEOUT/READ_TIMEOUT or a 'timeout' in "
                    "storage_options set the limits",
                ) from exc
        if isinstance(exc, FileNotFoundError) and cause is not None:
            # fsspec's HTTP filesystem reports any failed HEAD as "not found": say what it was
            if not isinstance(cause, FileNotFoundError) and getattr(cause, "status", 0) != 404:
                raise RemoteOSError(
                    errno.EIO, f"{r.fmt}: {r.name}: {self.what}: {type(cause).__name__}: {cause}"
                ) from exc
        if isinstance(exc, FileNotFoundError):
            raise RemoteNotFoundError(errno.ENOENT, msg, r.name) from exc
        if isinstance(exc, PermissionError):
            raise RemotePermissionError(errno.EACCES, msg, r.name) from exc
        raise RemoteOSError(getattr(exc, "errno", None) or errno.EIO, msg) from exc
