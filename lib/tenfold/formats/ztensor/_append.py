"""Append to a zTensor v2 file in place (spec §2.5 generations), crash-safe.

New parts go after the current end of file (at the next multiple of ``align``), then a new
manifest (old objects + new ones) and a new footer; no existing byte is rewritten. The order of
the writes keeps the file valid at every instant, so a process killed at any point leaves a
file that opens to either the old or the new manifest:

1. the *old* footer is written at the position the new footer will have (``N - 40``): the file
   grows to its final size, and its last 40 bytes still point at the old manifest, which is
   untouched; the bytes in between are a hole (zeros), i.e. padding;
2. the new blobs and the new manifest are written into that hole, and synced: the file still
   opens to the old manifest (the new bytes are unreferenced blobs, which the spec allows);
3. the new footer overwrites the copy of the old one (one 40-byte write), and is synced.

One append at a time: the appender takes an exclusive lock on the file
(:class:`tenfold.core.locking.FileLock`, an ``flock``) before it reads the footer and manifest,
and keeps it until the new footer is written and synced (or the append is abandoned). Two
appenders started together therefore run one after the other, the second reading the footer
the first wrote; none of them can lose what another added. By default a second appender waits
for the first; ``lock_timeout`` (seconds, 0: do not wait) makes it raise
:class:`~tenfold.errors.LockedError` instead once that time has passed, with the file
unchanged. An appender object holds the lock from its creation to its :meth:`close`, so keep
it open no longer than needed. The lock is advisory: it excludes tenfold appenders (in any
thread or process), not programs writing the file without it.

With ``fsync=True`` each sync is an ``fdatasync`` (``fsync`` where the platform has no
``fdatasync``): it flushes the data and the file size; only the modification time may be
older after a power loss.

Parts are placed exactly as ztensor 2.1.2's ``Writer(path, append=True, canonical=False)`` places
them, so for the same input the result is the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ... import _kernels
from ...core.buffers import byte_view
from ...core.checksums import xxh3_64
from ...core.locking import FileLock
from ...core.mapped import MappedFile
from ...errors import EncodeError, describe
from . import _dcbor
from ._v2spec import ALIGN, CANONICAL_ALIGN, FOOTER_SIZE
from .v2reader import V2Reader
from .v2writer import V2Writer, footer_bytes

__all__ = ["V2Appender", "append"]

FMT = "zt"


class _Pending:
    """Collects the new bytes (references to the caller's arrays) at their file offsets."""

    def __init__(self, start: int) -> None:
        self.pos = start
        self.chunks: list[tuple[int, memoryview]] = []

    def write(self, data: Any) -> int:
        mv = byte_view(data)
        if mv.nbytes:
            self.chunks.append((self.pos, mv))
        self.pos += mv.nbytes
        return mv.nbytes

    def flush(self) -> None:
        pass


class V2Appender(V2Writer):
    """Add objects to an existing v2 file (``zt.Writer(path, generation=2, append=True)``).

    Same ``add``/``add_object``/``set_attributes`` as :class:`V2Writer` (never canonical: names
    in any order, encodings allowed); nothing reaches the file before :meth:`close`. A name
    already in the file is refused.

    The appender holds the file's exclusive lock from its creation to :meth:`close` or
    :meth:`abort` (see the module doc): another appender of the same file waits for it, or
    raises :class:`~tenfold.errors.LockedError` after ``lock_timeout`` seconds (None, the
    default: wait as long as it takes; 0: do not wait).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        align: int | None = None,
        attributes: Mapping[str, Any] | None = None,
        fsync: bool = True,
        canonical: bool = False,
        lock_timeout: float | None = None,
    ) -> None:
        if canonical:
            raise EncodeError(
                describe(
                    FMT, "writer", field="canonical", detail="an appended file is not canonical"
                )
            )
        align = CANONICAL_ALIGN if align is None else align
        if type(align) is not int or align <= 0 or align % ALIGN:
            raise EncodeError(
                describe(FMT, "writer", field="align", expected="a multiple of 4096", got=align)
            )
        self.path = os.fspath(path)
        self.canonical = False
        self.align = align
        self.fsync = fsync
        # Locked before anything is read: what is read is what the previous append left.
        self._lock = FileLock(self.path, timeout=lock_timeout, write=True, fmt=FMT)
        try:
            self._read_current()
        except BaseException:
            self._lock.release()
            raise
        self._attributes = None  # the old ones are kept as they are encoded unless replaced
        if attributes is not None:
            self.set_attributes(attributes)
        self._f = _Pending(self._old_size)  # type: ignore[assignment]
        self._pos = self._old_size
        self._objects = {}
        self._last = None
        self._blobs = {}
        self._blob_bytes: dict[int, list[memoryview]] = {}
        self._closed = False
        self._failed = None

    def _read_current(self) -> None:
        """The footer, manifest and names of the locked file (through its descriptor, so even
        a file renamed over the path meanwhile cannot be read in its place)."""
        fd = os.dup(self._lock.fd)
        mf = MappedFile(self.path, fmt=FMT, fd=fd)  # owns fd from here
        with V2Reader(mf, verify_checksums=False) as r:  # validates the generation
            if r.data_shard:
                raise EncodeError(describe(FMT, self.path, detail="cannot append to a data shard"))
            self._old_size = r.size
            self._old_footer = r.file.bytes(r.size - FOOTER_SIZE, FOOTER_SIZE, "footer")
            moff, mlen = r.manifest_blob
            self._old_manifest = _OldManifest(r.file.bytes(moff, mlen, "manifest"))
            self._old_names = frozenset(r)

    def _pad_to_align(self) -> int:
        # The gap is a hole of the grown file (zeros): nothing to write.
        target = -(-self._pos // self.align) * self.align
        self._pos = self._f.pos = target  # type: ignore[attr-defined]
        return target

    def _check_name(self, name: object) -> None:
        super()._check_name(name)
        if name in self._old_names:
            raise EncodeError(
                describe(FMT, f"object {name!r}", field="name", detail="already in the file")
            )

    def _find(self, key: tuple[int, int], data: list[np.ndarray]) -> int | None:
        for off, length in self._blobs.get(key, ()):
            if length == 0:
                return off
            old = b"".join(bytes(m) for m in self._blob_bytes.get(off, ()))
            if old == b"".join(bytes(byte_view(p)) for p in data):
                return off
        return None

    def _write_part(self, arr, dtype, ltype, enc):  # type: ignore[no-untyped-def]
        before = len(self._f.chunks)  # type: ignore[attr-defined]
        part = super()._write_part(arr, dtype, ltype, enc)
        off = part["blob"][0]
        new = self._f.chunks[before:]  # type: ignore[attr-defined]
        if new and off not in self._blob_bytes:
            self._blob_bytes[off] = [m for _, m in new]
        return part

    def close(self) -> None:
        """Write the new generation (see the module doc for the crash-safe order), then
        release the file's lock."""
        if self._closed:
            return
        if self._failed is not None:
            self.abort()
            raise ValueError(f"zt: appender failed earlier ({self._failed}); file unchanged")
        self._closed = True
        try:
            self._commit()
        finally:
            self._release()
            self._lock.release()

    def _commit(self) -> None:
        old = self._old_manifest
        if not self._objects and self._attributes is None and old.attributes is None:
            return
        manifest = old.with_objects(self._objects, self._attributes)
        moff = -(-self._pos // self.align) * self.align
        end = moff + len(manifest) + FOOTER_SIZE
        new_footer = footer_bytes(moff, len(manifest), xxh3_64(manifest))
        fd = self._lock.fd  # the locked file, whatever the path names now
        size = os.fstat(fd).st_size
        if size != self._old_size:  # changed by something that does not take the lock
            raise EncodeError(
                describe(
                    FMT,
                    self.path,
                    detail="file changed since it was opened for appending",
                    expected=self._old_size,
                    got=size,
                )
            )
        _hook("start")
        os.pwrite(fd, self._old_footer, end - FOOTER_SIZE)  # 1: grow, old footer at EOF
        _hook("grown")
        for off, mv in self._f.chunks:  # type: ignore[attr-defined]
            _pwrite_all(fd, mv, off)
            _hook("blob")
        _pwrite_all(fd, memoryview(manifest), moff)
        if self.fsync:
            _datasync(fd)
        _hook("written")
        os.pwrite(fd, new_footer, end - FOOTER_SIZE)  # 3: switch generations
        if self.fsync:
            _datasync(fd)
        _hook("done")

    def abort(self) -> None:
        """Give the append up (nothing was written) and release the file's lock."""
        self._closed = True
        self._release()
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()


_OBJECTS_KEY = _dcbor.encode("objects")
_ATTRIBUTES_KEY = _dcbor.encode("attributes")


class _OldManifest:
    """The current manifest's encoded entries, to build the next one from without decoding
    and encoding again what does not change.

    The manifest was validated when the file was opened, so its bytes are the deterministic
    encoding of its value: the new manifest, made of the old entries' bytes and the new
    entries' encodings, sorted by their keys' bytes, is exactly ``_dcbor.encode`` of the
    merged value (a test checks it).
    """

    def __init__(self, raw: bytes) -> None:
        spans = _kernels.load("ztplan").map_spans
        self.root: list[tuple[bytes, bytes]] = []  # (key, key + value) of every root entry
        self.objects: list[tuple[bytes, bytes]] = []
        self.attributes: bytes | None = None
        for k, v, end in spans(raw, 0, _dcbor.MAX_DEPTH)[0]:
            key = raw[k:v]
            if key == _OBJECTS_KEY:
                inner = spans(raw, v, _dcbor.MAX_DEPTH)[0]
                self.objects = [(raw[a:b], raw[a:c]) for a, b, c in inner]
            else:
                self.root.append((key, raw[k:end]))
                if key == _ATTRIBUTES_KEY:
                    self.attributes = raw[k:end]

    def with_objects(self, objects: Mapping[str, Any], attributes: Any | None) -> bytes:
        """The manifest with ``objects`` added (names not in it yet) and the file attributes
        replaced by ``attributes`` unless it is None."""
        entries = list(self.objects)
        for name, entry in objects.items():
            key = _dcbor.encode(name)
            entries.append((key, key + _dcbor.encode(entry)))
        entries.sort(key=_first)
        objs = _map(entries)
        root = [(k, e) for k, e in self.root if attributes is None or k != _ATTRIBUTES_KEY]
        root.append((_OBJECTS_KEY, _OBJECTS_KEY + objs))
        if attributes is not None:
            root.append((_ATTRIBUTES_KEY, _ATTRIBUTES_KEY + _dcbor.encode(attributes)))
        root.sort(key=_first)
        return _map(root)


def _first(entry: tuple[bytes, bytes]) -> bytes:
    return entry[0]


def _map(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A CBOR map of already encoded, sorted ``(key, key + value)`` entries."""
    return _dcbor.ehead(5, len(entries)) + b"".join(e for _, e in entries)


def _datasync(fd: int) -> None:
    """Make the written bytes durable: ``fdatasync`` (the new size is part of what it
    flushes; a timestamp alone does not cost a journal commit), ``fsync`` where it is missing."""
    getattr(os, "fdatasync", os.fsync)(fd)


def _pwrite_all(fd: int, mv: memoryview, off: int) -> None:
    done = 0
    while done < mv.nbytes:
        done += os.pwrite(fd, mv[done : done + (1 << 30)], off + done)


def _hook(step: str) -> None:
    """Test hook: ``TENFOLD_ZT_APPEND_CRASH=<step>`` ends the process abruptly at that step."""
    if os.environ.get("TENFOLD_ZT_APPEND_CRASH") == step:
        os._exit(9)


def append(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    encoding: str | None = None,
    align: int | None = None,
    fsync: bool = True,
    lock_timeout: float | None = None,
) -> None:
    """Add ``tensors`` (name -> array) to the v2 file ``path`` without rewriting it.

    Holds the file's exclusive lock throughout (see the module doc): an append that starts
    while another is under way waits for it to finish, or raises
    :class:`~tenfold.errors.LockedError` (file unchanged) once ``lock_timeout`` seconds have
    passed (None, the default: wait as long as it takes; 0: do not wait). Every append that
    returns is in the file.
    """
    with V2Appender(path, align=align, fsync=fsync, lock_timeout=lock_timeout) as w:
        for name, value in tensors.items():
            w.add(name, value, encoding=encoding)
