"""Sharded checkpoints in the Hugging Face layout: ``name-00001-of-0000N.<ext>`` files and a
``name.<ext>.index.json`` that maps every tensor to its shard.

The index is the JSON ``transformers`` and ``huggingface_hub`` write and read::

    {
      "metadata": {"total_size": 2000000000},
      "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors", ...}
    }

``total_size`` is the sum of the tensors' sizes in bytes (elements x item size, as
``huggingface_hub`` counts it), not of the files. Shards are any tensor format tenfold
writes (the suffix chooses it); an index from the Hub (``model.safetensors.index.json``
beside its shards) opens the same way.

* :func:`save` splits a ``dict`` of arrays as ``huggingface_hub`` does: tensors in order, a
  new shard when the next tensor would take the current one past ``max_shard_size``, a
  tensor larger than that alone in its shard; a model that fits in one shard is one plain
  file (no index). Every file is written atomically, the index last.
* :func:`open` returns a :class:`ShardedReader`: one read-only ``Mapping`` over every
  shard's tensors with the reader protocol of :mod:`tenfold.core.reader`, opening each
  shard on first use.
* Refused with a :class:`~tenfold.errors.FormatError` naming them, before any shard is
  opened: shard names that leave the index's directory (``..``, absolute paths), shards that
  do not exist, shards that are symbolic links (or lie under one) resolving outside the
  index's directory (see *Symbolic links* below); when a shard is opened: a shard that is
  itself an index (an index naming itself, two naming each other), tensors the index puts in
  it that it lacks.
* At most ``max_open_shards`` shards (default :data:`MAX_OPEN_SHARDS`) stay open at once: the
  least recently used one is closed when another must open (arrays already handed out stay
  valid), so a checkpoint of thousands of shards needs no more file descriptors than that.

Symbolic links: a shard is followed through a link only when its target resolves inside the
index's directory or, in the Hugging Face cache layout
(``models--org--name/snapshots/<rev>/x -> ../../blobs/<sha>``), inside that repository's cache
folder (``models--org--name``). Anything else is refused naming the link, so that an untrusted
directory (a clone, an extracted archive) cannot make tenfold read a file elsewhere on the
machine. ``trust_links=True`` (on :func:`open`, :func:`load`, :func:`verify`,
:func:`inspect` and the framework loaders given an index) follows every link, for trees one
trusts.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from ._dispatch import open_any, save_one
from .core import links
from .core.reader import BaseReader
from .errors import FormatError, TenfoldError, describe, factory
from .tensor_source import Source

__all__ = [
    "ShardedReader",
    "open",
    "load",
    "save",
    "inspect",
    "verify",
    "parse_size",
    "plan",
    "shard_paths",
    "sniff",
    "INDEX_SUFFIX",
    "MAX_OPEN_SHARDS",
]

FMT = "sharded"
E = factory(FMT)
INDEX_SUFFIX = ".index.json"
#: Largest index file read (Hub indexes of the largest models are a few MiB).
MAX_INDEX_BYTES = 64 << 20
#: Shards a reader keeps open at once by default (``max_open_shards=``): the least recently
#: used one is closed when another must open.
MAX_OPEN_SHARDS = 64
#: The options this module takes itself (the others go to each shard's reader).
_OWN_OPTIONS = ("trust_links", "max_open_shards")
#: The index (and shard name) whose shard is being opened, while it is: a shard that turns out
#: to be an index itself is refused instead of opened (no recursion, no request storm).
_OPENING_SHARD: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "tenfold_sharded_opening", default=None
)

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, or a string like Hugging Face's ``max_shard_size``
    (``"5GB"`` = 5 * 10**9, ``"500MB"``, ``"1GiB"`` = 2**30; case-insensitive).

    >>> parse_size("5GB"), parse_size("1GiB"), parse_size("500 mb"), parse_size(1024)
    (5000000000, 1073741824, 500000000, 1024)
    """
    if isinstance(size, bool):
        raise TypeError("max_shard_size: expected an int or a string like '5GB', got a bool")
    if isinstance(size, int):
        n = size
    elif isinstance(size, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", size, re.IGNORECASE)
        if m is None:
            raise ValueError(
                f"max_shard_size: {size!r}; expected bytes or a number with a unit "
                "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            )
        n = int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])
    else:
        raise TypeError(f"max_shard_size: expected an int or a string, got {type(size).__name__}")
    if n <= 0:
        raise ValueError(f"max_shard_size: must be positive, got {size!r}")
    return n


