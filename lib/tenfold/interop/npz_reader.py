"""NumPy ``.npz`` as a first-class format: a bounded ``Mapping`` reader, never unpickling.

An ``.npz`` is a zip archive of ``<name>.npy`` members (stored or deflated). Opening maps the
file and reads the zip directory only; a member is checked before anything is allocated for
it: its name ends in ``.npy``, its compression is stored or deflate, its declared size is within
``limits.max_decoded_bytes``, and its ``.npy`` header describes exactly as many bytes as the
member holds (so a lying shape cannot make the reader allocate more than the file declares).
Object arrays (which need pickle) are refused. The zip CRC-32 of a member is checked when it is
read in full.
"""

from __future__ import annotations

import io
import os
import pathlib
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core.alloc import empty
from ..core.bounds import DEFAULT_LIMITS, Limits
from ..core.reader import MappedReader, TensorInfo
from ..core.report import ERROR, OK, Report
from ..errors import FormatError, IntegrityError, LimitError, TenfoldError, UnsupportedError
from ..errors import describe as _describe
from .npz import write_npz

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "demo", "sniff"]

FMT = "npz"
_LOCAL = b"PK\x03\x04"
_EMPTY = b"PK\x05\x06"


def sniff(head: bytes) -> bool:
    """True when ``head`` starts a zip whose first member is a ``.npy`` (or an empty zip, which
    is what ``np.savez`` writes for no arrays)."""
    if head[:4] == _EMPTY:
        return True
    if head[:4] != _LOCAL or len(head) < 30:
        return False
    n = int.from_bytes(head[26:28], "little")
    name = head[30 : 30 + n]
    return len(name) == n and name.endswith(b".npy")


def _zip_error(exc: Exception, what: str, zi: zipfile.ZipInfo) -> Exception:
    cls = IntegrityError if "CRC" in str(exc) else FormatError
    return cls(_describe(FMT, what, offset=zi.header_offset, detail=str(exc)))


class _BufferFile(io.RawIOBase):
    """A read-only, seekable file over a uint8 array (no copy of the whole buffer)."""

    def __init__(self, u8: np.ndarray) -> None:
        self._u8 = u8
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        n = max(0, min(len(mv), self._u8.size - self._pos))
        mv[:n] = self._u8[self._pos : self._pos + n].data
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._u8.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


