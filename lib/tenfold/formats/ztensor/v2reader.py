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
``reader[name]`` builds its view straight from the plan (see :func:`_v2spec.decode_manifest`).

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
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from ... import _kernels
from ...core import links
from ...core.alloc import empty
from ...core.bounds import DEFAULT_LIMITS, Limits
from ...core.buffers import byte_view
from ...core.checksums import sha256_hex
from ...core.mapped import MappedFile
from ...core.report import ERROR, OK, WARNING, Report
from ...core.slicing import plan
from ...core.source import is_remote, open_file
from ...errors import LimitError, TenfoldError
from . import _dcbor, _seekable
from ._dcbor import MAX_DEPTH, CborReject
from ._readerbase import ZtReader
from ._v2spec import (
    ALIGN,
    COO,
    CSR,
    DENSE,
    DIGESTS,
    DTYPES,
    FOOTER_SIZE,
    LOGICAL,
    MAGIC,
    MAX_MANIFEST,
    MAX_NAME_BYTES,
    MAX_RANK,
    MIN_FILE,
    VERSION,
    ZSTD_SEEKABLE,
    DensePlan,
    Manifest,
    ObjectInfo,
    ObjectTable,
    PartInfo,
    PlanMap,
    ShardInfo,
    check_shard_name,
    check_type_data,
    decode_manifest,
    finish_scan,
    reject,
    scan_table,
)
from .sparse import SparseTensor, to_result

__all__ = ["V2Reader", "PartsObject", "read_footer", "xxh3_hex", "digest_hex"]

_NO_PLANS: Mapping[str, DensePlan] = MappingProxyType({})

FMT = "zt"
_VERSION_LE = VERSION.to_bytes(4, "little")
#: bytes read from the end of a file by the lean open: footer and (most) manifests at once
TAIL_READ = 16 << 10
#: the options :meth:`V2Reader._open_fd` takes (any other goes the general way)
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


def xxh3_hex(data: object) -> str:
    """XXH3-64 of ``data`` as 16 lowercase hex digits."""
    return f"{xxhash.xxh3_64_intdigest(byte_view(data)):016x}"


def digest_hex(algo: str, data: object) -> str:
    if algo == "xxh3":
        return xxh3_hex(data)
    if algo == "sha256":
        return sha256_hex(data)
    raise reject("unsupported", "digest", detail="unknown digest algorithm", got=algo)


def digest_hasher(algo: str) -> Any:
    """A hashlib-style object (``update``, ``hexdigest``) giving :func:`digest_hex`'s value."""
    if algo == "xxh3":
        return xxhash.xxh3_64()
    if algo == "sha256":
        return hashlib.sha256()
    raise reject("unsupported", "digest", detail="unknown digest algorithm", got=algo)


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


def read_footer(mf: MappedFile) -> tuple[int, int, int, int]:
    """Check size, magic and version; return ``(manifest_offset, length, hash, version)``."""
    size = mf.size
    if size < MIN_FILE:
        raise reject(
            "file-too-small",
            "file",
            offset=0,
            detail="shorter than magic + footer",
            expected=f">= {MIN_FILE} bytes",
            got=size,
        )
    head = mf.magic(MAGIC)
    if head != MAGIC:
        raise reject(
            "header-magic", "file", offset=0, field="magic", expected=MAGIC.hex(), got=head.hex()
        )
    foot = mf.bytes(size - FOOTER_SIZE, FOOTER_SIZE, "footer")
    if foot[32:] != MAGIC:
        raise reject(
            "footer-magic",
            "footer",
            offset=size - 8,
            field="magic",
            expected=MAGIC.hex(),
            got=foot[32:].hex(),
        )
    version = int.from_bytes(foot[24:28], "little")
    if version != VERSION:
        raise reject(
            "footer-version",
            "footer",
            offset=size - 16,
            field="version",
            detail="unsupported",
            expected=VERSION,
            got=version,
        )
    return (
        int.from_bytes(foot[0:8], "little"),
        int.from_bytes(foot[8:16], "little"),
        int.from_bytes(foot[16:24], "little"),
        version,
    )


