"""NumPy ``.npz`` as a first-class format: a bounded ``Mapping`` reader, never unpickling.

An ``.npz`` is a zip archive of ``<name>.npy`` members (stored or deflated). Opening maps the
file and reads the zip directory only; everything is parsed and checked by
:class:`tenfold.interop.npz.Archive`, the parser ``.npz`` files, FOLD ``NPZ0`` chunks and
``convert`` share (sizes checked before anything is allocated, encrypted members and object
arrays refused, every array charged to a decode budget, the zip CRC-32 checked on every read).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Limits, truncated
from ...core.cli_support import inspect_row
from ...core.reader import MappedReader, TensorInfo, verify_file
from ...core.report import ERROR, OK, Report
from ...errors import FormatError, TenfoldError, factory
from ._endrecord import END, END64, END64_SIG, END_SIG, LOCATOR64, LOCATOR64_SIG
from ._format import LOCAL_HEADER, sniff
from .writer import Archive, Member, write_npz

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "demo", "sniff"]

FMT = "npz"


class Reader(MappedReader, Mapping[str, np.ndarray]):
    """An ``.npz`` archive: ``Mapping`` of array name (member name without ``.npy``) to array.

    Parsing and every check are :class:`tenfold.interop.npz.Archive`'s (the one hardened npz
    parser), over the mapped file; members must be ``.npy``. Arrays are owned copies (a
    member may be compressed); ``read(name, copy=False)`` gives a stored member as a
    read-only view of the map (its CRC-32 checked) without copying it.

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
        self._rf: Any = None
        try:
            if getattr(self._mf, "remote", False):  # by range, never the whole object
                from ...core.rangefile import RangeFile

                self._rf = RangeFile(self._mf)
            self._npz = Archive(
                self._rf if self._rf is not None else self._mf.buffer(),
                fmt=FMT,
                what=self.path or "<buffer>",
                limits=limits,
                require_npy=True,
                label=lambda name, zi: f"member {zi.filename!r}",
            )
        except FormatError:
            cause = truncation(self._mf, limits, self.path or "<buffer>")
            self.close()
            if cause is not None:
                raise cause from None
            raise
        except BaseException:
            self.close()
            raise
        self._members = self._npz.members

    def close(self) -> None:
        """Release the archive and the file (arrays already returned are owned copies)."""
        z = getattr(self, "_npz", None)
        if z is not None:
            z.close()
        super().close()

    def _archive(self) -> Archive:
        if self.closed:
            raise ValueError("npz: I/O operation on a closed file")
        return self._npz

    # -- Mapping ------------------------------------------------------------------------------
    def _keys(self) -> Mapping[str, Any]:
        return self._members

    def _member(self, name: str) -> Member:
        if name not in self._members:
            raise KeyError(f"npz: no array named {name!r}")
        return self._archive().member(name)

    def read(self, name: str, index: Any = None, *, copy: bool = True) -> np.ndarray:
        """Array ``name``: an owned array charged to a fresh decode budget (the member's
        CRC-32 is checked), or with ``copy=False`` a stored member as a read-only view of
        the map.

        With ``index`` (a basic slice: ints, slices with steps, ``...``; see
        :mod:`tenfold.core.slicing`) a stored, C-ordered member is read for the rows the slice
        touches only; the zip CRC-32 covers the whole member, so such a read does not check it
        (as zTensor's slice reads check no tensor checksum). A deflated or Fortran-ordered
        member is read whole (CRC-32 checked), then sliced.
        """
        if self._rf is not None and index is None and name in self._members:
            # remote, whole member: its local header, .npy header and bytes in one request
            zi = self._members[name].info
            self._rf.expect(zi.header_offset, 30 + len(zi.orig_filename.encode()) + 1024
                            + len(zi.extra) + zi.compress_size)  # fmt: skip
        m = self._member(name)
        if index is None:
            return self._archive().read(name, copy=copy)
        from ...core.slicing import plan

        assert m.dtype is not None
        what = f"array {name!r}"
        p = plan(FMT, what, m.shape, index)
        dt = m.dtype
        row = dt.itemsize
        for d in m.shape[1:]:
            row *= d
        start = self._npz.data_offset(name)
        nbytes = m.info.file_size - m.header_len
        if (
            start is None  # deflated
            or m.fortran
            or not m.shape
            or dt.hasobject
            or row == 0
            or nbytes != row * m.shape[0]  # not what the header says: the whole read reports it
        ):
            whole = p.apply(self._archive().read(name, copy=copy))
            return np.array(whole) if copy else np.asarray(whole)  # copy: not the whole alive
        rows = self._mf.array(start + p.lo * row, dt, (p.hi - p.lo, *m.shape[1:]), what)
        out = p.finish(rows)
        if copy or not isinstance(out, np.ndarray):
            self.limits.budget().take(out.nbytes, FMT, what, offset=start)
            return np.array(out)
        if out.flags.writeable:  # an empty array is a fresh one: keep the read-only rule
            out.flags.writeable = False
        return out

    def info(self, name: str) -> TensorInfo:
        m = self._member(name)
        zi = m.info
        start = self._npz.data_offset(name)
        byte_range = None if start is None else (start, start + zi.file_size - m.header_len)
        return TensorInfo(
            name,
            str(m.dtype),
            m.shape,
            byte_range,
            "raw" if m.stored else "deflate",
            f"crc32:{zi.CRC:08x}",
            {
                "member": zi.filename,
                "compressed_size": zi.compress_size,
                "fortran_order": m.fortran,
                "header_offset": zi.header_offset,
            },
            m.dtype,
        )

    @property
    def metadata(self) -> dict[str, Any]:
        """The zip comment, when there is one (npz has no other file-level metadata)."""
        comment = self._npz.comment
        return {"comment": comment.decode("utf-8", "replace")} if comment else {}

    def verify(self) -> Report:
        """Read every array in full (``.npy`` header, size and zip CRC-32)."""
        report = Report(FMT, self.path or "<buffer>")
        for name in self:
            try:
                self.read(name)
                report.add(f"array {name!r}", OK, offset=self._members[name].info.header_offset)
            except TenfoldError as exc:
                report.add(f"array {name!r}", ERROR, str(exc))
        return report


