"""zTensor v2 (spec Draft 4, what ztensor 2.x writes): constants, rule names, manifest checks.

::

    offset 0          8 bytes   magic 89 5A 54 32 0D 0A 1A 0A
    offset 4096*k     blobs     tensor parts and the manifest blob (zero padding between)
    EOF-40            40 bytes  footer: manifest_offset u64, manifest_length u64,
                                manifest_hash u64 (XXH3-64 of the manifest), version u32 (2),
                                reserved u32, magic

The manifest is deterministic CBOR: ``{"objects": {name: {"shape", "layout", "parts":
{role: {"dtype", "type"?, "blob": [offset, length], "shard"?, "encoding"?,
"decoded_length"?, "digest"?}}, "attributes"?}}, "shards"?, "attributes"?}``.

Every refusal names a rule (the ``[rule]`` at the end of the message, and ``exc.rule``).
:data:`REFERENCE_RULES` maps the names ztensor 2.1.2's conformance corpus uses to ours.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from ... import _kernels
from ...core.dtypes import BFLOAT16
from ...errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
)
from . import _dcbor
from ._spec import MAGIC_V2, E

FMT = "zt"
MAGIC = MAGIC_V2
FOOTER_SIZE = 40
MIN_FILE = 8 + FOOTER_SIZE
VERSION = 2
ALIGN = 4096
CANONICAL_ALIGN = 65536
MAX_MANIFEST = 1 << 30
MAX_RANK = 64
MAX_NAME_BYTES = 1024
U64 = (1 << 64) - 1

#: ztensor 2.1.2's rule names (its corpus ``cases.json``) -> (tenfold rule, exception class).
REFERENCE_RULES: dict[str, tuple[str, type[TenfoldError]]] = {
    "FileTooSmall": ("file-too-small", TruncatedError),
    "HeaderMagic": ("header-magic", FormatError),
    "FooterMagic": ("footer-magic", FormatError),
    "Version": ("footer-version", UnsupportedError),
    "ManifestTooLarge": ("manifest-too-large", LimitError),
    "ManifestBounds": ("manifest-bounds", FormatError),
    "ManifestHash": ("manifest-hash", IntegrityError),
    "CborSyntax": ("cbor-syntax", FormatError),
    "CborDeterminism": ("cbor-deterministic", FormatError),
    "CborDuplicateKey": ("cbor-duplicate-key", FormatError),
    "CborDepth": ("cbor-depth", FormatError),
    "Schema": ("schema", FormatError),
    "Name": ("name", FormatError),
    "Shape": ("shape", FormatError),
    "BlobAlignment": ("blob-alignment", FormatError),
    "BlobBounds": ("blob-bounds", FormatError),
    "BlobOverlap": ("blob-overlap", FormatError),
    "ShardName": ("shard-name", FormatError),
    "ShardRef": ("shard-ref", FormatError),
    "DenseSize": ("dense-size", FormatError),
    "LayoutRule": ("layout-rule", FormatError),
    "LayoutData": ("layout-data", FormatError),
    "Digest": ("digest", IntegrityError),
    "Unsupported": ("unsupported", UnsupportedError),
}
_CLASS = {rule: cls for rule, cls in REFERENCE_RULES.values()}
_CLASS["shard-file"] = FormatError
_CLASS["encoding-data"] = IntegrityError


def reject(
    rule: str,
    what: str,
    *,
    offset: int | None = None,
    field: str | None = None,
    detail: str | None = None,
    expected: object = None,
    got: object = None,
    cls: type[TenfoldError] | None = None,
) -> TenfoldError:
    """The exception for a broken ``rule`` (raise it); its message ends with ``[rule]``."""
    return E(
        cls or _CLASS[rule],
        what,
        offset=offset,
        field=field,
        detail=detail,
        expected=expected,
        got=got,
        rule=rule,
    )


# -- type system ------------------------------------------------------------------------------
#: Storage types: name -> little-endian NumPy dtype.
DTYPES: dict[str, np.dtype] = {
    "f64": np.dtype("<f8"),
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "bf16": BFLOAT16,
    "i64": np.dtype("<i8"),
    "i32": np.dtype("<i4"),
    "i16": np.dtype("<i2"),
    "i8": np.dtype("i1"),
    "u64": np.dtype("<u8"),
    "u32": np.dtype("<u4"),
    "u16": np.dtype("<u2"),
    "u8": np.dtype("u1"),
}


@dataclasses.dataclass(frozen=True)
class LogicalType:
    """A registered logical type: its storage dtype, decoded NumPy dtype and size function."""

    name: str
    dtype: str
    np_dtype: np.dtype
    ratio: int = 1  # storage elements per logical element (complex: 2)
    packed4: bool = False  # two elements per byte, low nibble first

    def size(self, n: int) -> int:
        if self.packed4:
            return (n + 1) // 2
        return n * self.ratio * DTYPES[self.dtype].itemsize


LOGICAL: dict[str, LogicalType] = {
    t.name: t
    for t in (
        LogicalType("bool", "u8", np.dtype("?")),
        LogicalType("f8_e4m3fn", "u8", np.dtype(ml_dtypes.float8_e4m3fn)),
        LogicalType("f8_e5m2", "u8", np.dtype(ml_dtypes.float8_e5m2)),
        LogicalType("f8_e4m3fnuz", "u8", np.dtype(ml_dtypes.float8_e4m3fnuz)),
        LogicalType("f8_e5m2fnuz", "u8", np.dtype(ml_dtypes.float8_e5m2fnuz)),
        LogicalType("f8_e8m0", "u8", np.dtype(ml_dtypes.float8_e8m0fnu)),
        LogicalType("f4_e2m1", "u8", np.dtype(ml_dtypes.float4_e2m1fn), packed4=True),
        LogicalType("complex64", "f32", np.dtype("<c8"), ratio=2),
        LogicalType("complex128", "f64", np.dtype("<c16"), ratio=2),
    )
}

DENSE = "dense"
CSR = "zt.sparse_csr/1"
COO = "zt.sparse_coo/1"
MX = "zt.mx/1"
QUANT = "zt.quant_group/1"
ZSTD_SEEKABLE = "zt.zstd-seekable/1"
KNOWN_LAYOUTS = (DENSE, CSR, COO, MX, QUANT)
KNOWN_ENCODINGS = (ZSTD_SEEKABLE,)
DIGESTS = {"xxh3": 16, "sha256": 64}

_DIGEST = re.compile(r"([a-z0-9][a-z0-9._-]*):([0-9a-f]+)\Z")
_SHARD_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}\Z")


def size_of(dtype: str, ltype: str | None, n: int) -> int | None:
    """Decoded bytes of ``n`` elements, or None for an unknown logical type."""
    if ltype is None:
        return n * DTYPES[dtype].itemsize
    t = LOGICAL.get(ltype)
    return None if t is None else t.size(n)


def check_shard_name(name: object, what: str = "shard table") -> str:
    """Refuse a shard name outside ``[A-Za-z0-9._-]{1,64}`` or starting with ``.``."""
    if not isinstance(name, str):
        raise reject(
            "schema", what, field="shard name", detail="not a text string", got=repr(name)[:60]
        )
    if not _SHARD_NAME.match(name) or len(name.encode()) > 64:
        raise reject(
            "shard-name",
            what,
            field="shard name",
            detail="must be 1-64 of A-Z a-z 0-9 . _ - and not start with '.'",
            got=name[:80],
        )
    return name


# -- records ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class PartInfo:
    """One part of an object: its storage type, logical type and where its bytes are."""

    name: str
    dtype: str
    type: str | None
    offset: int
    length: int
    shard: str | None = None
    encoding: str | None = None
    decoded_length: int | None = None
    digest: str | None = None

    @property
    def np_dtype(self) -> np.dtype:
        """Storage dtype (little-endian)."""
        return DTYPES[self.dtype]

    @property
    def decoded_size(self) -> int:
        return self.length if self.encoding is None else self.decoded_length  # type: ignore[return-value]

    @property
    def digest_algo(self) -> str | None:
        return None if self.digest is None else self.digest.split(":", 1)[0]

    @property
    def digest_hex(self) -> str | None:
        return None if self.digest is None else self.digest.split(":", 1)[1]

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"dtype": self.dtype}
        if self.type is not None:
            d["type"] = self.type
        d["blob"] = [self.offset, self.length]
        if self.shard is not None:
            d["shard"] = self.shard
        if self.encoding is not None:
            d["encoding"] = self.encoding
            d["decoded_length"] = self.decoded_length
        if self.digest is not None:
            d["digest"] = self.digest
        return d


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectInfo:
    """Everything the manifest says about one object (tensor).

    ``dtype`` and ``np_dtype`` describe what reading the object gives: for a dense object the
    logical type (``"bool"``, ``"f8_e4m3fn"``) or storage type; for sparse layouts the values'.
    """

    name: str
    shape: tuple[int, ...]
    layout: str
    parts: Mapping[str, PartInfo]
    attributes: Mapping[str, Any] | None
    generation: str = "v2"

    @property
    def main_part(self) -> PartInfo:
        return self.parts.get("data") or self.parts.get("values") or next(iter(self.parts.values()))

    @property
    def dtype(self) -> str:
        p = self.main_part
        return p.type or p.dtype

    @property
    def np_dtype(self) -> np.dtype:
        p = self.main_part
        if p.type is None:
            return p.np_dtype
        t = LOGICAL.get(p.type)
        return p.np_dtype if t is None else t.np_dtype

    @property
    def encoding(self) -> str:
        encs = sorted({p.encoding or "raw" for p in self.parts.values()})
        return ",".join(encs)

    @property
    def offset(self) -> int:
        return self.main_part.offset

    @property
    def size(self) -> int:
        return sum(p.length for p in self.parts.values())

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return sum(p.decoded_size for p in self.parts.values())

    @property
    def checksum(self) -> str | None:
        """The digests of the parts, ``role=algo:hex`` joined by spaces (None if none)."""
        ds = [
            (p.digest if len(self.parts) == 1 else f"{r}={p.digest}")
            for r, p in self.parts.items()
            if p.digest
        ]
        return " ".join(ds) if ds else None

    @property
    def zero_copy(self) -> bool:
        """True when reading gives a view of the file (dense, raw, a byte-exact dtype)."""
        if self.layout != DENSE:
            return False
        p = self.parts["data"]
        if p.encoding is not None or p.shard is not None:
            return False
        return p.type is None or (p.type in LOGICAL and not LOGICAL[p.type].packed4)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "generation": self.generation,
            "shape": self.shape,
            "layout": self.layout,
            "dtype": self.dtype,
            "encoding": self.encoding,
            "parts": {r: p.as_dict() for r, p in self.parts.items()},
        }
        if self.attributes is not None:
            d["attributes"] = dict(self.attributes)
        return d


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    name: str
    size: int
    digest: str


# -- manifest validation ------------------------------------------------------------------------
def _u64(v: object) -> bool:
    return type(v) is int and 0 <= v <= U64


def check_name(name: object, what: str, field: str) -> str:
    """Text, non-empty, <= 1024 UTF-8 bytes, no NUL (spec §3.5)."""
    if not isinstance(name, str):
        raise reject("schema", what, field=field, detail="not a text string", got=repr(name)[:60])
    if not name:
        raise reject("name", what, field=field, detail="empty name")
    if "\x00" in name:
        raise reject("name", what, field=field, detail="contains U+0000", got=name[:80])
    n = len(name.encode("utf-8"))
    if n > MAX_NAME_BYTES:
        raise reject(
            "name",
            what,
            field=field,
            detail="too long",
            expected=f"<= {MAX_NAME_BYTES} bytes",
            got=n,
        )
    return name


def _attributes(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise reject(
            "schema", what, field="attributes", detail="not a map", got=type(value).__name__
        )
    for k in value:
        check_name(k, what, "attribute key")
    return value


def _digest(value: object, what: str) -> str:
    m = _DIGEST.match(value) if isinstance(value, str) else None
    if m is None:
        raise reject(
            "schema",
            what,
            field="digest",
            detail="not '<algorithm>:<lowercase hex>'",
            got=repr(value)[:80],
        )
    want = DIGESTS.get(m.group(1))
    if want is not None and len(m.group(2)) != want:
        raise reject(
            "schema",
            what,
            field="digest",
            detail=f"{m.group(1)} needs {want} hex digits",
            got=value,
        )
    return value  # type: ignore[return-value]


@dataclasses.dataclass
class Manifest:
    objects: ObjectTable
    shards: dict[str, ShardInfo] | None
    attributes: Mapping[str, Any] | None


#: ``ztplan.scan_table``, looked up once (``_kernels.load`` chooses once per process anyway)
scan_table = _kernels.load("ztplan").scan_table


def decode_manifest(
    raw: bytes, *, file_size: int, manifest: tuple[int, int], moff: int, max_objects: int
) -> Manifest:
    """Decode the manifest bytes ``raw`` (at ``moff``) and validate them (spec §3.6 items 2-6).

    The commonest objects (plain dense ones) are recognised, checked and recorded by the
    ``ztplan`` kernel while it decodes; every other object is decoded in full and checked by
    :func:`_object` and :func:`check_layout`, which name the rule an object breaks.
    """
    try:
        scan = scan_table(
            raw,
            _dcbor.MAX_DEPTH,
            file_size - FOOTER_SIZE,
            ALIGN,
            MAX_RANK,
            MAX_NAME_BYTES,
            DTYPES,
            DIGESTS,
        )
    except _dcbor.CborReject as exc:
        raise reject(exc.rule, "manifest", offset=moff + exc.offset, detail=exc.detail) from None
    if scan is None:  # not a map, or no "objects" map: the generic checks say which
        return parse_manifest(
            _dcbor.decode(raw),
            file_size=file_size,
            manifest=manifest,
            moff=moff,
            max_objects=max_objects,
        )
    return finish_scan(
        scan, file_size=file_size, manifest=manifest, moff=moff, max_objects=max_objects
    )


def finish_scan(
    scan: tuple[Any, dict[Any, Any], dict[Any, Any], bool, int, int],
    *,
    file_size: int,
    manifest: tuple[int, int],
    moff: int,
    max_objects: int,
) -> Manifest:
    """The checks after ``ztplan.scan_table`` (its result ``scan``), as in
    :func:`decode_manifest`."""
    table, others, rest, in_order, lo, hi = scan
    return _validate(
        rest,
        PlanMap(table),
        others,
        blobs_disjoint(in_order, lo, hi, manifest),
        file_size=file_size,
        manifest=manifest,
        moff=moff,
        max_objects=max_objects,
    )


def blobs_disjoint(in_order: bool, lo: int, hi: int, manifest: tuple[int, int]) -> bool:
    """True when the scan found the plans' blobs in order (so not overlapping each other) and
    the manifest blob outside ``[lo, hi)``, their span (``lo < 0``: no blob)."""
    return in_order and (lo < 0 or not manifest[1] or manifest[0] >= hi or sum(manifest) <= lo)


def parse_manifest(
    root: object, *, file_size: int, manifest: tuple[int, int], moff: int, max_objects: int
) -> Manifest:
    """Validate a decoded manifest (spec §3.6 items 3-6) and build the records."""
    where = "manifest"
    if not isinstance(root, dict):
        raise reject(
            "schema", where, offset=moff, detail="root is not a map", got=type(root).__name__
        )
    if "objects" not in root:
        raise reject("schema", where, offset=moff, field="objects", detail="missing")
    objects = root["objects"]
    if not isinstance(objects, dict):
        raise reject("schema", where, offset=moff, field="objects", detail="not a map")
    return _validate(
        root,
        {},
        objects,
        False,
        file_size=file_size,
        manifest=manifest,
        moff=moff,
        max_objects=max_objects,
    )


def _validate(
    root: dict[Any, Any],
    plans: Mapping[str, DensePlan],
    others: dict[Any, Any],
    disjoint: bool,
    *,
    file_size: int,
    manifest: tuple[int, int],
    moff: int,
    max_objects: int,
) -> Manifest:
    """The checks after decoding: ``plans`` are objects ``ztplan`` accepted, ``others`` the
    objects left to check here (in manifest order); ``disjoint`` says that every blob is known
    not to overlap another (so the overlap check is skipped)."""
    where = "manifest"
    count = len(plans) + len(others)
    if count > max_objects:
        raise reject(
            "schema",
            where,
            offset=moff,
            field="objects",
            detail="too many objects",
            expected=f"<= {max_objects}",
            got=count,
            cls=LimitError,
        )
    attributes = None
    if "attributes" in root:
        attributes = _attributes(root["attributes"], "file attributes")
    shards: dict[str, ShardInfo] | None = None
    if "shards" in root:
        table = root["shards"]
        if not isinstance(table, dict):
            raise reject("schema", "shard table", offset=moff, detail="not a map")
        shards = {}
        for key, entry in table.items():
            name = check_shard_name(key)
            w = f"shard {name!r}"
            if not isinstance(entry, dict):
                raise reject("schema", w, detail="entry is not a map")
            size: Any = entry.get("size")
            if not _u64(size):
                raise reject(
                    "schema", w, field="size", detail="missing or not a u64", got=repr(size)[:40]
                )
            if "digest" not in entry:
                raise reject("schema", w, field="digest", detail="missing")
            shards[name] = ShardInfo(name, size, _digest(entry["digest"], w))
    built: dict[str, ObjectInfo] = {}
    for oname, obj in others.items():
        built[check_name(oname, "object", "object name")] = _object(oname, obj, shards, file_size)
    if not disjoint and _overlapping(plans, built, manifest):
        _overlaps(ObjectTable(plans, built), manifest, shards)  # raises, naming the culprits
    for info in built.values():
        check_layout(info)
    return Manifest(ObjectTable(plans, built), shards, attributes)


#: What :func:`plan_info` and the reader need of a plain dense object (see ``_kernels.ztplan``):
#: ``(offset, length, dtype, np_dtype, shape, digest or None)``.
DensePlan = tuple[int, int, str, np.dtype, tuple[int, ...], str | None]


class PlanMap(Mapping[str, DensePlan]):
    """Name -> :class:`DensePlan` over a ``ztplan.PlanTable`` (each plan's tuple is built when
    asked for; the reader builds views from ``table`` directly)."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self._index: dict[str, int] = table.index

    def __getitem__(self, name: str) -> DensePlan:
        return self.table.plan(self._index[name])  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        return name in self._index


