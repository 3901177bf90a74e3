"""The key of each sample (webdataset's ``__key__``), read from its first member's tar header.

The index stores only the xxh64 hash of each sample's stem, never the name itself, so a key
costs one header read per sample: the name in the member's ustar fields (or in its extended
headers: pax ``path``, GNU long name, ustar ``prefix``), checked against the row's hash (a
shard changed since indexing is an ``IntegrityError`` naming shard and offset, never another
sample's name). Local shards are read in their memory map; remote ones by one ``cat_ranges``
call of one 512-byte block per sample (a name held in extended headers needs one more request
that reaches back over them), or from the shard's copy in memory when it is held there.

webdataset splits a member name into key and extension at the first dot after the last slash
(``re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", name)`` in ``webdataset.tariterators``): the key
keeps the directory part (``dir/a.b.jpg`` -> ``dir/a``), the extension is the rest. The index
splits the basename at the same dot (its stem is the key without the directory part), so the
key is ``directory part + stem``. Where webdataset gives no key (a basename without a dot, or
starting with a dot and no directory part) and skips the member, the same rule still names
the sample (``noext`` -> ``noext``, ``.hidden.cls`` -> ``""``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import xxhash

from ... import _kernels
from ...errors import IntegrityError, describe
from ._members import name_at, split_name
from ._spec import BLOCK, FMT

__all__ = ["SampleKeys", "webdataset_key"]


def webdataset_key(name: bytes) -> str:
    """webdataset's key of member ``name``: everything before the first dot after the last
    slash (non-UTF-8 bytes decoded as U+FFFD, as the index decodes names)."""
    head, sep, base = name.rpartition(b"/")
    return (head + sep).decode("utf-8", "replace") + split_name(base)[0].decode("utf-8")


class SampleKeys:
    """Key reads of :class:`~tenfold.formats.taridx.dataset.Dataset` (a base class)."""

    remote: bool
    shards: list[str]
    _len: int
    _starts: np.ndarray | None
    _cols: np.ndarray | None
    _kh: np.ndarray
    _mvs: list[memoryview | None]
    _index: Callable[[], Any]
    _shard: Callable[[int], memoryview]
    _join: Callable[[str], str]
    _remote_open: Callable[[int, str], None]
    _fetch: Callable[[list[str], list[int], list[int]], list[Any]]

    def key(self, i: int) -> str:
        """The key of sample ``i`` (negative counts from the end), as webdataset names it:
        its first member's name up to the first dot after the last slash."""
        n = self._len
        i = operator.index(i)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"sample {j} out of range for a split of {n}")
        return self._keys_of(np.array([j], np.int64))[0]

    def _keys_of(self, samples: np.ndarray) -> list[str]:
        return [webdataset_key(name) for name in self.member_names(samples)]

    def member_names(self, samples: np.ndarray) -> list[bytes]:
        """The full name of each sample's first member (sample numbers in range), read from
        its header and checked against the index's hash of the sample's stem."""
        if self._starts is None:
            self._index()
        assert self._starts is not None and self._cols is not None
        first = self._starts[np.asarray(samples, np.int64)]
        offs = (self._cols[first, 0] - BLOCK).tolist()
        fids = self._cols[first, 2].tolist()
        khs = self._kh[first].tolist()
        if self.remote:
            heads = self._header_blocks(fids, offs)
        else:
            heads = [(self._shard(f), 0) for f in fids]
        out: list[bytes] = []
        for (buf, base), fid, off, kh in zip(heads, fids, offs, khs, strict=True):
            got = name_at(buf, off - base)
            if got is not None and base and not _hashes_to(got[0], kh):
                # a block fetched alone: the name may be in the extended headers before it
                buf, base = self._window(fid, off)
                got = name_at(buf, off - base)
            if got is None or not _hashes_to(got[0], kh):
                raise IntegrityError(
                    describe(
                        FMT,
                        f"shard {self.shards[fid]}: member header",
                        offset=off,
                        field="member name",
                        detail="does not hash to the sample's keyhash (shard changed since "
                        "the index was built?)",
                        expected=f"{kh:016x}",
                        got=repr(None if got is None else got[0]),
                    )
                )
            out.append(got[0])
        return out

    def _header_blocks(self, fids: list[int], offs: list[int]) -> list[tuple[memoryview, int]]:
        """Each member's header block: ``(buffer, offset of its first byte in the shard)``;
        from a shard held in memory, else fetched, all in one ``cat_ranges`` call."""
        out: list[tuple[memoryview, int] | None] = []
        paths: list[str] = []
        starts: list[int] = []
        for fid, off in zip(fids, offs, strict=True):
            held = self._mvs[fid]
            if held is not None:
                out.append((held, 0))
                continue
            url = self._join(self.shards[fid])
            self._remote_open(fid, url)  # looked up (size, ETag) before any byte is used
            out.append(None)
            paths.append(url)
            starts.append(off)
        blobs = iter(self._fetch(paths, starts, [s + BLOCK for s in starts]))
        starts_it = iter(starts)
        return [h if h is not None else (memoryview(next(blobs)), next(starts_it)) for h in out]

    def _window(self, fid: int, off: int) -> tuple[memoryview, int]:
        start = max(0, off - int(_kernels.load("tarscan").LOOKBACK))
        (blob,) = self._fetch([self._join(self.shards[fid])], [start], [off + BLOCK])
        return memoryview(blob), start


def _hashes_to(name: bytes, keyhash: int) -> bool:
    return xxhash.xxh64_intdigest(split_name(name)[0]) == keyhash
