"""HDF5 files' datasets as a read-only ``Mapping``, through ``h5py`` (``tenfold[hdf5]``).

Every dataset of the file (reached through hard links from the root group) is one entry, its
path flattened to a dotted name: ``/encoder/layer0/weight`` is ``encoder.layer0.weight``
(``separator=`` chooses another joiner). Two paths that flatten to one name (a dataset
``a.b`` beside a group ``a`` holding ``b``) are refused when the file is opened, naming both:
open it with another separator (``"/"``) to read it.

h5py opens the file by its path after tenfold has mapped it (checked to be the same file: device,
inode and size), or, for a buffer or a remote object, reads it through a file object over
tenfold's map. A dataset stored contiguously without
filters is a read-only view of the map at the offset h5py reports
(``dataset.id.get_offset()``), checked against the file's size and the dataset's dtype and
shape; a big-endian one is a little-endian copy of those bytes. Chunked or compressed
datasets are decoded by h5py into arrays charged to the call's decode budget first.

Refused, naming the dataset (:class:`~tenfold.errors.UnsupportedError`, when it is read):
element types that are not numbers or booleans (compound, strings fixed or variable,
references, opaque, arrays, variable-length), datasets with no dataspace (``h5py.Empty``),
and datasets whose data lives in other files (external storage, virtual datasets): following
those would read whatever file the HDF5 file names. Soft and external links are not followed.
Attributes become :attr:`Reader.metadata`.

libhdf5 is C code: unless ``trusted=True``, every file is first read in a checking process
(:mod:`._isolate`: every libhdf5 call the reader makes, under ``check_seconds`` and a memory
cap) and refused, named, if libhdf5 crashes, hangs or runs out of memory there.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ...core.bounds import DEFAULT_LIMITS, Limits, checked_numel
from ...core.buffers import BufferFile
from ...core.optional import require
from ...core.reader import MappedReader, Span, TensorInfo, load_all, verify_file
from ...core.report import Report
from ...errors import TenfoldError, factory
from . import _isolate

__all__ = ["Reader", "open", "load", "save", "inspect", "verify", "SEPARATOR"]

FMT = "hdf5"
E = factory(FMT)
#: what joins a dataset's path components into its name
SEPARATOR = "."
#: where a dataset's attribute sits in :attr:`Reader.metadata`: ``<name>@<attribute>``
ATTR_SEP = "@"


def _open_h5(h5py: Any, mf: Any) -> Any:
    """h5py's handle on the file tenfold mapped: by its path when that still names the same
    file (h5py's own driver, much faster than Python reads), else through a file object over
    the map (a buffer, a remote object, a path replaced since)."""
    fd = mf.fd
    if mf.path is not None and fd is not None and not getattr(mf, "remote", False):
        try:
            a, b = os.fstat(fd), os.stat(mf.path)
            if (a.st_dev, a.st_ino, a.st_size) == (b.st_dev, b.st_ino, b.st_size):
                return h5py.File(mf.path, "r")
        except OSError:
            pass
    return h5py.File(BufferFile(mf.buffer()), "r")  # type: ignore[arg-type]


#: what h5py raises for a file libhdf5 finds damaged (its error stack, mapped to Python)
H5PY_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError, OverflowError)


@contextlib.contextmanager
def _h5_errors(what: str, doing: str) -> Iterator[None]:
    """h5py's exceptions inside as a :class:`~tenfold.errors.FormatError` naming ``what``."""
    try:
        yield
    except TenfoldError:
        raise
    except H5PY_ERRORS as exc:
        raise E.format(
            what, detail=f"h5py cannot {doing} it: {type(exc).__name__}: {exc}"
        ) from None


#: the filters h5py names (``Dataset.compression``: the first of gzip, lzf, szip present)
_FILTERS = {1: "gzip", 2: "shuffle", 3: "fletcher32", 4: "szip", 6: "scaleoffset", 32000: "lzf"}


class _Header:
    """What a dataset's object header says (type, dataspace, layout, filters, storage), read
    once with h5py's low-level calls: what :class:`Reader` needs to list, describe, refuse
    or map a dataset, under the names h5py's ``Dataset`` gives them (``dtype``, ``shape``,
    ``chunks``, ``compression``, ``is_virtual``, ``external``, ``id``...), at a fraction of
    the cost of making that object."""

    __slots__ = ("id", "dtype", "shape", "chunks", "compression", "shuffle", "fletcher32",
                 "is_virtual", "external")  # fmt: skip

    compression: str | None
    shape: tuple[int, ...] | None

    def __init__(self, h5py: Any, dsid: Any) -> None:
        self.id = dsid
        self.dtype = dsid.dtype
        space = dsid.get_space()
        null = space.get_simple_extent_type() == h5py.h5s.NULL
        self.shape = None if null else space.shape
        dcpl = dsid.get_create_plist()
        layout = dcpl.get_layout()
        self.is_virtual = layout == h5py.h5d.VIRTUAL
        self.external = dcpl.get_external_count() > 0
        self.chunks = dcpl.get_chunk() if layout == h5py.h5d.CHUNKED else None
        ids = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
        names = {_FILTERS.get(i) for i in ids}
        self.compression = next((c for c in ("gzip", "lzf", "szip") if c in names), None)
        if self.compression is None and any(i not in _FILTERS for i in ids):
            self.compression = "unknown"  # a plugin's filter (as h5py says)
        self.shuffle = "shuffle" in names
        self.fletcher32 = "fletcher32" in names


def _h5py() -> Any:
    return require("h5py", extra="hdf5", what="hdf5: reading an HDF5 file")


def _refusal(h5py: Any, dset: Any, dt: np.dtype | None = None) -> str | None:
    """Why ``dset`` is not read as an array, or None (``dt``: its dtype, when already read)."""
    dt = dset.dtype if dt is None else dt
    if dset.shape is None:
        return "an empty dataset (no dataspace) holds no array"
    if dset.is_virtual:
        return "a virtual dataset reads other files"
    if dset.external:
        return "its data is stored in external files"
    if dt.kind not in "biufc":  # strings, vlen and references are all object or bytes kinds
        if h5py.check_string_dtype(dt) is not None:
            return f"strings ({dt}) are not tensors"
        if h5py.check_vlen_dtype(dt) is not None:
            return "variable-length data is not a tensor"
        if h5py.check_ref_dtype(dt) is not None:
            return "object references are not tensors"
    if dt.fields is not None:
        return f"compound type {dt} (fields {list(dt.fields)[:5]})"
    if dt.subdtype is not None:
        return f"array element type {dt}"
    if dt.kind not in "biufc":
        return f"element type {dt} ({dt.kind!r}) has no tensor equivalent"
    return None


def _json(value: Any) -> tuple[bool, Any]:
    """``(ok, JSON-able value)`` of an attribute value."""
    if isinstance(value, bytes):
        try:
            return True, value.decode("utf-8")
        except UnicodeDecodeError:
            return False, None
    if isinstance(value, str):
        return True, value
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            return True, value.tolist()
        if value.dtype.kind in "OSU":
            out = []
            for v in value.reshape(-1).tolist():
                ok, got = _json(v)
                if not ok or not isinstance(got, str):
                    return False, None
                out.append(got)
            return True, np.array(out, dtype=object).reshape(value.shape).tolist()
        return False, None
    if isinstance(value, (bool, int, float)):
        return True, value
    return False, None


class Reader(MappedReader, Mapping[str, np.ndarray]):
    """An HDF5 file's datasets: ``Mapping`` of dotted name to array (see the module doc).

    ``metadata``: the root group's attributes by their names, every other group's or
    dataset's as ``<dotted name>@<attribute>``; values as JSON (numbers, strings, lists).
    Attributes with no JSON form (references, compound values, undecodable bytes) are left
    out and named in :attr:`skipped_attributes`.

    Examples
    --------
    >>> import numpy as np, tempfile, os, h5py, tenfold
    >>> p = os.path.join(tempfile.mkdtemp(), "m.h5")
    >>> with h5py.File(p, "w") as f:
    ...     f["encoder/w"] = np.arange(6, dtype=np.float32).reshape(2, 3)
    ...     f.attrs["epoch"] = 3
    >>> with tenfold.open(p) as r:
    ...     list(r), r["encoder.w"].tolist(), r.metadata
    (['encoder.w'], [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], {'epoch': 3})
    """

    fmt = FMT

    def __init__(
        self,
        source: Any,
        *,
        copy: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        mmap: bool = True,
        separator: str = SEPARATOR,
        trusted: bool = False,
        check_seconds: float | None = None,
    ) -> None:
        h5py = _h5py()
        if not isinstance(separator, str) or not separator:
            raise ValueError(f"hdf5: separator: expected a non-empty str, got {separator!r}")
        self.copy = copy
        self.limits = limits
        self.separator = separator
        self.trusted = bool(trusted)
        self.check_seconds = _isolate.CHECK_SECONDS if check_seconds is None else check_seconds
        self._lock = threading.Lock()
        self._h5: Any = None
        self._h5py = h5py
        self._map_and_parse(source, lambda mf: self._open(h5py, mf), FMT, mmap=mmap)

    def _open(self, h5py: Any, mf: Any) -> None:
        if not self.trusted:  # libhdf5 meets the file in another process first
            _isolate.check(mf, self.limits, float(self.check_seconds))
        self._paths: dict[str, str] = {}
        self._objs: dict[str, Any] = {}  # h5py's Dataset objects (a lookup by path is slow)
        self._headers: dict[str, _Header] = {}
        self._metadata: dict[str, Any] = {}
        self.skipped_attributes: list[str] = []
        with _h5_errors(self.path or "<buffer>", "open"):
            self._h5 = _open_h5(h5py, mf)
            self._walk(h5py)

    def _walk(self, h5py: Any) -> None:
        """Every object below the root (h5py's own visit, in its order), by its header alone:
        a dataset's h5py object is made when it is first used, a group's or a dataset's
        attributes are read only where its header counts some."""
        self._attrs("", self._h5)
        found: list[tuple[bytes, int, int]] = []  # h5py hands one info object, reused
        h5py.h5o.visit(self._h5.id, lambda p, i: found.append((p, i.type, i.num_attrs)), info=True)
        for raw, otype, num_attrs in found:
            try:
                path = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise E.format(
                    f"object {raw!r}", field="name", detail="not UTF-8", got=raw[:40]
                ) from None
            name = path.replace("/", self.separator)
            is_dataset = otype == h5py.h5o.TYPE_DATASET
            if is_dataset:
                if name in self._paths:
                    raise E.format(
                        f"dataset '/{path}'",
                        field="name",
                        detail=f"flattens to {name!r} as '/{self._paths[name]}' does; open "
                        "with another separator (separator='/')",
                    )
                if len(self._paths) >= self.limits.max_objects:
                    raise E.limit(
                        f"dataset '/{path}'",
                        field="count",
                        expected=f"<= {self.limits.max_objects}",
                        got=len(self._paths) + 1,
                    )
                self._paths[name] = path
            if num_attrs:
                self._attrs(name, self._dataset(name) if is_dataset else self._h5[path])

    def _attrs(self, name: str, obj: Any) -> None:
        for key in obj.attrs:
            label = f"{name}{ATTR_SEP}{key}" if name else key
            try:
                ok, value = _json(obj.attrs[key])
            except H5PY_ERRORS:  # h5py cannot read it: left out, named
                ok, value = False, None
            if ok:
                self._metadata[label] = value
            else:
                self.skipped_attributes.append(label)

    def close(self) -> None:
        """Release h5py's handle and the file (arrays already returned stay valid)."""
        h5, self._h5 = getattr(self, "_h5", None), None
        self._objs = {}
        self._headers = {}
        if h5 is not None:
            try:
                h5.close()
            except Exception:  # noqa: BLE001 - closing must not raise over the original error
                pass
        super().close()

    # -- Mapping ------------------------------------------------------------------------------
    def _keys(self) -> Mapping[str, str]:
        return self._paths

    def _header(self, name: str) -> _Header:
        """Dataset ``name``'s header (read on first use; ``KeyError`` if there is none)."""
        head = self._headers.get(name)
        if head is None:
            try:
                path = self._paths[name]
            except KeyError:
                raise KeyError(f"hdf5: no dataset named {name!r}") from None
            if self._h5 is None:
                raise ValueError("hdf5: I/O operation on a closed file")
            with _h5_errors(f"dataset {name!r}", "open"):
                dsid = self._h5py.h5o.open(self._h5.id, path.encode("utf-8"))
                head = self._headers[name] = _Header(self._h5py, dsid)
        return head

    def _dataset(self, name: str) -> Any:
        """h5py's ``Dataset`` of ``name`` (made on first use: reads, attributes)."""
        dset = self._objs.get(name)
        if dset is None:
            dset = self._objs[name] = self._h5py.Dataset(self._header(name).id, readonly=True)
        return dset

    @contextlib.contextmanager
    def _using(self, name: str, doing: str) -> Iterator[_Header]:
        """Dataset ``name``'s header (``KeyError`` if there is none), then h5py's exceptions
        inside as a :class:`~tenfold.errors.FormatError` naming it."""
        head = self._header(name)
        with _h5_errors(f"dataset {name!r}", doing):
            yield head

    def _checked(self, name: str) -> tuple[Any, np.dtype, tuple[int, ...]]:
        """The dataset's header, the (little-endian) dtype of the arrays read, the shape;
        refusals."""
        dset = self._header(name)
        what = f"dataset {name!r}"
        why = _refusal(self._h5py, dset)
        if why is not None:
            raise E.unsupported(what, field="dtype", detail=why)
        shape = tuple(int(d) for d in dset.shape or ())  # not None: refused above
        dt = dset.dtype
        le = dt.newbyteorder("<") if dt.byteorder == ">" else dt
        checked_numel(FMT, what, shape, self.limits, itemsize=dt.itemsize)
        return dset, le, shape

    def _offset(self, dset: Any, dt: np.dtype, shape: tuple[int, ...], what: str) -> int | None:
        """The file offset of a contiguous, unfiltered, allocated dataset (checked), or None."""
        if dset.chunks is not None or dset.compression is not None:
            return None
        off = dset.id.get_offset()
        if off is None:
            return None  # never written: h5py gives the fill value
        nbytes = checked_numel(FMT, what, shape, self.limits, itemsize=dt.itemsize) * dt.itemsize
        stored = dset.id.get_storage_size()
        if stored != nbytes:
            raise E.format(what, offset=off, field="storage size", expected=nbytes, got=stored)
        self._mf.check(off, nbytes, what)
        return int(off)

    def read(self, name: str, index: Any = None, *, copy: bool | None = None) -> np.ndarray:
        """Dataset ``name``: a read-only view of the map when stored contiguously, little-endian
        and unfiltered (``copy=True``: an owned array), else an array h5py decodes.

        With ``index`` (a basic slice) a view is sliced; any other dataset is read for the
        slice by h5py (only the chunks it touches)."""
        copy = self.copy if copy is None else copy
        what = f"dataset {name!r}"
        with self._lock, self._using(name, "read"):  # h5py's objects: one call at a time
            dset, dt, shape = self._checked(name)
            off = self._offset(dset, dt, shape, what)
            if off is not None:
                arr = self._mf.array(off, dset.dtype, shape, what)
                if dset.dtype.byteorder == ">":
                    arr = arr.astype(dt)
                elif arr.flags.writeable:  # an empty array is a fresh one: keep it read-only
                    arr.flags.writeable = False
                if index is not None:
                    from ...core.slicing import plan

                    arr = plan(FMT, what, shape, index).apply(arr)
                return np.array(arr) if copy or not isinstance(arr, np.ndarray) else arr
            return self._decode(self._dataset(name), dt, shape, index, what)

    def _decode(
        self, dset: Any, dt: np.dtype, shape: tuple[int, ...], index: Any, what: str
    ) -> np.ndarray:
        from ...core.slicing import plan

        key = () if index is None else index
        if index is not None:
            plan(FMT, what, shape, index)  # the same refusals as every format's slices
        n = checked_numel(FMT, what, shape, self.limits, itemsize=dt.itemsize)
        self.limits.budget().take(n * dt.itemsize, FMT, what)
        out = np.asarray(dset[key] if shape else dset[()])
        return out.astype(dt, copy=False) if out.dtype != dt else out

    def span(self, name: str) -> Span | None:
        """Where dataset ``name`` lies raw in the file (contiguous, little-endian, unfiltered),
        else None."""
        with self._lock, self._using(name, "read") as dset:
            if _refusal(self._h5py, dset) is not None or dset.dtype.byteorder == ">":
                return None
            dset, dt, shape = self._checked(name)
            off = self._offset(dset, dt, shape, f"dataset {name!r}")
        return None if off is None else Span(off, dt, shape)

    def info(self, name: str) -> TensorInfo:
        with self._lock, self._using(name, "describe") as dset:
            dt = dset.dtype
            shape = () if dset.shape is None else tuple(int(d) for d in dset.shape)
            rng = None
            if _refusal(self._h5py, dset, dt) is None:
                off = self._offset(dset, dt, shape, f"dataset {name!r}")
                if off is not None:  # _offset checked the stored size against the shape
                    rng = (off, off + math.prod(shape) * dt.itemsize)
            encoding = dset.compression or ("chunked" if dset.chunks else "raw")
            extras = {
                "path": "/" + self._paths[name],
                "chunks": dset.chunks,
                "compression": dset.compression,
                "shuffle": dset.shuffle,
                "fletcher32": dset.fletcher32,
            }
        np_dt = (
            None
            if dt.kind not in "biufc"
            else (dt.newbyteorder("<") if dt.byteorder == ">" else dt)
        )
        return TensorInfo(name, str(dt), shape, rng, encoding, None, extras, np_dt)

    @property
    def metadata(self) -> dict[str, Any]:
        """The attributes (see the class doc)."""
        return dict(self._metadata)


def open(source: Any, **kw: Any) -> Reader:  # noqa: A001 - the format API name
    """Open an HDF5 file (path, buffer or opened file); see :class:`Reader`."""
    return Reader(source, **kw)


def load(source: Any, copy: bool = False, **kw: Any) -> dict[str, np.ndarray]:
    """Every dataset (views of the file where :class:`Reader` gives them, unless
    ``copy=True``)."""
    return load_all(Reader, source, copy, **kw)


def save(path: str | os.PathLike[str], tensors: Mapping[str, Any], **kw: Any) -> None:
    """Refused: tenfold reads HDF5 files, it does not write them (use h5py)."""
    raise E.unsupported(
        os.fspath(path), detail="tenfold reads HDF5 files but writes none; use .safetensors or .zt"
    )


def inspect(source: Any, **kw: Any) -> list[dict]:
    """One row per dataset."""
    with Reader(source, **kw) as r:
        rows = []
        for name in r:
            i = r.info(name)
            rng = i.byte_range
            rows.append(
                {
                    "name": name,
                    "dtype": i.dtype,
                    "shape": "x".join(map(str, i.shape)) or "()",
                    "bytes": rng[1] - rng[0] if rng else "-",
                    "encoding": i.encoding,
                    "layout": "dense",
                    "checksum": "-",
                    "offset": rng[0] if rng else "-",
                }
            )
        return rows


def verify(source: Any, **kw: Any) -> Report:
    """Read every dataset; never raises on a damaged file."""
    out: Report = verify_file(FMT, Reader, source, **kw)
    return out