def plan_info(name: str, plan: DensePlan) -> ObjectInfo:
    """The :class:`ObjectInfo` of a plain dense object accepted by ``ztplan.dense_plans``."""
    offset, length, dtype, _, shape, digest = plan
    part = PartInfo("data", dtype, None, offset, length, digest=digest)
    return ObjectInfo(name, shape, DENSE, {"data": part}, None)


class ObjectTable(Mapping[str, ObjectInfo]):
    """Name -> :class:`ObjectInfo` of a validated manifest, in name order; the records of plain
    dense objects are built on first access from their :class:`DensePlan` (``plans``)."""

    def __init__(
        self,
        plans: Mapping[str, DensePlan],
        built: dict[str, ObjectInfo],
        names: list[str] | None = None,
    ) -> None:
        self.plans = plans
        self._built = built
        if names is None:  # else: given, sorted, by a caller that has them
            names = sorted([*plans, *built]) if built else sorted(plans)
        self._names = names

    def __getitem__(self, name: str) -> ObjectInfo:
        info = self._built.get(name)
        if info is None:
            info = self._built[name] = plan_info(name, self.plans[name])
        return info

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self.plans or name in self._built


def _object(
    name: str, obj: object, shards: dict[str, ShardInfo] | None, file_size: int
) -> ObjectInfo:
    what = f"object {name!r}"
    if not isinstance(obj, dict):
        raise reject("schema", what, detail="not a map", got=type(obj).__name__)
    shape = obj.get("shape")
    if not isinstance(shape, list) or not all(_u64(d) for d in shape):
        raise reject(
            "schema",
            what,
            field="shape",
            detail="missing or not an array of u64",
            got=repr(shape)[:80],
        )
    if len(shape) > MAX_RANK:
        raise reject(
            "shape", what, field="rank", detail="above 64", expected="<= 64", got=len(shape)
        )
    if math.prod(shape) > U64:
        raise reject("shape", what, field="shape", detail="element count overflows u64", got=shape)
    layout = obj.get("layout")
    if not isinstance(layout, str):
        raise reject(
            "schema", what, field="layout", detail="missing or not text", got=repr(layout)[:60]
        )
    parts_in = obj.get("parts")
    if not isinstance(parts_in, dict) or not parts_in:
        raise reject("schema", what, field="parts", detail="missing, not a map, or empty")
    attributes = None
    if "attributes" in obj:
        attributes = _attributes(obj["attributes"], what)
    parts: dict[str, PartInfo] = {}
    for role, p in parts_in.items():
        check_name(role, what, "part name")
        parts[role] = _part(name, role, p, shards, file_size)
    return ObjectInfo(name, tuple(shape), layout, parts, attributes)


