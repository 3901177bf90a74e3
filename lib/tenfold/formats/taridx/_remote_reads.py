"""Remote reads of a :class:`~tenfold.formats.taridx.dataset.Dataset` (any fsspec root): the
listing and the index fetched together, rows fetched by planned ranges in one ``cat_ranges``
call (the link model sizing them), shards read mostly whole kept in memory, and every remote
shard checked when first used (size, ETag, and its headers when changed after the index).
"""

from __future__ import annotations

import collections
import errno
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ... import _kernels
from ...core.optional import require
from ...core.source import cat_ranges
from ...errors import IntegrityError, TenfoldError, TruncatedError, describe
from ._members import member_problem
from ._remote import RANGE_CAP, LinkModel, info_etag, info_mtime_ns, missing_shard, plan_ranges
from ._spec import BLOCK, FMT, E


def is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


async def get_index(fs: Any, path: str) -> tuple[bytes, Mapping[str, Any] | None]:
    """A remote index's bytes, and on S3 its metadata from the same GET (else ``None``); a
    missing index is a ``FileNotFoundError`` naming its URL."""
    try:
        return await _get_index_once(fs, path)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            errno.ENOENT, f"{FMT}: index missing ({exc})", fs.unstrip_protocol(path)
        ) from exc


async def _get_index_once(fs: Any, path: str) -> tuple[bytes, Mapping[str, Any] | None]:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if ("s3" in protocols or "s3a" in protocols) and hasattr(fs, "_call_s3"):
        bucket, key, version = fs.split_path(path)
        kw: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if version:
            kw["VersionId"] = version
        resp = await fs._call_s3("get_object", **kw)
        try:
            blob = bytes(await resp["Body"].read())
        finally:
            resp["Body"].close()
        info = {k: resp[k] for k in ("LastModified", "ETag") if resp.get(k) is not None}
        return blob, {"size": len(blob), **info}
    return bytes(await fs._cat_file(path)), None


