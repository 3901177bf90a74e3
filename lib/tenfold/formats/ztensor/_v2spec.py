"""zTensor v2 (spec Draft 4, what ztensor 2.x writes): constants, rule names, records.

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
The manifest checks are in :mod:`._v2manifest`, the layout and data rules in :mod:`._v2layout`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from ...core.dtypes import BFLOAT16
from ...errors import (
    FormatError,
    IntegrityError,
    LimitError,
    TenfoldError,
    TruncatedError,
    UnsupportedError,
)
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

    # -- the fields every format's info record has (tenfold.core.reader.TensorInfo) ------------
    @property
    def byte_range(self) -> tuple[int, int] | None:
        """``(start, end)`` of a one-part object stored in this file (None otherwise)."""
        if len(self.parts) != 1:
            return None
        p = self.main_part
        return None if p.shard is not None else (p.offset, p.offset + p.length)

    @property
    def extras(self) -> dict[str, Any]:
        """The zTensor fields: generation, layout, parts (``as_dict`` form), attributes."""
        return {
            "generation": self.generation,
            "layout": self.layout,
            "parts": {r: p.as_dict() for r, p in self.parts.items()},
            "attributes": dict(self.attributes or {}),
        }

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


# -- names and the manifest record -------------------------------------------------------------
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


@dataclasses.dataclass
class Manifest:
    objects: ObjectTable
    shards: dict[str, ShardInfo] | None
    attributes: Mapping[str, Any] | None


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