def load_manifest(mf: MappedFile, limits: Limits) -> tuple[Manifest | None, tuple[int, int]]:
    """Footer + manifest checks; ``(None, (0, 0))`` for a data shard."""
    size = mf.size
    moff, mlen, mhash, _ = read_footer(mf)
    if mlen == 0:
        if moff == 0 and mhash == 0:
            return None, (0, 0)
        raise reject(
            "manifest-bounds",
            "footer",
            offset=size - FOOTER_SIZE,
            detail="manifest_length is 0 but offset/hash are not (data shard footer "
            "must be all zero)",
            got=(moff, mhash),
        )
    if mlen > MAX_MANIFEST or mlen > limits.max_index_bytes:
        raise reject(
            "manifest-too-large",
            "manifest",
            offset=moff,
            field="manifest_length",
            detail="above limit",
            expected=f"<= {min(MAX_MANIFEST, limits.max_index_bytes)}",
            got=mlen,
        )
    if moff % ALIGN or moff < ALIGN:
        raise reject(
            "blob-alignment",
            "manifest",
            offset=moff,
            field="manifest_offset",
            detail="not a multiple of 4096 at or after 4096",
            got=moff,
        )
    if moff + mlen > size - FOOTER_SIZE:
        raise reject(
            "manifest-bounds",
            "manifest",
            offset=moff,
            field="manifest blob",
            detail="runs into the footer or past the end of the file",
            expected=f"end <= {size - FOOTER_SIZE}",
            got=moff + mlen,
        )
    raw = mf.bytes(moff, mlen, "manifest")
    got = xxhash.xxh3_64_intdigest(raw)
    if got != mhash:
        raise reject(
            "manifest-hash",
            "manifest",
            offset=moff,
            field="XXH3-64",
            expected=f"{mhash:016x}",
            got=f"{got:016x}",
        )
    man = decode_manifest(
        raw, file_size=size, manifest=(moff, mlen), moff=moff, max_objects=limits.max_objects
    )
    return man, (moff, mlen)


def _lean_manifest(
    fd: int, size: int, tail: bytes, limits: Limits
) -> tuple[Any, tuple[int, int], Manifest | None] | None:
    """For :meth:`V2Reader._open_fd`: ``(plan table, manifest blob, manifest)`` of a v2 file
    open on ``fd`` whose footer and manifest pass every check, or ``None`` for any other (the
    general path then names the error). ``tail`` is the file's last ``TAIL_READ`` bytes (all
    of it when smaller): the footer, and the manifest when it is that close, as a writer
    puts it; else the manifest takes one ``pread`` more. ``manifest`` is ``None`` when every
    object is a plain dense one in its own blob, in order: then no record is built here."""
    n = len(tail)
    if n != min(size, TAIL_READ):  # the file shrank while it was read
        return None
    foot = tail[-FOOTER_SIZE:]
    moff = int.from_bytes(foot[0:8], "little")
    mlen = int.from_bytes(foot[8:16], "little")
    if (
        foot[32:] != MAGIC
        or foot[24:28] != _VERSION_LE
        or not 0 < mlen <= limits.max_index_bytes
        or mlen > MAX_MANIFEST
        or moff % ALIGN
        or moff < ALIGN
        or moff + mlen > size - FOOTER_SIZE
    ):
        return None
    at = moff - (size - n)
    raw = tail[at : at + mlen] if at >= 0 else os.pread(fd, mlen, moff)
    if len(raw) != mlen or xxhash.xxh3_64_intdigest(raw) != int.from_bytes(foot[16:24], "little"):
        return None
    try:
        scan = scan_table(
            raw, MAX_DEPTH, size - FOOTER_SIZE, ALIGN, MAX_RANK, MAX_NAME_BYTES, DTYPES, DIGESTS
        )
    except CborReject:
        return None
    if scan is None:
        return None
    table, others, rest, in_order, lo, hi = scan
    blob = (moff, mlen)
    if others or rest or not (in_order and (lo < 0 or moff >= hi or moff + mlen <= lo)):
        try:
            man = finish_scan(
                scan, file_size=size, manifest=blob, moff=moff, max_objects=limits.max_objects
            )
        except TenfoldError:
            return None
        return table, blob, man
    if len(table.index) > limits.max_objects:
        return None
    return table, blob, None


