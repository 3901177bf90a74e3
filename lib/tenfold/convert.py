"""``tenfold convert SRC DST``: move tensors between formats, lossless or loud.

Readers: every tenfold format that holds tensors (detected by content), ``.npz`` and
``.safetensors``. Writers: the format the destination suffix names (``.zt .oinf .fold .mind
.wtxt .safetensors .npz``).

Rules
-----
* Names, dtypes, shapes (0-d and empty included) and the bits of every element are kept. A
  tensor the target cannot hold (e.g. bfloat16 into ``.npz``, float16 into ``.wtxt``) is
  refused before anything is written, naming the tensor, its dtype and the formats that can
  hold it (:mod:`tenfold.capabilities`). No file appears at ``dst`` on any error.
* File metadata travels too: safetensors ``__metadata__`` <-> FOLD index ``metadata`` <->
  OINF metadata (string values whose key and value fit OINF's ``[A-Za-z0-9._-]+``) <->
  zTensor 0.1.0 (a ``__metadata__`` map in the first tensor's entry, a custom key that other
  readers ignore) <-> zTensor v1 / v2 file attributes (v1 / v2 -> v2 keeps any value). What
  the target cannot hold (any metadata in ``.npz`` / ``.wtxt``, non-string values outside
  OINF, OINF sizevars outside OINF) is refused too; ``metadata=False`` (``--no-metadata``)
  drops it on purpose.
* OINF packed types (i4, t2, ...) become their unpacked int8/uint8 values elsewhere (exact
  values); OINF tensors without data exist only in OINF. Sparse zTensor tensors are densified
  for formats with no sparse layout.
* ``checksum`` is the per-tensor checksum of targets that have one (zTensor); FOLD and WTXT
  always checksum every chunk, and OINF, safetensors and npz have no per-tensor checksum
  (one given explicitly is refused). ``checksum=None`` keeps zTensor output byte-identical
  to ztensor 0.1.4. ``compress="zstd"`` compresses zTensor tensors and FOLD chunks,
  ``compress="deflate"`` npz members; a value the target cannot write is refused (OINF,
  safetensors and WTXT are never compressed).
* A conversion within one format is faithful by default (``checksum="keep"``,
  ``compress="keep"``): zTensor 0.1.0 -> zTensor keeps each tensor's encoding (raw or zstd)
  and checksum (none, crc32c or sha256), FOLD -> FOLD keeps zstd chunks when the source's
  tensor chunks are compressed, npz -> npz keeps deflate when its members are deflated.
  Between formats ``"keep"`` means ``crc32c`` and no compression. An explicit value applies
  to every tensor.

Each format's part lives in its own package, behind the hooks of its descriptor
(:mod:`tenfold.conversion`: ``convert_source``, ``convert_target``, ``convert_fallback``,
``convert_generation``); this module names no format.

Memory: tensors are read one at a time (views of memory-mapped zTensor, OINF, safetensors
and stored npz sources; WTXT arrays, deflated npz members and encoded zTensor v2 parts
decoded alone), written and released (:mod:`tenfold.core.release`), and every writer (the
zTensor v2 one included) takes one tensor at a time, so a conversion needs about the largest
tensor, not the file. Exceptions: compressed FOLD chunks
(compressed or decompressed whole) and the signature of a ``sign_all`` WTXT source (over all
its bytes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import registry
from ._dispatch import DEFAULT_CHECKSUM
from .capabilities import target_of, targets
from .conversion import (
    KEEP,
    SaveTarget,
    Target,
    WriteOptions,
    dict_source,
    generation_option,
    package_source,
)
from .core.alloc import dense as _dense
from .core.bounds import DEFAULT_LIMITS, Limits
from .errors import factory
from .tensor_source import Source

#: The errors of convert itself (the file it was given, an option), not of a format.
E = factory("tenfold")

__all__ = ["convert", "read_any", "write_any", "open_source", "Source"]


def open_source(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> Source:
    """A :class:`Source` for ``path`` (format detected by content, then by suffix).

    ``path`` may be an fsspec URL (:func:`tenfold.open`'s): convert copies every tensor, so
    the object is fetched whole into memory (one range request after its head; no local copy
    is written)."""
    from .core.mapped import open_regular
    from .core.source import is_remote

    if is_remote(path):
        return _remote_source(path, limits)
    in_dir = registry.detect_dir(path)  # a directory a format claims (its source takes the path)
    if in_dir is not None:
        return in_dir.hook("convert_source")(
            path,
            limits=limits,
            label=os.fspath(path),
            open_one=lambda p: open_source(p, limits=limits),
        )
    with os.fdopen(open_regular(path), "rb") as f:  # a FIFO is refused, never blocks
        head = f.read(registry.SNIFF_BYTES)
    return _source_for(path, head, limits)


def _buffer_sources() -> list[registry.Format]:
    """The formats whose source reads from a buffer as well as from a path."""
    return [f for f in registry.formats() if "convert_source" in f.hooks and not f.opens_path]


def _remote_source(url: Any, limits: Limits) -> Source:
    try:
        name, mf = registry.open_remote(url, tail_first=False)
    except IsADirectoryError:  # a prefix a format of directories owns (its source takes it)
        owner = registry.detect_url_dir(url) if isinstance(url, str) else None
        if owner is None or "convert_source" not in owner.hooks:
            raise
        return owner.hook("convert_source")(
            url, limits=limits, label=url, open_one=lambda p: open_source(p, limits=limits)
        )
    try:
        data = mf.u8(0, mf.size, "the whole object")
    finally:
        mf.close()
    buffered = _buffer_sources()
    if registry.get(name) not in buffered:
        raise E.unsupported(
            str(mf.path),
            detail=f"{name} is not a tensor format (convert reads a remote "
            f"{', '.join(f.name for f in buffered)} file)",
        )
    src = _source_for(data, data[: registry.SNIFF_BYTES].tobytes(), limits, label=str(mf.path))
    src.drop_raw()  # no raw pread copies from a buffer: every tensor goes through get()
    return src


def _source_for(path: Any, head: bytes, limits: Limits, label: str | None = None) -> Source:
    if label is None:
        label = os.fspath(path)
    fmt = registry.detect_bytes(head)
    if fmt is None:  # a format may still claim it (by its suffix) so that its parser explains
        fmt = next(
            (f for f in registry.formats()
             if (claims := f.hook("convert_fallback")) is not None and claims(head, label)),
            None,
        )  # fmt: skip
        if fmt is None:
            known = ", ".join(dict.fromkeys(s for f in registry.formats() for s in f.suffixes))
            raise E.unsupported(
                label,
                detail="cannot read: not a format tenfold knows by its content "
                f"(tensor formats: {known})",
            )
    hook = fmt.hook("convert_source")
    if hook is None:
        if not fmt.tensors or not isinstance(path, (str, os.PathLike)):
            raise E.unsupported(label, detail=f"{fmt.description} is not a tensor format")
        return package_source(fmt, path)
    return hook(path, limits=limits, label=label,
                open_one=lambda p: open_source(p, limits=limits))  # fmt: skip


def read_any(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Tensors of ``path`` as owned arrays (at most ``limits.decode_budget`` bytes of them)."""
    budget = limits.budget()
    with open_source(path, limits=limits) as src:
        src.budget = budget
        return {n: _owned(_dense(src.get(n), n, budget)) for n in src.names}


def _owned(v: Any) -> np.ndarray:
    """An owned copy of ``v``; a zero-itemsize array (``|V0``: no bytes, any number of
    elements) is made, not copied: NumPy would copy it element by element."""
    a = np.asarray(v)
    if a.dtype.itemsize == 0:
        return np.empty(a.shape, a.dtype)
    return np.array(a)


# -- checks before anything is written --------------------------------------------------------
def _target(path: str | os.PathLike[str]) -> registry.Format:
    """The format a destination's suffix names, from the registry as it is now (a format
    registered after this module was imported included)."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    known = ", ".join("/".join(s) for s, _ in targets().values())
    holder = next((f for f in registry.formats() if not f.tensors and suffix in f.suffixes), None)
    if holder is not None:
        raise E.unsupported(
            os.fspath(path),
            detail=f"{suffix} is not a tensor format ({holder.holds}); tensor formats: {known}",
        )
    name = target_of(path)
    if name is None:
        raise E.unsupported(
            os.fspath(path), field="suffix", expected=known, got=suffix or None,
            message=f"tenfold: {os.fspath(path)}: unknown suffix; expected one of {known}",
        )  # fmt: skip
    return registry.get(name)


def _target_for(
    dst: Any, fmt: registry.Format, generation: Any = None, max_shard_size: Any = None
) -> Target:
    """The :class:`Target` writing ``dst`` in ``fmt``. ``generation`` (``zt_generation``) is
    read by the format that owns the option (its ``convert_generation`` hook); a generation
    other than its default needs a destination of that format."""
    gen = generation_option(dst, fmt, generation, max_shard_size)
    make = fmt.hook("convert_target")
    return SaveTarget(fmt, dst, gen) if make is None else make(fmt, dst, gen)


# -- writing ---------------------------------------------------------------------------------
def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    checksum: str | None = KEEP,
    compress: str | None = KEEP,
    level: int = 3,
    threads: int = 0,
    metadata: bool = True,
    fsync: bool = True,
    progress: bool | None = False,
    zt_generation: Any = None,
    max_shard_size: int | str | None = None,
) -> int:
    """Copy every tensor (and the metadata) of ``src`` into a new file ``dst``; return how
    many tensors. See the module docstring for the rules.

    ``threads``: ``.fold``: zstd workers per chunk; ``.zt`` with ``compress="zstd"``: zstd
    workers per tensor (0, the default, writes the single-threaded frames pyfolds and
    ztensor 0.1.4 write; -1: one per CPU); ``.wtxt``: worker threads (0 or -1: one per CPU
    this process may use; the bytes are the same for any count, one tensor in memory). Other
    targets copy raw bytes at memory speed and ignore it.

    ``zt_generation`` chooses the zTensor generation of a ``.zt`` destination: ``0``/``"0.1.0"``
    (the default) or ``2``/``"v2"``: canonical v2 (:class:`tenfold.ztensor.V2Writer`), one
    tensor at a time; ``compress="zstd"`` writes ``zt.zstd-seekable/1`` parts (not canonical).
    Every v2 part carries an xxh3 digest, so ``checksum`` other than ``"keep"`` is refused.

    ``src`` may be a sharded checkpoint's index (:mod:`tenfold.sharded`); ``max_shard_size``
    writes ``dst`` as shards plus an index (one file when everything fits).
    """
    target = _target_for(dst, _target(dst), zt_generation, max_shard_size)
    _check_option("compress", compress, (None, "zstd", "deflate", KEEP))
    target.check_options(checksum, compress)  # what this target cannot honour
    _check_option("checksum", checksum, (None, "crc32c", "sha256", KEEP))
    fmt = target.name
    _check_not_replacing(src, dst)
    with open_source(src) as s:
        if s.refuse:
            raise factory(fmt).encode(
                os.fspath(src),
                detail=f"{s.refuse[0]}, which tenfold cannot write to any format yet",
                message=f"{fmt}: {s.refuse[0]}, which tenfold cannot write to any format yet",
            )
        if s.extras and metadata:
            raise factory(fmt).encode(
                os.fspath(src),
                message=f"{fmt}: the source also holds {', '.join(s.extras)}, which convert "
                "does not copy (tensors and metadata only); pass metadata=False "
                "(--no-metadata) to convert the tensors alone",
            )
        target.check(s)
        md = target.metadata(s) if metadata else {}
        if not metadata:
            s.sizevars = {}
        checksum, compress = target.resolve(s, checksum, compress)
        opts = dict(checksum=checksum, compress=compress, level=level, threads=threads,
                    fsync=fsync)  # fmt: skip
        if max_shard_size is not None and target.shards:
            from .sharded import write_source

            write_source(dst, s, max_shard_size,
                         lambda p, sub: _write(target, p, sub, md, progress, **opts),
                         fsync=fsync, metadata=md)  # fmt: skip
            return len(s.names)
        _write(target, dst, s, md, progress, **opts)
        if isinstance(dst, (str, os.PathLike)):
            from .sharded import replace_layout

            replace_layout(dst, [os.fspath(dst)])  # an earlier sharded save to dst: gone
        return len(s.names)


def _check_not_replacing(src: Any, dst: Any) -> None:
    """Refuse, before anything is written, a ``dst`` whose save would replace ``src``: a save
    replaces the checkpoint at its path whatever its layout (:func:`tenfold.sharded.
    replace_layout`), so ``convert model-00001-of-00002.x model.x`` would delete the shard
    being read and the others, and ``convert model.x.index.json model.x`` every input."""
    if not isinstance(src, (str, os.PathLike)) or not isinstance(dst, (str, os.PathLike)):
        return
    from .sharded import layout_files

    for f in layout_files(dst):
        try:
            same = os.path.samefile(f, src)
        except OSError:  # a remote source, a dangling link: not a file a save removes
            continue
        if same:
            raise factory("convert").encode(
                os.fspath(dst),
                detail=f"writing it replaces the checkpoint at that path, which {os.fspath(src)!r} "
                "is part of (a save removes the other layout's files); write to another path",
            )


def _check_option(name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    """Refuse a ``convert`` option value outside ``allowed`` (an :class:`EncodeError`)."""
    if value not in allowed:
        shown = ", ".join(map(repr, allowed[:-1])) + f" or {allowed[-1]!r}"
        raise factory("convert").encode(
            name, field=name, expected=shown, got=value,
            message=f"convert: {name} must be {shown}, got {value!r}",
        )  # fmt: skip


def _write(
    target: Target, dst: Any, s: Source, md: dict[str, Any], show: bool | None, **opts: Any
) -> None:
    from .core.progress import ByteProgress

    total = 0
    for n in s.names:
        dt, shape = s.spec(n)
        total += int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    bar = ByteProgress(total, desc=os.path.basename(os.fspath(dst)), show=show)
    with bar:
        target.write(dst, s, md, bar, WriteOptions(total=total, **opts))


def write_any(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    metadata: Mapping[str, Any] | None = None,
    checksum: str | None = DEFAULT_CHECKSUM,
    compress: str | None = None,
    level: int = 3,
    threads: int = 0,
    fsync: bool = True,
    zt_generation: Any = None,
) -> None:
    """Write a dict of arrays (and string ``metadata``) in the format ``path``'s suffix
    names, with the rules of :func:`convert` (``zt_generation`` as there; a ``checksum``
    given explicitly is refused where the target cannot honour it, as by :func:`convert`).
    Like every save to a path, it replaces an earlier sharded checkpoint there (its index and
    shards go: :func:`tenfold.sharded.replace_layout`)."""
    target = _target_for(path, _target(path), zt_generation)
    target.check_options(KEEP if checksum is DEFAULT_CHECKSUM else checksum, compress)
    s = dict_source("dict", {k: _dense(v, k) for k, v in tensors.items()}, metadata=metadata)
    target.check(s)
    md = target.metadata(s)
    _write(target, path, s, md, False, checksum=checksum, compress=compress, level=level,
           threads=threads, fsync=fsync)  # fmt: skip
    if isinstance(path, (str, os.PathLike)):
        from .sharded import replace_layout

        replace_layout(path, [os.fspath(path)])  # an earlier sharded save to path: gone
