"""NumPy ``.npz`` archives: read without pickle and without trusting any size, written atomically.

One parser serves ``.npz`` files and FOLD ``NPZ0`` chunks. Nothing in the archive is trusted
before it is checked: encrypted members and compression methods ``np.savez`` never writes are
refused; a member's declared size must be consistent with its stored size (equal when stored,
within deflate's maximum ratio when deflated) and with its ``.npy`` header (shape checked as
every reader checks shapes); and each array's bytes are charged to the call's decode budget
before they are allocated, so a small archive cannot make one call allocate without bound.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..capabilities import check_dtype
from ..core.alloc import empty
from ..core.atomic import atomic_write
from ..core.bounds import DEFAULT_LIMITS, Budget, Limits, checked_numel
from ..core.mapped import open_regular
from ..errors import (
    EncodeError,
    FormatError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
    describe,
)

__all__ = ["read_npz", "write_npz", "parse_npz"]

FMT = "npz"
#: deflate cannot expand by more than about 1032:1 (258-byte matches coded in 2 bits)
_DEFLATE_MAX_RATIO = 1032
_PIECE = 16 << 20
# what zipfile, zlib and numpy's header parser raise on a damaged archive
_ARCHIVE_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    NotImplementedError,
    RuntimeError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    OverflowError,
    SyntaxError,
    UnicodeError,
)


def _npy_header(f: Any, fmt: str, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    npf = np.lib.format
    version = npf.read_magic(f)
    if version == (1, 0):
        return npf.read_array_header_1_0(f)  # type: ignore[no-any-return]
    if version == (2, 0):
        return npf.read_array_header_2_0(f)  # type: ignore[no-any-return]
    raise UnsupportedError(
        describe(
            fmt,
            what,
            field="npy version",
            detail="unsupported",
            expected="1.0 | 2.0",
            got=f"{version[0]}.{version[1]}",
        )
    )


def _check_member(
    info: zipfile.ZipInfo, where: str, fmt: str, archive_size: int, limit: int
) -> None:
    """Refuse what the central directory says before opening the member."""
    off = info.header_offset
    if info.flag_bits & 0x1:
        raise UnsupportedError(
            describe(fmt, where, offset=off, field="zip flags", detail="encrypted member")
        )
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise UnsupportedError(
            describe(
                fmt,
                where,
                offset=off,
                field="compression method",
                detail="not what np.savez writes",
                expected="0 (stored) | 8 (deflated)",
                got=info.compress_type,
            )
        )
    if info.compress_size > archive_size:
        raise TruncatedError(
            describe(
                fmt,
                where,
                offset=off,
                field="compressed size",
                detail="larger than the archive",
                expected=f"<= {archive_size}",
                got=info.compress_size,
            )
        )
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise FormatError(
            describe(
                fmt,
                where,
                offset=off,
                field="size",
                detail="stored member whose size differs from its stored size",
                expected=info.compress_size,
                got=info.file_size,
            )
        )
    most = info.compress_size * _DEFLATE_MAX_RATIO + 1024
    if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > most:
        raise FormatError(
            describe(
                fmt,
                where,
                offset=off,
                field="size",
                detail="more than deflate can expand its stored size to",
                expected=f"<= {most}",
                got=info.file_size,
            )
        )
    if info.file_size > limit:
        raise LimitError(
            describe(
                fmt,
                where,
                offset=off,
                field="size",
                detail="above limit",
                expected=f"<= {limit}",
                got=info.file_size,
            )
        )


def _read_member(
    zf: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    where: str,
    fmt: str,
    limits: Limits,
    budget: Budget,
) -> np.ndarray:
    with zf.open(info) as f:
        try:
            shape, fortran, dtype = _npy_header(f, fmt, where)
        except TenfoldError:
            raise
        except Exception as exc:  # noqa: BLE001 - numpy parses the header text with ast and
            # tokenize, which raise many kinds (TokenError, SyntaxError, RecursionError...)
            raise FormatError(
                describe(
                    fmt,
                    where,
                    offset=info.header_offset,
                    field="npy header",
                    detail=f"unreadable: {type(exc).__name__}: {exc}"[:300],
                )
            ) from None
        if dtype.hasobject:
            raise FormatError(describe(fmt, where, detail="object array (needs pickle)"))
        if dtype.subdtype is not None:
            raise UnsupportedError(
                describe(fmt, where, field="dtype", detail="sub-array dtype", got=str(dtype))
            )
        count = checked_numel(fmt, where, shape, limits, itemsize=dtype.itemsize)
        nbytes = count * dtype.itemsize
        header_len = f.tell()
        if nbytes != info.file_size - header_len:
            raise FormatError(
                describe(
                    fmt, where, field="data size", expected=info.file_size - header_len, got=nbytes
                )
            )
        arr = empty(count, dtype, fmt=fmt, what=where, budget=budget)
        mv = memoryview(arr).cast("B") if nbytes else memoryview(b"")  # type: ignore[arg-type]
        got = 0
        while got < nbytes:
            piece = f.read(min(nbytes - got, _PIECE))
            if not piece:
                break
            mv[got : got + len(piece)] = piece
            got += len(piece)
        if got != nbytes:
            raise FormatError(describe(fmt, where, field="data size", expected=nbytes, got=got))
    return arr.reshape(shape, order="F" if fortran else "C")  # type: ignore[call-overload]


def parse_npz(
    source: Any,
    *,
    fmt: str = FMT,
    what: str = "file",
    limits: Limits = DEFAULT_LIMITS,
    budget: Budget | None = None,
    limit: int | None = None,
) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive (``source``: a seekable binary file or a buffer).

    ``limit`` bounds one member (default ``limits.max_decoded_bytes``); every array is charged
    to ``budget`` (default: a fresh one from ``limits``) before it is allocated. Raises only
    :mod:`tenfold.errors` exceptions on a damaged or hostile archive.
    """
    if budget is None:
        budget = limits.budget()
    if limit is None:
        limit = limits.max_decoded_bytes
    f = source if hasattr(source, "seek") else io.BytesIO(memoryview(source).tobytes())
    archive_size = f.seek(0, io.SEEK_END)
    f.seek(0)
    out: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(f) as zf:
            members = zf.infolist()
            if len(members) > limits.max_objects:
                raise LimitError(
                    describe(
                        fmt,
                        what,
                        field="member count",
                        detail="above limit",
                        expected=f"<= {limits.max_objects}",
                        got=len(members),
                    )
                )
            for info in members:
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                where = f"{what} array {name!r}"
                _check_member(info, where, fmt, archive_size, limit)
                try:
                    out[name] = _read_member(zf, info, where, fmt, limits, budget)
                except TenfoldError:
                    raise
                except _ARCHIVE_ERRORS as exc:
                    raise FormatError(
                        describe(
                            fmt,
                            where,
                            offset=info.header_offset,
                            detail=f"bad npz member: {type(exc).__name__}: {exc}"[:300],
                        )
                    ) from None
    except TenfoldError:
        raise
    except _ARCHIVE_ERRORS as exc:
        raise FormatError(
            describe(fmt, what, detail=f"bad npz payload: {type(exc).__name__}: {exc}"[:300])
        ) from None
    return out