def _part(
    oname: str, role: str, p: object, shards: dict[str, ShardInfo] | None, file_size: int
) -> PartInfo:
    what = f"object {oname!r} part {role!r}"
    if not isinstance(p, dict):
        raise reject("schema", what, detail="not a map", got=type(p).__name__)
    dtype, ltype = _part_types(what, p)
    offset, length, shard = _part_blob(what, p, shards)
    encoding, decoded = _part_encoding(what, p)
    digest = None
    if "digest" in p:
        digest = _digest(p["digest"], what)
    _check_placement(what, offset, length, shard, shards, file_size)
    return PartInfo(role, dtype, ltype, offset, length, shard, encoding, decoded, digest)


def _part_types(what: str, p: dict[Any, Any]) -> tuple[str, str | None]:
    """A part's storage type (``dtype``) and logical type (``type``, or None)."""
    dtype = p.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise reject(
            "schema",
            what,
            field="dtype",
            detail="unknown storage type",
            expected=" | ".join(DTYPES),
            got=repr(dtype)[:40],
        )
    ltype = p.get("type")
    if ltype is not None or "type" in p:
        if not isinstance(ltype, str):
            raise reject("schema", what, field="type", detail="not text", got=repr(ltype)[:40])
        reg = LOGICAL.get(ltype)
        if reg is not None and reg.dtype != dtype:
            raise reject(
                "schema",
                what,
                field="type",
                detail=f"{ltype} is stored as {reg.dtype}",
                expected=reg.dtype,
                got=dtype,
            )
    return dtype, ltype


