"""safetensors, read and written without the ``safetensors`` package.

Layout: u64 little-endian header length ``N``; ``N`` bytes of UTF-8 JSON (an object mapping each
tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}``, plus an optional
``"__metadata__"`` object of strings), padded with spaces to a multiple of 8; then the data
buffer, offsets relative to its start. Writing lays tensors out as the ``safetensors`` package
does (by decreasing alignment, then name; non-ASCII names as UTF-8), so the bytes are identical.

The parser (:mod:`._parse`, whose names this module re-exports) works on any buffer (a file's
memory map, a FOLD ``STEN`` chunk); every offset is validated before a view is made, and tensors
are zero-copy read-only views unless ``copy``. The dtype tags live in :mod:`._dtypes`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ...core.atomic import atomic_write
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.buffers import byte_view
from ...core.dtypes import canonical
from ...core.mapped import MappedFile
from ...errors import EncodeError, describe, factory

# re-exported: the names this module had before the parser and the dtype tables moved out
from ._dtypes import (  # noqa: F401
    DTYPES,
    FMT,
    PACKED_BITS,
    RANK,
    TAG_OF_DTYPE,
    pack_f4,
    stored_nbytes,
    unpack_f4,
)
from ._format import MAX_HEADER  # noqa: F401
from ._parse import (  # noqa: F401
    Entry,
    header_length,
    parse,
    parse_header,
    parse_metadata,
    tensor_of,
)

__all__ = ["read_safetensors", "write_safetensors", "parse", "encode", "to_bytes", "DTYPES"]


def tag_of(name: str, dtype: Any, *, fmt: str = FMT) -> str:
    """The safetensors dtype tag of ``dtype`` (EncodeError naming the tensor when none)."""
    try:
        return TAG_OF_DTYPE[canonical(dtype)]
    except Exception:
        from ...capabilities import check_dtype

        check_dtype("safetensors", name, dtype)  # raises, naming the formats that can
        raise  # pragma: no cover


#: the header key that holds the file metadata: no tensor can have this name
RESERVED = "__metadata__"


def check_name(name: object, *, fmt: str = FMT) -> str:
    """``name`` when it can be a tensor name of a safetensors header, else :class:`EncodeError`
    (``fmt`` is the format the user asked for: a FOLD file's tensors live in a safetensors
    chunk). A name is any string but ``"__metadata__"``, the header's metadata key.

    >>> check_name("w")
    'w'
    """
    if not isinstance(name, str):
        raise factory(fmt).name_not_str("tensor", name)
    if name == RESERVED:
        raise EncodeError(
            describe(
                fmt,
                f"tensor {name!r}",
                field="name",
                detail="reserved: the safetensors header keeps the file metadata under this key"
                if fmt == FMT
                else "reserved: the tensors are stored as a safetensors chunk, whose header "
                "keeps metadata under this key",
                expected="any other string",
                got=repr(name),
            )
        )
    return name


def header(
    specs: Mapping[str, tuple[str, tuple[int, ...]]],
    metadata: Mapping[str, str] | None = None,
    *,
    fmt: str = FMT,
) -> tuple[bytes, list[str]]:
    """The length-prefixed, space-padded header for ``name -> (tag, shape)`` and the names in
    data order (as the ``safetensors`` package: decreasing dtype rank, then name).

    ``metadata`` keys are written sorted (the package writes them in hash order, which varies
    from run to run; with at most one key the bytes are identical).
    """
    for name in specs:
        check_name(name, fmt=fmt)
    order = sorted(specs, key=lambda k: (-RANK[specs[k][0]], k.encode("utf-8")))
    head: dict[str, Any] = {}
    if metadata is not None:
        md = {}
        for k in sorted(metadata):
            v = metadata[k]
            if not isinstance(k, str) or not isinstance(v, str):
                raise EncodeError(
                    describe(
                        fmt,
                        f"metadata {k!r}",
                        detail="__metadata__ holds strings only",
                        expected="str",
                        got=type(v).__name__ if isinstance(k, str) else type(k).__name__,
                    )
                )
            md[k] = v
        head["__metadata__"] = md
    pos = 0
    for name in order:
        tag, shape = specs[name]
        numel = 1
        for d in shape:
            numel *= int(d)
        if tag in PACKED_BITS and (numel * PACKED_BITS[tag]) % 8:
            raise EncodeError(
                describe(
                    fmt,
                    f"tensor {name!r}",
                    field="shape",
                    detail=f"{tag} packs {8 // PACKED_BITS[tag]} elements per byte; "
                    "the element count must fill whole bytes",
                    expected=f"a multiple of {8 // PACKED_BITS[tag]} elements",
                    got=f"{numel} (shape {list(shape)})",
                )
            )
        n = stored_nbytes(tag, numel)
        head[name] = {
            "dtype": tag,
            "shape": [int(d) for d in shape],
            "data_offsets": [pos, pos + n],
        }
        pos += n
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, order


def stored(tag: str, arr: np.ndarray) -> np.ndarray:
    """``arr`` as the bytes the file holds: little-endian, C order, packed for ``F4``; 0-d
    arrays keep their shape (``np.ascontiguousarray`` would make them 1-d)."""
    if tag in PACKED_BITS:
        return pack_f4(arr)
    want = DTYPES[tag]
    if arr.dtype == want and arr.flags.c_contiguous:
        return arr
    return np.asarray(np.require(arr, dtype=want, requirements="C")).reshape(arr.shape)


def encode(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *, fmt: str = FMT
) -> tuple[bytes, list[np.ndarray]]:
    """The length-prefixed, padded header and the arrays in file order."""
    arrays: dict[str, np.ndarray] = {}
    tags: dict[str, str] = {}
    for name, a in tensors.items():
        check_name(name, fmt=fmt)
        arr = np.asarray(a)
        tags[name] = tag_of(name, arr.dtype, fmt=fmt)
        arrays[name] = arr
    head, order = header({k: (tags[k], arrays[k].shape) for k in arrays}, metadata, fmt=fmt)
    return head, [stored(tags[n], arrays[n]) for n in order]


def pieces(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *, fmt: str = FMT
) -> tuple[int, Iterator[memoryview]]:
    """The size of the safetensors bytes of ``tensors`` and an iterator over them, one
    tensor at a time: header first, then each array's bytes, fetched (``np.asarray``) only
    when its turn comes and released (:func:`tenfold.core.release.release`) after. Values
    need ``dtype`` and ``shape`` up front (arrays, or lazy objects with ``__array__``)."""
    from ...core.release import release

    specs: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, a in tensors.items():
        check_name(name, fmt=fmt)
        if not hasattr(a, "dtype") or not hasattr(a, "shape"):
            a = np.asarray(a)
        specs[name] = (tag_of(name, a.dtype, fmt=fmt), tuple(int(d) for d in a.shape))
    head, order = header(specs, metadata, fmt=fmt)
    size = len(head)
    for tag, shape in specs.values():
        numel = 1
        for d in shape:
            numel *= d
        size += stored_nbytes(tag, numel)

    def gen() -> Iterator[memoryview]:
        yield memoryview(head)
        for n in order:
            arr = np.asarray(tensors[n])
            yield byte_view(stored(specs[n][0], arr))
            release(arr)
            del arr
            # an empty piece: the consumer drops its view of this tensor before the next
            # one is fetched, so only one tensor is ever held
            yield memoryview(b"")

    return size, gen()


def to_bytes(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None, *, fmt: str = FMT
) -> bytes:
    """A whole safetensors file in memory (for embedding, e.g. a FOLD ``STEN`` chunk)."""
    head, arrays = encode(tensors, metadata, fmt=fmt)
    return b"".join([head] + [bytes(byte_view(a)) for a in arrays])


def read_safetensors(
    path: Any, *, copy: bool = False, limits: Limits = DEFAULT_LIMITS
) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file (views of the file's memory map unless ``copy``;
    copies count against ``limits.decode_budget``)."""
    mf = MappedFile(path, fmt=FMT)
    try:
        return parse(mf.buffer(), copy=copy, budget=limits.budget())
    finally:
        mf.close()  # views keep the mapping alive


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    metadata: Mapping[str, str] | None = None,
    *,
    fsync: bool = True,
) -> None:
    """Write ``tensors`` as safetensors, atomically, streaming each array from its memory
    (with ``fsync``, what is written is handed to the disk as it goes: the fsync waits less)."""
    from ...core import prealloc

    head, arrays = encode(tensors, metadata)
    with atomic_write(path, fsync=fsync) as f:
        f.write(head)
        handed = len(head)
        for a in arrays:
            f.write(byte_view(a))
            if fsync and f.tell() - handed >= prealloc.WRITEBACK_STEP:
                prealloc.start_writeback(f.fileno(), handed, f.tell() - handed)
                handed = f.tell()
