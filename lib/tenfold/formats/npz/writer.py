"""NumPy ``.npz`` archives written atomically (:func:`write_npz`), and read whole
(:func:`read_npz`, :func:`parse_npz`) through the checked parser of :mod:`.archive`.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...capabilities import check_dtype
from ...core.atomic import atomic_write
from ...core.bounds import DEFAULT_LIMITS, Budget, Limits
from ...core.buffers import BufferFile
from ...core.mapped import open_regular
from ...errors import EncodeError, describe, factory
from ._npy import write_npy, write_npy_pieces
from ._zipmember import open_member
from .archive import FMT, Archive, Member

__all__ = [
    "read_npz",
    "write_npz",
    "parse_npz",
    "check_member_name",
    "Archive",
    "Member",
    "BufferFile",
]


def parse_npz(
    source: Any,
    *,
    fmt: str = FMT,
    what: str = "file",
    limits: Limits = DEFAULT_LIMITS,
    budget: Budget | None = None,
    limit: int | None = None,
) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive (``source``: a seekable binary file or a buffer),
    through :class:`Archive`.

    ``limit`` bounds one member (default ``limits.max_decoded_bytes``); every array is charged
    to ``budget`` (default: a fresh one from ``limits``) before it is allocated. Raises only
    :mod:`tenfold.errors` exceptions on a damaged or hostile archive.
    """
    if budget is None:
        budget = limits.budget()
    with Archive(source, fmt=fmt, what=what, limits=limits, limit=limit) as a:
        return {name: a.read(name, budget) for name in a.members}


def read_npz(path: Any, *, limits: Limits = DEFAULT_LIMITS) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` (never unpickles: object arrays are refused); see
    :class:`Archive` for what is checked."""
    fd = open_regular(path, fmt=FMT)
    with os.fdopen(fd, "rb") as f:
        return parse_npz(f, what=os.fspath(path), limits=limits)


_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
#: a zip header stores a member name's length in 16 bits
_MAX_MEMBER_NAME = 0xFFFF


def check_member_name(fmt: str, name: object, what: str = "array") -> str:
    """The zip member name of array ``name`` (``name + ".npy"``), or :class:`EncodeError` when
    a zip member cannot carry it back unchanged: a name that is not a string, holds U+0000
    (:mod:`zipfile` cuts a member name at its first NUL, on writing and on reading, so the
    array would come back under another name), cannot be encoded in UTF-8 (a lone
    surrogate), or is longer than the 65,535 bytes of the header's length field.

    >>> check_member_name("npz", "layers.0/w")
    'layers.0/w.npy'
    """
    if not isinstance(name, str):
        raise factory(fmt).name_not_str(what, name)
    bad: str | None = None
    if "\x00" in name:
        bad = "contains U+0000, where zipfile cuts a member name"
        if fmt == "npz":
            bad += "; formats that can hold it: .zt (0.1.0), .safetensors, .fold/.mind, .wtxt"
    else:
        try:
            n = len(name.encode("utf-8")) + 4
        except UnicodeEncodeError:
            bad = "not encodable in UTF-8 (a lone surrogate)"
        else:
            if n > _MAX_MEMBER_NAME:
                bad = f"member name of {n} bytes; a zip header holds at most {_MAX_MEMBER_NAME}"
    if bad is not None:
        shown = repr(name if len(name) <= 80 else name[:60] + "...")
        raise EncodeError(describe(fmt, f"{what} {shown}", field="name", detail=bad))
    return name + ".npy"


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
    the same bytes (a stored member is written by :mod:`._zipmember`: zipfile's bytes, with
    the CRC-32 from tenfold's kernel). Each array is fetched (``np.asarray``) only when its
    turn comes and handed to ``done`` once written, so a caller can release it.

    Only NumPy's own dtypes are written: bfloat16, float8 and float4 arrays (ml_dtypes) would
    be stored as opaque ``|V2`` / ``|V1`` / ``<f1`` records that NumPy cannot read back, so
    they are refused before anything is written (:class:`EncodeError` naming the tensor, its
    dtype and the formats that can hold it), as are names a zip member cannot carry back
    (:func:`check_member_name`).
    """
    for k, v in tensors.items():
        check_member_name("npz", k)
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
                info = zipfile.ZipInfo(k + ".npy", date_time=_ZIP_DATE)
                info.compress_type = method
                info.external_attr = 0o600 << 16
                pieces = getattr(v, "raw_pieces", None)
                if pieces is not None:  # its bytes in blocks (a conversion's raw copy)
                    with open_member(zf, f, info) as member:
                        write_npy_pieces(member, np.dtype(v.dtype), tuple(v.shape), pieces())
                    continue
                a = np.asarray(v)
                with open_member(zf, f, info) as member:
                    write_npy(member, a)
                if done is not None:
                    done(a)
                del a  # before the next array is fetched: one at a time