def _part_blob(
    what: str, p: dict[Any, Any], shards: dict[str, ShardInfo] | None
) -> tuple[int, int, str | None]:
    """A part's ``[offset, length]`` and the shard holding it (None: this file)."""
    blob = p.get("blob")
    if not isinstance(blob, list) or len(blob) != 2 or not all(_u64(v) for v in blob):
        raise reject(
            "schema", what, field="blob", detail="not [u64 offset, u64 length]", got=repr(blob)[:60]
        )
    offset, length = blob
    shard = None
    if "shard" in p:
        shard = p["shard"]
        if not isinstance(shard, str):
            raise reject("schema", what, field="shard", detail="not text", got=repr(shard)[:40])
        if shards is None or shard not in shards:
            raise reject(
                "shard-ref", what, field="shard", detail="not in the shard table", got=shard[:80]
            )
    return offset, length, shard


def _part_encoding(what: str, p: dict[Any, Any]) -> tuple[str | None, int | None]:
    """A part's ``encoding`` and ``decoded_length`` (both None for a raw part)."""
    if "encoding" not in p:
        if "decoded_length" in p:
            raise reject("schema", what, field="decoded_length", detail="present without encoding")
        return None, None
    encoding = p["encoding"]
    if not isinstance(encoding, str):
        raise reject("schema", what, field="encoding", detail="not text")
    decoded = p.get("decoded_length")
    if not _u64(decoded):
        raise reject(
            "schema",
            what,
            field="decoded_length",
            detail="required (a u64) when encoding is present",
            got=decoded,
        )
    return encoding, decoded