def plan(sizes: list[tuple[str, int]], max_size: int) -> list[list[str]]:
    """Tensor names per shard, in order (the ``huggingface_hub`` rule, see module doc).

    A tensor larger than ``max_size`` is a shard of its own at once, ahead of the shard still
    being filled (the order ``huggingface_hub`` gives):

    >>> plan([("a", 4), ("b", 4), ("c", 9), ("d", 2)], 8)
    [['c'], ['a', 'b'], ['d']]
    """
    shards: list[list[str]] = []
    cur: list[str] = []
    cur_size = 0
    for name, n in sizes:
        if n > max_size:
            shards.append([name])
            continue
        if cur and cur_size + n > max_size:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(name)
        cur_size += n
    if cur or not shards:
        shards.append(cur)
    return shards


def shard_paths(path: str | os.PathLike[str], count: int) -> tuple[list[str], str]:
    """The shard paths and the index path of a checkpoint saved as ``path`` in ``count``
    shards.

    >>> shard_paths("out/model.zt", 2)
    (['out/model-00001-of-00002.zt', 'out/model-00002-of-00002.zt'], 'out/model.zt.index.json')
    """
    p = os.fspath(path)
    stem, ext = os.path.splitext(p)
    return [f"{stem}-{i:05d}-of-{count:05d}{ext}" for i in range(1, count + 1)], p + INDEX_SUFFIX


def index_document(weight_map: Mapping[str, str], total_size: int) -> bytes:
    """The index JSON as ``transformers`` writes it (two-space indent, sorted keys)."""
    doc = {"metadata": {"total_size": int(total_size)}, "weight_map": dict(weight_map)}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _write_index(path: str, weight_map: Mapping[str, str], total: int, fsync: bool) -> None:
    from .core.atomic import atomic_write

    with atomic_write(path, fsync=fsync) as f:
        f.write(index_document(weight_map, total))


def array_nbytes(v: Any) -> int:
    """Bytes of an array-like's data (anything with ``shape`` and ``dtype``: NumPy, a torch
    tensor's NumPy view, a shape-only spec), without touching its data."""
    import numpy as np

    shape = tuple(int(d) for d in v.shape)
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize


def write(
    path: str | os.PathLike[str],
    names: list[str],
    sizes: Mapping[str, int],
    max_shard_size: int | str,
    write_one: Any,
    *,
    fsync: bool = True,
) -> list[str]:
    """Plan the shards of ``names`` and write each with ``write_one(shard_path, names)``,
    then the index; one plain file at ``path`` when everything fits. Returns the paths."""
    limit = parse_size(max_shard_size)
    groups = plan([(n, sizes[n]) for n in names], limit)
    if len(groups) == 1:
        write_one(os.fspath(path), groups[0])
        return [os.fspath(path)]
    paths, index = shard_paths(path, len(groups))
    weight_map: dict[str, str] = {}
    for p, group in zip(paths, groups, strict=True):
        write_one(p, group)
        weight_map.update((n, os.path.basename(p)) for n in group)
    _write_index(index, weight_map, sum(sizes[n] for n in names), fsync)
    return paths + [index]


def save(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    max_shard_size: int | str,
    format: str | None = None,  # noqa: A002
    zt_generation: Any = None,
    **options: Any,
) -> list[str]:
    """Write ``tensors`` as shards of at most ``max_shard_size`` bytes each plus the index
    (see the module doc); ``options`` (and ``zt_generation``: each ``.zt`` shard's
    generation) go to :func:`tenfold.save` for each shard. Every
    tensor's dtype is checked against the format before the first file is written. Returns
    the paths written (the index last)."""
    from .capabilities import check_dtype, target_of

    fmt = format or target_of(path)
    if fmt is None:
        from .registry import by_suffix

        fmt = by_suffix(path).name
    for n, v in tensors.items():
        check_dtype(fmt, n, v.dtype)
    sizes = {n: array_nbytes(v) for n, v in tensors.items()}

    def one(p: str, group: list[str]) -> None:
        save_one(p, {n: tensors[n] for n in group}, format, zt_generation=zt_generation,
                 **options)  # fmt: skip

    return write(path, list(tensors), sizes, max_shard_size, one,
                 fsync=options.get("fsync", True))  # fmt: skip


# -- reading ---------------------------------------------------------------------------------------
def demo(directory: Any) -> str:
    """Write a small deterministic sharded checkpoint (two safetensors shards and the index)
    into ``directory``; return the index's path."""
    import numpy as np

    rng = np.random.default_rng(12)
    tensors = {
        "embed.weight": rng.standard_normal((32, 16)).astype(np.float32),
        "layer.0.weight": rng.standard_normal((16, 16)).astype(np.float32),
        "layer.0.bias": np.zeros(16, np.float32),
    }
    path = os.path.join(os.fspath(directory), "demo-sharded.safetensors")
    return save(path, tensors, max_shard_size=2048)[-1]