def read_npz(path: Any, *, limits: Limits = DEFAULT_LIMITS) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` (never unpickles: object arrays are refused); see
    :func:`parse_npz` for what is checked."""
    fd = open_regular(path, fmt=FMT)
    with os.fdopen(fd, "rb") as f:
        return parse_npz(f, what=os.fspath(path), limits=limits)


_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def write_npz(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Any],
    *,
    compressed: bool = False,
    fsync: bool = True,
    done: Callable[[np.ndarray], Any] | None = None,
) -> None:
    """Write ``tensors`` to an ``.npz`` atomically, one array at a time.

    The archive is what ``np.savez`` (``np.savez_compressed`` with ``compressed``) writes,
    except that every member carries the fixed date 1980-01-01, so the same arrays always give
    the same bytes. Each array is fetched (``np.asarray``) only when its turn comes and handed
    to ``done`` once written, so a caller can release it.

    Only NumPy's own dtypes are written: bfloat16, float8 and float4 arrays (ml_dtypes) would
    be stored as opaque ``|V2`` / ``|V1`` / ``<f1`` records that NumPy cannot read back, so
    they are refused before anything is written (:class:`EncodeError` naming the tensor, its
    dtype and the formats that can hold it).
    """
    for k, v in tensors.items():
        dt = np.dtype(v.dtype) if hasattr(v, "dtype") else np.asarray(v).dtype
        if dt.hasobject:
            raise EncodeError(
                describe(
                    "npz",
                    f"array {k!r}",
                    field="dtype",
                    detail="object arrays need pickle",
                    got=str(dt),
                )
            )
        check_dtype("npz", str(k), dt)  # never a silent |V2 for bfloat16 / float8
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with atomic_write(path, fsync=fsync) as f:
        with zipfile.ZipFile(f, "w", compression=method, allowZip64=True) as zf:
            for k, v in tensors.items():
                a = np.asarray(v)
                info = zipfile.ZipInfo(str(k) + ".npy", date_time=_ZIP_DATE)
                info.compress_type = method
                info.external_attr = 0o600 << 16
                with zf.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, a, allow_pickle=False)
                if done is not None:
                    done(a)
