"""safetensors in ``tenfold convert`` (the hooks of :mod:`tenfold.conversion`): its source
(its reader's tensors, raw ranges of the file where they have a span), the
suffix fallback, and its target (string metadata, one preallocated extent for the data)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...conversion import Target, WriteOptions, checkable, checked_blocks
from ...core.alloc import dense
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...tensor_source import Source, reader_source
from ._format import FORMAT


def source(
    path: Any, limits: Limits = DEFAULT_LIMITS, label: str | None = None, open_one: Any = None
) -> Source:
    """The tensors of a safetensors file (``convert_source``): its reader's, each tensor but
    the packed ``F4`` copied as a raw range of the file (:meth:`Reader.span`)."""
    from .reader import Reader

    return reader_source(FORMAT, Reader(path, limits=limits))


def claims(head: bytes, label: str) -> bool:
    """A file named ``.safetensors`` that does not look like one is read as one anyway
    (``convert_fallback``): the parser says what is wrong with it."""
    return label.lower().endswith(FORMAT.suffixes)


def target(fmt: Any, dst: Any, generation: Any = None) -> Target:
    """The target of a ``.safetensors`` destination (``convert_target``)."""
    return SafetensorsTarget(fmt, dst, generation)


class SafetensorsTarget(Target):
    """safetensors: string metadata in ``__metadata__``; raw tensors copied block by block."""

    def write(self, dst: Any, s: Source, md: dict[str, Any], bar: Any, opts: WriteOptions) -> None:
        from ...core import prealloc
        from ...core.atomic import atomic_write
        from ...core.buffers import byte_view
        from ...core.release import release
        from .writer import header, stored, tag_of

        specs = {}
        for n in s.names:
            dt, shape = s.spec(n)
            specs[n] = (tag_of(n, dt), shape)
        head, order = header(specs, md if md else None)
        with atomic_write(dst, fsync=opts.fsync) as f:
            f.write(head)
            f.flush()
            fd = f.fileno()
            prealloc.preallocate(fd, len(head), opts.total)  # one extent for the data
            handed = len(head)  # with fsync: what is before this is on its way to the disk
            for n in order:
                if opts.fsync and f.tell() - handed >= prealloc.WRITEBACK_STEP:
                    prealloc.start_writeback(fd, handed, f.tell() - handed)  # fsync waits less
                    handed = f.tell()
                raw = s.raw(n)
                if raw is not None and specs[n][0] != "F4" and checkable(raw.checksum):
                    for block in checked_blocks(s, n, raw):
                        f.write(block)
                    bar.update(raw.nbytes)
                    continue
                v = np.asarray(dense(s.get(n), n))
                f.write(byte_view(stored(specs[n][0], v)))
                bar.update(v.nbytes)
                release(v)
                del v  # before the next tensor is read: one decoded tensor at a time