class V2Reader(_TableReader, ZtReader, Mapping[str, Any]):
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
        self._mf = open_file(source, fmt=FMT, mmap=mmap)
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
    def _open_fd(
        cls, path: str, fd: int, size: int, tail: bytes, options: dict[str, Any]
    ) -> V2Reader | None:
        """The lean open of the regular file ``path`` open on ``fd`` (``size`` from ``fstat``,
        v2's head magic already read, ``tail`` its last :data:`TAIL_READ` bytes, as
        ``fmap.open_ends`` gives them): a reader that owns ``fd``, or ``None`` (``fd`` left
        open, nothing else done) when the general path must decide and name any error.

        This is the commonest open, so it does only what building the views needs (see
        :func:`_lean_manifest`) and leaves the records (``info``) to be built on first use.
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
        got = _lean_manifest(fd, size, tail, limits)
        if got is None:
            return None
        table, blob, man = got
        self = cls.__new__(cls)
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
        self._base = mf._u8
        return self

    def __getattr__(self, name: str) -> Any:
        # only for what is not set: the records the lean open (_open_fd) leaves for later
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

    # -- shards -------------------------------------------------------------------------------
    def shard_path(self, name: str) -> str:
        """Where shard ``name`` is read from (the name was validated at open)."""
        if name in self._shard_paths:
            return os.fspath(self._shard_paths[name])
        if self._mf.path is None:
            raise reject(
                "shard-file",
                f"shard {name!r}",
                detail="file opened from a buffer: pass shards={name: path}",
            )
        base = self._mf.path
        stem = base[:-3] if base.endswith(".zt") else base
        return f"{stem}-{name}.zt"

    def _shard(self, name: str) -> MappedFile:
        with self._lock:
            mf = self._shard_files.get(name)
            if mf is not None:
                return mf
            entry = self.shards[name]
            path = self.shard_path(name)
            self._check_shard_link(name, path)
            try:
                mf = open_file(path, fmt=FMT, mmap=self._mmap)  # a URL when the manifest's is
            except FileNotFoundError as exc:
                raise reject(
                    "shard-file",
                    f"shard {name!r}",
                    detail=f"file {path} not found (a v2 data shard lies beside its root file)",
                ) from exc
            try:
                if mf.size != entry.size:
                    raise reject(
                        "shard-file",
                        f"shard {name!r}",
                        field="size",
                        detail=f"file {path} has the wrong size",
                        expected=entry.size,
                        got=mf.size,
                    )
                read_footer(mf)
                if self.verify_shards:
                    self._check_shard_digest(name, mf)
            except BaseException:
                mf.close()
                raise
            self._shard_files[name] = mf
            return mf

    def _check_shard_link(self, name: str, path: str) -> None:
        """A data shard found beside the root file (not named by the caller's ``shards=``)
        is followed through a symbolic link only where the link rule allows
        (:mod:`tenfold.core.links`; ``trust_links=True`` follows any)."""
        base = self._mf.path
        if self.trust_links or name in self._shard_paths or base is None or is_remote(base):
            return
        d = os.path.dirname(os.path.abspath(base))
        escaped = links.escape(d, os.path.basename(path), links.roots(d))
        if escaped is not None:
            raise reject(
                "shard-file",
                f"shard {name!r}",
                detail=f"a symbolic link leading outside the file's directory refused: {escaped}"
                "; pass trust_links=True to follow links in a tree you trust",
            )

    def _check_shard_digest(self, name: str, mf: MappedFile) -> None:
        entry = self.shards[name]
        algo, want = entry.digest.split(":", 1)
        if algo not in DIGESTS:
            raise reject(
                "unsupported",
                f"shard {name!r}",
                field="digest",
                detail="unknown algorithm",
                got=algo,
            )
        got = digest_hex(algo, mf.buffer())
        if got != want:
            raise reject(
                "digest", f"shard {name!r}", field=f"{algo} digest", expected=want, got=got
            )

    def _file(self, part: PartInfo) -> MappedFile:
        return self._mf if part.shard is None else self._shard(part.shard)

    # -- data ---------------------------------------------------------------------------------
    def stored(self, name: str, part: str | None = None) -> np.ndarray:
        """A part's blob exactly as stored (``uint8`` view); ``part`` defaults to the main one."""
        info = self.info(name)
        p = info.main_part if part is None else self._part(info, part)
        return self._file(p).u8(p.offset, p.length, f"object {name!r} part {p.name!r}")

    def _part(self, info: ObjectInfo, role: str) -> PartInfo:
        try:
            return info.parts[role]
        except KeyError:
            raise KeyError(f"zt: object {info.name!r} has no part {role!r}") from None

    def decoded(self, name: str, part: str) -> np.ndarray:
        """A part's decoded bytes (``uint8``; a view when the part is raw and local)."""
        info = self.info(name)
        p = self._part(info, part)
        what = f"object {name!r} part {part!r}"
        if p.encoding is None:
            return self._file(p).u8(p.offset, p.length, what)
        self._check_encoding(p, what)
        out = empty(p.decoded_length, np.uint8, fmt=FMT, what=what, offset=p.offset)
        _seekable.decode_into(
            self._file(p).u8(p.offset, p.length, what), out, what=what, offset=p.offset
        )
        return out

    def _pieces(self, info: ObjectInfo, p: PartInfo) -> Iterator[np.ndarray]:
        """A part's decoded bytes in pieces, each valid until the next (verification keeps
        nothing, so its memory does not grow with the part)."""
        what = f"object {info.name!r} part {p.name!r}"
        stored = self._file(p).u8(p.offset, p.length, what)
        if p.encoding is None:
            yield stored
            return
        self._check_encoding(p, what)
        yield from _seekable.decode_pieces(
            stored,
            p.decoded_length,  # type: ignore[arg-type]
            what=what,
            offset=p.offset,
        )

    def _check_encoding(self, p: PartInfo, what: str) -> None:
        if p.encoding != ZSTD_SEEKABLE:
            raise reject(
                "unsupported",
                what,
                field="encoding",
                detail="unknown encoding",
                expected=ZSTD_SEEKABLE,
                got=p.encoding,
            )
        if p.decoded_length > self.limits.max_decoded_bytes:  # type: ignore[operator]
            raise reject(
                "encoding-data",
                what,
                field="decoded_length",
                detail="above limit",
                expected=f"<= {self.limits.max_decoded_bytes}",
                got=p.decoded_length,
                cls=LimitError,
            )

    def _checked(self, info: ObjectInfo, p: PartInfo, raw: np.ndarray, count: int | None) -> None:
        key = (info.name, p.name)
        if key in self._verified:
            return
        if self.verify_checksums and p.digest is not None:
            self._check_digest(info, p, raw)
        check_type_data(info, p, raw, count)
        self._verified.add(key)

    def _check_digest(self, info: ObjectInfo, p: PartInfo, raw: np.ndarray) -> None:
        algo, want = p.digest_algo, p.digest_hex
        what = f"object {info.name!r} part {p.name!r}"
        if algo not in DIGESTS:
            raise reject("unsupported", what, field="digest", detail="unknown algorithm", got=algo)
        got = digest_hex(algo, raw)  # type: ignore[arg-type]
        if got != want:
            raise reject(
                "digest", what, offset=p.offset, field=f"{algo} digest", expected=want, got=got
            )

    def verify_part(self, name: str, part: str) -> None:
        """Decode one part and check its digest and its logical type's data rules (decoded
        in pieces, keeping none: the memory it takes does not grow with the part)."""
        info = self.info(name)
        p = self._part(info, part)
        known = p.type is None or p.type in LOGICAL
        self._scan_part(info, p, types=known)
        if not known:
            raise reject(
                "unsupported",
                f"object {name!r} part {part!r}",
                field="type",
                detail="unknown logical type",
                got=p.type,
            )

    def _digest_scan(self, info: ObjectInfo, p: PartInfo) -> Any:
        """The hasher a scan feeds (v2 digests cover the decoded bytes), or None."""
        if p.digest is None:
            return None
        if p.digest_algo not in DIGESTS:
            what = f"object {info.name!r} part {p.name!r}"
            raise reject(
                "unsupported", what, field="digest", detail="unknown algorithm", got=p.digest_algo
            )
        return digest_hasher(p.digest_algo)  # type: ignore[arg-type]

    def _scan_part(self, info: ObjectInfo, p: PartInfo, *, types: bool = True) -> None:
        """Decode part ``p`` in pieces, checking its digest and (with ``types``) its logical
        type's data rules on each piece as it goes; nothing is kept."""
        hasher = self._digest_scan(info, p)
        pos = 0
        last = np.empty(0, np.uint8)
        for piece in self._pieces(info, p):
            if hasher is not None:
                hasher.update(piece)
            if types:
                check_type_data(info, p, piece, None, pos)
            if piece.size:
                last = piece[-1:].copy()
            pos += piece.size
        if hasher is not None:
            got = hasher.hexdigest()
            if got != p.digest_hex:
                raise reject(
                    "digest",
                    f"object {info.name!r} part {p.name!r}",
                    offset=p.offset,
                    field=f"{p.digest_algo} digest",
                    expected=p.digest_hex,
                    got=got,
                )
        if types and info.layout == DENSE:
            check_type_data(info, p, last, info.numel, pos - last.size)

    def _typed(
        self, info: ObjectInfo, role: str, count: int, shape: tuple[int, ...] | None, copy: bool
    ) -> np.ndarray:
        """Decode part ``role`` as its logical type (``count`` logical elements)."""
        p = self._part(info, role)
        what = f"object {info.name!r} part {role!r}"
        if p.type is not None and p.type not in LOGICAL:
            raise reject(
                "unsupported",
                what,
                field="type",
                detail="unknown logical type; use stored() for the raw bytes",
                got=p.type,
            )
        raw = self.decoded(info.name, role)
        self._checked(info, p, raw, count)
        lt = LOGICAL.get(p.type) if p.type else None
        dt = p.np_dtype if lt is None else lt.np_dtype
        shp = (count,) if shape is None else shape
        if lt is not None and lt.packed4:
            out = empty(count, np.uint8, fmt=FMT, what=what, offset=p.offset)
            out[0::2] = raw[: (count + 1) // 2] & 0x0F
            out[1::2] = raw[: count // 2] >> 4
            return out.view(dt).reshape(shp)
        if count == 0:
            return np.empty(shp, dt)
        arr = raw.view(dt).reshape(shp)
        if copy and p.encoding is None:
            arr = arr.copy()
        return arr

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
        coalesced into one request."""
        infos = [self.info(n) for n in names]
        self._mf.prefetch(
            [(p.offset, p.length) for i in infos for p in i.parts.values() if p.shard is None]
        )
        try:
            return {i.name: self.read(i.name, copy=copy) for i in infos}
        finally:
            self._mf.release()

    def read_all(self, *, copy: bool | None = None) -> dict[str, Any]:
        """Every object, in manifest order."""
        return self.read_many(list(self._infos), copy=copy)

    def _read_sparse(self, info: ObjectInfo) -> SparseTensor:
        shape = info.shape
        what = f"object {info.name!r}"
        if self._SPARSE[info.layout] == "csr":
            ind_p = info.parts["indices"]
            nnz = ind_p.decoded_size // ind_p.np_dtype.itemsize
            indices = self._typed(info, "indices", nnz, None, False)
            indptr = self._typed(info, "indptr", shape[0] + 1, None, False)
            values = self._typed(info, "values", nnz, None, True)
            _check_csr(what, info, indptr, indices, nnz)
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
        _check_coo(what, info, coords)
        return SparseTensor("coo", shape, np.array(values), coords=coords)

    # -- verification ---------------------------------------------------------------------------
    def verify(self) -> Report:
        """Check every part (decode, digest, type data rules, sparse structure), every shard's
        size and digest, and that padding is zero."""
        report = Report(FMT, self._mf.path or "<buffer>")
        return check_v2(self, report)


def _check_csr(
    what: str, info: ObjectInfo, indptr: np.ndarray, indices: np.ndarray, nnz: int
) -> None:
    rows, cols = info.shape
    ptr = indptr.astype(np.uint64)
    if int(ptr[0]) != 0:
        raise reject("layout-data", what, field="indptr[0]", expected=0, got=int(ptr[0]))
    if rows and np.any(ptr[1:] < ptr[:-1]):
        bad = int(np.argmax(ptr[1:] < ptr[:-1]))
        raise reject("layout-data", what, field="indptr", detail=f"decreases at row {bad}")
    if int(ptr[-1]) != nnz:
        raise reject("layout-data", what, field="indptr[R]", expected=nnz, got=int(ptr[-1]))
    if nnz:
        idx = indices.astype(np.uint64)
        if int(idx.max()) >= cols:
            raise reject(
                "layout-data",
                what,
                field="indices",
                detail="column index out of range",
                expected=f"< {cols}",
                got=int(idx.max()),
            )
        # strictly increasing within each row: a step that is not a row start must grow
        if nnz > 1:
            step_ok = idx[1:] > idx[:-1]
            starts = np.zeros(nnz, dtype=bool)
            starts[ptr[:-1][ptr[:-1] < nnz].astype(np.intp)] = True
            bad_step = ~step_ok & ~starts[1:]
            if np.any(bad_step):
                i = int(np.argmax(bad_step)) + 1
                raise reject(
                    "layout-data",
                    what,
                    field="indices",
                    detail=f"not strictly increasing within a row at position {i}",
                )


def _check_coo(what: str, info: ObjectInfo, coords: np.ndarray) -> None:
    shape = info.shape
    if coords.shape[1] == 0:
        return
    top = coords.max(axis=1)
    for d, (m, n) in enumerate(zip(top.tolist(), shape, strict=True)):
        if m >= n:
            raise reject(
                "layout-data",
                what,
                field=f"coords[{d}]",
                detail="index out of range",
                expected=f"< {n}",
                got=m,
            )
    flat = (
        np.ravel_multi_index(tuple(coords.astype(np.intp)), shape)
        if all(s < (1 << 62) for s in shape) and np.prod([float(s) for s in shape]) < 2**62
        else None
    )
    if flat is not None:
        uniq = np.unique(flat)
        if uniq.size != flat.size:
            raise reject("layout-data", what, field="coords", detail="duplicate coordinates")
    else:
        view = np.ascontiguousarray(coords.T).view([("", coords.dtype)] * coords.shape[0])
        if np.unique(view).size != coords.shape[1]:
            raise reject("layout-data", what, field="coords", detail="duplicate coordinates")


def check_v2(reader: V2Reader, report: Report) -> Report:
    """Every content check on an open v2 reader, as findings in ``report``."""
    reader._verified.clear()
    report.summary["generation"] = "v2"
    report.summary["tensors"] = len(reader)
    report.summary["file size"] = reader.size
    if reader.data_shard:
        report.add("file", OK, "data shard (no manifest)")
    for info in reader.infos():
        obj = f"tensor {info.name!r}"
        try:
            for role in info.parts:
                p = info.parts[role]
                if p.type is not None and p.type not in LOGICAL:
                    report.add(
                        obj,
                        WARNING,
                        f"part {role!r}: unknown logical type {p.type!r}; only its digest checked",
                    )
                if p.encoding is not None and p.encoding not in reader._ENCODINGS:
                    report.add(
                        obj, WARNING, f"part {role!r}: unknown encoding {p.encoding!r}; not decoded"
                    )
                    continue
                if p.type is None or p.type in LOGICAL:
                    reader.verify_part(info.name, role)
                elif p.digest is not None:
                    reader._scan_part(info, p, types=False)
            if info.layout in reader._SPARSE:
                reader._read_sparse(info)
            sums = info.checksum or "no digest"
            report.add(
                obj,
                OK,
                f"{info.dtype} {list(info.shape)} {info.layout} {info.encoding}, {sums}",
                offset=info.offset,
            )
        except TenfoldError as exc:
            report.add_error(exc, obj, offset=info.offset)
    for name in reader.shards:
        try:
            mf = reader._shard(name)
            reader._check_shard_digest(name, mf)
            report.add(f"shard {name!r}", OK, f"{reader.shard_path(name)}: size and digest")
        except FileNotFoundError as exc:
            report.add(f"shard {name!r}", ERROR, f"not found: {exc.filename}")
        except TenfoldError as exc:
            report.add_error(exc, f"shard {name!r}")
    _padding(reader, report)
    return report


def _padding(reader: V2Reader, report: Report) -> None:
    from ..._kernels import load as _load_kernel

    scan = _load_kernel("scan")
    spans = [(0, 8)]
    for info in reader.infos():
        spans += [(p.offset, p.offset + p.length) for p in info.parts.values() if p.shard is None]
    if reader.manifest_blob[1]:
        spans.append((reader.manifest_blob[0], sum(reader.manifest_blob)))
    spans.append((reader._tail_start, reader.size))
    spans.sort()
    buf = reader.stored_bytes()
    pos = 0
    for start, end in spans:
        if start > pos:
            gap = buf[pos:start]
            bad = scan.first_nonzero(gap)
            if bad >= 0:
                report.add(
                    "padding",
                    WARNING,
                    f"non-zero byte {int(gap[bad]):#04x} outside every blob "
                    "(padding or an unreferenced older generation)",
                    offset=pos + bad,
                )
                return
        pos = max(pos, end)