class Reader(MappedReader, Mapping[str, np.ndarray]):
    """An ``.npz`` archive: ``Mapping`` of array name (member name without ``.npy``) to array.

    Arrays are owned copies (a member may be compressed).

    Examples
    --------
    >>> import numpy as np, tempfile, os, tenfold
    >>> p = os.path.join(tempfile.mkdtemp(), "a.npz")
    >>> tenfold.save(p, {"x": np.arange(3)})
    >>> with tenfold.open(p) as r:
    ...     list(r), r["x"].tolist(), r.info("x").shape
    (['x'], [0, 1, 2], (3,))
    """

    fmt = FMT

    def __init__(self, source: Any, *, limits: Limits = DEFAULT_LIMITS, mmap: bool = True) -> None:
        self.limits = limits
        self._map(source, FMT, mmap=mmap)
        try:
            self._file = _BufferFile(self._mf.buffer())
            self._zip = zipfile.ZipFile(self._file)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            self.close()
            raise FormatError(
                _describe(FMT, self.path or "<buffer>", detail=f"not a readable zip: {exc}")
            ) from None
        except BaseException:
            self.close()
            raise
        try:
            self._members = self._check_members()
        except BaseException:
            self.close()
            raise

    def _check_members(self) -> dict[str, zipfile.ZipInfo]:
        infos = self._zip.infolist()
        if len(infos) > self.limits.max_objects:
            raise LimitError(
                _describe(
                    FMT,
                    "zip directory",
                    field="members",
                    detail="above max_objects",
                    expected=f"<= {self.limits.max_objects}",
                    got=len(infos),
                )
            )
        out: dict[str, zipfile.ZipInfo] = {}
        for zi in infos:
            what = f"member {zi.filename!r}"
            if zi.flag_bits & 0x1:
                raise UnsupportedError(
                    _describe(
                        FMT,
                        what,
                        offset=zi.header_offset,
                        field="flags",
                        detail="member is encrypted",
                        expected="not encrypted",
                        got=f"flag bits 0x{zi.flag_bits:04x}",
                    )
                )
            if not zi.filename.endswith(".npy"):
                raise FormatError(
                    _describe(FMT, what, offset=zi.header_offset, detail="not a .npy member")
                )
            if zi.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise UnsupportedError(
                    _describe(
                        FMT,
                        what,
                        offset=zi.header_offset,
                        field="compression",
                        detail="unsupported",
                        expected="stored | deflate",
                        got=zi.compress_type,
                    )
                )
            if zi.file_size > self.limits.max_decoded_bytes:
                raise LimitError(
                    _describe(
                        FMT,
                        what,
                        offset=zi.header_offset,
                        field="size",
                        detail="above max_decoded_bytes",
                        expected=f"<= {self.limits.max_decoded_bytes}",
                        got=zi.file_size,
                    )
                )
            name = zi.filename[: -len(".npy")]
            if name in out:
                raise FormatError(
                    _describe(FMT, what, offset=zi.header_offset, detail="appears twice")
                )
            out[name] = zi
        return out

    def close(self) -> None:
        """Release the archive and the file (arrays already returned are owned copies)."""
        z = getattr(self, "_zip", None)
        if z is not None:
            z.close()
        f = getattr(self, "_file", None)
        if f is not None:
            f._u8 = np.empty(0, np.uint8)  # let the map go now, not when the reader is collected
        super().close()

    def _archive(self) -> zipfile.ZipFile:
        if self.closed:
            raise ValueError("npz: I/O operation on a closed file")
        return self._zip

    # -- Mapping ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def _zi(self, name: str) -> zipfile.ZipInfo:
        try:
            return self._members[name]
        except KeyError:
            raise KeyError(f"npz: no array named {name!r}") from None

    def _header(self, zi: zipfile.ZipInfo, f: Any) -> tuple[np.dtype, tuple[int, ...], bool, int]:
        """Read and check the ``.npy`` header at the start of member file ``f``."""
        what = f"member {zi.filename!r}"
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise UnsupportedError(
                    _describe(FMT, what, offset=zi.header_offset, field="npy version", got=version)
                )
        except TenfoldError:
            raise
        except zipfile.BadZipFile as exc:
            raise _zip_error(exc, what, zi) from None
        except Exception as exc:  # noqa: BLE001 - numpy parses the header text with ast and
            # tokenize, which raise many kinds (TokenError, SyntaxError, RecursionError...)
            raise FormatError(
                _describe(
                    FMT,
                    what,
                    offset=zi.header_offset,
                    detail=f"bad .npy header: {type(exc).__name__}: {exc}"[:300],
                )
            ) from None
        hlen = f.tell()
        if dtype.hasobject:
            raise UnsupportedError(
                _describe(
                    FMT,
                    what,
                    offset=zi.header_offset,
                    field="dtype",
                    detail="object arrays need pickle (refused)",
                    expected="a dtype without objects",
                    got=str(dtype),
                )
            )
        count = 1
        for d in shape:
            count *= d
        if count * dtype.itemsize != zi.file_size - hlen:
            raise FormatError(
                _describe(
                    FMT,
                    what,
                    offset=zi.header_offset,
                    field="size",
                    detail=".npy header does not describe the member's bytes",
                    expected=zi.file_size - hlen,
                    got=count * dtype.itemsize,
                )
            )
        return dtype, tuple(shape), fortran, hlen

    def read(self, name: str) -> np.ndarray:
        """Array ``name`` (an owned array; the member's CRC-32 is checked)."""
        zi = self._zi(name)
        what = f"member {zi.filename!r}"
        try:
            with self._archive().open(zi) as f:
                dtype, shape, fortran, _ = self._header(zi, f)
                # charged to the decode budget; LimitError (never MemoryError) when too big
                out = empty(
                    tuple(shape)[::-1] if fortran else shape,
                    dtype,
                    fmt=FMT,
                    what=what,
                    offset=zi.header_offset,
                    budget=self.limits.budget(),
                )
                if fortran:
                    out = out.T  # a C array of the reversed shape, transposed: Fortran order
                flat = out.reshape(-1, order="A").view(np.uint8) if out.size else None
                if flat is not None:
                    mv = memoryview(flat)  # type: ignore[arg-type]
                    done = 0
                    while done < flat.size:
                        got = f.readinto(mv[done:])  # type: ignore[attr-defined]
                        if not got:
                            raise FormatError(
                                _describe(
                                    FMT, what, offset=zi.header_offset, detail="member ends early"
                                )
                            )
                        done += got
                f.read(1)  # reach the end: zipfile checks the CRC-32 there
        except TenfoldError:
            raise
        except zipfile.BadZipFile as exc:
            raise _zip_error(exc, what, zi) from None
        except (ValueError, EOFError, OSError, zlib.error) as exc:
            raise FormatError(
                _describe(FMT, what, offset=zi.header_offset, detail=f"cannot decode: {exc}")
            ) from None
        return out

    def info(self, name: str) -> TensorInfo:
        zi = self._zi(name)
        try:
            f = self._archive().open(zi)
        except (zipfile.BadZipFile, NotImplementedError, RuntimeError) as exc:
            raise _zip_error(exc, f"member {zi.filename!r}", zi) from None
        with f:
            dtype, shape, fortran, hlen = self._header(zi, f)
        stored = zi.compress_type == zipfile.ZIP_STORED
        byte_range = None
        if stored:
            local = self._mf.bytes(zi.header_offset, 30, f"member {zi.filename!r} local header")
            start = (
                zi.header_offset
                + 30
                + int.from_bytes(local[26:28], "little")
                + int.from_bytes(local[28:30], "little")
            )
            byte_range = (start + hlen, start + zi.file_size)
        return TensorInfo(
            name,
            str(dtype),
            shape,
            byte_range,
            "raw" if stored else "deflate",
            f"crc32:{zi.CRC:08x}",
            {
                "member": zi.filename,
                "compressed_size": zi.compress_size,
                "fortran_order": fortran,
                "header_offset": zi.header_offset,
            },
        )

    @property
    def metadata(self) -> dict[str, Any]:
        """The zip comment, when there is one (npz has no other file-level metadata)."""
        comment = self._zip.comment
        return {"comment": comment.decode("utf-8", "replace")} if comment else {}

    def verify(self) -> Report:
        """Read every array in full (``.npy`` header, size and zip CRC-32)."""
        report = Report(FMT, self.path or "<buffer>")
        for name in self:
            try:
                self.read(name)
                report.add(f"array {name!r}", OK, offset=self._members[name].header_offset)
            except TenfoldError as exc:
                report.add(f"array {name!r}", ERROR, str(exc))
        return report


