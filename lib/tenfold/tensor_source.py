"""The source a conversion reads: a file's tensors, one at a time (:class:`Source`).

:mod:`tenfold.convert` builds one per format and writes from it; :mod:`tenfold.sharded`
joins the sources of a checkpoint's shards into one. Here, below both, so that neither
imports the other for it (``tenfold.convert.Source`` is this class).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

__all__ = ["Source"]

#: Block size of raw copies: small enough to stay in the CPU cache between read, checksum and
#: write (measured: 1 MiB copies 2 GiB as fast as `cp`; 64 MiB blocks or a memory map are
#: slower).
_BLOCK = 1 << 20


class Source:
    """A source file's tensors, read one at a time: ``names``, ``spec(name)`` -> (dtype,
    shape) without reading data, ``get(name)``, ``metadata``, ``sizevars``, ``close()``."""

    def __init__(
        self,
        fmt: str,
        names: list[str],
        spec: Callable[[str], tuple[np.dtype, tuple[int, ...]]],
        get: Callable[[str], Any],
        *,
        metadata: Mapping[str, Any] | None = None,
        sizevars: Mapping[str, int] | None = None,
        close: Callable[[], None] | None = None,
        oinf_meta: Mapping[str, Any] | None = None,
        uninitialized: Mapping[str, tuple[str, tuple[int, ...]]] | None = None,
        oinf_types: Mapping[str, str] | None = None,
        raw: Callable[[str], tuple[int, int, str | None] | None] | None = None,
        path: Any = None,
        extras: list[str] | None = None,
        refuse: list[str] | None = None,
    ) -> None:
        self.fmt = fmt
        #: what the source holds besides tensors and metadata (e.g. FOLD JSON chunks): convert
        #: refuses unless metadata=False says to drop it
        self.extras = list(extras or [])
        #: what no target can hold exactly (e.g. OINF v2 quantization): always refused
        self.refuse = list(refuse or [])
        self.names = names
        self.spec = spec
        self.get = get
        self.metadata = dict(metadata or {})
        self.sizevars = dict(sizevars or {})
        self.oinf_meta = oinf_meta  # typed OINF metadata (kept exactly OINF -> OINF)
        self.uninitialized = dict(uninitialized or {})
        self.oinf_types = dict(oinf_types or {})  # packed OINF element types by name
        self._raw = raw
        self._path = path
        self._fd: int | None = None
        self._buf: memoryview | None = None
        self._close = close
        #: a decode budget for sources that decode (npz): set, every array is charged to it
        self.budget: Any = None
        #: ``stored(name) -> (encoding, checksum algorithm or None)`` of a zTensor 0.1.0
        #: source's tensor: what a faithful zTensor -> zTensor conversion keeps
        self.stored: Callable[[str], tuple[str, str | None]] | None = None
        #: the source's tensors are compressed (FOLD zstd chunks, deflated npz members)
        self.compressed = False
        #: a zTensor source's generation ("0.1.0", "v1", "v2"); None for other formats
        self.generation: str | None = None

    def raw(self, name: str) -> tuple[int, int, str | None] | None:
        """``(file offset, nbytes, stored checksum)`` when the tensor's bytes in the source
        file are exactly its little-endian C-order bytes (then :meth:`blocks` copies them
        without mapping the file), else None."""
        if self._raw is None or self._path is None:
            return None
        return self._raw(name)

    def drop_raw(self) -> None:
        """No raw copies from here on (:meth:`raw` gives None): every tensor goes through
        ``get`` (for a source over a buffer, which has no file to read ranges from)."""
        self._path = None

    def blocks(self, offset: int, nbytes: int) -> Iterator[memoryview]:
        """The file's bytes ``[offset, offset + nbytes)`` in blocks read into one reused
        buffer (each block is valid until the next is requested)."""
        from .errors import TruncatedError

        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            self._buf = memoryview(bytearray(_BLOCK))
        assert self._buf is not None
        end = offset + nbytes
        while offset < end:
            k = os.preadv(self._fd, [self._buf[: min(_BLOCK, end - offset)]], offset)
            if k <= 0:
                raise TruncatedError(
                    f"{self.fmt}: {os.fspath(self._path)}: ends at offset {offset}; "
                    f"expected {end - offset} more bytes"
                )
            yield self._buf[:k]
            offset += k

    def subset(self, names: list[str]) -> Source:
        """A shallow copy of this source holding only ``names``: it reads through the same
        callables but owns none of them (its :meth:`close` closes only what its own
        :meth:`blocks` opened; this source stays for its owner to close)."""
        import copy

        sub = copy.copy(self)
        sub.names = list(names)
        sub._fd = None
        sub._close = None
        return sub

    def release(self) -> None:
        """Close the descriptor :meth:`blocks` opened, if any (a later :meth:`blocks` opens
        another); the source stays open."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self.release()
        if self._close is not None:
            self._close()
            self._close = None

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