class RemoteReads:
    """The remote half of :class:`~tenfold.formats.taridx.dataset.Dataset` (a base class of it;
    the attributes below are the dataset's, set by its ``__init__`` and ``_reset``)."""

    root: str
    remote: bool
    shards: list[str]
    index_bytes: bytes | None
    index_path: str
    storage_options: dict[str, Any]
    max_gap: int | None
    max_range: int | None
    max_batch_bytes: int
    calibrate: bool
    cache_bytes: int
    link: LinkModel
    listing: dict[str, dict[str, Any]]
    etags: dict[str, str]
    _fs: Any
    _cols: np.ndarray | None
    _kh: np.ndarray
    _ext_names: list[str]
    _ext_b: list[bytes]
    _check: Any
    _mvs: list[memoryview | None]
    _seen: dict[int, tuple[int, int | None, str | None]]
    _shard_end: np.ndarray | None
    _remote_index_mtime: int | None
    _listed_here: bool
    _cache: collections.OrderedDict[int, memoryview]
    _cache_nbytes: int
    _index_got: tuple[bytes, Mapping[str, Any] | None] | None
    _join: Callable[[str], str]
    _list_shards: Callable[..., list[str]]
    _local_rows: Callable[..., list[Any]]
    _past_end: Callable[[int, int, int, int], TruncatedError]

    def _filesystem(self) -> Any:
        if self._fs is None:
            fsspec = require("fsspec", extra="remote", what="taridx: a remote root")
            self._fs = fsspec.core.url_to_fs(self.root, **self.storage_options)[0]
        return self._fs

    def filesystem(self) -> Any:
        """The fsspec filesystem of the remote root (one client per dataset and process)."""
        return self._filesystem()

    def _index_fs(self) -> tuple[Any, str]:
        """The filesystem and path of a remote index: the root's own client when the index
        URL has the root's protocol (one client per dataset and process, even with
        ``skip_instance_cache``), else one made for it."""
        fsspec = require("fsspec", extra="remote", what="taridx: a remote index")
        proto = fsspec.core.split_protocol
        if "::" not in self.index_path and proto(self.index_path)[0] == proto(self.root)[0]:
            fs = self._filesystem()
            return fs, fs._strip_protocol(self.index_path)
        fs, path = fsspec.core.url_to_fs(self.index_path, **self.storage_options)
        return fs, path

    def _remote_start(self) -> list[str]:
        """A remote root without ``shards=``: list the root and fetch the index, both in one
        round trip when the filesystem is asynchronous (s3fs, HTTP); the index's metadata
        comes with it (S3: the GET's own headers) or from the listing."""
        fs = self._filesystem()
        if (
            self.index_bytes is not None
            or not is_url(self.index_path)
            or not getattr(fs, "async_impl", False)
        ):
            return self._list_shards()
        ifs, ipath = self._index_fs()
        if ifs is not fs:
            return self._list_shards()
        import asyncio

        from fsspec.asyn import sync

        async def both() -> list[Any]:
            return list(
                await asyncio.gather(
                    fs._ls(fs._strip_protocol(self.root), detail=True),
                    get_index(fs, ipath),
                    return_exceptions=True,
                )
            )

        listed, got = sync(fs.loop, both)
        for r in (listed, got):  # the listing's failure first, as when run one after another
            if isinstance(r, BaseException):
                raise r
        names = self._list_shards(listed)
        blob, info = got
        if info is None:  # the index's entry in the listing, when it is in the listed folder
            info = next(
                (
                    p
                    for p in listed
                    if isinstance(p, Mapping) and str(p.get("name", "")).rstrip("/") == ipath
                ),
                None,
            )
        self._index_got = (blob, info)
        return names

    def _plan(self, cols: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> Any:
        """Requests for rows ``[lo, hi)`` of shards ``cols[:, 2]`` (see ``_remote``)."""
        link = self.link
        gap = link.max_gap if self.max_gap is None else self.max_gap
        rng = max(gap, link.max_range) if self.max_range is None else self.max_range
        return plan_ranges(
            cols[:, 2], lo, hi, max_gap=gap, max_range=rng, budget=self.max_batch_bytes
        )

    def _remote_rows(
        self, rowids: np.ndarray, cols: np.ndarray, idx: np.ndarray, owner: np.ndarray
    ) -> list[Any]:
        """Rows of remote shards: fetched by planned ranges (one ``cat_ranges``), or, for
        shards held in memory (``cache_bytes``), read as local shards are."""
        views: list[Any] = [None] * rowids.size
        if not rowids.size:
            return views
        fids = cols[:, 2]
        urls = {f: self._join(self.shards[f]) for f in np.unique(fids).tolist()}
        for fid, url in urls.items():
            self._remote_open(fid, url)
        held = np.isin(fids, np.fromiter(self._cache, np.int64, len(self._cache)))
        # rows of shards in memory first (a fetch below may drop one of them from the cache),
        # then the others; rows of a shard the fetch kept whole are read from memory too
        self._held_rows(np.flatnonzero(held), rowids, cols, idx, owner, views)
        far = np.flatnonzero(~held)
        if far.size:
            self._fetch_rows(rowids[far], cols[far], urls, far, views)
            self._held_rows(
                far[[views[k] is None for k in far.tolist()]], rowids, cols, idx, owner, views
            )
        return views

    def _held_rows(
        self,
        sel: np.ndarray,
        rowids: np.ndarray,
        cols: np.ndarray,
        idx: np.ndarray,
        owner: np.ndarray,
        views: list[Any],
    ) -> None:
        if sel.size:
            got = self._local_rows(rowids[sel], cols[sel], idx, owner[sel])
            for k, v in zip(sel.tolist(), got, strict=True):
                views[k] = v

    def _fetch_rows(
        self,
        rowids: np.ndarray,
        cols: np.ndarray,
        urls: Mapping[int, str],
        where: np.ndarray,
        views: list[Any],
    ) -> None:
        """Plan and fetch rows ``rowids`` (their views go to ``views[where[k]]``); a shard the
        plan reads at least half of is fetched whole and kept instead (its rows left out)."""
        check = self._check is not None
        lo = cols[:, 0] - (BLOCK if check else 0)  # from the header (checked with its payload)
        hi = cols[:, 0] + cols[:, 1]
        run, r_fid, r_lo, r_hi = self._plan(cols, lo, hi)
        whole = self._to_cache(r_fid, r_lo, r_hi)
        keep = ~np.isin(r_fid, whole)
        paths = [urls[f] for f in r_fid[keep].tolist()]
        starts, ends = r_lo[keep].tolist(), r_hi[keep].tolist()
        # a shard read whole is one request (by the link model, a request that large already
        # moves data at full bandwidth: more requests only add their latency), within the
        # cap on one response, or within ``max_range`` when that was given
        chunk = max(1, RANGE_CAP if self.max_range is None else self.max_range)
        spans = []
        for fid in whole.tolist():  # a shard read whole: in chunks, concurrently
            size = self._seen[fid][0]
            spans.append((fid, len(paths), len(range(0, size, chunk))))
            for a in range(0, size, chunk):
                paths.append(urls[fid])
                starts.append(a)
                ends.append(min(size, a + chunk))
        blobs = self._fetch(paths, starts, ends)
        for fid, k0, n_chunks in spans:
            part = blobs[k0 : k0 + n_chunks]
            self._cache_put(fid, part[0] if n_chunks == 1 else b"".join(part))
        # a request mostly of holes: its payloads are copied out, so the batch does not keep
        # the whole range alive (memory stays about the rows' own bytes)
        used = np.bincount(run, weights=hi - lo, minlength=r_lo.size)
        copy = (used * 2 < (r_hi - r_lo)).tolist()
        req = (np.cumsum(keep) - 1).tolist()  # request of each kept run
        keepl, exts = keep.tolist(), self._ext_b
        datas = [memoryview(b) for b in blobs]
        for k, r in enumerate(run.tolist()):
            if not keepl[r]:
                continue  # its shard is now in memory
            q = req[r]
            data, start0 = datas[q], starts[q]
            start, size, fid, extid = cols[k].tolist()
            a = start - start0
            if a + size > len(data):
                raise self._past_end(fid, start - BLOCK, size, start0 + len(data))
            keyhash = int(self._kh[rowids[k]])
            if check and self._check(data, a - BLOCK, size, keyhash, exts[extid]):
                self._verify_remote(
                    paths[q], data, start0, fid, start - BLOCK, size, keyhash, extid
                )
            v = data[a : a + size]
            views[int(where[k])] = memoryview(v.tobytes()) if copy[r] else v

    def _fetch(self, paths: list[str], starts: list[int], ends: list[int]) -> list[Any]:
        """One ``cat_ranges`` call; its time feeds the link model."""
        if not paths:
            return []
        t0 = time.perf_counter()
        known = {self._join(self.shards[f]): (s[0], s[2]) for f, s in self._seen.items()}
        blobs = cat_ranges(self._filesystem(), paths, starts, ends, fmt=FMT, known=known)
        seconds = time.perf_counter() - t0
        for k, blob in enumerate(blobs):
            if isinstance(blob, TenfoldError):
                raise blob  # each response checked (core.source.cat_ranges): a changed shard
            if isinstance(blob, BaseException):
                raise missing_shard(
                    paths[k], blob, f"reading bytes {starts[k]}-{ends[k]}"
                ) from blob
        if self.calibrate:
            self.link.observe(len(paths), sum(ends) - sum(starts), seconds)
        return list(blobs)

    def _to_cache(self, r_fid: np.ndarray, r_lo: np.ndarray, r_hi: np.ndarray) -> np.ndarray:
        """Shards to read whole and keep: the plan reads at least half of each anyway, and it
        fits in ``cache_bytes`` (so the rest of the epoch reads it from memory)."""
        if not self.cache_bytes or not r_fid.size:
            return np.zeros(0, np.int64)
        fids, inv = np.unique(r_fid, return_inverse=True)
        planned = np.bincount(inv, weights=r_hi - r_lo)
        out, total = [], 0
        for fid, b in zip(fids.tolist(), planned.tolist(), strict=True):
            size = self._seen[fid][0]
            # the shards of one batch fit together: none evicts another before it is read
            if 0 < size and total + size <= self.cache_bytes and 2 * b >= size:
                out.append(fid)
                total += size
        return np.array(out, np.int64)

    def _cache_put(self, fid: int, blob: bytes) -> None:
        while self._cache and self._cache_nbytes + len(blob) > self.cache_bytes:
            old_fid, old = self._cache.popitem(last=False)
            self._cache_nbytes -= len(old)
            self._mvs[old_fid] = None
        self._cache[fid] = self._mvs[fid] = memoryview(blob)
        self._cache_nbytes += len(blob)

    def _remote_open(self, fid: int, url: str) -> None:
        """Before the first bytes of remote shard ``fid`` are returned in this process: it
        exists, holds every indexed member, and (when modified after the index) still has
        the indexed members where the index says."""
        if fid in self._seen:
            return
        fs = self._filesystem()
        name = self.shards[fid]
        info = self.listing.get(name) if self._listed_here else None
        if info is None or info.get("size") is None:
            try:
                if name in self.etags:  # a later open: the object as it is now, not cached
                    fs.invalidate_cache(url)
                info = fs.info(url)
            except Exception as exc:  # noqa: BLE001 - every failure is reported naming the URL
                raise missing_shard(url, exc, "looking it up") from exc
        self._check_etag(name, url, info_etag(info))
        size = info.get("size")
        if self._shard_end is None:
            assert self._cols is not None
            end = np.zeros(len(self.shards), np.int64)
            if self._cols.shape[0]:
                np.maximum.at(end, self._cols[:, 2], self._cols[:, 0] + self._cols[:, 1])
            self._shard_end = end
        need = int(self._shard_end[fid])
        if size is not None and int(size) < need:
            raise TruncatedError(
                describe(
                    FMT,
                    f"shard {url}",
                    detail="shorter than the index says; rebuild the index (tenfold index build)",
                    expected=f">= {need} bytes",
                    got=int(size),
                )
            )
        mtime, etag = info_mtime_ns(info), info_etag(info)
        if (
            mtime is not None
            and self._remote_index_mtime is not None
            and mtime > self._remote_index_mtime
        ):
            self._remote_stale(fid, url)
        self._seen[fid] = (-1 if size is None else int(size), mtime, etag)

    def _check_etag(self, name: str, url: str, etag: str | None) -> None:
        """The first ETag seen of shard ``name`` is kept (and pickled to workers); a later
        open that sees another one is an ``IntegrityError``: the object was replaced."""
        if etag is None:
            return
        first = self.etags.setdefault(name, etag)
        if first != etag:
            raise IntegrityError(
                describe(
                    FMT,
                    f"shard {url}",
                    field="ETag",
                    detail="the object changed since this dataset first used it; "
                    "open a new Dataset (and rebuild the index if its members moved)",
                    expected=first,
                    got=etag,
                )
            )

    def _remote_stale(self, fid: int, url: str, sample: int = 8) -> None:
        """Shard ``fid`` changed after the index: check up to ``sample`` headers of its rows
        (first, last, evenly spaced), with one ``cat_ranges`` call."""
        assert self._cols is not None
        rows = np.flatnonzero(self._cols[:, 2] == fid)
        if not rows.size:
            return
        pick = rows[np.unique(np.linspace(0, rows.size - 1, min(sample, rows.size)).astype(int))]
        fs = self._filesystem()
        starts = (self._cols[pick, 0] - BLOCK).tolist()
        ends = (self._cols[pick, 0] + self._cols[pick, 1]).tolist()
        blobs = cat_ranges(fs, [url] * len(starts), starts, ends, fmt=FMT)
        for row, lo, blob in zip(pick.tolist(), starts, blobs, strict=True):
            if isinstance(blob, TenfoldError):
                raise blob
            if isinstance(blob, BaseException):
                raise missing_shard(url, blob, f"reading bytes {lo}-") from blob
            _, size, _, extid = self._cols[row].tolist()
            try:  # the header, then what extended headers before it say
                self._verify_remote(
                    url, memoryview(blob), lo, fid, lo, size, int(self._kh[row]), extid
                )
            except (IntegrityError, TruncatedError) as exc:
                raise E.recast(
                    type(exc),
                    exc,
                    f"shard {url}",
                    message=f"{exc}; the shard changed after the index was written: "
                    "rebuild the index (tenfold index build)",
                ) from None

    def _verify_remote(
        self,
        url: str,
        data: memoryview,
        lo: int,
        fid: int,
        offset: int,
        size: int,
        keyhash: int,
        extid: int,
    ) -> None:
        """The fetched range starts at the first header: a member named by extended headers
        before it needs those too. Fetch a window before the header (16 KiB, then the
        kernel's whole look-back) and check again."""
        err = member_problem(
            data,
            offset,
            size,
            keyhash,
            self._ext_names[extid],
            shard=self.shards[fid],
            ext_b=self._ext_b[extid],
            base=lo,
        )
        if err is None:
            return
        fs = self._filesystem()
        for back in (16 << 10, int(_kernels.load("tarscan").LOOKBACK)):
            start = max(0, offset - back)
            if start >= lo:
                break
            win = memoryview(fs.cat_file(url, start=start, end=offset + BLOCK + size))
            err = member_problem(
                win,
                offset,
                size,
                keyhash,
                self._ext_names[extid],
                shard=self.shards[fid],
                ext_b=self._ext_b[extid],
                base=start,
            )
            if err is None or start == 0:
                break
        if err is not None:
            raise err