def _check_placement(
    what: str,
    offset: int,
    length: int,
    shard: str | None,
    shards: dict[str, ShardInfo] | None,
    file_size: int,
) -> None:
    """A blob starts at a multiple of 4096 (not in the header) and ends before the footer of
    the file (or shard) holding it."""
    if offset % ALIGN or offset < ALIGN:
        raise reject(
            "blob-alignment",
            what,
            offset=offset,
            field="blob offset",
            detail="not a multiple of 4096 at or after 4096",
            got=offset,
        )
    region = (shards[shard].size if shard is not None else file_size) - FOOTER_SIZE  # type: ignore[index]
    if offset + length > region:
        raise reject(
            "blob-bounds",
            what,
            offset=offset,
            field="blob",
            detail="runs into the footer or past the end of "
            + (f"shard {shard!r}" if shard else "the file"),
            expected=f"end <= {region}",
            got=offset + length,
        )


def _overlapping(
    plans: Mapping[str, DensePlan], built: dict[str, ObjectInfo], manifest: tuple[int, int]
) -> bool:
    """True when two blobs of one file partly overlap (:func:`_overlaps` then names them)."""
    groups: dict[str | None, list[tuple[int, int]]] = {None: []}
    local = groups[None]
    if manifest[1]:
        local.append((manifest[0], manifest[0] + manifest[1]))
    for plan in plans.values():
        if plan[1]:
            local.append((plan[0], plan[0] + plan[1]))
    for o in built.values():
        for p in o.parts.values():
            if p.length:
                groups.setdefault(p.shard, []).append((p.offset, p.offset + p.length))
    for spans in groups.values():
        spans.sort()
        end = start = -1
        for s, e in spans:
            if s < end and not (s == start and e == end):
                return True
            if e > end:
                end, start = e, s
    return False


