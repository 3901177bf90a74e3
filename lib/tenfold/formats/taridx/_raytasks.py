"""The body of a Ray read task over a TARIDX split (:mod:`.raydata`): :func:`read_samples`
yields pyarrow tables of a run of samples, local shards read with vectorised kernel calls
(every member header checked, payloads gathered straight into Arrow buffers), remote ones
through the dataset's batched range reads; each key is read from its first member's header
and checked against the index's hash. The datasets a worker opens are kept for the tasks of
the same read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ._members import split_name
from ._spec import BLOCK
from .dataset import Dataset

__all__ = ["read_samples", "ROWS_PER_BLOCK", "BYTES_PER_BLOCK"]

#: Rows per block a read task yields (tasks of more samples yield several blocks).
ROWS_PER_BLOCK = 8192
#: Payload bytes per block a read task aims at (Ray's default target block size).
BYTES_PER_BLOCK = 128 << 20
#: Largest payload per column in a ``binary`` (int32 offsets) column; past it, ``large_binary``.
_BINARY_MAX = (1 << 31) - 1

#: Datasets opened in this process, by their parameters: tasks of one read share the index.
_OPEN: dict[tuple[Any, ...], Dataset] = {}


def _cache_key(args: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        args["root"],
        args["split"],
        None if args["extensions"] is None else tuple(args["extensions"]),
        args["index"],
        tuple(args["shards"]),
        repr(sorted(args["storage_options"].items())),
        args["verify_headers"],
        os.getpid(),
    )


def _open(args: Mapping[str, Any]) -> Dataset:
    key = _cache_key(args)
    ds = _OPEN.get(key)
    if ds is None:
        if len(_OPEN) >= 8:
            _OPEN.pop(next(iter(_OPEN))).close()
        ds = _OPEN[key] = Dataset(
            args["root"],
            args["split"],
            args["extensions"],
            index=args["index"],
            shards=args["shards"],
            storage_options=args["storage_options"],
            verify_headers=args["verify_headers"],
            payload="memoryview",  # payloads go straight into Arrow buffers
        )
    return ds


def _stems(ds: Dataset, samples: np.ndarray) -> list[str]:
    """Each sample's stem, from its first member's header (checked against the index's hash)."""
    return [split_name(name)[0].decode("utf-8") for name in ds.member_names(samples)]


def _first_fids(ds: Dataset) -> np.ndarray:
    """The shard of each sample's first member."""
    idx = ds.index
    s = idx.samples
    first = s.starts[:-1]
    rows = first if s.order is None else s.order[first]
    return np.asarray(idx.rows["fid"])[rows].astype(np.int64)


class _Local:
    """The vectorised read of local shards: the rows of a run of samples checked against their
    headers (one kernel call per row) and gathered into Arrow buffers (one kernel call per run
    of rows in one shard), the keys likewise (one header name read per sample)."""

    def __init__(self, ds: Dataset) -> None:
        from ... import _kernels

        self.ds = ds
        idx = ds.index
        s = idx.samples
        rows = idx.rows if s.order is None else idx.rows[s.order]
        self.start = np.asarray(rows["offset"]).astype(np.int64) + BLOCK
        self.size = np.asarray(rows["size"]).astype(np.int64)
        self.fid = np.asarray(rows["fid"]).astype(np.int64)
        self.extid = np.asarray(rows["extid"]).astype(np.int64)
        self.keyhash = np.array(rows["keyhash"], np.uint64)
        self.starts = np.asarray(s.starts, np.int64)
        self.exts = [e for e in idx.ext if ds.extensions is None or e in ds.extensions]
        self.col_of = np.array(
            [self.exts.index(e) if e in self.exts else -1 for e in idx.ext] or [-1]
        )
        self.ext_b = [e.encode("utf-8") for e in idx.ext]
        self.ts = _kernels.load("tarscan")
        self.sh = _kernels.load("strhash")

    def _buf(self, fid: int) -> np.ndarray:
        return np.frombuffer(self.ds.shard_buffer(fid), np.uint8)

    def _gather(self, fids: np.ndarray, off: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Bytes ``off[k]:off[k]+size[k]`` of shard ``fids[k]``, back to back."""
        out = np.empty(int(size.sum()), np.uint8)
        if not fids.size:
            return out
        ends = np.cumsum(size)
        cut = np.flatnonzero(np.diff(fids)) + 1
        for a, b in zip([0, *cut.tolist()], [*cut.tolist(), fids.size], strict=True):
            lo = int(ends[a] - size[a])
            self.sh.gather(self._buf(int(fids[a])), off[a:b], size[a:b], out[lo : int(ends[b - 1])])
        return out

    def _check(self, rows: np.ndarray) -> None:
        ds = self.ds
        if not ds.verify_headers:
            return
        check = self.ts.check_member
        ok = self.ts.M_OK
        fid, start, size = self.fid[rows], self.start[rows], self.size[rows]
        kh, ext = self.keyhash[rows], self.extid[rows]
        cut = np.flatnonzero(np.diff(fid)) + 1
        for a, b in zip([0, *cut.tolist()], [*cut.tolist(), rows.size], strict=True):
            f = int(fid[a])
            buf = ds.shard_buffer(f)
            for o, n, h, e in zip(
                start[a:b].tolist(),
                size[a:b].tolist(),
                kh[a:b].tolist(),
                ext[a:b].tolist(),
                strict=True,
            ):
                if check(buf, o - BLOCK, n, h, self.ext_b[e]) != ok:
                    from ._members import member_problem

                    err = member_problem(
                        buf,
                        o - BLOCK,
                        n,
                        h,
                        ds.index.ext[e],
                        shard=ds.shards[f],
                        ext_b=self.ext_b[e],
                    )
                    if err is not None:
                        raise err

    def keys(self, samples: np.ndarray) -> Any:
        import pyarrow as pa

        first = self.starts[samples]
        fid, off, kh = self.fid[first], self.start[first] - BLOCK, self.keyhash[first]
        n = samples.size
        n_off, n_len = np.empty(n, np.int64), np.empty(n, np.int64)
        name = self.ts.member_name
        cut = np.flatnonzero(np.diff(fid)) + 1
        st_off, st_len, ex_off, ex_len = (np.empty(n, np.int64) for _ in range(4))
        ascii = np.empty(n, np.uint8)
        got = np.empty(n, np.uint64)
        arena = []
        for a, b in zip([0, *cut.tolist()], [*cut.tolist(), n], strict=True):
            mv = self.ds.shard_buffer(int(fid[a]))
            buf = np.frombuffer(mv, np.uint8)
            got_names = [name(mv, o, True) for o in off[a:b].tolist()]
            found = np.array([(g[1], g[2]) if not g[0] else (0, 0) for g in got_names], np.int64)
            n_off[a:b], n_len[a:b] = found[:, 0], found[:, 1]
            sl = slice(a, b)
            self.sh.split_basenames(
                buf, n_off[sl], n_len[sl], st_off[sl], st_len[sl], ex_off[sl], ex_len[sl], ascii[sl]
            )
            self.sh.hash_ranges(buf, st_off[sl], st_len[sl], 0, got[sl])
            part = np.empty(int(st_len[sl].sum()), np.uint8)
            self.sh.gather(buf, st_off[sl], st_len[sl], part)
            arena.append(part)
        if (ascii == 0).any() or (got != kh).any():
            return pa.array(self.ds_keys(samples), pa.string())  # exact path, with its errors
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(st_len, out=offsets[1:])
        data = np.concatenate(arena) if arena else np.zeros(0, np.uint8)
        return pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    def ds_keys(self, samples: np.ndarray) -> list[str]:
        return _stems(self.ds, samples)

    def table(self, samples: np.ndarray, urls: list[bytes] | None) -> Any:
        import pyarrow as pa

        lo, hi = self.starts[samples], self.starts[samples + 1]
        lens = hi - lo
        total = int(lens.sum())
        rows = np.repeat(lo - np.cumsum(lens) + lens, lens) + np.arange(total)
        which = np.repeat(np.arange(samples.size), lens)
        col = self.col_of[self.extid[rows]]
        keep = col >= 0
        rows, which, col = rows[keep], which[keep], col[keep]
        self._check(rows)
        n = samples.size
        out: dict[str, Any] = {"__key__": self.keys(samples)}
        if urls is not None:
            fids = self.fid[self.starts[samples]]
            offsets = np.zeros(n + 1, np.int32)
            np.cumsum(np.array([len(u) for u in urls], np.int64)[fids], out=offsets[1:])
            data = b"".join([urls[f] for f in fids.tolist()])
            out["__url__"] = pa.Array.from_buffers(
                pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
            )
        for c, e in enumerate(self.exts):
            sel = np.flatnonzero(col == c)
            pos = which[sel]
            if pos.size > 1 and (np.diff(pos) == 0).any():  # two members, one extension:
                last = np.append(np.diff(pos) != 0, True)  # the later one, as Dataset does
                sel, pos = sel[last], pos[last]
            r = rows[sel]
            sizes = np.zeros(n, np.int64)
            sizes[pos] = self.size[r]
            big = int(sizes.sum()) > _BINARY_MAX
            offsets = np.zeros(n + 1, np.int64 if big else np.int32)
            np.cumsum(sizes, out=offsets[1:])
            payload = self._gather(self.fid[r], self.start[r], self.size[r])
            valid = None
            nulls = n - pos.size
            if nulls:
                present = np.zeros(n, bool)
                present[pos] = True
                valid = pa.py_buffer(np.packbits(present, bitorder="little"))
            out[e] = pa.Array.from_buffers(
                pa.large_binary() if big else pa.binary(),
                n,
                [valid, pa.py_buffer(offsets), pa.py_buffer(payload)],
                null_count=nulls,
            )
        return pa.table(out)

    def payload(self, samples: np.ndarray) -> np.ndarray:
        """Payload bytes of each sample's wanted members."""
        size = np.where(self.col_of[self.extid] >= 0, self.size, 0)
        csum = np.zeros(size.size + 1, np.int64)
        np.cumsum(size, out=csum[1:])
        return csum[self.starts[samples + 1]] - csum[self.starts[samples]]


_LOCAL: dict[int, _Local] = {}


def read_samples(args: Mapping[str, Any], samples: np.ndarray, url: bool = True) -> Iterator[Any]:
    """Yield pyarrow tables of ``samples`` (a read task's body; runs in a Ray worker)."""

    ds = _open(args)
    samples = np.asarray(samples, np.int64)
    if not ds.remote:
        lr = _LOCAL.get(id(ds))
        if lr is None or lr.ds is not ds:
            lr = _LOCAL[id(ds)] = _Local(ds)
        urls = [ds.shard_url(n).encode() for n in ds.shards] if url else None
        pay = np.cumsum(lr.payload(samples))
        pos = 0
        while pos < samples.size:
            # up to ROWS_PER_BLOCK samples and about BYTES_PER_BLOCK of payload
            base = int(pay[pos - 1]) if pos else 0
            end = int(np.searchsorted(pay, base + BYTES_PER_BLOCK, side="right"))
            end = min(max(end, pos + 1), pos + ROWS_PER_BLOCK, samples.size)
            yield lr.table(samples[pos:end], urls)
            pos = end
        return
    yield from _read_remote(ds, samples, url)


def _read_remote(ds: Dataset, samples: np.ndarray, url: bool) -> Iterator[Any]:
    import pyarrow as pa

    first_fid = _first_fids(ds) if url else None
    ext_names = [e for e in ds.index.ext if ds.extensions is None or e in ds.extensions]
    shard_urls = [ds.shard_url(n) for n in ds.shards] if url else []
    step = ROWS_PER_BLOCK
    pos = 0
    while pos < samples.size:
        chunk = samples[pos : pos + step]
        cols: dict[str, list[Any]] = {e: [None] * chunk.size for e in ext_names}
        nbytes = 0
        getitems = getattr(ds, "__getitems__", None)
        items = getitems(chunk.tolist()) if getitems is not None else [ds[i] for i in chunk]
        for j, item in enumerate(items):
            for e, v in item.items():
                cols[e][j] = v
                nbytes += len(v)
            if nbytes >= BYTES_PER_BLOCK and j + 1 < chunk.size:
                chunk = chunk[: j + 1]
                for e in ext_names:
                    del cols[e][j + 1 :]
                break
        table: dict[str, Any] = {"__key__": pa.array(_stems(ds, chunk), pa.string())}
        if first_fid is not None:
            table["__url__"] = pa.array([shard_urls[f] for f in first_fid[chunk].tolist()])
        for e in ext_names:
            big = sum(len(v) for v in cols[e] if v is not None) > _BINARY_MAX
            table[e] = pa.array(cols[e], pa.large_binary() if big else pa.binary())
        pos += chunk.size
        yield pa.table(table)