def truncation(mf: Any, limits: Limits, what: str) -> TenfoldError | None:
    """For an archive the zip reader refused: the error that names the cause when the file
    ends before what its own records announce (a member's bytes by its local header, the
    directory entries, the end record), else None (some other damage: the caller's error
    stands). Reads at most ``limits.max_objects`` records, each once."""
    size, off = int(mf.size), 0
    try:
        if _ends_with_end_record(mf, size):
            return None  # the archive's end is there: damaged inside, not cut short
        for _ in range(limits.max_objects):
            sig = mf.bytes(off, 4, "signature") if off + 4 <= size else b""
            if off and not sig:  # the file ends after a record: the end record is due
                return truncated(FMT, size, off + END.size, "zip directory", obj=what, offset=off)
            part, need = _record(mf, off, size, sig)
            if need is None:
                return None  # not a record of a whole archive, or the end record, complete
            if need > size:
                return truncated(FMT, size, need, part, obj=what, offset=off)
            off = need
    except (TenfoldError, OSError):
        pass
    return None


def _ends_with_end_record(mf: Any, size: int) -> bool:
    """True when the file ends with a zip end record (its comment, up to 64 KiB, included)."""
    n = min(size, END.size + 0xFFFF)
    tail = mf.bytes(size - n, n, "zip end record")
    comment = END.offset("comment_length")
    at = tail.rfind(END_SIG)
    while at >= 0:
        if at + END.size <= n and at + END.size + _u16(tail, at + comment) == n:
            return True
        at = tail.rfind(END_SIG, 0, at)
    return False