def _overlaps(objects: Mapping[str, ObjectInfo], manifest: tuple[int, int], shards: object) -> None:
    groups: dict[str | None, list[tuple[int, int, str]]] = {None: []}
    if manifest[1]:
        groups[None].append((manifest[0], manifest[0] + manifest[1], "the manifest"))
    for o in objects.values():
        for r, p in o.parts.items():
            if p.length:
                groups.setdefault(p.shard, []).append(
                    (p.offset, p.offset + p.length, f"object {o.name!r} part {r!r}")
                )
    for shard, spans in groups.items():
        spans.sort()
        end, who, start = -1, "", -1
        for s, e, w in spans:
            if s < end and not (s == start and e == end):
                where = f" in shard {shard!r}" if shard else ""
                raise reject(
                    "blob-overlap",
                    w,
                    offset=s,
                    field="blob",
                    detail=f"partly overlaps {who}{where}",
                    expected=f"start >= {end} or identical",
                    got=[s, e - s],
                )
            if e > end:
                end, who, start = e, w, s


# -- layout rules (metadata, at open) -----------------------------------------------------------
def _need(cond: bool, info: ObjectInfo, detail: str, **kw: Any) -> None:
    if not cond:
        raise reject(
            "layout-rule", f"object {info.name!r}", detail=f"{info.layout}: {detail}", **kw
        )


def _int_only(p: PartInfo) -> bool:
    return p.type is None and p.dtype in ("u32", "u64")


def check_layout(info: ObjectInfo) -> None:
    """The metadata rules of the object's layout (unknown layouts are left structural)."""
    check = _LAYOUT_CHECKS.get(info.layout)
    if check is not None:
        check(info)


def _check_dense(info: ObjectInfo) -> None:
    parts = info.parts
    _need(set(parts) == {"data"}, info, "exactly one part named 'data'", got=sorted(parts))
    p = parts["data"]
    want = size_of(p.dtype, p.type, info.numel)
    if want is not None and want != p.decoded_size:
        raise reject(
            "dense-size",
            f"object {info.name!r}",
            offset=p.offset,
            field="decoded size",
            detail="does not match shape and type",
            expected=want,
            got=p.decoded_size,
        )


def _values_size(info: ObjectInfo, val: PartInfo, nnz: int) -> None:
    """A sparse object's ``values`` part holds ``nnz`` elements of its type."""
    want = size_of(val.dtype, val.type, nnz)
    _need(
        want is None or want == val.decoded_size,
        info,
        "values size",
        expected=want,
        got=val.decoded_size,
    )


