"""zTensor 0.1.0 reader: a read-only ``Mapping[str, np.ndarray]`` over a memory map.

Opening parses and validates the whole index and nothing else. Little-endian raw dense tensors
are returned as read-only views of the map (no copy, no read until a page is touched); zstd and
big-endian tensors are decoded into owned arrays; ``copy=True`` gives owned arrays everywhere,
read with one ``pread`` per tensor straight into the result (``read_all(copy=True)``: copied
and checked on several threads, a CRC-32C while copying). A tensor with a checksum is
verified the first time it is read whole (pass ``verify_checksums=False`` to skip).

``read(name, index)`` reads a basic slice: of a raw little-endian dense tensor only the rows
the slice touches are read (a whole-tensor checksum cannot be checked on part of the tensor,
so a slice is not checked: :meth:`Reader.verify` or a whole read checks it); a zstd tensor is
decoded whole, once, then sliced. ``mmap=False`` reads with ``pread`` into owned memory, and
a URL or fsspec file is read in range requests (see :mod:`tenfold.core.source`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ...core.alloc import empty
from ...core.bounds import DEFAULT_LIMITS, Budget, Limits, align_up
from ...core.compression import zstd_content_size, zstd_decompress_into
from ...core.reader import CheckedSpan, Span
from ...core.slicing import plan
from ...errors import IntegrityError, describe
from . import _checksum
from ._index import Blob, InfoTable, TensorInfo, parse_file_layout, parse_index_table
from ._readerbase import ZtReader
from ._spec import ALIGN, FMT, MAGIC, TAIL_FIRST
from .sparse import SparseTensor, check_coo, check_csr, to_result

__all__ = ["Reader"]

_MAX_PREAD = 1 << 30
#: read_all(copy=True) copies and checks tensors in blocks of this size, on several threads
#: when they add up to at least _FILL_PARALLEL bytes.
_FILL_BLOCK = 16 << 20
_FILL_PARALLEL = 16 << 20


class Reader(ZtReader, Mapping[str, Any]):
    """Read a zTensor 0.1.0 file: a ``Mapping[str, array]`` (see :mod:`tenfold.core.reader`).

    Parameters
    ----------
    source
        Path, or a bytes-like object holding the whole file.
    copy
        Default for :meth:`read`: ``False`` gives zero-copy views where possible.
    verify_checksums
        Check a tensor's ``checksum`` the first time it is read.
    sparse
        ``"auto"`` (SciPy arrays when SciPy is installed and holds the values' dtype, else
        :class:`SparseTensor`: SciPy has no float16, bfloat16, float8 or float4 values),
        ``"scipy"`` or ``"raw"`` (always :class:`SparseTensor`).
    limits
        Size limits applied before any allocation.
    mmap
        ``False`` reads a local file with ``pread`` into owned memory instead of mapping it.

    Examples
    --------
    >>> import numpy as np, tempfile, os, tenfold.ztensor as zt
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> zt.save(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    >>> with zt.Reader(path) as r:
    ...     w = r["w"]
    ...     r.info("w").shape, w.flags.writeable, float(w.sum())
    ((2, 3), False, 15.0)
    """

    #: the generation this reader reads (:class:`V1Reader` / :class:`V2Reader` say ``"v1"`` /
    #: ``"v2"``): the format's version is here, never in :attr:`metadata`
    generation = "0.1.0"

    def __init__(
        self,
        source: Any,
        *,
        copy: bool = False,
        verify_checksums: bool = True,
        sparse: str = "auto",
        limits: Limits = DEFAULT_LIMITS,
        mmap: bool = True,
    ) -> None:
        if sparse not in ("auto", "scipy", "raw"):
            raise ValueError(f"sparse must be 'auto', 'scipy' or 'raw', not {sparse!r}")
        self._map(source, FMT, mmap=mmap, tail_first=TAIL_FIRST)
        self.copy = copy
        self.verify_checksums = verify_checksums
        self.sparse = sparse
        self.limits = limits
        self._verified: set[str] = set()
        try:
            size = self._mf.size
            head = self._mf.magic(MAGIC)
            footer = int(self._mf.array(size - 8, "<u8", (), "index size")) if size >= 16 else None
            self.index_start, self.index_size = parse_file_layout(head, size, footer)
            self._infos: InfoTable = (
                parse_index_table(
                    self._mf.u8(self.index_start, self.index_size, "index"),
                    self.index_start,
                    limits,
                )
                if self.index_size
                else InfoTable({}, True)
            )
        except BaseException:
            self.close()
            raise

    # -- metadata -----------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """File-level metadata, exactly as ``tenfold.save(..., metadata=)`` and ``convert``
        gave it: the first tensor's ``__metadata__`` map (zTensor 0.1.0 has no file-level map),
        ``{}`` when there is none. A key ``version`` is the writer's like any other; the
        format's version is :attr:`generation`."""
        if self._infos.plain:  # no entry has custom keys
            return {}
        for i in self._infos.values():
            md = i.attrs.get("__metadata__")
            if isinstance(md, dict):
                return dict(md)
        return {}

    def info(self, name: str) -> TensorInfo:
        """Index record of ``name``: dtype, shape, layout, encoding, offset, size, checksum,
        custom keys (``attrs``) and sparse components."""
        return super().info(name)  # type: ignore[no-any-return]

    # -- what frameworks ask (tenfold.core.reader) ---------------------------------------------
    def verified(self, name: str) -> bool:
        """Whether tensor ``name``'s checksum has been checked (and held) by this reader."""
        return bool(self.info(name).checksum_algo) and name in self._verified

    def span(self, name: str) -> Span | None:
        """Where dense raw little-endian tensor ``name`` lies in the file, unless its checksum
        is still to be checked by a whole read (see :mod:`tenfold.core.reader`)."""
        i = self.info(name)
        if i.layout != "dense" or i.encoding != "raw" or not i.zero_copy:
            return None
        if self.verify_checksums and i.checksum_algo and name not in self._verified:
            return None
        return Span(i.offset, i.np_dtype, tuple(i.shape))

    def checked_span(self, name: str) -> CheckedSpan | None:
        """Where dense raw tensor ``name`` lies and the CRC-32C / SHA-256 this reader would
        check before giving it (None when it must read it: see :mod:`tenfold.core.reader`)."""
        info = self.info(name)
        if info.layout != "dense" or info.encoding != "raw" or not info.zero_copy:
            return None
        if info.size != info.nbytes:
            return None
        span = Span(info.offset, info.np_dtype, tuple(info.shape))
        algo = info.checksum_algo
        if not algo or not self.verify_checksums or name in self._verified:
            return CheckedSpan(span)
        want, at = info.checksum_hex, info.offset
        if algo not in _checksum.ALGORITHMS or want is None:
            return None  # the reader names it

        def error(got: str) -> BaseException:  # what the reader's own check raises
            return _checksum.mismatch(algo, want, got, f"tensor {name!r}", at)

        return CheckedSpan(span, algo, want, error, lambda: self._verified.add(name))

    def spans(self, names: Iterable[str]) -> list[Span | None]:
        """:meth:`span` of each name, from the index kernel's compact records where the
        tensor has one (no record built)."""
        infos = self._infos
        compact_span = infos.compact_span
        out: list[Span | None] = []
        for n in names:
            known, got = compact_span(n)  # a compact record has no checksum to check
            out.append((None if got is None else Span(*got)) if known else self.span(n))
        return out

    # -- data ---------------------------------------------------------------------------------
    def stored(self, name: str) -> np.ndarray:
        """The tensor's (values) blob exactly as stored, as a read-only ``uint8`` view."""
        info = self.info(name)
        return self._mf.u8(info.offset, info.size, f"tensor {name!r}")

    # verify(): every tensor (checksum, full decode, sparse structure) and the padding,
    # ztensor.verify.verify_reader, joined in the package __init__ (MappedReader.use_verifier)

    def read(
        self,
        name: str,
        index: Any = None,
        *,
        copy: bool | None = None,
        out: np.ndarray | None = None,
        budget: Budget | None = None,
    ) -> Any:
        """Return tensor ``name``, or the basic slice ``index`` of it.

        ``copy=False`` gives a read-only view for little-endian raw dense tensors; everything
        else is an owned array. ``out`` (dense only) receives the data instead of a new array.
        What the call allocates is charged to ``budget`` (default: a fresh one from the
        reader's ``limits``, see :attr:`~tenfold.core.Limits.decode_budget`). With ``index``
        only the rows the slice needs are read (see the module doc).
        """
        info = self.info(name)
        copy = self.copy if copy is None else copy
        if budget is None:
            budget = self.limits.budget()
        if index is not None:
            return self._read_index(info, index, copy, budget)
        if info.layout != "dense":
            return to_result(self._read_sparse(info, budget), self.sparse)
        if self.verify_checksums and info.checksum_algo and name not in self._verified:
            self._check_sum(info)
        if info.encoding == "raw":
            if info.zero_copy and not copy and out is None:
                return self._mf.array(info.offset, info.np_dtype, info.shape, f"tensor {name!r}")
            result = _prepare_out(out, info, budget)
            self._copy_into(info.offset, info.size, result)
        else:
            _check_frame(self.stored(name), info.nbytes, f"tensor {name!r}", info.offset)
            result = _prepare_out(out, info, budget)
            zstd_decompress_into(
                self.stored(name),
                result.reshape(-1).view(np.uint8),
                fmt=FMT,
                what=f"tensor {name!r}",
                offset=info.offset,
            )
        if info.endianness == "big" and info.np_dtype.itemsize > 1:
            _swap_in_place(result)
        return result

    def _read_index(self, info: TensorInfo, index: Any, copy: bool, budget: Budget) -> Any:
        what = f"tensor {info.name!r}"
        p = plan(FMT, what, info.shape, index)
        if info.layout != "dense" or not info.zero_copy or not info.shape:
            whole = self.read(info.name, copy=copy, budget=budget)
            if info.layout != "dense":
                raise TypeError(f"zt: {what}: a sparse tensor cannot be sliced on read")
            return p.apply(whole)
        row = info.np_dtype.itemsize
        for d in info.shape[1:]:
            row *= d
        rows = self._mf.array(
            info.offset + p.lo * row, info.np_dtype, (p.hi - p.lo, *info.shape[1:]), what
        )
        result = p.finish(rows)
        if copy or not isinstance(result, np.ndarray):
            budget.take(result.nbytes, FMT, what, offset=info.offset)
            return np.array(result)
        return result

    def read_many(self, names: Any, *, copy: bool | None = None) -> dict[str, Any]:
        """Several tensors; on a remote file their ranges are fetched together, neighbours
        coalesced into one request."""
        infos = [self.info(n) for n in names]
        budget = self.limits.budget()
        self._mf.prefetch(_ranges(infos))
        try:
            return {i.name: self.read(i.name, copy=copy, budget=budget) for i in infos}
        finally:
            self._mf.release()

    def read_all(self, *, copy: bool | None = None) -> dict[str, Any]:
        """Every tensor, in file order.

        With ``copy=True`` the little-endian raw dense tensors are read into one allocation
        (each 64-byte aligned in it), which avoids a page-fault storm of many small
        allocations: the arrays are writable views of that shared buffer, which lives as long
        as any of them. They are copied in 16 MiB blocks on the threads
        :func:`tenfold.core.parallel.threads` allows, a CRC-32C computed while copying (one
        pass over the bytes), other blocks with ``pread``; errors are raised in file order.
        """
        copy = self.copy if copy is None else copy
        if self._mf.remote:
            return self.read_many(list(self._infos), copy=copy)
        budget = self.limits.budget()  # one for the whole call
        direct = [i for i in self._infos.values() if i.zero_copy]
        if not copy:
            self._fill(direct, None)  # the checksums first, on every core (check_ahead)
            return {name: self.read(name, copy=False, budget=budget) for name in self._infos}
        slab = empty(
            sum(align_up(i.size, ALIGN) for i in direct),
            np.uint8,
            fmt=FMT,
            what="tensors read with copy=True",
            budget=budget,
        )
        places: dict[str, np.ndarray] = {}
        pos = 0
        for info in direct:
            places[info.name] = slab[pos : pos + info.size]
            pos += align_up(info.size, ALIGN)
        failed = self._fill(direct, places)
        out: dict[str, Any] = {}
        for info in self._infos.values():  # errors in file order, as one by one
            if not info.zero_copy:
                out[info.name] = self.read(info.name, copy=True, budget=budget)
                continue
            if info.name in failed:
                raise failed[info.name]
            out[info.name] = places[info.name].view(info.np_dtype).reshape(info.shape)
        return out

    def check_ahead(self, names: Iterable[str] | None = None) -> None:
        """The CRC-32C and SHA-256 of the raw tensors among ``names`` (default: all), computed
        over the map on every core (:meth:`read_all` does it without a copy); a mismatch is
        raised by the tensor's read."""
        if self._mf.remote or not self.verify_checksums:
            return
        wanted = self._infos.values() if names is None else [self.info(n) for n in names]
        self._fill([i for i in wanted if i.zero_copy], None)

    def _fill(
        self, infos: list[TensorInfo], places: dict[str, np.ndarray] | None
    ) -> dict[str, IntegrityError]:
        """Copy the raw tensors ``infos`` into ``places`` and check their checksums, in
        parallel over tensors and over blocks of large ones (threads from
        :func:`tenfold.core.parallel.threads`). A CRC-32C is computed while copying (one pass,
        the block CRCs joined); SHA-256 hashes the copy. With ``places=None`` nothing is
        copied: the checksums are computed over the map. Returns the mismatches by name (the
        matches are marked verified)."""
        from ...core import checksums, parallel

        block = _FILL_BLOCK
        check = {
            i.name
            for i in infos
            if self.verify_checksums and i.checksum_algo and i.name not in self._verified
        }
        if places is None:
            infos = [i for i in infos if i.name in check]
        tasks: list[tuple[TensorInfo, int, int]] = []
        for info in infos:
            if places is None and info.checksum_algo != "crc32c":
                continue  # hashed whole by sha() below
            tasks += [(info, a, min(block, info.size - a)) for a in range(0, info.size, block)]
        crcs: dict[str, dict[int, int]] = {i.name: {} for i in infos}

        def mapped(info: TensorInfo, start: int, n: int) -> np.ndarray:
            return self._mf.u8(info.offset + start, n, f"tensor {info.name!r}")

        def copy(task: tuple[TensorInfo, int, int]) -> None:
            info, start, n = task
            if places is None:
                crcs[info.name][start] = checksums.crc32c(mapped(info, start, n), threads=1)
                return
            dst = places[info.name][start : start + n]
            if info.name in check and info.checksum_algo == "crc32c":
                crcs[info.name][start] = checksums.copy_crc32c(mapped(info, start, n), dst)
            else:
                self._copy_into(info.offset + start, n, dst)

        def sha(info: TensorInfo) -> str:
            src = mapped(info, 0, info.size) if places is None else places[info.name]
            return checksums.sha256_hex(src)

        hashed = [i for i in infos if i.name in check and i.checksum_algo == "sha256"]
        total = sum(i.size for i in infos)
        jobs = len(tasks) + len(hashed)
        workers = min(parallel.threads(), jobs) if total >= _FILL_PARALLEL else 1
        digests: dict[str, str] = {}

        def job(item: TensorInfo | tuple[TensorInfo, int, int]) -> None:
            if isinstance(item, tuple):
                copy(item)
            else:
                digests[item.name] = sha(item)

        if places is None:  # over the map: the SHA-256 streams (in order, long) first
            parallel.each(job, [*hashed, *tasks], workers)
        else:  # a SHA-256 hashes the copy: the copies first
            parallel.each(copy, tasks, workers)
            parallel.each(job, hashed, workers)
        failed: dict[str, IntegrityError] = {}
        for info in infos:
            if info.name not in check:
                continue
            assert info.checksum_algo is not None and info.checksum_hex is not None
            if info.checksum_algo == "crc32c":
                value = 0
                for start, crc in sorted(crcs[info.name].items()):
                    value = checksums.crc32c_combine(value, crc, min(block, info.size - start))
                got = f"{value:08x}"
            else:
                got = digests[info.name]
            if got == info.checksum_hex:
                self._verified.add(info.name)
            else:
                failed[info.name] = _checksum.mismatch(
                    info.checksum_algo, info.checksum_hex, got, f"tensor {info.name!r}", info.offset
                )
        return failed

    def check_sum(self, info: TensorInfo) -> None:
        """Check tensor ``info``'s stored checksum (then its reads do not check it again)."""
        self._check_sum(info)

    def _check_sum(self, info: TensorInfo) -> None:
        assert info.checksum_algo is not None and info.checksum_hex is not None
        _checksum.verify(
            info.checksum_algo,
            info.checksum_hex,
            self.stored(info.name),
            f"tensor {info.name!r}",
            info.offset,
        )
        self._verified.add(info.name)

    def _copy_into(self, offset: int, nbytes: int, result: np.ndarray) -> None:
        if nbytes:
            self._mf.pread_into(offset, result.reshape(-1).view(np.uint8)[:nbytes], "blob")

    def _decode_blob(
        self, name: str, blob: Blob, dtype: np.dtype, count: int, encoding: str, budget: Budget
    ) -> np.ndarray:
        what = f"tensor {name!r}"
        if encoding == "raw":
            return self._mf.array(blob.offset, dtype, (count,), what)
        _check_frame(
            self._mf.u8(blob.offset, blob.size, what), count * dtype.itemsize, what, blob.offset
        )
        out = empty(count, dtype, fmt=FMT, what=what, offset=blob.offset, budget=budget)
        zstd_decompress_into(
            self._mf.u8(blob.offset, blob.size, what),
            out.view(np.uint8),
            fmt=FMT,
            what=what,
            offset=blob.offset,
        )
        return out

    def _read_sparse(self, info: TensorInfo, budget: Budget) -> SparseTensor:
        name, shape, nnz = info.name, info.shape, info.nnz
        assert nnz is not None
        # the owned copies made below: values, and uint64 indices (csr: indptr + indices)
        csr = info.sparse_format == "csr"
        index_bytes = 8 * (shape[0] + 1 + nnz if csr else len(shape) * nnz)
        budget.take(
            nnz * info.np_dtype.itemsize + index_bytes, FMT, f"tensor {name!r}", offset=info.offset
        )
        if self.verify_checksums and info.checksum_algo and name not in self._verified:
            self._check_sum(info)
        vdt = info.np_dtype
        if info.endianness == "big" and vdt.itemsize > 1:
            vdt_disk = np.dtype(f">u{vdt.itemsize}")
        else:
            vdt_disk = vdt
        if info.layout == "sparse":
            values = self._decode_blob(
                name, Blob(info.offset, info.size), vdt_disk, nnz, info.encoding, budget
            )
            if info.sparse_format == "csr":
                indptr = self._decode_blob(
                    name,
                    info.components["indptr"],
                    np.dtype("<u8"),
                    shape[0] + 1,
                    info.encoding,
                    budget,
                )
                indices = self._decode_blob(
                    name, info.components["indices"], np.dtype("<u8"), nnz, info.encoding, budget
                )
            else:
                coords = self._decode_blob(
                    name,
                    info.components["coords"],
                    np.dtype("<u8"),
                    len(shape) * nnz,
                    info.encoding,
                    budget,
                )
                coords = coords.reshape(len(shape), nnz)
        elif info.sparse_format == "csr":  # legacy single blob
            head = (shape[0] + 1) * 8
            indptr = self._mf.array(info.offset, "<u8", (shape[0] + 1,), f"tensor {name!r}")
            indices = self._mf.array(info.offset + head, "<u8", (nnz,), f"tensor {name!r}")
            values = self._mf.array(
                info.offset + head + 8 * nnz, vdt_disk, (nnz,), f"tensor {name!r}"
            )
        else:
            rec = np.dtype([("idx", "<u8", (len(shape),)), ("v", vdt_disk)])
            recs = self._mf.records(rec, nnz, info.offset, f"tensor {name!r}")
            coords = np.ascontiguousarray(recs["idx"].T)
            values = recs["v"]
        if vdt_disk is not vdt:
            values = values.astype(f"<u{vdt.itemsize}").view(vdt)
        else:
            values = np.array(values, copy=True)  # owned: sparse results outlive the map
        if info.sparse_format == "csr":
            indptr = np.array(indptr, dtype=np.uint64)
            indices = np.array(indices, dtype=np.uint64)
            check_csr(name, info.offset, shape, indptr, indices, nnz)
            return SparseTensor("csr", shape, values, indices=indices, indptr=indptr)
        coords = np.array(coords, dtype=np.uint64)
        check_coo(name, info.offset, shape, coords)
        return SparseTensor("coo", shape, values, coords=coords)


def _ranges(infos: list[TensorInfo]) -> list[tuple[int, int]]:
    out = []
    for i in infos:
        out.append((i.offset, i.size))
        out.extend((b.offset, b.size) for b in i.components.values())
    return out


def _prepare_out(out: np.ndarray | None, info: TensorInfo, budget: Budget) -> np.ndarray:
    if out is None:
        return empty(
            info.shape,
            info.np_dtype,
            fmt=FMT,
            what=f"tensor {info.name!r}",
            offset=info.offset,
            budget=budget,
        )
    if out.dtype != info.np_dtype or out.shape != info.shape or not out.flags.c_contiguous:
        raise ValueError(
            f"zt: out for tensor {info.name!r} must be C-contiguous {info.np_dtype} "
            f"{info.shape}, got {out.dtype} {out.shape}"
        )
    if not out.flags.writeable:
        raise ValueError(f"zt: out for tensor {info.name!r} is read-only")
    return out


def _check_frame(frame: np.ndarray, expected: int, what: str, offset: int) -> None:
    """Refuse a zstd frame whose declared content size differs, before allocating for it."""
    declared = zstd_content_size(frame)
    if declared is not None and declared != expected:
        raise IntegrityError(
            describe(
                FMT, what, offset=offset, field="zstd content size", expected=expected, got=declared
            )
        )


def _swap_in_place(a: np.ndarray) -> None:
    u = a.reshape(-1).view(f"<u{a.dtype.itemsize}")
    u.byteswap(inplace=True)
