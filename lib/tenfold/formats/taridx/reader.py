"""Reading TARIDX files: :class:`Index`.

The header and the rows are structured-dtype views over the file's memory map (no copy, at any
``off_arr`` alignment). Opening checks everything that costs O(1): magic, version, sizes, region
offsets, row count against the file size, the extension and crash blocks. The per-row checks
(``extid < n_ext``, ``crashid <= n_crash``, ``n_stems`` and the contiguity flag against the rows)
read every row, so they run once, on first use of anything that depends on them
(:attr:`Index.samples`, :meth:`Index.lookup`, :meth:`Index.ext_of`), or eagerly with
``Index.open(path, validate=True)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
from xxhash import xxh64_intdigest

from ... import _kernels
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.mapped import MappedFile
from ...core.reader import TensorInfo
from ...core.source import open_file
from ...errors import FormatError, IntegrityError, UnsupportedError, describe
from ._header import IndexFile, split_block
from ._samples import Samples, hash_stems
from ._spec import (
    FLAG_CONTIGUOUS,
    FMT,
    REC_SIZE,
    ROW_DT,
)
from ._split import optional_split
from .build import scan_shard
from .writer import index_bytes

__all__ = ["Index", "Samples", "hash_stems", "split_block"]

#: Largest row offset or size accepted (2**62): offset + 512 + size stays in int64.
MAX_MEMBER_POS = 1 << 62


class Index(IndexFile, Mapping[str, dict]):
    """An opened ``.taridx`` file.

    Use :meth:`open` (path) or :meth:`from_buffer` (bytes); the object is a context manager
    and owns its memory map. ``header`` is a 1-element structured view, ``rows`` the row array
    (read-only views of the map), ``ext`` and ``crash`` the decoded name tables (``crash[0]``
    is crash id 1).

    It is also the split's ``Mapping`` of sample key (stem) to sample ``{extension:
    memoryview}``, read from the shards ``<split>_<id>.tar`` beside the index (or under
    ``root``, for split ``split``): ``len`` is the number of samples, ``key in index`` and
    ``index[key]`` hash the key (no shard is read to answer ``in``); iterating reads the member
    names from the shards' headers once, since the index stores only their hashes.

    Examples
    --------
    >>> import tenfold.taridx as tx, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "d.taridx"
    >>> _ = tx.write_index(p, [(0, 0, 5, "a", "jpg"), (0, 1024, 1, "a", "cls")])
    >>> with tx.Index.open(p) as idx:
    ...     (idx.n_rows, idx.ext, idx.is_contiguous, idx.lookup(["a", "b"]).tolist())
    (2, ['jpg', 'cls'], True, [0, -1])
    """

    #: the class that reads samples from the shards (``use_dataset``)
    _dataset_class: ClassVar[Any] = None

    def __init__(
        self,
        mf: MappedFile,
        *,
        validate: bool = False,
        root: str | os.PathLike[str] | None = None,
        split: str | None = None,
        verify_headers: bool = True,
        limits: Limits = DEFAULT_LIMITS,
        fold: str | None = None,
    ) -> None:
        split = optional_split(split, fold, "Index")
        self.limits = limits
        #: sample reads check the tar header in front of each payload (see ``Dataset``)
        self.verify_headers = bool(verify_headers)
        self._adopt(mf)
        self._parse()
        self._validated = False
        self._samples: Samples | None = None
        self._root = (
            os.fspath(root)
            if root is not None
            else (os.path.dirname(os.path.abspath(mf.path)) if mf.path is not None else None)
        )
        self._split = (
            split
            if split is not None
            else (os.path.splitext(os.path.basename(mf.path))[0] if mf.path is not None else None)
        )
        self._dataset: Any = None
        self._stems: list[str] | None = None
        if validate:
            self.validate_rows()

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        validate: bool = False,
        root: str | os.PathLike[str] | None = None,
        split: str | None = None,
        verify_headers: bool = True,
        limits: Limits = DEFAULT_LIMITS,
        mmap: bool = True,
        fold: str | None = None,
    ) -> Index:
        """Open and check the index at ``path`` (``validate=True`` also checks every row now).

        ``root`` and ``split`` say where the shards are for reading samples (default: beside
        the index, split named by the index's file name). ``verify_headers``: sample reads
        (``index[key]``, :meth:`read`) check the tar header in front of each payload, as
        ``Dataset(verify_headers=...)``. ``limits``: the index's row count must be within
        ``max_objects`` and its name blocks within ``max_index_bytes`` (``LimitError``).
        ``mmap=False`` reads the index with ``pread`` into owned memory instead of mapping it
        (as every tensor reader's option; the row columns are then views of that memory).
        """
        split = optional_split(split, fold, "Index.open")
        mf = open_file(path, fmt=FMT, mmap=mmap)
        try:
            return cls(
                mf,
                validate=validate,
                root=root,
                split=split,
                verify_headers=verify_headers,
                limits=limits,
            )
        except BaseException:
            mf.close()
            raise

    @classmethod
    def from_buffer(
        cls,
        data: Any,
        *,
        validate: bool = False,
        root: str | os.PathLike[str] | None = None,
        split: str | None = None,
        verify_headers: bool = True,
        limits: Limits = DEFAULT_LIMITS,
        fold: str | None = None,
    ) -> Index:
        """An index over bytes already in memory (used in place, not copied); the keyword
        arguments as in :meth:`open`. It reads samples when ``root`` and ``split`` say where
        the shards are (a dataset over a copy of these bytes; shards are then checked by
        their headers only, since the index has no file time to compare them with)."""
        split = optional_split(split, fold, "Index.from_buffer")
        return cls(
            MappedFile(data, fmt=FMT),
            validate=validate,
            root=root,
            split=split,
            verify_headers=verify_headers,
            limits=limits,
        )

    def close(self) -> None:
        """Release the map and any shard opened to read samples (views stay valid)."""
        if self._dataset is not None:
            self._dataset.close()
            self._dataset = None
        super().close()

    # -- the Mapping face: sample key -> sample (tenfold.core.reader) ---------------------------
    def __len__(self) -> int:
        return self.n_stems

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and int(self.lookup([key])[0]) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.stems())

    def _shards_dataset(self) -> Any:
        if self.closed:
            raise ValueError(f"{FMT}: I/O operation on a closed file")
        if self._dataset is None:
            if self._root is None or self._split is None:
                raise UnsupportedError(
                    describe(
                        FMT,
                        self.name,
                        detail="an index read from a buffer knows no shards; "
                        "pass root= and split= to read samples",
                    )
                )
            self._dataset = self._dataset_class(
                self._root,
                self._split,
                index=self.path if self.path is not None else self._mf.buffer().tobytes(),
                verify_headers=self.verify_headers,
                limits=self.limits,
                payload="memoryview",  # the mapping's samples are zero-copy views
            )
        return self._dataset

    def read(self, key: str, index: Any = None) -> dict[str, Any]:
        """Sample ``key`` as ``{extension: memoryview}`` (zero-copy views of the shard); a
        sample is not an array, so ``index`` (the protocol's slice) is refused."""
        if index is not None:
            raise UnsupportedError(describe(FMT, f"sample {key!r}", detail="not an array; "
                                            "read(key) gives the whole sample"))  # fmt: skip
        i = int(self.lookup([key])[0]) if isinstance(key, str) else -1
        if i < 0:
            raise KeyError(key)
        return self._shards_dataset()[i]

    def stems(self) -> list[str]:
        """Every sample key, in sample order (read from the shards' member headers, once)."""
        if self._stems is None:
            s = self.samples
            first = s.starts[:-1]
            rows = first if s.order is None else s.order[first]
            fids = np.asarray(self.rows["fid"])[rows].astype(np.int64)
            offs = np.asarray(self.rows["offset"])[rows].astype(np.int64)
            out = [""] * len(rows)
            raw = [b""] * len(rows)
            if len(rows):
                ds = self._shards_dataset()
                for fid in np.unique(fids).tolist():
                    scan = scan_shard(os.path.join(self._root or "", ds.shards[fid]))
                    ends = np.cumsum(scan.stem_len)
                    packed = scan.stems.tobytes()
                    want = np.flatnonzero(fids == fid)
                    pos = np.searchsorted(scan.offset, offs[want])
                    for j, p in zip(want.tolist(), pos.tolist(), strict=True):
                        if p >= scan.offset.size or scan.offset[p] != offs[j]:
                            raise FormatError(
                                describe(
                                    FMT,
                                    f"shard {ds.shards[fid]}",
                                    offset=int(offs[j]),
                                    detail="no member header where the index says a sample starts "
                                    "(shard changed since the index was built?)",
                                )
                            )
                        a = int(ends[p] - scan.stem_len[p])
                        raw[j] = packed[a : int(ends[p])]
                        out[j] = raw[j].decode("utf-8", "replace")
                # the names must be the ones the index hashed: a damaged or replaced shard
                # would otherwise yield keys that index[key] cannot find
                khs = np.asarray(self.rows["keyhash"])[rows].astype(np.uint64)
                for j, stem in enumerate(out):
                    got = xxh64_intdigest(raw[j])
                    if got != int(khs[j]):
                        raise IntegrityError(
                            describe(
                                FMT,
                                f"shard {ds.shards[int(fids[j])]}",
                                offset=int(offs[j]),
                                field="member name",
                                detail="does not hash to the row's keyhash (shard changed "
                                "since the index was built?)",
                                expected=f"{int(khs[j]):016x}",
                                got=f"{got:016x} ({stem!r})",
                            )
                        )
            self._stems = out
        return self._stems

    def info(self, key: str) -> TensorInfo:
        """Where sample ``key`` lives: ``extras["members"]`` maps extension to (fid, header
        offset, size); ``byte_range`` is ``None`` (a sample spans tar members)."""
        rows = self.sample_rows(key)
        exts = self.ext_of(rows)
        members = {
            e: (int(r["fid"]), int(r["offset"]), int(r["size"]))
            for e, r in zip(exts, rows, strict=True)
        }
        return TensorInfo(
            name=key,
            dtype="bytes",
            shape=(len(members),),
            byte_range=None,
            encoding="tar",
            checksum=None,
            extras={"members": members},
        )

    @property
    def metadata(self) -> dict[str, Any]:
        """The header fields and name tables."""
        return {
            "version": f"{self.major}.{self.minor}",
            "rows": self.n_rows,
            "samples": self.n_stems,
            "ext": list(self.ext),
            "crash": list(self.crash),
            "contiguous": self.is_contiguous,
            "flags": self.flags,
        }

    @property
    def root(self) -> str | None:
        """The folder of the shards (``root=``, else the index's folder; None for a buffer)."""
        return self._root

    @property
    def split(self) -> str | None:
        """The split's name (``split=``, else the index's stem; None for a buffer)."""
        return self._split

    @classmethod
    def use_dataset(cls, dataset: Any) -> None:
        """Make ``dataset`` (:class:`tenfold.taridx.Dataset`) the class that reads this index's
        samples from its shards. The package joins the two, so that this module never imports
        the dataset module (which imports this one)."""
        cls._dataset_class = dataset

    def column(self, field: str) -> np.ndarray:
        """A contiguous, aligned copy of one row field (cached until the samples are built).

        The row array is a strided view at an unaligned offset, where NumPy is slow; copying the
        column once makes every later pass over it fast.
        """
        col = self._cols.get(field)
        if col is None:
            dt, off = ROW_DT.fields[field][:2]  # type: ignore[index]
            col = np.empty(self.n_rows, dt)
            if self.n_rows:
                _kernels.load("strhash").gather_strided(
                    self._mf.buffer(), self.off_arr + off, REC_SIZE, dt.itemsize, col.view(np.uint8)
                )
            self._cols[field] = col
        return col

    # -- row checks ---------------------------------------------------------------------------
    def validate_rows(self) -> None:
        """Check every row (once): ``extid < n_ext``, ``crashid <= n_crash``, and ``offset``
        and ``size`` at most 2**62."""
        if self._validated:
            return
        # offset and size must keep offset + 512 + size inside int64 (no real tar is 4 EiB):
        # readers compute payload ranges with int64 columns.
        for field, limit in (
            ("extid", self.n_ext),
            ("crashid", self.n_crash + 1),
            ("offset", MAX_MEMBER_POS + 1),
            ("size", MAX_MEMBER_POS + 1),
        ):
            col = self.column(field)
            if col.size and int(col.max()) >= limit:
                i = int(np.argmax(col >= limit))
                raise self._err(
                    FormatError,
                    f"row {i}",
                    offset=self.off_arr + REC_SIZE * i,
                    field=field,
                    detail="out of range",
                    expected=f"< {limit}",
                    got=int(col[i]),
                )
        self._validated = True

    @property
    def is_contiguous(self) -> bool:
        """Header flag bit 0: rows grouped contiguously by ``(keyhash, crashid)``."""
        return bool(self.flags & FLAG_CONTIGUOUS)

    def ext_of(self, rows: np.ndarray | None = None) -> list[str]:
        """Extension names of ``rows`` (default: every row)."""
        self.validate_rows()
        ids = self.column("extid") if rows is None else rows["extid"]
        return [self.ext[i] for i in ids.tolist()]

    @property
    def samples(self) -> Samples:
        """Rows grouped by sample (computed once; checks ``n_stems`` and the flag)."""
        if self._samples is None:
            self.validate_rows()
            self._samples = self._group()
            self._cols.clear()
        return self._samples

    def _group(self) -> Samples:
        kh, cid = self.column("keyhash"), self.column("crashid")
        n = self.n_rows
        if n == 0:
            return Samples(
                None, np.zeros(1, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint32)
            )
        change = np.empty(n, bool)
        change[0] = True
        np.not_equal(kh[1:], kh[:-1], out=change[1:])
        crashed = self.n_crash > 0 and bool(cid.any())
        if crashed:
            change[1:] |= cid[1:] != cid[:-1]
        run_starts = np.flatnonzero(change)
        if self.is_contiguous:
            if run_starts.size != self.n_stems:
                raise self._err(
                    FormatError,
                    "rows",
                    offset=self.off_arr,
                    field="n_stems",
                    detail="flag says contiguous but the runs of (keyhash, crashid) disagree",
                    expected=run_starts.size,
                    got=self.n_stems,
                )
            starts = np.empty(run_starts.size + 1, np.int64)
            starts[:-1] = run_starts
            starts[-1] = n
            return Samples(
                None,
                starts,
                kh[run_starts],
                cid[run_starts] if crashed else np.zeros(run_starts.size, np.uint32),
            )
        perm = np.lexsort((cid, kh))
        skh, scid = kh[perm], cid[perm]
        sch = np.empty(n, bool)
        sch[0] = True
        np.not_equal(skh[1:], skh[:-1], out=sch[1:])
        sch[1:] |= scid[1:] != scid[:-1]
        gstart = np.flatnonzero(sch)
        if gstart.size != self.n_stems:
            raise self._err(
                FormatError,
                "rows",
                offset=self.off_arr,
                field="n_stems",
                detail="does not match the distinct (keyhash, crashid) in the rows",
                expected=gstart.size,
                got=self.n_stems,
            )
        # Order the groups by their first row (perm is stable: perm[gstart] is that row).
        first = perm[gstart]
        gorder = np.argsort(first, kind="stable")
        sizes = np.diff(np.append(gstart, n))
        new_sizes = sizes[gorder]
        starts = np.zeros(gstart.size + 1, np.int64)
        np.cumsum(new_sizes, out=starts[1:])
        # Row order: groups in first-row order, rows of a group in file order.
        group_of_sorted = np.repeat(np.arange(gstart.size), sizes)
        rank = np.empty(gstart.size, np.int64)
        rank[gorder] = np.arange(gstart.size)
        order = perm[np.argsort(rank[group_of_sorted], kind="stable")]
        return Samples(
            order,
            starts,
            np.ascontiguousarray(kh[first[gorder]]),
            np.ascontiguousarray(cid[first[gorder]]),
        )

    # -- lookups ------------------------------------------------------------------------------
    def lookup(self, stems: list[str] | tuple[str, ...] | str) -> np.ndarray:
        """Sample numbers of ``stems`` (``-1`` where absent), vectorised.

        Stems are hashed with xxh64; a stem listed in the crash table resolves to its crash id.
        The index stores hashes, not stems: a stem that is not in the split but has the same
        xxh64 as one that is (probability 2**-64) resolves to that one.
        """
        if isinstance(stems, str):
            stems = [stems]
        s = self.samples
        hashes = hash_stems(stems)
        out = np.full(len(stems), -1, np.int64)
        if len(s) == 0 or not len(stems):
            return out
        table, crash = s.table()
        _kernels.load("hashtable").probe(s.keyhash, table, hashes, out)
        if crash:
            crash_ids = {name: i + 1 for i, name in enumerate(self.crash)}
            crash_hashes = np.fromiter((k[0] for k in crash), np.uint64, len(crash))
            for i in np.flatnonzero(np.isin(hashes, crash_hashes)).tolist():
                cid = crash_ids.get(stems[i], 0)
                if cid:
                    out[i] = crash.get((int(hashes[i]), cid), -1)
        return out

    def sample_rows(self, stem: str) -> np.ndarray:
        """The rows (structured copy) of the sample named ``stem``; KeyError when absent."""
        i = int(self.lookup([stem])[0])
        if i < 0:
            raise KeyError(stem)
        return self.rows[self.samples.rows_of(i)]

    # -- transformations ----------------------------------------------------------------------
    def enforce_contiguous(self) -> Index:
        """An index whose rows are grouped by ``(keyhash, crashid)``.

        Unchanged (``self``) when the flag is already set; otherwise the rows are reordered
        with a stable sort by ``(keyhash, crashid)`` (as the reference does), the flag is set,
        and a new in-memory :class:`Index` is returned (write it with :meth:`save`).
        """
        if self.is_contiguous:
            return self
        self.validate_rows()
        perm = np.lexsort((self.rows["crashid"], self.rows["keyhash"]))
        data = index_bytes(
            self.rows[perm],
            self.ext,
            self.crash,
            n_stems=self.n_stems,
            flags=(self.flags | FLAG_CONTIGUOUS),
            minor=self.minor,
        )
        return Index.from_buffer(data, validate=True)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this index to ``path`` (atomically), byte for byte as read."""
        from ...core.atomic import atomic_write

        with atomic_write(path) as f:
            f.write(self._mf.buffer().data)

    def __repr__(self) -> str:
        return (
            f"<taridx.Index {self.name!r} rows={self.n_rows} stems={self.n_stems} "
            f"ext={self.ext} crash={len(self.crash)} contiguous={self.is_contiguous}>"
        )