def _check_csr(info: ObjectInfo) -> None:
    parts, shape = info.parts, info.shape
    _need(len(shape) == 2, info, "rank must be 2", got=len(shape))
    _need(
        set(parts) == {"values", "indices", "indptr"},
        info,
        "parts must be values, indices, indptr",
        got=sorted(parts),
    )
    ind, ptr, val = parts["indices"], parts["indptr"], parts["values"]
    _need(_int_only(ind), info, "indices must be plain u32 or u64", got=ind.dtype)
    _need(
        ptr.type is None and ptr.dtype == ind.dtype,
        info,
        "indptr must have the dtype of indices",
        expected=ind.dtype,
        got=ptr.dtype,
    )
    w = ind.np_dtype.itemsize
    _need(ind.decoded_size % w == 0, info, "indices size not a whole number of elements")
    nnz = ind.decoded_size // w
    _need(
        ptr.decoded_size == (shape[0] + 1) * w,
        info,
        "indptr size",
        expected=(shape[0] + 1) * w,
        got=ptr.decoded_size,
    )
    _values_size(info, val, nnz)


def _check_coo(info: ObjectInfo) -> None:
    parts, shape = info.parts, info.shape
    _need(len(shape) >= 1, info, "rank must be at least 1")
    _need(
        set(parts) == {"values", "coords"},
        info,
        "parts must be values, coords",
        got=sorted(parts),
    )
    c, val = parts["coords"], parts["values"]
    _need(_int_only(c), info, "coords must be plain u32 or u64", got=c.dtype)
    w = c.np_dtype.itemsize * len(shape)
    _need(
        c.decoded_size % w == 0,
        info,
        "coords size not a multiple of width x ndim",
        got=c.decoded_size,
    )
    nnz = c.decoded_size // w
    _values_size(info, val, nnz)


def _attr(info: ObjectInfo, key: str) -> Any:
    a = info.attributes or {}
    return a.get(key)


