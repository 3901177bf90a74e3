"""Random access to the samples of a split: :class:`Dataset` and :class:`EpochSampler`.

``Dataset(root, split)`` opens ``<root>/<split>.taridx`` and serves ``ds[i]`` (sample ``i`` in
order of its first row) and ``ds.get(stem)`` as ``{extension: buffer}``. Local shards are
memory-mapped lazily, at most ``max_open`` at once per process (least recently used closed
first), and each buffer is a read-only ``memoryview`` of the map (zero copy; it keeps the map
alive). Remote roots (any fsspec URL: ``http://``, ``s3://``, ``memory://`` ...) are read with
range requests: ``ds[i]`` fetches one range per shard of the sample, and ``ds.__getitems__(batch)``
(what PyTorch's ``DataLoader`` calls for a batch) one ``cat_ranges`` call for the whole batch,
neighbouring rows merged into one range.

A dataset pickles as its parameters only: nothing is open in the parent after pickling, and
each worker process opens the index and the shards it needs on first access. That makes it a
PyTorch map-style dataset for ``DataLoader(num_workers > 0)``; :class:`EpochSampler` gives the
deterministic shuffled order per epoch and the rank's share for distributed training.
"""

from __future__ import annotations

import collections
import errno
import operator
import os
import re
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ... import _kernels
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.mapped import MappedFile
from ...core.optional import require
from ...core.source import cat_ranges
from ...errors import IntegrityError, TenfoldError, TruncatedError, describe
from ._members import member_problem
from ._remote import RANGE_CAP, LinkModel, info_etag, info_mtime_ns, missing_shard, plan_ranges
from ._spec import BLOCK, FMT
from ._split import required_split
from .build import shard_paths, stale_shard
from .reader import Index
from .sampler import EpochSampler, epoch_order, index_fingerprint

__all__ = ["Dataset", "EpochSampler", "epoch_order"]


_LIVE: weakref.WeakSet[Dataset] = weakref.WeakSet()


def _after_fork() -> None:  # a forked child never shares maps or clients with its parent
    for ds in list(_LIVE):
        ds._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _is_url(root: str) -> bool:
    return "://" in root and not root.startswith("file://")


async def _get_index(fs: Any, path: str) -> tuple[bytes, Mapping[str, Any] | None]:
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


