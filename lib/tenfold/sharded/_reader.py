"""Reading a sharded checkpoint (:mod:`tenfold.sharded`): :class:`ShardedReader`, one
``Mapping`` over every shard's tensors that opens each shard on first use and keeps at most
``max_open_shards`` open, and the :func:`open`, :func:`load`, :func:`inspect` and
:func:`verify` built on it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from .._dispatch import open_any
from ..core import links
from ..core.reader import BaseReader
from ..errors import FormatError, TenfoldError, describe
from ._index import (
    FMT,
    MAX_INDEX_BYTES,
    MAX_OPEN_SHARDS,
    OPENING_SHARD,
    E,
    array_nbytes,
    fetch_index,
    index_shard_error,
    lacking_error,
    parse_index,
    quote_names,
    url_dir,
)


class ShardedReader(BaseReader):
    """Every tensor of a sharded checkpoint, one ``Mapping`` (see the module doc).

    ``options`` go to each shard's reader (``limits``...), except ``trust_links`` (follow
    symbolic links wherever they lead; see the module doc) and ``max_open_shards`` (how many
    shards stay open at once, :data:`MAX_OPEN_SHARDS` by default). Shards are opened on first
    use under a lock (threads may share the reader); beyond ``max_open_shards`` the least
    recently used one is closed, and opened again when next needed.
    """

    fmt = FMT
    own_metadata = frozenset({"total_size"})  # the index's own key, not a writer's metadata

    def __init__(self, path: Any, *, _fetched: bytes | None = None, **options: Any) -> None:
        from ..core.source import is_remote

        outer = OPENING_SHARD.get()
        if outer is not None:  # this index is a shard of another: refused before any read
            raise index_shard_error(*outer)
        self._trust_links = bool(options.pop("trust_links", False))
        max_open = options.pop("max_open_shards", MAX_OPEN_SHARDS)
        if isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1:
            raise ValueError(f"{FMT}: max_open_shards: expected an int >= 1, got {max_open!r}")
        self._max_open = max_open
        self._options = options
        self._remote = is_remote(path)
        if self._remote:
            # the index fetched once (one request); shards resolved relative to its URL and
            # opened on first use through the range-reading source (tenfold.core.source)
            if _fetched is not None:
                self.path, data = path, _fetched
            else:
                self.path, data = fetch_index(path, options.get("storage_options"))
            self._dir = url_dir(self.path)
        else:
            from ..core.mapped import open_regular

            self.path = os.fspath(path)
            with os.fdopen(open_regular(self.path, fmt=FMT), "rb") as f:
                data = f.read(MAX_INDEX_BYTES + 1)
            self._dir = os.path.dirname(os.path.abspath(self.path))
        self.size = len(data)
        self._weight_map, self._metadata = parse_index(data, repr(self.path), self._remote)
        self._by_shard: dict[str, list[str]] = {}
        for name, shard in self._weight_map.items():
            self._by_shard.setdefault(shard, []).append(name)
        if not self._remote:
            self._check_files()
        self._shards: dict[str, Any] = {}  # the open ones, least recently used first
        self._pins: dict[str, int] = {}  # shards in use by a call now (never closed under it)
        self._lock = threading.Lock()
        self._closed = False

    def _check_files(self) -> None:
        """Every shard a regular file inside the index's directory (one ``realpath`` and one
        ``stat`` per shard, not per tensor); links leading elsewhere refused (module doc)."""
        allowed = links.roots(self._dir)
        outside: list[str] = []
        missing: list[str] = []
        for shard in self._by_shard:
            escaped = None if self._trust_links else links.escape(self._dir, shard, allowed)
            if escaped is not None:
                outside.append(escaped)
            elif not os.path.isfile(os.path.join(self._dir, shard)):
                missing.append(shard)
        if outside:
            where = "the index's directory" + (" or its cache repository" if allowed[1:] else "")
            raise E.format(
                f"index {self.path!r}",
                detail=f"symbolic links leading outside {where} refused: "
                + ", ".join(outside[:5])
                + (" ..." if len(outside) > 5 else "")
                + "; pass trust_links=True to follow links in a tree you trust",
            )
        if missing:
            parts = [f"{s!r} (tensors {quote_names(self._by_shard[s], 3)})" for s in missing]
            raise E.format(
                f"index {self.path!r}", detail=f"missing shard files: {', '.join(parts)}"
            )

    # -- shards
    @property
    def shards(self) -> list[str]:
        """Shard file names, in first-use order of the weight map."""
        return list(self._by_shard)

    @property
    def weight_map(self) -> dict[str, str]:
        return dict(self._weight_map)

    @property
    def directory(self) -> str:
        """What shard names are resolved against: the index's directory (absolute), or the
        index's URL up to its last ``/``."""
        return self._dir

    def names_in(self, file: str) -> list[str]:
        """The tensors the index puts in shard ``file``, in the index's order."""
        return list(self._by_shard.get(file, ()))

    def open_shard_readers(self) -> dict[str, Any]:
        """The shards' readers open now, by file name, least recently used first (a snapshot:
        the reader closes the least recently used past ``max_open_shards``)."""
        return dict(self._shards)

    def shard(self, file: str) -> Any:
        """The reader of shard ``file`` (opened and checked against the index on first use).
        It may be closed once more than ``max_open_shards`` others were used since."""
        with self._using(file) as r:
            return r

    @contextlib.contextmanager
    def _using(self, file: str) -> Iterator[Any]:
        """Shard ``file``'s reader, open and kept open while the block runs."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{FMT}: I/O operation on a closed reader")
            r = self._shards.pop(file, None)
            if r is None:
                if file not in self._by_shard:
                    raise KeyError(f"{FMT}: no shard named {file!r}")
                r = self._open_shard(file)
            self._shards[file] = r  # the most recently used, last
            self._pins[file] = self._pins.get(file, 0) + 1
        try:
            yield r
        finally:
            with self._lock:
                left = self._pins[file] - 1
                if left:
                    self._pins[file] = left
                else:
                    del self._pins[file]
                victims = []
                for f in list(self._shards):
                    if len(self._shards) <= self._max_open:
                        break
                    if f not in self._pins:
                        victims.append(self._shards.pop(f))
            for v in victims:
                v.close()

    def _open_shard(self, file: str) -> Any:
        token = OPENING_SHARD.set((self.path, file))
        try:
            if self._remote:
                r = self._open_remote_shard(file)
            else:
                r = open_any(os.path.join(self._dir, file), dict(self._options))
        finally:
            OPENING_SHARD.reset(token)
        lacking = [n for n in self._by_shard[file] if n not in r]
        if lacking:
            r.close()
            raise lacking_error(file, lacking)
        return r

    def _open_remote_shard(self, file: str) -> Any:
        url = self._dir + file
        try:
            return open_any(url, dict(self._options))
        except FileNotFoundError:
            raise self._missing_remote(file, url) from None

    def _missing_remote(self, file: str, url: str) -> FormatError:
        return E.format(
            f"index {self.path!r}",
            detail=f"missing shard file: {file!r} at {url} (tensors "
            f"{quote_names(self._by_shard[file], 3)})",
        )

    def _input(self, file: str) -> tuple[str, Any]:
        """``(format, input)`` of shard ``file`` for its format's ``inspect`` / ``verify``: the
        local path, or an opened remote source (the caller closes it). A shard that is an
        index is refused."""
        from ..registry import detect, get, open_remote

        if not self._remote:
            full = os.path.join(self._dir, file)
            fmt = detect(full)
            if fmt == FMT:
                raise index_shard_error(self.path, file)
            return fmt, full
        url = self._dir + file
        try:
            fmt, mf = open_remote(url, storage_options=self._options.get("storage_options"),
                                  tail_first=False)  # fmt: skip
        except FileNotFoundError:
            raise self._missing_remote(file, url) from None
        take = get(fmt).hook("remote_input")  # e.g. WTXT is parsed whole, from its bytes
        if fmt != FMT and get(fmt).tensors and take is None:
            return fmt, mf
        try:
            if fmt == FMT:
                raise index_shard_error(self.path, file)
            if not get(fmt).tensors:
                raise E.unsupported(f"shard {file!r}", detail=f"{get(fmt).holds}, not a shard")
            return fmt, take(mf)
        finally:
            mf.close()

    def _file_of(self, name: str) -> str:
        try:
            return self._weight_map[name]
        except KeyError:
            raise KeyError(f"{FMT}: no tensor named {name!r}") from None

    # -- the reader protocol
    def __getitem__(self, name: str) -> Any:
        with self._using(self._file_of(name)) as r:
            return r[name]

    def read(self, name: str, index: Any = None, **kw: Any) -> Any:
        """``read(name, index)`` of the shard holding ``name`` (every reader reads a basic
        slice ``index`` itself: :mod:`tenfold.core.reader`)."""
        with self._using(self._file_of(name)) as r:
            return r.read(name, index, **kw)

    def info(self, name: str) -> Any:
        with self._using(self._file_of(name)) as r:
            return r.info(name)

    def verified(self, name: str) -> bool:
        with self._using(self._file_of(name)) as r:
            return bool(r.verified(name))

    def _keys(self) -> Mapping[str, str]:
        return self._weight_map

    @property
    def metadata(self) -> dict[str, Any]:
        """The index's ``metadata``: ``total_size`` and the checkpoint's metadata (which
        :func:`save` and ``convert`` write beside it, and into every shard)."""
        return dict(self._metadata)

    def verify(self) -> Any:
        return verify(self.path, trust_links=self._trust_links, **self._options)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            shards, self._shards = self._shards, {}
        for r in shards.values():
            r.close()

    def __enter__(self) -> ShardedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self)} entries, {len(self.shards)} shards"
        return f"<tenfold.sharded.ShardedReader {self.path!r} {state}>"

    __eq__ = object.__eq__  # type: ignore[assignment]
    __hash__ = object.__hash__  # type: ignore[assignment]


def open(path: Any, **options: Any) -> ShardedReader:  # noqa: A001
    """Open a sharded checkpoint's index (see :class:`ShardedReader`): a path, or an fsspec
    URL (``https://host/m.safetensors.index.json``, ``s3://bucket/m.zt.index.json``; the
    shards are the URLs beside it, ``storage_options=`` go to fsspec)."""
    from ..core.source import is_remote

    if isinstance(path, str) and is_remote(path):
        return ShardedReader(path, **options)
    if getattr(path, "remote", False) and isinstance(getattr(path, "path", None), str):
        # a remote source tenfold.open opened and recognised by content: its bytes so far
        outer = OPENING_SHARD.get()
        try:
            if outer is not None:  # a shard that is an index: refused before reading more
                raise index_shard_error(*outer)
            data = path.bytes(0, min(path.size, MAX_INDEX_BYTES + 1), "index")
        finally:
            path.close()
        return ShardedReader(path.path, _fetched=data, **options)
    if not isinstance(path, (str, os.PathLike)):
        raise E.unsupported("index", detail="must be opened from a path (its shards lie beside it)")
    return ShardedReader(path, **options)


def load(path: Any, copy: bool = False, **options: Any) -> dict[str, Any]:
    """Every tensor of every shard, in the index's order (read shard by shard: each is
    opened once, whatever the order of the index)."""
    import numpy as np

    with open(path, **options) as r:
        got: dict[str, Any] = {}
        for file in r.shards:
            with r._using(file) as shard:
                for n in r._by_shard[file]:
                    got[n] = np.array(shard[n]) if copy else shard[n]
        return {n: got[n] for n in r}


def _where(path: Any) -> str:
    return path.path if getattr(path, "remote", False) else os.fspath(path)


def _close(source: Any) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


def inspect(path: Any, **options: Any) -> list[dict[str, Any]]:
    """One row per object of each shard (the shard's row, plus the shard's file name), every
    tensor the index names checked present in its shard; the index's ``metadata`` as rows of
    layout ``metadata``. ``path`` is what :func:`open` takes."""
    from ..registry import module_for

    rows: list[dict[str, Any]] = []
    with open(path, **options) as r:
        for file in r.shards:
            fmt, source = r._input(file)
            try:
                got = module_for(fmt).inspect(source)
            finally:
                _close(source)
            have = {row.get("name") for row in got}
            if any(n not in have for n in r._by_shard[file]):
                r.shard(file)  # its reader decides (FOLD rows name chunks); refuses what it lacks
            rows.extend(dict(row) | {"shard": file} for row in got)
        for k, v in r.metadata.items():
            text = repr(v)
            rows.append({"name": k, "dtype": type(v).__name__, "layout": "metadata",
                         "value": text if len(text) <= 60 else text[:57] + "..."})  # fmt: skip
    return rows


def verify(path: Any, **options: Any) -> Any:
    """Check the index (names, shard files present, every tensor in its shard, ``total_size``)
    and verify every shard with its format's verifier. ``path`` is what :func:`open` takes."""
    from ..core.report import ERROR, OK, WARNING, Report
    from ..registry import module_for

    report = Report(FMT, _where(path))
    try:
        r = open(path, **options)
    except (TenfoldError, OSError) as exc:
        report.add("index", ERROR, str(exc))
        return report
    with r:
        report.summary["shards"] = len(r.shards)
        report.summary["tensors"] = len(r)
        total = 0
        for file in r.shards:
            try:
                fmt, source = r._input(file)
                try:
                    sub = module_for(fmt).verify(source)
                finally:
                    _close(source)
                with r._using(file) as shard:
                    total += sum(_nbytes_of(shard, n) for n in r._by_shard[file])
                    extra = [n for n in shard if n not in r._weight_map]
            except (TenfoldError, OSError) as exc:
                report.add(f"shard {file!r}", ERROR, str(exc))
                continue
            for f in sub.findings:
                report.add(f"{file}: {f.obj}", f.status, f.message, offset=f.offset)
            report.unverified.extend(f"{file}: {u}" for u in sub.unverified)
            if extra:
                report.add(f"shard {file!r}", WARNING, "holds tensors the index does not name: "
                           + ", ".join(map(repr, extra[:10])))  # fmt: skip
            if sub.repairable is not None and report.repairable is None:
                report.repairable = sub.repairable
            if sub.ok:
                report.add(f"shard {file!r}", OK)
        if "total_size" in r.metadata:
            want = r.metadata["total_size"]
            if isinstance(want, bool) or not isinstance(want, int):
                report.add("index", ERROR, describe(FMT, "metadata", field="total_size",
                           detail="not an integer", expected="an integer byte count",
                           got=f"{type(want).__name__} {want!r}"))  # fmt: skip
            elif not report.errors and want != total:
                report.add("index", ERROR, describe(FMT, "metadata", field="total_size",
                           expected=total, got=want))  # fmt: skip
    return report


def _nbytes_of(reader: Any, name: str) -> int:
    info = reader.info(name)
    dt = getattr(info, "np_dtype", None)
    if dt is None:
        return array_nbytes(reader[name])
    import numpy as np

    return int(np.prod(tuple(info.shape), dtype=np.int64)) * dt.itemsize