def _check_mx(info: ObjectInfo) -> None:
    parts, shape = info.parts, info.shape
    _need(set(parts) == {"data", "scales"}, info, "parts must be data, scales", got=sorted(parts))
    d, s = parts["data"], parts["scales"]
    _need(s.dtype == "u8" and s.type == "f8_e8m0", info, "scales must be u8 / f8_e8m0")
    _need(
        (d.dtype == "u8" and d.type in ("f4_e2m1", "f8_e4m3fn", "f8_e5m2"))
        or (d.dtype == "i8" and d.type is None),
        info,
        "data type must be f4_e2m1, f8_e4m3fn, f8_e5m2 (u8) or plain i8",
        got=f"{d.dtype}/{d.type}",
    )
    _need(
        _attr(info, "scale_form") == "e8m0_exponent",
        info,
        "attribute scale_form must be 'e8m0_exponent'",
    )
    bs = _attr(info, "block_size")
    _need(type(bs) is int and bs >= 2, info, "attribute block_size must be an int >= 2", got=bs)
    _need(len(shape) >= 1, info, "rank must be at least 1")
    axis = _attr(info, "axis")
    if axis is None:
        axis = len(shape) - 1
    _need(type(axis) is int and 0 <= axis < len(shape), info, "axis out of range", got=axis)
    _need(shape[axis] % bs == 0, info, "block_size must divide shape[axis]", got=[shape[axis], bs])
    n = info.numel
    want = size_of(d.dtype, d.type, n)
    _need(want == d.decoded_size, info, "data size", expected=want, got=d.decoded_size)
    _need(s.decoded_size == n // bs, info, "scales size", expected=n // bs, got=s.decoded_size)


def _check_quant(info: ObjectInfo) -> None:
    zp, word, per = _quant_packing(info)
    _quant_sizes(info, zp, word, per)


def _quant_packing(info: ObjectInfo) -> tuple[dict[Any, Any], str, int]:
    """``zt.quant_group/1``: the zero point, parts, bits and packing attributes and the data
    part's type; returns ``(zero_point, packing.word, packing.per_word)``."""
    parts = info.parts
    zp = _attr(info, "zero_point")
    _need(
        isinstance(zp, dict) and zp.get("form") in ("none", "implied", "tensor"),
        info,
        "attribute zero_point.form must be none, implied or tensor",
    )
    form = zp["form"]  # type: ignore[index]
    want_parts = {"data", "scales"} | ({"zeros"} if form == "tensor" else set())
    _need(set(parts) == want_parts, info, f"parts must be {sorted(want_parts)}", got=sorted(parts))
    bits = _attr(info, "bits")
    _need(
        bits in (2, 3, 4, 5, 6, 8) and type(bits) is int, info, "bits must be 2,3,4,5,6,8", got=bits
    )
    pk = _attr(info, "packing")
    _need(isinstance(pk, dict), info, "attribute packing must be a map")
    word = pk.get("word")  # type: ignore[union-attr]
    _need(word in ("u8", "u16", "u32", "u64"), info, "packing.word", got=word)
    _need(pk.get("order") in ("lsb_first", "msb_first"), info, "packing.order")  # type: ignore[union-attr]
    wbits = 8 * DTYPES[word].itemsize
    _need(wbits % bits == 0, info, "bits must divide the word width")
    per = pk.get("per_word")  # type: ignore[union-attr]
    _need(
        per == wbits // bits and type(per) is int,
        info,
        "packing.per_word",
        expected=wbits // bits,
        got=per,
    )
    d = parts["data"]
    _need(
        d.type is None and d.dtype in (word, "i" + word[1:]),
        info,
        "data dtype must match packing.word",
        expected=word,
        got=d.dtype,
    )
    return zp, word, per  # type: ignore[return-value]


def _quant_sizes(info: ObjectInfo, zp: dict[Any, Any], word: str, per: int) -> None:
    """``zt.quant_group/1``: group size, axis, scale form and every part's size."""
    parts, shape = info.parts, info.shape
    form = zp["form"]
    d = parts["data"]
    gs = _attr(info, "group_size")
    axis = _attr(info, "axis")
    _need(type(gs) is int and gs >= 0, info, "group_size must be a non-negative int", got=gs)
    _need(type(axis) is int and 0 <= axis < len(shape), info, "axis out of range", got=axis)
    along = shape[axis]
    _need(gs == 0 or along % gs == 0, info, "group_size must divide shape[axis]")
    groups = along if gs == 0 else along // gs
    lanes = info.numel // along if along else 0
    sf = _attr(info, "scale_form")
    s = parts["scales"]
    if sf == "e8m0_exponent":
        _need(s.dtype == "u8" and s.type == "f8_e8m0", info, "scales must be u8 / f8_e8m0")
    else:
        _need(
            sf in ("f32_factors", "f16_factors") and s.dtype in ("f64", "f32", "f16", "bf16"),
            info,
            "scale_form and scales dtype",
            got=[sf, s.dtype],
        )
    wsize = DTYPES[word].itemsize
    _need(
        info.numel % per == 0 and d.decoded_size == info.numel // per * wsize,
        info,
        "data size",
        expected=info.numel // per * wsize,
        got=d.decoded_size,
    )
    _need(
        s.decoded_size == groups * lanes * s.np_dtype.itemsize,
        info,
        "scales size",
        expected=groups * lanes * s.np_dtype.itemsize,
        got=s.decoded_size,
    )
    if form == "implied":
        _need(type(zp.get("value")) is int, info, "zero_point.value required")  # type: ignore[union-attr]
    if form == "tensor":
        z = parts["zeros"]
        zpk = zp.get("packing")  # type: ignore[union-attr]
        if zpk == "plain":
            want = groups * lanes * z.np_dtype.itemsize
        else:
            _need(zpk == "same_as_data", info, "zero_point.packing", got=zpk)
            want = groups * lanes // per * wsize
        _need(z.decoded_size == want, info, "zeros size", expected=want, got=z.decoded_size)


#: layout -> its metadata check (see :func:`check_layout`)
_LAYOUT_CHECKS: dict[str, Any] = {
    DENSE: _check_dense,
    CSR: _check_csr,
    COO: _check_coo,
    MX: _check_mx,
    QUANT: _check_quant,
}


# -- data rules (when decoding or verifying) ------------------------------------------------------
def check_type_data(
    info: ObjectInfo, part: PartInfo, raw: np.ndarray, count: int | None, start: int = 0
) -> None:
    """Logical-type data rules over decoded bytes ``raw`` (bool bytes 0/1, f4 final nibble).

    ``raw`` may be a piece of the part that starts ``start`` bytes in (the final-nibble rule
    is then checked on the last piece, given with ``count``)."""
    if part.type == "bool":
        if raw.size and int(raw.max()) > 1:
            bad = start + int(np.flatnonzero(raw > 1)[0])
            raise reject(
                "layout-data",
                f"object {info.name!r} part {part.name!r}",
                offset=part.offset + bad,
                detail="bool byte is not 0 or 1",
                expected="0 or 1",
                got=int(raw[bad - start]),
            )
    elif part.type == "f4_e2m1" and count is not None and count % 2 and raw.size:
        if int(raw[-1]) >> 4:
            raise reject(
                "layout-data",
                f"object {info.name!r} part {part.name!r}",
                offset=part.offset + start + raw.size - 1,
                detail="final odd f4 nibble is not zero",
                expected="high nibble 0",
                got=f"{int(raw[-1]):#04x}",
            )