def open(source: Any, **kw: Any) -> Reader:  # noqa: A001 - the format API name
    """Open an ``.npz`` (path or buffer); see :class:`Reader`."""
    return Reader(source, **kw)


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """Every array (always owned copies, so ``copy`` changes nothing)."""
    with Reader(source, **kw) as r:
        return {k: r.read(k) for k in r}


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """Write ``tensors`` atomically (``compressed=True`` for deflate)."""
    write_npz(path, tensors, **kw)


def inspect(source: Any) -> list[dict]:
    """One row per array."""
    with Reader(source) as r:
        rows = []
        for name in r:
            i = r.info(name)
            rows.append(
                {
                    "name": name,
                    "dtype": i.dtype,
                    "shape": "x".join(map(str, i.shape)) or "()",
                    "bytes": i.extras["compressed_size"],
                    "encoding": i.encoding,
                    "layout": "dense",
                    "checksum": i.checksum,
                    "offset": i.extras["header_offset"],
                }
            )
        return rows


def verify(source: Any, **kw: Any) -> Report:
    """Check every member; never raises on a damaged file."""
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<buffer>"
    try:
        r = Reader(source, **kw)
    except (TenfoldError, OSError) as exc:
        report = Report(FMT, path)
        report.add("file", ERROR, str(exc))
        return report
    with r:
        return r.verify()


def demo(directory: pathlib.Path) -> pathlib.Path:
    """Write a small deterministic sample; return its path."""
    path = pathlib.Path(directory) / "demo.npz"
    rng = np.random.default_rng(12)
    save(
        path,
        {
            "weights": rng.standard_normal((8, 4)).astype(np.float32),
            "ids": np.arange(8, dtype=np.int32),
        },
        compressed=True,
    )
    return path
