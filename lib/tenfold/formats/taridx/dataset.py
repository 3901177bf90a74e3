"""Random access to the samples of a split: :class:`Dataset` and :class:`EpochSampler`.

``Dataset(root, split)`` opens ``<root>/<split>.taridx`` and serves ``ds[i]`` (sample ``i`` in
order of its first row) and ``ds.get(stem)`` as ``{extension: payload}``. Local shards are
memory-mapped lazily, at most ``max_open`` at once per process (least recently used closed
first). Payloads are ``bytes`` by default, as webdataset's are: a sample pickles, so it
crosses the process boundary of a ``DataLoader`` worker, and PyTorch's default collate keeps a
batch of them as a list. ``payload="memoryview"`` gives read-only views of the map instead
(zero copy; each keeps the map alive), for use in the process that read them: a memoryview
cannot be pickled, so such a dataset refuses to serve samples in a DataLoader worker.
``ds.key(i)`` is sample ``i``'s webdataset key (read from its first member's header), and
``with_keys=True`` adds it to every sample as ``"__key__"``; ``ds[a:b:c]`` is a list of samples.

Remote roots (any fsspec URL: ``http://``, ``s3://``, ``memory://`` ...) are read with
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
import operator
import os
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from ... import _kernels
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.mapped import MappedFile
from ...errors import TruncatedError, describe
from ._batches import Batches, in_torch_worker
from ._keys import SampleKeys
from ._members import member_problem
from ._remote import LinkModel, info_etag, info_mtime_ns
from ._remote_reads import get_index, is_url
from ._spec import BLOCK, FMT, E
from ._split import required_split, select_shards
from .build import shard_paths, stale_shard
from .reader import Index
from .sampler import EpochSampler, epoch_order, index_fingerprint

__all__ = ["PAYLOADS", "Dataset", "EpochSampler", "epoch_order"]

#: what ``Dataset(payload=...)`` accepts: payloads as ``bytes`` (pickle) or zero-copy views
PAYLOADS = ("bytes", "memoryview")


_LIVE: weakref.WeakSet[Dataset] = weakref.WeakSet()


def _after_fork() -> None:  # a forked child never shares maps or clients with its parent
    for ds in list(_LIVE):
        ds._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class Dataset(Batches, SampleKeys):
    """The samples of split ``split`` under ``root``.

    Parameters
    ----------
    root
        Directory (or fsspec URL) holding the shards ``<split>_<id>.tar`` (or ``<split>-<id>.tar``).
    split
        Split name (``fold=`` is its old name, deprecated).
    extensions
        Only these extensions are returned (default: all of the sample's).
    decoders
        ``{extension: callable(payload) -> value}`` applied to those extensions (the callable
        gets the payload as ``payload`` says: ``bytes`` by default).
    payload
        ``"bytes"`` (default): each payload is copied out of the shard as ``bytes``, which
        pickle (DataLoader workers under fork, spawn or forkserver) and which PyTorch's
        default collate keeps as they are. ``"memoryview"``: read-only zero-copy views of the
        memory-mapped shard (remote: of the fetched buffer), for in-process use only; they
        cannot be pickled, and PyTorch's collate would take one for a sequence of ints, so
        reading a sample in a DataLoader worker process is a ``ValueError`` saying so.
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
    with_keys
        Add ``"__key__"`` to every sample: its key as webdataset names it (the first member's
        name up to the first dot after the last slash; see :mod:`tenfold.taridx._keys`), read
        from the member's header, since the index stores only the key's hash. Off by default:
        it costs a header read per sample (remotely, one more request per batch).
        ``ds.key(i)`` gives one sample's key either way.

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
        payload: str = "bytes",
        with_keys: bool = False,
    ) -> None:
        if payload not in PAYLOADS:
            raise ValueError(f"{FMT}: payload must be one of {PAYLOADS}, got {payload!r}")
        #: ``"bytes"`` or ``"memoryview"``: the type of each payload of a sample
        self.payload = payload
        #: every sample has its ``"__key__"`` (see ``key``)
        self.with_keys = bool(with_keys)
        self.root = os.fspath(root).rstrip("/") if is_url(os.fspath(root)) else os.fspath(root)
        split = self.split = required_split(split, fold, "Dataset")
        self.extensions = None if extensions is None else [e.lower() for e in extensions]
        self.decoders = dict(decoders or {})
        self.remote = is_url(self.root)
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
        #: payloads copied out as bytes (else the zero-copy views of ``payload="memoryview"``)
        self._copy = self.payload == "bytes"
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

    def shard_url(self, name: str) -> str:
        """Where shard ``name`` lies: its path under a local root, its URL under a remote one."""
        return self._join(name)

    def shard_buffer(self, fid: int) -> memoryview:
        """The bytes of local shard number ``fid``: its memory map, kept open among the
        dataset's ``max_open`` shards (a shard changed since the index is checked first)."""
        return self._shard(fid)

    def known_shards(self) -> dict[str, tuple[int, str | None]]:
        """``{url: (size, etag)}`` of each remote shard this dataset has seen (size -1: not
        known), what later reads of its bytes are checked against
        (:func:`tenfold.core.source.cat_ranges`)."""
        return {self._join(self.shards[f]): (s[0], s[2]) for f, s in self._seen.items()}

    def _list_shards(self, listed: Any = None) -> list[str]:
        if not self.remote:
            return [p.name for p in shard_paths(self.root, self.split)]
        infos: dict[str, dict[str, Any]] = {}
        if listed is None:
            listed = self._filesystem().ls(self.root, detail=True)
        for p in listed:
            info = p if isinstance(p, Mapping) else {"name": p}
            infos[os.path.basename(str(info.get("name", "")).rstrip("/"))] = dict(info)
        names = select_shards(self.split, infos, self.root)
        found = {name: infos[name] for name in names}
        for name, info in found.items():
            etag = info_etag(info)
            if etag is not None:
                self.etags[name] = etag
        self.listing = found
        self._listed_here = True
        return names

    def _index(self) -> Index:
        self._check_pid()
        if self._idx is None:
            if self.index_bytes is not None:
                idx = Index.from_buffer(self.index_bytes, limits=self.limits)
            elif is_url(self.index_path):
                got, self._index_got = self._index_got, None
                if got is None:
                    fs, path = self._index_fs()
                    if getattr(fs, "async_impl", False):
                        from fsspec.asyn import sync

                        got = sync(fs.loop, get_index, fs, path)
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
                idx = Index.open(self.index_path, limits=self.limits).owned()  # owned here
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
            local_index = self.index_bytes is None and not is_url(self.index_path)
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
            self._fp = index_fingerprint(self._index().file.buffer())
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
            raise E.recast(
                type(err), err, message=f"{err}; rebuild the index (tenfold index build)"
            )
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

    @overload
    def __getitem__(self, i: int | str) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | str | slice) -> dict[str, Any] | list[dict[str, Any]]:
        """Sample number ``i``; the sample named ``i`` when it is a ``str`` (its key: a stem,
        or webdataset's key with a directory part; one the split lacks is a ``KeyError``, as
        for a dict; ``get`` gives a default instead); a list of samples for a slice (as for a
        list, negative bounds and steps included), read as one batch (``__getitems__``)."""
        if isinstance(i, slice):
            return self.__getitems__(range(*i.indices(self._len)))
        if isinstance(i, str):
            j = self._number_of(i)
            if j < 0:
                raise KeyError(i)
            i = j
        rows_of = self._rows_of
        if rows_of is None:
            self._index()
            rows_of = self._rows_of
        if not self._copy and in_torch_worker():  # (asked per call: a fork keeps the state)
            raise self._no_views()
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
        out: dict[str, Any] = {"__key__": self._keys_of(np.array([i]))[0]} if self.with_keys else {}
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
            out[names[extid]] = mv[start:end].tobytes() if self._copy else mv[start:end]
        if self.decoders:
            for ext, fn in self.decoders.items():
                if ext in out:
                    out[ext] = fn(out[ext])
        return out

    def _no_views(self) -> ValueError:
        return ValueError(
            f"{FMT}: Dataset(payload='memoryview') in a DataLoader worker process: memoryviews "
            "cannot be pickled back to the main process; use payload='bytes' (the default)"
        )

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

    def get(self, stem: str, default: Any = None) -> Any:
        """The sample named ``stem`` (or webdataset key), or ``default`` when the split has
        none (as ``dict.get``)."""
        i = self._number_of(stem)
        if i < 0:
            return default
        return self[i]

    def _number_of(self, key: str) -> int:
        """The sample number of ``key`` (a stem, or webdataset's key: directory part, a slash
        and the stem), -1 when the split has none."""
        i = int(self._index().lookup([key])[0])
        if i < 0 and "/" in key:  # stems hold no slash: the key's directory must be the sample's
            i = int(self._index().lookup([key.rpartition("/")[2]])[0])
            if i >= 0 and self.key(i) != key:
                i = -1
        return i

    def lookup(self, stems: Sequence[str]) -> np.ndarray:
        """Sample numbers of ``stems`` (-1 where absent), vectorised."""
        return self._index().lookup(list(stems))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"<taridx.Dataset {self.root!r} split={self.split!r} samples={self._len}>"