def sniff(head: bytes) -> bool:
    """Whether ``head`` starts like a sharded checkpoint's index (a JSON object naming
    ``weight_map`` or ``metadata``): :func:`tenfold.formats.sniff_sharded`."""
    from .registry import sniff_sharded

    return sniff_sharded(head)


def _safe_name(shard: str, index: str) -> bool:
    if not shard or "\0" in shard or "\\" in shard or os.path.isabs(shard):
        return False
    try:  # a file name: a lone surrogate ("\ud800" in the JSON) names no file
        shard.encode("utf-8")
    except UnicodeEncodeError:
        return False
    if shard.startswith("/") or re.match(r"^[A-Za-z]:", shard):
        return False
    return all(part not in ("..", "") for part in shard.split("/"))


def _fetch_index(url: str, storage_options: dict[str, Any] | None) -> tuple[str, bytes]:
    """``(url, bytes)`` of a remote index, fetched with one request (at most
    :data:`MAX_INDEX_BYTES` + 1 bytes: a longer one is refused by :func:`parse_index`).
    Failures are :class:`OSError` naming the URL."""
    import errno

    from .core.optional import require

    fsspec = require("fsspec", extra="remote", what=f"{FMT}: reading a URL")
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        from .core.source import fetch_prefix  # stops at the limit even on a 200 answer

        data = fetch_prefix(fs, path, MAX_INDEX_BYTES + 1)
    except FileNotFoundError as exc:
        raise FileNotFoundError(errno.ENOENT, f"{FMT}: {url}: index not found: {exc}", url) from exc
    except TenfoldError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:
        if getattr(exc, "status", 0) in (404, 410) or "404" in str(exc)[:200]:
            raise FileNotFoundError(errno.ENOENT, f"{FMT}: {url}: index not found", url) from exc
        raise OSError(errno.EIO, f"{FMT}: {url}: fetching the index: {type(exc).__name__}: "
                      f"{exc}") from exc  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - aiohttp/botocore errors: an OSError naming the URL
        raise OSError(errno.EIO, f"{FMT}: {url}: fetching the index: {type(exc).__name__}: "
                      f"{exc}") from exc  # fmt: skip
    return url, bytes(data)


def _url_dir(url: str) -> str:
    """The URL up to and including the last ``/`` of its path (query and fragment dropped):
    what shard names are resolved against."""
    base = url.split("#", 1)[0].split("?", 1)[0]
    return base[: base.rfind("/") + 1]


def _url_syntax(shard: str) -> bool:
    """Whether a shard name holds characters a URL would interpret (an escaped ``..``, a
    query, a fragment, a scheme or port)."""
    return any(c in shard for c in "%?#:") or any(ord(c) < 0x21 for c in shard)


def parse_index(
    data: bytes, where: str, remote: bool = False
) -> tuple[dict[str, str], dict[str, Any]]:
    """``(weight_map, metadata)`` of an index, every field checked (``remote``: shard names
    are also refused when they hold URL syntax, ``%``, ``?``, ``#`` or ``:``)."""
    from .core.jsonio import loads

    doc = loads(data, fmt=FMT, what=f"index {where}", limit=MAX_INDEX_BYTES)
    if not isinstance(doc, dict):
        raise FormatError(
            describe(
                FMT,
                f"index {where}",
                detail="not a JSON object",
                expected="object",
                got=type(doc).__name__,
            )  # fmt: skip
        )
    wm = doc.get("weight_map")
    if not isinstance(wm, dict):
        raise FormatError(
            describe(
                FMT,
                f"index {where}",
                field="weight_map",
                detail="missing or not an object",
                expected="object",
                got=type(wm).__name__,
            )  # fmt: skip
        )
    md = doc.get("metadata", {})
    if md is None:
        md = {}
    if not isinstance(md, dict):
        raise FormatError(
            describe(
                FMT,
                f"index {where}",
                field="metadata",
                detail="not an object",
                expected="object",
                got=type(md).__name__,
            )  # fmt: skip
        )
    bad = [f"{k!r}: {v!r}" for k, v in wm.items() if not isinstance(v, str)]
    if bad:
        raise FormatError(
            describe(
                FMT,
                f"index {where}",
                field="weight_map",
                detail=f"shard names must be strings; got {', '.join(bad[:5])}",
            )  # fmt: skip
        )
    unsafe = sorted(
        {v for v in wm.values() if not _safe_name(v, where) or (remote and _url_syntax(v))}
    )
    if unsafe:
        raise FormatError(
            describe(
                FMT,
                f"index {where}",
                field="weight_map",
                detail="shard names must stay in the index's directory (no '..', no "
                "absolute path) and be file names (no NUL, no lone surrogate); refused "
                f"{', '.join(map(ascii, unsafe[:5]))}",
            )  # fmt: skip
        )
    return dict(wm), dict(md)