class Dataset:
    """The samples of split ``split`` under ``root``.

    Parameters
    ----------
    root
        Directory (or fsspec URL) holding the shards ``<split>_<id>.tar``.
    split
        Split name (``fold=`` is its old name, deprecated).
    extensions
        Only these extensions are returned (default: all of the sample's).
    decoders
        ``{extension: callable(buffer) -> value}`` applied to those extensions.
    index
        Index path or URL (default ``<root>/<split>.taridx``), or the index file's bytes
        (then shards are checked by their headers only: there is no index time to compare
        their modification times with).
    shards
        Shard file names in fid order (default: listed from ``root``).
    max_open
        Most shards kept open per process.
    storage_options
        Passed to fsspec for remote roots.
    verify_headers
        Before returning a payload, check that the tar header block in front of it names the
        member the row claims (name, extension, size; see :mod:`tenfold.taridx._members`): a
        shard swapped, replaced or edited since indexing, or a corrupt row, is an
        ``IntegrityError`` naming the shard and offset instead of another sample's bytes.
        ``False`` skips it (and trusts the index and the shards).
    max_gap, max_range, max_batch_bytes
        Remote reads: how a batch's rows become requests (see :mod:`tenfold.taridx._remote`).
        Rows of one shard are fetched as one range across holes of at most ``max_gap`` bytes,
        ranges grow to at most ``max_range`` bytes, and a batch reads at most
        ``max_batch_bytes`` (or its rows' own bytes, if more). ``None`` (the default) takes
        ``max_gap`` and ``max_range`` from the link's cost model: the hole a request's latency
        would transfer (``per_request * bandwidth``) and 9 times that (capped at 64 MiB).
    per_request, bandwidth, calibrate
        The cost model's starting point: seconds before a request's first byte, and bytes/s
        after it (defaults for object stores: 10 ms, 100 MB/s). With ``calibrate`` (default)
        the model is refitted to the time each ``cat_ranges`` call of this dataset took, per
        process; ``ds.link`` shows it.
    cache_bytes
        Remote shards kept whole in memory, per process, at most this many bytes (least
        recently fetched dropped first; 0: none). A shard is fetched whole (one request up to
        64 MiB, or ``max_range`` chunks when given, within the batch's one ``cat_ranges``
        call) when the batch's plan would read at least half of it anyway; later batches then
        read it from memory.
    limits
        :class:`tenfold.core.bounds.Limits` for opening the index.

    A local shard whose mtime or ctime is newer than the index file is re-checked against the
    index when it is opened (sampled headers with their names, its size, members after the last
    indexed one; see :func:`stale_shards`), once per process: a changed shard is an
    ``IntegrityError`` before any of its bytes are returned. A remote shard is looked up once
    per process before its first bytes are returned: it must exist (else ``FileNotFoundError``
    naming its URL) and be long enough for every indexed member (else ``TruncatedError``);
    when the filesystem gives it a modification time later than the index's, sampled headers
    are checked as for a local shard (one ``cat_ranges``). The ETag of each shard first seen
    (when the root is listed, else at its first lookup) is kept in ``ds.etags`` and travels
    with the dataset to worker processes; every later open of the shard (a worker, a fork,
    a reopen after ``close()``) looks it up again and refuses another ETag (``IntegrityError``
    naming the URL and both ETags). Within one open the header checks catch a replaced shard.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        split: str | None = None,
        extensions: Sequence[str] | None = None,
        decoders: Mapping[str, Callable[[Any], Any]] | None = None,
        *,
        fold: str | None = None,
        index: str | os.PathLike[str] | bytes | None = None,
        shards: Sequence[str] | None = None,
        max_open: int = 32,
        storage_options: Mapping[str, Any] | None = None,
        verify_headers: bool = True,
        max_gap: int | None = None,
        max_range: int | None = None,
        max_batch_bytes: int = 64 << 20,
        per_request: float = 0.010,
        bandwidth: float = 100e6,
        calibrate: bool = True,
        cache_bytes: int = 256 << 20,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.root = os.fspath(root).rstrip("/") if _is_url(os.fspath(root)) else os.fspath(root)
        split = self.split = required_split(split, fold, "Dataset")
        self.extensions = None if extensions is None else [e.lower() for e in extensions]
        self.decoders = dict(decoders or {})
        self.remote = _is_url(self.root)
        #: the index file's bytes, when given as bytes (then ``index_path`` is ``"<buffer>"``)
        self.index_bytes = (
            bytes(index) if isinstance(index, (bytes, bytearray, memoryview)) else None
        )
        self.index_path: str = self._join(f"{split}.taridx")
        if self.index_bytes is not None:
            self.index_path = "<buffer>"
        elif isinstance(index, (str, os.PathLike)):
            self.index_path = os.fspath(index)
        self.max_open = max(1, int(max_open))
        self.storage_options = dict(storage_options or {})
        self.verify_headers = bool(verify_headers)
        self.max_gap = None if max_gap is None else max(0, int(max_gap))
        self.max_range = None if max_range is None else max(1, int(max_range))
        self.max_batch_bytes = max(0, int(max_batch_bytes))
        self.per_request, self.bandwidth = float(per_request), float(bandwidth)
        self.calibrate = bool(calibrate)
        self.cache_bytes = max(0, int(cache_bytes))
        #: remote: the link's cost model (this process's calls, when ``calibrate``)
        self.link = LinkModel(self.per_request, self.bandwidth)
        self.limits = limits
        #: remote: what listing the root said of each shard (size, mtime, ETag), if listed
        self.listing: dict[str, dict[str, Any]] = {}
        #: remote: shard name -> the ETag first seen (listing or first lookup)
        self.etags: dict[str, str] = {}
        self._reset()
        if shards is not None:
            self.shards = list(shards)
        elif self.remote:
            self.shards = self._remote_start()
        else:
            self.shards = self._list_shards()
        idx = self._index()
        self._len = idx.n_stems
        if idx.n_rows and int(idx.rows["fid"].max()) >= len(self.shards):
            raise TruncatedError(
                describe(
                    FMT,
                    f"split {split!r} under {self.root}",
                    detail="shards missing",
                    expected=f"> {int(idx.rows['fid'].max())} shards",
                    got=len(self.shards),
                )
            )

    # -- per-process state --------------------------------------------------------------------
    def _reset(self) -> None:
        self._pid = os.getpid()
        self._idx: Index | None = None
        self._fs: Any = None
        self._rows: np.ndarray | None = None
        self._starts: np.ndarray | None = None
        self._open: collections.OrderedDict[int, tuple[MappedFile, memoryview]] = (
            collections.OrderedDict()
        )
        self._cols: np.ndarray | None = None
        self._last: tuple[int, memoryview | None] = (-1, None)
        self._checked: dict[int, tuple[int, int, int, int]] = {}
        self._index_mtime: int | None = None
        self._check: Any = None
        self._check_sample: Any = None
        self._rows_of: Any = None
        #: item fid: the open shard's buffer or None (the kernel reads it)
        self._mvs: list[memoryview | None] = []
        self._rc: Any = None
        #: remote: fid -> (size, mtime ns or None, ETag or None) seen when first read
        self._seen: dict[int, tuple[int, int | None, str | None]] = {}
        self._shard_end: np.ndarray | None = None
        self._remote_index_mtime: int | None = None
        self._fp: str | None = None
        #: the listing was made by this object in this process (not pickled, not forked)
        self._listed_here = False
        #: remote shards read whole (see ``cache_bytes``), least recently cached first
        self._cache: collections.OrderedDict[int, memoryview] = collections.OrderedDict()
        self._cache_nbytes = 0
        #: remote: the index's bytes and metadata, fetched with the listing (used once)
        self._index_got: tuple[bytes, Mapping[str, Any] | None] | None = None
        _LIVE.add(self)

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k != "link"}
        state["_len"] = self._len
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.link = LinkModel(self.per_request, self.bandwidth)  # fitted anew per process
        self._reset()

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # forked: never share maps or clients with the parent
            self._reset()

    def _join(self, name: str) -> str:
        return f"{self.root}/{name}" if self.remote else os.path.join(self.root, name)

    def _filesystem(self) -> Any:
        if self._fs is None:
            fsspec = require("fsspec", extra="remote", what="taridx: a remote root")
            self._fs = fsspec.core.url_to_fs(self.root, **self.storage_options)[0]
        return self._fs

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
            or not _is_url(self.index_path)
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
                    _get_index(fs, ipath),
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

    def _list_shards(self, listed: Any = None) -> list[str]:
        if not self.remote:
            return [p.name for p in shard_paths(self.root, self.split)]
        pat = re.compile(re.escape(self.split) + r"_[0-9]+\.tar")
        found: dict[str, dict[str, Any]] = {}
        if listed is None:
            listed = self._filesystem().ls(self.root, detail=True)
        for p in listed:
            info = p if isinstance(p, Mapping) else {"name": p}
            name = os.path.basename(str(info.get("name", "")).rstrip("/"))
            if pat.fullmatch(name):
                found[name] = dict(info)
                etag = info_etag(info)
                if etag is not None:
                    self.etags[name] = etag
        self.listing = found
        self._listed_here = True
        return sorted(found)

    def _index(self) -> Index:
        self._check_pid()
        if self._idx is None:
            if self.index_bytes is not None:
                idx = Index.from_buffer(self.index_bytes, limits=self.limits)
            elif _is_url(self.index_path):
                got, self._index_got = self._index_got, None
                if got is None:
                    fs, path = self._index_fs()
                    if getattr(fs, "async_impl", False):
                        from fsspec.asyn import sync

                        got = sync(fs.loop, _get_index, fs, path)
                    else:
                        got = (fs.cat_file(path), None)
                blob, info = got
                idx = Index.from_buffer(blob, limits=self.limits)
                if info is None:
                    try:  # a shard modified after this is checked when first read
                        fs, path = self._index_fs()
                        info = fs.info(path)
                    except (OSError, ValueError):
                        info = None
                self._remote_index_mtime = None if info is None else info_mtime_ns(info)
            else:
                idx = Index.open(self.index_path, limits=self.limits)._owned()  # owned here
            s = idx.samples
            self._rows = idx.rows if s.order is None else idx.rows[s.order]
            self._starts = s.starts
            # start, size, fid, extid of every row in sample order, as plain int64 columns:
            # one ``tolist`` per sample gives Python ints directly
            cols = np.empty((idx.n_rows, 4), np.int64)
            cols[:, 0] = self._rows["offset"]
            cols[:, 0] += BLOCK
            cols[:, 1] = self._rows["size"]
            cols[:, 2] = self._rows["fid"]
            cols[:, 3] = self._rows["extid"]
            self._cols = cols
            self._mvs = [None] * len(self.shards)
            self._kh = np.array(self._rows["keyhash"], np.uint64)  # aligned copy
            self._idx = idx
            self._ext_names = idx.ext
            self._ext_b = [e.encode("utf-8") for e in idx.ext]
            ts = _kernels.load("tarscan")
            self._check = ts.check_member if self.verify_headers else None
            local_index = self.index_bytes is None and not _is_url(self.index_path)
            self._index_mtime = (
                os.stat(self.index_path).st_mtime_ns if local_index and not self.remote else None
            )
            if self.remote and local_index:
                self._remote_index_mtime = os.stat(self.index_path).st_mtime_ns
            want = self.extensions
            self._wanted = [want is None or e in want for e in idx.ext]
            ext_check = tuple(
                b if w else None for b, w in zip(self._ext_b, self._wanted, strict=True)
            )
            # the hot path: a sample's rows listed, and checked in the shards already open, by
            # one kernel call; rows in a shard opened for them by one more call
            rc = ts.RowCheck(cols, self._kh, s.starts, ext_check)
            self._rc = rc
            self._wanted_arr = np.array(self._wanted, bool)
            self._rows_of = rc.rows
            self._check_sample = rc.sample if self.verify_headers and not self.remote else None
            self._mismatch = ts.HeaderMismatch
        return self._idx

    def fingerprint(self) -> str:
        """A digest of the split's index file (what :class:`EpochSampler` states are tied to)."""
        if self._fp is None:
            self._fp = index_fingerprint(self._index()._mf.buffer())
        return self._fp

    @property
    def index(self) -> Index:
        """The split's :class:`Index` (opened in this process on first use)."""
        return self._index()

    # -- shards -------------------------------------------------------------------------------
    def _shard(self, fid: int) -> memoryview:
        hit = self._open.get(fid)
        if hit is not None:
            self._open.move_to_end(fid)
            self._last = (fid, hit[1])
            return hit[1]
        path = self._join(self.shards[fid])
        mf = MappedFile(path, fmt=FMT)
        try:
            self._check_shard(fid, path)
        except BaseException:
            mf.close()
            raise
        mv = mf.buffer().data
        self._open[fid] = (mf, mv)
        self._mvs[fid] = mv
        self._last = (fid, mv)
        while len(self._open) > self.max_open:
            old_fid, (old, _mv) = self._open.popitem(last=False)
            self._mvs[old_fid] = None
            old.close()
        return mv

    def _check_shard(self, fid: int, path: str) -> None:
        """A shard changed after the index was written (mtime or ctime newer) is checked
        against the index once per process (per inode, size and times)."""
        if self._index_mtime is None:
            return
        st = os.stat(path)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if (
            self._checked.get(fid) == key
            or max(st.st_mtime_ns, st.st_ctime_ns) <= self._index_mtime
        ):
            return
        idx = self._index()
        err = stale_shard(idx, fid, path, deep=False)  # the reads check every other header
        if err is not None:
            raise type(err)(f"{err}; rebuild the index (tenfold index build)")
        self._checked[fid] = key

    @property
    def fold(self) -> str:
        """Deprecated: the split name, now ``split``."""
        warnings.warn(
            "taridx: Dataset.fold is deprecated; use Dataset.split", DeprecationWarning, 2
        )
        return self.split

    @property
    def open_shards(self) -> int:
        """How many shards this process has open now."""
        return len(self._open)

    def close(self) -> None:
        """Close the index and every open shard of this process."""
        for mf, _ in self._open.values():
            mf.close()
        if self._idx is not None:
            self._idx.close()
        self._reset()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- samples ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def _past_end(self, fid: int, off: int, size: int, have: int) -> TruncatedError:
        return TruncatedError(
            describe(
                FMT,
                f"shard {self.shards[fid]}",
                offset=off,
                detail="member data ends past end of file",
                expected=f"end <= {have}",
                got=off + BLOCK + size,
            )
        )

    def __getitem__(self, i: int) -> dict[str, Any]:
        rows_of = self._rows_of
        if rows_of is None:
            self._index()
            rows_of = self._rows_of
        n = self._len
        i = operator.index(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample {i} out of range for a split of {n}")
        if self.remote:
            return self._batch(np.array([i], np.int64))[0]
        names, wanted = self._ext_names, self._wanted
        check = self._check_sample
        mvs = self._mvs
        if check is not None:
            # listed, and checked in the shards already open, in one call
            try:
                recs = rows_of(i, mvs)
            except self._mismatch:
                for fid in {r[2] for r in rows_of(i, None)}:
                    if mvs[fid] is not None:  # raises, unless a non-ASCII name matched
                        self._verify_rows(mvs[fid], i, fid)  # type: ignore[arg-type]
                recs = rows_of(i, None)
        else:
            recs = rows_of(i, None)
        last_fid, mv = self._last
        out: dict[str, Any] = {}
        for start, size, fid, extid in recs:
            if not wanted[extid]:
                continue
            if fid != last_fid or mv is None:
                mv = mvs[fid]
                if mv is None:
                    mv = self._shard(fid)
                    if check is not None and check(mv, i, fid) >= 0:
                        self._verify_rows(mv, i, fid)  # its rows were not checked above
                else:
                    self._open.move_to_end(fid)
                    self._last = (fid, mv)
                last_fid = fid
            end = start + size
            if end > len(mv):
                raise self._past_end(fid, start - BLOCK, size, len(mv))
            out[names[extid]] = mv[start:end]
        if self.decoders:
            for ext, fn in self.decoders.items():
                if ext in out:
                    out[ext] = fn(out[ext])
        return out

    def _verify_rows(self, mv: memoryview, i: int, fid: int) -> None:
        """The kernel's quick answer for sample ``i``'s rows in shard ``fid`` was not "yes" for
        one of them: raise the error of the first that does not name its member (non-ASCII
        names are compared here, as the builder decodes them)."""
        assert self._cols is not None and self._starts is not None
        a, b = int(self._starts[i]), int(self._starts[i + 1])
        for (start, size, f, extid), keyhash in zip(
            self._cols[a:b].tolist(), self._kh[a:b].tolist(), strict=True
        ):
            if f != fid or not self._wanted[extid]:
                continue
            err = member_problem(
                mv,
                start - BLOCK,
                size,
                keyhash,
                self._ext_names[extid],
                shard=self.shards[fid],
                ext_b=self._ext_b[extid],
            )
            if err is not None:
                raise err

    # -- batches ------------------------------------------------------------------------------
    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Samples ``indices`` (PyTorch's batched fetch): ``[self[i] for i in indices]``, with
        the rows grouped by shard and read in offset order. Locally each shard's headers are
        checked in one kernel pass (prefetching ahead, so the misses of random reads overlap);
        remotely the whole batch is one ``cat_ranges`` call, rows of a shard at most
        ``max_gap`` bytes apart fetched as one range. Every check of ``ds[i]`` applies."""
        if self._rows_of is None:
            self._index()
        n = self._len
        wanted = [operator.index(i) for i in indices]
        try:
            idx = np.array(wanted, np.int64)
        except OverflowError:  # beyond int64: out of range, as ds[i] says (not OverflowError)
            for i in wanted:
                j = i + n if i < 0 else i
                if not 0 <= j < n:
                    raise IndexError(f"sample {j} out of range for a split of {n}") from None
            raise  # pragma: no cover - every value outside int64 is out of range
        if idx.size:
            idx[idx < 0] += n
            bad = np.flatnonzero((idx < 0) | (idx >= n))
            if bad.size:
                raise IndexError(f"sample {int(idx[bad[0]])} out of range for a split of {n}")
        return self._batch(idx)

    def _batch(self, idx: np.ndarray) -> list[dict[str, Any]]:
        assert self._starts is not None and self._cols is not None
        st = self._starts
        first = st[idx]
        cnt = st[idx + 1] - first
        owner = np.repeat(np.arange(idx.size), cnt)
        rowids = np.arange(int(cnt.sum()), dtype=np.int64)
        rowids += np.repeat(first - (np.cumsum(cnt) - cnt), cnt)
        cols = self._cols[rowids]
        keep = self._wanted_arr[cols[:, 3]]
        if not keep.all():
            rowids, owner, cols = rowids[keep], owner[keep], cols[keep]
        if self.remote:
            views = self._remote_rows(rowids, cols, idx, owner)
        else:
            views = self._local_rows(rowids, cols, idx, owner)
        out: list[dict[str, Any]] = [{} for _ in range(idx.size)]
        names = self._ext_names
        for o, extid, v in zip(owner.tolist(), cols[:, 3].tolist(), views, strict=True):
            out[o][names[extid]] = v
        if self.decoders:
            for d in out:
                for ext, fn in self.decoders.items():
                    if ext in d:
                        d[ext] = fn(d[ext])
        return out

    def _local_rows(
        self, rowids: np.ndarray, cols: np.ndarray, idx: np.ndarray, owner: np.ndarray
    ) -> list[Any]:
        views: list[Any] = [None] * rowids.size
        order = np.lexsort((cols[:, 0], cols[:, 2]))
        fids = cols[order, 2]
        cuts = np.flatnonzero(fids[1:] != fids[:-1]) + 1
        check = self.verify_headers
        for grp in np.split(order, cuts) if order.size else ():
            fid = int(cols[grp[0], 2])
            mv = self._mvs[fid]
            if mv is None:
                mv = self._shard(fid)
            elif fid in self._open:  # (else a remote shard held in memory)
                self._open.move_to_end(fid)
                self._last = (fid, mv)
            if check and self._rc.batch(mv, np.ascontiguousarray(rowids[grp]), fid) >= 0:
                # the quick check said no for a row: the exact check (non-ASCII names) on
                # every sample of the group raises for the first row that does not match
                for i in dict.fromkeys(idx[owner[grp]].tolist()):
                    self._verify_rows(mv, i, fid)
            starts, sizes = cols[grp, 0], cols[grp, 1]
            past = np.flatnonzero(starts + sizes > len(mv))
            if past.size:
                k = int(past[0])
                raise self._past_end(fid, int(starts[k]) - BLOCK, int(sizes[k]), len(mv))
            for k, a, z in zip(grp.tolist(), starts.tolist(), sizes.tolist(), strict=True):
                views[k] = mv[a : a + z]
        return views

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
                raise type(exc)(
                    f"{exc}; the shard changed after the index was written: "
                    "rebuild the index (tenfold index build)"
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

    def get(self, stem: str, default: Any = None) -> Any:
        """The sample named ``stem``, or ``default`` when the split has none (as ``dict.get``)."""
        i = int(self._index().lookup([stem])[0])
        if i < 0:
            return default
        return self[i]

    def lookup(self, stems: Sequence[str]) -> np.ndarray:
        """Sample numbers of ``stems`` (-1 where absent), vectorised."""
        return self._index().lookup(list(stems))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"<taridx.Dataset {self.root!r} split={self.split!r} samples={self._len}>"