def _record(mf: Any, off: int, size: int, sig: bytes) -> tuple[str, int | None]:
    """``(what, end)`` of the zip record at ``off`` as far as its fixed part tells (``end``
    past ``size`` when the file ends inside it), or ``end=None`` where the walk stops."""
    fixed = {LOCAL_HEADER: 30, b"PK\x01\x02": 46, END64_SIG: END64.size,
             LOCATOR64_SIG: LOCATOR64.size, END_SIG: END.size}.get(sig)  # fmt: skip
    if fixed is None:
        return "", None
    part = "local header" if sig == LOCAL_HEADER else "zip directory"
    if off + fixed > size:
        return part, off + fixed
    head = mf.bytes(off, fixed, part)
    if sig == LOCAL_HEADER:
        n, e = _u16(head, 26), _u16(head, 28)
        if off + 30 + n + e > size:
            return part, off + 30 + n + e
        csize: int | None = _u32(head, 18)
        if csize == 0xFFFFFFFF:  # zip64: the sizes are in the extra field
            csize = _zip64_size(mf.bytes(off + 30 + n, e, "extra field"), _u32(head, 22))
        if _u16(head, 6) & 0x08 or csize is None:  # sizes after the data: unknown here
            return part, None
        name = mf.bytes(off + 30, n, "member name").decode("utf-8", "replace")
        return f"member {name!r}", off + 30 + n + e + csize
    if sig == b"PK\x01\x02":
        return part, off + 46 + _u16(head, 28) + _u16(head, 30) + _u16(head, 32)
    if sig == END64_SIG:  # its size field counts the bytes after the field itself
        return part, off + 12 + int(np.frombuffer(head, END64.dtype, 1)["record_size"][0])
    if sig == END_SIG:
        end = off + END.size + int(np.frombuffer(head, END.dtype, 1)["comment_length"][0])
        return part, end if end > size else None
    return part, off + fixed


def _u16(b: bytes, at: int) -> int:
    return int.from_bytes(b[at : at + 2], "little")


def _u32(b: bytes, at: int) -> int:
    return int.from_bytes(b[at : at + 4], "little")


def _zip64_size(extra: bytes, usize: int) -> int | None:
    """The compressed size in a local header's zip64 extra field (None when absent)."""
    at = 0
    while at + 4 <= len(extra):
        tag, length = _u16(extra, at), _u16(extra, at + 2)
        if tag == 0x0001:
            skip = 8 if usize == 0xFFFFFFFF else 0  # the uncompressed size comes first
            if length < skip + 8:
                return None
            return int.from_bytes(extra[at + 4 + skip : at + 12 + skip], "little")
        at += 4 + length
    return None


def open(source: Any, **kw: Any) -> Reader:  # noqa: A001 - the format API name
    """Open an ``.npz`` (path or buffer); see :class:`Reader`."""
    return Reader(source, **kw)


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """Every array (always owned copies, so ``copy`` changes nothing)."""
    with Reader(source, **kw) as r:
        return {k: r.read(k) for k in r}


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """Write ``tensors`` atomically (``compressed=True`` for deflate; ``compress="deflate"`` or
    ``None``, :func:`tenfold.save`'s name for it, too)."""
    if "compress" in kw:
        compress = kw.pop("compress")
        if "compressed" in kw:
            raise factory(FMT).encode(
                "save", field="compress", detail="compressed= given too: give one of the two"
            )
        if compress not in ("deflate", None):
            raise factory(FMT).encode(
                "save", field="compress", expected="'deflate' or None", got=repr(compress)
            )
        kw["compressed"] = compress == "deflate"
    write_npz(path, tensors, **kw)


def inspect(source: Any) -> list[dict]:
    """One row per array."""
    with Reader(source) as r:
        rows = []
        for name in r:
            i = r.info(name)
            rows.append(
                inspect_row(
                    name,
                    i.dtype,
                    i.shape,
                    i.extras["compressed_size"],
                    i.encoding,
                    checksum=i.checksum,
                    offset=i.extras["header_offset"],
                )
            )
        return rows


def verify(source: Any, **kw: Any) -> Report:
    """Check every member; never raises on a damaged file."""
    out: Report = verify_file(FMT, Reader, source, **kw)
    return out


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
