"""zTensor v2 reader: a read-only ``Mapping[str, object]`` over a memory map.

Opening checks the footer, the manifest's XXH3-64, its deterministic CBOR and every rule of the
spec's validation summary (names, shapes, blob alignment and bounds, identical-or-disjoint
blobs per file, layout metadata); it reads no tensor bytes. Dense raw parts of a byte-exact
type are returned as read-only views of the map (``bool`` after its bytes are checked to be 0
or 1); ``zt.zstd-seekable/1`` parts, packed ``f4_e2m1`` and sharded parts are decoded into
owned arrays. A part with a digest is checked the first time it is read
(``verify_checksums=False`` skips that).

Opening is cheap for the commonest objects: the ``ztplan`` kernel decodes the manifest and keeps
a plain dense object (one raw local ``data`` part of a storage type) as a small plan, checked
against every rule at open; its :class:`ObjectInfo` is built on the first :meth:`info`, and
``reader[name]`` builds its view straight from the plan (see :func:`_v2manifest.decode_manifest`).

What reading an object gives depends on its layout: ``dense`` -> ``np.ndarray``;
``zt.sparse_csr/1`` / ``zt.sparse_coo/1`` -> SciPy array or :class:`SparseTensor` (see
``sparse``); any other layout (``zt.mx/1``, ``zt.quant_group/1``, unknown ones) ->
:class:`PartsObject`, the parts as arrays of their storage dtype plus shape, layout and
attributes. An unknown logical type or encoding is refused when decoded (``UnsupportedError``);
:meth:`V2Reader.stored` always gives the stored bytes.

Shards (multi-file models): a part with ``shard: "name"`` is read from the file that name
resolves to: ``shards[name]`` when the ``shards`` option maps it, else the sibling
``<stem>-<name>.zt`` of the manifest file. Names are checked against the spec's character set
at open, before any file is opened; a shard file is opened on first use and must have a v2
footer and exactly the size the table gives (its whole-file digest is checked by
:meth:`verify` or with ``verify_shards=True``).

The reader's other jobs have their own modules: the file frame (footer, manifest blob,
digests) in ``_v2file``, shard files in ``_v2shards``, part decoding and checks in
``_v2parts`` (both base classes of :class:`V2Reader`), and :meth:`V2Reader.verify`'s
checks in ``_v2verify``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _kernels
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.mapped import MappedFile
from ...core.reader import CheckedSpan, Span
from ...core.report import Report
from ...core.slicing import plan
from ...core.source import open_file
from . import _dcbor, _seekable
from ._readerbase import ZtReader
from ._spec import TAIL_FIRST
from ._v2file import TAIL_READ as TAIL_READ  # re-exported (the lean open reads this much)
from ._v2file import digest_hex, lean_manifest, load_manifest, read_footer, xxh3_hex
from ._v2layout import check_assembly, check_coo_data, check_csr_data
from ._v2parts import V2Parts
from ._v2spec import (
    COO,
    CSR,
    DENSE,
    FOOTER_SIZE,
    LOGICAL,
    MIN_FILE,
    ZSTD_SEEKABLE,
    DensePlan,
    ObjectInfo,
    ObjectTable,
    PlanMap,
    ShardInfo,
    check_shard_name,
    reject,
)
from ._v2verify import check_v2, precheck
from .sparse import SparseTensor, to_result

__all__ = ["V2Reader", "PartsObject", "read_footer", "xxh3_hex", "digest_hex"]

_NO_PLANS: Mapping[str, DensePlan] = MappingProxyType({})

FMT = "zt"
#: the options :meth:`V2Reader.open_fd` takes (any other goes the general way)
_LEAN_OPTIONS = frozenset({"copy", "verify_checksums", "sparse", "limits", "mmap"})
#: builds a plain dense object's view from its plan (``ztplan.view``)
_view = _kernels.load("ztplan").view
#: the base of :class:`V2Reader`: ``reader[name]`` in C for plain dense objects
if TYPE_CHECKING:
    from ..._kernels.ztplan import TableReader as _TableReader
else:
    _TableReader = _kernels.load("ztplan").TableReader
#: maps a whole file read-only in one system call (``fmap.map_fd``)
_map_fd = _kernels.load("fmap").map_fd


class PartsObject(Mapping[str, np.ndarray]):
    """An object of a layout read structurally: part name -> array, plus its metadata."""

    def __init__(self, info: ObjectInfo, parts: dict[str, np.ndarray]) -> None:
        self.info = info
        self.name = info.name
        self.shape = info.shape
        self.layout = info.layout
        self.attributes = dict(info.attributes or {})
        self._parts = parts

    def __getitem__(self, key: str) -> np.ndarray:
        return self._parts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __repr__(self) -> str:
        return f"<PartsObject {self.name!r} {self.layout} {list(self.shape)} parts={list(self)}>"


class V2Reader(_TableReader, V2Parts, ZtReader, Mapping[str, Any]):
    """Read a zTensor v2 file (``89 5A 54 32 0D 0A 1A 0A``).

    Parameters
    ----------
    source
        Path, or a bytes-like object holding the whole file.
    copy
        Default for :meth:`read`: ``False`` gives zero-copy views where possible.
    verify_checksums
        Check a part's ``digest`` the first time it is read.
    sparse
        ``"auto"``, ``"scipy"`` or ``"raw"``, as for the 0.1.0 reader.
    limits
        Size limits applied before any allocation.
    shards
        Optional mapping shard name -> path (default: ``<stem>-<name>.zt`` next to ``source``).
    verify_shards
        Check each shard's whole-file digest when it is first opened.
    trust_links
        Follow a data shard that is a symbolic link wherever it leads; by default a link is
        followed only inside the file's directory (or its Hugging Face cache repository), see
        :mod:`tenfold.core.links`.
    mmap
        ``False`` reads a local file with ``pread`` into owned memory instead of mapping it
        (a URL or fsspec file is read in range requests: :mod:`tenfold.core.source`).
    """

    generation = "v2"
    _label = "tenfold.ztensor.V2Reader"
    _SPARSE = {CSR: "csr", COO: "coo"}
    _ENCODINGS: tuple[str, ...] = (ZSTD_SEEKABLE,)
    #: Plain dense objects read straight from their plan (a subclass may have none).
    _plans: Mapping[str, DensePlan]
    _names: list[str]
    # what the options default to (the lean open sets only what it is given); ``copy``,
    # ``verify_checksums``, ``_table`` (the plans' ``ztplan.PlanTable``), ``_base`` (the map's
    # bytes) and ``_verified`` are kept by the base class, whose ``__getitem__`` builds a
    # plain dense object's view in C (and calls :meth:`_lookup` for any other)
    sparse = "auto"
    limits = DEFAULT_LIMITS
    verify_shards = False
    trust_links = False
    _mmap = True
    _shard_paths: dict[str, str | os.PathLike[str]] = MappingProxyType({})  # type: ignore[assignment]
    data_shard = False
    attributes: Mapping[str, Any] | None = None

    def __init__(
        self,
        source: Any,
        *,
        copy: bool = False,
        verify_checksums: bool = True,
        sparse: str = "auto",
        limits: Limits = DEFAULT_LIMITS,
        shards: Mapping[str, str | os.PathLike[str]] | None = None,
        verify_shards: bool = False,
        mmap: bool = True,
        trust_links: bool = False,
    ) -> None:
        if sparse not in ("auto", "scipy", "raw"):
            raise ValueError(f"sparse must be 'auto', 'scipy' or 'raw', not {sparse!r}")
        if shards is not None:
            for k in shards:
                check_shard_name(k, "shards option")
        self._mf = open_file(source, fmt=FMT, mmap=mmap, tail_first=TAIL_FIRST)
        self._mmap = mmap
        self._adopt(self._mf)
        self.copy = copy
        self.verify_checksums = verify_checksums
        self.sparse = sparse
        self.limits = limits
        self.verify_shards = verify_shards
        self.trust_links = trust_links
        self._shard_paths = dict(shards or {})
        self._shard_files: dict[str, MappedFile] = {}
        self._lock = threading.Lock()
        self._verified: set[tuple[str, str]] = set()
        try:
            man, self.manifest_blob = load_manifest(self._mf, limits)
        except BaseException:
            self._mf.close()
            raise
        self.data_shard = man is None
        self._infos: Mapping[str, ObjectInfo] = man.objects if man else {}
        self._plans: Mapping[str, DensePlan] = man.objects.plans if man else {}
        #: the plans' ``ztplan.PlanTable``: views straight from its records
        self._table = getattr(self._plans, "table", None)
        # a memory map's bytes, to build plain dense views from (other sources: _mf.array)
        self._base = self._mf.buffer() if type(self._mf) is MappedFile else None
        self._tail_start = self._mf.size - FOOTER_SIZE
        self.shards: dict[str, ShardInfo] = (man.shards or {}) if man else {}
        self.attributes = man.attributes if man else None

    @classmethod
    def open_fd(
        cls, path: str, fd: int, size: int, tail: bytes, options: dict[str, Any]
    ) -> V2Reader | None:
        """The lean open of the regular file ``path`` open on ``fd`` (``size`` from ``fstat``,
        v2's head magic already read, ``tail`` its last :data:`TAIL_READ` bytes, as
        ``fmap.open_ends`` gives them): a reader that owns ``fd``, or ``None`` (``fd`` left
        open, nothing else done) when the general path must decide and name any error.

        This is the commonest open, so it does only what building the views needs (see
        :func:`lean_manifest`) and leaves the records (``info``) to be built on first use.
        Anything unusual (a damaged footer or manifest, options other than ``copy``,
        ``verify_checksums``, ``sparse``, ``limits``, ``mmap``) returns ``None`` before the
        file is mapped, and :meth:`__init__` checks it all again, raising what it raises.
        An exception (an ``OSError`` of ``pread`` or ``mmap``) leaves ``fd`` open too: the
        reader owns it only once it is returned.
        """
        if size < MIN_FILE or not _LEAN_OPTIONS.issuperset(options):
            return None
        limits = options.get("limits", DEFAULT_LIMITS)
        sparse = options.get("sparse", "auto")
        if sparse not in ("auto", "scipy", "raw"):
            return None
        got = lean_manifest(fd, size, tail, limits)
        if got is None:
            return None
        table, blob, man = got
        self = cls.__new__(cls)
        self._record_open(path, **options)  # pickled as this open (core.reopen)
        if options:
            self.copy = options.get("copy", False)
            self.verify_checksums = options.get("verify_checksums", True)
            self.sparse = sparse
            self.limits = limits
        self._shard_files = {}
        self._lock = threading.Lock()
        self._verified = set()
        self.manifest_blob = blob
        if man is None:  # plain dense objects only: _infos and _plans come on first use
            self._names = sorted(table.index)
            self.shards = {}
        else:
            self._infos = man.objects
            self._plans = man.objects.plans
            self.shards = man.shards or {}
            self.attributes = man.attributes
        self._table = table
        self._tail_start = size - FOOTER_SIZE
        # last: from here on the reader owns fd (until then, the caller closes it on failure)
        mf = MappedFile.owned_map(path, fd, _map_fd(fd, size), size, FMT)
        self._adopt(mf)
        self._base = mf.buffer()
        return self

    def __getattr__(self, name: str) -> Any:
        # only for what is not set: the records the lean open (open_fd) leaves for later
        if name == "_names":
            names = self.__dict__["_names"] = list(self._infos)
            return names
        if name == "_plans" or name == "_infos":
            d = self.__dict__
            table = self._table
            if table is None:  # no plans (a V1Reader, or a reader whose open failed)
                if name == "_plans":
                    return _NO_PLANS
                raise AttributeError(name)
            plans = PlanMap(table)
            infos = ObjectTable(plans, {}, d.get("_names"))
            d.setdefault("_plans", plans)
            d.setdefault("_infos", infos)
            return d[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def checked_span(self, name: str) -> CheckedSpan | None:
        """Where plain dense object ``name`` lies raw and the digest this reader would check
        before giving it (None when it must read it: see :mod:`tenfold.core.reader`)."""
        plan = self._plans.get(name)
        if plan is None:  # not a plain dense object (sparse, encoded, sharded...)
            return None
        offset, length, _, dtype, shape, digest = plan
        if length != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            return None
        return self._span_check(name, Span(offset, dtype, tuple(shape)), digest)

    def file_span(self, name: str) -> tuple[MappedFile, CheckedSpan] | None:
        """:meth:`checked_span` with its file; for a plain dense object whose part lies in a
        data shard (a multi-file model), its span in that shard's file, opened (its size and
        footer checked) as a read opens it."""
        if name in self._plans:
            c = self.checked_span(name)
            return None if c is None else (self._mf, c)
        info = self.info(name)
        p = info.parts.get("data")
        if info.layout != DENSE or len(info.parts) != 1 or p is None or p.shard is None:
            return None
        if p.encoding is not None or p.type is not None or p.np_dtype.byteorder == ">":
            return None
        if p.length != info.numel * p.np_dtype.itemsize:
            return None
        c = self._span_check(name, Span(p.offset, p.np_dtype, tuple(info.shape)), p.digest)
        return None if c is None else (self._shard(p.shard), c)

    def _span_check(self, name: str, span: Span, digest: str | None) -> CheckedSpan | None:
        """``span`` with the digest of object ``name``'s data part still to be checked, if
        any (None: an algorithm the reader does not know, so it must read it itself)."""
        offset = span.offset
        if digest is None or not self.verify_checksums or (name, "data") in self._verified:
            return CheckedSpan(span)
        algo, _, want = digest.partition(":")
        if algo not in ("xxh3", "sha256"):
            return None  # the reader names an unknown algorithm

        def error(got: str) -> BaseException:  # what the reader's digest check raises
            return reject(
                "digest", f"object {name!r} part 'data'", offset=offset,
                field=f"{algo} digest", expected=want, got=got,
            )  # fmt: skip

        return CheckedSpan(span, algo, want, error, lambda: self._verified.add((name, "data")))

    def verified(self, name: str) -> bool:
        """Whether every digest of object ``name``'s parts has been checked (and held)."""
        parts = self.info(name).parts
        keys = [(name, k) for k, p in parts.items() if p.digest is not None]
        return bool(keys) and all(k in self._verified for k in keys)

    @property
    def metadata(self) -> dict[str, Any]:
        """File-level metadata: the manifest's file attributes (``{}`` when it has none)."""
        return dict(self.attributes or {})

    @property
    def sparse_layouts(self) -> frozenset[str]:
        """The layouts :meth:`read` gives as sparse tensors (the others: ``dense`` gives an
        array, any other layout a :class:`PartsObject`)."""
        return frozenset(self._SPARSE)

    @property
    def encodings(self) -> tuple[str, ...]:
        """The part encodings this reader decodes (a part in another is only digest-checked)."""
        return self._ENCODINGS

    @property
    def tail_start(self) -> int:
        """Where the file's tail (the footer, for v1 the manifest before it) begins."""
        return self._tail_start

    def check_sparse(self, info: ObjectInfo) -> None:
        """Read sparse object ``info`` and check its structure, keeping nothing."""
        self._read_sparse(info)

    # -- Mapping ------------------------------------------------------------------------------
    # ``reader[name]``: the base class gives a plain dense object's view straight from the plan
    # table (its digest checked, or not to be), in C; anything else comes here
    def _lookup(self, name: str) -> Any:
        plan = self._plans.get(name)
        if (
            plan is not None
            and not self.copy
            and (plan[5] is None or not self.verify_checksums or (name, "data") in self._verified)
        ):
            base = self._base
            if base is not None and plan[1]:  # bounds checked at open (and by the kernel)
                return _view(base, plan)
            return self._mf.array(plan[0], plan[3], plan[4], "tensor")
        return self.read(name)

    def _state(self) -> str:
        return "data shard" if self.data_shard and not self.closed else super()._state()

    # -- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Release the file and any shard files. Views already returned stay valid."""
        self._base = None
        super().close()
        if self._shard_files:
            with self._lock:
                for mf in self._shard_files.values():
                    mf.close()
                self._shard_files.clear()

    # -- metadata -----------------------------------------------------------------------------
    @property
    def _root(self) -> Any:
        """The decoded manifest (decoded again on each call: a writer appending needs it)."""
        moff, mlen = self.manifest_blob
        return _dcbor.decode(self._mf.bytes(moff, mlen, "manifest")) if mlen else None

    def info(self, name: str) -> ObjectInfo:
        """Manifest record of ``name``: shape, layout, parts (dtype, type, blob, shard,
        encoding, decoded length, digest) and attributes."""
        return super().info(name)  # type: ignore[no-any-return]

    # -- data ---------------------------------------------------------------------------------

    def read(
        self,
        name: str,
        index: Any = None,
        *,
        copy: bool | None = None,
        out: np.ndarray | None = None,
    ) -> Any:
        """Return object ``name`` (see the module doc for what each layout gives), or the basic
        slice ``index`` of a dense one.

        ``copy=False`` gives a read-only view for raw local dense parts; ``out`` (dense only)
        receives the data instead of a new array. With ``index``, of a raw dense part of a
        storage type only the rows the slice touches are read (its digest covers the whole
        part, so a slice is not checked against it); any other part is decoded whole, once.
        """
        info = self.info(name)
        copy = self.copy if copy is None else copy
        if index is not None:
            return self._read_index(info, index, copy)
        if info.layout == DENSE:
            arr = self._typed(info, "data", info.numel, info.shape, copy or out is not None)
            if out is not None:
                if out.dtype != arr.dtype or out.shape != arr.shape or not out.flags.c_contiguous:
                    raise ValueError(
                        f"zt: out for tensor {name!r} must be C-contiguous {arr.dtype} "
                        f"{arr.shape}, got {out.dtype} {out.shape}"
                    )
                out[...] = arr
                return out
            return arr
        if info.layout in self._SPARSE:
            return to_result(self._read_sparse(info), self.sparse)
        parts = {}
        for role, p in info.parts.items():
            if p.type is not None and p.type not in LOGICAL:
                raw = self.decoded(name, role)
            else:
                raw = self.decoded(name, role)
                self._checked(info, p, raw, None)
            n = raw.size // p.np_dtype.itemsize
            arr = raw[: n * p.np_dtype.itemsize].view(p.np_dtype) if n else np.empty(0, p.np_dtype)
            parts[role] = arr.copy() if copy and p.encoding is None else arr
        return PartsObject(info, parts)

    def _read_index(self, info: ObjectInfo, index: Any, copy: bool) -> Any:
        what = f"object {info.name!r}"
        if info.layout != DENSE:
            raise TypeError(f"zt: {what}: only dense objects can be sliced on read")
        pl = plan(FMT, what, info.shape, index)
        p = self._part(info, "data")
        if (p.encoding not in (None, ZSTD_SEEKABLE)) or p.type is not None or not info.shape:
            return pl.apply(self.read(info.name, copy=copy))
        row = p.np_dtype.itemsize
        for d in info.shape[1:]:
            row *= d
        shape = (pl.hi - pl.lo, *info.shape[1:])
        f = self._file(p)
        if p.encoding is None:
            rows = f.array(p.offset + pl.lo * row, p.np_dtype, shape, what)
        else:  # decode only the frames that hold the rows (each frame's checksum is checked)
            raw = _seekable.decode_range(
                lambda pos, n: f.u8(p.offset + pos, n, what),
                p.length,
                p.decoded_length,  # type: ignore[arg-type]
                pl.lo * row,
                pl.hi * row,
                what=what,
                offset=p.offset,
            )
            rows = raw.view(p.np_dtype).reshape(shape) if raw.size else np.empty(shape, p.np_dtype)
        result = pl.finish(rows)
        if p.encoding is not None:
            return result if isinstance(result, np.ndarray) else np.array(result)
        return np.array(result) if copy or not isinstance(result, np.ndarray) else result

    def read_many(self, names: Any, *, copy: bool | None = None) -> dict[str, Any]:
        """Several objects; on a remote file their parts are fetched together, neighbours
        coalesced into one request. On a local file the digests of their raw dense parts are
        checked first, side by side on the threads :func:`tenfold.core.parallel.threads`
        allows."""
        infos = [self.info(n) for n in names]
        self._mf.prefetch(
            [(p.offset, p.length) for i in infos for p in i.parts.values() if p.shard is None]
        )
        try:
            if self.verify_checksums and not self._mf.remote:
                precheck(self, infos)  # the digests side by side, on every core
            return {i.name: self.read(i.name, copy=copy) for i in infos}
        finally:
            self._mf.release()

    def read_all(self, *, copy: bool | None = None) -> dict[str, Any]:
        """Every object, in manifest order."""
        return self.read_many(list(self._infos), copy=copy)

    def check_ahead(self, names: Any = None) -> None:
        """The digests of the raw dense parts of ``names`` (default: every object), checked
        side by side on every core, as :meth:`read_many` does first; a mismatch is raised by
        the object's read."""
        if self.verify_checksums and not self._mf.remote:
            wanted = list(self._infos) if names is None else list(names)
            precheck(self, [self.info(n) for n in wanted])

    def _read_sparse(self, info: ObjectInfo) -> SparseTensor:
        check_assembly(info)  # COO's metadata rules: not checked at open (see _v2layout)
        shape = info.shape
        what = f"object {info.name!r}"
        if self._SPARSE[info.layout] == "csr":
            ind_p = info.parts["indices"]
            nnz = ind_p.decoded_size // ind_p.np_dtype.itemsize
            indices = self._typed(info, "indices", nnz, None, False)
            indptr = self._typed(info, "indptr", shape[0] + 1, None, False)
            values = self._typed(info, "values", nnz, None, True)
            check_csr_data(what, info, indptr, indices, nnz)
            return SparseTensor(
                "csr",
                shape,
                np.array(values),
                indices=indices.astype(np.uint64),
                indptr=indptr.astype(np.uint64),
            )
        c_p = info.parts["coords"]
        nnz = c_p.decoded_size // c_p.np_dtype.itemsize // len(shape)
        coords = self._typed(info, "coords", nnz * len(shape), None, False)
        coords = coords.reshape(len(shape), nnz).astype(np.uint64)
        values = self._typed(info, "values", nnz, None, True)
        check_coo_data(what, info, coords)
        return SparseTensor("coo", shape, np.array(values), coords=coords)

    # -- verification ---------------------------------------------------------------------------
    def verify(self) -> Report:
        """Check every part (decode, digest, type data rules, sparse structure), every shard's
        size and digest, and that padding is zero."""
        report = Report(FMT, self._mf.path or "<buffer>")
        return check_v2(self, report)