def _index_shard_error(index: str, file: str) -> FormatError:
    return FormatError(
        describe(
            FMT,
            f"index {index!r}",
            detail=f"shard {file!r} is itself a sharded checkpoint's index (an index naming "
            "itself or another index); a shard must be a tensor file",
        )  # fmt: skip
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

    def __init__(self, path: Any, *, _fetched: bytes | None = None, **options: Any) -> None:
        from .core.source import is_remote

        outer = _OPENING_SHARD.get()
        if outer is not None:  # this index is a shard of another: refused before any read
            raise _index_shard_error(*outer)
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
                self.path, data = _fetch_index(path, options.get("storage_options"))
            self._dir = _url_dir(self.path)
        else:
            from .core.mapped import open_regular

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
            raise FormatError(
                describe(
                    FMT,
                    f"index {self.path!r}",
                    detail=f"symbolic links leading outside {where} refused: "
                    + ", ".join(outside[:5])
                    + (" ..." if len(outside) > 5 else "")
                    + "; pass trust_links=True to follow links in a tree you trust",
                )  # fmt: skip
            )
        if missing:
            parts = [f"{s!r} (tensors {_names(self._by_shard[s], 3)})" for s in missing]
            raise FormatError(
                describe(
                    FMT, f"index {self.path!r}", detail=f"missing shard files: {', '.join(parts)}"
                )  # fmt: skip
            )

    # -- shards
    @property
    def shards(self) -> list[str]:
        """Shard file names, in first-use order of the weight map."""
        return list(self._by_shard)

    @property
    def weight_map(self) -> dict[str, str]:
        return dict(self._weight_map)

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
        token = _OPENING_SHARD.set((self.path, file))
        try:
            if self._remote:
                r = self._open_remote_shard(file)
            else:
                r = open_any(os.path.join(self._dir, file), dict(self._options))
        finally:
            _OPENING_SHARD.reset(token)
        lacking = [n for n in self._by_shard[file] if n not in r]
        if lacking:
            r.close()
            raise _lacking_error(file, lacking)
        return r

    def _open_remote_shard(self, file: str) -> Any:
        url = self._dir + file
        try:
            return open_any(url, dict(self._options))
        except FileNotFoundError:
            raise self._missing_remote(file, url) from None

    def _missing_remote(self, file: str, url: str) -> FormatError:
        return FormatError(
            describe(
                FMT,
                f"index {self.path!r}",
                detail=f"missing shard file: {file!r} at {url} (tensors "
                f"{_names(self._by_shard[file], 3)})",
            )  # fmt: skip
        )

    def _input(self, file: str) -> tuple[str, Any]:
        """``(format, input)`` of shard ``file`` for its format's ``inspect`` / ``verify``: the
        local path, or an opened remote source (the caller closes it). A shard that is an
        index is refused."""
        from .registry import detect, get, open_remote

        if not self._remote:
            full = os.path.join(self._dir, file)
            fmt = detect(full)
            if fmt == FMT:
                raise _index_shard_error(self.path, file)
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
                raise _index_shard_error(self.path, file)
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
        """The index's ``metadata`` (``total_size``...)."""
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


def _names(names: list[str], n: int) -> str:
    return ", ".join(map(repr, names[:n])) + (" ..." if len(names) > n else "")


def _lacking_error(file: str, lacking: list[str]) -> FormatError:
    return FormatError(
        describe(
            FMT,
            f"shard {file!r}",
            detail=f"lacks tensors the index puts in it: {_names(lacking, 10)}",
        )  # fmt: skip
    )


def open(path: Any, **options: Any) -> ShardedReader:  # noqa: A001
    """Open a sharded checkpoint's index (see :class:`ShardedReader`): a path, or an fsspec
    URL (``https://host/m.safetensors.index.json``, ``s3://bucket/m.zt.index.json``; the
    shards are the URLs beside it, ``storage_options=`` go to fsspec)."""
    from .core.source import is_remote

    if isinstance(path, str) and is_remote(path):
        return ShardedReader(path, **options)
    if getattr(path, "remote", False) and isinstance(getattr(path, "path", None), str):
        # a remote source tenfold.open opened and recognised by content: its bytes so far
        outer = _OPENING_SHARD.get()
        try:
            if outer is not None:  # a shard that is an index: refused before reading more
                raise _index_shard_error(*outer)
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
    from .registry import module_for

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
    from .core.report import ERROR, OK, WARNING, Report
    from .registry import module_for

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


# -- convert: a sharded checkpoint as one source, one source as shards ----------------------------
def open_source(path: str | os.PathLike[str], open_one: Any) -> Any:
    """A :class:`tenfold.convert.Source` over every shard of the index at ``path``
    (``open_one(shard_path)`` opens each shard's source; raw copies stay raw)."""
    r = ShardedReader(path)
    r.close()  # only the checked index is needed: the shards are opened as sources
    subs: dict[str, Any] = {}
    try:
        for file in r.shards:
            token = _OPENING_SHARD.set((r.path, file))
            try:
                sub = open_one(os.path.join(r._dir, file))
            finally:
                _OPENING_SHARD.reset(token)
            subs[file] = sub
            names = set(sub.names)
            lacking = [n for n in r._by_shard[file] if n not in names]
            if lacking:
                raise _lacking_error(file, lacking)
    except BaseException:
        for sub in subs.values():
            sub.close()
        raise
    return _ShardedSource(r, subs)


def convert_source(path: Any, limits: Any = None, label: Any = None, open_one: Any = None) -> Any:
    """The ``convert_source`` hook (:mod:`tenfold.conversion`): :func:`open_source`."""
    return open_source(path, open_one)


class _ShardedSource(Source):
    """The shards' sources as one (built by :func:`open_source`)."""

    def __init__(self, r: ShardedReader, subs: dict[str, Source]) -> None:
        self._subs = subs
        self._map = r._weight_map
        self._current: Source | None = None
        metas = [dict(s.metadata) for s in subs.values()]
        extras = ["shards with differing metadata"] if any(m != metas[0] for m in metas) else []
        fmts = {s.fmt for s in subs.values()}
        sizevars = [s.sizevars for s in subs.values() if s.sizevars]
        super().__init__(
            fmts.pop() if len(fmts) == 1 else FMT,
            list(self._map),
            lambda n: self._owner(n).spec(n),
            lambda n: self._owner(n).get(n),
            metadata=metas[0] if metas and not extras else {},
            sizevars=sizevars[0] if sizevars else None,
            uninitialized={k: v for s in subs.values() for k, v in s.uninitialized.items()},
            oinf_types={k: v for s in subs.values() for k, v in s.oinf_types.items()},
            path=r.path,
            extras=extras + [e for s in subs.values() for e in s.extras],
            refuse=[e for s in subs.values() for e in s.refuse],
        )
        if self.fmt != FMT:  # one format: its own metadata form (OINF's typed values)
            self.oinf_meta = next(iter(subs.values())).oinf_meta

    def _owner(self, name: str) -> Source:
        return self._subs[self._map[name]]

    def raw(self, name: str) -> tuple[int, int, str | None] | None:
        self._current = self._owner(name)
        return self._current.raw(name)

    def blocks(self, offset: int, nbytes: int) -> Iterator[memoryview]:
        assert self._current is not None  # raw(name) chose the shard
        return self._current.blocks(offset, nbytes)

    def close(self) -> None:
        subs, self._subs = self._subs, {}
        for sub in subs.values():
            sub.close()


def write_source(dst: Any, s: Any, max_shard_size: int | str, write_one: Any, *,
                 fsync: bool = True) -> list[str]:  # fmt: skip
    """Write the :class:`tenfold.convert.Source` ``s`` as shards (``write_one(path, sub)``
    writes one shard from a sub-source holding its tensors) plus the index."""

    if s.uninitialized:
        raise E.encode(
            f"tensor {next(iter(s.uninitialized))!r}",
            detail="no data (an OINF declaration), which a sharded checkpoint cannot hold",
        )
    sizes = {}
    for n in s.names:
        dt, shape = s.spec(n)
        sizes[n] = array_nbytes(_Spec(dt, shape))

    def one(p: str, group: list[str]) -> None:
        sub = s.subset(group)  # the whole source is closed by its owner
        try:
            write_one(p, sub)
        finally:
            sub.release()

    return write(dst, list(s.names), sizes, max_shard_size, one, fsync=fsync)


class _Spec:
    def __init__(self, dtype: Any, shape: Any) -> None:
        self.dtype, self.shape = dtype, shape
